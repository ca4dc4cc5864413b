"""The request path: parse -> route -> call -> render, for every generation endpoint.

``Gateway`` holds what the handlers share (router, limits, the secrets to scrub). One
method per endpoint; each is thin and delegates translation to the dialect codecs and the
work to the upstream. Two paths:

* **passthrough** -- the client's dialect is the upstream's own and the route asks for no
  rewriting: the body is forwarded with only ``model`` replaced and the upstream's bytes
  are relayed as they arrive. This is the fast path.
* **translated** -- the body is parsed into the neutral request, the upstream answers in
  neutral values, and the client's codec renders them (chunk by chunk when streaming).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from functools import partial
from typing import Any

import orjson
from starlette.types import Receive

from ..config import Config, ModelOptions
from ..core import (
    Request,
    StreamEnd,
    StreamError,
    StreamEvent,
    aclose_iterator,
    replace_request,
)
from ..core.tokens import estimate_request_tokens
from ..dialects import DIALECT_NAMES, Dialect, StreamEncoder, encode_body, get_dialect
from ..dialects.relay import RELAYED_HEADERS, UPSTREAM_REQUEST_ID, note_error_body
from ..errors import InterlinguaError, InvalidRequestError, UpstreamError, request_id_note
from ..routing import Route, Router
from ..tracing import TRACE
from ..upstreams.base import ANSWER_ID, RawResponse
from ..upstreams.shaping import for_upstream, shape_body
from ..usage.record import Record
from .accounting import RECORD, count_usage, strip_usage
from .asgi_io import (
    JSON_CT,
    SSE_HEADERS,
    BytesResponse,
    CountedResponse,
    StreamResponse,
    unless_disconnected,
)
from .attempts import RelayedFailure, alone_answered, alone_failed, run_attempts
from .continuation import Continuer
from .last_event import Keep, keep_last_response
from .middleware import serving_id
from .scrubbing import Scrubber

log = logging.getLogger("interlingua.server")

_DEFAULT_OPTIONS = ModelOptions()
# An error's relayed headers that are copied as they came (the Retry-After pair is written
# from ``retry_after``, which the gateway's own limits set too).
_ERROR_HEADERS = tuple(h for h in RELAYED_HEADERS if not h.startswith("retry-after"))
_REQUEST_ID_NAME = UPSTREAM_REQUEST_ID.encode()
# The keep-alive bytes of each client dialect (constant; built once, not per stream).
_PINGS: dict[str, bytes] = {}
# Whether a chunk ends a stream, per client dialect (StreamResponse.ends).
_ENDS = {name: type(get_dialect(name).relay_check()).ends for name in DIALECT_NAMES}


class Gateway(Scrubber):
    """Shared state of the request path. See the module docstring."""

    def __init__(
        self,
        config: Config,
        router: Router,
        secrets: Iterable[str] = (),
        responses: Dialect | None = None,
    ) -> None:
        self.config = config
        self.router = router
        #: the Responses codec with this gateway's sealing key (server/responses/sealing_key.py):
        #: what answers and reads the Responses endpoints' generations
        self.responses = responses or get_dialect("responses")
        self.max_body = int(config.server.max_body_mb * 1024 * 1024)
        super().__init__(secrets)
        #: the deployments (keys) that refused an assistant prefill: not asked to
        #: continue a broken stream that way again (server/continuation/)
        self.prefill_refused: set[str] = set()
        #: hands one more usage row to the accounting (a broken attempt's), when there is
        #: one (set by the app)
        self.note_row: Callable[[Record], None] | None = None

    # -- errors -------------------------------------------------------------------------

    def shown(self, error: InterlinguaError, request_id: str | None = None) -> InterlinguaError:
        """``error`` as its client is shown it: scrubbed (:meth:`scrubbed`), its message
        naming the request it answers, ``request_id`` or else the one being served
        (:data:`~.middleware.REQUEST_ID`), once however often it is rendered. A copy
        when anything changed; the error passed in is never changed."""
        if request_id is None:
            request_id = serving_id()
        return self.scrubbed(error).with_request_id(request_id)

    def error_response(
        self, dialect: Dialect, error: InterlinguaError, request_id: str
    ) -> BytesResponse:
        """The error in the caller's dialect, with Retry-After relayed when known, and
        what else the upstream's answer said that is relayed (``x-should-retry``, its
        request id); its message names ``request_id`` (:meth:`shown`)."""
        error = self.shown(error, request_id)
        status, body = dialect.render_error(error, request_id)
        headers = [JSON_CT]
        if error.retry_after is not None:
            # Whole seconds, rounded up: a client that reads only Retry-After must not
            # come back sooner than the upstream asked (0.2 s is "1", not "0").
            headers.append((b"retry-after", str(max(0, math.ceil(error.retry_after))).encode()))
            headers.append((b"retry-after-ms", str(int(error.retry_after * 1000)).encode()))
        if error.headers:
            for name in _ERROR_HEADERS:
                value = error.headers.get(name)
                if value is not None:
                    headers.append((name.encode(), value.encode("latin-1")))
        return BytesResponse(orjson.dumps(body), status, headers)

    def stream_error_bytes(
        self,
        dialect: Dialect,
        request: Request,
        exc: BaseException,
        encoder: StreamEncoder | None = None,
        request_id: str | None = None,
    ) -> bytes:
        """An exception after the first streamed byte, as the dialect's in-band error,
        its message naming ``request_id`` (default: the request being served).

        ``encoder`` is the one that wrote the stream so far, so the error continues it (a
        Responses ``response.failed`` must carry the stream's response id). Without one
        the stream was relayed: the dialect's error event for a stream it did not write.
        """
        error = self.shown(
            exc if isinstance(exc, InterlinguaError) else internal_error(exc), request_id
        )
        if encoder is not None:
            return encoder.encode(StreamError(error))
        fresh = dialect.stream_encoder(request)
        relay_error = getattr(fresh, "relay_error", None)  # Responses: a bare error event
        return relay_error(error) if relay_error is not None else fresh.encode(StreamError(error))

    # -- generation ---------------------------------------------------------------------

    async def generate(
        self,
        dialect: Dialect,
        body: dict[str, Any],
        headers: Mapping[str, str],
        receive: Receive | None = None,
        *,
        extra: Mapping[str, Any] | None = None,
        keep: Keep | None = None,
        relay_only: bool = False,
    ) -> BytesResponse | StreamResponse:
        """Answer a generation request body of ``dialect`` (the passthrough path sends it
        upstream as parsed, never as the client's bytes).

        ``extra`` is merged into the parsed request's ``extra`` (codec markers such as
        the Responses dialect's ``STATE``; the passthrough path parses nothing). ``keep``
        is awaited with the final response object's JSON (scrubbed) once a non-stream
        answer is rendered or a stream has sent its terminal event, before the answer
        ends (so a client that reads the end finds it kept); it must not raise.
        ``relay_only``: the body means something only to an upstream of its own dialect
        (a Responses ``previous_response_id`` the gateway does not hold), so only the
        deployments that relay it unchanged are tried, and :class:`NotRelayable` is
        raised when the model has none. The plan itself decides, not the config's first
        deployment: a translating one would get the new input without its conversation.
        When all that relay are cooling, the one whose cooldown ends first is tried
        (:meth:`Router.only`): a request is not refused untried.
        """
        name = _model_of(body)
        plan = self.router.plan(name)
        if relay_only:
            plan = self.router.only(name, plan, partial(self.passes_through, dialect))
            if not plan:
                raise NotRelayable(name)
        if len(plan) > 1 or not plan[0].alone:
            parsed: list[Request] = []  # the neutral request, parsed on the first translation
            going_on = None
            if body.get("stream") is True and self.router.continues(name):
                going_on = Continuer(self, dialect, name, plan, body, parsed, RECORD.get())
            # (a relay-only request's context fallbacks were not filtered for it: a refusal
            # of it is its answer)
            answer = await run_attempts(
                self.router,
                plan,
                partial(
                    self._attempt, dialect, body, headers, receive, extra, keep, parsed, going_on
                ),
                name,
                receive,
                _pause,
                context=not relay_only,
            )
            if going_on is not None and type(answer) is StreamResponse:
                going_on.response = answer
            return answer
        # A name's only deployment, no fallbacks, nothing to retry (the common case): one
        # attempt, no loop and no closure, so the hot path costs what it did before.
        deployment = plan[0]
        route = deployment.route
        _went_to(route)
        started = time.perf_counter()
        try:
            if self.passes_through(dialect, route):
                answer = await self._passthrough(dialect, route, body, headers, keep)
            else:
                answer = await self._translated(dialect, route, body, receive, extra, keep, None)
        except (InterlinguaError, RelayedFailure) as exc:
            return alone_failed(self.router, deployment, exc, started, name)
        return alone_answered(self.router, deployment, answer, started, name)

    def _attempt(
        self,
        dialect: Dialect,
        body: dict[str, Any],
        headers: Mapping[str, str],
        receive: Receive | None,
        extra: Mapping[str, Any] | None,
        keep: Keep | None,
        parsed: list[Request],
        going_on: Continuer | None,
        route: Route,
    ) -> Awaitable[BytesResponse | StreamResponse]:
        """One candidate's try (server/attempts.py retries and falls back); ``parsed``
        caches the neutral request across the tries, ``going_on`` carries a broken
        stream on (None: the model does not continue streams)."""
        _went_to(route)
        if going_on is not None:
            going_on.route = route
            # A tool call is held until whole on a stream that may be continued: a body
            # with tools takes the translated path, where the events are seen.
            if self.passes_through(dialect, route) and not body.get("tools"):
                return self._passthrough(dialect, route, dict(body), headers, keep, going_on)
            return self._translated(dialect, route, body, receive, extra, keep, parsed, going_on)
        if self.passes_through(dialect, route):
            # A copy per attempt: what one deployment writes into its body (its model
            # name, its shaping) must not reach the next one's.
            return self._passthrough(dialect, route, dict(body), headers, keep)
        return self._translated(dialect, route, body, receive, extra, keep, parsed)

    def _translated(
        self,
        dialect: Dialect,
        route: Route,
        body: dict[str, Any],
        receive: Receive | None,
        extra: Mapping[str, Any] | None,
        keep: Keep | None,
        parsed: list[Request] | None,
        going_on: Continuer | None = None,
    ) -> Awaitable[BytesResponse | StreamResponse]:
        """One attempt on the translated path: the request parsed now (a bad one raises
        here), the upstream called when the result is awaited. ``parsed`` caches the
        neutral request across the attempts of one request (None: there is only one).
        (Not a coroutine itself: one coroutine frame fewer on the hot path.)"""
        if parsed:
            request = parsed[0]
        else:
            encode_body(body)  # 400, not a 500 later, if it is too deep to be written back
            request = dialect.parse_request(body)
            if extra:
                request = replace_request(request, extra={**request.extra, **extra})
            if parsed is not None:
                parsed.append(request)
        upstream_request = for_upstream(request, route.upstream_model, route.entry)
        if request.stream:
            return self._stream(dialect, route, request, upstream_request, keep, going_on)
        return self._complete(dialect, route, request, upstream_request, receive, keep)

    async def _complete(
        self,
        dialect: Dialect,
        route: Route,
        request: Request,
        upstream_request: Request,
        receive: Receive | None,
        keep: Keep | None,
    ) -> BytesResponse:
        upstream = route.upstream
        before = ANSWER_ID.get()  # (what an answer's id replaces: upstreams/base.py)
        if receive is not None and upstream.cancel_on_disconnect:
            response = await unless_disconnected(upstream.complete(upstream_request), receive)
        else:
            response = await upstream.complete(upstream_request)
        rendered = orjson.dumps(dialect.render_response(response, request))
        # An upstream has been known to echo its key inside an answer: never relay it.
        rendered = self.scrub_bytes(rendered) if self.secrets else rendered
        if keep is not None:
            await keep(rendered)
        after = ANSWER_ID.get()
        headers = [JSON_CT]
        if after is not before and after is not None:
            headers.append((_REQUEST_ID_NAME, after[0].encode("latin-1")))
        record = RECORD.get()
        if record is not None:  # (counted here: the accounting need not decode our body)
            count_usage(record, response.usage)
            return CountedResponse(rendered, headers=headers)
        return BytesResponse(rendered, headers=headers)

    @staticmethod
    def passes_through(dialect: Dialect, route: Route) -> bool:
        """Whether a request of ``dialect`` on ``route`` takes the passthrough path."""
        return route.upstream.dialect == dialect.name and route.options == _DEFAULT_OPTIONS

    async def _stream(
        self,
        dialect: Dialect,
        route: Route,
        request: Request,
        upstream_request: Request,
        keep: Keep | None = None,
        going_on: Continuer | None = None,
    ) -> StreamResponse:
        before = ANSWER_ID.get()  # (what an answer's id replaces: upstreams/base.py)
        batches = route.upstream.stream_batches(upstream_request)
        # Wait for the first events before sending headers: an upstream that refuses the
        # request raises here, and the client still gets a real HTTP error status.
        try:
            first = await anext(batches)
            after = ANSWER_ID.get()
            rid = after[0] if after is not before and after is not None else None
            if isinstance(first[0], StreamError):
                # The upstream failed before saying anything (an in-band error as its
                # first event): the client can still get a real status for it.
                raise _naming(first[0].error, rid)
        except StopAsyncIteration:
            raise UpstreamError("upstream closed the stream without sending anything") from None
        except BaseException:
            await aclose_iterator(batches)
            raise
        encoder = dialect.stream_encoder(request)
        record = RECORD.get()
        encode = _batch_encoder(encoder, self.shown, record)

        async def kept() -> None:
            final = getattr(encoder, "final", None)
            if keep is not None and final is not None:
                await keep(self.scrub_bytes(orjson.dumps(final)))

        async def chunks() -> AsyncIterator[bytes]:
            data, failed = encode(first)
            yield data
            if not failed:
                async for batch in batches:
                    data, failed = encode(batch)
                    if failed:
                        # The upstream's error, rendered in-band: the stream broke (known
                        # before its bytes go out, whatever the client does then).
                        response.broken = True
                    yield data
                    if failed:
                        # An error ends the stream (upstreams/base.py): stop reading, so
                        # the upstream is closed now rather than drained.
                        break
            await kept()

        source = chunks() if going_on is None else going_on.translated(first, batches, encode, kept)
        response = StreamResponse(
            self._scrub_stream(source) if self.secrets else source,
            headers=[*SSE_HEADERS, (_REQUEST_ID_NAME, rid.encode("latin-1"))] if rid else None,
            on_error=lambda exc: self.stream_error_bytes(dialect, request, exc, encoder),
            aclose=lambda: aclose_iterator(batches),
            ping=encoder.ping(),
            counted=record is not None,  # (encode puts the usage and the error into it)
        )
        response.ends = _ENDS[dialect.name]
        return response

    async def _passthrough(
        self,
        dialect: Dialect,
        route: Route,
        body: dict[str, Any],
        headers: Mapping[str, str],
        keep: Keep | None = None,
        going_on: Continuer | None = None,
    ) -> BytesResponse | StreamResponse:
        stream = body.get("stream") is True
        body["model"] = route.upstream_model
        record = RECORD.get()
        # (the usage log needs a stream's usage: asked for here, cut for the client)
        strip = record is not None and stream and dialect.ask_stream(body, True)
        shape_body(body, route.entry, route.upstream)  # params, max_tokens_field, drops
        # The body as parsed, never the client's bytes: with a key given twice (`model`,
        # `messages`) the upstream's parser might take the copy we did not route by or
        # validate. orjson writes it back faster than the bytes could be searched.
        raw_body = encode_body(body)
        # Nothing else reads a passthrough body: give a malformed one the translated
        # path's 400 (same checks, same order) here, not the upstream's judgement.
        dialect.validate_request(body)
        answer = await route.upstream.passthrough(raw_body, stream, headers)
        relayed = [JSON_CT, *_relayed(answer)]
        if answer.status >= 400 or answer.chunks is None:
            await answer.aclose()
            # A relayed error status the client's dialect lacks (OpenAI has no 529).
            status = dialect.client_status(answer.status)
            data = self.scrub_bytes(answer.body)
            if answer.status >= 400:
                raise relayed_failure(data, status, relayed, answer)
            if keep is not None:
                await keep(data)
            return BytesResponse(data, status, relayed)
        request = Request(model=route.upstream_model, messages=(), stream=True)
        chunks = answer.chunks
        if going_on is not None:
            if answer.check is not None:
                answer.check.hold_errors = True  # (before its first feed: chunks are lazy)
            chunks = going_on.relayed(chunks, answer.check, partial(self._encode, record))
        chunks = self._scrub_stream(chunks) if self.secrets else chunks
        if strip:
            assert record is not None
            chunks = strip_usage(chunks, record)
        if keep is not None:
            chunks = keep_last_response(chunks, keep)
        # As on the translated path, the first events come before the status line: a
        # stream broken from its start (garbage, a cut) is then a real 502.
        try:
            first = await anext(chunks, b"")
        except BaseException:
            await aclose_iterator(chunks)
            await answer.aclose()
            raise
        ping = _PINGS.get(dialect.name)
        if ping is None:
            ping = _PINGS[dialect.name] = dialect.stream_encoder(request).ping()
        response = StreamResponse(
            _after(first, chunks),
            headers=SSE_HEADERS + _relayed(answer),
            on_error=lambda exc: self.stream_error_bytes(dialect, request, exc),
            aclose=answer.aclose,
            ping=ping,
        )
        response.ends = _ENDS[dialect.name]
        response.check = answer.check  # (its `failed`: the upstream's own error event)
        return response

    def _encode(
        self, record: Record | None, encoder: StreamEncoder
    ) -> Callable[[list[StreamEvent]], tuple[bytes, bool]]:
        """The translated path's batch encoding over ``encoder`` (for a continuation)."""
        return _batch_encoder(encoder, self.shown, record)

    # -- other endpoints ----------------------------------------------------------------

    async def count_tokens(self, request: Request) -> int:
        """Input tokens: the upstream's own count when it has one, else the estimate."""
        route = self.router.resolve(request.model)
        counted = await route.upstream.count_tokens(
            replace_request(request, model=route.upstream_model)
        )
        return counted if counted is not None else estimate_request_tokens(request)


async def _after(first: bytes, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``first``, then the rest of ``chunks``."""
    yield first
    async for chunk in chunks:
        yield chunk


async def _pause(seconds: float, receive: Receive | None) -> None:
    """Wait ``seconds`` before a retry; a client that hangs up meanwhile ends the wait
    (and the request: no attempt is made for nobody)."""
    if receive is None:
        await asyncio.sleep(seconds)
    else:
        await unless_disconnected(asyncio.sleep(seconds), receive)


def _went_to(route: Route) -> None:
    """Note in the request's record (server/accounting.py) where this attempt goes."""
    record = RECORD.get()
    if record is not None:
        record.upstream = route.upstream.name
        record.upstream_model = route.upstream_model


def _model_of(body: dict[str, Any]) -> str:
    model = body.get("model")
    if model is None:
        raise InvalidRequestError("Missing required parameter: 'model'.", param="model")
    if not isinstance(model, str) or not model:
        raise InvalidRequestError(
            "Invalid value for 'model': expected a non-empty string.", param="model"
        )
    return model


def _batch_encoder(
    encoder: StreamEncoder,
    shown: Callable[[InterlinguaError], InterlinguaError],
    record: Record | None,
) -> Callable[[list[StreamEvent]], tuple[bytes, bool]]:
    """The translated stream's encoding of one upstream read: its events' bytes in one
    write, and True at an error (as ``shown``: scrubbed, naming the request; its kind
    noted in ``record``); a stream's end puts its usage into ``record`` (the client's
    stream may not show it: Chat without ``include_usage``)."""

    def encode(batch: list[StreamEvent]) -> tuple[bytes, bool]:
        out = []
        for event in batch:
            if isinstance(event, StreamError):
                error = shown(event.error)
                out.append(encoder.encode(event if error is event.error else StreamError(error)))
                if record is not None and record.error is None:
                    record.error = error.kind.value
                return b"".join(out), True
            out.append(encoder.encode(event))
        data = b"".join(out)
        if record is not None and batch and isinstance(batch[-1], StreamEnd):
            count_usage(record, batch[-1].usage)
            trace = TRACE.get()  # (once a stream: its span's finish reasons)
            if trace is not None:
                trace.tail = data
        return data, False

    return encode


def relayed_failure(
    data: bytes, status: int, relayed: list[tuple[bytes, bytes]], answer: RawResponse
) -> RelayedFailure:
    """An upstream's error answer (``data``, scrubbed; ``status`` as the client's dialect
    has it), for the attempt loop (server/attempts.py) to retry or relay: the upstream's
    message first, then the request id a user can quote (as in the errors the gateway
    renders itself)."""
    request_id = serving_id()
    if request_id:
        data = note_error_body(data, request_id_note(request_id))
    return RelayedFailure(BytesResponse(data, status, relayed), answer.status, answer.headers)


def _relayed(raw: RawResponse) -> list[tuple[bytes, bytes]]:
    """The relayed headers of a passthrough answer (upstreams/http_upstream.py picked them)."""
    return [
        (name.encode(), raw.headers[name].encode("latin-1"))
        for name in RELAYED_HEADERS
        if name in raw.headers
    ]


def _naming(error: InterlinguaError, answer_id: str | None) -> InterlinguaError:
    """``error`` carrying the request id of the upstream answer it came in, for the
    client's error answer (a copy: the original may be held elsewhere, inside a frozen
    ``StreamError`` say, and must not change under its holder)."""
    if not answer_id or UPSTREAM_REQUEST_ID in error.headers:
        return error
    clone = copy.copy(error)
    clone.headers = {**error.headers, UPSTREAM_REQUEST_ID: answer_id}
    return clone


class NotRelayable(InvalidRequestError):
    """No deployment of the model relays the request unchanged (``relay_only``): the
    caller says what that means for its request (the Responses endpoint: an unknown
    ``previous_response_id``)."""

    def __init__(self, model: str) -> None:
        super().__init__(
            f"No deployment of model {model!r} takes this request unchanged.", param="model"
        )


def internal_error(exc: BaseException) -> UpstreamError:
    """A bug or an unexpected failure, as an error safe to show (no internals leaked)."""
    return UpstreamError(f"internal gateway error ({type(exc).__name__})", status=500)


__all__ = ["Gateway", "NotRelayable", "internal_error", "relayed_failure"]
