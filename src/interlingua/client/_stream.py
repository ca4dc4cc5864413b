"""Streaming calls: an async context manager yielding neutral stream events.

::

    async with client.stream("Tell me a story", model="m") as stream:
        async for text in stream.text_stream():
            print(text, end="")
    print(stream.result.usage)

Opening the stream (``__aenter__``) is retried like any call -- on connect errors,
timeouts and retryable statuses, and also when the server accepted the request but closed
the connection before sending one byte. Once the first byte has arrived, nothing is retried:
the caller may already have shown or acted on part of the answer, so a dropped connection
raises :class:`~interlingua.client.APIConnectionError` saying so. An error the server
sends in-band mid-stream is raised as the typed error for its kind.

The HTTP response is closed in ``finally`` whether the stream is read to the end, left
early, or fails; the concurrency slot of the client's rate limiter is held until then, and
the token reservation is settled with the final usage.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any

import orjson

from ..core import (
    ArgumentsDelta,
    AudioDelta,
    BlockStart,
    ReasoningDelta,
    Request,
    StreamEnd,
    StreamError,
    StreamEvent,
    TextDelta,
    TextPart,
    ToolCallPart,
)
from ..core.fold import Folder
from ..dialects import Dialect, RawEventDecoder
from ..limits import Slot
from ._audio import with_audio_format
from ._errors import APIConnectionError, APIError, error_from_stream
from ._outputs import CallOptions, ChatResult, StreamedFold, validate_structured
from ._policy import Policy
from ._transport import Answer, Transport, request_id

__all__ = ["ChatStream"]


class ChatStream:
    """One streaming call (single use). Iterate for events; see the module doc.

    Made by :meth:`AsyncClient.stream`: ``prepare`` builds the request, ``codec`` renders
    and decodes it, ``policy`` retries the opening under the rate limits, ``transport``
    sends it.
    """

    def __init__(
        self,
        transport: Transport,
        codec: Dialect,
        policy: Policy,
        prepare: Callable[[], Awaitable[tuple[Request, CallOptions]]],
        render: Callable[[Request], dict[str, Any]] | None = None,
    ) -> None:
        self._transport = transport
        self._codec = codec
        #: the request -> body (the client's own, which places the output limit)
        self._render = render or codec.render_request
        self._policy = policy
        self._prepare = prepare
        self._stack = contextlib.AsyncExitStack()
        self._answer: Answer | None = None
        self._slot: Slot | None = None
        self._first = b""
        self._request: Request | None = None
        self._options: CallOptions | None = None
        self._folder = Folder()
        self._events: AsyncGenerator[StreamEvent, None] | None = None
        self._count = 0
        self._closed = False
        self._started = 0.0  # perf_counter() when sending began
        self._first_token: float | None = None  # ... and when the first token arrived
        #: the folded answer, once the stream has ended
        self.result: ChatResult | None = None
        #: the server's request id (``x-request-id`` / ``request-id``)
        self.request_id: str | None = None

    # --- opening -----------------------------------------------------------------------

    async def __aenter__(self) -> ChatStream:
        request, options = await self._prepare()
        self._request = replace(request, stream=True)
        self._options = options
        body = orjson.dumps(self._render(self._request))
        estimate = self._policy.estimate(self._request)
        self._started = time.perf_counter()
        try:
            await self._policy.retrying(lambda: self._open(body, estimate), "stream")
        except BaseException:
            await self.aclose()
            raise
        return self

    async def _open(self, body: bytes, estimate: int) -> None:
        """One attempt: a slot, the response headers and the first bytes, or raise."""
        transport = self._transport
        attempt = contextlib.AsyncExitStack()
        try:
            self._slot = await attempt.enter_async_context(self._policy.slot(estimate))
            answer = await transport.open(body)
            attempt.callback(answer.finish)
            self.request_id = request_id(answer.headers)
            try:
                first = await answer.readany()
            except transport.errors as exc:
                raise transport.transport_error(exc) from exc
            if not first:
                raise APIConnectionError(
                    f"{transport.base_url} accepted the stream but closed it before sending "
                    "anything — the server may have crashed; retried automatically"
                )
        except BaseException:
            await attempt.aclose()
            raise
        self._answer, self._first = answer, first
        self._stack.push_async_exit(attempt)

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP response and release the rate-limit slot (idempotent)."""
        self._closed = True
        events, self._events = self._events, None
        if events is not None:
            await events.aclose()
        await self._stack.aclose()

    # --- reading -----------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        if self._closed:
            return _no_events()
        if self._answer is None:
            raise RuntimeError("use the stream inside 'async with client.stream(...) as s:'")
        if self._events is None:
            self._events = self._read()
        return self._events

    async def _read(self) -> AsyncGenerator[StreamEvent, None]:
        assert self._answer is not None and self._request is not None
        transport = self._transport
        read, errors = self._answer.readany, transport.errors
        events = RawEventDecoder(self._codec, self._request)
        chunk = self._first
        try:
            while chunk:
                for event in events.decode(chunk):
                    yield self._accept(event)
                try:
                    chunk = await read()
                except errors as exc:
                    raise self._interrupted(exc) from exc
            for event in events.flush():
                yield self._accept(event)
            if not events.ended:
                raise APIConnectionError(
                    f"the stream from {transport.base_url} ended before the answer was complete "
                    f"(after {self._count} events); not retried because part of the answer "
                    "was already delivered"
                )
        finally:
            await self._stack.aclose()

    def _accept(self, event: StreamEvent) -> StreamEvent:
        if isinstance(event, StreamError):
            raise error_from_stream(
                event.error, url=self._transport.base_url, request_id=self.request_id
            )
        self._count += 1
        if self._first_token is None and _is_token(event):
            self._first_token = time.perf_counter()
        self._folder.feed(event)
        if isinstance(event, StreamEnd):
            self.result = self._finish_result()
            if self._slot is not None:
                self._slot.settle(self.result.usage.total_tokens)
        return event

    def _finish_result(self) -> ChatResult:
        assert self._options is not None and self._request is not None
        options = self._options
        request = self._request
        response = with_audio_format(self._folder.result(), request)
        # raw: the folded answer as the dialect's body, as a plain call's raw is its body
        raw = self._codec.render_response(response, request)
        result = ChatResult(response, raw, self.request_id, options.think_tags)
        now = time.perf_counter()
        result.latency = now - self._started
        first = self._first_token
        result.ttft = (first if first is not None else now) - self._started
        if options.structured:
            result.parsed = validate_structured(response.text, options.model_class)
        return result

    def _interrupted(self, exc: BaseException) -> APIError:
        mapped = self._transport.transport_error(exc)
        cls = type(mapped)
        return cls(
            f"{mapped.message} — the stream was interrupted after {self._count} events and "
            "was not retried because part of the answer was already delivered",
            request_id=self.request_id,
        )

    async def text_stream(self) -> AsyncIterator[str]:
        """Just the answer text, piece by piece, refusals apart. With think_tags, the
        reasoning first as :func:`~interlingua.client.fold_reasoning` writes it, padding
        stripped as it streams (:class:`~interlingua.client.StreamedFold`), so the pieces
        join to ``result.text`` -- unless reasoning arrives after the answer began (no
        dialect sends it so), which ``result.text`` folds in front and this leaves out."""
        fold = StreamedFold() if self._options is not None and self._options.think_tags else None
        refusals: set[int] = set()
        async for event in self:
            if isinstance(event, ReasoningDelta):
                if fold is not None and (piece := fold.reasoning(event.text)):
                    yield piece
            elif (
                isinstance(event, BlockStart)
                and isinstance(event.part, TextPart)
                and event.part.meta.get("refusal")
            ):
                refusals.add(event.index)
            elif isinstance(event, TextDelta) and event.index not in refusals:
                piece = event.text if fold is None else fold.text(event.text)
                if piece:
                    yield piece
        if fold is not None and (piece := fold.end()):
            yield piece

    async def final(self) -> ChatResult:
        """Read whatever is left and return the folded answer."""
        async for _ in self:
            pass
        if self.result is None:
            raise RuntimeError("the stream has already been closed before it ended")
        return self.result


def _is_token(event: StreamEvent) -> bool:
    """Whether ``event`` is the model's first output: text, reasoning, a tool call, audio."""
    if isinstance(event, TextDelta | ReasoningDelta):
        return bool(event.text)
    if isinstance(event, AudioDelta):
        return bool(event.data or event.transcript)
    if isinstance(event, BlockStart):
        return isinstance(event.part, ToolCallPart)
    return isinstance(event, ArgumentsDelta)


async def _no_events() -> AsyncIterator[StreamEvent]:
    return
    yield  # an async generator that yields nothing
