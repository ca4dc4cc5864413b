"""Prometheus metrics of the gateway, served at ``GET /metrics`` (``metrics: true``, the default).

What is counted (``model`` is the name the client asked for; ``key`` is the client key's
*name*, empty when no named keys are configured; a key itself never appears):

* ``interlingua_requests_total{model,key,dialect,status}`` -- finished requests, by the
  HTTP status the client got (a stream that failed mid-way keeps its 200: see the next);
* ``interlingua_request_errors_total{model,key,kind}`` -- requests that failed, before or
  during the answer, by error kind (``errors.ErrorKind``: ``rate_limit``, ``timeout``...;
  a stream that broke after its 200 has the kind of what broke it);
* ``interlingua_stream_continuations_total{model,fault}`` -- streams that broke after
  their first byte and that another attempt continued (``on_stream_break: continue``),
  by the error kind of the break; the broken attempt's row (``usage.record.CONTINUED``)
  counts its tokens below, but neither as a request nor as an error (the client got
  its answer: the request is counted once, by the row of the attempt that finished it);
* ``interlingua_client_disconnects_total{model,key}`` -- requests whose client hung up
  before the answer's last byte was handed over (not failures: a client that hangs up
  after it is a success);
* ``interlingua_request_duration_seconds{model,stream}`` -- arrival to the last byte;
* ``interlingua_time_to_first_token_seconds{model}`` -- arrival to the first streamed byte;
* ``interlingua_tokens_total{model,key,direction}`` -- ``input`` and ``output`` tokens as
  the upstream reported them, and the ``cached`` (a part of input) and ``reasoning`` (a
  part of output) among them: do not sum all four directions;
* ``interlingua_cost_usd_total{key,model}`` -- US dollars spent, at the price of the
  deployment that answered each request (docs/usage-log.md, "Cost"): summed exactly per
  flush, exported as the float a counter holds; a model without a price adds nothing
  (its requests are unpriced, not free: ``interlingua usage --cost`` counts them);
* ``interlingua_in_flight`` -- requests being answered now;
* ``interlingua_upstream_attempts_total{upstream,outcome}`` -- calls of each upstream
  (``outcome``: ``ok`` or ``error``; retries and fallbacks each count), and
  ``interlingua_upstream_errors_total{upstream,kind}`` -- the failed ones by kind;
* ``interlingua_upstream_queue_depth{upstream}`` -- requests waiting in an upstream's
  ``limits`` line (upstreams/limited.py).

The request path reports :meth:`Metrics.attempt` per upstream call and
:meth:`Metrics.continued` per continuation (both through the router's hooks); the finished
:class:`~interlingua.usage.Record` reach :meth:`Metrics.records` in batches (the metrics
are a ``RecordSink``: server/accounting.py), and the requests in flight are the
accounting's count (:attr:`Metrics.live`), read at each flush.

**Cost** (the gateway's hot path; bench/metrics_record.py measures it): a request is
counted in plain Python numbers -- one dict lookup by its label tuple, a few additions, a
bisect per histogram -- and those are added to the prometheus-client metrics only when
someone reads them (:meth:`Metrics.flush`: at each scrape, and in multiprocess mode at
most :data:`FLUSH_SECONDS` after a change). prometheus-client's own ``inc``/``observe``
take a lock each, and in multiprocess mode write a memory-mapped file each: a request
would cost a dozen of those. Label children are resolved once per label tuple. Model
names are bounded: past :data:`MAX_MODELS` distinct names (a wildcard route lets clients
send any name) further ones are counted under ``model="other"``.

**Several worker processes** (``serve --workers N``) write into prometheus-client's
multiprocess files and any worker's scrape adds them all up (server/views/multiproc.py); what
the other workers counted is then at most :data:`FLUSH_SECONDS` old.

**Access**: ``/metrics`` asks for no key, as vLLM's and LiteLLM's do by default: scrapers
run inside the network, and the text holds names and counts, no secret. Turn it off with
``metrics: false`` (then ``/metrics`` is a 404) where even the names must not be seen.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import weakref
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from functools import partial
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response
from starlette.routing import Route

from ...limits import Limiter
from ...upstreams.base import Upstream
from ...upstreams.limited import LimitedUpstream
from ...usage.record import CLIENT_DISCONNECT, CONTINUED, Record, nothing_to_catch_up
from .multiproc import forget_dead_workers, multiprocess_dir

__all__ = [
    "DURATION_BUCKETS",
    "FLUSH_SECONDS",
    "MAX_MODELS",
    "OTHER_MODEL",
    "TTFT_BUCKETS",
    "Metrics",
    "metrics_routes",
]

log = logging.getLogger("interlingua.server")

#: distinct ``model`` label values kept per process; later names count as OTHER_MODEL
MAX_MODELS = 500
OTHER_MODEL = "other"
#: an LLM answer takes from tens of milliseconds (a refusal, a cached reply) to minutes
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: multiprocess mode: seconds at most between a change and its flush to the shared files
FLUSH_SECONDS = 1.0

_DIRECTIONS = ("input", "output", "cached", "reasoning")
_NO_COST = Decimal(0)
#: the bucket index of a duration, of a time to first token (the last: above every bound)
_DURATION_AT = partial(bisect_left, DURATION_BUCKETS)
_TTFT_AT = partial(bisect_left, TTFT_BUCKETS)


class _Requests:
    """What one (model, key, dialect, status, stream) counted since the last flush, and
    the label children it is flushed into."""

    __slots__ = (
        "cost",
        "cost_child",
        "cost_labels",
        "dirty",
        "duration",
        "duration_child",
        "duration_sum",
        "requests",
        "requests_child",
        "tokens",
        "tokens_children",
        "ttft",
        "ttft_child",
        "ttft_sum",
    )

    def __init__(self, metrics: Metrics, labels: tuple[str, str, str, int, bool]) -> None:
        model, key, dialect, status, stream = labels
        self.requests_child = metrics.requests.labels(model, key, dialect, str(status))
        self.duration_child = metrics.duration.labels(model, "true" if stream else "false")
        self.ttft_child = metrics.ttft.labels(model)
        self.tokens_children = [metrics.tokens.labels(model, key, d) for d in _DIRECTIONS]
        self.dirty = False
        self.requests = 0
        #: observations per bucket (the last one: above every bound), and their sum
        self.duration = [0] * (len(DURATION_BUCKETS) + 1)
        self.duration_sum = 0.0
        self.ttft = [0] * (len(TTFT_BUCKETS) + 1)
        self.ttft_sum = 0.0
        self.tokens = [0, 0, 0, 0]
        #: the dollars of the priced requests since the last flush, exact
        self.cost = _NO_COST
        #: its counter child, made at the first priced request (an unpriced model shows
        #: no cost at all rather than a misleading 0)
        self.cost_child: Any = None
        self.cost_labels = partial(metrics.cost.labels, key, model)

    def flush(self) -> None:
        self.dirty = False
        if self.cost:
            if self.cost_child is None:
                self.cost_child = self.cost_labels()
            self.cost_child.inc(float(self.cost))
            self.cost = _NO_COST
        self.requests_child.inc(self.requests)
        self.requests = 0
        _observed(self.duration_child, self.duration, self.duration_sum)
        self.duration_sum = 0.0
        if any(self.ttft):
            _observed(self.ttft_child, self.ttft, self.ttft_sum)
            self.ttft_sum = 0.0
        tokens = self.tokens
        for i, child in enumerate(self.tokens_children):
            if tokens[i]:
                child.inc(tokens[i])
                tokens[i] = 0


class _Count:
    """One counter child and what it counted since the last flush."""

    __slots__ = ("child", "dirty", "n")

    def __init__(self, child: Any) -> None:
        self.child = child
        self.dirty = False
        self.n = 0

    def flush(self) -> None:
        self.dirty = False
        self.child.inc(self.n)
        self.n = 0


class _Line:
    """An upstream's waiting line, its gauge child, and the depth the gauge shows."""

    __slots__ = ("gauge", "limiter", "shown")

    def __init__(self, limiter: Limiter, gauge: Any) -> None:
        self.limiter = limiter
        self.gauge = gauge
        self.shown = -1


def _observed(child: Any, counts: list[int], total: float) -> None:
    """Add ``counts[i]`` observations to bucket ``i`` of a Histogram child, and ``total``
    to its sum (and zero ``counts``): what ``observe()`` does for one value. There is no
    public call for many at once; ``_buckets``/``_sum`` have been the Histogram's since
    prometheus-client's first releases, and the tests read the result back."""
    buckets = child._buckets
    for i, n in enumerate(counts):
        if n:
            buckets[i].inc(n)
            counts[i] = 0
    child._sum.inc(total)


class Metrics:
    """The gateway's Prometheus metrics (see the module docstring); a ``RecordSink``.

    ``upstreams`` are the gateway's built upstreams (name -> Upstream): those with
    ``limits`` have a waiting line whose depth is exported. ``registry`` is where the
    metrics register (default: one of this object's own, so that several apps in one
    process do not clash); in multiprocess mode (:func:`~.multiproc.multiprocess_dir`)
    a scrape reads the shared files instead.

    >>> metrics = Metrics()
    >>> metrics.request_started(); metrics.request_ended()
    >>> body, content_type = metrics.render()
    >>> b"interlingua_in_flight 0.0" in body
    True
    """

    def __init__(
        self,
        upstreams: Mapping[str, Upstream] | None = None,
        *,
        registry: CollectorRegistry | None = None,
    ) -> None:
        #: the multiprocess directory (None: this process alone)
        self.directory = multiprocess_dir()
        self.registry = registry if registry is not None else CollectorRegistry()
        self._declare(self.registry)
        self._requests: dict[tuple[str, str, str, int, bool], _Requests] = {}
        self._errors: dict[tuple[str, str, str], _Count] = {}
        self._attempts: dict[tuple[str, str], tuple[_Count, ...]] = {}
        self._continuations: dict[tuple[str, str], _Count] = {}
        #: what changed since the last flush
        self._dirty: list[_Requests | _Count] = []
        self._models: set[str] = set()
        self._in_flight = 0
        #: requests in flight that another counts (the accounting's, which sets this);
        #: the gauge shows these and what :meth:`request_started` counted
        self.live: Callable[[], int] = _none
        #: hands over the records that wait to be counted (the accounting sets it)
        self.catch_up: Callable[[], None] = nothing_to_catch_up
        self._in_flight_shown = -1
        self._lines: dict[str, _Line] = {}
        self.upstreams(upstreams or {})
        #: multiprocess mode: flush on a timer too (the other workers' scrapes read us)
        self._timed = self.directory is not None
        self._flush_due = False
        self._failed_once = False
        self.flush()
        if self._timed:  # what the last second counted, when this worker exits
            atexit.register(_flush_at_exit, weakref.ref(self))

    def upstreams(self, upstreams: Mapping[str, Upstream]) -> None:
        """Gauge the waiting lines of ``upstreams`` (those with ``limits``), the ones a
        reload now serves: an added upstream gets its gauge, a removed one loses it, a
        rebuilt one's gauge follows its new line."""
        limited = {n: u for n, u in upstreams.items() if isinstance(u, LimitedUpstream)}
        lines = self._lines
        for name in [n for n in lines if n not in limited]:
            del lines[name]
            self.queue_depth.remove(name)  # (its label was made with its line)
        for name, upstream in limited.items():
            if name not in lines or lines[name].limiter is not upstream.limiter:
                lines[name] = _Line(upstream.limiter, self.queue_depth.labels(name))

    def _declare(self, r: CollectorRegistry) -> None:
        self.requests = Counter(
            "interlingua_requests_total",
            "Finished requests, by the model asked for, client key name, client dialect and "
            "HTTP status.",
            ["model", "key", "dialect", "status"],
            registry=r,
        )
        self.request_errors = Counter(
            "interlingua_request_errors_total",
            "Requests that failed (before or during the answer), by error kind.",
            ["model", "key", "kind"],
            registry=r,
        )
        self.client_disconnects = Counter(
            "interlingua_client_disconnects_total",
            "Requests whose client hung up before the answer's last byte was handed over.",
            ["model", "key"],
            registry=r,
        )
        self.duration = Histogram(
            "interlingua_request_duration_seconds",
            "Seconds from a request's arrival to its answer's last byte.",
            ["model", "stream"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.ttft = Histogram(
            "interlingua_time_to_first_token_seconds",
            "Seconds from a streamed request's arrival to its first streamed byte.",
            ["model"],
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.tokens = Counter(
            "interlingua_tokens_total",
            "Tokens as upstreams reported them: input, output, and the cached (part of "
            "input) and reasoning (part of output) among them.",
            ["model", "key", "direction"],
            registry=r,
        )
        self.cost = Counter(
            "interlingua_cost_usd_total",
            "US dollars spent, at the price of the deployment that answered (unpriced "
            "models add nothing).",
            ["key", "model"],
            registry=r,
        )
        self.in_flight = Gauge(
            "interlingua_in_flight",
            "Requests being answered now.",
            registry=r,
            multiprocess_mode="livesum",
        )
        self.attempts = Counter(
            "interlingua_upstream_attempts_total",
            "Calls of an upstream (each retry and fallback counts), by outcome: ok or error.",
            ["upstream", "outcome"],
            registry=r,
        )
        self.upstream_errors = Counter(
            "interlingua_upstream_errors_total",
            "Failed calls of an upstream, by error kind.",
            ["upstream", "kind"],
            registry=r,
        )
        self.continuations = Counter(
            "interlingua_stream_continuations_total",
            "Streams that broke after their first byte and were continued by another "
            "attempt, by the model asked for and the error kind of the break.",
            ["model", "fault"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "interlingua_upstream_queue_depth",
            "Requests waiting in an upstream's limits line.",
            ["upstream"],
            registry=r,
            multiprocess_mode="livesum",
        )

    # -- what the request path reports --------------------------------------------------

    def request_started(self) -> None:
        """A request arrived (call :meth:`request_ended` when its answer has ended)."""
        self._in_flight += 1
        if self._timed and not self._flush_due:
            self._schedule_flush()

    def request_ended(self) -> None:
        """A request :meth:`request_started` counted has ended, however it ended."""
        self._in_flight -= 1
        if self._timed and not self._flush_due:
            self._schedule_flush()

    def attempt(self, upstream: str, outcome: str) -> None:
        """One call of ``upstream`` ended: ``outcome`` is ``"ok"`` or the error kind
        (an ``errors.ErrorKind`` value, e.g. ``"rate_limit"``)."""
        counts = self._attempts.get((upstream, outcome))
        if counts is None:
            counts = self._attempt_counts(upstream, outcome)
        for count in counts:
            count.n += 1
            if not count.dirty:
                count.dirty = True
                self._dirty.append(count)
        if self._timed and not self._flush_due:
            self._schedule_flush()

    def continued(self, model: str, fault: str) -> None:
        """A stream of ``model`` (the name the client asked for) broke after its first
        byte, for ``fault`` (the error kind of the break, e.g. ``"timeout"``), and
        another attempt continued it (the router's ``continued`` hook)."""
        if model not in self._models:
            model = self._admit(model)
        count = self._continuations.get((model, fault))
        if count is None:
            child = self.continuations.labels(model, fault)
            count = self._continuations[(model, fault)] = _Count(child)
        count.n += 1
        if not count.dirty:
            count.dirty = True
            self._dirty.append(count)
        if self._timed and not self._flush_due:
            self._schedule_flush()

    def record(self, row: Record) -> None:
        """Count one finished request (:meth:`records` of one)."""
        self.records((row,))

    def records(self, rows: Sequence[Record]) -> None:
        """Count finished requests (a ``RecordSink``: never blocks, never raises)."""
        try:
            self._count(rows)
        except Exception:
            if not self._failed_once:  # a bug here must not flood the log on every request
                self._failed_once = True
                log.exception("metrics: a request could not be counted")
        if self._timed and not self._flush_due:
            self._schedule_flush()  # (the in-flight count may have changed too)

    def _count(self, rows: Sequence[Record]) -> None:
        # (one loop over the batch, every name it needs local: ~0.5 µs a record)
        models, requests, dirty = self._models, self._requests, self._dirty
        duration_at, ttft_at = _DURATION_AT, _TTFT_AT
        for row in rows:
            try:
                model = row.model
                if model not in models:
                    model = self._admit(model)
                key = row.key or ""
                labels = (model, key, row.dialect, row.status, row.stream)
                counts = requests.get(labels)
                if counts is None:
                    counts = requests[labels] = _Requests(self, labels)
                error = row.error
                if error is not None and error == CONTINUED:
                    self._count_continued(counts, row)
                    continue
                latency = row.latency
                ttft = row.ttft
                # (both checked before anything is added: a record with a broken time
                # counts nowhere, not in part)
                bucket = duration_at(latency)
                if ttft is not None:
                    counts.ttft[ttft_at(ttft)] += 1
                    counts.ttft_sum += ttft
                counts.duration[bucket] += 1
                counts.duration_sum += latency
                tokens = counts.tokens
                tokens[0] += row.input_tokens
                tokens[1] += row.output_tokens
                tokens[2] += row.cached_tokens
                tokens[3] += row.reasoning_tokens
                cost = row.cost_usd
                if cost is not None:
                    counts.cost += cost
                counts.requests += 1
                if not counts.dirty:
                    counts.dirty = True
                    dirty.append(counts)
                if error is not None:
                    self._count_error(model, key, error)
            except Exception:
                if not self._failed_once:  # (one bad record: the others still count)
                    self._failed_once = True
                    log.exception("metrics: a request could not be counted")

    def _count_continued(self, counts: _Requests, row: Record) -> None:
        """The row of an attempt whose broken stream another attempt continued: its
        tokens were spent, but the request (its duration, its outcome) is its finishing
        attempt's row, and the break is counted by :meth:`continued`."""
        tokens = counts.tokens
        tokens[0] += row.input_tokens
        tokens[1] += row.output_tokens
        tokens[2] += row.cached_tokens
        tokens[3] += row.reasoning_tokens
        if row.cost_usd is not None:  # (its tokens were paid for too)
            counts.cost += row.cost_usd
        if not counts.dirty:
            counts.dirty = True
            self._dirty.append(counts)

    def _count_error(self, model: str, key: str, kind: str) -> None:
        count = self._errors.get((model, key, kind))
        if count is None:
            if kind == CLIENT_DISCONNECT:  # (not a failure: a counter of its own)
                child = self.client_disconnects.labels(model, key)
            else:
                child = self.request_errors.labels(model, key, kind)
            count = self._errors[(model, key, kind)] = _Count(child)
        count.n += 1
        if not count.dirty:
            count.dirty = True
            self._dirty.append(count)

    def _admit(self, model: str) -> str:
        """``model`` as its label: itself while fewer than MAX_MODELS names are kept."""
        if len(self._models) < MAX_MODELS:
            self._models.add(model)
            return model
        return OTHER_MODEL

    def _attempt_counts(self, upstream: str, outcome: str) -> tuple[_Count, ...]:
        ok = outcome == "ok"
        counts: tuple[_Count, ...] = (
            _Count(self.attempts.labels(upstream, "ok" if ok else "error")),
        )
        if not ok:
            counts += (_Count(self.upstream_errors.labels(upstream, outcome)),)
        self._attempts[(upstream, outcome)] = counts
        return counts

    # -- flushing into prometheus-client ------------------------------------------------

    def flush(self) -> None:
        """Add what was counted since the last flush to the prometheus-client metrics,
        and read the in-flight count and the upstream lines now."""
        self.catch_up()
        dirty, self._dirty = self._dirty, []
        for counts in dirty:
            counts.flush()
        in_flight = self._in_flight + self.live()
        if in_flight != self._in_flight_shown:
            self._in_flight_shown = in_flight
            self.in_flight.set(in_flight)
        for line in self._lines.values():
            depth = line.limiter.waiting
            if depth != line.shown:
                line.shown = depth
                line.gauge.set(depth)

    def _schedule_flush(self) -> None:
        """Multiprocess mode: flush within FLUSH_SECONDS (once per interval, and once
        more after the last change, so the shared files settle on the last state)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # (no loop: a script, or a test) now, then
            self.flush()
            return
        self._flush_due = True
        loop.call_later(FLUSH_SECONDS, self._timed_flush)

    def _timed_flush(self) -> None:
        self._flush_due = False
        self.flush()

    # -- the scrape ---------------------------------------------------------------------

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """The exposition text (all workers' counts in multiprocess mode) and its content
        type: the Prometheus text format, or OpenMetrics when ``accept`` (the scraper's
        Accept header) asks for it."""
        self.flush()
        return self._exposition(accept)

    def _exposition(self, accept: str | None) -> tuple[bytes, str]:
        encoder, content_type = choose_encoder(accept or "")
        if self.directory is None:
            return encoder(self.registry), content_type
        forget_dead_workers(self.directory)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=self.directory)  # type: ignore[no-untyped-call]
        return encoder(registry), content_type

    async def endpoint(self, request: HTTPRequest) -> Response:
        """``GET /metrics``. The flush runs here, on the loop that counts; the rendering
        (which reads every worker's file in multiprocess mode) in a thread."""
        self.flush()
        accept = request.headers.get("accept")
        body, content_type = await asyncio.to_thread(self._exposition, accept)
        return Response(body, media_type=content_type)


def _none() -> int:
    return 0


def _flush_at_exit(ref: weakref.ref[Metrics]) -> None:
    metrics = ref()
    if metrics is not None:
        metrics.flush()


def metrics_routes(metrics: Metrics | None) -> list[Route]:
    """``GET /metrics``, or nothing when metrics are off (the path is then a 404)."""
    if metrics is None:
        return []
    return [Route("/metrics", metrics.endpoint, methods=["GET"])]
