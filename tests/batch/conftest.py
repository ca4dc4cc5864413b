"""Fixtures for the batch tests: a fake chat server on 127.0.0.1 and input-file helpers.

``server``: an aiohttp app in its own thread (so a runner in this process *or* in a
subprocess can use it) that answers ``/v1/chat/completions``, ``/v1/responses`` and
``/v1/messages`` after a random delay in ``[delay_min, delay_max]``. What it answers depends on the last
user text: containing ``bad`` -> 400, ``boom`` -> 500 every time, ``flaky`` -> 500 the
first time that text is seen and 200 after; answers that are not answers: ``hollow`` ->
an empty answer the first time, ``void`` -> always, ``garbled`` -> a body that is not
JSON the first time, ``mangled`` -> always; ``thinker`` -> an answer with reasoning
(``thought about <text>``); anything else -> 200 echoing the text. It records every text
it answered or began answering, and the peak number in flight.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import web

from ..threaded_server import ThreadedAiohttpServer


def last_user_text(body: Any) -> str:
    """The text of the last user message of an OpenAI, Responses or Anthropic body."""
    items = body.get("input")
    if isinstance(items, str):
        return items
    for message in reversed(body.get("messages", items or [])):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        return "".join(c.get("text", "") for c in content if isinstance(c, dict))
    return ""


def responses_answer(text: str) -> dict[str, Any]:
    message = {
        "id": "msg_x",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }
    return {
        "id": "resp_x",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": "m",
        "output": [message],
        "usage": {"input_tokens": 6, "output_tokens": 4, "total_tokens": 10},
    }


def openai_answer(text: str, reasoning: str | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return {
        "id": "chatcmpl-x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }


def anthropic_answer(text: str, reasoning: str | None = None) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    if reasoning is not None:
        content.insert(0, {"type": "thinking", "thinking": reasoning, "signature": "sig"})
    return {
        "id": "msg_x",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": content,
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 4, "output_tokens": 3},
    }


def responses_reasoning(text: str, reasoning: str) -> dict[str, Any]:
    body = responses_answer(text)
    summary = [{"type": "summary_text", "text": reasoning}]
    body["output"].insert(0, {"id": "rs_x", "type": "reasoning", "summary": summary})
    return body


class FakeChatServer(ThreadedAiohttpServer):
    """See the module docstring."""

    def __init__(self, delay_min: float = 0.0, delay_max: float = 0.0) -> None:
        super().__init__()
        self.delay_min, self.delay_max = delay_min, delay_max
        self.started: list[str] = []  # texts whose request arrived
        self.answered: list[str] = []  # texts whose answer was sent
        self.attempts: Counter[str] = Counter()
        self.in_flight = 0
        self.max_in_flight = 0
        self.pretty = False  # answer with pretty-printed (multi-line) JSON
        self.bodies: list[Any] = []
        self.paths: list[str] = []  # the path of each request, in arrival order
        self._lock = threading.Lock()
        self._rng = random.Random(7)

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    def routes(self, app: web.Application) -> None:
        app.router.add_route("POST", "/{tail:.*}", self._handle)

    async def _handle(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        text = last_user_text(body)
        with self._lock:
            self.bodies.append(body)
            self.paths.append(request.path)
            self.started.append(text)
            self.attempts[text] += 1
            attempt = self.attempts[text]
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            delay = self._rng.uniform(self.delay_min, self.delay_max)
        try:
            if delay:
                await asyncio.sleep(delay)
            return self._answer(request.path, text, attempt)
        finally:
            with self._lock:
                self.in_flight -= 1
                self.answered.append(text)

    def _answer(self, path: str, text: str, attempt: int) -> web.Response:
        headers = {"x-request-id": f"req-{text}-{attempt}"}
        if "bad" in text:
            error = {"error": {"message": f"bad input {text}", "type": "invalid_request_error"}}
            return web.json_response(error, status=400, headers=headers)
        if "boom" in text or ("flaky" in text and attempt == 1):
            error = {"error": {"message": "server fell over", "type": "server_error"}}
            return web.json_response(error, status=500, headers=headers)
        if "mangled" in text or ("garbled" in text and attempt == 1):
            return web.Response(
                body=b"<html>oops</html>", content_type="text/html", headers=headers
            )
        answer = openai_answer
        if path.endswith("/messages"):
            answer = anthropic_answer
        elif path.endswith("/responses"):
            answer = responses_answer
        if "void" in text or ("hollow" in text and attempt == 1):
            payload = answer("")
        elif "thinker" in text:
            thought = f"thought about {text}"
            if path.endswith("/responses"):
                payload = responses_reasoning(f"echo: {text}", thought)
            else:
                payload = answer(f"echo: {text}", thought)  # type: ignore[call-arg]
        else:
            payload = answer(f"echo: {text}")
        data = orjson.dumps(payload, option=orjson.OPT_INDENT_2 if self.pretty else 0)
        return web.Response(body=data, content_type="application/json", headers=headers)


@pytest.fixture
def server() -> Iterator[FakeChatServer]:
    srv = FakeChatServer(0.0, 0.005)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    return path


def simple_rows(n: int, prefix: str = "r") -> list[dict[str, Any]]:
    """``n`` simple lines whose prompt is their custom_id (the fake server echoes it)."""
    return [{"custom_id": f"{prefix}{i}", "prompt": f"{prefix}{i}"} for i in range(n)]


def read_output(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]
