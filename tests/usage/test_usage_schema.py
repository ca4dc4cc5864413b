"""The usage log's schema migrations, on SQLite and a real PostgreSQL: idempotent, in
order, all-or-nothing, safe when run at once, and tolerant of a newer database."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import pytest

from interlingua.usage import StoreError, UsageLog, connect
from interlingua.usage.schema import (
    MIGRATIONS,
    TABLE,
    VERSION_TABLE,
    Migration,
    current_version,
    migrate,
)

from .helpers import fresh_database, make_record

#: this version's schema (the later migrations below are a future release's)
LATEST = MIGRATIONS[-1].version
#: every version a database of this release has had
VERSIONS = [m.version for m in MIGRATIONS]
_REGION = Migration(LATEST + 1, "a region column", (f"ALTER TABLE {TABLE} ADD COLUMN region TEXT",))
_REGION_INDEX = Migration(
    LATEST + 2, "an index on region", (f"CREATE INDEX {TABLE}_region ON {TABLE} (region)",)
)


@pytest.fixture(params=["sqlite", "postgresql"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with fresh_database(request, request.param, tmp_path) as database_url:
        yield database_url


async def _columns(url: str) -> list[str]:
    db = connect(url)
    try:
        rows = await db.fetch(f"SELECT * FROM {TABLE} WHERE 1 = 0")
        if db.engine == "sqlite":
            info = await db.fetch(f"SELECT name FROM pragma_table_info('{TABLE}')")
        else:
            info = await db.fetch(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_name = $1 ORDER BY ordinal_position",
                TABLE,
            )
        assert rows == []
        return [row[0] for row in info]
    finally:
        await db.aclose()


async def _versions(url: str) -> list[int]:
    db = connect(url)
    try:
        return [
            row[0]
            for row in await db.fetch(f"SELECT version FROM {VERSION_TABLE} ORDER BY version")
        ]
    finally:
        await db.aclose()


async def test_migrating_twice_changes_nothing_the_second_time(url: str) -> None:
    db = connect(url)
    try:
        assert await current_version(db) == 0
        assert await migrate(db) == LATEST
        await db.execute_rows(
            "INSERT INTO interlingua_usage (at, request_id, dialect, model, status, latency, "
            "stream) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            [(1.0, "req_1", "openai", "m", 200, 0.5, False)],
        )
        assert await migrate(db) == LATEST
        assert await current_version(db) == LATEST
        assert await db.fetch(f"SELECT request_id, input_tokens FROM {TABLE}") == [("req_1", 0)]
    finally:
        await db.aclose()
    assert await _versions(url) == VERSIONS
    assert (await _columns(url))[:3] == ["id", "at", "request_id"]


async def test_reading_the_version_creates_nothing(url: str) -> None:
    db = connect(url)
    try:
        assert await current_version(db) == 0
        assert await current_version(db) == 0
        if db.engine == "sqlite":
            tables = await db.fetch("SELECT name FROM sqlite_master")
        else:
            tables = await db.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        assert tables == []
    finally:
        await db.aclose()


async def test_a_version_0_database_is_migrated_and_its_other_tables_kept(tmp_path: Path) -> None:
    # A database that already holds something else (here the stored responses' table,
    # which a user may point both at): no version table, no usage table.
    path = tmp_path / "shared.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE interlingua_responses (id TEXT PRIMARY KEY)")
    conn.execute("INSERT INTO interlingua_responses VALUES ('resp_1')")
    conn.commit()
    conn.close()
    log = UsageLog(connect(f"sqlite://{path}"))
    await log.start()
    log.record(make_record(1))
    await log.aclose()
    assert await _versions(f"sqlite://{path}") == VERSIONS
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT id FROM interlingua_responses").fetchall() == [("resp_1",)]
        assert conn.execute(f"SELECT request_id FROM {TABLE}").fetchall() == [("req_1",)]
        indexes = {row[1] for row in conn.execute(f"PRAGMA index_list('{TABLE}')")}
        assert f"{TABLE}_at" in indexes
    finally:
        conn.close()


async def test_later_migrations_apply_in_order_and_once(url: str) -> None:
    db = connect(url)
    try:
        assert await migrate(db) == LATEST
        log = UsageLog(db)
        await log.start()
        log.record(make_record(1))
        await log.flush()
        # a later release: two more migrations, given out of order
        assert await migrate(db, (*MIGRATIONS, _REGION_INDEX, _REGION)) == LATEST + 2
        assert await migrate(db, (*MIGRATIONS, _REGION, _REGION_INDEX)) == LATEST + 2
        assert await db.fetch(f"SELECT request_id, region FROM {TABLE}") == [("req_1", None)]
        described = await db.fetch(
            f"SELECT version, description FROM {VERSION_TABLE} ORDER BY version"
        )
        assert [tuple(row) for row in described] == [
            *((m.version, m.description) for m in MIGRATIONS),
            (LATEST + 1, "a region column"),
            (LATEST + 2, "an index on region"),
        ]
        # this version's writer still writes into the newer schema
        log.record(make_record(2))
        await log.aclose()
    finally:
        await db.aclose()
    assert "region" in await _columns(url)
    rows = await _versions(url)
    assert rows == [*VERSIONS, LATEST + 1, LATEST + 2]


async def test_a_failing_migration_changes_nothing(url: str) -> None:
    broken = Migration(
        LATEST + 1,
        "half of it works",
        (f"ALTER TABLE {TABLE} ADD COLUMN region TEXT", "CREATE INDEX oops ON no_such_table (x)"),
    )
    db = connect(url)
    try:
        await migrate(db)
        with pytest.raises(StoreError):
            await migrate(db, (*MIGRATIONS, broken))
        assert await current_version(db) == LATEST
    finally:
        await db.aclose()
    assert "region" not in await _columns(url)  # the first statement was rolled back too


async def test_a_database_newer_than_this_version_is_used_as_it_is(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    db = connect(url)
    try:
        await migrate(db, (*MIGRATIONS, _REGION))  # a newer interlingua was here
        with caplog.at_level("INFO", "interlingua.usage"):
            assert await migrate(db) == LATEST + 1
        assert f"newer than this interlingua's {LATEST}" in caplog.text
        log = UsageLog(db)
        await log.start()
        log.record(make_record(7))
        await log.aclose()
        assert log.written == 1 and log.failures == 0
    finally:
        await db.aclose()


async def test_concurrent_migrations_in_one_process(url: str) -> None:
    databases = [connect(url) for _ in range(4)]
    try:
        versions = await asyncio.gather(*(migrate(db) for db in databases))
    finally:
        for db in databases:
            await db.aclose()
    assert versions == [LATEST] * 4
    assert await _versions(url) == VERSIONS


async def test_an_old_log_gets_cache_writes_and_cost_in_place(url: str) -> None:
    """A log the release before cost wrote (version 1, with rows) gains the two columns
    when this version starts: its old rows read 0 cache writes and an unknown cost
    (NULL, not 0), and new rows carry both."""
    db = connect(url)
    try:
        assert await migrate(db, MIGRATIONS[:1]) == 1
        await db.execute_rows(
            "INSERT INTO interlingua_usage (at, request_id, dialect, model, status, latency, "
            "stream) VALUES ($1, $2, $3, $4, $5, $6, $7)",
            [(1.0, "req_old", "openai", "m", 200, 0.5, False)],
        )
        assert "cost_usd" not in await _columns(url)
        log = UsageLog(db)
        await log.start()  # (migrates)
        log.record(make_record(1, cache_write_tokens=7, cost_usd=Decimal("0.0123456")))
        await log.flush()
        rows = await db.fetch(
            f"SELECT request_id, cache_write_tokens, cost_usd FROM {TABLE} ORDER BY at"
        )
        assert [(r[0], r[1], None if r[2] is None else Decimal(str(r[2]))) for r in rows] == [
            ("req_old", 0, None),
            ("req_1", 7, Decimal("0.0123456")),
        ]
        await log.aclose()
    finally:
        await db.aclose()
    assert {"cache_write_tokens", "cost_usd"} <= set(await _columns(url))
    assert await _versions(url) == VERSIONS
