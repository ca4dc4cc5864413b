"""The Responses WebSocket on a real ``interlingua serve`` process (its uvicorn protocols,
signals and exit status are only real there), over a mock OpenAI Chat upstream.

A socket is served and chains in its own process; on SIGTERM an idle socket is closed
at once with 1001, a socket with a response in flight finishes it and is then closed
with 1001, a response longer than ``shutdown_timeout`` ends with the in-band error
before the close; the process exits 0 without a traceback.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from ..gateway_process import serve
from ..mock_upstream import MockOpenAI, endless, mock_openai, stream_events
from ..process.test_shutdown import _short_stream
from .socket_helpers import create, response_events, ws_url

SHUTDOWN_TIMEOUT = 2.5


@pytest.fixture
def mock() -> Iterator[MockOpenAI]:
    with mock_openai() as upstream:
        yield upstream


def _config(base_url: str) -> dict[str, Any]:
    return {
        "server": {"shutdown_timeout": SHUTDOWN_TIMEOUT},
        "upstreams": {"mock": {"kind": "openai", "base_url": base_url}},
        "models": [{"name": "*", "upstream": "mock"}],
    }


async def _closed_code(ws: Any, timeout: float = 10) -> int | None:
    """Read until the server closes; its close code."""
    with pytest.raises(ConnectionClosed) as closed:
        while True:
            await asyncio.wait_for(ws.recv(), timeout)
    return closed.value.rcvd.code if closed.value.rcvd is not None else None


async def test_serve_answers_and_chains_on_a_socket(tmp_path: Path, mock: MockOpenAI) -> None:
    with serve(tmp_path, _config(mock.base_url)) as gw:
        async with connect(
            ws_url(gw.url), additional_headers={"OpenAI-Beta": "responses_websockets=2026-02-06"}
        ) as ws:
            await ws.send(create("gpt-4o-mini", "hi", generate=False, store=False))
            warm = await response_events(ws)
            assert warm[-1]["type"] == "response.completed" and not mock.received
            await ws.send(
                create("gpt-4o-mini", "weather?", previous_response_id=warm[-1]["response"]["id"])
            )
            turn = await response_events(ws)
        assert turn[-1]["type"] == "response.completed"
        kinds = [item["type"] for item in turn[-1]["response"]["output"]]
        assert kinds == ["message", "function_call"]  # the mock's text and tool call
        sent = mock.received[-1].body["messages"]
        assert [m["content"] for m in sent] == ["hi", "weather?"]
        code, log = gw.stop()
    assert code == 0 and "Traceback" not in log


async def test_sigterm_drains_sockets(tmp_path: Path, mock: MockOpenAI) -> None:
    # ~1 s of events: shorter than the shutdown timeout, so it finishes.
    mock.enqueue(_short_stream(1.0 / len(stream_events("m"))))
    with serve(tmp_path, _config(mock.base_url)) as gw:
        idle = await connect(ws_url(gw.url))
        busy = await connect(ws_url(gw.url))
        await busy.send(create("gpt-4o-mini", "hi"))
        assert json.loads(await busy.recv())["type"] == "response.created"
        gw.proc.send_signal(signal.SIGTERM)
        assert await _closed_code(idle, 5) == 1001
        events = await response_events(busy)
        assert events[-1]["type"] == "response.completed"
        assert await _closed_code(busy) == 1001
        code, log = gw.stop()
    assert code == 0 and "Traceback" not in log


async def test_a_response_past_the_shutdown_timeout_ends_in_band(
    tmp_path: Path, mock: MockOpenAI
) -> None:
    mock.enqueue(endless())
    with serve(tmp_path, _config(mock.base_url)) as gw:
        ws = await connect(ws_url(gw.url))
        await ws.send(create("gpt-4o-mini", "talk"))
        assert json.loads(await ws.recv())["type"] == "response.created"
        gw.proc.send_signal(signal.SIGTERM)
        events = await response_events(ws, timeout=SHUTDOWN_TIMEOUT + 5)
        assert events[-1]["type"] in ("response.failed", "error")
        assert "shutting down" in json.dumps(events[-1])
        assert await _closed_code(ws) == 1001
        code, log = gw.stop()
    assert code == 0 and "Traceback" not in log
    assert mock.wait_for_end() != "timeout"  # the upstream stream was closed, not run out
