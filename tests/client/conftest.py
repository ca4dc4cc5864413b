"""Socket-level fixtures for the client tests.

``server``: a scripted fake OpenAI-compatible (and Anthropic) aiohttp server on a free
127.0.0.1 port, in its own thread with its own event loop, so both the async tests and
the sync Client (which runs its own loop thread) can use it. Push actions with
``server.push(...)``; with nothing queued it echoes the last user text. It records every
request and the peak number of requests in flight.

``gateway``: the real interlingua app (``create_app`` over a ``FakeUpstream``) on uvicorn.
"""

from __future__ import annotations

import asyncio
import base64
import io
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from aiohttp import web

from interlingua.client import _inputs
from interlingua.config import fake_config
from interlingua.core import ImagePart
from interlingua.server import create_app
from interlingua.upstreams.fake import FakeUpstream

from ..live_server import live_server
from ..threaded_server import ThreadedAiohttpServer

# --- scripted actions --------------------------------------------------------------------


@dataclass
class Reply:
    """Answer with ``body`` (JSON) after ``delay`` seconds."""

    body: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Stream:
    """Answer with SSE ``chunks``; ``cut`` drops the connection after them instead of ending."""

    chunks: list[bytes]
    cut: bool = False
    delay: float = 0.0


@dataclass
class Drop:
    """Close the connection without answering."""


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: Any


Action = Reply | Stream | Drop | Callable[[Seen], Any]


# --- body helpers ------------------------------------------------------------------------


def openai_body(
    text: str | None = "hi",
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    usage: dict[str, Any] | None = None,
    reasoning: str | None = None,
    finish: str | None = None,
) -> dict[str, Any]:
    """A ``chat.completion`` body."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    if reasoning:
        message["reasoning_content"] = reasoning
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish or ("tool_calls" if tool_calls else "stop"),
            }
        ],
        "usage": usage
        if usage is not None
        else {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """One OpenAI tool call."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def openai_chunks(pieces: list[str], usage: bool = True) -> list[bytes]:
    """SSE chunks of a streamed answer made of ``pieces``."""

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        payload = {
            "id": "chatcmpl-s",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return b"data: " + orjson.dumps(payload) + b"\n\n"

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": p}) for p in pieces]
    out.append(chunk({}, "stop"))
    if usage:
        u = {"prompt_tokens": 3, "completion_tokens": len(pieces), "total_tokens": 3 + len(pieces)}
        payload = {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1}
        out.append(
            b"data: " + orjson.dumps({**payload, "model": "m", "choices": [], "usage": u}) + b"\n\n"
        )
    out.append(b"data: [DONE]\n\n")
    return out


def anthropic_body(text: str = "hi", usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """An Anthropic ``message`` body."""
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage or {"input_tokens": 4, "output_tokens": 2},
    }


def error_body(message: str, etype: str = "invalid_request_error") -> dict[str, Any]:
    return {"error": {"message": message, "type": etype, "param": None, "code": None}}


def _last_user_text(body: Any) -> str:
    for m in reversed(body.get("messages", [])):
        if m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, str):
                return content
            return "".join(c.get("text", "") for c in content if isinstance(c, dict))
    return ""


# --- images ------------------------------------------------------------------------------


def png_bytes(size: tuple[int, int] = (2, 2), color: tuple[int, int, int] = (255, 0, 0)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def jpeg_bytes(size: tuple[int, int] = (2, 2)) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, (0, 128, 255)).save(buf, format="JPEG")
    return buf.getvalue()


# The smallest GIF: 1x1, written by hand so one image type needs no Pillow at all.
GIF_1PX = base64.b64decode("R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7")


# --- the server --------------------------------------------------------------------------


class FakeServer(ThreadedAiohttpServer):
    """See the module docstring. ``clock`` (if set) timestamps arrivals into ``arrivals``."""

    def __init__(self) -> None:
        super().__init__()
        self.script: deque[Action] = deque()
        self.seen: list[Seen] = []
        self.files: dict[str, bytes] = {}
        self.in_flight = 0
        self.max_in_flight = 0
        self.hold = 0.0  # every request waits this long (to observe concurrency)
        self.clock: Callable[[], float] | None = None
        self.arrivals: list[float] = []
        self._lock = threading.Lock()

    def push(self, *actions: Action) -> None:
        self.script.extend(actions)

    @property
    def bodies(self) -> list[Any]:
        return [s.body for s in self.seen]

    def routes(self, app: web.Application) -> None:
        app.router.add_route("POST", "/{tail:.*}", self._handle)
        app.router.add_route("GET", "/files/{name}", self._file)

    async def _file(self, request: web.Request) -> web.StreamResponse:
        data = self.files.get(request.match_info["name"])
        if data is None:
            return web.Response(status=404)
        return web.Response(body=data, content_type="application/octet-stream")

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        seen = Seen(
            request.path, {k.lower(): v for k, v in request.headers.items()}, orjson.loads(raw)
        )
        with self._lock:
            self.seen.append(seen)
            if self.clock is not None:
                self.arrivals.append(self.clock())
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            action = self.script.popleft() if self.script else None
        try:
            if self.hold:
                await asyncio.sleep(self.hold)
            if callable(action):
                action = action(seen)
            if action is None:
                action = self._echo(seen)
            return await self._perform(request, action)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _echo(self, seen: Seen) -> Reply:
        text = "echo: " + _last_user_text(seen.body)
        if seen.path.endswith("/messages"):
            return Reply(anthropic_body(text))
        return Reply(openai_body(text))

    async def _perform(self, request: web.Request, action: Any) -> web.StreamResponse:
        if isinstance(action, Reply):
            if action.delay:
                await asyncio.sleep(action.delay)
            headers = {"x-request-id": f"req_{len(self.seen)}", **action.headers}
            return web.Response(
                body=orjson.dumps(action.body),
                status=action.status,
                content_type="application/json",
                headers=headers,
            )
        if isinstance(action, Drop):
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        assert isinstance(action, Stream)
        resp = web.StreamResponse(
            headers={"content-type": "text/event-stream", "x-request-id": "req_stream"}
        )
        await resp.prepare(request)
        for chunk in action.chunks:
            await resp.write(chunk)
            await asyncio.sleep(action.delay)
        if action.cut:
            assert request.transport is not None
            request.transport.close()
            return resp
        await resp.write_eof()
        return resp


@pytest.fixture
def encodes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Record every real encoding (and the thread it ran in)."""
    calls: list[str] = []
    real = _inputs.encode_image

    def counting(load: Any, what: str, max_side: int | None) -> ImagePart:
        calls.append(threading.current_thread().name)
        return real(load, what, max_side)

    monkeypatch.setattr(_inputs, "encode_image", counting)
    return calls


@pytest.fixture
def server() -> Iterator[FakeServer]:
    srv = FakeServer()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@dataclass
class Gateway:
    url: str
    fake: FakeUpstream


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    """The live gateway over a FakeUpstream (module scope: uvicorn takes a moment)."""
    fake = FakeUpstream("fake", chunk_size=3)
    with live_server(create_app(fake_config(), upstreams={"fake": fake})) as url:
        yield Gateway(url, fake)


class FakeClock:
    """Time that moves only when slept on."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def wall() -> float:
    return time.monotonic()
