"""A scriptable OpenAI-compatible upstream on a real socket, for end-to-end server tests.

It runs an aiohttp server on a free 127.0.0.1 port in its own thread and event loop, so
it serves both async tests (the gateway in process) and sync SDK clients (the gateway on
a live uvicorn thread) without sharing a loop with either. Each request is answered by
the next scripted behaviour (:meth:`MockOpenAI.enqueue`), else by :func:`ok`; every
request is recorded, and streaming behaviours record how their stream ended so tests can
prove that the gateway closed the upstream connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from ..live_server import free_port

Behaviour = Callable[["MockOpenAI", web.Request, dict[str, Any]], Awaitable[web.StreamResponse]]

CREATED = 1_727_346_182
COMPLETION_ID = "chatcmpl-mock123"
TOOL_ID = "call_abc123"
TEXT_PIECES = ("Let me ", "check ", "the weather.")
ARG_PIECES = ('{"ci', 'ty": "Pa', 'ris"}')
USAGE = {"prompt_tokens": 42, "completion_tokens": 17, "total_tokens": 59}


def _chunk(model: str, delta: dict[str, Any] | None, finish: str | None = None) -> bytes:
    choices = (
        []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    )
    payload = {
        "id": COMPLETION_ID,
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "system_fingerprint": "fp_mock",
        "choices": choices,
    }
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def stream_events(model: str, include_usage: bool = True) -> list[bytes]:
    """A realistic tool-calling stream: text, a tool call split over chunks, finish, usage."""
    events = [_chunk(model, {"role": "assistant", "content": ""})]
    events += [_chunk(model, {"content": piece}) for piece in TEXT_PIECES]
    head = {"index": 0, "id": TOOL_ID, "type": "function"}
    head["function"] = {"name": "get_weather", "arguments": ""}
    events.append(_chunk(model, {"tool_calls": [head]}))
    for piece in ARG_PIECES:
        events.append(
            _chunk(model, {"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
        )
    events.append(_chunk(model, {}, "tool_calls"))
    if include_usage:
        usage = orjson.loads(_chunk(model, None)[6:])
        usage["usage"] = USAGE
        events.append(b"data: " + orjson.dumps(usage) + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


def completion(model: str) -> dict[str, Any]:
    """The non-stream answer matching :func:`stream_events`."""
    call = {
        "id": TOOL_ID,
        "type": "function",
        "function": {"name": "get_weather", "arguments": "".join(ARG_PIECES)},
    }
    return {
        "id": COMPLETION_ID,
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "system_fingerprint": "fp_mock",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "logprobs": None,
                "message": {
                    "role": "assistant",
                    "content": "".join(TEXT_PIECES),
                    "refusal": None,
                    "tool_calls": [call],
                },
            }
        ],
        "usage": USAGE,
    }


async def _start_sse(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    return resp


async def ok(mock: MockOpenAI, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
    """Answer like OpenAI: JSON, or the stream (usage only when asked, as OpenAI does)."""
    model = str(body.get("model"))
    if not body.get("stream"):
        return web.Response(body=orjson.dumps(completion(model)), content_type="application/json")
    options = body.get("stream_options") or {}
    resp = await _start_sse(request)
    for i, event in enumerate(stream_events(model, bool(options.get("include_usage")))):
        if i == 4:  # one event split over two writes, as a socket may deliver it
            await resp.write(event[:9])
            await asyncio.sleep(0.005)
            event = event[9:]
        await resp.write(event)
    await resp.write_eof()
    return resp


def status(code: int, payload: Any, headers: dict[str, str] | None = None) -> Behaviour:
    """Answer every request with ``code`` and the JSON ``payload``."""

    async def behaviour(
        mock: MockOpenAI, request: web.Request, body: dict[str, Any]
    ) -> web.StreamResponse:
        return web.Response(
            status=code,
            body=orjson.dumps(payload),
            headers=headers or {},
            content_type="application/json",
        )

    return behaviour


def endless(after: list[bytes] | None = None, interval: float = 0.02) -> Behaviour:
    """Stream the first events, then ``after`` (if any), then a content chunk every
    ``interval`` seconds until writing fails; records how it ended in ``mock.stream_ends``."""

    async def behaviour(
        mock: MockOpenAI, request: web.Request, body: dict[str, Any]
    ) -> web.StreamResponse:
        model = str(body.get("model"))
        resp = await _start_sse(request)
        deadline = time.monotonic() + 10  # a bound, so a broken test cannot hang shutdown
        try:
            for event in stream_events(model)[:2] + (after or []):
                await resp.write(event)
            while time.monotonic() < deadline:
                await asyncio.sleep(interval)
                await resp.write(_chunk(model, {"content": "."}))
                # aiohttp buffers writes; a vanished peer shows up as a closing transport.
                if request.transport is None or request.transport.is_closing():
                    raise ConnectionResetError("peer closed")
            mock.stream_ends.append("timeout")
        except (ConnectionError, asyncio.CancelledError) as exc:
            mock.stream_ends.append(type(exc).__name__)
            raise
        return resp

    return behaviour


def drop_after(events: list[bytes]) -> Behaviour:
    """Send ``events`` then cut the TCP connection without ending the stream."""

    async def behaviour(
        mock: MockOpenAI, request: web.Request, body: dict[str, Any]
    ) -> web.StreamResponse:
        resp = await _start_sse(request)
        for event in events:
            await resp.write(event)
        await asyncio.sleep(0.02)
        assert request.transport is not None
        request.transport.close()
        mock.stream_ends.append("dropped")
        return resp

    return behaviour


@dataclass
class Received:
    """One request the mock received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class MockOpenAI:
    """The mock upstream. Use :func:`mock_openai` to run one."""

    base_url: str = ""
    received: list[Received] = field(default_factory=list)
    stream_ends: list[str] = field(default_factory=list)
    script: deque[Behaviour] = field(default_factory=deque)
    #: the answer when nothing is scripted (a Responses mock sets its own)
    default: Behaviour | None = None

    def enqueue(self, *behaviours: Behaviour) -> None:
        """Script the answers to the next requests (then :func:`ok` again)."""
        self.script.extend(behaviours)

    def wait_for_end(self, timeout: float = 5.0) -> str:
        """Poll until a streaming behaviour recorded its end; return how it ended."""
        deadline = time.monotonic() + timeout
        while not self.stream_ends:
            if time.monotonic() > deadline:
                raise AssertionError(f"the upstream stream did not end within {timeout}s")
            time.sleep(0.01)
        return self.stream_ends[-1]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = orjson.loads(raw) if raw else {}
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.received.append(Received(request.path, headers, body))
        behaviour = self.script.popleft() if self.script else (self.default or ok)
        return await behaviour(self, request, body)


@contextlib.contextmanager
def mock_openai(
    path: str = "/v1/chat/completions", default: Behaviour | None = None
) -> Iterator[MockOpenAI]:
    """Run a :class:`MockOpenAI` on its own thread; ``base_url`` ends in ``/v1``.

    ``path`` is the one it answers (another API's mock passes its own), ``default`` the
    behaviour when nothing is scripted (else :func:`ok`)."""
    mock = MockOpenAI(default=default)
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post(path, mock._handle)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=0.5)
    loop.run_until_complete(runner.setup())
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    loop.run_until_complete(site.start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    mock.base_url = f"http://127.0.0.1:{port}/v1"
    try:
        yield mock
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()


__all__ = [
    "ARG_PIECES",
    "TEXT_PIECES",
    "TOOL_ID",
    "USAGE",
    "MockOpenAI",
    "completion",
    "drop_after",
    "endless",
    "free_port",
    "mock_openai",
    "ok",
    "status",
    "stream_events",
]
