"""Live traffic first: interactive latency with and without a batch running on the same upstream.

    python -m bench.priority_bench                      # 3 rounds, 5 s a phase, 2 and 4 clients
    python -m bench.priority_bench --interactive 2 --rounds 5 --duration 8

What it does:

1. starts the batch bench's mock upstream in its own process (``python -m
   bench.batch_bench --mock``): every POST answered after ``--delay`` (100 ms);
2. starts the gateway in a child process on a config whose one upstream is limited to
   ``max_concurrency: 4`` (``--max-concurrency``), ``batches.share`` left at its default
   (``--share`` sets it);
3. per round, two phases of ``--duration`` s, their order alternating (alone / with batch,
   then with batch / alone): ``--interactive`` clients send chat completions one after
   the other (a closed loop), alone or beside ``--background`` clients doing the same as
   background work -- a batch with more lines ready than its share of the upstream takes;
4. reports the interactive requests' p50 / p95 latency per phase (pooled over the
   rounds), the ratio with / without, and the batch's throughput. Target: interactive p95
   with a batch within 10 % of without.

**How background load is made.** The Batch API's executor marks each line's call as
background work (:data:`interlingua.limits.BACKGROUND`). Until a batch can be submitted
to the gateway, the background load is made by a bench-only hook (``--background-load
hook``, the only one now): the child gateway serves a request carrying
``x-bench-background: 1`` as background work, so the load takes the same route, limiter
and upstream as a batch's lines would. A Batch API load (upload a JSONL of many lines,
``batches.create``, cancel at the phase's end) plugs into :data:`LOADS` beside it.

Progress goes to stderr, the markdown report to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import yaml

MARK = (b"x-bench-background", b"1")
KEY = "bench-key"
BODY = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 20}

#: a background load: (the gateway's URL, clients) -> an async context running the load
#: while it is entered; its ``list`` gathers the load's request latencies
Load = Callable[[str, int, list[float]], contextlib.AbstractAsyncContextManager[None]]


def say(message: str) -> None:
    """Progress on stderr (stdout is the report)."""
    print(f"priority_bench: {message}", file=sys.stderr, flush=True)


# --- the gateway (child process) -------------------------------------------------------


def serve(config_path: Path) -> None:
    """Serve the gateway of ``config_path`` with the bench's background hook; print the port."""
    import uvicorn

    from interlingua.config import load_config
    from interlingua.limits import BACKGROUND
    from interlingua.server import create_app

    config = load_config(config_path)
    app = create_app(config)

    async def marked(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or MARK not in scope["headers"]:
            await app(scope, receive, send)
            return
        token = BACKGROUND.set(True)
        try:
            await app(scope, receive, send)
        finally:
            BACKGROUND.reset(token)

    port = config.server.port
    server = uvicorn.Server(
        uvicorn.Config(marked, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    print(port, flush=True)
    server.run()


def gateway_config(mock: str, port: int, max_concurrency: int, share: float | None) -> str:
    """The child gateway's YAML: one model on the mock, behind ``max_concurrency``."""
    config: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": port, "api_keys": [KEY]},
        "upstreams": {
            "mock": {
                "kind": "openai",
                "base_url": mock + "/v1",
                "limits": {"max_concurrency": max_concurrency},
            }
        },
        "models": [{"name": "m", "upstream": "mock", "model": "gpt-4o-mini"}],
    }
    if share is not None:
        config["batches"] = {"share": share}
    return yaml.safe_dump(config, sort_keys=False)


# --- the load ----------------------------------------------------------------------------


async def _closed_loop(
    session: Any, url: str, headers: dict[str, str], latencies: list[float], until: float
) -> None:
    """One client: a request, its answer read, the next, until ``until``."""
    while time.monotonic() < until:
        started = time.monotonic()
        async with session.post(url, json=BODY, headers=headers) as answer:
            await answer.read()
            if answer.status != 200:
                raise RuntimeError(f"the gateway answered {answer.status}")
        latencies.append(time.monotonic() - started)


@contextlib.asynccontextmanager
async def hook_load(base: str, clients: int, latencies: list[float]) -> AsyncIterator[None]:
    """``clients`` closed-loop clients whose requests the gateway serves as background work
    (the child's ``x-bench-background`` hook), for as long as the context is entered."""
    import aiohttp

    headers = {"authorization": f"Bearer {KEY}", MARK[0].decode(): MARK[1].decode()}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        url = base + "/v1/chat/completions"
        loops = [
            asyncio.ensure_future(_closed_loop(session, url, headers, latencies, float("inf")))
            for _ in range(clients)
        ]
        try:
            yield
        finally:
            for loop in loops:
                loop.cancel()
            await asyncio.gather(*loops, return_exceptions=True)


#: the ways to make background load (the Batch API's goes here once it exists)
LOADS: dict[str, Load] = {"hook": hook_load}


async def interactive(base: str, clients: int, seconds: float) -> list[float]:
    """Latencies of ``clients`` closed-loop interactive clients over ``seconds``."""
    import aiohttp

    latencies: list[float] = []
    headers = {"authorization": f"Bearer {KEY}"}
    until = time.monotonic() + seconds
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        url = base + "/v1/chat/completions"
        await asyncio.gather(
            *(_closed_loop(session, url, headers, latencies, until) for _ in range(clients))
        )
    return latencies


async def rounds(args: argparse.Namespace, base: str, clients: int) -> dict[str, Any]:
    """The rounds at ``clients`` interactive clients: latencies per phase, batch rate."""
    alone: list[float] = []
    beside: list[float] = []
    batch_done = 0
    batch_seconds = 0.0
    load = LOADS[args.background_load]
    for index in range(args.rounds):
        for phase in ("alone", "batch") if index % 2 == 0 else ("batch", "alone"):
            if phase == "alone":
                alone += await interactive(base, clients, args.duration)
                continue
            batch: list[float] = []
            async with load(base, args.background, batch):
                await asyncio.sleep(0.5)  # the batch fills its share first
                started, before = time.monotonic(), len(batch)
                beside += await interactive(base, clients, args.duration)
                # (only the batch requests that ended beside the measured phase)
                batch_done += len(batch) - before
                batch_seconds += time.monotonic() - started
    return {
        "clients": clients,
        "alone": alone,
        "beside": beside,
        "batch_rate": batch_done / batch_seconds if batch_seconds else 0.0,
    }


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` (inclusive method)."""
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1]


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """The markdown table of the interactive latencies with and without the batch."""
    lines = [
        f"## Live traffic first: upstream max_concurrency {args.max_concurrency}, "
        f"batches.share {args.share if args.share is not None else 'default (0.5)'}, "
        f"mock answering after {args.delay * 1000:.0f} ms, {args.background} batch clients, "
        f"{args.rounds} rounds x {args.duration:g} s a phase\n",
        "| interactive clients | requests alone / with batch | p50 alone | p50 with batch "
        "| p95 alone | p95 with batch | p95 ratio | batch req/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        a50, b50 = percentile(r["alone"], 0.5), percentile(r["beside"], 0.5)
        a95, b95 = percentile(r["alone"], 0.95), percentile(r["beside"], 0.95)
        lines.append(
            f"| {r['clients']} | {len(r['alone'])} / {len(r['beside'])} | {a50 * 1000:.1f} ms "
            f"| {b50 * 1000:.1f} ms | {a95 * 1000:.1f} ms | {b95 * 1000:.1f} ms "
            f"| {b95 / a95:.3f} | {r['batch_rate']:.1f} |"
        )
    lines.append(
        "\nTarget: interactive p95 with a batch running within 10 % of without (ratio <= 1.10)."
    )
    lines.append(
        f"\ncommand: `{shlex.join(['python', '-m', 'bench.priority_bench', *sys.argv[1:]])}`"
    )
    return "\n".join(lines)


def _child(args: list[str]) -> tuple[subprocess.Popen[str], int]:
    """A child process of this module that prints its port first; (process, port)."""
    process = subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert process.stdout is not None
    return process, int(process.stdout.readline())


async def _ready(base: str, within: float = 20.0) -> None:
    """Wait until the gateway answers."""
    import aiohttp

    deadline = time.monotonic() + within
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.get(
                    base + "/v1/models", headers={"authorization": f"Bearer {KEY}"}
                ) as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the gateway did not start")
            await asyncio.sleep(0.1)


def _bench(args: argparse.Namespace) -> int:
    from .procs import free_port

    procs: list[subprocess.Popen[str]] = []
    try:
        mock, mock_port = _child(["-m", "bench.batch_bench", "--mock", "--delay", str(args.delay)])
        procs.append(mock)
        with tempfile.TemporaryDirectory(prefix="priority_bench-") as tmp:
            config = Path(tmp) / "gateway.yaml"
            mock_url = f"http://127.0.0.1:{mock_port}"
            config.write_text(
                gateway_config(mock_url, free_port(), args.max_concurrency, args.share)
            )
            env_note = os.environ.get("PYTHONPATH", "")
            say(f"gateway from {env_note or 'the installed package'}")
            gateway, port = _child(["-m", "bench.priority_bench", "--serve", str(config)])
            procs.append(gateway)
            base = f"http://127.0.0.1:{port}"
            results = asyncio.run(_all(args, base))
    finally:
        for process in reversed(procs):
            process.terminate()
            process.wait(10)
    print(report(results, args))
    return 0


async def _all(args: argparse.Namespace, base: str) -> list[dict[str, Any]]:
    await _ready(base)
    await interactive(base, 2, 1.0)  # warm up
    results = []
    for clients in args.interactive:
        say(f"{clients} interactive clients, {args.rounds} rounds")
        results.append(await rounds(args, base, clients))
    return results


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with --serve, its gateway)."""
    parser = argparse.ArgumentParser(prog="python -m bench.priority_bench", description=__doc__)
    parser.add_argument("--interactive", type=_counts, default=[2, 4], help="clients, e.g. 2,4")
    parser.add_argument("--background", type=int, default=16, help="batch clients")
    parser.add_argument("--background-load", choices=sorted(LOADS), default="hook")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds a phase")
    parser.add_argument("--delay", type=float, default=0.1, help="mock answer delay (s)")
    parser.add_argument("--max-concurrency", type=int, default=4)
    parser.add_argument("--share", type=float, default=None, help="batches.share")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(args.serve)
        return 0
    return _bench(args)


def _counts(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


if __name__ == "__main__":
    sys.exit(main())
