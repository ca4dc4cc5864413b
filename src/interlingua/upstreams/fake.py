"""A scripted upstream for tests and ``interlingua serve --fake``.

Queue what the next requests get with :meth:`FakeUpstream.enqueue`:

* a :class:`~interlingua.core.Response` -- the answer (streamed via ``unfold``);
* a list of neutral stream events -- the stream (folded for a non-stream request); a
  ``StreamError`` in it simulates a failure mid-stream;
* an :class:`~interlingua.errors.InterlinguaError` -- raised before the first byte;
* a callable ``(Request) -> one of those`` -- decided per request.

With nothing queued it echoes: ``"echo: " + the last user message's text``.

``delay`` (seconds) makes every answer that slow to begin, and ``in_flight`` /
``max_in_flight`` count the requests being answered (a stream until it ends or is
closed): what a test of the gateway's concurrency limits measures.

With ``wire`` (``"openai"``, ``"anthropic"`` or ``"responses"``) everything goes through
that dialect's codec both ways, as if over a socket: the request is rendered (recorded in ``wire_requests``)
and parsed back as the upstream's view of it; answers are rendered, serialized and parsed
back; streams are encoded to SSE bytes and decoded by the same
:class:`~interlingua.dialects.EventDecoder` the HTTP upstreams read through; errors are rendered and parsed back with their
``retry-after``. So tests exercise both directions of both codecs with no sockets, and
the gateway may take its passthrough path with a fake too (``dialect == wire``).

A continuation's prefill marker (:mod:`.prefill`) is taken out of every request, as a
real upstream takes it out; with ``wire="openai"`` the recorded body carries vLLM's two
fields instead, so a test sees what a Chat upstream would have been sent.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import replace
from typing import TypeAlias

import orjson

from ..config import ConfigError, UpstreamConfig, expect_positive_int
from ..core import (
    Request,
    Response,
    StopReason,
    StreamError,
    StreamEvent,
    TextPart,
    Usage,
    fold,
    unfold,
)
from ..core.tokens import estimate_request_tokens, estimate_text
from ..dialects import Dialect, EventDecoder, get_dialect, random_id
from ..dialects.relay import RelayCheck
from ..errors import InterlinguaError
from .base import RawResponse, Upstream
from .prefill import prefill_fields, take_prefill
from .shaping import drop_params, drop_refused, merge_params, neutral_request, take_shaping

__all__ = ["FakeItem", "FakeUpstream", "check_options", "echo_response"]

Answer: TypeAlias = Response | list[StreamEvent] | InterlinguaError
FakeItem: TypeAlias = Answer | Callable[[Request], Answer]

_FAKE_REQUEST_ID = "req_fake"
#: the wire dialects a fake can speak
WIRES = ("openai", "anthropic", "responses")
_PASSTHROUGH_PIECES = 3


def check_options(cfg: UpstreamConfig, where: str) -> None:
    """The registry's check of a ``fake`` entry: ``wire`` and ``chunk_size``."""
    wire = cfg.options.get("wire")
    if wire is not None and wire not in WIRES:
        raise ConfigError(f"{where}.wire: must be openai, anthropic or responses, got {wire!r}")
    size = cfg.options.get("chunk_size")
    if size is not None:
        expect_positive_int(size, f"{where}.chunk_size")


def echo_response(request: Request) -> Response:
    """The default answer: ``"echo: <last user text>"`` with estimated usage."""
    last_user = next((m for m in reversed(request.messages) if m.role == "user"), None)
    said = "".join(p.text for p in last_user.parts if isinstance(p, TextPart)) if last_user else ""
    reply = "echo: " + (said or "(no text)")
    usage = Usage(
        input_tokens=estimate_request_tokens(request),
        output_tokens=estimate_text(reply),
        estimated=True,
    )
    return Response(
        id=random_id("fake_"),
        model=request.model,
        parts=(TextPart(reply),),
        stop_reason=StopReason.END_TURN,
        usage=usage,
        created=int(time.time()),
    )


class FakeUpstream(Upstream):
    """A scripted upstream. ``requests`` and ``wire_requests`` record what it received.

    >>> fake = FakeUpstream("fake")
    >>> fake.enqueue(RateLimitError("slow down", retry_after=2))  # doctest: +SKIP
    """

    #: what ``continue_with: auto`` makes of a fake (a fake built by a test continues as
    #: a configured one does)
    continue_with = "prefill"

    def __init__(
        self,
        name: str = "fake",
        wire: str | None = None,
        chunk_size: int | None = 4,
        delay: float = 0.0,
    ):
        super().__init__(name)
        self.delay = delay
        #: requests being answered now, and the most there ever were at once
        self.in_flight = 0
        self.max_in_flight = 0
        if wire is not None and wire not in WIRES:
            raise ValueError(f"wire must be one of {WIRES} or None, got {wire!r}")
        self.dialect = wire
        self.wire = wire
        self.chunk_size = chunk_size
        #: every neutral request received, in order (passthrough: the parsed body)
        self.requests: list[Request] = []
        #: the JSON bodies a real upstream of dialect ``wire`` would have received
        self.wire_requests: list[dict[str, object]] = []
        self._queue: deque[FakeItem] = deque()
        self._codec: Dialect | None = get_dialect(wire) if wire else None

    @classmethod
    def from_config(cls, cfg: UpstreamConfig) -> FakeUpstream:
        """Build from config (options ``wire`` and ``chunk_size``, see :func:`check_options`)."""
        return cls(
            cfg.name, wire=cfg.options.get("wire"), chunk_size=cfg.options.get("chunk_size", 4)
        )

    def enqueue(self, item: FakeItem) -> None:
        """Script the answer to the next request not already scripted."""
        self._queue.append(item)

    def _next(self, request: Request) -> Answer:
        item = self._queue.popleft() if self._queue else echo_response(request)
        return item(request) if callable(item) else item

    async def _begin(self) -> None:
        """Count a request in flight, then wait ``delay`` (uncounted if cancelled)."""
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        if self.delay:
            try:
                await asyncio.sleep(self.delay)
            except BaseException:
                self._end()
                raise

    def _end(self) -> None:
        self.in_flight -= 1

    def _receive(self, request: Request, stream: bool) -> tuple[Request, Request]:
        """Record ``request``; return it with the route's shaping and a prefill's marker
        taken out (the shaping applied to its neutral fields when there is no wire,
        :mod:`.shaping`), and the upstream's view of it (through the wire, shaped and
        marked as an HTTP upstream shapes and marks its body, :mod:`.prefill`)."""
        request, prefill = take_prefill(request)
        if self._codec is None:
            request = neutral_request(request)
            self.requests.append(request)
            return request, request
        request, shaping = take_shaping(request)
        self.requests.append(request)
        rendered = self._codec.render_request(
            replace(drop_refused(request, shaping), stream=stream)
        )
        if shaping is not None:
            merge_params(rendered, shaping)
        if prefill:
            rendered.update(prefill_fields(self.wire))
        self._codec.ask_stream(rendered, stream)
        if shaping is not None:
            drop_params(rendered, shaping)
        self.wire_requests.append(rendered)
        return request, self._codec.parse_request(orjson.loads(orjson.dumps(rendered)))

    # --- the neutral path -----------------------------------------------------------

    async def complete(self, request: Request) -> Response:
        """Answer with the next scripted item (a stream is folded)."""
        request, view = self._receive(request, stream=False)
        await self._begin()
        try:
            response = self._as_response(self._next(request))
        finally:
            self._end()
        if self._codec is None:
            return response
        body = orjson.dumps(self._codec.render_response(response, view))
        return self._codec.parse_response(orjson.loads(body), request)

    def _as_response(self, item: Answer) -> Response:
        if isinstance(item, InterlinguaError):
            raise self._through_wire(item)
        if isinstance(item, Response):
            return item
        for event in item:
            if isinstance(event, StreamError):
                raise self._through_wire(event.error)
        return fold(item)

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        """Stream the next scripted item; an error item is raised before any event."""
        request, view = self._receive(request, stream=True)
        await self._begin()
        try:
            item = self._next(request)
            if isinstance(item, InterlinguaError):
                raise self._through_wire(item)
            events = list(unfold(item, self.chunk_size)) if isinstance(item, Response) else item
            if self._codec is not None:
                events = self._decode(self._encode(events, view), replace(request, stream=True))
            for event in events:
                yield event
                if isinstance(event, StreamError):
                    return
                # Give the loop a turn per event, as a socket would: lets the gateway
                # notice disconnects and cancellations in the middle of a scripted stream.
                await asyncio.sleep(0)
        finally:
            self._end()

    def _encode(self, events: list[StreamEvent], view: Request) -> list[bytes]:
        assert self._codec is not None
        encoder = self._codec.stream_encoder(view)
        return [encoder.encode(event) for event in events]

    def _decode(self, chunks: list[bytes], request: Request) -> list[StreamEvent]:
        assert self._codec is not None
        events = EventDecoder(self._codec, request)
        out: list[StreamEvent] = []
        for chunk in chunks:
            out.extend(events.decode(chunk))
        out.extend(events.flush())
        return out

    def _through_wire(self, error: InterlinguaError) -> InterlinguaError:
        """``error`` as the client side would see it after the wire (itself, unwired)."""
        if self._codec is None:
            return error
        status, headers, body = self._render_error(error)
        return self._codec.parse_error(status, body, headers)

    def _render_error(self, error: InterlinguaError) -> tuple[int, dict[str, str], bytes]:
        assert self._codec is not None
        status, payload = self._codec.render_error(error, _FAKE_REQUEST_ID)
        headers = {"content-type": "application/json"}
        if error.retry_after is not None:
            headers["retry-after"] = f"{error.retry_after:g}"
        return status, headers, orjson.dumps(payload)

    # --- the passthrough path -------------------------------------------------------

    async def passthrough(
        self, body: bytes, stream: bool, headers: Mapping[str, str]
    ) -> RawResponse:
        """Answer a body of dialect ``wire`` with the bytes a real upstream would send."""
        if self._codec is None:
            raise NotImplementedError("a FakeUpstream without wire has no passthrough")
        payload = orjson.loads(body)
        view = self._codec.parse_request(payload)
        self.requests.append(view)
        self.wire_requests.append(payload)
        await self._begin()
        try:
            answer = self._relay(view, stream)
        except BaseException:
            self._end()
            raise
        if answer.chunks is None:
            self._end()
        else:
            answer.closer = self._end  # a relayed stream is in flight until closed
        return answer

    def _relay(self, view: Request, stream: bool) -> RawResponse:
        """The bytes answering ``view`` (passthrough), as a real upstream would send them."""
        assert self._codec is not None
        item = self._next(view)
        error = item if isinstance(item, InterlinguaError) else None
        if not stream and isinstance(item, list):
            error = next((e.error for e in item if isinstance(e, StreamError)), None)
        if error is not None:
            status, err_headers, err_body = self._render_error(error)
            return RawResponse(status, err_headers, body=err_body)
        assert not isinstance(item, InterlinguaError)
        if not stream:
            response = item if isinstance(item, Response) else fold(item)
            rendered = orjson.dumps(self._codec.render_response(response, view))
            return RawResponse(200, {"content-type": "application/json"}, body=rendered)
        events = list(unfold(item, self.chunk_size)) if isinstance(item, Response) else item
        data = b"".join(self._encode(events, view))
        # Checked as an HTTP upstream checks a relayed stream, as it is read, so that an
        # in-band error event is the upstream's failure here too (``check.failed``), held
        # back when the gateway asks for that (``check.hold_errors``).
        check = self._codec.relay_check()
        return RawResponse(
            200,
            {"content-type": "text/event-stream"},
            chunks=_checked(_pieces(data, _PASSTHROUGH_PIECES), check),
            check=check,
        )


async def _checked(pieces: AsyncIterator[bytes], check: RelayCheck) -> AsyncIterator[bytes]:
    """``pieces`` as ``check`` passes them (whole events), then what it salvages."""
    async for piece in pieces:
        data = check.feed(piece)
        if data:
            yield data
    tail = check.flush()
    if tail:
        yield tail


async def _pieces(data: bytes, count: int) -> AsyncIterator[bytes]:
    # Equal byte slices, so splits land anywhere -- inside events, even inside a UTF-8
    # character -- as they do on a real socket.
    size = max(1, -(-len(data) // count))
    for start in range(0, len(data), size):
        yield data[start : start + size]
        await asyncio.sleep(0)
