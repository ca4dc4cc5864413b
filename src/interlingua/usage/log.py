"""The usage log's writer: one row per request, written in batches off the request path.

:meth:`UsageLog.records` (a :class:`~.record.RecordSink`) turns the finished
:class:`~.record.Record` s into rows (usage/rows.py: one C pass over the batch, about
0.5 µs a row) and appends them to an in-memory queue: no I/O, no await, no lock. A flush
first asks the accounting for the records that ended since its last hand-over
(``catch_up``). A background task started by :meth:`UsageLog.start` writes what waits
every ``interval`` seconds (1 s), or as soon as ``batch`` rows (500) wait, in ONE
transaction per flush (:meth:`~.db.Database.execute_rows`: SQLite a few multi-row
``INSERT`` s of power-of-two sizes, 4-5 µs a row; PostgreSQL asyncpg's pipelined
``executemany``, 2.5-4 µs a row of the gateway's own CPU, its wall time level with the
best of multi-row VALUES and ``unnest`` arrays: bench/usage_writes.py). A process that
crashes loses the rows of the last interval at most.

The queue is bounded (``capacity``, 10,000 rows: a few MB, text fields are cut at
``rows.MAX_TEXT`` characters). When the database is slow or down, rows wait there and
later ones are dropped once it is full: ``records`` never blocks and memory stays
bounded. Drops are counted (:attr:`UsageLog.dropped`) and logged at most once per
interval. A failed flush keeps its rows at the head of the queue for the next one, and
is logged once per outage, with a line when the database is back.

A row the database refuses for its own sake (a data error, not a connection one) would
fail every later flush with it; the rows of such a flush are mended (a NUL or a lone
surrogate in some text, which the check on the way in leaves to the database) and
written again, then one by one, and a row still refused is dropped and logged
(:attr:`UsageLog.rejected`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..config import UsageConfig
from .db import Database, _safe, connect, default_sqlite_url
from .record import Record, nothing_to_catch_up
from .rows import Row, is_data_error, mended, rows_of
from .schema import INSERT, migrate

__all__ = ["UsageLog", "default_usage_url", "open_usage_log"]

logger = logging.getLogger("interlingua.usage")


def default_usage_url() -> str:
    """``sqlite:///<user data dir>/usage.db``, beside the stored responses."""
    return default_sqlite_url("usage.db")


def open_usage_log(config: UsageConfig, **options: Any) -> UsageLog | None:
    """The usage log ``config`` asks for (not started: see :meth:`UsageLog.start`), or
    None when it is off. ``options`` go to :class:`UsageLog` (``interval``, ``batch``,
    ``capacity``). Raises ValueError for a URL of no known engine, ImportError when
    PostgreSQL is asked for without its driver: both are startup errors."""
    if not config.enabled:
        return None
    return UsageLog(connect(config.url or default_usage_url()), **options)


class UsageLog:
    """The batched writer (see the module docstring): ``record`` from the request path,
    ``start`` and ``aclose`` from the application's lifespan.

    >>> log = UsageLog(connect("sqlite://:memory:"))
    >>> log.record(Record(at=0.0, request_id="req_1", key=None, dialect="openai", model="m"))
    >>> log.pending, log.dropped
    (1, 0)
    """

    def __init__(
        self,
        db: Database,
        *,
        interval: float = 1.0,
        batch: int = 500,
        capacity: int = 10_000,
    ) -> None:
        if interval <= 0 or batch < 1 or capacity < batch:
            raise ValueError("usage log: needs interval > 0 and 1 <= batch <= capacity")
        self.db = db
        self.interval = interval
        self.batch = batch
        self.capacity = capacity
        #: rows written, rows dropped (queue full, or recorded after close), rows the
        #: database refused (a data error), failed flushes: since this log was made
        self.written = 0
        self.dropped = 0
        self.rejected = 0
        self.failures = 0
        self._queue: list[Row] = []
        self._in_flight = 0  # rows taken by the flush being written (they still count)
        self._wake = asyncio.Event()
        self._flushing = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._migrated = False
        self._outage: tuple[float, int] | None = None  # (since, failed flushes)
        self._drops_unlogged = 0
        self._next_drop_log = 0.0
        #: hands over the records that wait to be queued (the accounting sets it)
        self.catch_up: Callable[[], None] = nothing_to_catch_up

    @property
    def pending(self) -> int:
        """Rows waiting to be written (the queue depth, for metrics)."""
        return len(self._queue) + self._in_flight

    # --- the request path ---------------------------------------------------------

    def record(self, row: Record) -> None:
        """Queue ``row`` (:meth:`records` of one)."""
        self.records((row,))

    def records(self, rows: Sequence[Record]) -> None:
        """Queue ``rows`` for the next flush; never blocks, never raises. Call it from
        the event loop's thread (the queue has no lock: it needs none there)."""
        queue = self._queue
        room = 0 if self._closed else max(0, self.capacity - len(queue) - self._in_flight)
        taken = rows[:room] if len(rows) > room else rows
        try:
            queue.extend(rows_of(taken))
        except Exception:  # (a malformed record is a bug upstream of us: never raise)
            for row in taken:
                try:
                    queue.extend(rows_of((row,)))
                except Exception:
                    logger.exception("usage log: a record could not be read; dropped")
                    self.rejected += 1
        for _ in range(len(rows) - room):
            self._drop()
        if len(queue) >= self.batch:
            self._wake.set()

    def _drop(self) -> None:
        self.dropped += 1
        self._drops_unlogged += 1
        now = time.monotonic()
        if now >= self._next_drop_log:
            self._log_drops(now)

    def _log_drops(self, now: float) -> None:
        self._next_drop_log = now + self.interval
        logger.warning(
            "usage log: dropped %d rows (%d in all): %s",
            self._drops_unlogged,
            self.dropped,
            "it is closed"
            if self._closed
            else f"{self.pending} rows wait for a slow or unreachable database",
        )
        self._drops_unlogged = 0

    # --- the background writer ----------------------------------------------------

    async def start(self) -> None:
        """Create or migrate the schema, then write in the background. A database that
        cannot be reached is logged, not raised: rows wait for it in the queue."""
        if self._task is not None:
            return
        self._closed = False
        try:
            await self._migrate()
        except Exception as exc:
            self._failed(exc)
        self._task = asyncio.create_task(self._run(), name="interlingua-usage-log")

    async def _migrate(self) -> None:
        if not self._migrated:
            await migrate(self.db)
            self._migrated = True

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_flush = loop.time() + self.interval
        while not self._closed:
            await self._wait(next_flush, early=self._outage is None)
            if self._closed:
                return
            next_flush = loop.time() + self.interval  # (from the flush's start: 1 s apart)
            await self.flush()
            if self._drops_unlogged and time.monotonic() >= self._next_drop_log:
                self._log_drops(time.monotonic())

    async def _wait(self, deadline: float, *, early: bool) -> None:
        """Until ``deadline``, or a full batch when ``early`` (not while the database
        fails: a full queue must not retry in a tight loop), or close."""
        loop = asyncio.get_running_loop()
        while not self._closed and (remaining := deadline - loop.time()) > 0:
            try:
                await asyncio.wait_for(self._wake.wait(), remaining)
            except TimeoutError:
                return
            self._wake.clear()
            if early and len(self._queue) >= self.batch:
                return

    async def flush(self) -> None:
        """Write every queued row now, in one transaction. A failure is logged (once per
        outage) and the rows are kept for the next flush; never raises StoreError."""
        self.catch_up()
        async with self._flushing:
            if not self._queue:
                return
            rows, self._queue = self._queue, []
            self._in_flight = len(rows)
            try:
                await self._write(rows)
            except BaseException as exc:
                self._queue[:0] = rows  # those not written, oldest first: within capacity
                if not isinstance(exc, Exception):
                    raise  # (cancelled: aclose counts them)
                self._failed(exc)
            else:
                self._recovered()
            finally:
                self._in_flight = 0

    async def _write(self, rows: list[Row]) -> None:
        """Write ``rows``. When it raises, ``rows`` holds those not written."""
        await self._migrate()
        if await self._written(rows):
            return
        # Refused for its values (a NUL or a lone surrogate in some text: usage/rows.py
        # leaves those to the database): mend every row and write them again, then
        # each alone (the database may refuse a row for its own reasons: a trigger).
        rows[:] = [row for row in map(self._mended, rows) if row is not None]
        if not await self._written(rows):
            await self._write_one_by_one(rows)

    async def _written(self, rows: list[Row]) -> bool:
        """Write ``rows`` in one transaction (then empty the list): False when the
        database refused them for their values (nothing was written); raises any other
        failure."""
        try:
            await self.db.execute_rows(INSERT, rows)
        except Exception as exc:
            if not is_data_error(exc):
                raise
            return False
        self.written += len(rows)
        rows.clear()
        return True

    def _mended(self, row: Row) -> Row | None:
        """``row`` mended (usage/rows.py), or None (counted as rejected) when it cannot
        be."""
        try:
            return mended(row)
        except (TypeError, ValueError, ArithmeticError) as exc:
            self.rejected += 1
            logger.error("usage log: a row could not be mended (%s); dropped: %r", exc, row)
            return None

    async def _write_one_by_one(self, rows: list[Row]) -> None:
        """Write ``rows`` each alone, dropping (and logging) those the database refuses;
        raise at the first failure of another kind."""
        done = 0
        try:
            for row in rows:
                try:
                    await self.db.execute_rows(INSERT, [row])
                except Exception as exc:
                    if not is_data_error(exc):
                        raise
                    self.rejected += 1
                    logger.error("usage log: the database refused a row (%s): %r", exc, row)
                else:
                    self.written += 1
                done += 1
        finally:
            del rows[:done]

    def _failed(self, exc: BaseException) -> None:
        self.failures += 1
        now = time.monotonic()
        if self._outage is None:
            self._outage = (now, 1)
            logger.warning(
                "usage log: cannot write to %s (%s); up to %d rows wait in memory, "
                "retrying every %g s",
                _describe(self.db),
                exc,
                self.capacity,
                self.interval,
            )
        else:
            self._outage = (self._outage[0], self._outage[1] + 1)

    def _recovered(self) -> None:
        if self._outage is not None:
            since, failures = self._outage
            self._outage = None
            logger.warning(
                "usage log: writing to %s again after %d failed attempts over %.0f s "
                "(%d rows dropped in all)",
                _describe(self.db),
                failures,
                time.monotonic() - since,
                self.dropped,
            )

    async def aclose(self, timeout: float = 10.0) -> None:
        """Stop the writer, write what is left (waiting up to ``timeout`` seconds for
        the database), and close it. Rows recorded after this are dropped."""
        self._closed = True
        self._wake.set()
        task, self._task = self._task, None
        with contextlib.suppress(TimeoutError):  # (the rows still queued are counted below)
            await asyncio.wait_for(self._finish(task), timeout)
        lost = self.pending
        if lost:
            logger.error(
                "usage log: %d rows could not be written before closing %s",
                lost,
                _describe(self.db),
            )
            self.dropped += lost
            self._queue.clear()
        if self._drops_unlogged:
            self._log_drops(time.monotonic())
        await self.db.aclose()

    async def _finish(self, task: asyncio.Task[None] | None) -> None:
        if task is not None:
            await task  # (the writer ends after the flush it may be in)
        await self.flush()


def _describe(db: Database) -> str:
    where = getattr(db, "path", None) or getattr(db, "url", None) or db.engine
    return _safe(str(where))
