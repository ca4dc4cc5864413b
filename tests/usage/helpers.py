"""Shared by the usage-log tests: a fresh database per test on either engine, records
with every field set, and a bounded wait for a condition (no timed assertions)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path

import pytest

from interlingua.usage import Database, Record, UsageLog, connect

_names = itertools.count()


@contextlib.asynccontextmanager
async def fresh_database(
    request: pytest.FixtureRequest, engine: str, tmp_path: Path
) -> AsyncIterator[str]:
    """The URL of an empty database: a file in ``tmp_path``, or a new database on the
    session's PostgreSQL server (dropped after)."""
    if engine == "sqlite":
        yield f"sqlite://{tmp_path}/usage.db"
        return
    import asyncpg

    server = request.getfixturevalue("postgres")
    name = f"usage_{os.getpid()}_{next(_names)}"
    admin = await asyncpg.connect(server)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield server.rsplit("/", 1)[0] + "/" + name
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@contextlib.asynccontextmanager
async def logged_database(
    request: pytest.FixtureRequest, engine: str, tmp_path: Path, rows: Iterable[Record]
) -> AsyncIterator[Database]:
    """A fresh database (:func:`fresh_database`) whose usage log holds ``rows``, open."""
    async with fresh_database(request, engine, tmp_path) as url:
        log = UsageLog(connect(url))
        await log.start()
        for row in rows:
            log.record(row)
        await log.aclose()
        database = connect(url)
        try:
            yield database
        finally:
            await database.aclose()


def make_record(i: int, **fields: object) -> Record:
    """Request ``i``: every field set, from ``i`` (``fields`` override)."""
    row = Record(
        at=1_700_000_000.0 + i,
        request_id=f"req_{i}",
        key=f"team-{i % 2}",
        dialect="anthropic" if i % 3 else "openai",
        model=f"model-{i % 2}",
        stream=bool(i % 2),
    )
    row.upstream = "vllm"
    row.upstream_model = "Qwen/Qwen3-8B"
    row.status = 200
    row.input_tokens = 100 + i
    row.output_tokens = 10 + i
    row.cached_tokens = i
    row.reasoning_tokens = i // 2
    row.latency = 0.25 + i / 1000
    row.ttft = 0.125 if row.stream else None
    for name, value in fields.items():
        setattr(row, name, value)
    return row


async def wait_until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    """Poll ``condition`` until true; fail after ``timeout`` seconds (a bound, not a
    timing claim: it only stops a broken test from hanging)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)
