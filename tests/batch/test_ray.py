"""The Ray engine on a local Ray instance against the scripted server on 127.0.0.1.

Slow (``pytest -m slow``): Ray takes seconds to start its workers and actors. One local
instance (2 CPUs, no dashboard) serves the module and is shut down after it.
"""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray
from aiohttp import web

from interlingua.batch import BatchOptions, BatchResult
from interlingua.batch.files import Columns
from interlingua.batch.parquet import read_records
from interlingua.batch.ray import RayBatch, RaySettings, map_requests, shared_limit_name
from interlingua.batch.ray_limits import start_keeper
from interlingua.limits import SharedCounters
from tests.redis_server import needs_redis_server, redis_server

from ..embeddings_server import EmbeddingsServer, vector_for
from .conftest import FakeChatServer, read_output, simple_rows, write_jsonl
from .twins import comparable, mixed_rows, single

pytestmark = [
    pytest.mark.slow,
    # Ray Data warns about its own deprecated settings while it copies its context.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray"),
]


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
    try:
        yield
    finally:
        ray.shutdown()


def on_ray(server: FakeChatServer, inp: Path, out: Path, **kw: Any) -> BatchResult:
    settings = kw.pop("settings", RaySettings(actors=2, batch_size=8))
    options = BatchOptions(inp, out, base_url=server.v1, model="m", progress="off", **kw)
    return RayBatch(options, settings, stream=io.StringIO()).run()


def test_results_equal_the_single_process_runners(server: FakeChatServer, tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", mixed_rows())
    with open(inp, "ab") as f:
        f.write(b"not json at all\n")
    one = single(server, inp, tmp_path / "one.jsonl", retries=0, system="be brief")
    server.attempts.clear()  # flaky7 fails its first attempt again
    many = on_ray(server, inp, tmp_path / "ray.jsonl", retries=0, system="be brief")
    expected = read_output(tmp_path / "one.jsonl")
    got = read_output(tmp_path / "ray.jsonl")
    assert len(got) == len(expected) == 44
    assert comparable(got) == comparable(expected)
    for a, b in ((one.stats, many.stats),):
        assert (a.ok, a.failed, a.failures) == (b.ok, b.failed, b.failures)
        assert (a.tokens_in, a.tokens_out) == (b.tokens_in, b.tokens_out)
    assert many.stats.ok == 38 and not many.interrupted


def test_parquet_in_and_out_with_named_columns(server: FakeChatServer, tmp_path: Path) -> None:
    rows = [{"qid": i, "question": f"q{i}", "note": "ignored"} for i in range(30)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    columns = Columns(id="qid", prompt="question")
    inp = tmp_path / "in.parquet"
    single(server, inp, tmp_path / "one.parquet", columns=columns)
    server.attempts.clear()  # (the request ids count attempts)
    result = on_ray(server, inp, tmp_path / "ray.parquet", columns=columns)
    expected = list(read_records(tmp_path / "one.parquet"))
    got = list(read_records(tmp_path / "ray.parquet"))
    assert comparable(got) == comparable(expected)
    assert sorted(r["custom_id"] for r in got) == sorted(str(i) for i in range(30))
    assert result.stats.ok == 30


def test_a_resume_skips_the_ids_already_done(server: FakeChatServer, tmp_path: Path) -> None:
    rows = simple_rows(48)
    out = tmp_path / "out.jsonl"
    on_ray(server, write_jsonl(tmp_path / "half.jsonl", rows[:20]), out)
    assert sorted(server.started) == sorted(f"r{i}" for i in range(20))
    server.started.clear()
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    result = on_ray(server, inp, out)
    assert sorted(server.started) == sorted(f"r{i}" for i in range(20, 48))
    assert (result.stats.skipped, result.stats.ok, result.stats.done_before) == (20, 28, 20)
    ids = [r["custom_id"] for r in read_output(out)]
    assert sorted(ids) == sorted(r["custom_id"] for r in rows)  # each once
    server.started.clear()
    result = on_ray(server, inp, out)  # nothing left to do
    assert server.started == [] and result.stats.done == 0 and result.stats.skipped == 48
    assert len(read_output(out)) == 48


def test_embeddings_lines_on_ray_fill_the_vector_column(tmp_path: Path) -> None:
    """/v1/embeddings lines run on Ray as in one process (the same call per line, the
    same output): the vectors land in the Parquet output's ``embedding`` column."""
    rows = [{"custom_id": f"e{i}", "method": "POST", "url": "/v1/embeddings",
             "body": {"input": f"text {i}"}} for i in range(30)]  # fmt: skip
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    with EmbeddingsServer() as srv:
        result = on_ray(srv, inp, tmp_path / "out.parquet")
    table = pq.read_table(tmp_path / "out.parquet")
    ids, vectors = table.column("custom_id").to_pylist(), table.column("embedding").to_pylist()
    assert dict(zip(ids, vectors, strict=True)) == {
        f"e{i}": vector_for(f"text {i}") for i in range(30)
    }
    assert result.stats.ok == 30


class TimedServer(FakeChatServer):
    """The scripted server, noting when each request arrives."""

    def __init__(self) -> None:
        super().__init__()
        self.arrivals: list[float] = []
        self._times = threading.Lock()

    async def _handle(self, request: web.Request) -> web.Response:
        with self._times:
            self.arrivals.append(time.monotonic())
        return await super()._handle(request)


def test_a_shared_rate_limit_holds_across_actors(tmp_path: Path) -> None:
    """rpm 6 on a minute that passes 12x faster (5 s): 21 rows over 2 actors need four
    windows; per-actor limits would let 12 through in one. (Two requests in flight per
    actor, so one actor cannot take every block before the other has started.)"""
    server = TimedServer()
    server.start()
    try:
        keeper = start_keeper(6, None, speed=12.0)
        rows = [{"custom_id": f"r{i}", "prompt": f"r{i}"} for i in range(21)]
        dataset = ray.data.from_items(rows, override_num_blocks=6)
        options = BatchOptions(
            tmp_path / "unused", tmp_path / "unused.jsonl", base_url=server.v1, model="m",
            requests_per_minute=6, retries=0, concurrency=2,
        )  # fmt: skip
        results = map_requests(dataset, options, RaySettings(actors=2, batch_size=2), keeper=keeper)
        started = time.monotonic()
        records = [
            orjson.loads(row["record"])
            for batch in results.iter_batches(batch_size=None, batch_format="pyarrow")
            for row in batch.to_pylist()
            if row["record"] is not None
        ]
        wall = time.monotonic() - started
        admitted = ray.get(keeper.admitted.remote())
    finally:
        server.stop()
    assert sorted(r["custom_id"] for r in records) == sorted(r["custom_id"] for r in rows)
    assert all(r["error"] is None for r in records)
    assert admitted == 21
    assert len({r["id"][:26] for r in records}) == 2  # both actors sent requests
    arrivals = sorted(server.arrivals)
    # No 5 s span (less a margin for the trip from admission to the server) holds more
    # than 6 arrivals: the 7th waited for the 1st to leave the shared window.
    for i in range(len(arrivals) - 6):
        assert arrivals[i + 6] - arrivals[i] >= 4.5, arrivals
    assert wall >= 14.0


def test_the_cli_runs_on_ray_and_prints_the_resume_command(
    server: FakeChatServer, tmp_path: Path
) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", simple_rows(25))
    out = tmp_path / "out.parquet"
    address = ray.get_runtime_context().gcs_address
    args = [
        sys.executable, "-m", "interlingua.cli", "batch", "run", str(inp), "-o", str(out),
        "--base-url", server.v1, "--model", "m", "--engine", "ray", "--address", address,
        "--actors", "2", "--concurrency", "4", "--progress", "log",
    ]  # fmt: skip
    result = subprocess.run(args, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "batch: 25 lines in" in result.stderr and "25 ok, 0 failed" in result.stderr
    assert sorted(r["custom_id"] for r in read_records(out)) == sorted(f"r{i}" for i in range(25))


@needs_redis_server
def test_with_a_state_url_the_actors_count_in_redis(server: FakeChatServer, tmp_path: Path) -> None:
    """rpm 6 kept in Redis: after 6 requests from two actors, the window that anyone
    sharing the server's limit sees in Redis is full."""
    with redis_server() as redis:
        rows = [{"custom_id": f"r{i}", "prompt": f"r{i}"} for i in range(6)]
        dataset = ray.data.from_items(rows, override_num_blocks=3)
        options = BatchOptions(
            tmp_path / "unused", tmp_path / "unused.jsonl", base_url=server.v1, model="m",
            requests_per_minute=6, retries=0, concurrency=2,
        )  # fmt: skip
        settings = RaySettings(actors=2, batch_size=2, state_url=redis.url)
        results = map_requests(dataset, options, settings)
        records = [
            orjson.loads(row["record"])
            for batch in results.iter_batches(batch_size=None, batch_format="pyarrow")
            for row in batch.to_pylist()
            if row["record"] is not None
        ]
        assert sorted(r["custom_id"] for r in records) == [f"r{i}" for i in range(6)]

        async def window_full() -> bool:
            counters = SharedCounters(redis.url)
            try:
                name = shared_limit_name(f"{server.v1}/chat/completions")
                got = await counters.limit_state(name, 6).acquire(0)
                return isinstance(got, float) and counters.health.up
            finally:
                await counters.aclose()

        assert asyncio.run(window_full())
