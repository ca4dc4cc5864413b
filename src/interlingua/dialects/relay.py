"""Checks on an answer relayed byte for byte (the passthrough path).

The passthrough path forwards an upstream's bytes without translating them, but it must
not relay a broken answer as a good one: the official SDKs return a stream cut before its
end as if it were complete (no error, no finish reason), raise a bare ``JSONDecodeError``
on an event whose data is not JSON, and a ``TypeError`` on a JSON body of the wrong shape.
A :class:`RelayCheck` sits on the relayed stream and:

* passes on only **whole events** (up to the last blank line), holding back a partial
  one until the rest arrives, so that an error event the gateway appends after a fault is
  never glued onto half an event (WHATWG HTML 9.2.6: an event ends at a blank line);
  nothing at all is passed on before the first event with data (a stream that opens with
  comments and then fails still gets a real status);
* parses each event's data as JSON (what the SDK will do) and stops at the first that is
  not, with ``error`` set to a 502 :class:`~interlingua.errors.UpstreamError`; drops events
  that have fields but no data (``event: ping`` alone, a blank ``data:``), which WHATWG
  readers ignore but the openai SDK parses as JSON and fails on; keeps comments;
* knows the dialect's end (``[DONE]`` / ``message_stop`` / ``response.completed``, or an
  in-band error event) and,
  at :meth:`finish`, says whether a stream that stopped without it was cut short; the
  lenient rule matches the translating decoders' ``flush``: a stream that already said
  why it stopped (a ``finish_reason`` for every choice, a ``message_delta``) may skip the
  final marker; a last event missing only its blank line is completed, as
  :meth:`interlingua.sse.SSEDecoder.flush` salvages it;
* notes an in-band error that is the stream's first event (``first_error``), so the
  gateway can answer it with a real status instead of 200.

What of an upstream answer's headers reaches the client is decided here too, once for
both paths (:func:`relayed_headers`): its retry guidance as it came, and its request id,
the one its provider asks you to quote, renamed ``upstream-request-id`` so it is not
taken for the gateway's own ``x-request-id`` / ``request-id``.

Line endings: CR and CRLF become LF (the same events to any SSE reader), a CR at the end
of a read is taken as a line end and a LF opening the next read then skipped, as the SSE
decoder does. Cost: one msgspec decode of the few fields it needs per event, linear in the bytes
however an event is split across reads; the bytes of whole events are relayed unchanged
otherwise. :meth:`RelayCheck.check_body` does the same for a non-streamed JSON answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
import orjson

from ..errors import UpstreamError

__all__ = [
    "MAX_EVENT_BYTES",
    "RELAYED_HEADERS",
    "UPSTREAM_REQUEST_ID",
    "AnthropicRelayCheck",
    "OpenAIChatRelayCheck",
    "RelayCheck",
    "ResponsesRelayCheck",
    "note_error_body",
    "relayed_headers",
    "upstream_request_id",
]

#: the largest partial event held back (a stream that never ends an event would
#: otherwise be buffered without bound); far above any real event
MAX_EVENT_BYTES = 16 * 1024 * 1024

_KEEP, _DROP, _BAD, _HOLD = 0, 1, 2, 3

#: the name an upstream's own request id is relayed under
UPSTREAM_REQUEST_ID = "upstream-request-id"
# What a client may act on, relayed as it came: when to retry, and whether to (what
# OpenAI and Anthropic send, and their SDKs read).
_RETRY_HEADERS = ("retry-after", "retry-after-ms", "x-should-retry")
#: every header a client gets from an upstream's answer, by the name it gets it under
RELAYED_HEADERS = (*_RETRY_HEADERS, UPSTREAM_REQUEST_ID)


def upstream_request_id(headers: Mapping[str, str]) -> str | None:
    """The id an upstream gave its answer: ``x-request-id`` (OpenAI and most servers) or
    ``request-id`` (Anthropic); None without one. Lowercase names, or a mapping that
    ignores case."""
    return headers.get("x-request-id") or headers.get("request-id") or None


def relayed_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The headers of an upstream's answer its client gets, by :data:`RELAYED_HEADERS`
    name (lowercase names in, or a mapping that ignores case).

    >>> relayed_headers({"retry-after": "2", "request-id": "req_9", "server": "x"})
    {'retry-after': '2', 'upstream-request-id': 'req_9'}
    """
    out = {name: value for name in _RETRY_HEADERS if (value := headers.get(name)) is not None}
    request_id = upstream_request_id(headers)
    if request_id:
        out[UPSTREAM_REQUEST_ID] = request_id
    return out


def note_error_body(body: bytes, note: str) -> bytes:
    """An upstream's error body with ``note`` appended to its message, ``error.message``
    in every dialect's error shape (docs/protocols.md, "Chat Completions: errors",
    "Messages: errors"); the body as it came when it has no such message or names the
    note already. Only error answers pay for the parse.

    >>> note_error_body(b'{"error":{"message":"bad"}}', " (request id: req_1)")
    b'{"error":{"message":"bad (request id: req_1)"}}'
    """
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict):
        return body
    message = error.get("message")
    if not isinstance(message, str) or note in message:
        return body
    error["message"] = message + note
    return orjson.dumps(payload)


class RelayCheck:
    """Whole, well-formed events of one relayed stream; see the module docstring.

    ``feed(chunk)`` returns the bytes that may be relayed now; once ``error`` is set it
    returns nothing more. At the end of input ``flush()`` returns a salvaged last event,
    then ``finish()`` the error owed, if any.
    """

    __slots__ = (
        "_held",
        "_held_size",
        "_pending",
        "_skip_lf",
        "ended",
        "error",
        "failed",
        "first_error",
        "held_error",
        "hold_errors",
        "said_why",
        "started",
    )

    def __init__(self) -> None:
        self._held: list[bytes] = []  # the partial event, LF-normalized
        self._held_size = 0
        self._pending = b""  # comments before the first data event, held with it
        self._skip_lf = False  # the last read ended in a CR: a LF opening the next is its pair
        #: an event with data was seen
        self.started = False
        #: the dialect's end (or an in-band error) was seen
        self.ended = False
        #: the stream ended with an in-band error event (the upstream's failure, relayed
        #: as it came)
        self.failed = False
        #: the stream said why it stops (finish reason / message_delta)
        self.said_why = False
        #: the fault that stopped the relay, if any
        self.error: UpstreamError | None = None
        #: ``(event name, data)`` of an in-band error that was the first data event
        self.first_error: tuple[str, str] | None = None
        #: set before the first ``feed``: an in-band error event after the first is held
        #: back instead of passed on (into :attr:`held_error`), with everything after it,
        #: for a gateway that may still carry the stream on elsewhere
        self.hold_errors = False
        #: the in-band error event held back (whole, with its blank line), if any
        self.held_error: bytes | None = None

    @classmethod
    def ends(cls, sent: bytes) -> bool:
        """Whether ``sent``, the last bytes a client was handed, end with the last event
        of this dialect's stream (its end, or an in-band error): a client that hangs up
        after them has had the whole answer. Only that last event is read.

        >>> OpenAIChatRelayCheck.ends(b'data: {"choices": []}\\n\\ndata: [DONE]\\n\\n')
        True
        >>> OpenAIChatRelayCheck.ends(b'data: {"choices": []}\\n\\n')
        False
        """
        body = sent.replace(b"\r\n", b"\n").rstrip(b"\n")
        if not body:
            return False
        cut = body.rfind(b"\n\n")
        check = cls()
        check.feed((body[cut + 2 :] if cut >= 0 else body) + b"\n\n")
        return check.ended

    # -- streams ------------------------------------------------------------------------

    def feed(self, chunk: bytes) -> bytes:
        """The whole events among the bytes held so far plus ``chunk``."""
        if self.error is not None:
            return b""
        if self.ended:
            # past the end nothing is checked any more (nor passed on after a held error)
            return b"" if self.held_error is not None else chunk
        chunk = self._lf(chunk)
        cut = chunk.rfind(b"\n\n")
        if cut >= 0:
            end = cut + 2
        elif chunk[:1] == b"\n" and self._held and self._held[-1][-1:] == b"\n":
            end = 1  # the blank line straddles the two reads
        else:
            if chunk:
                self._hold(chunk)
            return b""
        data = b"".join((*self._held, chunk[:end])) if self._held else chunk[:end]
        self._held.clear()
        self._held_size = 0
        out = self._events(data)
        rest = chunk[end:]
        if self.ended:
            return out + rest
        if rest and self.error is None:
            self._hold(rest)
        return out

    def flush(self) -> bytes:
        """At the end of input: a last event that lacked only its blank line, checked."""
        if self.error is not None or self.ended or not self._held:
            return b""
        tail = b"".join(self._held)
        self._held.clear()
        self._held_size = 0
        if not tail.strip():
            return b""
        return self._events(tail.rstrip(b"\n") + b"\n\n")

    def finish(self) -> UpstreamError | None:
        """At the end of input (after :meth:`flush`): the error owed, if any."""
        if self.error is None and not self.ended and not self.said_why:
            self.error = UpstreamError("upstream closed the stream before it ended", status=502)
        return self.error

    def drop(self) -> None:
        """Forget what is held (the relay is over)."""
        self._held.clear()
        self._held_size = 0
        self._pending = b""

    def _lf(self, chunk: bytes) -> bytes:
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if b"\r" in chunk:
            self._skip_lf = chunk[-1:] == b"\r"
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        return chunk

    def _hold(self, part: bytes) -> None:
        self._held.append(part)
        self._held_size += len(part)
        if self._held_size > MAX_EVENT_BYTES:
            self.drop()
            self.error = UpstreamError(
                f"upstream sent a stream event larger than {MAX_EVENT_BYTES} bytes", status=502
            )

    def _events(self, whole: bytes) -> bytes:
        """The relayable part of ``whole`` (whole events ending in a blank line)."""
        events = whole[:-2].split(b"\n\n")
        kept: list[bytes] | None = None  # built only once an event is dropped
        good = 0
        check = self._check
        for event in events:
            verdict = check(event)
            good += len(event) + 2
            if verdict:  # (_KEEP is 0)
                if verdict == _HOLD:
                    self.held_error = event + b"\n\n"
                    good -= len(event) + 2
                    return self._release(whole[:good] if kept is None else b"".join(kept))
                if verdict == _BAD:
                    good -= len(event) + 2
                    return self._release(whole[:good] if kept is None else b"".join(kept))
                if kept is None:  # _DROP
                    kept = [whole[: good - len(event) - 2]]
            elif kept is not None:
                kept.append(event + b"\n\n")
            if self.ended:
                # past the end nothing is checked: the rest goes out as it came
                out = whole if kept is None else b"".join(kept) + whole[good:]
                return self._release(out)
        return self._release(whole if kept is None else b"".join(kept))

    def _release(self, out: bytes) -> bytes:
        if self.started:
            if self._pending:
                out, self._pending = self._pending + out, b""
            return out
        self._pending += out  # comments only so far: wait for the first data event
        if len(self._pending) > MAX_EVENT_BYTES:
            self._pending = b""
        return b""

    def _check(self, event: bytes) -> int:
        # Hot paths: a lone ``data:`` line (OpenAI), ``event:`` then ``data:`` (Anthropic).
        name = b""
        if event[:6] == b"data: " and b"\n" not in event:
            data: bytes | None = event[6:]
            fields = False
        else:
            head, _, rest = event.partition(b"\n")
            if head[:6] == b"event:" and rest[:6] == b"data: " and b"\n" not in rest:
                name, data, fields = head[6:].strip(), rest[6:], True
            else:
                name, data, fields = _fields(event)
        if data is None:
            # A comment is a keep-alive; an event with fields but no data is ignored by
            # WHATWG readers but fails the openai SDK's JSON parse: it is not relayed.
            return _DROP if fields else _KEEP
        if data[:1] != b"{":
            if not data or data.isspace():
                return _DROP
            if self._end_marker(data):
                self.ended = self.started = True
                return _KEEP
        if not self._read(name, data):
            self.error = UpstreamError(
                "upstream sent a stream event that is not a JSON object", status=502
            )
            return _BAD
        if not self.started:
            if self.ended and not self.said_why:
                self.first_error = (name.decode("latin-1"), data.decode("utf-8", "replace"))
            self.started = True
        elif self.failed and self.hold_errors:
            return _HOLD
        return _KEEP

    def _read_loose(self, name: bytes, data: bytes) -> bool:
        """Any JSON object (a shape the typed decoder refuses); False if it is not one."""
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            return False
        if not isinstance(payload, dict):
            return False
        self._inspect(name, payload)
        return True

    # -- the dialect's facts ------------------------------------------------------------

    def _end_marker(self, data: bytes) -> bool:
        """Whether ``data`` is the dialect's literal end of stream (not JSON)."""
        return False

    def _read(self, name: bytes, data: bytes) -> bool:
        """Parse one event's data (False: not a JSON object) and note what it says.

        Subclasses decode only the fields they need with msgspec (it skips the rest
        while still validating it: ~3× faster than building the whole object), and fall
        back to :meth:`_read_loose` for shapes that decoder refuses."""
        return self._read_loose(name, data)

    def _inspect(self, name: bytes, payload: dict[str, Any]) -> None:
        """Note the dialect's end, in-band errors and stop reasons in one event."""
        raise NotImplementedError

    @staticmethod
    def check_body(payload: dict[str, Any]) -> str | None:
        """What is wrong with a non-streamed 2xx JSON answer of this dialect, if anything
        (the shape the SDK needs to read it; ``error`` bodies some providers send at 200)."""
        raise NotImplementedError

    @classmethod
    def body_looks_right(cls, data: bytes) -> bool:
        """Whether ``data`` is a JSON object that :meth:`check_body` would pass, decided
        by a typed decoder that builds only the fields in question (the hot path: ~1 µs
        where building the whole object costs several); False sends the caller to the
        slow path that says what is wrong."""
        return False


class _Choice(msgspec.Struct):
    index: Any = 0
    finish_reason: Any = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None
    error: Any = None


_CHUNK = msgspec.json.Decoder(_Chunk)


class _Completion(msgspec.Struct):
    choices: list[msgspec.Raw]
    error: Any = None


_COMPLETION = msgspec.json.Decoder(_Completion)


class OpenAIChatRelayCheck(RelayCheck):
    """Chat Completions chunks: ``data: [DONE]`` ends; an ``error`` payload ends too."""

    __slots__ = ("_open_choices",)

    def __init__(self) -> None:
        super().__init__()
        self._open_choices: set[Any] = set()

    def _end_marker(self, data: bytes) -> bool:
        return data == b"[DONE]" or (data[:1] != b"{" and data.strip() == b"[DONE]")

    def _read(self, name: bytes, data: bytes) -> bool:
        try:
            chunk = _CHUNK.decode(data)
        except msgspec.ValidationError:
            return self._read_loose(name, data)
        except msgspec.DecodeError:
            return False
        if chunk.error:
            self.ended = self.failed = True
        elif chunk.choices:
            open_choices = self._open_choices
            for choice in chunk.choices:
                if choice.finish_reason or choice.index not in open_choices:
                    self._choice(choice.index, choice.finish_reason)
        return True

    def _inspect(self, name: bytes, payload: dict[str, Any]) -> None:
        if payload.get("error"):
            self.ended = self.failed = True
            return
        choices = payload.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                if isinstance(choice, dict):
                    self._choice(choice.get("index", 0), choice.get("finish_reason"))

    def _choice(self, index: Any, finish: Any) -> None:
        if not isinstance(index, int | str):
            index = 0
        if finish:
            self._open_choices.discard(index)
            self.said_why = not self._open_choices
        elif index not in self._open_choices:
            # (n > 1: every choice must have finished for the marker to be skipped)
            self._open_choices.add(index)
            self.said_why = False

    @staticmethod
    def check_body(payload: dict[str, Any]) -> str | None:
        if payload.get("error"):
            return "an error body"
        if not isinstance(payload.get("choices"), list):
            return "a JSON object without choices"
        return None

    @classmethod
    def body_looks_right(cls, data: bytes) -> bool:
        try:
            return not _COMPLETION.decode(data).error
        except msgspec.DecodeError:  # (ValidationError included: a shape to look at)
            return False


class _Typed(msgspec.Struct):
    type: Any = None


_TYPED = msgspec.json.Decoder(_Typed)


class _Message(msgspec.Struct):
    content: list[msgspec.Raw]
    type: Any = None
    error: Any = None


_MESSAGE = msgspec.json.Decoder(_Message)


class _TypedEventsCheck(RelayCheck):
    """Streams whose events say what they are in ``type`` (or, failing that, ``event:``)."""

    __slots__ = ()

    def _read(self, name: bytes, data: bytes) -> bool:
        try:
            kind = _TYPED.decode(data).type
        except msgspec.ValidationError:
            return self._read_loose(name, data)
        except msgspec.DecodeError:
            return False
        self._kind(kind if kind is not None else name.decode("latin-1"))
        return True

    def _inspect(self, name: bytes, payload: dict[str, Any]) -> None:
        kind = payload.get("type")
        self._kind(kind if kind is not None else name.decode("latin-1"))

    def _kind(self, kind: Any) -> None:
        """Note what an event of type ``kind`` says about the stream's end."""
        raise NotImplementedError


class AnthropicRelayCheck(_TypedEventsCheck):
    """Messages events: ``message_stop`` or ``error`` ends; ``message_delta`` says why."""

    __slots__ = ()

    def _kind(self, kind: Any) -> None:
        if kind == "message_stop":
            self.ended = True
        elif kind == "error":
            self.ended = self.failed = True
        elif kind == "message_delta":
            self.said_why = True

    @staticmethod
    def check_body(payload: dict[str, Any]) -> str | None:
        if payload.get("type") == "error" or isinstance(payload.get("error"), dict):
            return "an error body"
        if not isinstance(payload.get("content"), list):
            return "a JSON object that is not a message"
        return None

    @classmethod
    def body_looks_right(cls, data: bytes) -> bool:
        try:
            body = _MESSAGE.decode(data)
        except msgspec.DecodeError:  # (ValidationError included: a shape to look at)
            return False
        return body.type != "error" and body.error is None


#: the Responses events after which nothing more comes
#: (docs/protocols.md, "Responses: stream events")
_RESPONSES_ENDS = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "error"}
)
#: the ones of those that say the response failed
_RESPONSES_FAILURES = frozenset({"response.failed", "error"})


class _ResponseBody(msgspec.Struct):
    output: list[msgspec.Raw]
    error: Any = None


_RESPONSE_BODY = msgspec.json.Decoder(_ResponseBody)


class ResponsesRelayCheck(_TypedEventsCheck):
    """Responses events: ``response.completed`` / ``incomplete`` / ``failed`` or ``error``
    ends. No event says why before the end, so a stream without one was cut short."""

    __slots__ = ()

    def _kind(self, kind: Any) -> None:
        if kind in _RESPONSES_ENDS:
            self.ended = True
            self.failed = kind in _RESPONSES_FAILURES

    @staticmethod
    def check_body(payload: dict[str, Any]) -> str | None:
        if isinstance(payload.get("error"), dict):
            return "an error body"
        if not isinstance(payload.get("output"), list):
            return "a JSON object that is not a response"
        return None

    @classmethod
    def body_looks_right(cls, data: bytes) -> bool:
        try:
            return _RESPONSE_BODY.decode(data).error is None
        except msgspec.DecodeError:  # (ValidationError included: a shape to look at)
            return False


def _fields(event: bytes) -> tuple[bytes, bytes | None, bool]:
    """(event name, data or None, whether a field other than data was set) of an event
    in general form: several data lines, ``id:``, ``retry:``, comments (WHATWG 9.2.6)."""
    name = b""
    data: bytes | None = None
    fields = False
    for line in event.split(b"\n"):
        if line[:5] == b"data:":
            value = line[6:] if line[5:6] == b" " else line[5:]
            data = value if data is None else data + b"\n" + value
        elif line[:6] == b"event:":
            name = line[6:].strip()
            fields = True
        elif line and line[:1] != b":":
            fields = True  # id:, retry:, or a field nobody knows
    return name, data, fields
