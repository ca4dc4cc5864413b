"""The embedded engine's embeddings next to llama.cpp's own server, on the same GGUF.

    python -m bench.embed_bench                 # the bundled SmolLM2, 3 rounds of 5 s
    python -m bench.embed_bench --gguf /models/bge-small-en-v1.5-q8_0.gguf --rounds 5

Both serve ``POST /v1/embeddings``: ``interlingua serve`` with one ``local`` upstream
with ``embedding: true``, and ``llama-server --embedding --pooling mean`` (built by
``bench.local_build`` from the pinned llama-cpp-python's sources, so both run the same
llama.cpp), with the same threads. Per round, each server in turn (the order alternating)
is asked for ``--seconds`` at batch 1 (one text a request, one request at a time) and at
batch 32 (32 texts a request); the report gives embeddings per second, pooled over the
rounds, and ours / llama-server's. Every answer is checked: as many vectors as texts,
all of one width.

No package on the package index ships an embedding model as a GGUF, so by default the
GGUF is the bundled SmolLM2's, pooled by mean (a chat model as an embedder of the same
size class): the comparison is of the two engines, not of a model's vectors.

Progress goes to stderr, the markdown report to stdout.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import orjson
import yaml

from .local_servers import engine_defaults
from .procs import BenchError, free_port, start

#: texts of the batches: distinct, about a sentence each
TEXTS = [
    f"Passage {i}: the gateway relays this sentence to an embedding model and returns "
    f"the vector that a retrieval pipeline stores beside document {i * 7 % 101}."
    for i in range(64)
]
BATCHES = (1, 32)


def say(message: str) -> None:
    print(f"embed_bench: {message}", file=sys.stderr, flush=True)


def our_command(gguf: str, threads: int, port: int, tmp: Path) -> list[str]:
    """``interlingua serve`` with one local embedding upstream on ``gguf``."""
    config = {
        "upstreams": {
            "emb": {"kind": "local", "path": gguf, "embedding": True, "n_threads": threads}
        },
        "models": [{"name": "emb", "upstream": "emb"}],
        "usage": False,
        "metrics": False,
    }
    path = tmp / "ours.yaml"
    path.write_text(yaml.safe_dump(config))
    return [sys.executable, "-m", "interlingua.cli", "serve", "-c", str(path),
            "--port", str(port), "--log-level", "warning"]  # fmt: skip


def cpp_command(binary: str, gguf: str, threads: int, port: int) -> list[str]:
    """llama-server in embedding mode on ``gguf``, mean pooling, the same threads; a
    batch of 32 sentences fits its context and its physical batch."""
    return [binary, "-m", gguf, "--host", "127.0.0.1", "--port", str(port),
            "--embedding", "--pooling", "mean", "-t", str(threads), "-tb", str(threads),
            "-c", "8192", "-b", "8192", "-ub", "8192", "--parallel", "1"]  # fmt: skip


@contextmanager
def serving(command: list[str], port: int, log: Path) -> Iterator[str]:
    """Run ``command`` until the block ends; its embeddings URL once it answers."""
    proc = start(command, log)
    url = f"http://127.0.0.1:{port}/v1/embeddings"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.proc.poll() is not None:
                raise BenchError(f"{command[0]} exited:\n{proc.log_tail()}")
            try:
                if httpx.post(url, json={"model": "emb", "input": "hi"}, timeout=30).is_success:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise BenchError(f"no answer from {url}:\n{proc.log_tail()}")
            time.sleep(0.2)
        yield url
    finally:
        proc.stop()


def rate(client: httpx.Client, url: str, batch: int, seconds: float) -> tuple[int, float]:
    """(embeddings made, seconds) asking ``url`` for ``batch`` texts a request, one
    request at a time, for ``seconds``; every answer checked."""
    done, started, at = 0, time.perf_counter(), 0
    width = None
    while time.perf_counter() - started < seconds:
        texts = [TEXTS[(at + i) % len(TEXTS)] for i in range(batch)]
        at += batch
        answer = client.post(url, json={"model": "emb", "input": texts})
        if answer.status_code != 200:
            raise BenchError(f"{url}: HTTP {answer.status_code}: {answer.text[:300]}")
        data = orjson.loads(answer.content)["data"]
        widths = {len(item["embedding"]) for item in data}
        if len(data) != batch or len(widths) != 1 or (width and widths != {width}):
            raise BenchError(f"{url}: {len(data)} vectors of widths {widths} for {batch} texts")
        width = widths.pop()
        done += batch
    return done, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.embed_bench", description=__doc__)
    parser.add_argument("--gguf", help="the GGUF both serve (default: the bundled SmolLM2)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    from .local_build import ensure_llama_server

    binary = str(ensure_llama_server().path)
    default_gguf, threads, _ = engine_defaults()
    gguf = args.gguf or default_gguf
    totals: dict[tuple[str, int], list[float]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="embed-bench-") as tmp_name,
        httpx.Client(timeout=120) as client,
    ):
        tmp = Path(tmp_name)
        for index in range(args.rounds):
            order = ("ours", "llama-server") if index % 2 == 0 else ("llama-server", "ours")
            for name in order:
                port = free_port()
                command = (
                    our_command(gguf, threads, port, tmp)
                    if name == "ours"
                    else cpp_command(binary, gguf, threads, port)
                )
                with serving(command, port, tmp / f"{name}-{index}.log") as url:
                    for batch in BATCHES:
                        rate(client, url, batch, 1.0)  # (warm)
                        made, took = rate(client, url, batch, args.seconds)
                        bucket = totals.setdefault((name, batch), [0.0, 0.0])
                        bucket[0] += made
                        bucket[1] += took
                        say(f"round {index + 1} {name} batch {batch}: {made / took:,.1f}/s")
    print(report(totals, gguf, threads, args))
    return 0


def report(
    totals: dict[tuple[str, int], list[float]], gguf: str, threads: int, args: argparse.Namespace
) -> str:
    """The markdown table."""
    lines = [
        f"## Embeddings: `{Path(gguf).name}`, {threads} threads, {args.rounds} rounds of "
        f"{args.seconds:g} s",
        "",
        "| batch | ours (embeddings/s) | llama-server (embeddings/s) | ours / llama-server |",
        "|---:|---:|---:|---:|",
    ]
    for batch in BATCHES:
        ours = totals[("ours", batch)][0] / totals[("ours", batch)][1]
        cpp = totals[("llama-server", batch)][0] / totals[("llama-server", batch)][1]
        lines.append(f"| {batch} | {ours:,.1f} | {cpp:,.1f} | {ours / cpp:.3f} |")
    command = shlex.join(["python", "-m", "bench.embed_bench", *sys.argv[1:]])
    lines += ["", f"command: `{command}`"]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
