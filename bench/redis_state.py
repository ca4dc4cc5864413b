"""What a shared limit costs per request: the Redis state's script against a local redis-server.

    python -m bench.redis_state [--n 5000] [--url redis://127.0.0.1:6379/0]

Without ``--url`` a throwaway ``redis-server`` (the Debian package) is started on a free
port and stopped afterwards. Figures, in microseconds per call, each the best of three
runs of ``--n`` calls, one at a time (the round trip is the cost; a request waits for it):

* ``PING`` -- the floor: one round trip through redis-py;
* ``RedisState.acquire`` with rpm + tpm + max_concurrency -- the one script an admission
  costs (limits never reached: every call admits, the window holds up to ``--n``
  entries);
* the same with ``settle`` and ``release`` sent after it (fire and forget, drained);
* the ``limits`` package's async moving window (``MovingWindowRateLimiter.hit``) for
  one limit with cost 1, and with cost 1000 (a tpm limit pays one list entry per token),
  if ``limits`` is installed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING

from interlingua.limits import RedisLease, SharedCounters

if TYPE_CHECKING:
    from redis.asyncio import Redis


@contextlib.contextmanager
def _redis_server() -> Iterator[str]:
    binary = shutil.which("redis-server") or "/usr/bin/redis-server"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as directory:
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
        process = subprocess.Popen(
            [*args, "--appendonly", "no", "--dir", directory], stdout=subprocess.DEVNULL
        )
        try:
            for _ in range(500):
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                    break
                time.sleep(0.01)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            process.terminate()
            process.wait()


async def _best(n: int, call: Callable[[], Awaitable[object]]) -> float:
    """Best of three runs of ``n`` sequential calls, in microseconds per call."""
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(n):
            await call()
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    return best


async def _server_side(client: Redis) -> float:
    """Redis's own time per script call since the last reset (``INFO commandstats``):
    what a call costs the server, whoever waits on the client."""
    stats = await client.info("commandstats")
    scripts = [stats[k] for k in ("cmdstat_evalsha", "cmdstat_eval") if k in stats]
    calls = sum(s["calls"] for s in scripts)
    return sum(s["usec"] for s in scripts) / calls if calls else 0.0


async def _timed(
    figures: dict[str, float],
    name: str,
    client: Redis,
    n: int,
    call: Callable[[], Awaitable[object]],
) -> None:
    """``name``: the round trip as the caller sees it, and the server's part of it."""
    await client.config_resetstat()
    figures[name] = await _best(n, call)
    figures[f"{name}: in Redis"] = await _server_side(client)


async def measure(url: str, n: int) -> dict[str, float]:
    counters = SharedCounters(url, prefix=f"bench-{uuid.uuid4().hex}")
    figures: dict[str, float] = {}
    try:
        figures["PING"] = await _best(n, counters.client.ping)
        state = counters.limit_state("upstream:a", 10**9, 10**12, 10**6)
        leases: list[object] = []

        async def acquire() -> None:
            leases.append(await state.acquire(1000))

        await _timed(figures, "acquire (rpm+tpm+concurrency)", counters.client, n, acquire)
        for i, lease in enumerate(leases, 1):
            state.release(lease)
            if i % 64 == 0:  # (not 15,000 calls at once: that measures the event loop)
                await counters.background.drain()
        await counters.background.drain()

        async def whole() -> None:
            lease = await state.acquire(1000)
            assert isinstance(lease, RedisLease)
            state.settle(lease, 800)
            state.release(lease)

        async def whole_drained() -> None:
            await whole()
            await counters.background.drain()

        figures["acquire + settle + release"] = await _best(n, whole_drained)
        figures.update(await _limits_package(url, n))
    finally:
        await counters.aclose()
    return figures


async def _limits_package(url: str, n: int) -> dict[str, float]:
    try:
        from limits.aio.storage import RedisStorage
        from limits.aio.strategies import MovingWindowRateLimiter

        from limits import RateLimitItemPerMinute
    except ImportError:
        return {}
    storage = RedisStorage(url.replace("redis://", "async+redis://"), implementation="redispy")
    limiter = MovingWindowRateLimiter(storage)
    rpm, tpm = RateLimitItemPerMinute(10**9), RateLimitItemPerMinute(10**9)
    key = uuid.uuid4().hex
    figures: dict[str, float] = {}
    client = storage.bridge.get_connection()
    await _timed(
        figures, "limits: hit(cost=1), one limit", client, n, lambda: limiter.hit(rpm, key)
    )
    await _timed(
        figures,
        "limits: hit(cost=1000), tpm-like",
        client,
        max(1, n // 50),
        lambda: limiter.hit(tpm, key, "t", cost=1000),
    )
    await storage.reset()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.redis_state")
    parser.add_argument("--n", type=int, default=5000, help="calls per run")
    parser.add_argument("--url", help="a Redis to use (default: start a throwaway one)")
    options = parser.parse_args()
    with contextlib.ExitStack() as stack:
        url = options.url or stack.enter_context(_redis_server())
        figures = asyncio.run(measure(url, options.n))
    for name, micros in figures.items():
        print(f"{name:52} {micros:8.1f} µs")


if __name__ == "__main__":
    main()
