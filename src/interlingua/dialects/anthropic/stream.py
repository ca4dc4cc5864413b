"""Anthropic Messages streams <-> neutral stream events.

Wire facts: docs/protocols.md, "Messages: stream" and "Stream translation".

:class:`AnthropicStreamDecoder` reads an Anthropic upstream's SSE events;
:class:`AnthropicStreamEncoder` writes the stream an Anthropic client expects, from
neutral events of any upstream.

Anthropic streams one content block at a time, with indices 0, 1, 2... in order. Neutral
streams may interleave several open blocks (an OpenAI upstream's parallel tool calls), so
the encoder keeps the block it has started as *current* and buffers the events of later
blocks, replaying them in order when the current one stops. Anthropic indices are
assigned in emission order. Tool-call arguments are sent whole, in one
``input_json_delta`` at the block's end (see :class:`AnthropicStreamEncoder`).
"""

from __future__ import annotations

from typing import Any

import orjson

from ...core import (
    ArgumentsDelta,
    BlockStart,
    BlockStop,
    ReasoningDelta,
    ReasoningPart,
    Request,
    SignatureDelta,
    StopReason,
    StreamEnd,
    StreamError,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    ToolCallPart,
    UnknownPart,
    Usage,
)
from ...errors import InterlinguaError, MalformedToolCallError, UpstreamError
from ...sse import SSEEvent, encode_json_event
from .._common import call_input, call_name, random_id, sanitize_tool_id
from .._sequence import OneAtATime
from ._custom import custom_names, unwrap, wrap
from .errors import error_from_type, render_stream_error
from .render import parse_arguments
from .request import NAME
from .response import message_id, stop_reason_from_wire, usage_from_wire, usage_to_wire

_MESSAGE_STOP = encode_json_event(b'{"type":"message_stop"}', "message_stop")
# The real API writes the ping payload with a space; clients treat it as opaque.
_PING = encode_json_event(b'{"type": "ping"}', "ping")
_STOP_TEMPLATE = b'event: content_block_stop\ndata: {"type":"content_block_stop","index":%d}\n\n'
_DELTA_TEMPLATE = (
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":%d,"delta":{"type":"'
)
_TEXT = b'text_delta","text":'
_THINKING = b'thinking_delta","thinking":'
_SIGNATURE = b'signature_delta","signature":'
_JSON = b'input_json_delta","partial_json":'
_CLOSE = b"}}\n\n"


class AnthropicStreamDecoder:
    """Anthropic upstream SSE events -> neutral events (one decoder per stream).

    Server-tool blocks (``server_tool_use``, ``web_search_tool_result``...) are held
    until their ``content_block_stop`` and then emitted complete, as an
    ``UnknownPart("anthropic", raw)`` whose ``input`` has the streamed JSON folded in.
    ``citations_delta`` is ignored (citations have no neutral form).

    A ``tool_use`` of a tool the request declared custom (offered as a function of one
    string, :mod:`._custom`) opens a custom call, but its ``input_json_delta`` fragments
    of ``{"input": "..."}`` are held: the raw text is known only once the JSON is
    complete, so it comes as one ``ArgumentsDelta`` just before the ``BlockStop``.

    A ``tool_use`` no client could use (no name, an ``input`` or ``partial_json`` of
    the wrong type) ends the stream with a :class:`MalformedToolCallError`.
    """

    def __init__(self, request: Request) -> None:
        #: the JSON of the event fed last (see StreamDecoder)
        self.last: Any = None
        self._request = request
        self._custom = custom_names(request)
        self._custom_json: dict[int, list[str]] = {}  # open custom calls' JSON fragments
        self._call_ids: dict[int, Any] = {}  # tool_use blocks' ids, to name a faulty one
        self._started = False
        self._ended = False
        self._next = 0
        self._index: dict[int, int] = {}
        self._open: list[int] = []
        self._held: dict[int, dict[str, Any]] = {}
        self._held_json: dict[int, list[str]] = {}
        self._usage: dict[str, Any] = {}
        self._saw_delta = False
        self._stop_reason = StopReason.END_TURN
        self._stop_sequence: str | None = None

    def feed(self, event: SSEEvent) -> list[StreamEvent]:
        """One SSE event -> zero or more neutral events."""
        if self._ended:
            return []
        if not event.data.strip():
            return []  # an empty data line (dispatched per WHATWG): a keep-alive at most
        try:
            data = self.last = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):  # the SDK would fail on it too: never skip it
            return self._fail(
                UpstreamError("upstream sent a stream event that is not JSON", status=502)
            )
        kind = data.get("type") or event.event
        if kind == "content_block_delta":
            return self._delta(data)
        handler = _HANDLERS.get(kind)
        if handler is None:
            # ping, and event types newer than this code: ignored (docs/protocols.md,
            # "Messages: stream")
            return []
        return handler(self, data)

    def flush(self) -> list[StreamEvent]:
        """End of input: the end owed, or an error if the stream was cut short."""
        if self._ended or not self._started:
            return []
        if self._saw_delta:
            return self._end({})
        return self._fail(UpstreamError("upstream stream ended early"))

    def _fail(self, error: InterlinguaError) -> list[StreamEvent]:
        self._ended = True
        return [StreamError(error)]

    def _ensure_started(self, out: list[StreamEvent]) -> None:
        if not self._started:  # content before message_start: be lenient, invent one
            self._started = True
            out.append(StreamStart(random_id("msg_"), self._request.model))

    def _message_start(self, data: dict[str, Any]) -> list[StreamEvent]:
        if self._started:
            return []
        self._started = True
        message = data.get("message")
        message = message if isinstance(message, dict) else {}
        usage = message.get("usage")
        self._usage = dict(usage) if isinstance(usage, dict) else {}
        return [
            StreamStart(
                id=str(message.get("id") or random_id("msg_")),
                model=str(message.get("model") or self._request.model),
                usage=usage_from_wire(self._usage),
            )
        ]

    def _block_start(self, data: dict[str, Any]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        self._ensure_started(out)
        wire_index, block = data.get("index"), data.get("content_block")
        if not isinstance(wire_index, int) or not isinstance(block, dict):
            return out
        index = self._index[wire_index] = self._next
        self._next += 1
        kind = block.get("type")
        part: TextPart | ReasoningPart | ToolCallPart
        if kind == "text":
            part = TextPart(str(block.get("text") or ""))
        elif kind == "thinking":
            part = ReasoningPart(str(block.get("thinking") or ""), block.get("signature") or None)
        elif kind == "redacted_thinking":
            part = ReasoningPart(redacted=str(block.get("data") or ""))
        elif kind == "tool_use":
            call_id = block.get("id")
            where = f"content[{wire_index}]"
            try:  # a call no client could use ends the stream (its class docstring)
                name = call_name(block.get("name"), where, call_id)
                # always {} at start; the JSON follows in deltas
                tool_input = call_input(block.get("input"), where, call_id)
            except MalformedToolCallError as exc:
                return out + self._fail(exc)
            self._call_ids[wire_index] = call_id
            arguments = orjson.dumps(tool_input).decode() if tool_input else ""
            if name in self._custom:
                self._custom_json[wire_index] = [arguments]
                part = ToolCallPart(str(call_id or ""), name, kind="custom")
            else:
                part = ToolCallPart(str(call_id or ""), name, arguments)
        else:
            self._held[wire_index] = dict(block)
            self._held_json[wire_index] = []
            return out
        self._open.append(wire_index)
        out.append(BlockStart(index, part))
        return out

    def _delta(self, data: dict[str, Any]) -> list[StreamEvent]:
        wire_index, delta = data.get("index"), data.get("delta")
        if not isinstance(delta, dict) or not isinstance(wire_index, int):
            return []
        kind = delta.get("type")
        if wire_index in self._held:
            if kind == "input_json_delta":
                self._held_json[wire_index].append(str(delta.get("partial_json") or ""))
            return []
        index = self._index.get(wire_index)
        if index is None:
            return []
        if kind == "text_delta":
            text = delta.get("text")
            return [TextDelta(index, text)] if isinstance(text, str) and text else []
        if kind == "input_json_delta":
            fragment = delta.get("partial_json")
            # The first fragment is often "" (docs/protocols.md, "Messages: stream").
            if not isinstance(fragment, str) or not fragment:
                if fragment is None or fragment == "":
                    return []
                where, call_id = f"content[{wire_index}]", self._call_ids.get(wire_index)
                error = MalformedToolCallError("partial_json is not a string", where, call_id)
                return self._fail(error)
            if self._custom_json and wire_index in self._custom_json:
                self._custom_json[wire_index].append(fragment)  # unwrapped at the stop
                return []
            return [ArgumentsDelta(index, fragment)]
        if kind == "thinking_delta":
            text = delta.get("thinking")
            return [ReasoningDelta(index, text)] if isinstance(text, str) and text else []
        if kind == "signature_delta":
            sig = delta.get("signature")
            return [SignatureDelta(index, sig)] if isinstance(sig, str) and sig else []
        return []  # citations_delta and future delta types

    def _block_stop(self, data: dict[str, Any]) -> list[StreamEvent]:
        wire_index = data.get("index")
        if not isinstance(wire_index, int):
            return []
        held = self._held.pop(wire_index, None)
        index = self._index.get(wire_index)
        if index is None:
            return []
        if held is not None:
            fragments = "".join(self._held_json.pop(wire_index))
            if fragments:
                try:
                    held["input"] = orjson.loads(fragments)
                except orjson.JSONDecodeError:
                    held["input"] = {"raw_arguments": fragments}
            return [BlockStart(index, UnknownPart(NAME, held)), BlockStop(index)]
        if wire_index not in self._open:
            return []
        self._open.remove(wire_index)
        custom = self._custom_json.pop(wire_index, None) if self._custom_json else None
        if custom is not None:
            text = unwrap("".join(custom))
            return [ArgumentsDelta(index, text), BlockStop(index)] if text else [BlockStop(index)]
        return [BlockStop(index)]

    def _message_delta(self, data: dict[str, Any]) -> list[StreamEvent]:
        self._saw_delta = True
        delta = data.get("delta")
        if isinstance(delta, dict):
            if delta.get("stop_reason") is not None:
                self._stop_reason = stop_reason_from_wire(delta.get("stop_reason"))
            sequence = delta.get("stop_sequence")
            self._stop_sequence = sequence if isinstance(sequence, str) else None
        usage = data.get("usage")
        if isinstance(usage, dict):
            # Cumulative counts (docs/protocols.md, "Messages: stream"): a value here
            # replaces message_start's; keys left out (often the input counts) keep what
            # message_start said.
            self._usage.update({k: v for k, v in usage.items() if v is not None})
        return []

    def _message_stop(self, data: dict[str, Any]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        self._ensure_started(out)
        return out + self._end(data)

    def _end(self, data: dict[str, Any]) -> list[StreamEvent]:
        self._ended = True
        out: list[StreamEvent] = [BlockStop(self._index[w]) for w in self._open]
        self._open.clear()
        out.append(StreamEnd(self._stop_reason, self._stop_sequence, usage_from_wire(self._usage)))
        return out

    def _error(self, data: dict[str, Any]) -> list[StreamEvent]:
        error = data.get("error")
        error = error if isinstance(error, dict) else {}
        message = error.get("message")
        exc = error_from_type(
            str(error.get("type") or ""),
            message if isinstance(message, str) and message else "upstream stream error",
            body=data,
        )
        self._ended = True
        return [StreamError(exc)]


_HANDLERS = {
    "message_start": AnthropicStreamDecoder._message_start,
    "content_block_start": AnthropicStreamDecoder._block_start,
    "content_block_stop": AnthropicStreamDecoder._block_stop,
    "message_delta": AnthropicStreamDecoder._message_delta,
    "message_stop": AnthropicStreamDecoder._message_stop,
    "error": AnthropicStreamDecoder._error,
}


def _delta(prefix: bytes, kind: bytes, value: str) -> bytes:
    return b"".join((prefix, kind, orjson.dumps(value), _CLOSE))


def _start_event(index: int, block: dict[str, Any]) -> bytes:
    payload = orjson.dumps({"type": "content_block_start", "index": index, "content_block": block})
    return encode_json_event(payload, "content_block_start")


def _initial_block(part: Any) -> tuple[dict[str, Any], list[tuple[bytes, str]]] | None:
    """Anthropic's initial ``content_block`` shape for a neutral block, plus the deltas
    that carry any content the neutral start already had (a tool call's initial
    arguments are buffered instead, like the rest). None: no Anthropic form."""
    if isinstance(part, TextPart):
        return {"type": "text", "text": ""}, [(_TEXT, part.text)]
    if isinstance(part, ToolCallPart):
        block: dict[str, Any] = {
            "type": "tool_use",
            "id": sanitize_tool_id(part.id),
            "name": part.name,
            "input": {},
        }
        return block, []
    if isinstance(part, ReasoningPart):
        if part.redacted is not None:
            return {"type": "redacted_thinking", "data": part.redacted}, []
        # An unsigned block (OpenAI-side reasoning) keeps signature "": the SDK accepts
        # it, and no signature_delta is invented.
        block = {"type": "thinking", "thinking": "", "signature": ""}
        return block, [(_THINKING, part.text), (_SIGNATURE, part.signature or "")]
    if isinstance(part, UnknownPart) and part.dialect == NAME:
        return part.raw, []  # server blocks arrive complete
    return None


def tool_input_json(arguments: str) -> str | None:
    """The one ``partial_json`` owed for a tool call's complete arguments (None: none).

    It is the JSON of exactly the ``input`` that :func:`.response.render_block` puts in a
    non-stream answer: a valid JSON object as it came (``""`` and ``{}`` need no delta,
    the block's initial ``input`` is already ``{}``), anything else wrapped as
    ``{"raw_arguments": "<text>"}``.

    >>> tool_input_json("[1]"), tool_input_json(" "), tool_input_json('{"a": 1}')
    ('{"raw_arguments":"[1]"}', None, '{"a": 1}')
    """
    tool_input = parse_arguments(arguments)
    if tool_input is None:
        return orjson.dumps({"raw_arguments": arguments}).decode()
    return arguments if tool_input else None


class AnthropicStreamEncoder(OneAtATime):
    """Neutral events -> the bytes of an Anthropic Messages SSE stream, chunk by chunk.

    Always yields a valid stream: ``message_start`` first (invented if the upstream
    ended or failed before saying anything), blocks one at a time with indices in
    order, then ``message_delta`` + ``message_stop``, or an ``event: error``.

    Tool-call arguments are **not** streamed incrementally: a ``tool_use`` block's
    fragments are buffered until its ``BlockStop`` and then sent as ONE
    ``input_json_delta`` holding :func:`tool_input_json`. Correctness wins over
    incremental argument streaming: an OpenAI-compatible upstream may produce arguments
    that are not a JSON object, and relayed fragment by fragment they make the official
    SDK raise "Unable to parse tool parameter JSON" at the end of the block; sent whole,
    the stream folds to exactly the ``input`` the non-stream answer has
    (``{"raw_arguments": ...}`` for broken JSON). Clients lose only the progressive
    display of arguments; text and thinking still stream delta by delta.
    """

    def __init__(self, request: Request) -> None:
        super().__init__()
        self._request = request
        self._started = False
        self._done = False
        self._pinged = False
        self._start_usage: Usage | None = None
        self._next_wire = 0
        self._prefix = b""  # content_block_delta prefix of the current block
        self._stop = b""  # content_block_stop of the current block
        self._args: list[str] | None = None  # argument fragments of a current tool_use
        self._custom = False  # the current tool_use is a custom call (input wrapped)

    def ping(self) -> bytes:
        """A keep-alive: Anthropic's own ``event: ping``."""
        return _PING

    def encode(self, event: StreamEvent) -> bytes:
        """The bytes owed for one neutral event (``b""`` while buffering)."""
        if self._done:
            return b""
        out: list[bytes] = []
        if isinstance(event, StreamStart):
            self._message_start(event, out)
            return b"".join(out)
        if not self._started:
            self._message_start(StreamStart(random_id("msg_"), self._request.model), out)
        if isinstance(event, BlockStart):
            self._start_block(event, out)
        elif isinstance(event, StreamEnd):
            self._finish(event, out)
        elif isinstance(event, StreamError):
            self._done = True
            out.append(render_stream_error(event.error))
        else:
            self._block_event(event, event.index, out)
        return b"".join(out)

    def _message_start(self, event: StreamStart, out: list[bytes]) -> None:
        if self._started:
            return
        self._started = True
        self._start_usage = event.usage
        message: dict[str, Any] = {
            "id": message_id(event.id),
            "type": "message",
            "role": "assistant",
            "model": self._request.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            # Before real counts exist (OpenAI upstreams) this is all zeros
            # (docs/protocols.md, "Stream translation").
            "usage": usage_to_wire(event.usage or Usage()),
        }
        payload = orjson.dumps({"type": "message_start", "message": message})
        out.append(encode_json_event(payload, "message_start"))

    def _open(self, event: BlockStart, out: list[bytes]) -> None:
        initial = _initial_block(event.part)
        if initial is None:
            return  # another dialect's unknown block: nothing to say in Anthropic's terms
        block, follow = initial
        wire = self._next_wire
        self._next_wire += 1
        self._current = event.index
        self._prefix = _DELTA_TEMPLATE % wire
        self._stop = _STOP_TEMPLATE % wire
        if isinstance(event.part, ToolCallPart):
            self._args = [event.part.arguments] if event.part.arguments else []
            self._custom = event.part.kind == "custom"
        out.append(_start_event(wire, block))
        if not self._pinged:  # the real API pings right after the first block start
            self._pinged = True
            out.append(_PING)
        out.extend(_delta(self._prefix, kind, value) for kind, value in follow if value)

    def _in_block(self, event: StreamEvent, out: list[bytes]) -> None:
        """An event of the current block."""
        if isinstance(event, TextDelta):
            if event.text:
                out.append(_delta(self._prefix, _TEXT, event.text))
        elif isinstance(event, ArgumentsDelta):
            if event.json and self._args is not None:
                self._args.append(event.json)  # sent whole at BlockStop (class docstring)
        elif isinstance(event, ReasoningDelta):
            if event.text:
                out.append(_delta(self._prefix, _THINKING, event.text))
        elif isinstance(event, SignatureDelta):
            if event.signature:
                out.append(_delta(self._prefix, _SIGNATURE, event.signature))
        elif isinstance(event, BlockStop):
            self._close(out)

    def _close(self, out: list[bytes]) -> None:
        """Stop the current block, sending a tool call's buffered arguments first."""
        if self._args is not None:
            joined = "".join(self._args)
            # a custom call's raw text travels as the one string parameter it was offered with
            partial = (
                orjson.dumps(wrap(joined)).decode() if self._custom else tool_input_json(joined)
            )
            if partial is not None:
                out.append(_delta(self._prefix, _JSON, partial))
            self._args = None
        out.append(self._stop)
        self._current = None

    def _finish(self, event: StreamEnd, out: list[bytes]) -> None:
        self._done = True
        if self._current is not None:
            self._close(out)
        self._drain(out, close_all=True)
        usage = event.usage
        start = self._start_usage
        if usage.input_tokens == 0 and start is not None and start.input_tokens:
            # Same rule as fold(): an end without input counts keeps the start's.
            usage = Usage(
                input_tokens=start.input_tokens,
                output_tokens=usage.output_tokens,
                cache_read_tokens=start.cache_read_tokens,
                cache_write_tokens=start.cache_write_tokens,
                reasoning_tokens=usage.reasoning_tokens,
            )
        stop_sequence = (
            event.stop_sequence if event.stop_reason == StopReason.STOP_SEQUENCE else None
        )
        payload = orjson.dumps(
            {
                "type": "message_delta",
                "delta": {"stop_reason": str(event.stop_reason), "stop_sequence": stop_sequence},
                "usage": usage_to_wire(usage),
            }
        )
        out.append(encode_json_event(payload, "message_delta"))
        out.append(_MESSAGE_STOP)
