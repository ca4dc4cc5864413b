"""The Batch API path: a file of requests through ``files.create`` + ``batches.create`` to
completion, against the batch bench's mock upstream (100 ms an answer).

    python -m bench.batch_api_bench               # 10,000 lines, concurrency 256
    python -m bench.batch_api_bench --lines 2000

(``python -m bench.batch_bench`` runs it too, after the runner's rows: ``--no-api`` skips it.)

What it does: starts bench/batch_bench.py's mock upstream in its own process, then
``interlingua serve`` in another, with the mock as its one upstream, ``batches:``
``concurrency`` and ``max_concurrency`` at ``--concurrency``, no usage log, a fresh
SQLite store; uploads the batch bench's input with the openai SDK, creates the batch and
polls it every 0.2 s until it ends. Wall is from ``batches.create`` until the client
sees the batch ended (validation, the lines, the output file); the gateway's CPU is its
user + system time over that span, its peak RSS its ``VmHWM`` (/proc) after the run. The ideal is the batch
bench's: ``lines / concurrency * delay``. Goals (the Batch API's): wall <= 1.2x ideal,
gateway RSS <= 150 MB while it runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .batch_bench import write_input

KEY = "sk-batch-api-bench"


def _gateway(work: Path, upstream: str, concurrency: int) -> tuple[subprocess.Popen[bytes], str]:
    config = {
        "upstreams": {"mock": {"kind": "openai", "base_url": upstream}},
        "models": [{"name": "gpt-4o-mini", "upstream": "mock"}],
        "keys": [{"name": "bench", "key_sha256": hashlib.sha256(KEY.encode()).hexdigest()}],
        "usage": False,
        "metrics": False,
        "batches": {
            "url": f"sqlite://{work}/batches.db",
            "concurrency": concurrency,
            "max_concurrency": concurrency,
        },
    }
    path = work / "gateway.yaml"
    path.write_text(json.dumps(config))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [sys.executable, "-m", "interlingua.cli", "serve", "-c", str(path), "--port", str(port)]
    args += ["--log-level", "warning"]
    proc = subprocess.Popen(args, stderr=open(work / "gateway.log", "wb"), start_new_session=True)  # noqa: SIM115
    return proc, f"http://127.0.0.1:{port}"


def _cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_api(args: argparse.Namespace, work: Path, upstream: str) -> str:
    """The run (``args``: ``lines``, ``concurrency``, ``delay``) against the mock at
    ``upstream``, in the directory ``work``; its markdown table."""
    import httpx
    import openai

    gateway, url = _gateway(work, upstream + "/v1", args.concurrency)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline or gateway.poll() is not None:
                raise SystemExit((work / "gateway.log").read_text()[-3000:])
            time.sleep(0.1)
        inp = work / "in.jsonl"
        write_input(inp, args.lines)
        client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=2)
        with inp.open("rb") as f:
            file_id = client.files.create(file=f, purpose="batch").id
        started, cpu = time.monotonic(), _cpu_seconds(gateway.pid)
        batch = client.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        while batch.status not in ("completed", "failed", "expired", "cancelled"):
            time.sleep(0.2)
            batch = client.batches.retrieve(batch.id)
        wall = time.monotonic() - started
        cpu = _cpu_seconds(gateway.pid) - cpu
        rss = _peak_rss_mib(gateway.pid)
        lines = (
            client.files.content(batch.output_file_id).text.count("\n")
            if batch.output_file_id
            else 0
        )
    finally:
        os.killpg(gateway.pid, signal.SIGTERM)
        gateway.wait(20)
    ideal = args.lines / args.concurrency * args.delay
    counts = batch.request_counts
    return "\n".join(
        [
            "| path | lines | status | wall (s) | ideal (s) | wall / ideal | req/s "
            "| gateway CPU (s) | gateway peak RSS (MiB) | output lines | failed |",
            "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
            f"| Batch API (files.create + batches.create) | {args.lines:,} | {batch.status} "
            f"| {wall:.2f} | {ideal:.2f} | {wall / ideal:.2f}x | {args.lines / wall:,.0f} "
            f"| {cpu:.2f} | {rss:.1f} | {lines:,} | {counts.failed if counts else '?'} |",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; the table to stdout."""
    parser = argparse.ArgumentParser(prog="python -m bench.batch_api_bench", description=__doc__)
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--delay", type=float, default=0.1, help="mock answer delay (s)")
    args = parser.parse_args(argv)
    mock = subprocess.Popen(
        [sys.executable, "-m", "bench.batch_bench", "--mock", "--delay", str(args.delay)],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        assert mock.stdout is not None
        upstream = f"http://127.0.0.1:{int(mock.stdout.readline())}"
        with tempfile.TemporaryDirectory(prefix="batch_api_bench-") as tmp:
            report = run_api(args, Path(tmp), upstream)
    finally:
        mock.terminate()
        mock.wait(10)
    c, d = args.concurrency, args.delay
    print(f"## Batch API: concurrency {c}, mock upstream answering after {d * 1000:.0f} ms\n")
    print(report)
    print(f"\ncommand: `{shlex.join(['python', '-m', 'bench.batch_api_bench', *sys.argv[1:]])}`")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
