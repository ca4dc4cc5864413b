"""A tiny scripted aiohttp server on 127.0.0.1 standing in for an upstream.

Each test sets ``stub.handler`` to a coroutine ``(request, body) -> StreamResponse``; the
stub records every request (path, lowercase headers, raw body). Handlers that must hang
wait on ``stub.release`` so teardown never waits for them.

The HTTP upstream tests get the ``stub`` fixture through tests/upstreams/conftest.py;
other suites import it from here (a fixture is found where it is imported).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import orjson
import pytest
from aiohttp import web

__all__ = ["Handler", "Seen", "Stub", "json_response", "sse_response", "stub"]

Handler = Callable[[web.Request, bytes], Awaitable[web.StreamResponse]]


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> dict[str, object]:
        data: dict[str, object] = orjson.loads(self.body)
        return data


@dataclass
class Stub:
    url: str = ""
    handler: Handler | None = None
    seen: list[Seen] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)


def json_response(
    payload: object, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    return web.Response(
        body=orjson.dumps(payload), status=status, content_type="application/json", headers=headers
    )


async def sse_response(
    request: web.Request, chunks: list[bytes], *, cut: bool = False
) -> web.StreamResponse:
    """Send ``chunks`` as an event stream; ``cut`` drops the connection instead of ending."""
    resp = web.StreamResponse(headers={"content-type": "text/event-stream", "x-request-id": "r1"})
    await resp.prepare(request)
    for chunk in chunks:
        await resp.write(chunk)
        await asyncio.sleep(0)
    if cut:
        assert request.transport is not None
        request.transport.close()
        return resp
    await resp.write_eof()
    return resp


@pytest.fixture
async def stub() -> AsyncIterator[Stub]:
    state = Stub()

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        state.seen.append(Seen(request.path, headers, body))
        assert state.handler is not None, "test forgot to set stub.handler"
        return await state.handler(request, body)

    app = web.Application()
    app.router.add_route("POST", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    state.url = f"http://{host}:{port}"
    try:
        yield state
    finally:
        state.release.set()
        await runner.cleanup()
