"""Batch jobs on Ray: the rows of a Ray Dataset mapped through a pool of client actors.

::

    interlingua batch run in.parquet -o out.parquet --engine ray --address auto \\
        --base-url http://gateway:8400/v1 --model qwen3 --actors 8 --concurrency 128 --rpm 6000

or from Python, with any dataset Ray can read::

    import ray
    from interlingua.batch import BatchOptions
    from interlingua.batch.ray import RayBatch, RaySettings

    ds = ray.data.read_parquet("s3://bucket/prompts/")
    options = BatchOptions(Path("in"), Path("out.parquet"), base_url=..., model="qwen3")
    result = RayBatch(options, RaySettings(actors=8), dataset=ds).run()

How it runs:

* **Reading** is Ray's: a JSONL file as text lines (each decoded on a worker, so both line
  forms work exactly as in one process), Parquet with only the columns a row may have, or
  the dataset given. Rows become requests as :mod:`.files` says (``--id-column`` ...).
* **Calls**: ``map_batches`` with a pool of ``actors`` actors (:class:`RequestActor`); each
  holds one :class:`~interlingua.client.AsyncClient` (one connection pool) on the event
  loop Ray Data runs async functions on, and keeps at most ``concurrency`` requests in
  flight. Images are read and encoded there, on the workers (paths must be readable on
  every node: a shared file system, or URLs, or bytes in the table).
* **Limits**: ``--rpm``/``--tpm`` hold for the whole job -- every actor's limiter asks one
  :class:`~.ray_limits.LimitKeeper` actor, or Redis with ``state_url``.
* **Results** stream back to the driver (``iter_batches``), which writes them with the
  same writers as the single-process runner (:func:`~.files.open_output`): the same JSONL
  lines or Parquet parts, the same crash safety, the same resume -- the ids already in
  the output are sent to the actors, which skip them.

What differs from one process: results arrive as whole batches finish (``--ordered`` asks
Ray to keep input order); a duplicate id is detected when its second result reaches the
driver (its request was made, its record is the ``duplicate_custom_id`` error); rows have
no line numbers, so an unreadable one is reported with an excerpt instead, and again by
each resumed run; a first Ctrl-C stops taking results and closes the output (the
requests in flight are redone by the resume).

``ray`` is imported only here and in :mod:`.ray_limits`: the base install never needs it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import threading
import time
import warnings
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import orjson

from ..client import AsyncClient, RateLimiter
from .calls import Defaults, Outcome, call_item
from .files import Columns, compact_output, count_rows, is_parquet, open_output, plain_row
from .idset import IdSet
from .output import OutputScan
from .progress import BatchStats, Progress
from .records import (
    DUPLICATE,
    INVALID_LINE,
    LineError,
    failed_line,
    in_shard,
    parse_line,
)
from .runner import BatchOptions, BatchResult, count_lines, make_client

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "RayBatch",
    "RaySettings",
    "RequestActor",
    "map_requests",
    "read_dataset",
    "run_ray_batch",
    "shared_limit_name",
]

_EXCERPT = 200  # characters of an unreadable row quoted in its error record


def _ray() -> Any:
    """The ``ray`` module, or an ImportError that says which extra brings it."""
    try:
        import ray
    except ImportError as exc:
        raise ImportError("--engine ray needs Ray: pip install 'interlingua[ray]'") from exc
    return ray


@dataclass(frozen=True, slots=True)
class RaySettings:
    """How a batch runs on Ray (the Ray flags of ``interlingua batch run``).

    ``address``: the cluster to join (``"auto"``: the one this machine belongs to); None
    starts a local instance for the run, unless ``ray.init`` was already called.
    ``actors``: the pool's size, each actor with one client and ``concurrency`` requests
    in flight. ``actor_cpus``: CPUs reserved per actor (the work is waiting on the
    network; a fraction leaves room for Ray's read tasks). ``batch_size``: rows per call
    of an actor (Ray Data runs several at once on each). ``state_url``: Redis for the
    shared rate limits instead of a keeper actor.
    """

    address: str | None = None
    actors: int = 2
    actor_cpus: float = 0.5
    batch_size: int = 64
    state_url: str | None = None


# --- reading ------------------------------------------------------------------------------


def read_dataset(path: Path | str, columns: Columns | None = None) -> Any:
    """A Ray Dataset of the rows of ``path``: a JSONL file as its lines (one column,
    ``text``: :class:`RequestActor` decodes each, ``text_rows=True``), Parquet (a file, a
    directory, a URI Ray can read) with only the columns a batch row may have when its
    schema can be read here, else every column."""
    ray = _ray()
    if not is_parquet(path):
        return ray.data.read_text(str(path))
    dataset = ray.data.read_parquet(str(path))
    names = _parquet_columns(path, columns or Columns())
    return dataset if names is None else dataset.select_columns(names)  # (pushed to the read)


def _parquet_columns(path: Path | str, columns: Columns) -> list[str] | None:
    """The columns of a Parquet input worth reading (None: let Ray read them all)."""
    try:
        from .parquet import column_names

        names = column_names(Path(path))
    except Exception:  # a URI pyarrow cannot open from here: Ray reads every column
        return None
    wanted = columns.wanted()
    return [name for name in names if name in wanted]


# --- the actors ---------------------------------------------------------------------------


def _schema() -> pa.Schema:
    import pyarrow as pa

    return pa.schema(
        [
            ("custom_id", pa.string()),
            ("record", pa.binary()),
            ("failure", pa.string()),
            ("tokens_in", pa.int64()),
            ("tokens_out", pa.int64()),
            ("latency", pa.float64()),
            ("retries", pa.int64()),
            ("empty_retries", pa.int64()),
            ("unreadable_retries", pa.int64()),
            ("skipped", pa.int64()),
        ]
    )


class RequestActor:
    """The map function of :func:`map_requests`, one instance per actor (see the module
    docstring). ``skip``: ids to leave out (the output's done ids; its failed ids are the
    ones to *do* when ``options.retry_failed``). ``text_rows``: rows are JSONL lines in a
    ``text`` column, else table rows."""

    def __init__(
        self,
        options: BatchOptions,
        keeper: Any = None,
        skip: IdSet | None = None,
        text_rows: bool = False,
        state_url: str | None = None,
    ) -> None:
        self.options = options
        self.keeper = keeper
        self.skip = skip if skip is not None else IdSet()
        self.text_rows = text_rows
        self.state_url = state_url
        self.defaults = Defaults.of(options)
        self._client: AsyncClient | None = None
        self._counters: Any = None
        self._slots: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._reported = dict.fromkeys(_RETRY_COUNTS, 0)  # the client's counts sent so far

    async def _start(self) -> AsyncClient:
        """The actor's client, built on first use inside the loop that will drive it."""
        if self._client is not None:
            return self._client
        options = self.options
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._slots = asyncio.Semaphore(options.concurrency)
        client = make_client(replace(options, requests_per_minute=None, tokens_per_minute=None))
        rpm, tpm = options.requests_per_minute, options.tokens_per_minute
        if rpm is not None or tpm is not None:
            client.limiter = RateLimiter(rpm, tpm, None, state=self._limit_state(client))
        self._client = client
        return client

    def _limit_state(self, client: AsyncClient) -> Any:
        """The job's shared counters: Redis when configured, else the keeper actor."""
        options = self.options
        if self.state_url:
            from ..limits import SharedCounters

            self._counters = SharedCounters(self.state_url)
            return self._counters.limit_state(
                shared_limit_name(client.url),
                options.requests_per_minute,
                options.tokens_per_minute,
            )
        from .ray_limits import KeeperState

        if self.keeper is None:
            raise RuntimeError("rate limits on Ray need a keeper actor or a state URL")
        return KeeperState(self.keeper)

    async def __call__(self, batch: pa.Table) -> AsyncIterator[pa.Table]:
        """Send the batch's rows (at most ``concurrency`` at once on this actor); one
        table of results, the skipped rows left out."""
        import pyarrow as pa

        client = await self._start()
        done = await asyncio.gather(*(self._row(client, row) for row in batch.to_pylist()))
        rows = [row for row in done if row is not None and row is not _SKIPPED]
        counts = {"skipped": sum(row is _SKIPPED for row in done)}
        for name, before in self._reported.items():
            now = getattr(client, name)
            counts[name], self._reported[name] = now - before, now
        if any(counts.values()) and not rows:
            rows.append(_result(None, None))  # a row of counts only (its record is null)
        if rows:
            rows[0].update(counts)
        yield pa.Table.from_pylist(rows, schema=_schema())

    async def _row(self, client: AsyncClient, raw: dict[str, Any]) -> dict[str, Any] | None:
        options = self.options
        obj, text = self._decode(raw)
        cid = obj.get("custom_id") if isinstance(obj, dict) else None
        if not isinstance(cid, str) or not cid:
            return self._unreadable(obj, text)
        if not in_shard(cid, options.shard):
            return None
        if (cid not in self.skip) if options.retry_failed else (cid in self.skip):
            return None if options.retry_failed else _SKIPPED
        try:
            item = parse_line(obj, 0)
        except LineError as exc:
            message = exc.message.replace(f"line 0 ({cid}): ", f"{cid}: ", 1)
            return _result(cid, Outcome(failed_line(cid, exc.code, message), exc.code))
        assert self._slots is not None
        async with self._slots:
            started = time.monotonic()
            outcome = await call_item(client, item, self.defaults)
            latency = time.monotonic() - started
        return _result(cid, outcome, latency)

    def _decode(self, raw: dict[str, Any]) -> tuple[Any, str]:
        """(the row as a JSON line's dict, or None if unreadable; its text for messages)."""
        columns = self.options.columns
        if not self.text_rows:
            return plain_row(raw, columns), ""
        text = str(raw.get("text", "")).removeprefix("\ufeff")
        try:
            obj = orjson.loads(text)
        except orjson.JSONDecodeError:
            return None, text
        return (columns.rename(obj) if isinstance(obj, dict) else obj), text

    def _unreadable(self, obj: Any, text: str) -> dict[str, Any] | None:
        shard = self.options.shard
        if self.options.retry_failed or (shard is not None and shard[0] != 0):
            return None  # reported by the first run, and by shard 0 only
        try:
            parse_line(obj if isinstance(obj, dict) else text, 0)
        except LineError as exc:
            message = exc.message.removeprefix("line 0: ")
        else:  # pragma: no cover - parse_line rejects what has no usable custom_id
            message = "unreadable"
        excerpt = text or orjson.dumps(obj, default=repr).decode()
        message = f"unreadable row: {message}: {excerpt[:_EXCERPT]!r}"
        return _result(None, Outcome(failed_line(None, INVALID_LINE, message), INVALID_LINE))

    async def aclose(self) -> None:
        """Close the client (and the Redis counters); on the loop that made them."""
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        if self._counters is not None:
            await self._counters.aclose()
            self._counters = None

    def __del__(self) -> None:
        """At the actor's end (Ray drops the instance on another thread than the loop's):
        :meth:`aclose` on the actor's loop."""
        loop = self._loop
        if self._client is None or loop is None or loop.is_closed() or not loop.is_running():
            return
        if threading.get_ident() == self._loop_thread:
            return  # (dropped on its own loop: whoever ran it there closes it)
        future = asyncio.run_coroutine_threadsafe(self.aclose(), loop)
        with contextlib.suppress(Exception):
            future.result(timeout=5)


def shared_limit_name(url: str) -> str:
    """The Redis name of the limits of every job sending to ``url`` (the client's
    endpoint URL): jobs against one server share one count."""
    return f"batch:{url}"


_SKIPPED: dict[str, Any] = {}  # a row whose id is already done: counted, not sent
_RETRY_COUNTS = ("retries", "empty_retries", "unreadable_retries")  # client = BatchStats names


def _result(
    cid: str | None, outcome: Outcome | None, latency: float | None = None
) -> dict[str, Any]:
    """One result row (see :func:`map_requests`); no outcome: a row of counts only."""
    return {
        "custom_id": cid,
        "record": outcome.line if outcome else None,
        "failure": outcome.failure if outcome else None,
        "tokens_in": outcome.tokens_in if outcome else 0,
        "tokens_out": outcome.tokens_out if outcome else 0,
        "latency": latency,
        "retries": 0,
        "empty_retries": 0,
        "unreadable_retries": 0,
        "skipped": 0,
    }


def map_requests(
    dataset: Any,
    options: BatchOptions,
    settings: RaySettings | None = None,
    *,
    keeper: Any = None,
    skip: IdSet | None = None,
    text_rows: bool = False,
) -> Any:
    """``dataset`` mapped through the client actors: a lazy Dataset of results, one row
    per request (``custom_id``, ``record``: the output line's bytes, ``failure``,
    ``tokens_in``, ``tokens_out``, ``latency``). Rows whose id is in ``skip`` are left
    out. ``retries`` (of which ``empty_retries``, ``unreadable_retries``) and ``skipped``
    count per batch, on its first row (a batch with nothing to write has a row of counts
    only: ``record`` null). With ``--rpm``/``--tpm`` pass ``keeper``
    (:func:`~.ray_limits.start_keeper`) unless ``settings.state_url`` is set."""
    ray = _ray()
    settings = settings or RaySettings()
    # An actor works one block (a task) at a time per slot, so blocks are cut to a few
    # batches each: a file read as one block would otherwise keep all but one actor idle.
    # (Streaming: blocks are cut as they come, nothing waits for the whole dataset.)
    block_rows = 2 * settings.batch_size
    tasks = max(2, -(-options.concurrency // block_rows) + 1)  # enough rows to fill the slots
    results = dataset.repartition(target_num_rows_per_block=block_rows).map_batches(
        RequestActor,
        fn_constructor_args=(options, keeper, skip, text_rows, settings.state_url),
        batch_size=settings.batch_size,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(
            size=settings.actors, max_tasks_in_flight_per_actor=tasks
        ),
        num_cpus=settings.actor_cpus,
    )
    context = results.context
    context.execution_options.preserve_order = options.ordered
    context.enable_progress_bars = False
    context.print_on_execution_start = False
    return results


# --- the driver ---------------------------------------------------------------------------


class RayBatch:
    """One batch on Ray, driven from this process (see the module docstring); ``run``
    returns a :class:`~.runner.BatchResult` like :class:`~.runner.BatchRunner`'s.

    ``dataset``: the rows (any Ray Dataset); default: ``options.input`` read by
    :func:`read_dataset`. Calls ``ray.init(address=settings.address)`` unless Ray is
    initialized already, and then shuts it down at the end.

    ``run`` is :meth:`open`, :meth:`consume` of the mapped dataset's batches, and
    :meth:`finish`; the three serve any other source of result tables as well.
    """

    def __init__(
        self,
        options: BatchOptions,
        settings: RaySettings | None = None,
        *,
        dataset: Any = None,
        stream: TextIO | None = None,
    ) -> None:
        if options.concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.options = options
        self.settings = settings or RaySettings()
        self.dataset = dataset
        self.stream = stream if stream is not None else sys.stderr
        self.stats = BatchStats()
        self.scan = OutputScan()
        self._writer = open_output(options.output)
        self._progress: Progress | None = None
        self._stopping = False
        self._seen = IdSet()
        self._dups: dict[str, int] = {}

    @property
    def skip(self) -> IdSet:
        """The ids the actors leave out (with ``retry_failed``: the only ones they do)."""
        return self.scan.failed if self.options.retry_failed else self.scan.done

    def stop(self) -> None:
        """Stop taking results (the output is closed; a resume redoes the rest)."""
        self._stopping = True

    def run(self) -> BatchResult:
        """Run to the end (or :meth:`stop`); every result taken is written."""
        ray = _ray()
        started_ray = not ray.is_initialized()
        if started_ray:
            ray.init(
                address=self.settings.address,
                include_dashboard=False,
                logging_level=logging.WARNING,
                configure_logging=True,
            )
        try:
            self.open()
            keeper = None
            try:
                options = self.options
                limited = options.requests_per_minute or options.tokens_per_minute
                if limited and not self.settings.state_url:
                    from .ray_limits import start_keeper

                    keeper = start_keeper(options.requests_per_minute, options.tokens_per_minute)
                results = self._results(keeper)
                self.consume(results.iter_batches(batch_size=None, batch_format="pyarrow"))
            finally:
                self._close()
                del keeper  # (the keeper actor ends with its last handle)
            return self.finish()
        finally:
            if started_ray:
                ray.shutdown()

    def open(self) -> OutputScan:
        """Open the output (scan, repair) and start the progress display; what it holds."""
        options, stats = self.options, self.stats
        stats.started = time.monotonic()
        self.scan = scan = self._writer.open()
        if options.retry_failed:
            stats.total = len(scan.failed)
        else:
            stats.done_before = len(scan.done)
            if self.dataset is None and options.shard is None:
                stats.total = count_rows(options.input, count_lines)
        self._progress = Progress(
            stats, mode=options.progress, stream=self.stream, log_every=options.log_every
        )
        return scan

    def _results(self, keeper: Any = None) -> Any:
        """The lazy mapped dataset of this run."""
        options = self.options
        dataset, text_rows = self.dataset, False
        if dataset is None:
            text_rows = not is_parquet(options.input)
            dataset = read_dataset(options.input, options.columns)
        return map_requests(
            dataset, options, self.settings, keeper=keeper, skip=self.skip, text_rows=text_rows
        )

    def consume(self, batches: Iterable[pa.Table]) -> None:
        """Write the results of ``batches`` (tables of :func:`map_requests`' rows) until
        they end or :meth:`stop` is called."""
        for batch in batches:
            self._take(batch.to_pylist())
            if self._stopping:
                break

    def _close(self) -> None:
        self.stats.finished = time.monotonic()
        self._writer.close()
        if self._progress is not None:
            self._progress.close()
            self._progress = None

    def finish(self) -> BatchResult:
        """Close the output (idempotent), compact it after a whole ``retry_failed`` run;
        how the run ended."""
        self._close()
        compacted = 0
        if self.options.retry_failed and not self._stopping:
            compacted = compact_output(self.options.output)
        return BatchResult(self.stats, self._stopping, False, compacted)

    def _take(self, rows: list[dict[str, Any]]) -> None:
        """Write one batch of results (a second result for an id becomes its duplicate
        error record, as the single-process runner writes it)."""
        stats, writer, progress = self.stats, self._writer, self._progress
        for row in rows:
            stats.retries += row["retries"]
            stats.empty_retries += row["empty_retries"]
            stats.unreadable_retries += row["unreadable_retries"]
            stats.skipped += row["skipped"]
            if row["record"] is None:
                continue  # a row of counts only
            cid = row["custom_id"]
            if cid is not None and not self._seen.add(cid):
                line = self._duplicate(cid)
                if line is None:
                    continue
                stats.record(DUPLICATE)
            else:
                line = row["record"]
                stats.record(row["failure"], row["latency"], row["tokens_in"], row["tokens_out"])
            writer.write(line)
            if progress is not None:
                progress.update()
        writer.maybe_sync()
        if progress is not None:
            progress.tick()

    def _duplicate(self, cid: str) -> bytes | None:
        count = self._dups.get(cid, 0) + 1
        self._dups[cid] = count
        if count <= self.scan.duplicates.get(cid, 0):
            return None  # already reported by an earlier run
        message = f"custom_id {cid!r} was already used by another row"
        return failed_line(cid, DUPLICATE, message)


@contextlib.contextmanager
def _first_interrupt_stops(batch: RayBatch) -> Iterator[None]:
    """The first SIGINT/SIGTERM stops the run at the next batch (the output is closed
    cleanly); a second one interrupts at once (KeyboardInterrupt)."""

    def on_signal(signum: int, frame: object) -> None:
        if batch._stopping:
            raise KeyboardInterrupt
        print("batch: stopping (press Ctrl-C again to abort)", file=batch.stream, flush=True)
        batch.stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_ray_batch(
    options: BatchOptions,
    settings: RaySettings | None = None,
    *,
    dataset: Any = None,
    stream: TextIO | None = None,
) -> int:
    """:func:`~.terminal.run_batch` on Ray: run, report, the exit status (0, 1, 130)."""
    from .terminal import report

    out = stream if stream is not None else sys.stderr
    command = options.command or "the same command"
    # A small input is one block: one actor does it all, which is no news to a person.
    warnings.filterwarnings("ignore", "The minimum number of concurrent actors", UserWarning)
    batch = RayBatch(options, settings, dataset=dataset, stream=out)
    try:
        with _first_interrupt_stops(batch):
            result = batch.run()
    except KeyboardInterrupt:  # the second Ctrl-C: what was taken is written already
        result = BatchResult(batch.stats, interrupted=True, aborted=True)
    except OSError as exc:  # the input cannot be read or the output written
        print(f"batch: error: {exc}", file=out)
        print(f"batch: fix it, then resume with the same command:\n  {command}", file=out)
        return 1
    return report(result, options, out)
