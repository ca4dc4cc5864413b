"""Batch runner benchmark: wall time vs the ideal, and peak RSS vs the input size.

    python -m bench.batch_bench                 # 10,000 and 100,000 lines, all runs beside
    python -m bench.batch_bench --no-big        # skip the 100,000-line run (~40 s)
    python -m bench.batch_bench --no-big --no-sdk   # interlingua's runs only (CLI, Ray, generate)

What it does:

1. starts a mock OpenAI-compatible upstream in its **own process** (aiohttp on uvloop) that
   answers every POST with a fixed ``chat.completion`` after ``--delay`` (100 ms), so the
   runner under test does not share its CPU;
2. writes OpenAI Batch JSONL inputs of 10,000 and 100,000 lines;
3. runs ``python -m interlingua.cli batch run IN -o OUT --concurrency 256`` as a child
   process for each, measuring the wall time (the runner's own, from its summary, and the
   process's, interpreter start included) and the child's peak RSS (``ru_maxrss`` from
   ``wait4`` of that one child);
4. runs the same command with ``--engine ray`` on the 10,000 lines: a local Ray instance
   (all the machine's CPUs) with ``--ray-actors`` actors (2) of ``concurrency / actors``
   requests in flight each, so as many requests are in flight as in one process; needs
   ``pip install 'interlingua[ray]'`` (``--no-ray`` skips it);
5. runs the same 10,000 requests in process through ``AsyncClient.generate()`` (the
   client's in-process batch: the messages of each line as an item, concurrency 256, the
   answers parsed into ``ChatResult`` values, ``retry_on_empty`` on as by default) in a
   child process measured the same way (``--no-generate`` skips it);
6. runs the plain alternative on the same mock: ``asyncio.gather`` over the ``openai``
   SDK's ``AsyncOpenAI`` with a semaphore of 256, in a child process measured the same way;
7. runs the 10,000 lines through the gateway's Batch API (bench/batch_api_bench.py: a real
   ``interlingua serve``, ``files.create`` + ``batches.create`` to completion; its own
   table, with the gateway's CPU and peak RSS; ``--no-api`` skips it).

The ideal wall time is ``lines / concurrency * delay`` (10,000 / 256 x 0.1 s = 3.9 s): the
time a runner with zero overhead needs. Goals (issues 4 and 13): wall <= 1.2x ideal for
the CLI runner and for ``generate()``; peak RSS for 100,000 lines within 20 % of that for
10,000. A markdown table goes to stdout; progress to stderr.

"CPU (s)" is the child's user + system time: on a machine shared with other work the
wall time is noisy, while a CPU time below the ideal wall time shows the runner itself
keeps up. The mock's own CPU is not counted (it runs in its own process).

For the Ray run, "wall" is the run itself (from the summary: the output opened to the
last result written) and "process wall" adds starting and stopping the local Ray
instance; CPU and peak RSS are the driver's alone (Ray's own processes and the actors
are not the child's children in ``wait4``'s sense, so they are not counted). A Ray run
on one 2-core machine is expected to be slower than one process: Ray adds its
processes, object store and scheduling on the same 2 cores, and earns its keep only
when the actors spread over several machines.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

ANSWER = orjson.dumps(
    {
        "id": "chatcmpl-BATCHBENCH0000000000000000",
        "object": "chat.completion",
        "created": 1_760_000_000,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Sure! Here is a short answer from the mock upstream: the result "
                    "is 42.",
                    "refusal": None,
                },
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 58, "completion_tokens": 17, "total_tokens": 75},
        "system_fingerprint": "fp_bench",
    }
)


def say(message: str) -> None:
    """Progress on stderr (stdout is the report)."""
    print(f"batch_bench: {message}", file=sys.stderr, flush=True)


# --- the mock upstream (child process) ----------------------------------------------------


def serve_mock(delay: float) -> None:
    """Answer every POST after ``delay`` s (a stream when the body asks for one: the
    bench's 20-chunk answer); GET /stats reports and resets the counters."""
    from aiohttp import web

    from .mock import openai_stream

    streamed = openai_stream()

    state = {"in_flight": 0, "peak": 0, "requests": 0}

    async def answer(request: web.Request) -> web.Response:
        body = await request.read()
        state["in_flight"] += 1
        state["requests"] += 1
        state["peak"] = max(state["peak"], state["in_flight"])
        try:
            await asyncio.sleep(delay)
        finally:
            state["in_flight"] -= 1
        if b'"stream":true' in body:
            return web.Response(
                body=streamed, content_type="text/event-stream",
                headers={"x-request-id": "req_bench"},
            )  # fmt: skip
        return web.Response(
            body=ANSWER, content_type="application/json", headers={"x-request-id": "req_bench"}
        )

    async def stats(request: web.Request) -> web.Response:
        body = orjson.dumps(state)
        state.update(peak=0, requests=0)
        return web.Response(body=body, content_type="application/json")

    async def main() -> None:
        app = web.Application()
        app.router.add_route("POST", "/{tail:.*}", answer)
        app.router.add_route("GET", "/stats", stats)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
        await site.start()
        print(runner.addresses[0][1], flush=True)  # the port: the parent waits for it
        await asyncio.Event().wait()

    _run_loop(main())


def _run_loop(coro: object) -> None:
    try:
        import uvloop
    except ImportError:
        asyncio.run(coro)  # type: ignore[arg-type]
        return
    uvloop.run(coro)  # type: ignore[arg-type]


# --- the plain openai-SDK alternative (child process) ------------------------------------


def run_sdk(inp: Path, out: Path, base_url: str, concurrency: int) -> None:
    """What a quick script does: load the file, gather every call under a semaphore."""
    from openai import AsyncOpenAI

    async def main() -> None:
        client = AsyncOpenAI(base_url=base_url, api_key="bench")
        semaphore = asyncio.Semaphore(concurrency)
        rows = [orjson.loads(line) for line in inp.read_bytes().splitlines()]

        async def one(row: dict[str, Any]) -> bytes:
            async with semaphore:
                reply = await client.chat.completions.create(**row["body"])
            record = {"custom_id": row["custom_id"], "response": {"body": reply.model_dump()}}
            return orjson.dumps(record) + b"\n"

        started = time.monotonic()
        lines = await asyncio.gather(*(one(row) for row in rows))
        out.write_bytes(b"".join(lines))
        print(f"sdk: {len(lines)} lines in {time.monotonic() - started:.2f} s", file=sys.stderr)
        await client.close()

    _run_loop(main())


# --- the client's generate() (child process) ---------------------------------------------


def run_generate(inp: Path, out: Path, base_url: str, concurrency: int) -> None:
    """``AsyncClient.generate`` over the input's messages: the in-process batch API."""
    from interlingua.client import AsyncClient, ChatResult

    async def main() -> None:
        rows = [orjson.loads(line)["body"] for line in inp.read_bytes().splitlines()]
        items = [row["messages"] for row in rows]
        async with AsyncClient(base_url, "bench", model="gpt-4o-mini", max_retries=0) as c:
            started = time.monotonic()
            results = await c.generate(items, concurrency=concurrency, max_tokens=64)
            wall = time.monotonic() - started
        ok = [r for r in results if isinstance(r, ChatResult)]
        out.write_bytes(b"".join(orjson.dumps({"text": r.text}) + b"\n" for r in ok))
        print(f"generate: {len(results)} lines in {wall:.2f} s ({len(ok)} ok)", file=sys.stderr)

    _run_loop(main())


# --- the parent ---------------------------------------------------------------------------


@dataclass
class Measured:
    """One measured child run."""

    name: str
    lines: int
    wall: float  # the work itself (from the child's own report)
    process_wall: float  # interpreter start to exit
    cpu: float  # user + system seconds of the child (imports included)
    peak_rss_mib: float
    server_peak: int
    ok: int


def write_input(path: Path, lines: int) -> None:
    """An OpenAI Batch file of ``lines`` small chat requests."""
    with open(path, "wb") as f:
        for i in range(lines):
            row = {
                "custom_id": f"request-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {
                    "model": "gpt-4o-mini",
                    "messages": [
                        {"role": "system", "content": "You are a helpful assistant."},
                        {"role": "user", "content": f"Question number {i}: what is 6 x 7?"},
                    ],
                    "max_tokens": 64,
                },
            }
            f.write(orjson.dumps(row) + b"\n")


def measure(args: list[str], log: Path) -> tuple[float, float, float, int]:
    """Run a child; (process wall seconds, CPU seconds, peak RSS MiB, exit status)."""
    started = time.monotonic()
    with open(log, "wb") as err:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage, nobody else's
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    cpu = usage.ru_utime + usage.ru_stime
    return wall, cpu, usage.ru_maxrss / 1024, proc.returncode  # ru_maxrss: KiB on Linux


def server_stats(base: str) -> dict[str, int]:
    """The mock's counters since the last call (and reset them)."""
    import urllib.request

    with urllib.request.urlopen(f"{base}/stats", timeout=10) as resp:
        stats: dict[str, int] = orjson.loads(resp.read())
        return stats


def run_one(name: str, cmd: list[str], lines: int, out: Path, work: Path, base: str) -> Measured:
    log = work / f"{name.replace(' ', '_')}-{lines}.log"
    say(f"{name}: {lines:,} lines ...")
    process_wall, cpu, rss, code = measure(cmd, log)
    text = log.read_text()
    if code != 0:
        raise SystemExit(f"{name} failed ({code}):\n{text[-3000:]}")
    match = re.search(r"(\d+) lines in ([\d.]+) s", text)
    wall = float(match.group(2)) if match else process_wall
    data = out.read_bytes()
    ours = name.startswith("interlingua batch")
    ok = data.count(b'"error":null') if ours else data.count(b"\n")
    stats = server_stats(base)
    out.unlink()
    say(f"{name}: {wall:.2f} s, peak RSS {rss:.0f} MiB, server peak in flight {stats['peak']}")
    return Measured(name, lines, wall, process_wall, cpu, rss, stats["peak"], ok)


def table(results: list[Measured], concurrency: int, delay: float) -> str:
    rows = [
        "| runner | lines | wall (s) | ideal (s) | wall / ideal | req/s | process wall (s) "
        "| CPU (s) | peak RSS (MiB) | peak in flight | ok |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        ideal = r.lines / concurrency * delay
        rows.append(
            f"| {r.name} | {r.lines:,} | {r.wall:.2f} | {ideal:.2f} | {r.wall / ideal:.2f}x "
            f"| {r.lines / r.wall:,.0f} | {r.process_wall:.2f} | {r.cpu:.2f} | {r.peak_rss_mib:.1f} "
            f"| {r.server_peak} | {r.ok:,} |"
        )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or, with --mock / --sdk, one of its child processes)."""
    parser = argparse.ArgumentParser(prog="python -m bench.batch_bench", description=__doc__)
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--big", type=int, default=100_000, help="the RSS comparison size")
    parser.add_argument("--no-big", action="store_true", help="skip the --big run")
    parser.add_argument("--no-sdk", action="store_true", help="skip the openai SDK run")
    parser.add_argument("--no-ray", action="store_true", help="skip the Ray run")
    parser.add_argument(
        "--no-api", action="store_true", help="skip the Batch API run (bench.batch_api_bench)"
    )
    parser.add_argument("--ray-actors", type=int, default=2, help="actors of the Ray run")
    parser.add_argument(
        "--no-generate", action="store_true", help="skip the client's generate() run"
    )
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--delay", type=float, default=0.1, help="mock answer delay (s)")
    parser.add_argument("--mock", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--sdk", nargs=3, metavar=("IN", "OUT", "URL"), help=argparse.SUPPRESS)
    parser.add_argument("--generate", nargs=3, metavar=("IN", "OUT", "URL"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.mock:
        serve_mock(args.delay)
        return 0
    if args.sdk:
        run_sdk(Path(args.sdk[0]), Path(args.sdk[1]), args.sdk[2], args.concurrency)
        return 0
    if args.generate:
        inp, out, url = args.generate
        run_generate(Path(inp), Path(out), url, args.concurrency)
        return 0
    return _bench(args)


def _bench(args: argparse.Namespace) -> int:
    py = sys.executable
    mock = subprocess.Popen(
        [py, "-m", "bench.batch_bench", "--mock", "--delay", str(args.delay)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert mock.stdout is not None
        port = int(mock.stdout.readline())
        base = f"http://127.0.0.1:{port}"
        with tempfile.TemporaryDirectory(prefix="batch_bench-") as tmp:
            results = _runs(args, Path(tmp), base)
            if not args.no_api:  # (the same lines through the gateway's Batch API)
                from .batch_api_bench import run_api

                say(f"Batch API: {args.lines:,} lines ...")
                api = run_api(args, Path(tmp), base)
    finally:
        mock.terminate()
        mock.wait(10)
    c, d = args.concurrency, args.delay
    print(f"## batch runner: concurrency {c}, mock upstream answering after {d * 1000:.0f} ms\n")
    print(table(results, c, d))
    if not args.no_api:
        print(f"\n{api}")
    ours = [r for r in results if r.name == "interlingua batch"]
    if len(ours) == 2:
        growth = ours[1].peak_rss_mib / ours[0].peak_rss_mib - 1
        print(
            f"\npeak RSS {ours[1].lines:,} vs {ours[0].lines:,} lines: {growth:+.1%} "
            "(goal: within 20 %)"
        )
    single = next((r for r in ours if r.lines == args.lines), None)
    ray = next((r for r in results if r.name == RAY), None)
    if single is not None and ray is not None:
        print(
            f"\nRay / single process, {ray.lines:,} lines: wall {ray.wall / single.wall:.2f}x, "
            f"process wall {ray.process_wall / single.process_wall:.2f}x"
        )
    print(f"\ncommand: `{shlex.join(['python', '-m', 'bench.batch_bench', *sys.argv[1:]])}`")
    return 0


def _runs(args: argparse.Namespace, work: Path, base: str) -> list[Measured]:
    sizes = [args.lines] + ([] if args.no_big else [args.big])
    results = []
    for lines in sizes:
        inp, out = work / f"in-{lines}.jsonl", work / f"out-{lines}.jsonl"
        write_input(inp, lines)
        cmd = [
            sys.executable, "-m", "interlingua.cli", "batch", "run", str(inp), "-o", str(out),
            "--base-url", f"{base}/v1", "--concurrency", str(args.concurrency),
            "--progress", "off", "--retries", "0",
        ]  # fmt: skip
        results.append(run_one("interlingua batch", cmd, lines, out, work, base))
    if not args.no_ray:
        results.append(_ray_run(args, work, base))
    for skip, flag, name in (
        (args.no_generate, "--generate", "client generate()"),
        (args.no_sdk, "--sdk", "openai SDK + asyncio.gather"),
    ):
        if skip:
            continue
        inp, out = work / f"in-{args.lines}.jsonl", work / f"out{flag}.jsonl"
        cmd = [
            sys.executable, "-m", "bench.batch_bench", "--concurrency", str(args.concurrency),
            flag, str(inp), str(out), f"{base}/v1",
        ]  # fmt: skip
        results.append(run_one(name, cmd, args.lines, out, work, base))
    return results


RAY = "interlingua batch --engine ray"


def _ray_run(args: argparse.Namespace, work: Path, base: str) -> Measured:
    """The 10,000 lines again on a local Ray instance, as many requests in flight."""
    inp, out = work / f"in-{args.lines}.jsonl", work / f"out-ray-{args.lines}.jsonl"
    per_actor = max(1, args.concurrency // args.ray_actors)
    cmd = [
        sys.executable, "-m", "interlingua.cli", "batch", "run", str(inp), "-o", str(out),
        "--base-url", f"{base}/v1", "--concurrency", str(per_actor), "--progress", "off",
        "--retries", "0", "--engine", "ray", "--actors", str(args.ray_actors),
    ]  # fmt: skip
    return run_one(RAY, cmd, args.lines, out, work, base)


if __name__ == "__main__":
    sys.exit(main())
