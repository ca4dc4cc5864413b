"""``chat.completion.chunk`` streams <-> neutral stream events.

Wire facts: docs/protocols.md, "Chat Completions: stream",
"Chat Completions: server extensions" and "Stream translation".

:class:`OpenAIChatStreamDecoder` reads an upstream's chunks. Block indices are ours: a
reasoning run, a text run and every tool call (keyed by the upstream's ``index``, which
may interleave) each get the next neutral index on first sight. The finish is held until
``[DONE]`` (or the end of input) because the usage chunk comes after it.

:class:`OpenAIChatStreamEncoder` writes chunks for a client, one per event, never
buffered. Each chunk is a precomputed prefix (everything up to ``"delta":``), the
delta's JSON and a constant suffix.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from ...core import (
    ArgumentsDelta,
    AudioDelta,
    AudioPart,
    BlockStart,
    BlockStop,
    ReasoningDelta,
    ReasoningPart,
    Request,
    SignatureDelta,
    StreamEnd,
    StreamError,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    TokenLogprob,
    ToolCallPart,
    Usage,
)
from ...core.tokens import estimate_request_tokens
from ...errors import MalformedToolCallError, UpstreamError
from ...sse import DONE, SSEEvent
from .._common import call_arguments, call_name, random_id
from ._reasoning import detail_pieces
from .errors import error_from_payload, render_stream_error
from .response import (
    FINISH_REASONS,
    completion_id,
    estimated_usage,
    parse_logprobs,
    parse_usage,
    render_logprobs,
    render_usage,
    stop_reason_for,
)

__all__ = ["OpenAIChatStreamDecoder", "OpenAIChatStreamEncoder"]


#: how an upstream tool call is told apart: its ``index``, or ``("id", call id)`` from
#: servers that omit the index
_ToolKey = int | tuple[str, Any] | None

#: the head of a function call's argument delta (``% k``, its ``tool_calls`` index); a
#: custom call's delta carries ``"custom":{"input":...}`` instead, the shape of its
#: message form (the SDK's chunk types model function calls only)
_ARGUMENTS = b'{"tool_calls":[{"index":%d,"function":{"arguments":'
_FIRST_ARGUMENTS = _ARGUMENTS % 0


class OpenAIChatStreamDecoder:
    """Upstream Chat SSE events -> neutral events. See the module docstring.

    Tolerates (docs/protocols.md, "Chat Completions: stream" and
    "Chat Completions: server extensions"): ``role`` repeated in every delta,
    ``finish_reason`` together with a non-empty delta, ``usage: null`` on every chunk, a
    usage chunk with ``choices`` null or missing, reasoning as ``reasoning_content``,
    ``reasoning`` or OpenRouter's ``reasoning_details``, tool-call deltas without
    ``index``, and keep-alive comments (ignored). An event whose data is not a JSON
    object is an error: the SDK reading the stream directly would fail on it too.
    """

    __slots__ = (
        "_audio",
        "_done",
        "_finish",
        "_generated",
        "_last_tool",
        "_matched_stop",
        "_next",
        "_open",
        "_plain_reasoning",
        "_reasoning",
        "_refusal",
        "_request",
        "_started",
        "_stops",
        "_text",
        "_tool_ids",
        "_tools",
        "_usage",
        "last",
    )

    def __init__(self, request: Request) -> None:
        #: the JSON of the event fed last (see StreamDecoder)
        self.last: Any = None
        self._request = request  # for the input estimate when no usage arrives
        self._stops = request.stop
        self._started = False
        self._done = False
        self._next = 0  # the next neutral block index
        self._open: list[int] = []  # open neutral blocks
        self._text: int | None = None  # the open text block, if any
        self._refusal: int | None = None  # the open refusal (text) block, if any
        self._reasoning: int | None = None  # the open reasoning block, if any
        self._plain_reasoning = False  # reasoning text came in reasoning(_content)
        self._audio: int | None = None  # the audio block, once audio arrived
        self._tools: dict[_ToolKey, int] = {}  # upstream tool-call key -> neutral index
        self._tool_ids: dict[int, str] = {}  # neutral index -> call id (to name a fault)
        self._last_tool: _ToolKey = None
        self._finish: str | None = None
        self._matched_stop: str | None = None
        self._usage: Usage | None = None
        # Generated text, kept only to estimate output tokens if no usage ever arrives.
        # (Servers that ignore stream_options.include_usage send none: docs/protocols.md,
        # "Chat Completions: stream".)
        self._generated: list[str] = []

    def feed(self, event: SSEEvent) -> list[StreamEvent]:
        """One SSE event -> zero or more neutral events."""
        if self._done:
            return []
        data = event.data
        if not data.startswith("{"):
            stripped = data.strip()
            if stripped == "[DONE]":
                return self._end()
            if not stripped:
                return []  # an empty data line some servers send as a keep-alive
        try:
            chunk = self.last = orjson.loads(data)
        except orjson.JSONDecodeError:
            chunk = None
        if not isinstance(chunk, dict):
            # The official SDK would raise on it too; skipping it would hand the client a
            # shortened answer that looks complete. (Keep-alives are SSE comments, which
            # never reach here.)
            self._done = True
            return [
                StreamError(
                    UpstreamError("upstream sent a stream event that is not JSON", status=502)
                )
            ]
        # in-band error (docs/protocols.md, "Chat Completions: errors")
        if chunk.get("error"):
            self._done = True
            return [StreamError(error_from_payload(chunk["error"]))]
        out: list[StreamEvent] = []
        if not self._started:
            self._start(chunk, out)
        usage = chunk.get("usage")
        if usage is not None:
            self._usage = parse_usage(usage) or self._usage
        choices = chunk.get("choices")
        if isinstance(choices, list):
            try:
                for choice in choices:
                    # n > 1 cannot be translated into one message: only choice 0 counts.
                    if isinstance(choice, dict) and choice.get("index", 0) == 0:
                        self._choice(choice, out)
            except MalformedToolCallError as exc:  # what came before it still goes out
                self._done = True
                out.append(StreamError(exc))
        return out

    def flush(self) -> list[StreamEvent]:
        """End of input without ``[DONE]``: end normally if a finish was seen."""
        if self._done or not self._started:
            self._done = True
            return []  # nothing started: the caller decides what an empty stream means
        if self._finish is not None:
            return self._end()
        self._done = True
        return [StreamError(UpstreamError("upstream stream ended before finish"))]

    def _start(self, chunk: dict[str, Any], out: list[StreamEvent]) -> None:
        self._started = True
        created = chunk.get("created")
        out.append(
            StreamStart(
                id=str(chunk.get("id") or random_id("chatcmpl-")),
                model=str(chunk.get("model") or ""),
                created=created
                if isinstance(created, int) and not isinstance(created, bool)
                else 0,
            )
        )

    def _choice(self, choice: dict[str, Any], out: list[StreamEvent]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            reasoning = delta.get("reasoning_content")
            if reasoning is None:
                # vLLM >= 0.11, OpenRouter
                # (docs/protocols.md, "Chat Completions: server extensions")
                reasoning = delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                self._plain_reasoning = True
                self._reasoning_delta(reasoning, out)
            details = delta.get("reasoning_details")
            if details:
                self._details(details, out)
            logprobs = choice.get("logprobs")
            if logprobs is not None:
                logprobs = parse_logprobs(logprobs), parse_logprobs(logprobs, "refusal")
            content = delta.get("content")
            tokens = logprobs[0] if logprobs else None
            if (isinstance(content, str) and content) or tokens:
                self._text_delta(content if isinstance(content, str) else "", out, tokens)
            refusal = delta.get("refusal")
            tokens = logprobs[1] if logprobs else None
            if (isinstance(refusal, str) and refusal) or tokens:
                self._refusal_delta(refusal if isinstance(refusal, str) else "", out, tokens)
            audio = delta.get("audio")
            if isinstance(audio, dict):
                self._audio_delta(audio, out)
            calls = delta.get("tool_calls")
            if isinstance(calls, list):
                for position, call in enumerate(calls):
                    if not isinstance(call, dict):
                        raise MalformedToolCallError("not an object", f"tool_calls[{position}]")
                    self._tool_delta(call, out, position)
            legacy = delta.get("function_call")
            if legacy is not None:
                self._tool_delta({"index": 0, "function": legacy}, out, 0)
        finish = choice.get("finish_reason")
        if isinstance(finish, str) and finish:
            self._finish = finish  # held: the usage chunk and [DONE] still follow
            matched = choice.get("stop_reason")  # vLLM names the stop string it hit
            if isinstance(matched, str) and (not self._stops or matched in self._stops):
                self._matched_stop = matched

    def _open_block(
        self, part: TextPart | ReasoningPart | ToolCallPart | AudioPart, out: list[StreamEvent]
    ) -> int:
        index = self._next
        self._next += 1
        self._open.append(index)
        out.append(BlockStart(index, part))
        return index

    def _close(self, index: int | None, out: list[StreamEvent]) -> None:
        if index is not None:
            self._open.remove(index)
            out.append(BlockStop(index))

    def _close_runs(self, out: list[StreamEvent]) -> None:
        """Close the open text/refusal/reasoning blocks (tool blocks stay open)."""
        self._close(self._text, out)
        self._close(self._refusal, out)
        self._close(self._reasoning, out)
        self._text = self._refusal = self._reasoning = None

    def _reasoning_delta(self, text: str, out: list[StreamEvent]) -> None:
        index = self._reasoning
        if index is None:
            self._close_runs(out)
            index = self._reasoning = self._open_block(ReasoningPart(""), out)
        self._generated.append(text)
        out.append(ReasoningDelta(index, text))

    def _details(self, details: Any, out: list[StreamEvent]) -> None:
        """OpenRouter's ``reasoning_details`` pieces, mapped as a whole answer's are
        (:mod:`._reasoning`). Their text is a copy of the plain field's when a server
        sends both, so it counts only in a stream that has no plain reasoning text."""
        for kind, value in detail_pieces(details):
            if kind == "text":
                if not self._plain_reasoning:
                    self._reasoning_delta(value, out)
            elif kind == "signature":
                index = self._reasoning
                if index is None:
                    self._close_runs(out)
                    index = self._reasoning = self._open_block(ReasoningPart(""), out)
                out.append(SignatureDelta(index, value))
            else:  # a redacted block of its own, closed at once (it comes whole)
                self._close_runs(out)
                self._close(self._open_block(ReasoningPart("", redacted=value), out), out)

    def _text_delta(
        self, text: str, out: list[StreamEvent], logprobs: tuple[TokenLogprob, ...] | None
    ) -> None:
        index = self._text
        if index is None:
            self._close_runs(out)  # reasoning comes first; a new run means it ended
            index = self._text = self._open_block(TextPart(""), out)
        self._generated.append(text)
        out.append(TextDelta(index, text, logprobs or None))

    def _refusal_delta(
        self, text: str, out: list[StreamEvent], logprobs: tuple[TokenLogprob, ...] | None
    ) -> None:
        index = self._refusal
        if index is None:
            self._close_runs(out)
            index = self._refusal = self._open_block(TextPart("", meta={"refusal": True}), out)
        self._generated.append(text)
        out.append(TextDelta(index, text, logprobs or None))

    def _audio_delta(self, audio: dict[str, Any], out: list[StreamEvent]) -> None:
        """``delta.audio`` pieces (id, base64 data, transcript, expires_at) -> one block."""
        data, transcript = audio.get("data"), audio.get("transcript")
        audio_id, expires = audio.get("id"), audio.get("expires_at")
        index = self._audio
        if index is None:
            index = self._audio = self._open_block(AudioPart(), out)
        out.append(
            AudioDelta(
                index,
                data if isinstance(data, str) else "",
                transcript if isinstance(transcript, str) else "",
                audio_id if isinstance(audio_id, str) else None,
                expires if isinstance(expires, int) and not isinstance(expires, bool) else None,
            )
        )

    def _tool_delta(self, call: dict[str, Any], out: list[StreamEvent], position: int) -> None:
        """One ``tool_calls`` delta; a call no client could use (no name when it opens,
        arguments that are not text) is a :class:`MalformedToolCallError`."""
        key = call.get("index")
        call_id = call.get("id")
        if not isinstance(key, int) or isinstance(key, bool):
            # Some servers omit ``index``: a new id means a new call, else the last one.
            key = ("id", call_id) if call_id and ("id", call_id) not in self._tools else None
            if key is None:
                key = self._last_tool
        field = "arguments"
        fn = call.get("function")
        if fn is None and "custom" in call:  # a custom tool's call: its input is raw text
            fn, field = call["custom"], "input"
        index = self._tools.get(key)
        if fn is None:
            fn = {}
        elif not isinstance(fn, dict):
            where, call_id = self._named(key, position, call_id, index)
            raise MalformedToolCallError("its function is not an object", where, call_id)
        if index is None:
            self._close_runs(out)
            name = fn.get("name")
            if not isinstance(name, str) or not name:
                name = call_name(name, *self._named(key, position, call_id, index))  # raises
            part = ToolCallPart(
                id=call_id if isinstance(call_id, str) and call_id else random_id("call_"),
                name=name,
                kind="custom" if field == "input" else "function",
            )
            index = self._tools[key] = self._open_block(part, out)
            self._tool_ids[index] = part.id
        self._last_tool = key
        args = fn.get(field)
        if args is not None and not isinstance(args, str):
            where, call_id = self._named(key, position, call_id, index)
            args = call_arguments(args, where, call_id, field, text=field == "input")
        if args:
            self._generated.append(args)
            out.append(ArgumentsDelta(index, args))

    def _named(
        self, key: _ToolKey, position: int, call_id: Any, index: int | None
    ) -> tuple[str, Any]:
        """How a faulty call is named: where the upstream wrote it, and its id (looked
        up for a continuation delta, which carries none). Only a fault pays for it."""
        where = f"tool_calls[{key if isinstance(key, int) else position}]"
        return where, call_id or (self._tool_ids.get(index) if index is not None else None)

    def _end(self) -> list[StreamEvent]:
        self._done = True
        if not self._started:
            return []
        out: list[StreamEvent] = [BlockStop(i) for i in sorted(self._open)]
        self._open.clear()
        stop, sequence = stop_reason_for(self._finish, self._matched_stop, bool(self._tools))
        usage = self._usage
        if usage is None:
            estimate = estimate_request_tokens(self._request)
            usage = estimated_usage(self._generated, input_tokens=estimate)
        out.append(StreamEnd(stop, sequence, usage))
        return out


_ROLE_DELTA = b'{"role":"assistant","content":""}'
_TAIL = b',"logprobs":null,"finish_reason":null}]}\n\n'
_TAIL_USAGE = b',"logprobs":null,"finish_reason":null}],"usage":null}\n\n'


class OpenAIChatStreamEncoder:
    """Neutral events -> Chat chunk bytes for a client. See the module docstring.

    Every chunk carries the same ``id``/``created`` and ``model`` = the name the client
    asked for. With ``include_usage`` the non-final chunks carry ``"usage": null`` and a
    usage chunk (``choices: []``) precedes ``[DONE]``, as OpenAI does (docs/protocols.md,
    "Chat Completions: stream").
    """

    __slots__ = (
        "_base",
        "_done",
        "_head",
        "_include_usage",
        "_model",
        "_refusals",
        "_tail",
        "_tools",
    )

    def __init__(self, request: Request) -> None:
        self._model = request.model
        self._include_usage = request.include_usage
        self._tail = _TAIL_USAGE if request.include_usage else _TAIL
        self._base = b""  # 'data: {"id":..,"model":..,"choices":'
        self._head = b""  # self._base + '[{"index":0,"delta":'
        # neutral block index -> the head of its argument deltas, up to the text:
        # '{"tool_calls":[{"index":k,"function":{"arguments":' (or '"custom":{"input":')
        self._tools: dict[int, bytes] = {}
        self._refusals: set[int] = set()  # neutral blocks holding refusal text
        self._done = False

    def _begin(self, response_id: str, created: int) -> None:
        self._base = b"".join(
            (
                b'data: {"id":',
                orjson.dumps(response_id),
                b',"object":"chat.completion.chunk","created":',
                str(created or int(time.time())).encode(),
                b',"model":',
                orjson.dumps(self._model),
                b',"system_fingerprint":null,"choices":',
            )
        )
        self._head = self._base + b'[{"index":0,"delta":'

    def _chunk(self, delta: bytes) -> bytes:
        return b"".join((self._head, delta, self._tail))

    def encode(self, event: StreamEvent) -> bytes:
        """The bytes owed for one event (``b""`` when there are none)."""
        if self._done:
            return b""
        if not self._head:
            if isinstance(event, StreamStart):
                self._begin(completion_id(event.id), event.created)
                return self._chunk(_ROLE_DELTA)
            # Defensive: events before a StreamStart still produce a valid stream.
            self._begin(random_id("chatcmpl-"), 0)
        if isinstance(event, TextDelta):
            if event.logprobs is not None:
                return self._with_logprobs(event)
            if not event.text:
                return b""
            key = b'{"refusal":' if event.index in self._refusals else b'{"content":'
            return b"".join((self._head, key, orjson.dumps(event.text), b"}", self._tail))
        if isinstance(event, ArgumentsDelta):
            if not event.json:
                return b""
            key = self._tools.get(event.index, _FIRST_ARGUMENTS)
            return b"".join((self._head, key, orjson.dumps(event.json), b"}}]}", self._tail))
        if isinstance(event, ReasoningDelta):
            if not event.text:
                return b""
            return b"".join(
                (self._head, b'{"reasoning_content":', orjson.dumps(event.text), b"}", self._tail)
            )
        if isinstance(event, BlockStart):
            return self._block_start(event)
        if isinstance(event, StreamEnd):
            return self._end(event)
        if isinstance(event, AudioDelta):
            return self._audio(event)
        if isinstance(event, StreamError):
            self._done = True
            return render_stream_error(event.error)  # no [DONE] after an error
        return b""  # BlockStop, SignatureDelta, a repeated StreamStart: nothing on the wire

    def _with_logprobs(self, event: TextDelta) -> bytes:
        """A text delta and its tokens' logprobs in one chunk, as OpenAI sends them."""
        refusal = event.index in self._refusals
        delta = {"refusal" if refusal else "content": event.text}
        logprobs = render_logprobs(
            None if refusal else event.logprobs, event.logprobs if refusal else None
        )
        tail = self._tail.replace(b'"logprobs":null', b'"logprobs":' + orjson.dumps(logprobs), 1)
        return b"".join((self._head, orjson.dumps(delta), tail))

    def _audio(self, event: AudioDelta) -> bytes:
        audio: dict[str, Any] = {}
        if event.id is not None:
            audio["id"] = event.id
        if event.data:
            audio["data"] = event.data
        if event.transcript:
            audio["transcript"] = event.transcript
        if event.expires_at is not None:
            audio["expires_at"] = event.expires_at
        return self._chunk(orjson.dumps({"audio": audio})) if audio else b""

    def _block_start(self, event: BlockStart) -> bytes:
        part = event.part
        if isinstance(part, ToolCallPart):
            k = len(self._tools)
            call: dict[str, Any] = {"index": k, "id": part.id, "type": part.kind}
            if part.kind == "custom":
                call["custom"] = {"name": part.name, "input": part.arguments}
                self._tools[event.index] = b'{"tool_calls":[{"index":%d,"custom":{"input":' % k
            else:
                call["function"] = {"name": part.name, "arguments": part.arguments}
                self._tools[event.index] = _ARGUMENTS % k
            return self._chunk(orjson.dumps({"tool_calls": [call]}))
        if isinstance(part, TextPart):
            if part.meta.get("refusal"):
                self._refusals.add(event.index)
            if part.text or part.logprobs is not None:
                return self.encode(TextDelta(event.index, part.text, part.logprobs))
            return b""
        if isinstance(part, ReasoningPart) and part.text:
            return self.encode(ReasoningDelta(event.index, part.text))
        if isinstance(part, AudioPart):
            return self.encode(
                AudioDelta(event.index, part.data, part.transcript, part.id, part.expires_at)
            )
        return b""

    def _end(self, event: StreamEnd) -> bytes:
        self._done = True
        finish = FINISH_REASONS.get(event.stop_reason, "stop")
        tail = self._tail.replace(
            b'"finish_reason":null', b'"finish_reason":"%s"' % finish.encode()
        )
        out = [self._head, b"{}", tail]
        if self._include_usage:
            out += [self._base, b'[],"usage":', orjson.dumps(render_usage(event.usage)), b"}\n\n"]
        out.append(DONE)
        return b"".join(out)

    def ping(self) -> bytes:
        """A keep-alive comment; SSE clients ignore it."""
        return b": ping\n\n"
