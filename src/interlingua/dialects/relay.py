"""Checks on a stream relayed byte for byte (the passthrough path).

The passthrough path forwards an upstream's SSE bytes without translating them, but it
must not relay a broken stream as a good one: the official SDKs return a stream cut
before its end as if it were complete (no error, no finish reason), and raise a bare
``JSONDecodeError`` on an event whose data is not JSON. A :class:`RelayCheck` sits on the
relayed bytes and:

* passes on only **whole events** (up to the last blank line), holding back a partial
  one until the rest arrives, so that an error event the gateway appends after a fault is
  never glued onto half an event (WHATWG HTML 9.2.6: an event ends at a blank line);
* parses each event's data as JSON (what the SDK will do) and stops at the first that is
  not, with ``error`` set to a 502 :class:`~interlingua.errors.UpstreamError`;
* knows the dialect's end (``[DONE]`` / ``message_stop``, or an in-band error event) and,
  at :meth:`finish`, says whether a stream that stopped without it was cut short; the
  lenient rule matches the translating decoders' ``flush``: a stream that already said
  why it stopped (a ``finish_reason``, a ``message_delta``) may skip the final marker.

Line endings: CR and CRLF are rewritten to LF (the same events to any SSE reader), so the
framing rules only ever look for ``\\n``. Costs one ``split`` and one ``orjson.loads``
per event; the bytes of whole events are relayed unchanged otherwise.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..errors import UpstreamError

__all__ = ["MAX_EVENT_BYTES", "AnthropicRelayCheck", "OpenAIChatRelayCheck", "RelayCheck"]

#: the largest partial event held back (a stream that never ends an event would
#: otherwise be buffered without bound); far above any real event
MAX_EVENT_BYTES = 16 * 1024 * 1024


class RelayCheck:
    """Whole, well-formed events of one relayed stream; see the module docstring.

    ``feed(chunk)`` returns the bytes that may be relayed now; once ``error`` is set it
    returns nothing more. ``finish()`` at the end of input returns the error owed, if any.
    """

    __slots__ = ("_held", "ended", "error", "said_why")

    def __init__(self) -> None:
        self._held = b""
        #: the dialect's end (or an in-band error) was seen
        self.ended = False
        #: the stream said why it stops (finish reason / message_delta)
        self.said_why = False
        #: the fault that stopped the relay, if any
        self.error: UpstreamError | None = None

    def feed(self, chunk: bytes) -> bytes:
        """The whole events among the bytes held so far plus ``chunk``."""
        if self.error is not None:
            return b""
        data = self._held + chunk if self._held else chunk
        if b"\r" in data:
            data = _to_lf(data)
        end = data.rfind(b"\n\n") + 2
        if end < 2 or self.ended:
            # Nothing whole yet; or past the end, where nothing is checked any more.
            if self.ended:
                self._held = b""
                return data
            if len(data) > MAX_EVENT_BYTES:
                self._held = b""
                self.error = UpstreamError(
                    f"upstream sent a stream event larger than {MAX_EVENT_BYTES} bytes",
                    status=502,
                )
                return b""
            self._held = data
            return b""
        self._held = data[end:]
        whole = data[:end]
        good = 0
        for event in whole[:-2].split(b"\n\n"):
            if not self._check(event):
                return whole[:good]
            good += len(event) + 2
            if self.ended:
                self._held = b""
                return data  # the rest (normally nothing) goes out unchecked
        return whole

    def drop(self) -> None:
        """Forget a held partial event (the relay is over)."""
        self._held = b""

    def finish(self) -> UpstreamError | None:
        """At the end of input: the error owed (a fault, or a stream cut short)."""
        if self.error is None and not self.ended:
            if self._held.strip():
                self.error = UpstreamError(
                    "upstream stream ended in the middle of an event", status=502
                )
            elif not self.said_why:
                self.error = UpstreamError("upstream closed the stream before it ended", status=502)
        return self.error

    def _check(self, event: bytes) -> bool:
        name = b""
        data: bytes | None = None
        for line in event.split(b"\n"):
            if line[:5] == b"data:":
                value = line[6:] if line[5:6] == b" " else line[5:]
                data = value if data is None else data + b"\n" + value
            elif line[:6] == b"event:":
                name = line[6:].strip()
        if data is None or not data.strip():
            # A comment or an empty data line (keep-alives): nothing a reader acts on.
            return True
        if self._end_marker(data):
            self.ended = True
            return True
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            payload = None
        if not isinstance(payload, dict):
            self.error = UpstreamError(
                "upstream sent a stream event that is not a JSON object", status=502
            )
            return False
        self._inspect(name, payload)
        return True

    def _end_marker(self, data: bytes) -> bool:
        """Whether ``data`` is the dialect's literal end of stream (not JSON)."""
        return False

    def _inspect(self, name: bytes, payload: dict[str, Any]) -> None:
        """Note the dialect's end, in-band errors and stop reasons in one event."""
        raise NotImplementedError


class OpenAIChatRelayCheck(RelayCheck):
    """Chat Completions chunks: ``data: [DONE]`` ends; an ``error`` payload ends too."""

    __slots__ = ()

    def _end_marker(self, data: bytes) -> bool:
        return data == b"[DONE]" or (data[:1] != b"{" and data.strip() == b"[DONE]")

    def _inspect(self, name: bytes, payload: dict[str, Any]) -> None:
        if payload.get("error"):
            self.ended = True
            return
        choices = payload.get("choices")
        if not self.said_why and isinstance(choices, list):
            self.said_why = any(
                isinstance(choice, dict) and choice.get("finish_reason") for choice in choices
            )


class AnthropicRelayCheck(RelayCheck):
    """Messages events: ``message_stop`` or ``error`` ends; ``message_delta`` says why."""

    __slots__ = ()

    def _inspect(self, name: bytes, payload: dict[str, Any]) -> None:
        kind = payload.get("type")
        if kind is None:
            kind = name.decode("latin-1")
        if kind in ("message_stop", "error"):
            self.ended = True
        elif kind == "message_delta":
            self.said_why = True


def _to_lf(data: bytes) -> bytes:
    # A CR at the very end may be the first half of a CRLF split across reads: it becomes
    # LF now, and an LF starting the next read would then add a blank line. Hold it back
    # instead, unless it already ends a blank line.
    tail = b""
    if data.endswith(b"\r"):
        data, tail = data[:-1], b"\r"
    data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    return data + tail if tail else data
