"""The contract every dialect package fulfils.

A dialect package (``interlingua.dialects.openai_chat``, ``.anthropic``) is a pure codec:
no I/O. It exposes a module-level object named ``DIALECT`` that satisfies
:class:`Dialect`. The same codec serves both sides of the gateway:

* toward a **client** that speaks the dialect: ``parse_request`` the incoming body,
  ``render_response`` / ``StreamEncoder`` the answer, ``render_error`` failures;
* toward an **upstream** that speaks it: ``endpoint`` the URL and headers,
  ``render_request`` the outgoing body, ``parse_response`` / ``StreamDecoder`` its answer,
  ``parse_error`` its failures.

An upstream's stream bytes are read through :class:`EventDecoder`, which puts the SSE
decoder and the dialect's ``StreamDecoder`` together once for every caller.

Round trips through the same dialect keep everything (``Request.extra`` and ``meta``
slots); translation across dialects follows the drop policy in docs/mapping.md.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..core import Request, Response, StreamEnd, StreamError, StreamEvent
from ..core.events import set_raw
from ..errors import InterlinguaError
from ..sse import SSEDecoder, SSEEvent
from .relay import RelayCheck

__all__ = ["Dialect", "EventDecoder", "RawEventDecoder", "StreamDecoder", "StreamEncoder"]

# The events after which a stream has nothing more to say (EventDecoder._passed).
_LAST = (StreamEnd, StreamError)


class StreamDecoder(Protocol):
    """Upstream SSE events of this dialect -> neutral stream events.

    Construct with the neutral request that was sent (so e.g. a plain ``stop`` finish can
    be reported as the stop sequence when it can be told). ``feed`` takes one SSE event and
    returns zero or more neutral events; ``flush`` is called at end of input and returns
    whatever is still owed (for OpenAI: the held-back ``StreamEnd``). An in-band upstream
    error becomes a :class:`~interlingua.core.StreamError`. The decoder never raises on
    unknown event types; it ignores them. A ``StreamEnd`` or ``StreamError`` is the last
    event of the list it comes in, and every call after it returns ``[]``
    (:class:`EventDecoder` relies on both: it looks only at the end of each list).

    ``last`` is the JSON value the event fed last decoded to (left as it was when that
    event held none): the raw data :class:`EventDecoder` attaches to the events it made,
    when asked, without decoding it a second time.
    """

    last: Any

    def feed(self, event: SSEEvent) -> list[StreamEvent]: ...

    def flush(self) -> list[StreamEvent]: ...


class StreamEncoder(Protocol):
    """Neutral stream events -> bytes of this dialect's SSE stream, chunk by chunk.

    Construct with the neutral request the client sent (model name to echo, whether the
    client asked for a usage chunk, ...). ``encode`` returns the bytes owed for one event
    (possibly ``b""`` when it must buffer); ``StreamEnd`` produces the dialect's closing
    events (``[DONE]`` for OpenAI); ``StreamError`` produces the in-band error event.
    ``ping`` is bytes for a keep-alive suitable for this dialect.
    """

    def encode(self, event: StreamEvent) -> bytes: ...

    def ping(self) -> bytes: ...


class Dialect(Protocol):
    """A wire dialect's codec. See the module docstring for who calls what."""

    name: str
    #: the request body fields that set the output limit (the first is the one a
    #: default fills; a body that sets any of them has chosen its own)
    output_limit_fields: tuple[str, ...]

    def parse_request(self, body: Any) -> Request:
        """Validate and convert a decoded JSON body. Raise InvalidRequestError naming the
        bad field in ``param`` (``messages[1].content[0].type``)."""
        ...

    def validate_request(self, body: dict[str, Any]) -> None:
        """Raise what ``parse_request`` would raise for ``body``, without converting it.

        For the passthrough path, which forwards the body as it is: the same 400 (message
        and ``param``) as the translated path, at a fraction of the cost. Accepts what
        only another dialect could not carry; that is checked when rendering."""
        ...

    def render_request(self, request: Request) -> dict[str, Any]:
        """The JSON body to send to an upstream of this dialect. Raise InvalidRequestError
        for content this dialect cannot carry (after the drop policy)."""
        ...

    def ask_stream(self, body: dict[str, Any], stream: bool) -> bool:
        """Make a request body ask for a stream of events (``stream``) or for one whole
        answer, in place, saying which either way (what an upstream is sent).

        A stream also asks for its usage where the dialect makes that optional (Chat's
        ``stream_options.include_usage``): True when this call asked for it, so the
        gateway keeps that part of the answer from a client that did not. A whole answer
        carries no field that only a stream may carry."""
        ...

    def drop_stream(self, body: dict[str, Any]) -> None:
        """Take every stream field out of a request body, in place: one whole answer, by
        the API's default (what a client sends when it wants no stream)."""
        ...

    def place_output_limit(self, body: dict[str, Any], field: str | None) -> None:
        """Move a request body's output limit, in place, to the field its server takes:
        ``field`` when configured, else the dialect's rule (Chat: by model name, see
        ``openai_chat/max_tokens.py``); a dialect with one such field leaves it."""
        ...

    def parse_response(self, body: Any, request: Request | None = None) -> Response:
        """An upstream's non-stream answer -> Response. ``request`` is the neutral
        request it answers, when known: Anthropic needs it to turn a wrapped custom-tool
        call back into a custom call (the stream decoders get it at construction)."""
        ...

    def render_response(self, response: Response, request: Request) -> dict[str, Any]: ...

    def plainly_answered(self, body: Any) -> bool:
        """Whether a decoded answer body holds text where this dialect puts it: a quick
        look for the common case, not a reading (False: read it to judge).
        :mod:`.answers` says where."""
        ...

    def rewrite_text(self, body: Any, rewrite: Callable[[str], str]) -> bool:
        """Rewrite a decoded answer body's text in place (the first text part, added when
        missing, see :mod:`.answers`); whether the body had the shape to hold one."""
        ...

    def stream_decoder(self, request: Request) -> StreamDecoder: ...

    def stream_encoder(self, request: Request) -> StreamEncoder: ...

    def relay_check(self) -> RelayCheck:
        """A check on an upstream stream of this dialect relayed untranslated (passthrough):
        whole events only, each JSON, and a stream cut before its end caught."""
        ...

    def parse_error(self, status: int, body: bytes, headers: dict[str, str]) -> InterlinguaError:
        """An upstream's non-2xx answer -> the error to raise (status kept; 529/503 ->
        OverloadedError; retry-after headers parsed into ``retry_after``)."""
        ...

    def render_error(self, error: InterlinguaError, request_id: str) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body) to send a client of this dialect."""
        ...

    def client_status(self, status: int) -> int:
        """The HTTP status to show a client of this dialect for an upstream error answer
        of ``status`` relayed as it is (OpenAI: 529 -> 503; Anthropic: unchanged).
        ``render_error`` goes by the error's kind as well, and may choose otherwise."""
        ...

    def endpoint(self, base_url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
        """The generation URL under ``base_url`` and the request headers: content type,
        authentication when ``api_key`` is set, and whatever else the API requires."""
        ...

    def render_model_list(self, names: list[str], created: int) -> dict[str, Any]:
        """The body of ``GET /v1/models`` in this dialect's shape."""
        ...


class EventDecoder:
    """An upstream's stream bytes -> neutral events: SSE, then the dialect's decoder.

    The one place the two stages are put together (the gateway's HTTP upstreams, the
    client and the fake upstream all read through it), so the end-of-stream rules live
    here once. Pure: no I/O, bytes in, events out.

    ``decode`` takes each chunk as read and returns the events it completed, one list
    per chunk (callers write a list as one batch). ``flush`` at end of input returns
    the rest, in this order: the event left pending in the SSE decoder (salvaged even
    without its blank line, see :meth:`~interlingua.sse.SSEDecoder.flush`), then what
    the dialect decoder still owes (OpenAI's held-back ``StreamEnd``). An error ends a
    stream: a list stops at its first ``StreamError``.

    >>> from interlingua.dialects import get_dialect
    >>> events = EventDecoder(get_dialect("openai"), Request(model="m", messages=()))
    >>> chunk = b'data: {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}\\n\\n'
    >>> [type(event).__name__ for event in events.decode(chunk)]
    ['StreamStart', 'BlockStart', 'TextDelta']
    >>> events.decode(b"data: [DONE]\\n\\n")[-1].stop_reason, events.ended
    (<StopReason.END_TURN: 'end_turn'>, True)
    """

    __slots__ = ("_decoder", "_feed", "_sse", "ended", "started")

    def __init__(self, dialect: Dialect, request: Request) -> None:
        self._sse = SSEDecoder()
        self._decoder = dialect.stream_decoder(request)
        self._feed = self._decoder.feed  # bound once: called per SSE event
        #: a ``StreamEnd`` has come out: the stream is complete
        self.ended = False
        #: some event has come out (a stream cut after this has delivered a part)
        self.started = False

    def decode(self, chunk: bytes) -> list[StreamEvent]:
        """The events ``chunk`` completes (often none: an event may span reads)."""
        sse_events = self._sse.decode(chunk)
        if not sse_events:
            return []
        feed = self._feed
        if len(sse_events) == 1:
            return self._passed(feed(sse_events[0]))
        out: list[StreamEvent] = []
        for sse_event in sse_events:
            events = feed(sse_event)
            if events:
                out.extend(events)
                if isinstance(events[-1], _LAST):
                    break  # the stream is over: later events in the chunk are ignored
        return self._passed(out)

    def flush(self) -> list[StreamEvent]:
        """End of input: the last SSE event's events, then the dialect decoder's own."""
        out: list[StreamEvent] = []
        for sse_event in self._sse.flush():
            out.extend(self._feed(sse_event))
        if not (out and isinstance(out[-1], _LAST)):
            out.extend(self._decoder.flush())
        return self._passed(out)

    def _passed(self, events: list[StreamEvent]) -> list[StreamEvent]:
        """``events``, noting whether the stream started and ended (per call, not per
        event: an end or error is always last, see :class:`StreamDecoder`)."""
        if events:
            self.started = True
            if type(events[-1]) is StreamEnd:
                self.ended = True
        return events


class RawEventDecoder(EventDecoder):
    """:class:`EventDecoder` whose events carry the JSON of the SSE event they came from
    as :attr:`~interlingua.core.events.EventBase.raw` (the client's streams).

    The value is the one the dialect decoder decoded (its ``last``), not decoded a second
    time; None for events made by an SSE event that held no JSON (OpenAI's ``[DONE]``)
    or by the dialect decoder's end of input. The gateway reads through the plain
    :class:`EventDecoder` and pays nothing for this.
    """

    __slots__ = ()

    def __init__(self, dialect: Dialect, request: Request) -> None:
        super().__init__(dialect, request)
        # Measured: swapping the per-event feed costs ~0.2 µs per SSE event; a decode()
        # of its own, inlining this, cost more.
        self._feed = self._stamped

    def _stamped(self, event: SSEEvent) -> list[StreamEvent]:
        """One SSE event's events, each given its JSON as ``raw``."""
        decoder = self._decoder
        decoder.last = None
        events = decoder.feed(event)
        raw = decoder.last
        for made in events:
            set_raw(made, raw)
        return events
