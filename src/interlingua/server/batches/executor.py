"""The batch executor: runs the Batch API's batches inside the serving process.

Started with the app (:meth:`Executor.serving`, in its lifespan), it takes turns every
third of ``batches.lease`` (and at once when a batch is created or cancelled here):

1. renew the leases of the batches it runs (the heartbeat); a batch whose lease it lost
   (another process took it over after a stall) is stopped, one that a client cancelled
   is told to stop;
2. claim every batch not over whose lease is free, run out or its own, and start it.

So a process resumes its own batches and those of a dead one by itself: a replica that
died has its batches taken over once their lease runs out (``batches.lease``, 30 s by
default: within a minute), and with ``--workers N`` or several replicas on one
PostgreSQL one process runs a batch at a time.

A batch (:meth:`Executor._run`): validated (server/batches/lines.py ``check_line``), then
its lines run, at most ``batches.concurrency`` of it and ``batches.max_concurrency`` of
all batches at once, each through the gateway's own path as the batch's key. A 429 (the
key's limits, or an upstream's line) makes a line wait its Retry-After and try again,
as long as the window lasts; another retryable failure (408, 5xx) is tried again
:data:`RETRIES` times. Each finished line is journaled (batches/jobs.py), committed with
the others that finished about then, before it counts as done: a restart, even after
``kill -9``, skips every journaled line and runs the rest, so each input line has exactly
one result and no finished line is sent again. At the end (all lines done, a cancel, or
the window's end) the output and error files are made from the journal in input order.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator

import orjson

from ...batch.records import error_record, parse_line
from ...batches import BatchStore, Job, Upload
from ...batches.jobs import LineResult
from ...config import BatchesConfig, FilesConfig
from ...errors import InterlinguaError
from ...usage import StoreError
from ...usage.db import WriteBatcher
from .lines import Checker, LineRunner, check_line, input_lines, key_named, output_record, usage_of

__all__ = ["RETRIES", "Executor"]

log = logging.getLogger("interlingua.batches")

#: retries of a line's request after a retryable failure other than a 429
RETRIES = 5
#: statuses worth trying a line again for (a 429 waits its turn instead, unbounded)
RETRYABLE = frozenset({408, 500, 502, 503, 504, 529})
#: seconds a 429 without Retry-After waits, and the longest any wait is
_WAIT, _MAX_WAIT = 1.0, 30.0


class Executor:
    """Runs the batches of one store in this process (see the module docstring)."""

    def __init__(
        self, store: BatchStore, config: BatchesConfig, files: FilesConfig, runner: LineRunner
    ) -> None:
        self.store = store
        self.jobs = store.jobs
        self.config = config
        self.files_config = files
        self.runner = runner
        #: this process's name in the leases
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.running: dict[str, asyncio.Task[None]] = {}
        self._stops: dict[str, asyncio.Event] = {}
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(config.max_concurrency)
        self._writer = WriteBatcher(store.db)

    def wake(self) -> None:
        """Take a turn now (a batch was created or cancelled)."""
        self._wake.set()

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Take turns while the block runs; at its end stop every batch (their
        finished lines are journaled) and give their leases up."""
        loop = asyncio.create_task(self._turns(), name="interlingua-batches")
        try:
            yield
        finally:
            loop.cancel()
            held, tasks = list(self.running), list(self.running.values())
            for task in tasks:
                task.cancel()
            await asyncio.gather(loop, *tasks, return_exceptions=True)
            with contextlib.suppress(StoreError):
                await self._writer.flush()
            for batch_id in held:
                with contextlib.suppress(StoreError):
                    await self.jobs.release(batch_id, self.holder)

    async def _turns(self) -> None:
        every = self.config.lease / 3
        while True:
            try:
                await self.store.open()
                await self._turn()
            except StoreError as exc:
                log.warning("batches: a turn failed (tried again in %gs): %s", every, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), every)
            self._wake.clear()

    async def _turn(self) -> None:
        now = time.time()
        held = await self.jobs.renew(list(self.running), self.holder, now + self.config.lease)
        for batch_id, task in list(self.running.items()):
            status = held.get(batch_id)
            if status is None and not task.done():
                log.warning("batches: %s is no longer this process's; stopped", batch_id)
                task.cancel()
            elif status == "cancelling" and batch_id in self._stops:
                self._stops[batch_id].set()
        for batch_id in await self.jobs.claimable(self.holder, now):
            if batch_id in self.running:
                continue
            if await self.jobs.claim(batch_id, self.holder, now, self.config.lease):
                task = asyncio.create_task(self._run(batch_id), name=f"interlingua-{batch_id}")
                self.running[batch_id] = task
                task.add_done_callback(functools.partial(self._ended, batch_id))

    def _ended(self, batch_id: str, _: object = None) -> None:
        self.running.pop(batch_id, None)
        self._stops.pop(batch_id, None)

    async def _run(self, batch_id: str) -> None:
        """Carry ``batch_id`` on from where its row says it is, to its end."""
        try:
            job = await self.jobs.get(batch_id)
            if job is None:
                return
            if job.status == "validating":
                job = await self._validate(job)
            if job is not None and job.status == "in_progress":
                job = await self._execute(job)
            if job is not None and job.status in ("finalizing", "cancelling"):
                await self._finalize(job)
        except StoreError as exc:  # (claimed again at a later turn: resumed there)
            log.warning("batches: %s stopped by the store (resumed later): %s", batch_id, exc)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("batches: %s failed unexpectedly (resumed later)", batch_id)

    async def _reread(self, job: Job) -> Job | None:
        return await self.jobs.get(job.id)

    # -- validating -> failed | in_progress ------------------------------------------------

    async def _validate(self, job: Job) -> Job | None:
        errors: list[dict[str, object]] = []
        checker = Checker(job.endpoint, None, set(), errors)
        stored = await self.store.files.get(job.input_file_id, job.owner)
        try:
            checker.key = key_named(self.runner.handlers.live, job.owner)
        except InterlinguaError as err:
            errors.append({"code": "invalid_api_key", "message": err.message, "param": None,
                           "line": None})  # fmt: skip
        if stored is None:
            message = f"The input file {job.input_file_id} is no longer there."
            errors.append({"code": "file_not_found", "message": message,
                           "param": "input_file_id", "line": None})  # fmt: skip
        else:
            async for number, raw in input_lines(self.store.files, job.input_file_id):
                check_line(checker, number, raw)
            if not checker.lines:
                errors.append({"code": "empty_file", "message": "The input file has no requests.",
                               "param": "input_file_id", "line": None})  # fmt: skip
        expect = ("validating",)
        if errors:
            await self.jobs.advance(
                job.id, self.holder, "failed", expect, errors=orjson.dumps(errors).decode(),
                total=checker.lines, holder=None, lease_until=None,
            )  # fmt: skip
        else:
            await self.jobs.advance(
                job.id, self.holder, "in_progress", expect, total=checker.lines,
                model=checker.model,
            )  # fmt: skip
        return await self._reread(job)

    # -- in_progress: the lines ------------------------------------------------------------

    async def _execute(self, job: Job) -> Job | None:
        """Run the lines not yet journaled until all are, the batch is cancelled or its
        window ends; then move it on (``finalizing``, or ``cancelling`` as it is)."""
        stop = self._stops.setdefault(job.id, asyncio.Event())
        lines: set[asyncio.Task[None]] = set()
        feeder = asyncio.create_task(self._feed(job, lines))
        stopped = asyncio.create_task(stop.wait())
        try:
            left = max(0.0, job.expires_at - time.time())
            await asyncio.wait({feeder, stopped}, timeout=left, return_when="FIRST_COMPLETED")
        finally:
            for task in (feeder, stopped, *lines):
                task.cancel()
            await asyncio.gather(feeder, stopped, *lines, return_exceptions=True)
        if feeder.done() and not feeder.cancelled() and feeder.exception() is not None:
            raise feeder.exception()  # type: ignore[misc]
        await self._writer.flush()
        await self.jobs.advance(job.id, self.holder, "finalizing", ("in_progress",))
        return await self._reread(job)

    async def _feed(self, job: Job, lines: set[asyncio.Task[None]]) -> None:
        done = await self.jobs.finished_lines(job.id)
        mine = asyncio.Semaphore(self.config.concurrency)
        async for number, raw in input_lines(self.store.files, job.input_file_id):
            if number in done:
                continue
            await mine.acquire()
            try:
                await self._slots.acquire()
            except BaseException:
                mine.release()
                raise
            held = _Held(mine, self._slots)
            task = asyncio.create_task(self._line(job, number, raw, held))
            lines.add(task)
            task.add_done_callback(lines.discard)
            task.add_done_callback(held.free)
        while lines:
            await asyncio.wait(set(lines))
            for task in list(lines):
                if task.done() and not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]

    async def _line(self, job: Job, number: int, raw: bytes, held: _Held) -> None:
        item = parse_line(raw, number)  # (checked when the batch was validated)
        assert item.dialect is not None
        body = orjson.dumps(item.body)
        retries = 0
        while True:
            outcome = await self.runner.call(job.owner, job.id, item.dialect, body)
            if outcome.status == 429:
                await asyncio.sleep(min(_MAX_WAIT, outcome.retry_after or _WAIT))
                continue
            if outcome.status in RETRYABLE and retries < RETRIES:
                retries += 1
                await asyncio.sleep(min(_MAX_WAIT, outcome.retry_after or 0.25 * 2**retries))
                continue
            break
        # The places go to the next lines now, not after the commit: a line's wait for its
        # commit (the store's thread, shared with every other write) no longer holds up
        # the calls (10,000 lines at 256 over 100 ms: 1.26x the ideal wall -> see the
        # commit). The line still counts as done only once its result is committed.
        held.free()
        record, failed = output_record(item.custom_id, outcome)
        tokens = (0, 0, 0, 0) if failed else usage_of(outcome.body)
        result = LineResult(number, failed, record, *tokens)
        await self._writer.submit([self.jobs.journal(job.id, result)])

    # -- finalizing | cancelling -> completed | expired | cancelled ------------------------

    async def _finalize(self, job: Job) -> None:
        """Make the output and error files from the journal, and end the batch."""
        files = self.store.files
        staged = [f for f in (job.output_file_id, job.error_file_id) if f]
        if staged:  # (a holder died making them: made again)
            await files.discard(staged)
        counts = await self.jobs.journal_counts(job.id)
        ending, gone = _ending(job, counts.completed + counts.failed), None
        if ending == "failed":  # (lines left, time left: the input file was deleted)
            gone = [{"code": "file_not_found", "param": "input_file_id", "line": None,
                     "message": f"The input file {job.input_file_id} was deleted while the "
                     "batch ran; the lines that finished are in its files."}]  # fmt: skip
        output = await files.begin(job.owner)
        errors = await files.begin(job.owner)
        await self.jobs.stage(job.id, self.holder, output.id, errors.id)
        async for record in self.jobs.records(job.id, failed=False):
            await output.write(record)
        async for record in self.jobs.records(job.id, failed=True):
            await errors.write(record)
        failed = counts.failed
        if ending == "expired":
            failed += await self._expired_lines(job, errors)
        keep = self.files_config.expire_after
        names: list[str | None] = []
        for upload, kind in ((output, "output"), (errors, "error")):
            if upload.size:
                await upload.finish("batch_output", f"{job.id}_{kind}.jsonl", keep)
                names.append(upload.id)
            else:
                await upload.abort()
                names.append(None)
        ended = await self.jobs.advance(
            job.id, self.holder, ending, ("finalizing", "cancelling"),
            output_file_id=names[0], error_file_id=names[1], completed=counts.completed,
            failed=failed, input_tokens=counts.input_tokens, output_tokens=counts.output_tokens,
            cached_tokens=counts.cached_tokens, reasoning_tokens=counts.reasoning_tokens,
            holder=None, lease_until=None, **({"errors": orjson.dumps(gone).decode()} if gone else {}),
        )  # fmt: skip
        if ended:
            await self.jobs.forget_results(job.id)
        else:  # (another process took the batch over meanwhile: its files, its journal)
            await files.discard([name for name in names if name])

    async def _expired_lines(self, job: Job, errors: Upload) -> int:
        """Write a ``batch_expired`` error line for each line the window ended before;
        how many."""
        done = await self.jobs.finished_lines(job.id)
        count = 0
        message = "This request could not be executed before the completion window expired."
        async for number, raw in input_lines(self.store.files, job.input_file_id):
            if number not in done:
                custom_id = parse_line(raw, number).custom_id
                await errors.write(error_record(custom_id, "batch_expired", message))
                count += 1
        return count


class _Held:
    """A running line's places (its batch's, the process's), given back once."""

    __slots__ = ("_semaphores",)

    def __init__(self, *semaphores: asyncio.Semaphore) -> None:
        self._semaphores = semaphores

    def free(self, _: object = None) -> None:
        """Give the places back (again: nothing)."""
        semaphores, self._semaphores = self._semaphores, ()
        for semaphore in semaphores:
            semaphore.release()


def _ending(job: Job, finished: int) -> str:
    """How a batch that stopped running ends: cancelled when asked; completed when every
    line finished; expired when its window ended first; failed when neither (its input
    file was deleted under it)."""
    if job.status == "cancelling":
        return "cancelled"
    if finished >= job.total:
        return "completed"
    return "expired" if time.time() >= job.expires_at else "failed"
