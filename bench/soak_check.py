"""What the soak asks of every answer, as pure functions: no sockets, no event loop.

A request is a :class:`Call` (client dialect, upstream dialect, stream or not, the fault
the mock upstream was told to inject, and whether the client hangs up). What came back
is summed up as a :class:`Seen`; :func:`classify` says which :data:`OUTCOMES` class it is.

Expected outcomes are ``answer`` (the whole echoed text, properly ended), ``typed_error``
(an error the client's SDK turns into an API error: a non-2xx status with the dialect's
error body, or the dialect's in-band error event ending a stream; only for a request
whose upstream was told to fail) and ``hangup`` (the client left on purpose). Anything
else is ``unexpected``, with a reason: wrong content, an error nobody injected, a stream
that ends "cleanly" short of its end, an event whose data is not JSON (the SDK would
raise ``JSONDecodeError``), a transport error, a hang.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

OUTCOMES = ("answer", "typed_error", "hangup", "unexpected")


@dataclass(frozen=True, slots=True)
class Call:
    """One request of the soak's mix."""

    client: str  # "openai" | "anthropic": the dialect the client speaks
    upstream: str  # "openai" | "anthropic": the dialect of the upstream behind the model
    stream: bool
    fault: str  # "ok" or one of bench.fault_upstream.FAULTS, or "refused"
    hangup: bool = False  # the client closes after the first chunk of a stream

    @property
    def passthrough(self) -> bool:
        """Same dialect both sides: the gateway's fast path."""
        return self.client == self.upstream

    @property
    def label(self) -> str:
        """A short name of the request's class, for the report's tables."""
        path = "pass" if self.passthrough else "xlat"
        mode = "stream" if self.stream else "json"
        short = {"openai": "oai", "anthropic": "ant"}
        return f"{short[self.client]}→{short[self.upstream]} {path} {mode}"


@dataclass(slots=True)
class Seen:
    """What the client saw. ``body`` for a non-stream answer; ``events`` for a stream."""

    status: int = 0
    content_type: str = ""
    body: bytes = b""
    events: list[tuple[str, str]] = field(default_factory=list)  # (event name, data)
    transport_error: str = ""  # the exception, if reading failed
    timed_out: bool = False  # the soak's own deadline passed: a hang


def _json(data: bytes | str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def is_error_body(client: str, data: Any) -> bool:
    """Whether ``data`` is the client dialect's error object (what its SDK raises from)."""
    if not isinstance(data, dict):
        return False
    if client == "anthropic":
        error = data.get("error")
        return data.get("type") == "error" and isinstance(error, dict) and "type" in error
    error = data.get("error")
    # OpenAI's error object has no top-level "type" (Anthropic's has "type": "error").
    return "type" not in data and isinstance(error, dict) and isinstance(error.get("message"), str)


def answer_of(client: str, data: Any) -> str | None:
    """The text of a non-stream answer in the client's dialect (None if not one)."""
    try:
        if client == "anthropic":
            return "".join(b["text"] for b in data["content"] if b["type"] == "text")
        content = data["choices"][0]["message"]["content"]
        return content if isinstance(content, str) else None
    except (KeyError, IndexError, TypeError):
        return None


def classify(call: Call, expected: str, seen: Seen) -> tuple[str, str]:
    """``(outcome, reason)`` for what the client saw; ``reason`` is "" unless unexpected."""
    if seen.timed_out:
        return "unexpected", "hang (no end within the deadline)"
    if call.hangup and seen.status == 200 and call.stream:
        return "hangup", ""
    if seen.transport_error:
        return "unexpected", f"transport error: {seen.transport_error}"
    if seen.status != 200:
        return _classify_status(call, seen)
    if call.stream:
        return _classify_stream(call, expected, seen)
    if call.fault != "ok":
        return "unexpected", f"200 for injected {call.fault}"
    text = answer_of(call.client, _json(seen.body))
    if text != expected:
        return "unexpected", "wrong content" if text is not None else "not an answer"
    return "answer", ""


def _classify_status(call: Call, seen: Seen) -> tuple[str, str]:
    if not is_error_body(call.client, _json(seen.body)):
        return "unexpected", f"{seen.status} without a {call.client} error body"
    if call.fault == "ok":
        return "unexpected", f"{seen.status} with no injected fault"
    return "typed_error", ""


def _classify_stream(call: Call, expected: str, seen: Seen) -> tuple[str, str]:
    if "text/event-stream" not in seen.content_type:
        return "unexpected", f"200 stream answered as {seen.content_type or 'no content type'}"
    text: list[str] = []
    for name, data in seen.events:
        if data == "[DONE]" and call.client == "openai":
            return _ended(call, expected, "".join(text))
        event = _json(data)
        if event is None:
            return "unexpected", "event data is not JSON"
        if is_error_body(call.client, event) or name == "error":
            if call.fault == "ok":
                return "unexpected", "in-band error with no injected fault"
            if not expected.startswith("".join(text)):
                return "unexpected", "wrong content before the error"
            return "typed_error", ""
        text.append(_delta_text(call.client, event))
        if call.client == "anthropic" and event.get("type") == "message_stop":
            return _ended(call, expected, "".join(text))
    return "unexpected", "stream ended without its end event or an error"


def _ended(call: Call, expected: str, text: str) -> tuple[str, str]:
    if call.fault != "ok":
        return "unexpected", f"stream ended normally for injected {call.fault}"
    if text != expected:
        return "unexpected", "wrong content"
    return "answer", ""


def _delta_text(client: str, event: Any) -> str:
    try:
        if client == "anthropic":
            delta = event.get("delta") or {}
            return str(delta.get("text", "")) if event.get("type") == "content_block_delta" else ""
        choices = event.get("choices") or []
        return "".join(str((c.get("delta") or {}).get("content") or "") for c in choices)
    except AttributeError:
        return ""


def parse_sse(buffer: bytes) -> tuple[list[tuple[str, str]], bytes]:
    """Complete events in ``buffer`` as (event name, data), and the unfinished rest.

    Enough of the SSE format for what gateways send (``event:``, ``data:``, comments,
    ``\\n`` or ``\\r\\n`` line ends); multi-line data is joined with ``\\n``.
    """
    events: list[tuple[str, str]] = []
    text = buffer.replace(b"\r\n", b"\n")
    *blocks, rest = text.split(b"\n\n")
    for block in blocks:
        name, data = "", []
        for line in block.decode("utf-8", "replace").split("\n"):
            if line.startswith(":") or not line:
                continue
            key, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if key == "event":
                name = value
            elif key == "data":
                data.append(value)
        if data:
            events.append((name, "\n".join(data)))
    return events, rest
