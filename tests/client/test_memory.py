"""Memory after a batch: generate() and the batch runner drop the client's image cache
when a batch ends, and client.clear_cache() does it on demand, so a long-lived process
does not keep every image it ever sent (bench/client_memory.py measures the RSS)."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from interlingua.batch import BatchOptions, BatchRunner
from interlingua.client import AsyncClient, ChatResult, Client

from .conftest import FakeServer, png_bytes


def images(n: int) -> list[bytes]:
    return [png_bytes(color=(i, 0, 0)) for i in range(n)]


async def test_generate_drops_the_image_cache_when_it_ends(server: FakeServer) -> None:
    async with AsyncClient(server.url + "/v1", model="m") as c:
        await c.chat(["before", images(1)[0]])
        assert len(c.inputs.cache) == 1  # a plain call's image stays for the next call
        items = [["what is this?", png] for png in images(5)]
        results = await c.generate(items, concurrency=2)
        assert all(isinstance(r, ChatResult) for r in results)
        assert len(c.inputs.cache) == 0 and c.inputs.cache.size == 0


async def test_generate_iter_drops_it_too_even_when_left_early(server: FakeServer) -> None:
    async with AsyncClient(server.url + "/v1", model="m") as c:
        pairs = [pair async for pair in c.generate_iter([["x", p] for p in images(4)])]
        assert len(pairs) == 4 and len(c.inputs.cache) == 0
        stream = c.generate_iter([["x", p] for p in images(6)], concurrency=1)
        async with contextlib.aclosing(stream):
            await anext(stream)
        assert len(c.inputs.cache) == 0


async def test_clear_cache(server: FakeServer) -> None:
    async with AsyncClient(server.url + "/v1", model="m") as c:
        for png in images(3):
            await c.chat(["x", png])
        assert len(c.inputs.cache) == 3
        c.clear_cache()
        assert len(c.inputs.cache) == 0
        await c.chat(["x", images(1)[0]])  # encodes again, and caches again
        assert len(c.inputs.cache) == 1


def test_the_sync_client_clears_too(server: FakeServer) -> None:
    with Client(server.url + "/v1", model="m") as c:
        c.chat(["x", images(1)[0]])
        assert len(c.async_client.inputs.cache) == 1
        c.clear_cache()
        assert len(c.async_client.inputs.cache) == 0


async def test_the_batch_runner_drops_its_clients_cache(server: FakeServer, tmp_path: Path) -> None:
    rows = []
    for i, png in enumerate(images(3)):
        (tmp_path / f"{i}.png").write_bytes(png)
        rows.append(f'{{"custom_id": "r{i}", "prompt": "x", "images": ["{tmp_path}/{i}.png"]}}')
    (tmp_path / "in.jsonl").write_text("\n".join(rows) + "\n")
    options = BatchOptions(
        tmp_path / "in.jsonl", output=tmp_path / "out.jsonl", base_url=server.url + "/v1",
        model="m", progress="off",
    )  # fmt: skip
    async with AsyncClient(server.url + "/v1", model="m") as c:  # a pipeline's own client
        result = await BatchRunner(options, client=c, stream=io.StringIO()).run()
        assert result.stats.ok == 3
        assert len(c.inputs.cache) == 0
