"""Faulted requests leave nothing behind in the gateway: no objects, no tasks, no sockets.

RSS once climbed over thousands of faulted requests (docs/reliability.md,
"Memory and file descriptors under faults"). Measured (bench/soak.py, and mallinfo2 in the
gateway): that memory was free in malloc, not held by Python objects; malloc_trim gave it
back. This test keeps it that way: after a warm-up, a few hundred requests of every fault
(both dialects, both paths, stream or not) must not grow the count of any kind of live
Python object by anything like one per request, nor the gateway's asyncio tasks, nor its
open sockets. An exception kept alive with its traceback, a response parked in a dict, a
pooled connection never released or a task never awaited would.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import threading
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator

import aiohttp
import pytest
from bench.soak_check import Call

from bench import fault_upstream, soak
from interlingua.config import parse_config
from interlingua.http_pool import HIGH_WATER
from interlingua.server import create_app

from ..live_server import free_port, live_server

pytestmark = pytest.mark.slow  # (~20 s: run by .ci/run with the other slow suites)

#: Kinds of request: every fault on every client x upstream dialect x stream or not.
KINDS = [
    Call(client, upstream, stream, fault)
    for fault in soak.ALL_FAULTS
    for client in soak.DIALECTS
    for upstream in soak.DIALECTS
    for stream in (False, True)
]


@pytest.fixture(scope="module")
def upstream_port() -> Iterator[int]:
    """The fault upstream, serving in a thread of its own."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    port = free_port()
    holder: dict[str, asyncio.AbstractServer] = {}

    async def serve() -> None:
        async def on_connect(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            await fault_upstream.Handler(r, w).serve()

        holder["server"] = await asyncio.start_server(on_connect, "127.0.0.1", port)
        started.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(serve(), loop)
    assert started.wait(10)
    yield port

    async def shutdown() -> None:
        holder["server"].close()
        # Handlers still holding a hung connection: ended, and their sockets closed, here
        # (a socket left to the garbage collector warns in whichever test runs then).
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await holder["server"].wait_closed()

    asyncio.run_coroutine_threadsafe(shutdown(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


async def drive(base: str, rounds: int, kinds: list[Call] = KINDS) -> Counter[str]:
    """Every one of ``kinds`` ``rounds`` times, 64 at a time; their outcomes."""
    limit = asyncio.Semaphore(64)
    async with aiohttp.ClientSession() as session:

        async def one(i: int) -> str:
            async with limit:
                call = kinds[i % len(kinds)]
                outcome, _ = await soak.send(session, base, call, f"m{i}", 15)
                return outcome

        outcomes = await asyncio.gather(*(one(i) for i in range(rounds * len(kinds))))
    return Counter(outcomes)


def live_objects() -> Counter[str]:
    gc.collect()
    return Counter(type(o).__qualname__ for o in gc.get_objects())


def tcp_ports() -> dict[str, tuple[int, int]]:
    """Socket inode -> (local port, remote port) of every TCP socket on the machine."""
    ports: dict[str, tuple[int, int]] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                local, remote, inode = fields[1], fields[2], fields[9]
                ports[inode] = (int(local.rsplit(":", 1)[1], 16), int(remote.rsplit(":", 1)[1], 16))
    return ports


def gateway_sockets(gateway_port: int, upstream_port: int) -> list[tuple[int, int]]:
    """The (local, remote) ports of this process's sockets that are the gateway's own.

    Its clients' connections (local port: the gateway's) and its upstream connections
    (remote port: the fault upstream's). Not the fault upstream's side of them (a held
    connection closes once it sees the gateway's close, on that thread's schedule), nor
    sockets other tests' threads still wind down: those made this count flaky.
    """
    ports = tcp_ports()
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed since the listing
            target = os.readlink(f"/proc/self/fd/{fd}")
            pair = ports.get(target.removeprefix("socket:[").removesuffix("]"))
            if pair and (pair[0] == gateway_port or pair[1] == upstream_port):
                found.append(pair)
    return found


def test_faulted_requests_leave_no_objects_tasks_or_sockets(
    upstream_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    # pytest keeps every captured log record, and an error's record keeps its traceback
    # and so the request's frames: the gateway's expected-fault logs are not captured.
    caplog.set_level(logging.CRITICAL, logger="interlingua")
    config = parse_config(soak.gateway_config(upstream_port, free_port()))
    with live_server(create_app(config)) as base:
        asyncio.run(drive(base, 2))  # pools, caches, weak sets, lazy imports: filled once
        gateway_port = int(base.rsplit(":", 1)[1])

        def sockets_now() -> list[tuple[int, int]]:
            return gateway_sockets(gateway_port, upstream_port)

        before, sockets = live_objects(), len(sockets_now())
        rounds = 5
        outcomes = asyncio.run(drive(base, rounds))
        after = live_objects()
        requests = rounds * len(KINDS)
        assert sum(outcomes.values()) == requests
        # Each request that leaked would leave at least one object of some kind behind;
        # below half of that is settling (a weak set still filling, another test's leftovers).
        grown = {kind: after[kind] - before[kind] for kind in after}
        leaked = {kind: n for kind, n in grown.items() if n >= requests // 2}
        if leaked:
            # A leak grows again with every round; a one-off (objects another test left
            # to a thread still winding down) does not: ask a second round to be sure.
            asyncio.run(drive(base, rounds))
            again = live_objects()
            leaked = {k: n for k, n in leaked.items() if again[k] - after[k] >= requests // 2}
        assert not leaked, f"{leaked} more live objects after {requests} faulted requests"
        # Pooled upstream connections may stay idle (a few); the rest must close, once the
        # gateway has seen the client's closes.
        for _ in range(50):
            if len(sockets_now()) <= sockets + 8:
                break
            time.sleep(0.1)
        left = sockets_now()
        assert len(left) <= sockets + 8, f"{sockets} sockets before, now {left}"


def test_the_unread_bytes_of_a_failed_answer_are_freed_at_once(
    upstream_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    # A failed answer sits in reference cycles (the HTTP parser's callbacks, its error's
    # traceback through our frames) until a full gc pass, which a busy gateway runs
    # rarely: under injected faults, 1 MB error bodies (256 KiB of each buffered when the read timed
    # out) held 740 MB after 3,000 requests. Its buffered bytes must go at once (and so
    # must those a frame in the error's traceback holds). Measured
    # with the collector off, so only what reference counting frees counts as freed.
    caplog.set_level(logging.CRITICAL, logger="interlingua")  # (see above)
    big = [k for k in KINDS if k.fault in ("big500", "bigstall")]
    config = parse_config(soak.gateway_config(upstream_port, free_port()))
    with live_server(create_app(config)) as base:
        asyncio.run(drive(base, 1, big))
        gc.collect()
        gc.disable()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            outcomes = asyncio.run(drive(base, 4, big))
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
            gc.enable()
    requests = 4 * len(big)
    assert outcomes["typed_error"] == requests
    assert held < requests * HIGH_WATER // 4, f"{held / 1e6:.1f} MB held by {requests} errors"
