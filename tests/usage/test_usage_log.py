"""The usage log's writer: exact rows on SQLite and a real PostgreSQL, batching, a bounded
queue under a blocked database, failure and recovery, and two replica processes."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import sqlite3
import subprocess
import sys
import textwrap
import tracemalloc
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import astuple, fields

import interlingua
from interlingua.config import UsageConfig
from interlingua.usage import (
    Database,
    StoreError,
    UsageLog,
    connect,
    default_usage_url,
    open_usage_log,
)
from interlingua.usage.db import _chunk_sizes
from interlingua.usage.record import Record
from interlingua.usage.rows import MAX_TEXT, mended, rows_of
from interlingua.usage.schema import COLUMNS, MIGRATIONS, TABLE, VERSION_TABLE

from .helpers import fresh_database, make_record, wait_until

_SELECT = f"SELECT id, {', '.join(COLUMNS)} FROM {TABLE} ORDER BY id"


@pytest.fixture(params=["sqlite", "postgresql"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with fresh_database(request, request.param, tmp_path) as database_url:
        yield database_url


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path}/usage.db"


async def _rows(url: str) -> list[tuple[Any, ...]]:
    db = connect(url)
    try:
        return await db.fetch(_SELECT)
    finally:
        await db.aclose()


class ControlledDatabase:
    """A real database whose writes a test can hold (``gate``) or fail (``down``), and
    which counts the transactions that wrote rows."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.engine = db.engine
        self.path = getattr(db, "path", None)
        self.gate = asyncio.Event()
        self.gate.set()
        self.down = False
        self.waiting = 0
        self.sizes: list[int] = []

    async def open(self) -> None:
        await self.db.open()

    async def execute(self, sql: str, *args: Any) -> int:
        return await self.db.execute(sql, *args)

    async def fetch(self, sql: str, *args: Any) -> list[tuple[Any, ...]]:
        return await self.db.fetch(sql, *args)

    async def execute_many(self, statements: Sequence[tuple[str, Sequence[Any]]]) -> None:
        await self.db.execute_many(statements)

    async def execute_rows(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self.waiting += 1
        try:
            await self.gate.wait()
        finally:
            self.waiting -= 1
        if self.down:
            raise StoreError("the database is down (test)")
        await self.db.execute_rows(sql, rows)
        self.sizes.append(len(rows))

    def run(self, fn: Any) -> Any:  # (SQLite migrations)
        return self.db.run(fn)  # type: ignore[attr-defined]

    async def aclose(self) -> None:
        await self.db.aclose()


# --- rows ------------------------------------------------------------------------


async def test_rows_are_written_with_their_exact_values(url: str) -> None:
    log = UsageLog(connect(url), interval=3600)
    await log.start()
    full = make_record(1, endpoint="embeddings")  # a stream: every field set
    bare = make_record(2, key=None, upstream=None, upstream_model=None, status=502,
                       error="upstream_unavailable", input_tokens=0, output_tokens=0,
                       cached_tokens=0, reasoning_tokens=0)  # fmt: skip
    log.record(full)
    log.record(bare)
    await log.aclose()  # (writes what is left)
    assert log.written == 2 and log.dropped == 0 and log.pending == 0
    rows = await _rows(url)
    # (SQLite's BOOLEAN is 0/1; then the batch id, None for these, and the endpoint)
    got = [(row[0], *row[1:-3], bool(row[-3]), row[-2], row[-1]) for row in rows]
    assert got == [
        (1, 1_700_000_001.0, "req_1", "team-1", "anthropic", "model-1", "vllm",
         "Qwen/Qwen3-8B", 200, None, 101, 11, 1, 0, 0, 0, None, 0.251, 0.125, True, None,
         "embeddings"),
        (2, 1_700_000_002.0, "req_2", None, "anthropic", "model-0", None, None, 502,
         "upstream_unavailable", 0, 0, 0, 0, 0, 0, None, 0.252, None, False, None, None),
    ]  # fmt: skip


async def test_values_no_database_takes_are_mended(url: str) -> None:
    # NUL (PostgreSQL text refuses it), a lone surrogate (no UTF-8), a model name of a
    # megabyte, a count past 64 bits, a NaN duration: each would fail every flush after.
    odd = make_record(
        1, model="a\x00b" + "x" * 1_000_000, request_id="req_\ud800", input_tokens=2**70,
        latency=math.nan, status=-1,
    )  # fmt: skip
    log = UsageLog(connect(url), interval=3600)
    await log.start()
    log.record(odd)
    await log.aclose()
    assert log.written == 1 and log.rejected == 0
    (row,) = await _rows(url)
    values = dict(zip(["id", *COLUMNS], row, strict=True))
    assert values["model"] == "a\ufffdb" + "x" * (MAX_TEXT - 3)
    assert values["request_id"] == "req_?"
    assert values["input_tokens"] == 2**63 - 1
    assert values["latency"] == 0.0 and values["status"] == 0


@pytest.mark.parametrize(
    "engine_refuses",
    [
        {"request_id": "req_\ud800"},  # (no UTF-8: neither driver binds it)
        {"model": "a\x00b"},  # (PostgreSQL text holds no NUL; SQLite keeps it)
    ],
)
async def test_text_a_database_refuses_is_mended_at_the_flush(
    url: str, engine_refuses: dict[str, str]
) -> None:
    # The check on the way in leaves these to the database (usage/rows.py): a flush it
    # refuses is mended and written again, the rows beside the odd one with it.
    log = UsageLog(connect(url), interval=3600)
    await log.start()
    log.records([make_record(1), make_record(2, **engine_refuses), make_record(3)])
    await log.aclose()
    assert log.written == 3 and log.rejected == 0 and log.failures == 0
    rows = [dict(zip(["id", *COLUMNS], row, strict=True)) for row in await _rows(url)]
    assert [row["request_id"] for row in rows] == [
        "req_1",
        "req_?" if "request_id" in engine_refuses else "req_2",
        "req_3",
    ]
    if "model" in engine_refuses:
        assert rows[1]["model"] in ("a\x00b", "a\ufffdb")  # (kept by SQLite only)
        assert url.startswith("sqlite") or rows[1]["model"] == "a\ufffdb"


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"key": None, "upstream": None, "upstream_model": None, "error": "timeout"},
        {"model": "m" * 300},
        {"model": "modèle"},
        {"model": 7, "status": True},
        {"input_tokens": -1},
        {"output_tokens": 2**64},
        {"ttft": math.inf},
        {"latency": math.nan},
        {"latency": 1},  # (an int: a real column still gets a float)
        {"stream": 1},
        {"status": 2**40},
    ],
)
def test_the_batch_check_agrees_with_the_mending(fields: dict[str, object]) -> None:
    # rows_of checks a batch in one pass and mends it value by value only when the
    # check refuses it: both ways must give the same rows, and the same types, for a
    # batch the check passes, refuses, or refuses for one row only.
    odd, plain = make_record(5, **fields), make_record(6)
    for batch in ([odd], [plain, odd]):
        got = rows_of(batch)
        want = [mended(astuple(record)) for record in batch]
        assert got == want
        assert [[type(v) for v in row] for row in got] == [[type(v) for v in row] for row in want]


def test_a_records_fields_are_the_insert_columns() -> None:
    # astuple(record) is the row: the Record's fields in the columns' order
    names = {"key": "key_name", "error": "error_kind"}
    assert tuple(names.get(field.name, field.name) for field in fields(Record)) == COLUMNS
    (values,) = rows_of([make_record(4)])
    assert dict(zip(COLUMNS, values, strict=True))["request_id"] == "req_4"


async def test_a_row_the_database_refuses_is_dropped_alone(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    log = UsageLog(connect(sqlite_url), interval=3600)
    await log.start()
    # A constraint the row violates (a data error, not an outage): the flush must not
    # fail forever, nor lose the rows beside it.
    await log.db.execute(
        f"CREATE TRIGGER poison BEFORE INSERT ON {TABLE} WHEN NEW.model = 'poison' "
        "BEGIN SELECT RAISE(ABORT, 'poisoned row'); END"
    )
    for i in range(5):
        log.record(make_record(i, model="poison" if i == 2 else "m"))
    with caplog.at_level(logging.ERROR, "interlingua.usage"):
        await log.flush()
    assert log.written == 4 and log.rejected == 1 and log.pending == 0 and log.failures == 0
    assert [r[2] for r in await log.db.fetch(_SELECT)] == ["req_0", "req_1", "req_3", "req_4"]
    assert "refused a row" in caplog.text and "poisoned row" in caplog.text
    await log.aclose()


async def test_a_malformed_record_never_raises(sqlite_url: str) -> None:
    log = UsageLog(connect(sqlite_url))
    log.record(make_record(1, status="not a number"))
    assert log.rejected == 1 and log.pending == 0
    await log.aclose()


# --- batching --------------------------------------------------------------------


async def test_a_full_batch_is_written_before_the_interval(sqlite_url: str) -> None:
    db = ControlledDatabase(connect(sqlite_url))
    log = UsageLog(db, interval=3600, batch=100)
    await log.start()
    for i in range(100):
        log.record(make_record(i))
    await wait_until(lambda: log.written == 100)  # (the interval is an hour)
    assert db.sizes == [100]
    await log.aclose()


async def test_the_interval_writes_a_partial_batch(sqlite_url: str) -> None:
    db = ControlledDatabase(connect(sqlite_url))
    log = UsageLog(db, interval=0.05, batch=500)
    await log.start()
    for i in range(3):
        log.record(make_record(i))
    await wait_until(lambda: log.written == 3)
    assert db.sizes == [3]
    await log.aclose()


async def test_many_records_are_written_in_few_transactions(sqlite_url: str) -> None:
    db = ControlledDatabase(connect(sqlite_url))
    log = UsageLog(db, interval=3600, batch=500)
    await log.start()
    for burst in range(40):  # 2,000 requests finishing 50 at a time
        for i in range(50):
            log.record(make_record(burst * 50 + i))
        await asyncio.sleep(0)
    await log.aclose()
    assert sum(db.sizes) == 2000 and len(db.sizes) <= 5  # 500 at a time, or more
    rows = await _rows(sqlite_url)
    assert [row[2] for row in rows] == [f"req_{i}" for i in range(2000)]


async def test_a_batch_is_a_few_multi_row_statements(tmp_path: Path) -> None:
    # One step per row would hand the GIL to and from the event loop per row; a chunk of
    # whatever size was left would be a new statement to parse at every flush (db.py).
    db = connect(f"sqlite://{tmp_path}/rows.db")
    await db.open()
    statements: list[str] = []
    await db.run(lambda conn: conn.set_trace_callback(statements.append))
    await db.execute("CREATE TABLE t (a INTEGER, b TEXT, c REAL, d BOOLEAN)")
    written: list[tuple[Any, ...]] = []
    for size in (500, 333, 77, 1):
        rows = [(i, f"r{i}" if i % 3 else None, i / 4, i % 2 == 0) for i in range(size)]
        statements.clear()
        await db.execute_rows("INSERT INTO t (a, b, c, d) VALUES ($1, $2, $3, $4)", rows)
        counts = [s.count("), (") + 1 for s in statements if s.startswith("INSERT")]
        assert sum(counts) == size
        assert counts == sorted(counts, reverse=True)
        assert set(counts) <= {64, 32, 16, 8, 4, 2, 1}
        assert len(counts) <= size // 64 + 6
        written += rows
    got = await db.fetch("SELECT a, b, c, d FROM t ORDER BY rowid")
    await db.aclose()
    assert [(a, b, c, bool(d)) for a, b, c, d in got] == written


@pytest.mark.parametrize(
    ("total", "largest", "sizes"),
    [
        (200, 64, [64, 64, 64, 8]),
        (127, 64, [64, 32, 16, 8, 4, 2, 1]),
        (500, 62, [32] * 15 + [16, 4]),  # (999 parameters / 16 columns: old SQLite)
        (3, 1, [1, 1, 1]),
        (0, 64, []),
    ],
)
def test_chunks_are_powers_of_two(total: int, largest: int, sizes: list[int]) -> None:
    assert _chunk_sizes(total, largest) == sizes


# --- a slow or failing database --------------------------------------------------


async def test_a_blocked_database_bounds_the_queue_and_counts_drops(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    db = ControlledDatabase(connect(sqlite_url))
    log = UsageLog(db, interval=3600, batch=100, capacity=1000)
    await log.start()
    db.gate.clear()  # the database stops answering
    for i in range(100):
        log.record(make_record(i))
    await wait_until(lambda: db.waiting == 1)  # the flush of those 100 hangs
    with caplog.at_level(logging.WARNING, "interlingua.usage"):
        for i in range(100, 1100):  # fills the queue: 100 in flight + 900 waiting
            log.record(make_record(i))
        assert log.pending == 1000 and log.dropped == 100
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for i in range(1100, 101_100):  # 100,000 more while it hangs
                log.record(make_record(i))
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    assert log.pending == 1000 and log.dropped == 100_100
    assert grown < 64 * 1024, f"memory grew by {grown} bytes while dropping"
    drops = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert drops == [
        "usage log: dropped 1 rows (1 in all): 1000 rows wait for a slow or unreachable database"
    ]  # fmt: skip  (then at most once an interval)
    db.gate.set()  # the database is back: what waited is written, oldest first
    await wait_until(lambda: log.written == 1000)  # (a full queue: no need to wait an hour)
    with caplog.at_level(logging.WARNING, "interlingua.usage"):
        await log.aclose()
    assert "dropped 100099 rows (100100 in all)" in caplog.text  # (the rest, at close)
    rows = await _rows(sqlite_url)
    assert [row[2] for row in rows] == [f"req_{i}" for i in range(1000)]


async def test_a_locked_sqlite_file_delays_writes_without_losing_them(sqlite_url: str) -> None:
    log = UsageLog(connect(sqlite_url), interval=0.05)
    await log.start()
    # Another process (here: connection) holds the write lock, as a long transaction of
    # another --workers process would; our write waits on SQLite's busy timeout.
    other = sqlite3.connect(sqlite_url[len("sqlite://") :], isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        for i in range(20):
            log.record(make_record(i))
        await wait_until(lambda: log.pending == 20 and log._in_flight == 20)
        for i in range(20, 40):  # requests go on meanwhile
            log.record(make_record(i))
        assert log.pending == 40 and log.written == 0
    finally:
        other.execute("COMMIT")
        other.close()
    await wait_until(lambda: log.written == 40)
    assert log.failures == 0 and log.dropped == 0
    await log.aclose()
    assert len(await _rows(sqlite_url)) == 40


async def test_an_outage_is_logged_once_and_its_rows_written_after(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "data"
    blocker.write_text("a file where the database's directory should be")
    url = f"sqlite://{blocker}/usage.db"
    log = UsageLog(connect(url), interval=0.02)
    with caplog.at_level(logging.WARNING, "interlingua.usage"):
        await log.start()  # cannot migrate: logged, not raised
        for i in range(10):
            log.record(make_record(i))
        await wait_until(lambda: log.failures >= 5)
        assert log.pending == 10 and log.written == 0
        blocker.unlink()  # the directory can be made now
        await wait_until(lambda: log.written == 10)
        await log.aclose()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("cannot write" in m for m in messages) == 1, messages
    assert sum("again after" in m for m in messages) == 1, messages
    assert [row[2] for row in await _rows(url)] == [f"req_{i}" for i in range(10)]


async def test_failed_flushes_keep_their_rows_within_capacity(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    db = ControlledDatabase(connect(sqlite_url))
    db.down = True
    log = UsageLog(db, interval=0.02, batch=10, capacity=100)
    await log.start()
    for i in range(250):
        log.record(make_record(i))
        if i % 10 == 0:
            await asyncio.sleep(0.005)
    await wait_until(lambda: log.failures >= 3)
    assert log.pending == 100 and log.dropped == 150
    db.down = False
    await wait_until(lambda: log.pending == 0)
    await log.aclose()
    written = [int(row[2][4:]) for row in await _rows(sqlite_url)]
    assert written == list(range(100))  # the oldest kept, in order, none twice


async def test_close_waits_a_bounded_time_and_counts_what_is_lost(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    db = ControlledDatabase(connect(sqlite_url))
    log = UsageLog(db, interval=3600, batch=5)
    await log.start()
    db.gate.clear()
    for i in range(8):
        log.record(make_record(i))
    await wait_until(lambda: db.waiting == 1)
    with caplog.at_level(logging.ERROR, "interlingua.usage"):
        await log.aclose(timeout=0.1)
    assert "8 rows could not be written" in caplog.text
    assert log.dropped == 8 and log.pending == 0
    log.record(make_record(9))  # after close: dropped, never raised
    assert log.dropped == 9


# --- configuration ---------------------------------------------------------------


async def test_open_usage_log_follows_the_config(tmp_path: Path) -> None:
    assert open_usage_log(UsageConfig(enabled=False)) is None
    log = open_usage_log(UsageConfig(url=f"sqlite://{tmp_path}/u.db"), interval=0.5)
    assert log is not None and log.interval == 0.5
    assert log.db.path == f"{tmp_path}/u.db"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unsupported database URL"):
        open_usage_log(UsageConfig(url="mysql://h/db"))


def test_the_default_database_is_beside_the_stored_responses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from interlingua.usage import default_sqlite_url

    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_usage_url() == f"sqlite://{tmp_path}/interlingua/usage.db"
    assert default_sqlite_url() == f"sqlite://{tmp_path}/interlingua/responses.db"


# --- two replicas ----------------------------------------------------------------

_REPLICA = textwrap.dedent(
    """
    import asyncio, sys, time
    from interlingua.usage import Record, UsageLog, connect

    async def main(url, name, count):
        log = UsageLog(connect(url), interval=0.05, batch=100)
        print("ready", flush=True)
        sys.stdin.readline()  # "go": both replicas migrate at the same moment
        await log.start()
        for i in range(count):
            row = Record(at=time.time(), request_id=f"{name}-{i}", key=name,
                         dialect="openai", model="m")
            row.status, row.input_tokens = 200, i
            log.record(row)
            if i % 50 == 49:
                await asyncio.sleep(0.002)
        await log.aclose()
        print(log.written, log.dropped, log.failures, flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    """
)


async def test_two_replica_processes_share_one_database(url: str, tmp_path: Path) -> None:
    count = 1500
    src = str(Path(interlingua.__file__).parents[1])
    replicas = [
        subprocess.Popen(
            [sys.executable, "-c", _REPLICA, url, name, str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": src},
            text=True,
        )
        for name in ("replica-a", "replica-b")
    ]
    try:
        for replica in replicas:
            assert replica.stdout is not None and replica.stdout.readline() == "ready\n"
        for replica in replicas:
            assert replica.stdin is not None
            replica.stdin.write("go\n")
            replica.stdin.flush()
        outputs = [replica.communicate(timeout=120) for replica in replicas]
    finally:
        for replica in replicas:
            if replica.poll() is None:
                replica.kill()
                replica.wait()
    for replica, (out, err) in zip(replicas, outputs, strict=True):
        assert replica.returncode == 0, err
        assert out.split() == [str(count), "0", "0"], err
    db = connect(url)
    try:
        ids = {row[0] for row in await db.fetch(f"SELECT request_id FROM {TABLE}")}
        versions = await db.fetch(f"SELECT version FROM {VERSION_TABLE}")
        sums = await db.fetch(
            f"SELECT key_name, COUNT(*), SUM(input_tokens) FROM {TABLE} "
            "GROUP BY key_name ORDER BY key_name"
        )
    finally:
        await db.aclose()
    assert ids == {f"replica-{x}-{i}" for x in "ab" for i in range(count)}
    # migrated once, though both ran the migrations
    assert versions == [(m.version,) for m in MIGRATIONS]
    total = count * (count - 1) // 2
    assert [tuple(row) for row in sums] == [
        ("replica-a", count, total),
        ("replica-b", count, total),
    ]
