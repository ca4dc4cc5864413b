"""Batches survive their process: real ``interlingua serve`` subprocesses, a mock upstream
that counts what it is sent, the openai SDK as the client.

* kill -9 of the gateway mid-batch, then a new one on the same store: the batch completes
  by itself, every custom_id is in the output exactly once, and no line that had
  finished (journaled when the process died) was sent to the upstream again;
* two gateways on one PostgreSQL: the one holding the batch's lease is killed, the other
  takes the batch over (after the lease runs out) and completes it, likewise;
* ``--workers 2`` on one SQLite store: each batch is run by one worker, no line twice.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import io
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from aiohttp import web

from interlingua.batches.schema import BATCHES, RESULTS
from interlingua.usage import connect

from ...usage.postgres import postgres_url
from ..gateway_process import Gateway, serve
from ..mock_upstream import MockOpenAI, mock_openai, ok

KEY = "sk-durable-team-a-0123456789"
LINES = 60


async def slow(mock: MockOpenAI, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
    await asyncio.sleep(0.15)
    return await ok(mock, request, body)


def config(upstream: str, store: str) -> dict[str, Any]:
    return {
        "upstreams": {"up": {"kind": "openai", "base_url": upstream}},
        "models": [{"name": "m", "upstream": "up"}],
        "keys": [{"name": "team-a", "key_sha256": hashlib.sha256(KEY.encode()).hexdigest()}],
        "usage": False,
        "batches": {"url": store, "lease": "2s", "concurrency": 4},
    }


def client(gateway: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=KEY, max_retries=2)


def start_batch(c: openai.OpenAI) -> str:
    data = b"".join(
        orjson.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/chat/completions",
                      "body": {"model": "m", "messages": [{"role": "user", "content": f"r{i}"}]}})
        + b"\n"
        for i in range(LINES)
    )  # fmt: skip
    file_id = c.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch").id
    return c.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    ).id


def journal(store: str, batch_id: str) -> tuple[set[str], str | None]:
    """(the custom ids journaled, the lease's holder), read straight from the store."""

    async def read() -> tuple[set[str], str | None]:
        db = connect(store)
        try:
            rows = await db.fetch(f"SELECT record FROM {RESULTS} WHERE batch_id = $1", batch_id)
            holder = await db.fetch(f"SELECT holder FROM {BATCHES} WHERE id = $1", batch_id)
        finally:
            await db.aclose()
        return {json.loads(bytes(r[0]))["custom_id"] for r in rows}, holder[0][0]

    return asyncio.run(read())


def sent(mock: MockOpenAI) -> collections.Counter[str]:
    return collections.Counter(r.body["messages"][-1]["content"] for r in mock.received)


def wait_until(check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.1)
    raise AssertionError("timed out")


def finished_exactly_once(c: openai.OpenAI, batch_id: str) -> None:
    batch = wait_until(
        lambda: (b := c.batches.retrieve(batch_id)).status in ("completed", "failed") and b
    )
    assert batch.status == "completed", batch
    assert batch.request_counts.completed == LINES
    lines = c.files.content(batch.output_file_id).text.splitlines()
    ids = [json.loads(line)["custom_id"] for line in lines]
    assert sorted(ids) == sorted(f"r{i}" for i in range(LINES))  # each once


def test_kill_9_mid_batch_then_restart_completes_exactly_once(tmp_path: Path) -> None:
    store = f"sqlite://{tmp_path}/batches.db"
    with mock_openai(default=slow) as mock:
        cfg = config(mock.base_url, store)
        with serve(tmp_path, cfg) as first:
            c = client(first)
            batch_id = start_batch(c)
            wait_until(lambda: len(journal(store, batch_id)[0]) >= 10)
            os.killpg(first.proc.pid, signal.SIGKILL)
            first.proc.wait(timeout=10)
        done_before, _ = journal(store, batch_id)
        assert 10 <= len(done_before) < LINES
        with serve(tmp_path, cfg) as second:
            finished_exactly_once(client(second), batch_id)
        counts = sent(mock)
    assert all(counts[cid] == 1 for cid in done_before), counts  # never sent again
    assert set(counts) == {f"r{i}" for i in range(LINES)}


@pytest.fixture(scope="module")
def postgres() -> Any:
    pytest.importorskip("asyncpg")
    with postgres_url() as url:
        yield url


def test_another_process_takes_over_a_dead_holders_batch(tmp_path: Path, postgres: str) -> None:
    with mock_openai(default=slow) as mock:
        cfg = config(mock.base_url, postgres)
        with serve(tmp_path, cfg) as a, serve(tmp_path, cfg) as b:
            c = client(a)
            batch_id = start_batch(c)
            wait_until(lambda: len(journal(postgres, batch_id)[0]) >= 10)
            _, holder = journal(postgres, batch_id)
            assert holder is not None
            pid = int(holder.split(":")[1])
            dead, alive = (a, b) if pid == a.proc.pid else (b, a)
            assert pid == dead.proc.pid
            os.killpg(dead.proc.pid, signal.SIGKILL)
            dead.proc.wait(timeout=10)
            done_before, _ = journal(postgres, batch_id)
            finished_exactly_once(client(alive), batch_id)
        counts = sent(mock)
    assert all(counts[cid] == 1 for cid in done_before), counts
    assert set(counts) == {f"r{i}" for i in range(LINES)}


def test_workers_share_the_store_and_run_each_batch_once(tmp_path: Path) -> None:
    store = f"sqlite://{tmp_path}/batches.db"
    with mock_openai(default=slow) as mock:
        with serve(tmp_path, config(mock.base_url, store), workers=2) as gateway:
            c = client(gateway)
            batch_ids = [start_batch(c) for _ in range(2)]
            for batch_id in batch_ids:
                finished_exactly_once(c, batch_id)
        counts = sent(mock)
    assert counts == {f"r{i}": 2 for i in range(LINES)}  # (two batches of the same lines)
