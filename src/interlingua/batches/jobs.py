"""Batch API batches: their rows, their leases and the journal of their results.

A batch is created ``validating``; the process that holds its lease (:meth:`JobStore.claim`)
validates it (``failed``, or ``in_progress`` with its total), runs its lines, journaling
each finished one (:meth:`JobStore.journal`: one row per input line, never two), then
makes its output and error files from the journal (``finalizing``) and ends it
(``completed``, ``cancelled`` or ``expired``).

Leases: ``holder`` names the process running a batch and ``lease_until`` is when its
lease runs out unless renewed (:meth:`JobStore.renew`, the holder's heartbeat). A
process claims a batch that is not over whose lease is free, run out, or its own (a
restart of the same process resumes by itself); a claim is one conditional ``UPDATE``,
so that two processes racing for one batch never both get it. A holder's status changes
are fenced by its name: once another process has taken a batch over, the old holder's
writes to its row change nothing.

Owners as for files (batches/files.py): every read by a client names its owner, and
another owner's batch is indistinguishable from a missing one. The operator's reads
(:meth:`JobStore.any_page`, the CLI) see every batch.
"""

from __future__ import annotations

import secrets
import string
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from ..usage import Database
from ..usage.db import Statement
from .schema import BATCHES, RESULTS

__all__ = [
    "ACTIVE",
    "ENDED",
    "Counts",
    "Job",
    "JobStore",
    "LineResult",
    "new_batch_id",
]

#: the statuses of a batch some process still has to work on
ACTIVE = ("validating", "in_progress", "finalizing", "cancelling")
#: the statuses a batch ends in
ENDED = ("completed", "failed", "expired", "cancelled")
_ALPHABET = string.ascii_letters + string.digits
_TIMES = (
    "created_at", "expires_at", "in_progress_at", "finalizing_at", "completed_at",
    "failed_at", "expired_at", "cancelling_at", "cancelled_at",
)  # fmt: skip
_COUNTS = "total, completed, failed, input_tokens, output_tokens, cached_tokens, reasoning_tokens"
_COLUMNS = (
    "id, owner, endpoint, input_file_id, completion_window, status, model, "
    f"{', '.join(_TIMES)}, output_file_id, error_file_id, {_COUNTS}, errors, metadata, "
    "holder, lease_until, seq"
)
#: results read from the journal at a time, when a file is made of them
_PAGE = 500


def new_batch_id() -> str:
    """``batch_`` and 24 random letters and digits."""
    return "batch_" + "".join(secrets.choice(_ALPHABET) for _ in range(24))


@dataclass(frozen=True, slots=True)
class Counts:
    """A batch's finished lines and their tokens."""

    completed: int = 0
    failed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0


@dataclass(frozen=True, slots=True)
class LineResult:
    """One finished input line: its Batch output line (``record``, with its newline)."""

    line: int
    failed: bool
    record: bytes
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Job:
    """One batch's row (:meth:`as_object`: the API's ``batch`` object)."""

    id: str
    owner: str
    endpoint: str
    input_file_id: str
    completion_window: str
    status: str
    model: str | None
    times: dict[str, int | None]
    output_file_id: str | None
    error_file_id: str | None
    total: int
    counts: Counts
    errors: list[dict[str, Any]] | None
    metadata: dict[str, str] | None
    holder: str | None
    lease_until: float | None

    @property
    def expires_at(self) -> int:
        """When the completion window ends (Unix seconds)."""
        return self.times["expires_at"] or 0

    def as_object(self) -> dict[str, Any]:
        """The API's ``batch`` object (its files named only once the batch has ended:
        while it finalizes they are being written)."""
        c = self.counts
        ended = self.status in ENDED
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "model": self.model,
            "errors": None if self.errors is None else {"object": "list", "data": self.errors},
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id if ended else None,
            "error_file_id": self.error_file_id if ended else None,
            **self.times,
            "request_counts": {"total": self.total, "completed": c.completed, "failed": c.failed},
            "usage": {
                "input_tokens": c.input_tokens,
                "input_tokens_details": {"cached_tokens": c.cached_tokens},
                "output_tokens": c.output_tokens,
                "output_tokens_details": {"reasoning_tokens": c.reasoning_tokens},
                "total_tokens": c.input_tokens + c.output_tokens,
            },
            "metadata": self.metadata,
        }


class JobStore:
    """The batches of one database (see the module docstring)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    # -- a client's ------------------------------------------------------------------

    async def create(
        self,
        owner: str,
        endpoint: str,
        input_file_id: str,
        window: str,
        window_seconds: float,
        metadata: dict[str, str] | None,
    ) -> Job:
        """A new batch of ``owner``'s, ``validating``."""
        now = int(time.time())
        batch_id = new_batch_id()
        await self.db.execute(
            f"INSERT INTO {BATCHES} (id, owner, endpoint, input_file_id, completion_window, "
            "status, created_at, expires_at, metadata) "
            "VALUES ($1, $2, $3, $4, $5, 'validating', $6, $7, $8)",
            batch_id, owner, endpoint, input_file_id, window, now,
            now + int(window_seconds), None if metadata is None else orjson.dumps(metadata).decode(),
        )  # fmt: skip
        job = await self.get(batch_id)
        assert job is not None
        return job

    async def get(self, batch_id: str, owner: str | None = None) -> Job | None:
        """The batch ``batch_id`` (``owner``'s: None when it is another's); None when
        it is not there."""
        rows = await self.db.fetch(f"SELECT {_COLUMNS} FROM {BATCHES} WHERE id = $1", batch_id)
        if not rows or (owner is not None and rows[0][1] != owner):
            return None
        return await self._job(rows[0])

    async def page(
        self, owner: str | None, *, limit: int, after: str | None = None
    ) -> tuple[list[Job], bool] | None:
        """``owner``'s batches (None: everyone's), newest first, after the batch
        ``after``; and whether more follow. None when ``after`` is not one of them."""
        args: list[Any] = []
        where = []
        if owner is not None:
            args.append(owner)
            where.append("owner = $1")
        if after is not None:
            found = await self.db.fetch(f"SELECT seq, owner FROM {BATCHES} WHERE id = $1", after)
            if not found or (owner is not None and found[0][1] != owner):
                return None
            args.append(found[0][0])
            where.append(f"seq < ${len(args)}")
        args.append(limit + 1)
        sql = f"SELECT {_COLUMNS} FROM {BATCHES}"
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = await self.db.fetch(f"{sql} ORDER BY seq DESC LIMIT ${len(args)}", *args)
        return [await self._job(row) for row in rows[:limit]], len(rows) > limit

    async def cancel(self, batch_id: str, owner: str | None = None) -> Job | None:
        """Ask for ``batch_id`` to be cancelled: ``cancelling`` when it is validating or
        running (its holder ends it); unchanged otherwise. None: not there."""
        job = await self.get(batch_id, owner)
        if job is None:
            return None
        await self.db.execute(
            f"UPDATE {BATCHES} SET status = 'cancelling', cancelling_at = $2 "
            "WHERE id = $1 AND status IN ('validating', 'in_progress')",
            batch_id, int(time.time()),
        )  # fmt: skip
        return await self.get(batch_id, owner)

    # -- the executors' ----------------------------------------------------------------

    async def claimable(self, holder: str, now: float) -> list[str]:
        """Ids of batches not over whose lease is free, run out or ``holder``'s."""
        rows = await self.db.fetch(
            f"SELECT id FROM {BATCHES} WHERE status IN {_ACTIVE_SQL} "
            "AND (holder IS NULL OR lease_until < $1 OR holder = $2) ORDER BY seq",
            now, holder,
        )  # fmt: skip
        return [row[0] for row in rows]

    async def claim(self, batch_id: str, holder: str, now: float, lease: float) -> bool:
        """Take ``batch_id``'s lease for ``lease`` seconds if it is free (or run out, or
        already ``holder``'s); whether it was taken."""
        changed = await self.db.execute(
            f"UPDATE {BATCHES} SET holder = $2, lease_until = $3 WHERE id = $1 "
            f"AND status IN {_ACTIVE_SQL} AND (holder IS NULL OR lease_until < $4 OR holder = $2)",
            batch_id, holder, now + lease, now,
        )  # fmt: skip
        return bool(changed)

    async def renew(self, batch_ids: Sequence[str], holder: str, until: float) -> dict[str, str]:
        """Extend ``holder``'s leases to ``until``; the status of each batch it still
        holds (one it lost, or that ended, is absent)."""
        if not batch_ids:
            return {}
        await self.db.execute_many(
            [
                (f"UPDATE {BATCHES} SET lease_until = $3 WHERE id = $1 AND holder = $2",
                 (batch_id, holder, until))
                for batch_id in batch_ids
            ]
        )  # fmt: skip
        rows = await self.db.fetch(
            f"SELECT id, status FROM {BATCHES} WHERE holder = $1 AND status IN {_ACTIVE_SQL}",
            holder,
        )
        return {row[0]: row[1] for row in rows if row[0] in batch_ids}

    async def release(self, batch_id: str, holder: str) -> None:
        """Give ``batch_id``'s lease up (a stopping process: another may take it at once)."""
        await self.db.execute(
            f"UPDATE {BATCHES} SET holder = NULL, lease_until = NULL "
            "WHERE id = $1 AND holder = $2",
            batch_id, holder,
        )  # fmt: skip

    async def advance(
        self, batch_id: str, holder: str, status: str, expect: Sequence[str], /, **fields: Any
    ) -> bool:
        """Set ``status`` and ``fields`` (column: value) if ``holder`` still holds the
        batch and its status is one of ``expect`` (a cancel may have come in between);
        whether it did. ``<status>_at`` is set to now unless given."""
        if status != "cancelling":
            fields.setdefault(f"{status}_at", int(time.time()))
        names = [f"{name} = ${i}" for i, name in enumerate(fields, 4)]
        statuses = ", ".join(f"'{s}'" for s in expect if s in ACTIVE)
        changed = await self.db.execute(
            f"UPDATE {BATCHES} SET status = $3, {', '.join(names)} "
            f"WHERE id = $1 AND holder = $2 AND status IN ({statuses})",
            batch_id, holder, status, *fields.values(),
        )  # fmt: skip
        return bool(changed)

    async def stage(
        self, batch_id: str, holder: str, output: str | None, error: str | None
    ) -> None:
        """Name the output and error files being made (so that a holder that dies making
        them leaves their ids for the next to delete)."""
        await self.db.execute(
            f"UPDATE {BATCHES} SET output_file_id = $3, error_file_id = $4 "
            "WHERE id = $1 AND holder = $2",
            batch_id, holder, output, error,
        )  # fmt: skip

    def journal(self, batch_id: str, result: LineResult) -> Statement:
        """The statement that keeps one finished line (nothing when the line already has
        its result: a line's first result is its only one)."""
        return (
            f"INSERT INTO {RESULTS} (batch_id, line, failed, input_tokens, output_tokens, "
            "cached_tokens, reasoning_tokens, record) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) "
            "ON CONFLICT (batch_id, line) DO NOTHING",
            (
                batch_id, result.line, int(result.failed), result.input_tokens,
                result.output_tokens, result.cached_tokens, result.reasoning_tokens,
                result.record,
            ),
        )  # fmt: skip

    async def finished_lines(self, batch_id: str) -> set[int]:
        """The lines of ``batch_id`` that have their result."""
        rows = await self.db.fetch(f"SELECT line FROM {RESULTS} WHERE batch_id = $1", batch_id)
        return {int(row[0]) for row in rows}

    async def journal_counts(self, batch_id: str) -> Counts:
        """The counts of ``batch_id``'s journal so far."""
        rows = await self.db.fetch(
            f"SELECT COUNT(*), COALESCE(SUM(failed), 0), COALESCE(SUM(input_tokens), 0), "
            "COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cached_tokens), 0), "
            f"COALESCE(SUM(reasoning_tokens), 0) FROM {RESULTS} WHERE batch_id = $1",
            batch_id,
        )
        total, failed, *tokens = (int(v) for v in rows[0])
        return Counts(total - failed, failed, *tokens)

    async def records(self, batch_id: str, failed: bool) -> AsyncIterator[bytes]:
        """The journal's output lines of ``batch_id`` (its failures, or the others), in
        input order, a page at a time."""
        last = 0
        while True:
            rows = await self.db.fetch(
                f"SELECT line, record FROM {RESULTS} WHERE batch_id = $1 AND failed = $2 "
                "AND line > $3 ORDER BY line LIMIT $4",
                batch_id, int(failed), last, _PAGE,
            )  # fmt: skip
            for _, record in rows:
                yield bytes(record)
            if len(rows) < _PAGE:
                return
            last = int(rows[-1][0])

    async def forget_results(self, batch_id: str) -> None:
        """Delete ``batch_id``'s journal (its files hold the results now)."""
        await self.db.execute(f"DELETE FROM {RESULTS} WHERE batch_id = $1", batch_id)

    async def _job(self, row: tuple[Any, ...]) -> Job:
        (batch_id, owner, endpoint, input_file_id, window, status, model) = row[:7]
        times = dict(zip(_TIMES, (None if v is None else int(v) for v in row[7:16]), strict=True))
        output_file_id, error_file_id = row[16:18]
        total, *numbers = (int(v) for v in row[18:25])
        counts = Counts(*numbers)
        if status in ("in_progress", "cancelling", "finalizing"):
            counts = await self.journal_counts(batch_id)  # (the row has them once it ends)
        errors, metadata, holder, lease_until = row[25:29]
        return Job(
            batch_id, owner, endpoint, input_file_id, window, status, model, times,
            output_file_id, error_file_id, total, counts,
            None if errors is None else orjson.loads(errors),
            None if metadata is None else orjson.loads(metadata),
            holder, None if lease_until is None else float(lease_until),
        )  # fmt: skip


_ACTIVE_SQL = "(" + ", ".join(f"'{status}'" for status in ACTIVE) + ")"
