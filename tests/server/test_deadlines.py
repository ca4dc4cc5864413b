"""Deadlines per phase of a stream (``timeout.first_byte``, ``timeout.idle``) end to end.

    httpx -> live gateway -> scripted Chat / Messages / Responses upstream

Every client dialect, on the passthrough path and the translated one. The upstream
behaviours, chosen by the upstream model name:

* ``slow``: sends the stream's opening event at once (a Chat role delta, Messages
  ``message_start``, Responses ``response.created``), then only keep-alives, until the
  gateway lets go. With ``first_byte`` set the gateway gives up on it before anything
  reached the client and the fallback answers, without a retry on the silent one.
* ``stall``: sends some text, then only keep-alives until the gateway lets go. With
  ``idle`` set the stream ends with the typed in-band timeout error: a broken stream.
* ``mute``: sends nothing at all, not even its status line, until the gateway lets go.
  With ``read`` set (and no phase limit) the gateway gives up on it after ``read``, and
  does not ask it again either.
* ``whole``: the whole answer.

The keep-alives come every 20 ms, far inside the limits: they would reset a read
timeout, and must not reset these. Nothing sleeps to force an order: the upstreams hold
until the gateway closes them (at most 10 s, which the assertions on elapsed time rule out).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from aiohttp import web

from interlingua.config import parse_config
from interlingua.server import create_app

from ..live_server import live_server
from .mock_upstream import MockOpenAI, _start_sse, mock_openai
from .test_keys import Rows
from .test_stream_outcomes import DIALECTS, EVENTS, HALF, TRANSLATED_TO, wire

#: seconds: the limits under test (each case waits for one at most once)
LIMIT = 0.3
#: what each upstream dialect sends to keep a silent stream open
KEEP_ALIVE = {
    "openai": b": ping\n\n",
    "anthropic": b'event: ping\ndata: {"type": "ping"}\n\n',
    "responses": b'event: keepalive\ndata: {"type": "keepalive"}\n\n',
}


def scripted(dialect: str) -> Any:
    """The upstream's behaviour by its model name's first word (module docstring)."""

    async def behaviour(mock: MockOpenAI, request: web.Request, body: dict[str, Any]) -> Any:
        how = str(body.get("model", "")).split("-", 1)[0]
        transport = request.transport
        assert transport is not None
        if how == "mute":
            deadline = time.monotonic() + 10
            while not transport.is_closing() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            return web.Response(status=500)
        resp = await _start_sse(request)
        events = {"whole": EVENTS, "slow": EVENTS[:1], "stall": EVENTS[:HALF]}[how]
        for data in wire(dialect, events):
            await resp.write(data)
        if how == "whole":
            await resp.write_eof()
            return resp
        deadline = time.monotonic() + 10
        with contextlib.suppress(ConnectionError):
            while not transport.is_closing() and time.monotonic() < deadline:
                await resp.write(KEEP_ALIVE[dialect])
                await asyncio.sleep(0.02)
        mock.stream_ends.append("released" if transport.is_closing() else "timeout")
        return resp

    return behaviour


class Stack:
    def __init__(self, url: str, rows: Rows, mocks: dict[str, MockOpenAI]) -> None:
        self.url, self.rows, self.mocks = url, rows, mocks


def _models() -> list[dict[str, Any]]:
    models: list[dict[str, Any]] = []
    for client in DIALECTS:
        for path, up in (("pass", client), ("trans", TRANSLATED_TO[client])):
            tail = f"{client}-{path}"
            models += [
                # the upstream model names say who asked, so each case counts its own
                {"name": f"slow-{tail}", "upstream": f"{up}-timed", "model": f"slow-{tail}",
                 "fallbacks": [f"whole-{tail}"]},
                {"name": f"whole-{tail}", "upstream": up, "model": f"whole-{tail}"},
                {"name": f"stall-{tail}", "upstream": f"{up}-timed", "model": f"stall-{tail}"},
                {"name": f"alone-{tail}", "upstream": f"{up}-timed", "model": f"slow-a-{tail}"},
                {"name": f"mute-{tail}", "upstream": f"{up}-read", "model": f"mute-{tail}",
                 "fallbacks": [f"whole-{tail}"]},
            ]  # fmt: skip
    return models


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with contextlib.ExitStack() as stack:
        mocks = {
            d: stack.enter_context(mock_openai(DIALECTS[d][0], default=scripted(d)))
            for d in DIALECTS
        }
        timed = {"first_byte": LIMIT, "idle": LIMIT, "read": 30}
        upstreams: dict[str, Any] = {}
        retries = {"max": 2, "max_wait": 0.01}
        for name, mock in mocks.items():
            upstreams[name] = {"kind": name, "base_url": mock.base_url}
            upstreams[f"{name}-timed"] = {**upstreams[name], "timeout": timed, "retries": retries}
            read = {"timeout": {"read": LIMIT}, "retries": retries}
            upstreams[f"{name}-read"] = {**upstreams[name], **read}
        config = parse_config(
            {
                "upstreams": upstreams,
                "models": _models(),
                "usage": False,
                "routing": {"cooldown": {"failures": 1, "window": 60, "duration": 60}},
            }
        )
        rows = Rows()
        with live_server(create_app(config, record_sinks=[rows])) as url:
            yield Stack(url, rows, mocks)


def ask(stack: Stack, client: str, model: str) -> tuple[int, str, str]:
    """One stream request read to its end: status, the whole body, the request id."""
    path, body, _ = DIALECTS[client]
    headers = {"anthropic-version": "2023-06-01"} if client == "anthropic" else {}
    with httpx.Client(timeout=10) as http:
        r = http.post(stack.url + path, json={**body, "model": model}, headers=headers)
    return r.status_code, r.text, r.headers["x-request-id"]


def asked(mock: MockOpenAI, model: str) -> int:
    """How many requests for upstream model ``model`` ``mock`` received."""
    return sum(1 for r in mock.received if r.body.get("model") == model)


def _cooling(stack: Stack, name: str) -> bool:
    data = httpx.get(stack.url + "/ui/data").json()
    (model,) = (m for m in data["models"] if m["name"] == name)
    return model["deployments"][0]["cooling_for"] is not None


@pytest.mark.parametrize("how", ["slow", "mute"])
@pytest.mark.parametrize("path", ["pass", "trans"])
@pytest.mark.parametrize("client", list(DIALECTS))
def test_a_silent_start_goes_to_the_fallback_at_once(
    stack: Stack, client: str, path: str, how: str
) -> None:
    tail = f"{client}-{path}"
    mock = stack.mocks[client if path == "pass" else TRANSLATED_TO[client]]
    answered = asked(mock, f"whole-{tail}")  # (the two cases share the fallback)
    started = time.monotonic()
    status, text, _ = ask(stack, client, f"{how}-{tail}")
    elapsed = time.monotonic() - started
    assert status == 200
    assert "Hel" in text and "lo" in text  # the fallback's whole answer
    assert "first_byte" not in text and "timed out" not in text  # (no in-band error)
    # One attempt on the silent one, though it has retries left: not two more waits.
    assert asked(mock, f"{how}-{tail}") == 1
    assert asked(mock, f"whole-{tail}") == answered + 1
    assert LIMIT <= elapsed < 3 * LIMIT + 1.5


@pytest.mark.parametrize("path", ["pass", "trans"])
@pytest.mark.parametrize("client", list(DIALECTS))
def test_a_silent_start_without_a_fallback_is_a_504_not_retried(
    stack: Stack, client: str, path: str
) -> None:
    tail = f"{client}-{path}"
    mock = stack.mocks[client if path == "pass" else TRANSLATED_TO[client]]
    status, text, _ = ask(stack, client, f"alone-{tail}")
    assert status == 504
    assert "first_byte" in text
    assert asked(mock, f"slow-a-{tail}") == 1  # retries.max is 2: a silent one gets none


@pytest.mark.parametrize("path", ["pass", "trans"])
@pytest.mark.parametrize("client", list(DIALECTS))
def test_a_stall_mid_stream_breaks_it(stack: Stack, client: str, path: str) -> None:
    tail = f"{client}-{path}"
    started = time.monotonic()
    status, text, request_id = ask(stack, client, f"stall-{tail}")
    assert time.monotonic() - started < 3 * LIMIT + 1.5
    assert status == 200
    assert "Hel" in text  # what came before the stall reached the client
    assert "timeout.idle" in text and "stalled" in text  # the typed in-band error
    (row,) = stack.rows.matching(lambda r: r.request_id == request_id)
    assert (row.status, row.error) == (200, "timeout")  # a broken stream
    assert _cooling(stack, f"stall-{tail}")  # counted against the deployment
