"""What a healthy upstream sends for one assistant turn, in all three wire dialects.

A :class:`Turn` (optional reasoning, text, optional tool call) becomes the complete event
stream of Chat Completions, Anthropic Messages or the Responses API, or the complete
non-stream body, with the ids, indices, sequence numbers and usage the real APIs send
(docs/protocols.md, "Chat Completions: stream", "Messages: stream", "Responses: stream
events"). Each event is tagged with what it carries (:data:`Tagged`), so the continuing
upstream (:mod:`.continuing_upstream`) can break a stream after exactly N content tokens.
It also reads what a request asks to continue (:func:`continuation_of`). Everything here
is pure: no sockets, no event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import orjson

from .fault_wire import ANTHROPIC, OPENAI, error_json, overloaded_json, text_pieces

CHAT, MESSAGES, RESPONSES = "chat", "messages", "responses"
DIALECTS = (CHAT, MESSAGES, RESPONSES)
PATHS = {CHAT: "/v1/chat/completions", MESSAGES: "/v1/messages", RESPONSES: "/v1/responses"}
CREATED = 1_764_345_600
PROMPT_TOKENS = 21
#: Token tags (a content token of that kind) and END (an event that ends a healthy turn).
REASONING, TEXT, ARGS, END = "reasoning", "text", "args", "end"
#: A final user message containing this word (any case) after an assistant message asks
#: for an instruct continuation.
CONTINUE_WORD = "continue"
#: One SSE event and what it carries (a token tag, END, or None for framing events).
Tagged = tuple[bytes, str | None]


@dataclass(frozen=True)
class Tool:
    """A function call whose JSON arguments are streamed in ``pieces``."""

    #: the Chat / Responses call id (``call_...``); Messages spells it ``toolu_...``
    call_id: str
    name: str
    pieces: tuple[str, ...]

    @property
    def tool_use_id(self) -> str:
        """The id of the Messages ``tool_use`` block."""
        return "toolu_" + self.call_id.removeprefix("call_")

    @property
    def arguments(self) -> str:
        """The whole arguments string."""
        return "".join(self.pieces)


@dataclass(frozen=True)
class Turn:
    """One assistant turn: reasoning (may be empty), text, then at most one tool call."""

    text: str
    reasoning: str = ""
    tool: Tool | None = None
    #: the Anthropic thinking block's signature (sent as one signature_delta)
    signature: str = "EqQBCkgIARABGAIiQNcontinuingupstreamsig=="

    def tokens(self) -> int:
        """Output tokens: one per streamed piece."""
        args = len(self.tool.pieces) if self.tool else 0
        return len(pieces(self.reasoning)) + len(pieces(self.text)) + args


def pieces(text: str) -> list[str]:
    """How a stream carries ``text``: word by word, each word with the space after it."""
    return [piece for piece in text_pieces(text) if piece] if text else []


def dialect_of(path: str) -> str | None:
    """The dialect a request path speaks (None for a path this upstream does not serve)."""
    for dialect, suffix in PATHS.items():
        if path.endswith(suffix.removeprefix("/v1")):
            return dialect
    return None


def _json(payload: dict[str, Any]) -> bytes:
    return orjson.dumps(payload)


def _named(payload: dict[str, Any]) -> bytes:
    """A Messages or Responses event: ``event:`` line named after the payload's type."""
    return b"event: " + str(payload["type"]).encode() + b"\ndata: " + _json(payload) + b"\n\n"


# -- Chat Completions ------------------------------------------------------------------------


def _chat_usage(turn: Turn) -> dict[str, Any]:
    out = turn.tokens()
    return {
        "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": out,
        "total_tokens": PROMPT_TOKENS + out,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": len(pieces(turn.reasoning))},
    }


def _finish(turn: Turn) -> str:
    return "tool_calls" if turn.tool else "stop"


def chat_events(rid: str, model: str, turn: Turn, include_usage: bool) -> list[Tagged]:
    """The Chat stream; the usage chunk only when the request asked for it."""

    def chunk(delta: dict[str, Any] | None, finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        payload: dict[str, Any] = {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "system_fingerprint": "fp_continuing",
            "choices": [] if delta is None else [choice],
        }
        if include_usage:
            payload["usage"] = _chat_usage(turn) if delta is None else None
        return b"data: " + _json(payload) + b"\n\n"

    events: list[Tagged] = [(chunk({"role": "assistant", "content": ""}), None)]
    events += [(chunk({"reasoning_content": p}), REASONING) for p in pieces(turn.reasoning)]
    events += [(chunk({"content": p}), TEXT) for p in pieces(turn.text)]
    if turn.tool:
        function = {"name": turn.tool.name, "arguments": ""}
        first = {"index": 0, "id": turn.tool.call_id, "type": "function", "function": function}
        events.append((chunk({"tool_calls": [first]}), None))
        for piece in turn.tool.pieces:
            more = {"index": 0, "function": {"arguments": piece}}
            events.append((chunk({"tool_calls": [more]}), ARGS))
    events.append((chunk({}, _finish(turn)), END))
    if include_usage:
        events.append((chunk(None), END))
    return [*events, (b"data: [DONE]\n\n", END)]


def chat_body(rid: str, model: str, turn: Turn) -> dict[str, Any]:
    """The non-stream ``chat.completion``."""
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None, "refusal": None}
    if turn.reasoning:
        message["reasoning_content"] = turn.reasoning
    if turn.tool:
        function = {"name": turn.tool.name, "arguments": turn.tool.arguments}
        message["tool_calls"] = [
            {"id": turn.tool.call_id, "type": "function", "function": function}
        ]
    choice = {"index": 0, "finish_reason": _finish(turn), "logprobs": None, "message": message}
    return {
        "id": rid,
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "system_fingerprint": "fp_continuing",
        "choices": [choice],
        "usage": _chat_usage(turn),
    }


# -- Anthropic Messages ----------------------------------------------------------------------


def _messages_blocks(rid: str, turn: Turn) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if turn.reasoning:
        blocks.append({"type": "thinking", "thinking": turn.reasoning, "signature": turn.signature})
    if turn.text:
        blocks.append({"type": "text", "text": turn.text})
    if turn.tool:
        arguments = orjson.loads(turn.tool.arguments)
        blocks.append(
            {
                "type": "tool_use",
                "id": turn.tool.tool_use_id,
                "name": turn.tool.name,
                "input": arguments,
            }
        )
    return blocks


def _stop_reason(turn: Turn) -> str:
    return "tool_use" if turn.tool else "end_turn"


def _messages_usage(output: int) -> dict[str, Any]:
    return {
        "input_tokens": PROMPT_TOKENS,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output,
    }


def messages_body(rid: str, model: str, turn: Turn) -> dict[str, Any]:
    """The non-stream ``message``."""
    return {
        "id": rid,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _messages_blocks(rid, turn),
        "stop_reason": _stop_reason(turn),
        "stop_sequence": None,
        "usage": _messages_usage(turn.tokens()),
    }


def _messages_block_events(index: int, block: dict[str, Any], turn: Turn) -> list[Tagged]:
    kind = block["type"]
    start: dict[str, dict[str, Any]] = {
        "thinking": {"type": "thinking", "thinking": "", "signature": ""},
        "text": {"type": "text", "text": ""},
        "tool_use": {**block, "input": {}},
    }

    def delta(body: dict[str, Any]) -> bytes:
        return _named({"type": "content_block_delta", "index": index, "delta": body})

    events: list[Tagged] = [
        (
            _named({"type": "content_block_start", "index": index, "content_block": start[kind]}),
            None,
        )
    ]
    if index == 0:
        events.append((_named({"type": "ping"}), None))
    if kind == "thinking":
        events += [
            (delta({"type": "thinking_delta", "thinking": p}), REASONING)
            for p in pieces(turn.reasoning)
        ]
        events.append((delta({"type": "signature_delta", "signature": turn.signature}), None))
    elif kind == "text":
        events += [(delta({"type": "text_delta", "text": p}), TEXT) for p in pieces(turn.text)]
    else:
        assert turn.tool is not None
        events += [
            (delta({"type": "input_json_delta", "partial_json": p}), ARGS) for p in turn.tool.pieces
        ]
    return [*events, (_named({"type": "content_block_stop", "index": index}), None)]


def messages_events(rid: str, model: str, turn: Turn) -> list[Tagged]:
    """The Messages stream: message_start, the blocks one at a time, message_delta, stop."""
    start = {**messages_body(rid, model, turn), "content": [], "stop_reason": None}
    start["usage"] = _messages_usage(1)
    events: list[Tagged] = [(_named({"type": "message_start", "message": start}), None)]
    for index, block in enumerate(_messages_blocks(rid, turn)):
        events += _messages_block_events(index, block, turn)
    stop = {"stop_reason": _stop_reason(turn), "stop_sequence": None}
    usage = {"output_tokens": turn.tokens()}
    events.append((_named({"type": "message_delta", "delta": stop, "usage": usage}), END))
    return [*events, (_named({"type": "message_stop"}), END)]


# -- Responses -------------------------------------------------------------------------------


def _responses_items(rid: str, turn: Turn) -> list[dict[str, Any]]:
    suffix = rid.removeprefix("resp_")
    items: list[dict[str, Any]] = []
    if turn.reasoning:
        summary = [{"type": "summary_text", "text": turn.reasoning}]
        items.append({"id": f"rs_{suffix}", "type": "reasoning", "summary": summary})
    if turn.text:
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": turn.text}
        items.append(
            {
                "id": f"msg_{suffix}",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [part],
            }
        )
    if turn.tool:
        items.append(
            {
                "id": f"fc_{suffix}",
                "type": "function_call",
                "status": "completed",
                "call_id": turn.tool.call_id,
                "name": turn.tool.name,
                "arguments": turn.tool.arguments,
            }
        )
    return items


def responses_body(
    rid: str, model: str, turn: Turn, status: str = "completed", error: Any = None
) -> dict[str, Any]:
    """The ``response`` object (``status`` other than completed: no output, no usage)."""
    done = status == "completed"
    out = turn.tokens()
    usage = {
        "input_tokens": PROMPT_TOKENS,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": out,
        "output_tokens_details": {"reasoning_tokens": len(pieces(turn.reasoning))},
        "total_tokens": PROMPT_TOKENS + out,
    }
    return {
        "id": rid,
        "object": "response",
        "created_at": CREATED,
        "status": status,
        "error": error,
        "incomplete_details": None,
        "model": model,
        "output": _responses_items(rid, turn) if done else [],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "store": False,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage if done else None,
    }


def _responses_item_events(index: int, item: dict[str, Any], turn: Turn) -> list[dict[str, Any]]:
    kind, ids = item["type"], {"item_id": item["id"], "output_index": index}
    if kind == "reasoning":
        added = {**item, "summary": []}
        part = {"type": "summary_text", "text": ""}
        at = {**ids, "summary_index": 0}
        body = [{"type": "response.reasoning_summary_part.added", **at, "part": part}]
        body += [
            {"type": "response.reasoning_summary_text.delta", **at, "delta": p}
            for p in pieces(turn.reasoning)
        ]
        body += [
            {"type": "response.reasoning_summary_text.done", **at, "text": turn.reasoning},
            {"type": "response.reasoning_summary_part.done", **at, "part": item["summary"][0]},
        ]
    elif kind == "message":
        added = {**item, "status": "in_progress", "content": []}
        at = {**ids, "content_index": 0}
        part = {**item["content"][0], "text": ""}
        body = [{"type": "response.content_part.added", **at, "part": part}]
        body += [
            {"type": "response.output_text.delta", **at, "delta": p, "logprobs": []}
            for p in pieces(turn.text)
        ]
        body += [
            {"type": "response.output_text.done", **at, "text": turn.text, "logprobs": []},
            {"type": "response.content_part.done", **at, "part": item["content"][0]},
        ]
    else:
        added = {**item, "status": "in_progress", "arguments": ""}
        assert turn.tool is not None
        body = [
            {"type": "response.function_call_arguments.delta", **ids, "delta": p}
            for p in turn.tool.pieces
        ]
        body.append(
            {
                "type": "response.function_call_arguments.done",
                **ids,
                "name": turn.tool.name,
                "arguments": turn.tool.arguments,
            }
        )
    return [
        {"type": "response.output_item.added", "output_index": index, "item": added},
        *body,
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


_RESPONSES_TAGS = {
    "response.reasoning_summary_text.delta": REASONING,
    "response.output_text.delta": TEXT,
    "response.function_call_arguments.delta": ARGS,
    "response.completed": END,
}


def responses_events(rid: str, model: str, turn: Turn) -> list[Tagged]:
    """The Responses stream, ``sequence_number`` from 0."""
    started = responses_body(rid, model, turn, status="in_progress")
    payloads: list[dict[str, Any]] = [
        {"type": "response.created", "response": started},
        {"type": "response.in_progress", "response": started},
    ]
    for index, item in enumerate(_responses_items(rid, turn)):
        payloads += _responses_item_events(index, item, turn)
    payloads.append({"type": "response.completed", "response": responses_body(rid, model, turn)})
    return [
        (_named({"type": p["type"], "sequence_number": seq, **p}), _RESPONSES_TAGS.get(p["type"]))
        for seq, p in enumerate(payloads)
    ]


# -- Continuation requests -----------------------------------------------------------------


def _text_of(content: Any) -> str:
    """The text of a message's content: a string, or the text of its parts/blocks."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        str(part.get("text", ""))
        for part in content
        if isinstance(part, dict)
        and part.get("type") in (None, "text", "input_text", "output_text")
    )


def conversation(dialect: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """``(role, text)`` per message (Responses: per input item; a reasoning item counts as
    an assistant message without text, other non-message items have the role
    ``"item:<type>"``)."""
    if dialect != RESPONSES:
        messages = body.get("messages") or []
        return [(str(m.get("role")), _text_of(m.get("content"))) for m in messages]
    items = body.get("input")
    if isinstance(items, str):
        return [("user", items)]
    out = []
    for item in items or []:
        kind = item.get("type", "message")
        role = str(item.get("role")) if kind == "message" else f"item:{kind}"
        role = "assistant" if kind == "reasoning" else role
        out.append((role, _text_of(item.get("content"))))
    return out


def continuation_of(dialect: str, body: dict[str, Any]) -> tuple[str | None, str | None]:
    """(``"prefill"`` / ``"instruct"`` / None, the prefix text) for a request body."""
    turns = conversation(dialect, body)
    if turns and turns[-1][0] == "assistant":
        return "prefill", turns[-1][1]
    asks = len(turns) >= 2 and turns[-1][0] == "user" and CONTINUE_WORD in turns[-1][1].lower()
    if asks and turns[-2][0] == "assistant":
        return "instruct", turns[-2][1]
    return None, None


def remainder_turn(turn: Turn, prefix: str) -> Turn | None:
    """What continues ``turn`` after ``prefix`` (no reasoning; the tool call whole), or
    None when ``turn``'s text does not start with ``prefix``."""
    if not turn.text.startswith(prefix):
        return None
    return replace(turn, text=turn.text[len(prefix) :], reasoning="")


# -- Errors ----------------------------------------------------------------------------------


def wire_error(dialect: str, status: int, message: str) -> bytes:
    """The dialect's HTTP error body (Responses uses the Chat body)."""
    return error_json(ANTHROPIC if dialect == MESSAGES else OPENAI, status, message)


def invalid_request(dialect: str, message: str) -> bytes:
    """A 400 ``invalid_request_error`` body carrying ``message``."""
    if dialect == MESSAGES:
        return overloaded_json(message, "invalid_request_error")
    error = {"message": message, "type": "invalid_request_error", "param": None, "code": None}
    return _json({"error": error})


def error_event(dialect: str, rid: str, model: str, turn: Turn, seq: int) -> bytes:
    """The dialect's in-band error: a Chat ``data: {"error"}``, a Messages ``event: error``
    (overloaded_error), a Responses ``response.failed`` numbered ``seq``."""
    if dialect == CHAT:
        error = {"message": "Overloaded", "type": "server_error", "param": None, "code": None}
        return b"data: " + _json({"error": error}) + b"\n\n"
    if dialect == MESSAGES:
        return b"event: error\ndata: " + overloaded_json() + b"\n\n"
    error = {"code": "server_error", "message": "The model failed to finish its answer."}
    failed = responses_body(rid, model, turn, status="failed", error=error)
    return _named({"type": "response.failed", "sequence_number": seq, "response": failed})


def broken(event: bytes) -> bytes:
    """``event`` with its JSON cut two thirds of the way in (an invalid event)."""
    body = event.rstrip(b"\n")
    return body[: len(body) * 2 // 3] + b"\n\n"


def sequence_number(event: bytes) -> int:
    """The ``sequence_number`` of a Responses event (-1 for other dialects' events)."""
    data = event.split(b"data: ", 1)[1]
    return int(orjson.loads(data).get("sequence_number", -1))


def events(dialect: str, rid: str, model: str, turn: Turn, include_usage: bool) -> list[Tagged]:
    """The complete tagged stream of ``turn`` in ``dialect``."""
    if dialect == CHAT:
        return chat_events(rid, model, turn, include_usage)
    if dialect == MESSAGES:
        return messages_events(rid, model, turn)
    return responses_events(rid, model, turn)


def body(dialect: str, rid: str, model: str, turn: Turn) -> dict[str, Any]:
    """The complete non-stream body of ``turn`` in ``dialect``."""
    builder = {CHAT: chat_body, MESSAGES: messages_body, RESPONSES: responses_body}[dialect]
    return builder(rid, model, turn)


def response_id(dialect: str, number: int) -> str:
    """The id of the ``number``-th answer, shaped like the real API's."""
    prefix = {CHAT: "chatcmpl-", MESSAGES: "msg_", RESPONSES: "resp_"}[dialect]
    return f"{prefix}cu{number:06d}"
