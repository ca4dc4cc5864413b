"""A scriptable OpenAI Responses API upstream on a real socket (``POST /v1/responses``).

The same machinery as :mod:`.mock_upstream` (its own thread and loop, scripted
behaviours, every request recorded), answering as OpenAI's Responses API does: by
default the recorded ``tests/fixtures/openai_responses_tools.sse`` transcript (a
reasoning item with a summary and ``encrypted_content``, a message, two parallel
function calls, usage with cached and reasoning tokens), or its final ``response``
object for a non-stream request. :func:`text_answer` scripts a plain text turn, which can
go on streaming until the gateway hangs up (to prove a stop sequence cancels the
upstream).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from ..mock_upstream import Behaviour, MockOpenAI, mock_openai

FIXTURE = Path(__file__).parents[2] / "fixtures" / "openai_responses_tools.sse"
TRANSCRIPT = FIXTURE.read_bytes()
EVENTS = [e + b"\n\n" for e in TRANSCRIPT.strip().split(b"\n\n")]
FINAL: dict[str, Any] = orjson.loads(EVENTS[-1].split(b"data: ", 1)[1])["response"]
MODEL = FINAL["model"]
USAGE = FINAL["usage"]
REASONING = FINAL["output"][0]["summary"][0]["text"]
TEXT = FINAL["output"][1]["content"][0]["text"]
CALLS = [(item["call_id"], item["name"], item["arguments"]) for item in FINAL["output"][2:]]


def _event(kind: str, seq: int, **fields: Any) -> bytes:
    payload = {"type": kind, "sequence_number": seq, **fields}
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def text_response(text: str, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """A completed response object holding one output_text ``text``."""
    message = {
        "id": "msg_text1",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "annotations": [], "logprobs": [], "text": text}],
    }
    usage = usage or {
        "input_tokens": 20,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 7,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 27,
    }
    return {
        **{k: v for k, v in FINAL.items() if k not in ("output", "usage", "tools")},
        "id": "resp_text1",
        "tools": [],
        "output": [message],
        "usage": usage,
    }


def text_events(pieces: list[str]) -> tuple[list[bytes], list[bytes]]:
    """(the events up to the last text delta, the events that end the turn)."""
    response = text_response("".join(pieces))
    started = {**response, "status": "in_progress", "output": [], "usage": None}
    item = {"id": "msg_text1", "type": "message", "status": "in_progress", "role": "assistant"}
    ids = {"item_id": "msg_text1", "output_index": 0, "content_index": 0}
    part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
    head = [
        _event("response.created", 0, response=started),
        _event("response.in_progress", 1, response=started),
        _event("response.output_item.added", 2, output_index=0, item={**item, "content": []}),
        _event("response.content_part.added", 3, **ids, part=part),
    ]
    seq = 4
    for piece in pieces:
        head.append(_event("response.output_text.delta", seq, **ids, delta=piece, logprobs=[]))
        seq += 1
    text = "".join(pieces)
    done = response["output"][0]
    tail = [
        _event("response.output_text.done", seq, **ids, text=text, logprobs=[]),
        _event("response.content_part.done", seq + 1, **ids, part={**part, "text": text}),
        _event("response.output_item.done", seq + 2, output_index=0, item=done),
        _event("response.completed", seq + 3, response=response),
    ]
    return head, tail


async def _sse(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    return resp


async def respond(
    mock: MockOpenAI, request: web.Request, body: dict[str, Any]
) -> web.StreamResponse:
    """The recorded tool-calling turn: its stream, or its final object."""
    if not body.get("stream"):
        return web.Response(body=orjson.dumps(FINAL), content_type="application/json")
    resp = await _sse(request)
    for i, event in enumerate(EVENTS):
        if i == 5:  # one event split over two writes, as a socket may deliver it
            await resp.write(event[:20])
            await asyncio.sleep(0.005)
            event = event[20:]
        await resp.write(event)
    await resp.write_eof()
    return resp


def text_answer(pieces: list[str], *, endless: bool = False) -> Behaviour:
    """A text turn of ``pieces``. ``endless``: after them, one more delta every 20 ms
    until the peer hangs up (recorded in ``mock.stream_ends``; bounded at 10 s)."""

    async def behaviour(
        mock: MockOpenAI, request: web.Request, body: dict[str, Any]
    ) -> web.StreamResponse:
        if not body.get("stream"):
            payload = text_response("".join(pieces))
            return web.Response(body=orjson.dumps(payload), content_type="application/json")
        head, tail = text_events(pieces)
        resp = await _sse(request)
        for event in head:
            await resp.write(event)
        if not endless:
            for event in tail:
                await resp.write(event)
            await resp.write_eof()
            return resp
        ids = {"item_id": "msg_text1", "output_index": 0, "content_index": 0}
        deadline = time.monotonic() + 10
        seq = 100
        try:
            while time.monotonic() < deadline:
                await asyncio.sleep(0.02)
                delta = _event("response.output_text.delta", seq, **ids, delta=" more", logprobs=[])
                await resp.write(delta)
                seq += 1
                if request.transport is None or request.transport.is_closing():
                    raise ConnectionResetError("peer closed")
            mock.stream_ends.append("timeout")
        except (ConnectionError, asyncio.CancelledError) as exc:
            mock.stream_ends.append(type(exc).__name__)
            raise
        return resp

    return behaviour


@contextlib.contextmanager
def mock_responses() -> Iterator[MockOpenAI]:
    """Run the mock; ``base_url`` ends in ``/v1`` and it answers ``/v1/responses``."""
    with mock_openai("/v1/responses", default=respond) as mock:
        yield mock


__all__ = [
    "CALLS",
    "EVENTS",
    "FINAL",
    "MODEL",
    "REASONING",
    "TEXT",
    "USAGE",
    "mock_responses",
    "respond",
    "text_answer",
    "text_events",
    "text_response",
]
