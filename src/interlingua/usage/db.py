"""A database URL -> a small async SQL backend: SQLite (embedded default) or PostgreSQL.

The stored Responses objects (and, later, the usage log) need a handful of statements,
not an ORM: :class:`Database` runs one statement (``execute``) or one query (``fetch``),
each written once in the SQL both engines accept, with ``$1``-style parameters
(PostgreSQL's own; SQLite reads ``?1``, to which they are rewritten).

* ``sqlite:///abs/path.db`` (``sqlite://rel.db`` relative to the working directory,
  ``~`` expanded; ``sqlite://:memory:`` for a throwaway) -- the stdlib ``sqlite3`` with
  one connection in WAL mode, run in one worker thread so the event loop never waits on
  the disk; statements from every task are serialized there (SQLite has one writer
  anyway). Other processes (``--workers N``) share the file through WAL and a busy
  timeout.
* ``postgresql://user:pass@host:port/db`` (or ``postgres://``) -- asyncpg with a small
  pool (docs/decisions.md says why asyncpg). The driver is the optional extra
  ``interlingua[postgres]``; asking for PostgreSQL without it fails at startup, naming
  the extra.

Errors: every database failure is raised as :class:`StoreError` (the driver's own
exception chained), so callers handle one type whatever the backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import os
import re
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ..config import user_data_dir

__all__ = [
    "Database",
    "PostgresDatabase",
    "SQLiteDatabase",
    "Statement",
    "StoreError",
    "WriteBatcher",
    "connect",
    "default_sqlite_url",
    "sqlite_path",
]

Row = tuple[Any, ...]
T = TypeVar("T")
#: one statement and its arguments
Statement = tuple[str, Sequence[Any]]
_PARAM = re.compile(r"\$(\d+)")
_BUSY_TIMEOUT_MS = 5000
#: seconds to connect to PostgreSQL, and to wait before trying again after a failure
#: (a database that is down must not hold every request for a connect timeout)
CONNECT_TIMEOUT = 5.0
RETRY_AFTER = 5.0
#: seconds one PostgreSQL statement may run
COMMAND_TIMEOUT = 10.0


class StoreError(Exception):
    """A database operation failed (connection refused, disk full, bad schema...)."""


class Database(Protocol):
    """What the stores need of a database. Statements use ``$1``-style parameters."""

    #: "sqlite" or "postgresql"
    engine: str

    async def open(self) -> None:
        """Connect (idempotent); StoreError if the database cannot be reached."""

    async def execute(self, sql: str, *args: Any) -> int:
        """Run one statement; the number of rows it changed."""

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        """Run one query; its rows as tuples."""

    async def execute_many(self, statements: Sequence[Statement]) -> None:
        """Run ``(sql, args)`` statements in order in ONE transaction: all or none."""

    async def execute_rows(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement once per args tuple of ``rows``, in ONE transaction: for
        SQLite an ``INSERT`` becomes a few multi-row statements, for asyncpg its own
        pipelined ``executemany``."""

    async def aclose(self) -> None:
        """Close the connection(s); the database may be opened again."""


_INSERT_VALUES = re.compile(r"^INSERT INTO (\w+) \(([\w, ]+)\) VALUES \(([$\d, ]+)\)$")


#: rows per multi-row ``INSERT`` at most: bigger statements hold the GIL longer while
#: their parameters are bound (the event loop waits), for little gain past this
_MAX_CHUNK_ROWS = 64


@functools.lru_cache(maxsize=32)
def _insert_columns(sql: str) -> tuple[str, str, int] | None:
    """``INSERT INTO t (a, b) VALUES ($1, $2)`` -> ("t", "a, b", 2); None for any other
    statement (or one whose parameters are not $1..$n in order)."""
    match = _INSERT_VALUES.match(sql.strip())
    if match is None:
        return None
    table, columns, marks = match.groups()
    names = [c.strip() for c in columns.split(",")]
    if [m.strip() for m in marks.split(",")] != [f"${i}" for i in range(1, len(names) + 1)]:
        return None
    return table, ", ".join(names), len(names)


@functools.lru_cache(maxsize=256)
def _rows_insert(table: str, columns: str, width: int, count: int) -> str:
    """One ``INSERT`` of ``count`` rows: ``VALUES (?, ?), (?, ?), ...``."""
    row = "(" + ", ".join("?" * width) + ")"
    return f"INSERT INTO {table} ({columns}) VALUES " + ", ".join([row] * count)


def _chunk_sizes(total: int, largest: int) -> list[int]:
    """``total`` rows as statements of power-of-two row counts, biggest first, none over
    ``largest``: 200 at 64 -> [64, 64, 64, 8]. Every flush then reuses the same few
    prepared statements; cutting at ``largest`` with a remainder of whatever was left
    (14 rows, then 20, then 3...) made SQLite parse and compile a new statement of
    hundreds of parameters at nearly every flush (~15 % of the insert's instructions)."""
    top = 1
    while top * 2 <= largest:
        top *= 2
    sizes = [top] * (total // top)
    rest = total % top
    while rest:
        size = 1 << (rest.bit_length() - 1)
        sizes.append(size)
        rest -= size
    return sizes


def _insert_in_chunks(conn: sqlite3.Connection, sql: str, rows: Sequence[Sequence[Any]]) -> bool:
    """Insert ``rows`` with multi-row ``INSERT`` statements (:func:`_chunk_sizes`);
    False (nothing done) when ``sql`` is not a plain one-row ``INSERT``.

    ``executemany`` steps the statement once per row, and sqlite3 lets go of the GIL and
    takes it back around every step: from a writer thread beside a busy event loop each
    of those is a thread handoff, which cost the loop more than the insert itself (the
    usage log at a few thousand rows a second). A statement of 64 rows is one step for
    all of them. Measured (500-row batches into the usage table with an index on
    ``at`` and one on two text columns, CPU time): 4-5 µs a row, where ``INSERT ...
    SELECT json_extract(...) FROM json_each(?)`` (this function's predecessor: one step
    per batch, but every column of every row parsed out of JSON again) cost 11-13 µs and
    ``executemany`` 6-8 µs plus the handoffs.
    """
    shape = _insert_columns(sql)
    if shape is None:
        return False
    table, columns, width = shape
    # (SQLite before 3.32 binds at most 999 parameters to a statement)
    limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    start = 0
    for size in _chunk_sizes(len(rows), max(1, min(_MAX_CHUNK_ROWS, limit // width))):
        values = list(itertools.chain.from_iterable(rows[start : start + size]))
        conn.execute(_rows_insert(table, columns, width, size), values)
        start += size
    return True


def default_sqlite_url(name: str = "responses.db") -> str:
    """``sqlite:///<data dir>/interlingua/<name>`` (the stored responses by default; the
    usage log is ``usage.db`` beside them): ``$XDG_DATA_HOME`` when set, else
    ``~/.local/share`` (the XDG base-directory default)."""
    return "sqlite://" + str(user_data_dir() / name)


def sqlite_path(url: str) -> str:
    """The file a ``sqlite://`` URL names (``:memory:`` kept as is)."""
    path = url[len("sqlite://") :]
    if path.startswith("/:memory:"):
        path = path[1:]
    return path if path == ":memory:" else os.path.expanduser(path)


def connect(url: str) -> Database:
    """The backend for ``url`` (not yet connected: see :meth:`Database.open`).

    Raises ValueError for a URL of no known engine, and ImportError naming the extra
    when PostgreSQL is asked for without its driver.
    """
    if url.startswith("sqlite://"):
        return SQLiteDatabase(sqlite_path(url))
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresDatabase(url)
    raise ValueError(f"unsupported database URL {url!r} (expected sqlite:// or postgresql://)")


#: None's adapter: a C call that answers None whatever it is given (a lookup in an empty
#: dict), where a Python ``lambda value: value`` cost each None of each row a Python
#: frame (~400 instructions; a row has three or four: an error kind, a first byte's
#: time, a cost)
_NOTHING: dict[object, None] = {}
_NULL = _NOTHING.get


def _bind_plainly() -> None:
    """Bind None and bool without sqlite3's search for an adapter.

    sqlite3 "adapts" every parameter that is not exactly an int, float, str or bytearray:
    a None or a bool (a usage row has a few) costs a registry lookup, then an
    ``__adapt__`` lookup on the protocol type that fails with a formatted AttributeError
    -- ~2,000 instructions a parameter (callgrind), a sixth of the gateway's work for the
    row. A registered adapter ends the search at the registry and binds what sqlite3
    binds anyway (NULL; the integer 0 or 1). The registry is the module's, so this holds
    for every connection of the process, with the same results.
    """
    sqlite3.register_adapter(type(None), _NULL)
    sqlite3.register_adapter(bool, int)
    # A cost (usage/cost.py) into a NUMERIC column, which keeps a non-integer as a float
    # whatever it is given: the nearest double, as the text's conversion would make it
    sqlite3.register_adapter(Decimal, float)


class SQLiteDatabase:
    """SQLite through the stdlib, off the event loop. See the module docstring."""

    engine = "sqlite"

    def __init__(self, path: str) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        # One thread: the connection is used by one thread at a time, statements are
        # serialized (no "database is locked" between our own tasks).
        self._executor: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    async def open(self) -> None:
        if self._conn is None:
            await self._run(self._connect)

    def _connect(self) -> None:
        if self._conn is not None:
            return
        _bind_plainly()
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.path, timeout=_BUSY_TIMEOUT_MS / 1000, check_same_thread=False,
            isolation_level=None,  # autocommit: each statement is its own transaction
        )  # fmt: skip
        try:
            _enter_wal(conn)
            # WAL + NORMAL: durable across a process crash, at most the last commits
            # lost on power loss; the usual setting for WAL (sqlite.org/pragma.html).
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    async def _run(self, fn: Any, *args: Any) -> Any:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="interlingua-sqlite")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn, *args)
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite {self.path}: {exc}") from exc
        except OSError as exc:
            raise StoreError(f"SQLite {self.path}: {exc}") from exc

    def _sql(self, sql: str) -> str:
        return _PARAM.sub(r"?\1", sql)

    def _execute(self, sql: str, args: Sequence[Any]) -> int:
        self._connect()
        assert self._conn is not None
        return self._conn.execute(self._sql(sql), args).rowcount

    def _fetch(self, sql: str, args: Sequence[Any]) -> list[Row]:
        self._connect()
        assert self._conn is not None
        return self._conn.execute(self._sql(sql), args).fetchall()

    def _execute_many(self, statements: Sequence[Statement]) -> None:
        self._connect()
        conn = self._conn
        assert conn is not None
        conn.execute("BEGIN")
        try:
            for sql, args in statements:
                conn.execute(self._sql(sql), args)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    async def execute(self, sql: str, *args: Any) -> int:
        result: int = await self._run(self._execute, sql, args)
        return result

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        result: list[Row] = await self._run(self._fetch, sql, args)
        return result

    async def execute_many(self, statements: Sequence[Statement]) -> None:
        await self._run(self._execute_many, statements)

    def _execute_rows(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        self._connect()
        conn = self._conn
        assert conn is not None
        conn.execute("BEGIN")
        try:
            if len(rows) < 2 or not _insert_in_chunks(conn, sql, rows):
                conn.executemany(self._sql(sql), rows)
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    async def execute_rows(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        await self._run(self._execute_rows, sql, rows)

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(connection)`` in the database thread, between other statements: for what
        the methods above cannot say (a migration under ``BEGIN IMMEDIATE`` that reads
        the schema version first). The connection is in autocommit mode; ``fn`` opens
        and ends its own transaction. Its sqlite3 errors are raised as StoreError."""

        def call() -> T:
            self._connect()
            assert self._conn is not None
            return fn(self._conn)

        result: T = await self._run(call)
        return result

    async def aclose(self) -> None:
        executor, self._executor = self._executor, None
        if executor is None:
            return
        conn, self._conn = self._conn, None
        if conn is not None:
            await asyncio.get_running_loop().run_in_executor(executor, conn.close)
        executor.shutdown(wait=False)


def _enter_wal(conn: sqlite3.Connection) -> None:
    """``PRAGMA journal_mode=WAL``, waiting for the lock it needs. Turning a new file to
    WAL takes an exclusive lock for which SQLite does not call the busy handler: two
    processes (``--workers N``) opening a new database at once get "database is locked"
    at once. Once the file is in WAL mode the pragma needs no such lock."""
    deadline = time.monotonic() + _BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            busy = getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY
            if not busy or time.monotonic() > deadline:
                raise
        time.sleep(0.01)


class PostgresDatabase:
    """PostgreSQL through an asyncpg pool, opened lazily and again after a failure."""

    engine = "postgresql"

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 10) -> None:
        try:
            import asyncpg  # noqa: F401  # (the optional extra: checked now, used at open)
        except ImportError as exc:
            raise ImportError(
                "a postgresql:// URL needs the asyncpg driver: pip install 'interlingua[postgres]'"
            ) from exc
        self.url = url
        self._sizes = (min_size, max_size)
        self._pool: Any = None
        self._opening: asyncio.Lock | None = None
        self._failed: tuple[float, StoreError] | None = None  # (when, why) of the last try

    async def open(self) -> None:
        if self._pool is not None:
            return
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._pool is not None:
                return
            loop = asyncio.get_running_loop()
            if self._failed is not None and loop.time() - self._failed[0] < RETRY_AFTER:
                raise self._failed[1]
            import asyncpg

            try:
                self._pool = await asyncpg.create_pool(
                    self.url,
                    min_size=self._sizes[0],
                    max_size=self._sizes[1],
                    timeout=CONNECT_TIMEOUT,
                    command_timeout=COMMAND_TIMEOUT,
                )
            except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                error = StoreError(f"PostgreSQL {_safe(self.url)}: {exc}")
                self._failed = (loop.time(), error)
                raise error from exc
            self._failed = None

    async def execute(self, sql: str, *args: Any) -> int:
        status = await self._call("execute", sql, args)
        # asyncpg returns the command tag, e.g. "DELETE 3" / "INSERT 0 1".
        last = str(status).rsplit(" ", 1)[-1]
        return int(last) if last.isdigit() else 0

    async def fetch(self, sql: str, *args: Any) -> list[Row]:
        records = await self._call("fetch", sql, args)
        return [tuple(record) for record in records]

    async def execute_many(self, statements: Sequence[Statement]) -> None:
        await self.open()
        import asyncpg

        try:
            async with self._pool.acquire() as conn, conn.transaction():
                for sql, args in statements:
                    await conn.execute(sql, *args)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StoreError(f"PostgreSQL {_safe(self.url)}: {exc}") from exc

    async def execute_rows(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        async with self.connection() as conn, conn.transaction():
            await conn.executemany(sql, rows)

    @contextlib.asynccontextmanager
    async def connection(self) -> AsyncIterator[Any]:
        """One pooled asyncpg connection, for what the methods above cannot say (a
        migration reading the schema version under an advisory lock, in a transaction).
        The driver's errors, the block's included, are raised as StoreError."""
        await self.open()
        import asyncpg

        try:
            async with self._pool.acquire() as conn:
                yield conn
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StoreError(f"PostgreSQL {_safe(self.url)}: {exc}") from exc

    async def _call(self, method: str, sql: str, args: Sequence[Any]) -> Any:
        await self.open()
        import asyncpg

        try:
            return await getattr(self._pool, method)(sql, *args)
        except (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StoreError(f"PostgreSQL {_safe(self.url)}: {exc}") from exc

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()


class WriteBatcher:
    """Writes of many tasks committed together, in one transaction per batch.

    A commit costs more than the rows it writes (SQLite: ~40 µs for one row alone, ~10 µs
    a row fifty at a time; PostgreSQL: a round trip), and on SQLite each write is also a
    hop to the database thread. :meth:`submit` queues a write and waits until it is
    committed; whatever queues while a batch is being written goes in the next one, so a
    busy gateway commits once per batch and a quiet one once per write, at no added
    delay. A failed batch fails every write in it (a write's own error cannot be told
    apart in one transaction).
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        self._pending: list[tuple[Sequence[Statement], asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def submit(self, statements: Sequence[Statement]) -> None:
        """Commit ``statements`` (in one transaction with other writes); StoreError when
        the batch failed."""
        done = asyncio.get_running_loop().create_future()
        self._pending.append((statements, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write())
        await done

    async def _write(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                await self.db.execute_many([s for statements, _ in batch for s in statements])
            except Exception as exc:  # (StoreError; any other is a bug, reported alike)
                for _, done in batch:
                    if not done.done():  # (a waiter that was cancelled)
                        done.set_exception(exc)
            else:
                for _, done in batch:
                    if not done.done():
                        done.set_result(None)

    async def flush(self) -> None:
        """Wait for every queued write (before closing the database)."""
        writer = self._writer
        if writer is not None and not writer.done():
            await asyncio.wait({writer})


def _safe(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    return re.sub(r"(//[^:/@]+):[^@/]*@", r"\1:***@", url)
