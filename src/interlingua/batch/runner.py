"""The batch engine: stream the input, keep N calls in flight, append results, resume.

::

    options = BatchOptions(Path("in.jsonl"), Path("out.jsonl"), base_url=..., model=...)
    result = await BatchRunner(options).run()   # or run_batch(options): see .terminal

Memory is bounded by the concurrency, not the file. The producer reads one line, then
waits for one of ``concurrency`` slots before reading the next; a slot is held from the
moment a line is admitted until its output line is written. So at most ``concurrency``
lines are between "read" and "written" (plus the one line the producer holds), each with
its encoded request alive only while its call runs. What grows with the file is the set
of custom ids seen (16 bytes an id, see :mod:`.idset`).

Order: by default lines are written as they finish. ``ordered=True`` writes them in
input order through a reorder buffer; since a slot is released only when its line is
*written*, the buffer holds at most ``concurrency`` finished results -- and a slow line
holds up the window behind it (the price of order when latencies vary). After a resume,
the lines of the new run follow those already in the file, each run in input order.

Resume: ids with a line in the output are skipped, so re-running the same command after a
crash, Ctrl-C or ``kill -9`` finishes exactly the rest (a line is written whole or, torn,
cut away on open: see :mod:`.output`). ``retry_failed=True`` re-runs only the ids whose
latest line is an error; the new lines are appended ("the latest line wins") and, once
the run completes, the file is compacted back to one line per id in original order.

Interrupts (:func:`~.terminal.run_batch`): the first SIGINT/SIGTERM stops reading new lines and lets
the calls in flight finish and be written, then prints how to resume; a second one aborts
at once -- the calls in flight are simply not written, and a resume redoes them.

Duplicate custom ids: the first line with an id is the id's request; every later one gets
an error line (code ``duplicate_custom_id``) that never counts as the id's result.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import orjson

from ..client import AsyncClient, RateLimit
from .calls import Defaults, Outcome, call_item
from .files import DEFAULT_COLUMNS, Columns, compact_output, count_rows, input_rows, open_output
from .idset import IdSet
from .output import OutputScan
from .progress import BatchStats, Progress
from .records import (
    DUPLICATE,
    INVALID_LINE,
    BatchItem,
    LineError,
    failed_line,
    in_shard,
    parse_line,
)

__all__ = [
    "BATCH_RETRIES",
    "BatchOptions",
    "BatchResult",
    "BatchRunner",
    "count_lines",
]

TICK = 0.25
"""Seconds between housekeeping ticks (fsync when due, progress refresh)."""
BATCH_RETRIES = 5
"""Retries per request by default: a long run meets transient failures that a person at a
terminal would simply retry, and a failed line costs a later ``--retry-failed`` pass."""
COUNT_LIMIT = 2 << 30
"""Inputs larger than this (bytes) are not pre-counted: the bar then shows no total."""


@dataclass(frozen=True, slots=True)
class BatchOptions:
    """Everything one run needs (the CLI flags of ``interlingua batch run``)."""

    input: Path
    output: Path
    base_url: str | None = None
    model: str | None = None
    dialect: str = "openai"
    api_key: str | None = None
    concurrency: int = 256
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    retries: int = BATCH_RETRIES
    ordered: bool = False
    shard: tuple[int, int] | None = None
    retry_failed: bool = False
    max_tokens: int | None = None
    system: str | None = None
    timeout: float = 600.0
    progress: str = "auto"
    log_every: float = 10.0
    command: str | None = None
    """The command line to print in the resume hint."""
    columns: Columns = DEFAULT_COLUMNS
    """Where simple rows keep their id, prompt and images (``--id-column`` ...)."""
    retry_on_empty: bool = True
    """Retry 2xx answers with no text, tool call or refusal (and unreadable bodies, once)."""
    fold_reasoning: bool = False
    """Write each answer's reasoning into its text as ``<think>…</think>`` (see .fold)."""


@dataclass(frozen=True, slots=True)
class BatchResult:
    """How a run ended. ``interrupted``: stopped early (gracefully or aborted)."""

    stats: BatchStats
    interrupted: bool = False
    aborted: bool = False
    compacted: int = 0


def count_lines(path: Path) -> int | None:
    """Non-empty-file line count by counting newlines in 1 MiB blocks (None if huge)."""
    size = path.stat().st_size
    if size > COUNT_LIMIT:
        return None
    count = 0
    last = b"\n"
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def make_client(options: BatchOptions) -> AsyncClient:
    """The one client of a run: its rate limiter holds every call to the limits.

    Without --rpm/--tpm the client gets no limiter at all: the runner's own window already
    keeps at most ``concurrency`` calls in flight, and a limiter would only add a semaphore
    round trip to every call. The connection pool is sized to the concurrency either way.
    """
    timeout = options.timeout
    limited = options.requests_per_minute is not None or options.tokens_per_minute is not None
    return AsyncClient(
        options.base_url,
        options.api_key,
        dialect=options.dialect,
        model=options.model,
        timeout=(min(10.0, timeout), timeout),
        max_retries=options.retries,
        rate_limit=RateLimit(
            requests_per_minute=options.requests_per_minute,
            tokens_per_minute=options.tokens_per_minute,
            max_concurrency=options.concurrency,
        )
        if limited
        else None,
        connections=options.concurrency,
    )


def _now() -> float:
    return time.monotonic()


class BatchRunner:
    """Runs one batch (see the module docstring). ``client`` may be injected (tests).

    Instrumentation for tests and benchmarks: ``peak_in_flight`` (most lines admitted and
    not yet written at once) and ``peak_read_ahead`` (most lines read but not admitted).
    """

    def __init__(
        self,
        options: BatchOptions,
        *,
        client: AsyncClient | None = None,
        stream: TextIO | None = None,
    ) -> None:
        if options.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.options = options
        self._owns_client = client is None
        self.client = client if client is not None else make_client(options)
        self.stream = stream if stream is not None else sys.stderr
        self.defaults = Defaults.of(options)
        self.stats = BatchStats()
        self.peak_in_flight = 0
        self.peak_read_ahead = 0
        self._stopping = False
        self._aborted = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(options.concurrency)
        self._admitted = 0  # lines holding a slot
        self._pending: dict[int, bytes] = {}  # ordered mode: finished, not yet written
        self._next_seq = 0
        self._seq = 0  # admission order, the order of an --ordered output
        self._read_ahead = 0  # lines read and neither admitted nor skipped yet
        self._seen = IdSet()
        self._dups: dict[str, int] = {}
        self._writer = open_output(options.output)
        self._progress: Progress | None = None
        self._producer: asyncio.Task[None] | None = None
        self._fatal: OSError | None = None  # the output cannot be written: end the run

    # --- control -----------------------------------------------------------------------

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` (or :meth:`abort`) was called."""
        return self._stopping

    @property
    def in_flight(self) -> int:
        """Lines admitted and not yet written."""
        return self._admitted

    def say(self, text: str) -> None:
        """A message for the person watching (above the progress bar, if any)."""
        if self._progress is not None:
            self._progress.message(text)
        else:
            print(text, file=self.stream, flush=True)

    def stop(self) -> None:
        """Stop reading new lines; calls in flight finish and are written."""
        self._stopping = True

    def abort(self) -> None:
        """Stop now: cancel every call in flight (their lines are not written)."""
        self._stopping = self._aborted = True
        if self._producer is not None:
            self._producer.cancel()
        for task in list(self._tasks):
            task.cancel()

    # --- the run -----------------------------------------------------------------------

    async def run(self) -> BatchResult:
        """Process the input; returns when every admitted line is written (or on abort)."""
        self.stats.started = _now()
        scan = self._writer.open()
        self._start_stats(scan)
        progress = self._progress = Progress(
            self.stats, mode=self.options.progress, stream=self.stream,
            log_every=self.options.log_every,
        )  # fmt: skip
        ticker = asyncio.create_task(self._tick())
        try:
            self._producer = asyncio.create_task(self._produce(scan))
            with contextlib.suppress(asyncio.CancelledError):
                await self._producer
            while self._tasks:
                await asyncio.wait(set(self._tasks))
        finally:
            ticker.cancel()
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(ticker, *self._tasks, return_exceptions=True)
            self._count_retries()
            self.stats.finished = _now()
            self._writer.close()
            progress.close()
            # A pipeline's long-lived client must not keep this run's images.
            self.client.clear_cache()
            if self._owns_client:
                await self.client.aclose()
        if self._fatal is not None:
            raise self._fatal
        compacted = 0
        if self.options.retry_failed and not self._stopping:
            compacted = compact_output(self.options.output)
        return BatchResult(self.stats, self._stopping, self._aborted, compacted)

    def _start_stats(self, scan: OutputScan) -> None:
        stats = self.stats
        if self.options.retry_failed:
            stats.total = len(scan.failed)
        else:
            stats.done_before = len(scan.done)
            if self.options.shard is None:
                stats.total = count_rows(self.options.input, count_lines)
        if scan.repaired:
            self.say(
                f"batch: repaired {self.options.output}: cut a torn last line "
                f"({scan.repaired} bytes) left by an interrupted write"
            )

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            self._writer.maybe_sync()
            self._count_retries()
            if self._progress is not None:
                self._progress.tick()

    def _count_retries(self) -> None:
        client = self.client
        self.stats.retries = client.retries
        self.stats.empty_retries = client.empty_retries
        self.stats.unreadable_retries = client.unreadable_retries

    async def _produce(self, scan: OutputScan) -> None:
        """Read lines one at a time; each waits for a slot before the next is read."""
        for line_no, raw in input_rows(self.options.input, self.options.columns):
            if self._stopping:
                return
            if line_no % 1024 == 0:
                await asyncio.sleep(0)  # a long run of skipped lines must not starve
            self._read_ahead += 1
            self.peak_read_ahead = max(self.peak_read_ahead, self._read_ahead)
            action = self._classify(raw, line_no, scan)
            if action is not None:
                await self._slots.acquire()
                if self._stopping:  # stopped while waiting: the line waits for the resume
                    self._slots.release()
                    return
                self._admit(action)
            self._read_ahead -= 1

    def _admit(self, action: BatchItem | Outcome) -> None:
        seq, self._seq = self._seq, self._seq + 1
        self._admitted += 1
        self.peak_in_flight = max(self.peak_in_flight, self._admitted)
        if isinstance(action, Outcome):  # an error known without a call
            self.stats.record(action.failure)
            self._emit(seq, action.line)
            return
        task = asyncio.create_task(self._process(seq, action))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _classify(
        self, raw: bytes | dict[str, Any], line_no: int, scan: OutputScan
    ) -> BatchItem | Outcome | None:
        """What to do with a line (JSON bytes or a row): a call, an error line, or nothing."""
        obj: Any = raw
        if isinstance(raw, bytes):
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                obj = None
        cid = obj.get("custom_id") if isinstance(obj, dict) else None
        if not isinstance(cid, str) or not cid:
            return self._unreadable(raw, line_no, scan)
        if not in_shard(cid, self.options.shard):
            return None
        if not self._seen.add(cid):
            return self._duplicate(cid, line_no, scan)
        if (cid not in scan.failed) if self.options.retry_failed else (cid in scan.done):
            self.stats.skipped += 1
            return None
        try:
            return parse_line(obj, line_no)
        except LineError as exc:
            return Outcome(failed_line(cid, exc.code, exc.message), exc.code)

    def _unreadable(
        self, raw: bytes | dict[str, Any], line_no: int, scan: OutputScan
    ) -> Outcome | None:
        shard = self.options.shard
        if shard is not None and line_no % shard[1] != shard[0]:
            return None  # each unreadable line is reported by exactly one shard
        if line_no in scan.bad_lines or self.options.retry_failed:
            return None
        try:
            parse_line(raw, line_no)
        except LineError as exc:
            message = exc.message
        else:  # pragma: no cover - parse_line rejects what _classify could not read
            message = f"line {line_no}: unreadable"
        return Outcome(failed_line(None, INVALID_LINE, message, line_no=line_no), INVALID_LINE)

    def _duplicate(self, cid: str, line_no: int, scan: OutputScan) -> Outcome | None:
        count = self._dups.get(cid, 0) + 1
        self._dups[cid] = count
        if count <= scan.duplicates.get(cid, 0):
            return None  # this duplicate was already reported by an earlier run
        message = f"line {line_no}: custom_id {cid!r} was already used by an earlier line"
        return Outcome(failed_line(cid, DUPLICATE, message), DUPLICATE)

    async def _process(self, seq: int, item: BatchItem) -> None:
        started = _now()
        outcome = await call_item(self.client, item, self.defaults)
        self.stats.record(outcome.failure, _now() - started, outcome.tokens_in, outcome.tokens_out)
        self._emit(seq, outcome.line)

    def _emit(self, seq: int, line: bytes) -> None:
        """Write a finished line (ordered: once every earlier line is written)."""
        if not self.options.ordered:
            self._write(line)
            return
        self._pending[seq] = line
        while self._next_seq in self._pending:
            self._write(self._pending.pop(self._next_seq))
            self._next_seq += 1

    def _write(self, line: bytes) -> None:
        try:
            self._writer.write(line)
        except OSError as exc:  # disk full, file gone: results would be lost, so stop here
            if self._fatal is None:
                self._fatal = exc
                self.abort()
            return
        self._admitted -= 1
        self._slots.release()
        if self._progress is not None:
            self._progress.update()
