"""Each generation request's :class:`~interlingua.usage.record.Record`, filled and handed on.

The handler opens a record when a request arrives (:meth:`Accounting.open`), fills in
who asked and for what once it knows, and the gateway fills in where the request went
(:data:`RECORD` tells it, so the attempt loop needs no extra argument). When the answer
has ended the record gets its status, error kind, tokens and times, goes to the key's
admission, which settles the key's token limits with the real count, and (with the
records that ended about then: :meth:`Accounting.drain`) to every sink: the usage log,
the metrics, the status page. Where its counts come from:

* a whole body (an answer or an error): at once, its ``usage`` read with a decoder that
  looks at nothing else (the passthrough body is never parsed whole);
* a stream: when the response closes (normal end, error, or the client leaving), with the
  usage its first and last events reported (:class:`Meter` says why only those) and the
  time of its first byte. An in-band error event marks the record failed though its
  status stays 200. A translated stream is not read back: the gateway puts its usage and
  its in-band error into the record as it encodes them (``StreamResponse.counted``), and
  the meter only times its first byte. A translated whole answer is not read back
  either: the gateway puts its usage into the record as it renders it
  (``CountedResponse``).

On the passthrough path a Chat Completions stream whose client did not ask for usage is
sent upstream with ``stream_options.include_usage`` (the gateway needs the count); the
usage-only chunk that this adds is cut from what the client gets (:func:`strip_usage`,
which gives its counts to the record), so the client sees the stream it asked for.

A stream that broke after its first byte and that another attempt continues
(``on_stream_break: continue``) shows its client the usage of every attempt, summed. Each
broken attempt gets a row of its own (error ``continued``, its tokens:
:meth:`Accounting.add_row`); the request's record is told the broken attempts' usage
(``StreamResponse.continued``, :meth:`Meter.continued`) and keeps only the finishing
attempt's, so the rows of one request add up to what its client was shown. Its key is
charged the sum.

Each row's cost in dollars is set once, when it is finished (:class:`~..usage.cost.Pricing`
prices its deployment: the one that answered, a fallback at its own price, a broken
attempt's row at its own): no per-chunk work, and a sum of the rows is what was spent.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextvars import ContextVar
from decimal import Decimal
from typing import Any

import msgspec
import orjson

from ..core import Usage, aclose_iterator
from ..dialects import Dialect
from ..dialects.anthropic import DIALECT as ANTHROPIC
from ..dialects.relay_usage import (
    USAGE_MARK,
    Counts,
    StreamUsage,
    body_counts,
    usage_chunk,
    usage_counts,
)
from ..errors import ErrorKind, InterlinguaError, error_class_for_status
from ..usage.cost import Pricing
from ..usage.record import (
    CANCELLED,
    CLIENT_CLOSED_STATUS,
    CLIENT_DISCONNECT,
    Record,
    RecordSink,
)
from .asgi_io import BytesResponse, CountedResponse, StreamOutcome, StreamResponse
from .budgets import SpendBook
from .keys import Admission, ClientKey

__all__ = [
    "DRAIN_MAX",
    "DRAIN_SECONDS",
    "GENERATION_ENDPOINTS",
    "RECORD",
    "Accounting",
    "Meter",
    "Tab",
    "count_usage",
    "strip_usage",
]

log = logging.getLogger("interlingua.server")

#: the record of the request being answered (None: accounting is off, or no request)
RECORD: ContextVar[Record | None] = ContextVar("interlingua_record", default=None)

_UPSTREAM_ERROR = ErrorKind.UPSTREAM_ERROR.value


class Tab(msgspec.Struct, gc=False):
    """One request being answered: its record, and its key's admission once taken: an
    :class:`Admission` (a key whose counts are shared), or the key itself with the
    request's window ``entry`` (counts in this process: ``ClientKey.admit_now``).
    Untracked by the garbage collector, like the record (usage/record.py): nothing it
    holds refers back to it."""

    record: Record
    admission: Admission | None = None
    key: ClientKey | None = None
    entry: int = -1


#: seconds at most between a record's end and the sinks' taking it (they may ask sooner:
#: :meth:`Accounting.drain`)
DRAIN_SECONDS = 0.1
#: records that end within one drain at most (more are handed over at once): bounds the
#: memory held and the loop's pause that handing them over takes
DRAIN_MAX = 256

#: the usage log's ``endpoint`` of a generation request, by its client dialect
GENERATION_ENDPOINTS = {
    "openai": "chat/completions",
    "anthropic": "messages",
    "responses": "responses",
}


class Accounting:
    """Opens and finishes the records of one gateway's requests (module docstring).

    Finished records wait in a list and go to the sinks together (:meth:`drain`), at
    most :data:`DRAIN_SECONDS` after the first of them ended or when
    :data:`DRAIN_MAX` wait: a sink that reads what it counted (a scrape, the status
    page's data, the usage log's flush) calls :meth:`drain` first, through the
    ``catch_up`` attribute the accounting gives it. Handing a sink hundreds of records
    at once costs it about half of what the same records cost one by one, each between
    two requests' other work that pushed its code and data out of the CPU's caches
    (``python -m bench.ab ... --together``, team on: +5 % requests/s).
    """

    def __init__(self, sinks: Sequence[RecordSink], pricing: Pricing | None = None) -> None:
        """``pricing``: what each deployment's tokens cost (None: every cost unknown)."""
        self.sinks = tuple(sinks)
        #: the record's cost in dollars, when it is finished (None: no prices at all)
        self._cost: Callable[[Record], Decimal | None] | None = None
        self.reprice(pricing)
        #: the keys' spend toward their budgets, charged each priced record (None: no
        #: key has a budget)
        self.spend: SpendBook | None = None
        #: requests opened and not yet finished (the metrics' in-flight gauge)
        self.in_flight = 0
        self._done: list[Record] = []
        self._drain_due: asyncio.TimerHandle | None = None
        self._draining = False
        for sink in self.sinks:
            if hasattr(sink, "catch_up"):
                sink.catch_up = self.drain
            if hasattr(sink, "live"):  # (the metrics' in-flight gauge reads our count)
                sink.live = self._live

    def reprice(self, pricing: Pricing | None) -> None:
        """Price the records finished from now on with ``pricing`` (a reloaded config's:
        one accounting serves every config a process loads)."""
        self._cost = pricing.cost if pricing is not None and pricing.any else None

    def _live(self) -> int:
        return self.in_flight

    def open(self, request_id: str, dialect: str, endpoint: str | None = None) -> Tab:
        """The tab of a request that just arrived (model and key are filled later);
        ``endpoint``: the API it was made to (None: ``dialect``'s generation endpoint)."""
        self.in_flight += 1
        if self._drain_due is None:  # (the in-flight gauge changed: tell the sinks too)
            self._schedule_drain()
        record = Record(
            at=time.time(),
            request_id=request_id,
            key=None,
            dialect=dialect,
            model="",
            endpoint=endpoint or GENERATION_ENDPOINTS.get(dialect),
        )
        record.latency = time.perf_counter()  # the start, until _finish makes it a span
        return Tab(record)

    def abandon(self, tab: Tab, *, client_left: bool = False) -> None:
        """The request ended without an answer: its client left, or it was cancelled."""
        record = tab.record
        record.status = CLIENT_CLOSED_STATUS
        record.error = CLIENT_DISCONNECT if client_left else CANCELLED
        self._finish(tab)

    def close(
        self, tab: Tab, response: BytesResponse | StreamResponse, dialect: Dialect
    ) -> BytesResponse | StreamResponse:
        """Finish the tab's record with ``response`` now (a body) or when it closes (a
        stream); returns the response to send."""
        record = tab.record
        record.status = response.status
        if isinstance(response, BytesResponse):
            if response.status == CLIENT_CLOSED_STATUS:  # (the client left: no one reads it)
                record.error = CLIENT_DISCONNECT
            elif response.status >= 400:
                record.error = error_class_for_status(response.status).kind.value
            elif type(response) is not CountedResponse:  # (its usage is in the record)
                _count_body(record, response.body)
            self._finish(tab)
            return response
        assert isinstance(response, StreamResponse)
        record.stream = True
        meter = Meter(record, dialect, response.on_error, self, tab)
        response.watch = meter.first_byte if response.counted else meter.see
        response.on_error = meter.failed
        response.finished = meter.finished
        response.continued = meter.continued
        return response

    def _finish(self, tab: Tab, before: int = 0) -> None:
        """The record to the sinks and the key's admission settled; ``before``: the
        tokens of a continued stream's broken attempts, which its key is charged too
        (their own rows reach no key: :meth:`add_row`)."""
        record = tab.record
        record.latency = time.perf_counter() - record.latency
        if self._cost is not None:
            record.cost_usd = self._cost(record)
            if self.spend is not None:
                self.spend.charge(record.key, record.cost_usd)
        key = tab.key
        if key is not None:
            key.end(tab.entry, record.input_tokens + record.output_tokens + before)
        elif tab.admission is not None:
            tab.admission.end(record.input_tokens + record.output_tokens + before)
        self.in_flight -= 1
        done = self._done
        done.append(record)
        if len(done) >= DRAIN_MAX:
            self.drain()
        elif self._drain_due is None:
            self._schedule_drain()

    def add_row(self, record: Record) -> None:
        """One more finished row for the sinks, handed over with the others at the next
        drain: the row of an attempt whose stream broke and was continued by another
        (usage/record.py ``CONTINUED``). ``record`` is complete (its latency a span);
        the requests in flight and the key's admission are the request's own record's
        business, not this row's. Its cost is its own deployment's, charged to the key's
        budgets like the request's own."""
        if self._cost is not None:
            record.cost_usd = self._cost(record)
            if self.spend is not None:
                self.spend.charge(record.key, record.cost_usd)
        done = self._done
        done.append(record)
        if len(done) >= DRAIN_MAX:
            self.drain()
        elif self._drain_due is None:
            self._schedule_drain()

    def _schedule_drain(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # (no loop: a script or a test) now, then
            self.drain()
            return
        self._drain_due = loop.call_later(DRAIN_SECONDS, self.drain)

    def drain(self) -> None:
        """Hand every finished record to the sinks now (also when none waits: the
        in-flight count may have changed)."""
        if self._draining:  # (a sink's own catch_up, called while it takes them)
            return
        due, self._drain_due = self._drain_due, None
        if due is not None:
            due.cancel()
        done, self._done = self._done, []
        self._draining = True
        try:
            for sink in self.sinks:
                try:
                    sink.records(done)
                except Exception:  # a sink's bug must not fail the requests that are done
                    log.exception("usage sink %r failed", sink)
        finally:
            self._draining = False


class Meter:
    """Watches a stream's bytes for the request's record: first byte, usage, errors.

    :meth:`see` is the response's ``watch`` hook (server/asgi_io.py): a plain call per chunk
    rather than one more async generator around the chunks, which cost every read of a
    relayed stream a layer of coroutine calls.

    Where to look: Messages reports usage in a stream's first event (``message_start``:
    the input tokens), every dialect in its last ones (Chat's usage chunk before
    ``[DONE]``, Messages' ``message_delta``, Responses' ``response.completed``;
    counts that repeat along the way, as vLLM's continuous usage, are cumulative, so the
    last is the largest), and an in-band error event (Chat's ``data: {"error"``,
    Messages' ``event: error``, Responses' ``response.failed``) ends its stream. So the
    first event is read once (Messages only), and the last events once when the stream is
    over, instead of scanning every byte of every chunk on its way (a stream's bytes are
    mostly text deltas, and a pattern search over them cost more than the rest of the
    record).
    """

    __slots__ = (
        "_accounting",
        "_dialect",
        "_head",
        "_on_error",
        "_prior",
        "_record",
        "_started",
        "_tab",
        "_tail",
        "_trim_at",
        "_usage",
    )

    def __init__(
        self,
        record: Record,
        dialect: Dialect,
        on_error: Callable[[BaseException], bytes] | None = None,
        accounting: Accounting | None = None,
        tab: Tab | None = None,
    ) -> None:
        """``on_error``: the response's own (renders an in-band error); ``accounting``
        finishes the record's ``tab`` (and its key's admission) when the response is
        over."""
        # (not the response: it holds this meter's ``see``, and a cycle between them
        # would keep the reads held here until a full garbage collection)
        self._record = record
        self._dialect = dialect
        self._on_error = on_error
        self._accounting = accounting
        self._tab = tab
        self._usage = StreamUsage()
        self._started = record.latency  # (the perf_counter start: see Accounting.open)
        #: the stream's bytes until its first event is whole (None: looked at, or no
        #: byte yet seen when it is b"")
        self._head: bytes | None = b""
        #: the last reads: at least those that hold the last _TAIL_EVENTS events
        self._tail: deque[bytes] = deque()
        #: the tail's length that calls for the next trim (twice what the last kept:
        #: each read costs the trims O(1) however the stream is cut)
        self._trim_at = 2 * _TAIL_EVENTS
        #: the usage of the attempts before a continuation, summed (None: not continued)
        self._prior: list[int] | None = None

    def first_byte(self, chunk: bytes) -> bool:
        """The watch of a stream that counts itself (``StreamResponse.counted``: a
        translated one, whose usage and errors the gateway puts into the record as it
        encodes them): the first chunk's time, and no more chunks (True). Reading the
        usage back out of bytes the gateway rendered itself cost a translated stream
        ~1,000 bytecodes."""
        self._record.ttft = time.perf_counter() - self._started
        self._head = None
        return True

    def see(self, chunk: bytes) -> bool:
        """One chunk on its way to the client (False: show it every chunk)."""
        head = self._head
        if head is not None:
            if not head:
                self._record.ttft = time.perf_counter() - self._started
                if self._dialect is not ANTHROPIC:  # (no usage in the others' first event)
                    self._head = None
                    self._tail.append(chunk)
                    return False
            head += chunk
            first = head.find(b"\n\n")
            if first >= 0 or len(head) > _MAX_HEAD:
                self._head = None
                self._usage.scan(head[: first + 2] if first >= 0 else head)
            else:
                self._head = head
        tail = self._tail
        tail.append(chunk)
        if len(tail) > self._trim_at:
            _trim(tail)
            self._trim_at = max(2 * _TAIL_EVENTS, 2 * len(tail))
        return False

    def last_events(self) -> bytes:
        """The last events of the stream read so far, as :meth:`done` will read them (a
        trace's finish reasons: server/telemetry.py)."""
        return _last_events(b"".join(self._tail)) if self._tail else b""

    def failed(self, exc: BaseException) -> bytes:
        """The response's ``on_error``: the failure's kind into the record, then the
        in-band error event (or ``exc`` raised again when the response renders none)."""
        record = self._record
        if record.error is None:
            record.error = exc.kind.value if isinstance(exc, InterlinguaError) else _UPSTREAM_ERROR
        if self._on_error is None:
            raise exc
        return self._on_error(exc)

    def continued(self, prior: Usage) -> None:
        """The stream broke and another attempt continues it: the usage that reaches the
        record from now on (the stream's last events, or the gateway's own
        :func:`count_usage`) includes ``prior``, the broken attempts' (which their own
        rows carry), and :meth:`done` takes it out again. Several calls add up."""
        counts = self._prior
        if counts is None:
            counts = self._prior = [0, 0, 0, 0, 0]
        counts[0] += prior.input_tokens
        counts[1] += prior.output_tokens
        counts[2] += prior.cache_read_tokens
        counts[3] += prior.reasoning_tokens
        counts[4] += prior.cache_write_tokens

    def finished(self, outcome: str) -> None:
        """The response's ``finished``: :meth:`done`, then the record to the sinks (and
        its key charged the tokens of every attempt, as its client was shown them)."""
        prior = self._prior
        self.done(outcome)
        accounting, tab = self._accounting, self._tab
        if accounting is not None and tab is not None:
            self._accounting = self._tab = None
            accounting._finish(tab, 0 if prior is None else prior[0] + prior[1])

    def done(self, outcome: str) -> None:
        """The stream is over, as ``outcome`` says: the usage of its last events into the
        record, an in-band error event marks it failed (the kind it names), and an
        outcome that is not COMPLETE is marked when nothing named its kind already. The
        reads held are let go. A continued stream's record keeps only the finishing
        attempt's tokens (:meth:`continued`)."""
        record = self._record
        if self._tail:
            tail = _last_events(b"".join(self._tail))
            self._tail.clear()
            self._usage.scan(tail)
            if record.error is None:
                for mark, line_mark in _ERROR_MARKS.get(self._dialect.name, _ANY_ERROR):
                    if tail.startswith(mark) or line_mark in tail:
                        record.error = self._error_kind(tail)
                        break
        counts = self._usage.counts
        if counts:
            _set_counts(record, counts)
        self._head = None
        if record.error is None and outcome != StreamOutcome.COMPLETE:
            record.error = _OUTCOME_ERRORS[outcome]
        prior = self._prior
        if prior is not None:  # (after every other count: the sum is complete)
            self._prior = None
            _put_counts(
                record,
                (
                    max(0, record.input_tokens - prior[0]),
                    max(0, record.output_tokens - prior[1]),
                    max(0, record.cached_tokens - prior[2]),
                    max(0, record.reasoning_tokens - prior[3]),
                    max(0, record.cache_write_tokens - prior[4]),
                    # (the neutral usage a break reports has no such split: the
                    # finishing attempt's own, at most its writes)
                    min(record.cache_write_1h_tokens, max(0, record.cache_write_tokens - prior[4])),
                ),
            )

    def _error_kind(self, chunk: bytes) -> str:
        for line in chunk.split(b"\n"):
            if line.startswith(b"data:") and b"error" in line:
                try:
                    payload = orjson.loads(line[5:])
                except orjson.JSONDecodeError:
                    continue
                if isinstance(payload, dict) and isinstance(payload.get("error"), dict):
                    error = self._dialect.parse_error(500, line[5:], {})
                    return error.kind.value
        return _UPSTREAM_ERROR


#: a record's error for a stream that ended so, when nothing more precise was noted (a
#: break or the shutdown's end are, by the error they raise or send)
_OUTCOME_ERRORS = {
    StreamOutcome.CLIENT_GONE: CLIENT_DISCONNECT,
    StreamOutcome.BROKEN: ErrorKind.UPSTREAM_ERROR.value,
    StreamOutcome.SHUTDOWN: ErrorKind.OVERLOADED.value,
    StreamOutcome.CANCELLED: CANCELLED,
}

#: how an in-band error event starts, per client dialect (what the gateway renders and
#: each API sends), each with the line break before it (a mark anywhere else is text)
_ERROR_MARKS = {
    "openai": ((b'data: {"error"', b'\ndata: {"error"'),),
    "anthropic": ((b"event: error", b"\nevent: error"),),
    "responses": (
        (b"event: response.failed", b"\nevent: response.failed"),
        (b"event: error", b"\nevent: error"),
    ),
}
_ANY_ERROR = tuple(mark for marks in _ERROR_MARKS.values() for mark in marks)

#: events looked at for usage and an in-band error at a stream's end (Messages:
#: message_delta, then perhaps a ping, then message_stop; Chat: the usage chunk or the
#: error, then ``data: [DONE]``)
_TAIL_EVENTS = 4
#: the most of a stream's start kept while waiting for its first event to be whole
_MAX_HEAD = 1 << 20


def _trim(reads: deque[bytes]) -> None:
    """Drop the oldest of ``reads`` that the last :data:`_TAIL_EVENTS` events do not
    reach."""
    found = 0
    newer = b""
    for i in range(len(reads) - 1, 0, -1):
        read = reads[i]
        if newer.startswith(b"\n") and read.endswith(b"\n"):  # an end split in two
            found += 1
        end = len(read)
        while found <= _TAIL_EVENTS:
            end = read.rfind(b"\n\n", 0, end)
            if end < 0:
                break
            found += 1
        if found > _TAIL_EVENTS:  # reads[i] holds the end of the event before them all
            for _ in range(i):
                reads.popleft()
            return
        newer = read


def _last_events(data: bytes) -> bytes:
    """The last :data:`_TAIL_EVENTS` SSE events of ``data`` (all of it if fewer)."""
    end = len(data.rstrip(b"\n"))
    for _ in range(_TAIL_EVENTS):
        end = data.rfind(b"\n\n", 0, end)
        if end < 0:
            return data
    return data[end + 2 :]


def _count_body(record: Record, body: bytes) -> None:
    counts = body_counts(body)
    if counts is not None:
        _put_counts(record, counts)


async def strip_usage(chunks: AsyncIterator[bytes], record: Record) -> AsyncIterator[bytes]:
    """``chunks`` (whole SSE events of a Chat Completions stream) less the usage-only
    chunks, whose counts go to ``record`` instead."""
    try:
        async for chunk in chunks:
            if USAGE_MARK.search(chunk) is None:
                yield chunk
                continue
            kept = []
            for event in chunk.split(b"\n\n"):
                usage = usage_chunk(event)
                if usage is not None:
                    _set_counts(record, usage)
                    continue
                kept.append(event)
            data = b"\n\n".join(kept)
            if data:
                yield data
    finally:
        await aclose_iterator(chunks)


def count_usage(record: Record, usage: Usage) -> None:
    """The neutral usage of a translated stream's end, into ``record`` (the bytes the
    client gets may not show it)."""
    record.input_tokens = usage.input_tokens
    record.output_tokens = usage.output_tokens
    record.cached_tokens = usage.cache_read_tokens
    record.reasoning_tokens = usage.reasoning_tokens
    record.cache_write_tokens = usage.cache_write_tokens
    record.cache_write_1h_tokens = 0  # (the neutral usage does not split the writes)


def _set_counts(record: Record, usage: dict[str, Any]) -> None:
    _put_counts(record, usage_counts(usage))


def _put_counts(record: Record, counts: Counts) -> None:
    """(input, output, cached, reasoning, cache write, 1-hour write) tokens into
    ``record``."""
    (
        record.input_tokens,
        record.output_tokens,
        record.cached_tokens,
        record.reasoning_tokens,
        record.cache_write_tokens,
        record.cache_write_1h_tokens,
    ) = counts
