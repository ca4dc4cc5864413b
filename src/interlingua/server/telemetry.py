"""OpenTelemetry traces of the generation requests (``telemetry`` in the config).

Each generation request becomes one span (kind SERVER, named ``chat {model}``) with the
GenAI semantic conventions (``gen_ai.*``), and each HTTP request it made to an upstream
a child span (kind CLIENT): retries, fallbacks and the attempts that continued a broken
stream alike. The request span's parent is the client's ``traceparent`` when it sent
one; each upstream request carries a ``traceparent`` naming its attempt's span
(interlingua/tracing.py).

Nothing is built while the request is answered: the request's :class:`~..tracing.Trace`
gathers its attempts' times, and once the request is over (its usage record finished:
server/accounting.py) the spans are made from the record and the trace, with the
records that ended about then, and queued to the SDK's ``BatchSpanProcessor``, whose
own thread encodes and posts them (OTLP/HTTP protobuf). A collector that is away costs
a dropped batch and the exporter's log line; a full queue drops spans, never waits.

Prompts and answers are exported only with ``telemetry.content: true``
(``gen_ai.input.messages``, ``gen_ai.system_instructions``, ``gen_ai.output.messages``,
as JSON in the client's dialect; a stream's answer is not kept).

This module imports OpenTelemetry when a :class:`Telemetry` is made, so a gateway
without ``telemetry`` never loads it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ..config import Config, TelemetryConfig
from ..tracing import TRACE, Attempt, Trace
from ..usage.record import Record, failed
from .accounting import Meter
from .asgi_io import StreamResponse

__all__ = ["PROVIDERS", "Telemetry", "trace_stream"]

log = logging.getLogger("interlingua.server")

#: ``gen_ai.provider.name`` of an upstream kind (the semantic conventions' names); any
#: other kind is named as itself
PROVIDERS = {"openai": "openai", "responses": "openai", "anthropic": "anthropic"}
#: where each dialect keeps a request's output limit, its prompt and its instructions
_MAX_TOKENS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
_INPUT = ("messages", "input")
_SYSTEM = ("system", "instructions")
#: the events at a stream's end read for its finish reasons
_STREAM_EVENTS = 8
#: seconds the exporter waits for the collector per batch
_EXPORT_TIMEOUT = 5.0
#: seconds the gateway's exit waits for the last spans to be exported
_SHUTDOWN_WAIT = 1.0


class Telemetry:
    """The spans of one gateway's requests (module docstring); a record sink."""

    def __init__(self, config: Config) -> None:
        settings = config.telemetry
        assert settings is not None
        self.content = settings.content
        self._provider: dict[str, str] = {}
        self.upstreams(config)
        #: the requests in flight: id(record) -> (record, trace), until the record ends
        self._live: dict[int, tuple[Record, Trace]] = {}
        self._otel = _Otel(settings)

    def upstreams(self, config: Config) -> None:
        """Name the providers of ``config``'s upstreams (at start, and after a reload)."""
        self._provider = {
            name: PROVIDERS.get(cfg.kind, cfg.kind) for name, cfg in config.upstreams.items()
        }

    def begin(self, headers: Mapping[str, str], record: Record) -> Trace:
        """The trace of the request ``record`` counts, set for its task."""
        trace = Trace.begin(headers)
        self._live[id(record)] = (record, trace)
        TRACE.set(trace)
        return trace

    def observe(self, upstream: str, outcome: str) -> None:
        """The router's attempt observer: an attempt ended (``"ok"`` or its error kind)."""
        trace = TRACE.get()
        if trace is not None:
            trace.outcome(upstream, outcome)

    def records(self, rows: Sequence[Record]) -> None:
        """The spans of the requests that ended, to the exporter's queue."""
        live = self._live
        for row in rows:
            entry = live.pop(id(row), None)
            if entry is not None and entry[0] is row:  # (a continued attempt's row: none)
                self._otel.export(self._spans(row, entry[1]))

    def _spans(self, row: Record, trace: Trace) -> list[Any]:
        start = int(row.at * 1e9)
        end = start + int(row.latency * 1e9)
        otel = self._otel
        spans = [
            otel.span(
                f"chat {row.model}".rstrip(),
                trace,
                None,
                start,
                end,
                self._request_attributes(row, trace),
                failed(row),
            )
        ]
        for number, attempt in enumerate(trace.attempts, 1):
            last = attempt.end
            if last is None:  # (answered: a whole answer ends there, a stream with the request)
                last = end if row.stream or attempt.first_byte is None else attempt.first_byte
            attributes = self._attempt_attributes(trace.attempts, number, attempt)
            spans.append(
                otel.span(
                    f"chat {attempt.upstream}",
                    trace,
                    attempt,
                    attempt.start,
                    max(last, attempt.start),
                    attributes,
                    attempt.error is not None,
                )
            )
        return spans

    def _request_attributes(self, row: Record, trace: Trace) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": row.model,
            "gen_ai.usage.input_tokens": row.input_tokens,
            "gen_ai.usage.output_tokens": row.output_tokens,
            "http.response.status_code": row.status,
            "interlingua.request_id": row.request_id,
            "interlingua.dialect": row.dialect,
            "interlingua.stream": row.stream,
        }
        if row.upstream is not None:
            attributes["gen_ai.provider.name"] = self._provider.get(row.upstream, row.upstream)
            attributes["interlingua.upstream"] = row.upstream
        if row.upstream_model is not None:
            attributes["gen_ai.response.model"] = row.upstream_model
        if row.cached_tokens:
            attributes["gen_ai.usage.cache_read.input_tokens"] = row.cached_tokens
        if row.cost_usd is not None:  # (the GenAI conventions name no cost: ours)
            attributes["interlingua.cost_usd"] = float(row.cost_usd)
        if row.key is not None:
            attributes["interlingua.key"] = row.key
        if failed(row):
            attributes["error.type"] = row.error or str(row.status)
        body = trace.body or {}
        for field in _MAX_TOKENS:
            if isinstance(limit := body.get(field), int):
                attributes["gen_ai.request.max_tokens"] = limit
                break
        answer = _answer(trace.answer) if trace.answer and row.status < 400 else None
        if answer is not None:
            reasons = _finish_reasons(answer)
        else:
            reasons = _stream_reasons(trace.tail) if trace.tail else []
        if reasons:
            attributes["gen_ai.response.finish_reasons"] = reasons
        if self.content:
            _content(attributes, body, answer)
        return attributes

    def _attempt_attributes(
        self, attempts: list[Attempt], number: int, attempt: Attempt
    ) -> dict[str, Any]:
        retry = sum(1 for a in attempts[: number - 1] if a.upstream == attempt.upstream)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self._provider.get(attempt.upstream, attempt.upstream),
            "interlingua.upstream": attempt.upstream,
            "interlingua.attempt": number,
            "interlingua.retry": retry,
        }
        if attempt.status is not None:
            attributes["http.response.status_code"] = attempt.status
        if attempt.first_byte is not None:
            attributes["interlingua.time_to_first_byte"] = (
                attempt.first_byte - attempt.start
            ) / 1e9
        if attempt.error is not None:
            attributes["error.type"] = attempt.error
        return attributes

    async def aclose(self) -> None:
        """Export what is queued (the exporter's timeout bounds a collector that is
        away), in a thread: the loop keeps serving the other apps' shutdown."""
        await asyncio.to_thread(self._otel.shutdown)


def trace_stream(response: StreamResponse, trace: Trace) -> None:
    """A relayed stream's last events to ``trace`` when it ends (its finish reasons),
    read from its meter's tail once, just before the meter lets the tail go. (A
    translated stream's encoder puts its last batch there itself: server/gateway.py.)"""
    finished = response.finished
    meter = getattr(finished, "__self__", None)
    if response.counted or finished is None or not isinstance(meter, Meter):
        return

    def traced(outcome: str) -> None:
        trace.tail = meter.last_events()
        finished(outcome)

    response.finished = traced


class _Otel:
    """The SDK's pieces: a batch processor over the OTLP/HTTP exporter, and the span
    values it takes (built with the ids the request already sent upstream)."""

    def __init__(self, settings: TelemetryConfig) -> None:
        from opentelemetry import trace as api
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        from .. import __version__

        self._api = api
        self._span = ReadableSpan
        self._resource = Resource.create({"service.name": settings.service_name})
        self._scope = InstrumentationScope("interlingua", __version__)

        class Exporter(OTLPSpanExporter):
            """Stopped once: :meth:`_Otel.shutdown` stops it early, the processor again."""

            stopped = False

            def shutdown(self) -> None:
                if not self.stopped:
                    self.stopped = True
                    super().shutdown()  # type: ignore[no-untyped-call]

        self._exporter = Exporter(
            endpoint=f"{settings.otlp_endpoint}/v1/traces", timeout=_EXPORT_TIMEOUT
        )
        self._processor: Any = BatchSpanProcessor(self._exporter)

    def span(
        self,
        name: str,
        trace: Trace,
        attempt: Attempt | None,
        start: int,
        end: int,
        attributes: dict[str, Any],
        error: bool,
    ) -> Any:
        """A finished span of ``trace``: the request's (``attempt`` None) or an attempt's."""
        api = self._api
        state = api.TraceState.from_header([trace.state]) if trace.state else None
        flags = api.TraceFlags(trace.flags & 1)

        def context(span_id: int, remote: bool = False) -> Any:
            return api.SpanContext(trace.trace_id, span_id, remote, flags, state)

        if attempt is None:
            own, kind = context(trace.span_id), api.SpanKind.SERVER
            parent = context(trace.parent_id, True) if trace.parent_id else None
        else:
            own, kind, parent = (
                context(attempt.span_id),
                api.SpanKind.CLIENT,
                context(trace.span_id),
            )
        status = api.Status(api.StatusCode.ERROR if error else api.StatusCode.UNSET)
        return self._span(
            name,
            context=own,
            parent=parent,
            resource=self._resource,
            attributes=attributes,
            kind=kind,
            status=status,
            start_time=start,
            end_time=end,
            instrumentation_scope=self._scope,
        )

    def export(self, spans: list[Any]) -> None:
        on_end = self._processor.on_end
        for span in spans:
            on_end(span)

    def shutdown(self) -> None:
        """Export what is queued, for a bounded time: a collector that is away would hold
        the exit for the exporter's whole retry time, so after the flush's time the
        exporter is stopped (its retries end). (The SDK's ``force_flush`` timeout does not
        bound an export already retrying.)"""
        closing = threading.Thread(target=self._processor.shutdown, daemon=True)
        closing.start()
        closing.join(_SHUTDOWN_WAIT)
        if closing.is_alive():
            self._exporter.shutdown()
            closing.join()


def _answer(body: bytes) -> dict[str, Any] | None:
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return answer if isinstance(answer, dict) else None


def _finish_reasons(answer: dict[str, Any]) -> list[str]:
    """Why a whole answer ended, as its dialect says it: Chat's ``finish_reason`` per
    choice, Messages' ``stop_reason``, Responses' ``status`` (with the reason it is
    ``incomplete``)."""
    choices = answer.get("choices")
    if isinstance(choices, list):
        return [
            c["finish_reason"]
            for c in choices
            if isinstance(c, dict) and isinstance(c.get("finish_reason"), str)
        ]
    if isinstance(reason := answer.get("stop_reason"), str):
        return [reason]
    details = answer.get("incomplete_details")
    if isinstance(details, dict) and isinstance(details.get("reason"), str):
        return [details["reason"]]
    status = answer.get("status")
    return [status] if isinstance(status, str) else []


def _stream_reasons(tail: bytes) -> list[str]:
    """Why a stream ended, from its last events as its dialect says it: Chat's
    ``finish_reason`` per choice, Messages' ``message_delta`` ``stop_reason``, Responses'
    final ``response`` (as :func:`_finish_reasons` reads a whole one)."""
    reasons: list[str] = []
    for event in tail.split(b"\n\n")[-_STREAM_EVENTS:]:
        for line in event.split(b"\n"):
            if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                continue
            try:
                data = orjson.loads(line[5:])
            except orjson.JSONDecodeError:
                continue
            if not isinstance(data, dict):
                continue
            if isinstance(final := data.get("response"), dict) and data.get("type") != (
                "response.created"
            ):
                reasons = _finish_reasons(final)
            elif isinstance(delta := data.get("delta"), dict) and isinstance(
                stop := delta.get("stop_reason"), str
            ):
                reasons.append(stop)
            elif isinstance(data.get("choices"), list):
                reasons += _finish_reasons(data)
    return reasons


def _content(
    attributes: dict[str, Any], body: dict[str, Any], answer: dict[str, Any] | None
) -> None:
    """The prompt and the answer as JSON attributes (opt-in: ``telemetry.content``)."""
    for field in _INPUT:
        if field in body:
            attributes["gen_ai.input.messages"] = orjson.dumps(body[field]).decode()
            break
    for field in _SYSTEM:
        if field in body:
            attributes["gen_ai.system_instructions"] = orjson.dumps(body[field]).decode()
            break
    if answer is not None:
        for field in ("choices", "content", "output"):
            if field in answer:
                attributes["gen_ai.output.messages"] = orjson.dumps(answer[field]).decode()
                break
