"""A client that hangs up before its answer begins stops the upstream work too, and its
usage row says the client left (``client_disconnect``, status 499), not that it failed.

uvicorn lets a handler run on after its client left; for a non-streaming request the
gateway would then keep the upstream generating to the end for nobody. The guarded
connection (server/process/guard.py) cancels the request's task instead, which closes the
upstream connection. Run against a real ``serve`` process, where that protocol is used.
"""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from .gateway_process import serve
from .mock_upstream import free_port


class SilentUpstream:
    """Reads each request and never answers; notes when the gateway hangs up."""

    def __init__(self) -> None:
        self.port = free_port()
        self.requests = 0
        self.hangups = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        self.requests += 1
        while await reader.read(65536):  # the body, then nothing until the gateway closes
            pass
        self.hangups += 1
        writer.close()

    def __enter__(self) -> SilentUpstream:
        self._thread.start()
        start = asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self._server = asyncio.run_coroutine_threadsafe(start, self._loop).result(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture
def upstream() -> Iterator[SilentUpstream]:
    with SilentUpstream() as up:
        yield up


def wait_for(check: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize(
    ("path", "model"),
    [("/v1/chat/completions", "o"), ("/v1/messages", "o"), ("/v1/messages", "a")],
    ids=["passthrough", "translated", "anthropic-passthrough"],
)
def test_a_hang_up_before_the_answer_closes_the_upstream(
    tmp_path: Path, upstream: SilentUpstream, path: str, model: str
) -> None:
    base = f"http://127.0.0.1:{upstream.port}"
    config = {
        "upstreams": {
            "o": {"kind": "openai", "base_url": base + "/v1", "timeout": {"read": 60}},
            "a": {"kind": "anthropic", "base_url": base, "timeout": {"read": 60}},
        },
        "models": [{"name": "o", "upstream": "o"}, {"name": "a", "upstream": "a"}],
        "usage": {"url": f"sqlite:///{tmp_path / 'usage.db'}"},
    }
    with serve(tmp_path, config, log_level="info") as gateway:
        body = orjson.dumps(
            {"model": model, "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        )
        head = (
            f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            f"anthropic-version: 2023-06-01\r\ncontent-length: {len(body)}\r\n\r\n"
        ).encode()
        with socket.create_connection(("127.0.0.1", gateway.port)) as client:
            client.sendall(head + body)
            assert wait_for(lambda: upstream.requests == 1, 10)
        # The upstream would answer in up to 60 s; the gateway lets go as soon as it can.
        assert wait_for(lambda: upstream.hangups == 1, 5), gateway.stderr()
        assert wait_for(lambda: "its request was cancelled" in gateway.stderr(), 5)
        code, log = gateway.stop()
    assert code == 0
    assert "Traceback" not in log and "Exception in ASGI application" not in log
    with sqlite3.connect(tmp_path / "usage.db") as db:  # (written before the process exits)
        rows = db.execute("SELECT status, error_kind FROM interlingua_usage").fetchall()
    assert rows == [(499, "client_disconnect")]
