"""What every HTTP upstream shares: one wire dialect, one transport, error mapping.

An :class:`HttpUpstream` speaks one wire dialect (``openai`` or ``anthropic``) to one URL.
The neutral path renders the request with the dialect codec, posts it, and parses the
answer back; the passthrough path posts the client's bytes and relays the upstream's.

How the bytes travel is not its business: it posts through the
:class:`~interlingua.http_pool.engines.Engine` its
:class:`~interlingua.http_pool.engines.Transports` picks for its URL (the lean keep-alive
pool for ``http://``, aiohttp for ``https://``; see that module),
chosen once, at construction. Headers are built once, bodies are ``orjson`` bytes.
Failures (the transport raises one family, ``http_pool.TransportError``) map onto
:mod:`interlingua.errors`:

* a non-2xx answer -> the dialect's ``parse_error`` (status kept, ``retry-after`` parsed),
  raised before the first stream event;
* cannot connect -> :class:`UpstreamConnectionError` (502); the connection drops while
  reading -> the same; no bytes for ``timeout.read`` seconds, or an answer not finished
  within ``timeout.total`` -> :class:`UpstreamTimeoutError` (504);
* a 2xx answer that is not what was asked for (HTML, text, JSON cut short, an event that
  is not JSON, a stream that stops before its end) -> :class:`UpstreamError` (502), on
  both paths: a relayed stream is checked event by event (:mod:`..dialects.relay`);
* any failure after the first stream event -> one ``StreamError`` event, then the end.

The API key is in the precomputed headers and nowhere else: messages we write name the
upstream and its ``base_url`` only. What the upstream itself sends is kept as it came,
even a key it echoes back: the gateway scrubs every upstream key at its exits
(:meth:`interlingua.server.gateway.Gateway.scrub`, which says why it alone does).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping
from contextlib import aclosing
from typing import Any

import orjson

from ..config import TimeoutConfig
from ..core import (
    BlockStart,
    Request,
    Response,
    StreamError,
    StreamEvent,
    StreamStart,
    replace_request,
)
from ..dialects import Dialect, EventDecoder, get_dialect
from ..dialects.relay import OpenAIChatRelayCheck, RelayCheck, relayed_headers
from ..errors import (
    InterlinguaError,
    InvalidRequestError,
    UpstreamConnectionError,
    UpstreamError,
    UpstreamTimeoutError,
    describe_os_error,
)
from ..http_pool import (
    ConnectFailed,
    ConnectTimeout,
    DeadlineExceeded,
    InvalidTarget,
    ReadTimeout,
    TransportError,
)
from ..http_pool.engines import EngineAnswer, Transports
from ..sse import SSEEvent
from ..tracing import TRACE
from .base import RawResponse, Upstream, note_answer_id
from .deadlines import Pace, PhaseTimeout, SilentTimeoutError, has_content, paced
from .prefill import prefill_fields, take_prefill
from .shaping import drop_params, drop_refused, merge_params, take_shaping

__all__ = ["HttpUpstream", "merge_headers"]

# What a codec raises on a body it cannot read: a malformed upstream answer is the
# upstream's fault (502), never the client's (400).
_DECODE_ERRORS = (InvalidRequestError, ValueError, KeyError, TypeError, IndexError)


def merge_headers(base: Mapping[str, str], extra: Mapping[str, str] | None) -> dict[str, str]:
    """``base`` updated by ``extra``; names lowercased so a config header replaces ours."""
    merged = {k.lower(): v for k, v in base.items()}
    if extra:
        merged.update((k.lower(), v) for k, v in extra.items())
    return merged


class HttpUpstream(Upstream):
    """An upstream reached over HTTP in one wire dialect. Subclasses pick URL and headers.

    ``headers`` must already hold authentication. ``transports`` are the HTTP engines
    every upstream shares (``create_app`` builds them); with ``None`` the upstream makes
    its own and closes them in :meth:`aclose`. The engine is picked once, by ``url``'s
    scheme, which all of an upstream's URLs share.
    """

    #: client request headers forwarded on the passthrough path (lowercase)
    forward_headers: tuple[str, ...] = ()

    def __init__(
        self,
        name: str,
        *,
        dialect: str,
        base_url: str,
        url: str,
        headers: Mapping[str, str],
        timeout: TimeoutConfig | None = None,
        transports: Transports | None = None,
    ) -> None:
        super().__init__(name)
        self.dialect = dialect
        self.base_url = base_url
        self.url = url
        self._headers = dict(headers)
        # (a stream may legitimately run for many minutes: the default total is generous)
        self.timeout = timeout or TimeoutConfig()
        #: a stream's phases have limits (upstreams/deadlines.py): decided once, so a
        #: stream without them pays one attribute test
        self._phases = self.timeout.first_byte is not None or self.timeout.idle is not None
        self._owns_transports = transports is None
        self._transports = Transports() if transports is None else transports
        self._transport = self._transports.for_url(url)
        self._codec: Dialect | None = None
        #: the codec's fast check of a 2xx JSON answer (set with the codec)
        self._body_looks_right: Callable[[bytes], bool] | None = None

    @property
    def codec(self) -> Dialect:
        """The wire dialect's codec (imported on first use)."""
        if self._codec is None:
            self._codec = get_dialect(self.dialect or "")
        return self._codec

    # --- the neutral path -----------------------------------------------------------

    def render(self, request: Request, *, stream: bool) -> dict[str, Any]:
        """The JSON body this upstream receives for ``request``: the codec's, with the
        route's shaping (:mod:`.shaping`), a prefill's fields (:mod:`.prefill`) and this
        upstream's :meth:`adjust_body`."""
        request, shaping = take_shaping(request)
        # Before rendering: a same-dialect codec re-emits Request.extra keys.
        request, prefill = take_prefill(request)
        if request.stream != stream:
            request = replace_request(request, stream=stream)
        wire = self.codec.render_request(drop_refused(request, shaping))
        if shaping is not None:
            merge_params(wire, shaping)
        if prefill:
            # Over the params (a model's add_generation_prompt would end the partial turn),
            # under drop_params (an operator may drop a field their server refuses).
            wire.update(prefill_fields(self.dialect))
        # After the params: a model's params may carry stream fields the answer's form
        # decides (a stream's usage, nothing of a stream on a whole answer).
        self.codec.ask_stream(wire, stream)
        self.adjust_body(wire)
        if shaping is not None:
            drop_params(wire, shaping)
        return wire

    async def complete(self, request: Request) -> Response:
        """POST the rendered request; parse the answer or raise the upstream's error."""
        body = orjson.dumps(self.render(request, stream=False))
        data = await self.post_json(self.url, body)
        return self.parse_body(data, request)

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        """POST with ``stream: true`` and yield the decoded neutral events."""
        async with aclosing(self.stream_batches(request)) as batches:
            async for batch in batches:
                for event in batch:
                    yield event

    async def stream_batches(self, request: Request) -> AsyncGenerator[list[StreamEvent], None]:
        """:meth:`stream` grouped by network read, so the gateway writes each group once."""
        body = orjson.dumps(self.render(request, stream=True))
        pace = Pace(self.timeout) if self._phases else None
        resp = await (self._post(self.url, body) if pace is None else self._post_paced(body, pace))
        try:
            if not 200 <= resp.status < 300:
                raise await self._status_error(resp)
            note_answer_id(resp.headers)
            events = EventDecoder(self.codec, replace_request(request, stream=True))
            # aclosing: if our consumer stops early, the inner generator is closed now,
            # not whenever the event loop gets round to finalizing it.
            async with aclosing(self._decode_batches(resp, events, pace)) as batches:
                async for batch in batches:
                    yield batch
        finally:
            resp.release()

    async def _decode_batches(
        self, resp: EngineAnswer, events: EventDecoder, pace: Pace | None = None
    ) -> AsyncGenerator[list[StreamEvent], None]:
        """One list of events per upstream read; a StreamError ends its list and the
        stream; a stream that stops before its end event ends with an error. With a
        ``pace`` (upstreams/deadlines.py) the events before the first content are held
        back and go out with it."""
        held: list[StreamEvent] = []
        try:
            chunks = resp.iter_any() if pace is None else paced(resp.iter_any(), pace)
            async for chunk in chunks:
                batch = events.decode(chunk)
                if batch:
                    if pace is not None:
                        if not pace.started:
                            held.extend(batch)
                            if not any(map(_is_content, batch)):
                                continue
                            batch, held = held, []
                        pace.heard()
                    yield batch
                    if isinstance(batch[-1], StreamError):
                        return
            tail = events.flush()
        except TransportError as exc:
            tail = [StreamError(self.transport_error(exc))]
        except _DECODE_ERRORS as exc:
            tail = [StreamError(self._unreadable(exc))]
        if held and tail and not isinstance(tail[-1], StreamError):
            tail = held + tail  # (content came with the last read)
        # Else what was held goes: no content came, so the client is better served by
        # the failure alone, before the status line (the next candidate, or a real status).
        if tail:
            yield tail
            if isinstance(tail[-1], StreamError):
                return
        if not events.ended:
            err = UpstreamConnectionError(
                f"upstream '{self.name}' at {self.base_url} closed the stream before it ended"
            )
            if not events.started:
                raise err
            yield [StreamError(err)]

    def parse_body(self, data: bytes, request: Request | None = None) -> Response:
        """A 2xx body -> Response; an unreadable one is the upstream's failure (502)."""
        try:
            return self.codec.parse_response(orjson.loads(data), request)
        except _DECODE_ERRORS as exc:
            raise self._unreadable(exc) from None

    def _unreadable(self, exc: Exception) -> UpstreamError:
        detail = exc.message if isinstance(exc, InterlinguaError) else str(exc)
        return UpstreamError(
            f"upstream '{self.name}' sent an answer that could not be read: {detail}",
            status=502,
        )

    # --- the passthrough path -------------------------------------------------------

    async def passthrough(
        self, body: bytes, stream: bool, headers: Mapping[str, str]
    ) -> RawResponse:
        """POST ``body`` unchanged; relay status, selected headers and bytes.

        A 4xx/5xx answer with a JSON body is returned, not raised (the client speaks the
        same dialect, so the body can be relayed as is; the gateway scrubs keys from it);
        one the client could not read (an HTML page), a 3xx, a 2xx that is not the
        dialect's answer, and any transport failure raise (module docstring). A stream is
        relayed through the dialect's :class:`~..dialects.relay.RelayCheck`. Of the
        client's ``headers`` only :attr:`forward_headers` are sent on; never its
        credentials.
        """
        return await self._forward(self.url, body, stream, headers, None)

    async def relay_text_completion(
        self, body: bytes, stream: bool, headers: Mapping[str, str]
    ) -> RawResponse:
        """POST a Completions body (``POST /v1/completions``) to ``{base_url}/completions``
        and relay its answer as :meth:`passthrough` relays a Chat one: its chunks and
        whole answers have Chat's shape (``choices`` with ``index`` and
        ``finish_reason``, ``data: [DONE]``), so Chat's relay check judges them, whatever
        this upstream's own dialect."""
        return await self._forward(
            self.base_url + "/completions", body, stream, headers, OpenAIChatRelayCheck
        )

    async def _forward(
        self,
        url: str,
        body: bytes,
        stream: bool,
        headers: Mapping[str, str],
        checker: type[RelayCheck] | None,
    ) -> RawResponse:
        """:meth:`passthrough` to ``url``, judged by ``checker`` (None: the codec's)."""
        extra = self._forwarding(headers)
        # (first_byte and idle bound streams only: a whole answer's status line comes
        # when it is done, so it is bounded by read and total alone)
        pace = Pace(self.timeout) if stream and self._phases else None
        if pace is None:
            resp = await self._post(url, body, extra)
        else:
            resp = await self._post_paced(body, pace, extra, url)
        out_headers = relayed_headers(resp.headers)  # (what the client gets, and)
        kind = resp.headers.get("content-type")  # (what the upstream said it sent)
        if kind is not None:
            out_headers["content-type"] = kind
        ok = 200 <= resp.status < 300
        if stream and ok and _is_event_stream(resp.headers):
            check = self.codec.relay_check() if checker is None else checker()
            chunks = self._relay(resp, check, pace, "openai" if checker else self.dialect)
            return RawResponse(
                resp.status, out_headers, chunks=chunks, closer=resp.release, check=check
            )
        try:
            data = await resp.read()
        except TransportError as exc:
            raise self.transport_error(exc) from exc
        finally:
            resp.release()
        if not ok:
            if resp.status < 400:
                raise self._unexpected_status(resp.status, resp.headers)
            if _json_object(data) is None:
                # Not an error body a client of this dialect can read (an HTML page from
                # a proxy, say): answer with the dialect's own error, status kept.
                raise self.codec.parse_error(resp.status, data, dict(resp.headers))
        elif stream:
            raise self._not_what_was_asked(resp.headers, data, "an event stream")
        elif not (self._looks_right(data) if checker is None else checker.body_looks_right(data)):
            payload = _json_object(data)
            if payload is None:
                raise self._not_what_was_asked(resp.headers, data, "a JSON object")
            if (checker or self.codec.relay_check)().check_body(payload) is not None:
                # A 200 error body, or no choices / content: what the translated path
                # would make of it (the error it carries, or a 502), not an SDK TypeError.
                if checker is None:
                    self.parse_body(data)
                raise self._not_what_was_asked(resp.headers, data, "an answer")
        return RawResponse(resp.status, out_headers, body=data)

    async def relay_json(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        looks_right: Callable[[bytes], bool],
    ) -> RawResponse:
        """POST ``body`` to another endpoint of this upstream's API (``/embeddings``) and
        relay its whole JSON answer, as :meth:`passthrough` relays a non-stream one: an
        error status with a JSON body is returned for the gateway to relay; an answer a
        client could not read raises, as does a 2xx that ``looks_right`` refuses."""
        resp = await self._post(url, body, self._forwarding(headers))
        out_headers = relayed_headers(resp.headers)
        kind = resp.headers.get("content-type")
        if kind is not None:
            out_headers["content-type"] = kind
        try:
            data = await resp.read()
        except TransportError as exc:
            raise self.transport_error(exc) from exc
        finally:
            resp.release()
        if 200 <= resp.status < 300:
            if not looks_right(data):
                raise self._not_what_was_asked(resp.headers, data, "an answer")
        elif resp.status < 400:
            raise self._unexpected_status(resp.status, resp.headers)
        elif _json_object(data) is None:
            raise self.codec.parse_error(resp.status, data, dict(resp.headers))
        return RawResponse(resp.status, out_headers, body=data)

    def _looks_right(self, data: bytes) -> bool:
        check = self._body_looks_right
        if check is None:
            check = self._body_looks_right = self.codec.relay_check().body_looks_right
        return check(data)

    def _unexpected_status(self, status: int, headers: Mapping[str, str]) -> UpstreamError:
        # 3xx: redirects are not followed (a POST must not be re-sent blindly); relayed,
        # the client would see a redirect without a usable Location, or a "bad request".
        where = headers.get("location")
        hint = f" to {where}" if where else ""
        return UpstreamError(
            f"upstream '{self.name}' at {self.base_url} answered HTTP {status}{hint}, which "
            "is not followed: check its base_url",
            status=502,
        )

    def _not_what_was_asked(
        self, headers: Mapping[str, str], data: bytes, wanted: str
    ) -> UpstreamError:
        kind = headers.get("content-type") or "no content type"
        text = data[:200].decode("utf-8", "replace").strip()
        sample = f": {text!r}" if text else " (empty)"
        return UpstreamError(
            f"upstream '{self.name}' at {self.base_url} answered 2xx with {kind} instead of "
            f"{wanted}{sample}",
            status=502,
        )

    def _forwarding(self, client_headers: Mapping[str, str]) -> dict[str, str] | None:
        if not self.forward_headers:
            return None
        extra = {
            k.lower(): v for k, v in client_headers.items() if k.lower() in self.forward_headers
        }
        return extra or None

    async def _relay(
        self,
        resp: EngineAnswer,
        check: RelayCheck,
        pace: Pace | None = None,
        dialect: str | None = None,
    ) -> AsyncIterator[bytes]:
        """The upstream's whole, well-formed events, as ``check`` passes them; a fault or
        a cut raises (502/504) after the events before it, so the gateway's error event
        follows a whole one. With a ``pace`` (upstreams/deadlines.py) the events before
        the first content are held back and go out with it (content as ``dialect`` writes
        it: this upstream's own by default)."""
        dialect = dialect or self.dialect
        chunk = data = held = b""
        error: InterlinguaError | None = None
        try:
            chunks = resp.iter_any() if pace is None else paced(resp.iter_any(), pace)
            async for chunk in chunks:
                data = check.feed(chunk)
                if check.first_error is not None:
                    # Nothing sent yet: the error gets a real status, as translated.
                    error = self._first_error(*check.first_error)
                    break
                if pace is not None and data:
                    if not pace.started:
                        held += data
                        if check.error is None and not has_content(dialect, data, True):
                            continue
                        data, held = held, b""
                        pace.heard()
                    elif has_content(dialect, data, False):
                        pace.heard()
                if data:
                    yield data
                if check.error is not None:
                    break
            else:
                data = held + check.flush()
                if data:
                    yield data
            error = error or check.finish()
        except TransportError as exc:
            # The stream had ended (an in-band error, say): then nothing is lost.
            error = None if check.ended else self.transport_error(exc)
        if error is None:
            return
        # The error's traceback keeps this frame: it must not keep the stream's bytes
        # too (freed now by reference counting, not at the next full gc pass).
        check.drop()
        chunk = data = b""
        # A copy: the original may be held elsewhere (the relay check's first error).
        # (named once: a transport error's own message names the upstream already)
        where = f"upstream '{self.name}' at {self.base_url}"
        named = error.message if where in error.message else f"{where}: {error.message}"
        error = error.with_message(named)
        # Before the first event it gets a real status: naming the upstream's answer.
        error.headers = {**error.headers, **relayed_headers(resp.headers)}
        try:
            raise error
        finally:
            del error  # else error -> traceback -> this frame -> error: a cycle

    def _first_error(self, name: str, data: str) -> InterlinguaError:
        """An in-band error event, read as the translating decoder reads it."""
        decoder = self.codec.stream_decoder(Request(model="", messages=()))
        for event in decoder.feed(SSEEvent(name or "message", data)):
            if isinstance(event, StreamError):
                return event.error
        return UpstreamError("upstream stream failed before its first event", status=502)

    # --- HTTP plumbing --------------------------------------------------------------

    async def post_json(self, url: str, body: bytes) -> bytes:
        """POST ``body``; the whole 2xx answer, or raise the upstream's error."""
        resp = await self._post(url, body)
        try:
            if not 200 <= resp.status < 300:
                raise await self._status_error(resp)
            note_answer_id(resp.headers)
            return await resp.read()
        except TransportError as exc:
            raise self.transport_error(exc) from exc
        finally:
            resp.release()

    async def _post(
        self, url: str, body: bytes, extra: Mapping[str, str] | None = None
    ) -> EngineAnswer:
        trace = TRACE.get()
        if trace is not None:  # (telemetry on: this request is an attempt span's child)
            extra = trace.attempt(self.name, extra)
        try:
            resp = await self._transport.post(
                url, body, self._headers, timeout=self.timeout, extra=extra
            )
        except TransportError as exc:
            raise self.transport_error(exc) from exc
        if trace is not None:
            trace.answered(resp.status)
        return resp

    async def _post_paced(
        self,
        body: bytes,
        pace: Pace,
        extra: Mapping[str, str] | None = None,
        url: str | None = None,
    ) -> EngineAnswer:
        """:meth:`_post` of a stream (to ``url``; this upstream's own by default), its
        status line bounded by ``first_byte`` too."""
        url = url or self.url
        if pace.deadline is None:
            return await self._post(url, body, extra)
        try:
            async with asyncio.timeout_at(pace.deadline) as limit:
                return await self._post(url, body, extra)
        except TimeoutError:
            if not limit.expired():
                raise
            raise self.transport_error(pace.expired()) from None

    async def _status_error(self, resp: EngineAnswer) -> InterlinguaError:
        if resp.status < 400:
            return self._unexpected_status(resp.status, resp.headers)
        try:
            body = await resp.read()
        except TransportError:
            body = b""
        headers = {k.lower(): v for k, v in resp.headers.items()}
        return self.codec.parse_error(resp.status, body, headers)

    def transport_error(self, exc: TransportError) -> InterlinguaError:
        """The error for a failure to talk to the upstream at all (no HTTP status)."""
        where = f"upstream '{self.name}' at {self.base_url}"
        if isinstance(exc, ConnectTimeout):
            return UpstreamTimeoutError(
                f"{where} timed out connecting (after {self.timeout.connect}s)"
            )
        # Silent: the attempt loop moves on at once when nothing reached the client yet.
        if isinstance(exc, DeadlineExceeded):
            return SilentTimeoutError(
                f"{where} did not finish its answer within {self.timeout.total}s"
            )
        if isinstance(exc, PhaseTimeout):
            if exc.phase == "idle":
                return UpstreamTimeoutError(
                    f"{where} stalled: no event for {exc.seconds}s (timeout.idle)"
                )
            return SilentTimeoutError(
                f"{where} sent no content within {exc.seconds}s (timeout.first_byte)"
            )
        if isinstance(exc, ReadTimeout):
            return SilentTimeoutError(f"{where} timed out: no data for {self.timeout.read}s")
        if isinstance(exc, ConnectFailed):
            return UpstreamConnectionError(
                f"cannot reach {where}: {describe_os_error(exc.os_error)}"
            )
        if isinstance(exc, InvalidTarget):
            return UpstreamConnectionError(f"cannot reach {where}: {exc}")
        detail = str(exc) or type(exc).__name__
        return UpstreamConnectionError(f"connection to {where} failed: {detail}")

    async def aclose(self) -> None:
        """Close the transports if this upstream made them (shared ones are not ours)."""
        if self._owns_transports:
            await self._transports.aclose()


def _is_content(event: StreamEvent) -> bool:
    """Whether a neutral event says something: not the stream's start nor a block's
    (upstreams/deadlines.py: a decoder makes no event of a comment or a ping)."""
    return not isinstance(event, StreamStart | BlockStart)


def _is_event_stream(headers: Mapping[str, str]) -> bool:
    # No content type at all is given the benefit of the doubt (the relay check still
    # stops anything that is not SSE); anything else must say text/event-stream.
    kind = headers.get("content-type")
    return kind is None or kind.lower().startswith("text/event-stream")


def _json_object(data: bytes) -> dict[str, Any] | None:
    """``data`` as one JSON object (what a client's SDK will parse it as), else None."""
    if data[:1] != b"{":
        data = data.lstrip()
        if data[:1] != b"{":
            return None
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
