"""Faulted requests leave nothing behind in the gateway: no objects, no tasks, no sockets.

Issue 8 saw RSS climb over thousands of faulted requests. Measured (bench/soak.py, and
mallinfo2 in the gateway): that memory was free in malloc, not held by Python objects;
malloc_trim gave it back. This test keeps it that way: after a warm-up, a few hundred
requests of every fault (both dialects, both paths, stream or not) must not grow the count
of any kind of live Python object by anything like one per request, nor the gateway's
asyncio tasks, nor its open sockets. An exception kept alive with its traceback, a response
parked in a dict, a pooled connection never released or a task never awaited would.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator

import aiohttp
import pytest
from bench.soak_check import Call

from bench import fault_upstream, soak
from interlingua.config import parse_config
from interlingua.server import create_app

from ..live_server import free_port, live_server

FAULTS = ("500", "big500", "429", "cut", "badjson", "hang", "stall", "refused")
#: Kinds of request: every fault on every client x upstream dialect x stream or not.
KINDS = [
    Call(client, upstream, stream, fault)
    for fault in FAULTS
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
    loop.call_soon_threadsafe(holder["server"].close)
    for task in asyncio.all_tasks(loop):  # handlers still holding a hung connection
        loop.call_soon_threadsafe(task.cancel)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    with contextlib.suppress(RuntimeError):
        loop.close()


async def drive(base: str, rounds: int) -> Counter[str]:
    """Every kind of faulted request ``rounds`` times, 64 at a time; their outcomes."""
    limit = asyncio.Semaphore(64)
    async with aiohttp.ClientSession() as session:

        async def one(i: int) -> str:
            async with limit:
                call = KINDS[i % len(KINDS)]
                outcome, _ = await soak.send(session, base, call, f"m{i}", 15)
                return outcome

        outcomes = await asyncio.gather(*(one(i) for i in range(rounds * len(KINDS))))
    return Counter(outcomes)


def live_objects() -> Counter[str]:
    gc.collect()
    return Counter(type(o).__qualname__ for o in gc.get_objects())


def open_sockets() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed since the listing
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return count


def test_faulted_requests_leave_no_objects_tasks_or_sockets(upstream_port: int) -> None:
    config = parse_config(soak.gateway_config(upstream_port, free_port()))
    with live_server(create_app(config)) as base:
        asyncio.run(drive(base, 1))  # pools, caches, lazy imports: filled once
        before, sockets = live_objects(), open_sockets()
        rounds = 5
        outcomes = asyncio.run(drive(base, rounds))
        after = live_objects()
        requests = rounds * len(KINDS)
        assert sum(outcomes.values()) == requests
        # Each request that leaked would leave at least one object of some kind behind.
        grown = {kind: after[kind] - before[kind] for kind in after}
        leaked = {kind: n for kind, n in grown.items() if n >= requests // 4}
        assert not leaked, f"{leaked} more live objects after {requests} faulted requests"
        # Pooled upstream connections may stay idle (a few); the rest must close, once the
        # gateway has seen the client's closes.
        for _ in range(50):
            if open_sockets() <= sockets + 8:
                break
            time.sleep(0.1)
        assert open_sockets() <= sockets + 8
