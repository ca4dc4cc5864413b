"""Helpers for the WebSocket tests: the gateway on uvicorn with the production protocols
(server/process/serve.py's config: the guard's HTTP protocol and server/process/socket_guard.py), in a
thread; a slow scripted upstream that records how its stream ended; frame readers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import uvicorn
from websockets.asyncio.client import ClientConnection

from interlingua.config import Config
from interlingua.core import (
    BlockStart,
    BlockStop,
    Request,
    StopReason,
    StreamEnd,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    Usage,
)
from interlingua.server.process.serve import GatewayServerConfig
from interlingua.upstreams.base import Upstream
from interlingua.upstreams.fake import FakeUpstream

from ...live_server import running
from ..mock_upstream import free_port

TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")


@contextlib.contextmanager
def guarded_gateway(
    config: Config, upstreams: dict[str, Upstream]
) -> Iterator[tuple[str, uvicorn.Server]]:
    """Serve ``config`` over ``upstreams`` as ``interlingua serve`` does; yield the base
    URL (``http://127.0.0.1:PORT``) and the server (set ``should_exit`` to drain it)."""
    port = free_port()
    server_config = GatewayServerConfig(
        config, log_level="warning", upstreams=upstreams, host="127.0.0.1", port=port
    )
    with running(server_config, stop_within=15) as server:
        yield f"http://127.0.0.1:{port}", server


def ws_url(base: str) -> str:
    return "ws" + base.removeprefix("http") + "/v1/responses"


async def response_events(ws: ClientConnection, timeout: float = 10) -> list[dict[str, Any]]:
    """The frames of one response, up to its terminal event (or an error frame)."""
    events: list[dict[str, Any]] = []
    while True:
        event = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        events.append(event)
        if event["type"] in TERMINAL:
            return events


def create(model: str, text: Any, **fields: Any) -> str:
    """A ``response.create`` frame."""
    return json.dumps({"type": "response.create", "model": model, "input": text, **fields})


class SlowUpstream(FakeUpstream):
    """Streams ``deltas`` text deltas ``pause`` seconds apart; notes how the stream ended
    (``closed`` when its generator was closed, ``finished`` only if it ran to the end)."""

    def __init__(self, name: str, deltas: int = 10, pause: float = 0.02) -> None:
        super().__init__(name)
        self.deltas = deltas
        self.pause = pause
        self.started = threading.Event()
        self.closed = threading.Event()
        self.finished = False

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        self.started.set()
        try:
            yield StreamStart("resp_slow", request.model, 1_700_000_000)
            yield BlockStart(0, TextPart(""))
            for i in range(self.deltas):
                yield TextDelta(0, f"{i} ")
                await asyncio.sleep(self.pause)
            yield BlockStop(0)
            yield StreamEnd(StopReason.END_TURN, usage=Usage(3, self.deltas))
            self.finished = True
        finally:
            self.closed.set()


async def until(predicate: Any, timeout: float = 5) -> None:
    """Wait (without blocking the loop) until ``predicate()`` holds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        await asyncio.sleep(0.01)
