"""Resident memory of a long-lived process that runs batch after batch of image prompts.

    python -m bench.client_memory                                  # generate(), this tree
    python -m bench.client_memory --path runner --src /tmp/old/src # the batch runner

A pipeline process (a notebook, a worker) keeps one client and calls ``generate()`` --
or the batch runner with that client -- again and again. Each batch here is
``--prompts`` prompts of one small generated image each (``--side`` pixels square,
random noise, so no two compress alike: PNG bytes for ``generate()``, files for the
runner's simple lines), answered at once by the batch bench's mock upstream in its own
process. A child process with ``--src`` on its path runs ``--batches`` batches through
one client and reads its resident set size (``VmRSS``) at rest (the client warmed up by
one batch of a few image prompts) and after each batch, once its own references to the batch are dropped and
collected: what is left is what the client kept. Needs Pillow.
"""

from __future__ import annotations

import argparse
import gc
import io
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

PATHS = ("generate", "runner")


def rss_mib() -> float:
    """This process's resident set size, MiB (Linux's /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def images(count: int, side: int) -> list[bytes]:
    """``count`` PNGs of random noise (each different, so none shares an encoding)."""
    from PIL import Image

    out = []
    for _ in range(count):
        buf = io.BytesIO()
        Image.frombytes("RGB", (side, side), os.urandom(side * side * 3)).save(buf, format="PNG")
        out.append(buf.getvalue())
    return out


async def generate_batches(url: str, args: argparse.Namespace) -> list[float]:
    from interlingua.client import AsyncClient, ChatResult

    series: list[float] = []
    async with AsyncClient(url, "bench", model="m", max_retries=0) as client:
        # at rest: warmed up by a batch of a few image prompts (imports done, connections
        # open, encoding threads started), its 64 images too few to count
        warm = [["What is in this picture?", png] for png in images(args.concurrency, args.side)]
        await client.generate(warm, concurrency=args.concurrency, max_tokens=8)
        del warm
        gc.collect()
        series.append(rss_mib())
        for _batch in range(args.batches):
            pngs = images(args.prompts, args.side)
            items = [["What is in this picture?", png] for png in pngs]
            results = await client.generate(items, concurrency=args.concurrency, max_tokens=8)
            failed = [r for r in results if not isinstance(r, ChatResult)]
            if failed:
                raise SystemExit(f"{len(failed)} prompts failed, e.g. {failed[0]}")
            del pngs, items, results
            gc.collect()
            series.append(rss_mib())
    return series


async def runner_batches(url: str, args: argparse.Namespace, tmp: Path) -> list[float]:
    from interlingua.batch import BatchOptions, BatchRunner
    from interlingua.batch.runner import make_client

    series: list[float] = []
    base = BatchOptions(tmp / "none.jsonl", output=tmp / "none.out", base_url=url, model="m")
    client = make_client(base)  # the pipeline's one client, handed to every run
    try:
        warm = [["What is in this picture?", png] for png in images(args.concurrency, args.side)]
        await client.generate(warm, concurrency=args.concurrency, max_tokens=8)  # (as above)
        del warm
        gc.collect()
        series.append(rss_mib())
        for batch in range(args.batches):
            folder = tmp / f"batch{batch}"
            folder.mkdir()
            rows = []
            for i, png in enumerate(images(args.prompts, args.side)):
                (folder / f"{i}.png").write_bytes(png)
                rows.append({"custom_id": f"{batch}-{i}", "prompt": "What is in this picture?",
                             "images": [str(folder / f"{i}.png")], "max_tokens": 8})  # fmt: skip
            (folder / "in.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
            options = BatchOptions(
                folder / "in.jsonl", output=folder / "out.jsonl", base_url=url, model="m",
                concurrency=args.concurrency, progress="off",
            )  # fmt: skip
            result = await BatchRunner(options, client=client, stream=io.StringIO()).run()
            if result.stats.failed:
                raise SystemExit(f"{result.stats.failed} lines failed")
            del rows, result
            gc.collect()
            series.append(rss_mib())
    finally:
        await client.aclose()
    return series


def child(path: str, url: str, args: argparse.Namespace) -> None:
    """Run the batches in this process and print the RSS series as JSON."""
    from .batch_bench import _run_loop

    out: dict[str, Any] = {}

    async def main() -> None:
        if path == "generate":
            out["series"] = await generate_batches(url, args)
        else:
            with tempfile.TemporaryDirectory(prefix="client-memory-") as tmp:
                out["series"] = await runner_batches(url, args, Path(tmp))

    _run_loop(main())
    print(orjson.dumps(out).decode(), flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.client_memory", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--path", default="generate", choices=PATHS)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=1000, help="image prompts per batch")
    parser.add_argument("--side", type=int, default=64, help="image side, pixels")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--src", default=str(Path(__file__).parents[1] / "src"))
    parser.add_argument("--child", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.path, args.child, args)
        return
    mock = subprocess.Popen(
        [sys.executable, "-m", "bench.batch_bench", "--mock", "--delay", "0"],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
        cwd=Path(__file__).parents[1],
    )  # fmt: skip
    try:
        assert mock.stdout is not None
        url = f"http://127.0.0.1:{int(mock.stdout.readline())}/v1"
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([args.src, str(Path(__file__).parents[1])]),
        }
        command = [sys.executable, "-m", "bench.client_memory", "--child", url, "--path", args.path,
                   "--batches", str(args.batches), "--prompts", str(args.prompts),
                   "--side", str(args.side), "--concurrency", str(args.concurrency)]  # fmt: skip
        done = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
        series = orjson.loads(done.stdout.strip().splitlines()[-1])["series"]
    finally:
        mock.terminate()
        mock.wait(10)
    rest, *after = series
    shown = ", ".join(f"{mib:.1f}" for mib in after)
    print(f"{args.path} ({args.src}): RSS MiB at rest {rest:.1f}; after each batch: {shown}")


if __name__ == "__main__":
    main()
