"""Reading the continuing upstream (or a gateway in front of it) the way a client would.

Plain httpx: :func:`call` posts a request in any dialect and reads the response however it
ends (a clean end, a dropped connection, a read timeout); :func:`fold` turns a stream into
what a client would assemble (text, reasoning, tool arguments, whether it ended, any
in-band error). :func:`request` builds a request body, continuing a prefix if asked.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from .continuing_wire import CHAT, MESSAGES, PATHS, RESPONSES
from .raw_client import sse_data


def request(
    dialect: str,
    model: str,
    *,
    stream: bool = True,
    prefix: str | None = None,
    instruct: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """A request body for ``model``, continuing ``prefix`` when given."""
    turns: list[dict[str, Any]] = [{"role": "user", "content": "Tell me about the fox."}]
    if prefix is not None:
        part = {"type": "output_text" if dialect == RESPONSES else "text", "text": prefix}
        turns.append({"role": "assistant", "content": [part]})
    if instruct:
        turns.append({"role": "user", "content": "Continue exactly where you stopped."})
    key = "input" if dialect == RESPONSES else "messages"
    body = {"model": model, "stream": stream, key: turns, **extra}
    if dialect == MESSAGES:
        body["max_tokens"] = 100
    return body


@dataclass
class Got:
    """What a client read: status, headers, the body, and how the body ended."""

    status: int
    headers: dict[str, str]
    raw: bytes
    #: "eof" (a clean end), "cut" (the peer dropped the connection) or "timeout"
    end: str
    #: seconds from sending to the head, and to the first body byte
    head_after: float = 0.0
    body_after: float | None = None

    def json(self) -> Any:
        """The body as JSON."""
        return orjson.loads(self.raw)


def call(server: Any, dialect: str, body: dict[str, Any], read: float = 5) -> Got:
    """POST ``body`` to ``server.url`` (the upstream, or a gateway), reading the response
    whatever way it ends."""
    url = server.url + PATHS[dialect]
    raw = bytearray()
    started = time.monotonic()
    timeout = httpx.Timeout(5, read=read)
    with httpx.stream("POST", url, json=body, timeout=timeout) as resp:
        got = Got(resp.status_code, dict(resp.headers), b"", "eof", time.monotonic() - started)
        try:
            for piece in resp.iter_raw():
                if got.body_after is None:
                    got.body_after = time.monotonic() - started
                raw += piece
        except httpx.RemoteProtocolError:
            got.end = "cut"
        except httpx.ReadTimeout:
            got.end = "timeout"
    got.raw = bytes(raw)
    return got


@dataclass
class Folded:
    """A stream folded the way a client would."""

    text: str = ""
    reasoning: str = ""
    args: str = ""
    tool: tuple[str, str] | None = None
    done: bool = False
    finish: str | None = None
    error: Any = None
    usage: Any = None
    invalid: list[int] = field(default_factory=list)
    ids: set[str] = field(default_factory=set)
    sequence: list[int] = field(default_factory=list)


def _fold_chat(out: Folded, event: dict[str, Any]) -> None:
    out.ids.add(event["id"])
    out.usage = event.get("usage") or out.usage
    for choice in event["choices"]:
        delta = choice["delta"]
        out.text += delta.get("content") or ""
        out.reasoning += delta.get("reasoning_content") or ""
        for tool in delta.get("tool_calls") or []:
            if "id" in tool:
                out.tool = (tool["id"], tool["function"]["name"])
            out.args += tool["function"]["arguments"]
        out.finish = choice["finish_reason"] or out.finish


def _fold_messages(out: Folded, event: dict[str, Any]) -> None:
    kind = event["type"]
    if kind == "message_start":
        out.ids.add(event["message"]["id"])
    elif kind == "content_block_start" and event["content_block"]["type"] == "tool_use":
        out.tool = (event["content_block"]["id"], event["content_block"]["name"])
    elif kind == "content_block_delta":
        delta = event["delta"]
        out.text += delta.get("text", "")
        out.reasoning += delta.get("thinking", "")
        out.args += delta.get("partial_json", "")
    elif kind == "message_delta":
        out.finish, out.usage = event["delta"]["stop_reason"], event["usage"]
    elif kind == "message_stop":
        out.done = True


def _fold_responses(out: Folded, event: dict[str, Any]) -> None:
    kind = event["type"]
    out.sequence.append(event["sequence_number"])
    if kind == "response.created":
        out.ids.add(event["response"]["id"])
    elif kind == "response.output_item.added" and event["item"]["type"] == "function_call":
        out.tool = (event["item"]["call_id"], event["item"]["name"])
    elif kind == "response.output_text.delta":
        out.text += event["delta"]
    elif kind == "response.reasoning_summary_text.delta":
        out.reasoning += event["delta"]
    elif kind == "response.function_call_arguments.delta":
        out.args += event["delta"]
    elif kind == "response.completed":
        out.done, out.usage = True, event["response"]["usage"]
    elif kind == "response.failed":
        out.error = event["response"]["error"]


def fold(dialect: str, raw: bytes) -> Folded:
    """Text, reasoning, tool arguments, end and errors of a stream."""
    out = Folded()
    folder = {CHAT: _fold_chat, MESSAGES: _fold_messages, RESPONSES: _fold_responses}[dialect]
    for i, data in enumerate(sse_data(raw)):
        if data == b"[DONE]":
            out.done = True
            continue
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            out.invalid.append(i)
            continue
        if "error" in event and (dialect == CHAT or event.get("type") == "error"):
            out.error = event["error"]
            continue
        folder(out, event)
    return out


def body_text(dialect: str, answer: dict[str, Any]) -> str:
    """The text of a non-stream answer."""
    if dialect == CHAT:
        return str(answer["choices"][0]["message"]["content"] or "")
    if dialect == MESSAGES:
        return "".join(b.get("text", "") for b in answer["content"])
    return "".join(
        part["text"]
        for item in answer["output"]
        if item["type"] == "message"
        for part in item["content"]
    )


def error_message(got: Got) -> str:
    """The message of an error body (either shape)."""
    return str(got.json()["error"]["message"])
