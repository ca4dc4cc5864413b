"""Server-Sent Events (``text/event-stream``): an incremental decoder and an encoder.

Every streaming LLM API (OpenAI, Anthropic, Gemini, ...) sends its deltas as
Server-Sent Events, so this module sits on the gateway's hot path: it parses
upstream streams and produces downstream ones for thousands of streams per second.

The decoder follows the WHATWG HTML Standard exactly, §9.2.5 "Parsing an event
stream" and §9.2.6 "Interpreting an event stream"
(https://html.spec.whatwg.org/multipage/server-sent-events.html#parsing-an-event-stream):

* The stream is UTF-8; invalid sequences become U+FFFD, and one leading U+FEFF
  byte order mark is dropped at the start of the stream, nowhere else.
* A line ends at CRLF, a lone LF or a lone CR, and at nothing else. In
  particular U+2028, U+2029, U+0085, VT and FF, on which ``str.splitlines``
  would split, are ordinary characters.
* Bytes may arrive split anywhere, including inside a multi-byte UTF-8
  character and between the CR and the LF of a CRLF.
* A blank line dispatches the event; a line starting with ``:`` is a comment;
  ``field: value`` loses exactly one space after the colon (never a tab); a
  line with no colon is a field whose value is the empty string.
* ``data`` lines accumulate, joined by LF; ``event`` sets the type (default
  ``"message"``); ``id`` sets the last event ID, which persists across events,
  unless the value contains U+0000; ``retry`` counts only if it is all ASCII
  digits; other fields are ignored. An event with no ``data`` line is never
  dispatched.

Deliberate deviation at end of stream (see :meth:`SSEDecoder.flush`): the spec
discards an event that was not terminated by a blank line. Several LLM servers
and proxies close the connection straight after ``data: {...}\\n`` (or even
without the final newline), and dropping the final chunk there loses the stop
reason or the usage numbers, so ``flush()`` delivers such a pending event. Use
``flush(salvage=False)`` for the spec's behaviour.

The encoder functions produce bytes ready to write to the wire; they always end
an event with a blank line and use LF line ends.
"""

from __future__ import annotations

import codecs
import functools
from dataclasses import dataclass

__all__ = [
    "DONE",
    "SSEDecoder",
    "SSEEvent",
    "comment",
    "encode_event",
    "encode_json_event",
]


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched event.

    ``event`` is the event type (``"message"`` when the stream named none) and
    ``data`` the data lines joined by LF. ``id`` is the stream's last event ID at
    dispatch time: per spec it persists across events until another ``id``
    field changes it (an empty ``id:`` sets it to ``""``), and it is ``None`` if
    the stream never sent one. ``retry`` is the reconnection time in
    milliseconds if a valid ``retry`` field appeared in this event's block of
    lines, else ``None`` (the stream-wide value is :attr:`SSEDecoder.retry`).
    """

    event: str = "message"
    data: str = ""
    id: str | None = None
    retry: int | None = None


_Utf8Decoder = codecs.getincrementaldecoder("utf-8")


class SSEDecoder:
    """Incremental ``text/event-stream`` parser: feed bytes, get :class:`SSEEvent` s.

    Call :meth:`decode` with each chunk as it is read and :meth:`flush` once at
    end of stream. Chunks may be split at any byte. One decoder parses one
    stream at a time; after :meth:`flush` it is ready for the next stream (a
    reconnection), keeping :attr:`last_event_id` and :attr:`retry` as the spec
    requires for reconnecting.
    """

    __slots__ = (
        "_buf",
        "_data",
        "_event_type",
        "_last_id",
        "_pending_cr",
        "_retry",
        "_retry_in_event",
        "_started",
        "_utf8",
    )

    def __init__(self) -> None:
        self._utf8: codecs.IncrementalDecoder = _Utf8Decoder(errors="replace")
        # Text after the last line end seen so far: an incomplete line. It never
        # contains CR or LF.
        self._buf = ""
        # The previous text ended with CR, so an LF at the start of the next text
        # is the second half of a CRLF, not a line end of its own (§9.2.5).
        self._pending_cr = False
        # Whether any character has been seen; the BOM is only dropped before that.
        self._started = False
        # The spec's "data buffer" is the values each followed by LF, with the
        # final LF removed at dispatch; a list joined by LF is the same thing
        # without quadratic string growth. Empty list == empty data buffer.
        self._data: list[str] = []
        self._event_type = ""
        self._last_id: str | None = None
        self._retry: int | None = None
        self._retry_in_event: int | None = None

    @property
    def last_event_id(self) -> str | None:
        """The last event ID buffer: what a client sends as ``Last-Event-ID``."""
        return self._last_id

    @property
    def retry(self) -> int | None:
        """The stream's reconnection time in ms as last set by a ``retry`` field."""
        return self._retry

    def decode(self, chunk: bytes) -> list[SSEEvent]:
        """Parse the next chunk of the stream; return the events it completed."""
        text = self._utf8.decode(chunk)
        if not text:
            return []
        return self._feed(text)

    def flush(self, *, salvage: bool = True) -> list[SSEEvent]:
        """Signal end of stream; return the final events (at most one).

        Per spec (§9.2.6, "once the end of the file is reached, any pending data
        must be discarded") an event not terminated by a blank line is dropped.
        As a documented policy for robust LLM clients, with ``salvage=True``
        (the default) the pending event is instead delivered if its data buffer
        is non-empty, including when the last line itself had no line end,
        e.g. a stream ending in ``data: {...}`` without ``\\n\\n``. A truncated
        multi-byte character at the very end becomes U+FFFD.

        Afterwards the decoder is reset for a new stream, except for
        :attr:`last_event_id` and :attr:`retry`, which the spec keeps across
        reconnections.
        """
        tail = self._utf8.decode(b"", True)
        events = self._feed(tail) if tail else []
        if salvage:
            # An unterminated last line is still a line; then act as if the blank
            # line had arrived, which dispatches only if there is data.
            lines = [self._buf, ""] if self._buf else [""]
            events.extend(self._process(lines))
        self._utf8.reset()
        self._buf = ""
        self._pending_cr = False
        self._started = False
        self._data.clear()
        self._event_type = ""
        self._retry_in_event = None
        return events

    def _feed(self, text: str) -> list[SSEEvent]:
        """Split decoded text into complete lines and process them."""
        if not self._started:
            self._started = True
            # §9.2.5: "One leading U+FEFF BYTE ORDER MARK character must be
            # ignored if any are present." Only one, and only at the start.
            if text[0] == "\ufeff":
                text = text[1:]
                if not text:
                    return []
        if self._pending_cr:
            self._pending_cr = False
            if text[0] == "\n":
                text = text[1:]
                if not text:
                    return []
        if self._buf:
            text = self._buf + text
        if "\r" in text:
            # Slow path: normalise CRLF and lone CR to LF. Replacing CRLF first
            # keeps "\r\r\n" as two line ends, as the grammar requires. A CR at the
            # very end may be the first half of a CRLF split across reads.
            self._pending_cr = text[-1] == "\r"
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        elif "\n" not in text:
            # No line end at all: just buffer (common for large data lines).
            self._buf = text
            return []
        # Fast path (LF only) and the normalised text share this split. Not
        # str.splitlines, which also splits on U+2028, FF, VT, NEL, ...
        lines = text.split("\n")
        self._buf = lines.pop()
        return self._process(lines)

    def _process(self, lines: list[str]) -> list[SSEEvent]:
        """Interpret complete lines (§9.2.6) and return dispatched events."""
        events: list[SSEEvent] = []
        data = self._data
        event_type = self._event_type
        last_id = self._last_id
        retry_in_event = self._retry_in_event
        for line in lines:
            if not line:
                # Blank line: dispatch. With an empty data buffer the spec only
                # resets the event type buffer; nothing is fired.
                if data:
                    events.append(
                        SSEEvent(event_type or "message", "\n".join(data), last_id, retry_in_event)
                    )
                    data.clear()
                event_type = ""
                retry_in_event = None
                continue
            # Hot path: almost every non-blank line of an LLM stream is "data: ...".
            if line.startswith("data:"):
                value = line[5:]
                # Exactly one U+0020 SPACE is removed, not a tab nor a second space.
                data.append(value[1:] if value[:1] == " " else value)
                continue
            colon = line.find(":")
            if colon == 0:
                continue  # Comment (often a keep-alive); ignored per spec.
            if colon < 0:
                # "the whole line as the field name, and the empty string as the
                # field value".
                field, value = line, ""
            else:
                field = line[:colon]
                value = line[colon + 1 :]
                if value[:1] == " ":
                    value = value[1:]
            if field == "data":  # Only reachable as a bare "data" line.
                data.append(value)
            elif field == "event":
                event_type = value
            elif field == "id":
                # An id containing NULL is ignored entirely; an empty one is
                # valid and resets the last event ID to "".
                if "\x00" not in value:
                    last_id = value
            elif field == "retry" and value.isascii() and value.isdigit():
                # "If the field value consists of only ASCII digits"; anything
                # else (sign, space, "1.5", non-ASCII digits) is ignored.
                retry_in_event = self._retry = int(value)
            # Any other field name is ignored, as the spec requires.
        self._event_type = event_type
        self._last_id = last_id
        self._retry_in_event = retry_in_event
        return events


DONE = b"data: [DONE]\n\n"
"""OpenAI's end-of-stream sentinel event."""


def _split_lines(data: bytes) -> list[bytes]:
    """Split on CRLF, CR or LF exactly as the decoder does (never splitlines)."""
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return data.split(b"\n")


def _field_value(name: str, value: str) -> bytes:
    """Encode a single-line field value, refusing what would corrupt the stream."""
    if "\n" in value or "\r" in value:
        # A line end would end the field and inject whatever follows as new
        # fields or events.
        raise ValueError(f"SSE {name} must not contain CR or LF: {value!r}")
    if name == "id" and "\x00" in value:
        raise ValueError("SSE id must not contain U+0000 (receivers ignore it, §9.2.6)")
    return value.encode()


def encode_event(
    data: str | bytes,
    event: str | None = None,
    id: str | None = None,
    *,
    retry: int | None = None,
) -> bytes:
    """Encode one event, terminated by a blank line.

    ``data`` is split at CRLF, CR and LF into one ``data:`` line each, so the
    decoder yields it back with line ends normalised to LF. An ``event:`` line
    comes first if given, then ``id:`` and ``retry:`` lines. ``event`` and
    ``id`` must not contain CR or LF (nor ``id`` U+0000): :class:`ValueError`.
    """
    raw = data.encode() if isinstance(data, str) else data
    parts: list[bytes] = []
    if event is not None:
        parts.append(b"event: " + _field_value("event", event) + b"\n")
    if id is not None:
        parts.append(b"id: " + _field_value("id", id) + b"\n")
    if retry is not None:
        if retry < 0:
            raise ValueError(f"SSE retry must be non-negative: {retry}")
        parts.append(b"retry: %d\n" % retry)
    # Always write the space after the colon: the decoder strips exactly one, so
    # a payload line that itself starts with a space survives the round trip.
    for line in _split_lines(raw):
        parts.append(b"data: " + line + b"\n")
    parts.append(b"\n")
    return b"".join(parts)


@functools.lru_cache(maxsize=256)
def _json_event_prefix(event: str) -> bytes:
    # Event names on a given stream come from a small fixed set, so validating
    # and encoding each once keeps encode_json_event to a single join.
    return b"event: " + _field_value("event", event) + b"\ndata: "


def encode_json_event(payload: bytes, event: str | None = None) -> bytes:
    """Encode a compact JSON payload as one event, as fast as possible.

    ``payload`` must not contain CR or LF, which holds for compact JSON (JSON
    escapes control characters inside strings); it is not checked. Use
    :func:`encode_event` for arbitrary text.
    """
    if event is None:
        return b"".join((b"data: ", payload, b"\n\n"))
    return b"".join((_json_event_prefix(event), payload, b"\n\n"))


def comment(text: str = "") -> bytes:
    """Encode a comment, e.g. a keep-alive: ``: text`` followed by a blank line.

    Receivers ignore comments (§9.2.6). Multi-line text becomes one comment line
    per line. The trailing blank line dispatches nothing (the data buffer is
    empty), but it does end any event in progress, so send comments only
    between events.
    """
    lines = _split_lines(text.encode())
    return b"".join([b": " + line + b"\n" for line in lines]) + b"\n"
