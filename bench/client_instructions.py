"""Instructions per item of the client's batch paths under callgrind.

The figures docs/performance.md quotes for ``generate()`` and ``send_raw``
(docs/performance.md, "`generate()` in process").

    python -m bench.client_instructions                     # generate() and send_raw
    python -m bench.client_instructions --path generate --src /tmp/old/src

``python -m bench.batch_bench`` measures wall time against the ideal; on this shared
two-core machine the same code moves ~10 % between sittings, more than most changes to
the client's per-item work. This counts that work instead: a child process runs ``--low``
and then ``--high`` items of a path under ``valgrind --tool=callgrind`` against the batch
bench's mock upstream (its own process, not counted), and the difference of the two
totals over the difference of the counts is the user-space instructions one item costs,
start-up excluded. Paths:

* ``generate``: ``AsyncClient.generate()`` over the items' messages (prepare, render,
  send, read the answer into a ``ChatResult``, keep it), as ``batch_bench`` runs it;
* ``raw``: ``AsyncClient.send_raw(body, retry_on_empty=True)`` from as many workers,
  the CLI runner's per-item call: the floor ``generate`` is measured against;
* ``stream``: ``AsyncClient.stream(messages)`` read to its end (every event, then
  ``final()``) from as many workers, against the mock's 20-chunk streamed answer: the
  client's streaming loop.

Kernel work (the sockets) is not counted. Needs Debian's ``valgrind``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

from .batch_bench import _run_loop, write_input
from .instructions import callgrind_total

PATHS = ("generate", "raw", "stream")


def run_child(path: str, inp: Path, count: int, base_url: str, concurrency: int) -> None:
    """``count`` items of ``path`` (in the process callgrind watches)."""
    from interlingua.client import AsyncClient, ChatResult

    rows = [orjson.loads(line)["body"] for line in inp.read_bytes().splitlines()[:count]]

    async def main() -> None:
        async with AsyncClient(base_url, "bench", model="gpt-4o-mini", max_retries=0) as c:
            if path == "generate":
                items = [row["messages"] for row in rows]
                results = await c.generate(items, concurrency=concurrency, max_tokens=64)
                failed = [r for r in results if not isinstance(r, ChatResult)]
            elif path == "stream":
                prompts = iter([row["messages"] for row in rows])
                failed = []

                async def reader() -> None:
                    for messages in prompts:
                        async with c.stream(messages, max_tokens=64) as stream:
                            async for _ in stream:
                                pass
                            await stream.final()

                await asyncio.gather(*(reader() for _ in range(concurrency)))
            else:
                bodies = iter([orjson.dumps({**row, "max_tokens": 64}) for row in rows])
                failed = []

                async def worker() -> None:
                    for body in bodies:
                        await c.send_raw(body, retry_on_empty=True)

                await asyncio.gather(*(worker() for _ in range(concurrency)))
        if failed:
            raise SystemExit(f"{len(failed)} items failed, e.g. {failed[0]}")

    _run_loop(main())


def instructions(args: argparse.Namespace, path: str, inp: Path, count: int, url: str) -> int:
    """User-space instructions of a child process running ``count`` items of ``path``."""
    out = Path(tempfile.mkdtemp(prefix="bench-client-instructions-")) / "callgrind.out"
    command = [
        "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
        "-m", "bench.client_instructions", "--child", path, str(inp), str(count), url,
        "--concurrency", str(args.concurrency),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([args.src, str(Path(__file__).parents[1])])}
    subprocess.run(command, check=True, capture_output=True, env=env)
    return callgrind_total(out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.client_instructions", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--path", default="generate,raw", help=f"from {', '.join(PATHS)}")
    parser.add_argument("--low", type=int, default=300, help="items of the first run")
    parser.add_argument("--high", type=int, default=1300, help="items of the second run")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--delay", type=float, default=0.02, help="mock answer delay (s)")
    parser.add_argument("--src", default=str(Path(__file__).parents[1] / "src"))
    parser.add_argument(
        "--child", nargs=4, metavar=("PATH", "IN", "N", "URL"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.child:
        path, inp, count, url = args.child
        run_child(path, Path(inp), int(count), url, args.concurrency)
        return
    paths = args.path.split(",")
    for path in paths:
        if path not in PATHS:
            parser.error(f"unknown path {path!r} (known: {', '.join(PATHS)})")
    if not args.high > args.low > 0:
        parser.error("--high must exceed --low, both positive")
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    mock = subprocess.Popen(
        [sys.executable, "-m", "bench.batch_bench", "--mock", "--delay", str(args.delay)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        cwd=Path(__file__).parents[1],
    )
    try:
        assert mock.stdout is not None
        url = f"http://127.0.0.1:{int(mock.stdout.readline())}/v1"
        with tempfile.TemporaryDirectory(prefix="client-instructions-") as tmp:
            inp = Path(tmp) / "in.jsonl"
            write_input(inp, args.high)
            for path in paths:
                low = instructions(args, path, inp, args.low, url)
                high = instructions(args, path, inp, args.high, url)
                per = (high - low) / (args.high - args.low)
                print(f"{path}: {per:,.0f} instructions/item ({args.src})", flush=True)
    finally:
        mock.terminate()
        mock.wait(10)


if __name__ == "__main__":
    main()
