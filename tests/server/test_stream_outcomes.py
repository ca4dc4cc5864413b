"""How a stream ended, decided once and counted alike by the record, the metrics and the
status page: a client that hangs up right after the last byte has had a success; one that
hangs up halfway is a client disconnect; an upstream that cuts the stream broke it.

    httpx (hangs up when told) -> live gateway -> scripted Chat / Messages / Responses upstream

Every client dialect, on the passthrough path (the upstream speaks it) and the translated
one (it does not). The upstreams write their stream and then *hold the connection open*
until the gateway closes it: the gateway has relayed the stream's last event but not yet
seen its upstream end when the client leaves, which is the order of events that used to
turn a finished stream into a failure on a busy machine (the openai SDK hangs up as soon
as it has read ``[DONE]``). Nothing here sleeps to force an order: the upstream's hold
does, and the test waits only for the rows to arrive.
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
from interlingua.core import (
    BlockStart,
    BlockStop,
    Request,
    StopReason,
    StreamEnd,
    StreamStart,
    TextDelta,
    TextPart,
    Usage,
)
from interlingua.dialects import get_dialect
from interlingua.server import create_app
from interlingua.usage.record import Record

from ..live_server import live_server
from .mock_upstream import MockOpenAI, _start_sse, mock_openai
from .test_keys import Rows

#: the neutral answer every upstream streams, in its own wire
EVENTS = [
    StreamStart("up_1", "up-model", 1_700_000_000),
    BlockStart(0, TextPart("")),
    TextDelta(0, "Hel"),
    TextDelta(0, "lo"),
    BlockStop(0),
    StreamEnd(StopReason.END_TURN, usage=Usage(input_tokens=9, output_tokens=2)),
]
#: how far into the answer a halfway stream gets (start, the block, one delta)
HALF = 3

#: per dialect: the path its upstream answers, its request, and the line of its last event
DIALECTS: dict[str, tuple[str, dict[str, Any], bytes]] = {
    "openai": (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "stream": True},
        b"data: [DONE]",
    ),
    "anthropic": (
        "/v1/messages",
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 16, "stream": True},
        b"event: message_stop",
    ),
    "responses": ("/v1/responses", {"input": "hi", "stream": True}, b"event: response.completed"),
}
#: the upstream a translated request of each client dialect goes to
TRANSLATED_TO = {"openai": "anthropic", "anthropic": "openai", "responses": "anthropic"}
#: the start of a line each client dialect's stream holds before its end (where a client
#: that leaves halfway hangs up)
EARLY_LINE = {
    "openai": b"data: ",
    "anthropic": b"event: content_block_delta",
    "responses": b"event: response.output_text.delta",
}


def wire(dialect: str, events: list[Any]) -> list[bytes]:
    """``events`` as an upstream of ``dialect`` sends them, one write each."""
    # (a Chat stream with its usage chunk, as the gateway asks an upstream for one)
    request = Request(model="up-model", messages=(), stream=True, include_usage=True)
    encoder = get_dialect(dialect).stream_encoder(request)
    return [encoder.encode(event) for event in events]


def scripted(dialect: str) -> Any:
    """The upstream's behaviour: the request's ``metadata``-free body says nothing, so the
    model name does: ``<how>-...`` with how in whole / half / cut."""

    async def behaviour(mock: MockOpenAI, request: web.Request, body: dict[str, Any]) -> Any:
        how = str(body.get("model", "")).split("-", 1)[0]
        resp = await _start_sse(request)
        for data in wire(dialect, EVENTS if how == "whole" else EVENTS[:HALF]):
            await resp.write(data)
        transport = request.transport
        assert transport is not None
        if how == "cut":
            transport.close()  # (after the bytes written: an asyncio transport flushes first)
            mock.stream_ends.append("cut")
            return resp
        # Hold the stream open, its end unsaid, until the gateway lets go of it.
        deadline = time.monotonic() + 10
        while not transport.is_closing() and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        mock.stream_ends.append("released" if transport.is_closing() else "timeout")
        return resp

    return behaviour


@contextlib.contextmanager
def upstreams() -> Iterator[dict[str, MockOpenAI]]:
    with (
        mock_openai(DIALECTS["openai"][0], default=scripted("openai")) as chat,
        mock_openai(DIALECTS["anthropic"][0], default=scripted("anthropic")) as messages,
        mock_openai(DIALECTS["responses"][0], default=scripted("responses")) as responses,
    ):
        yield {"openai": chat, "anthropic": messages, "responses": responses}


class Stack:
    def __init__(self, url: str, rows: Rows) -> None:
        self.url, self.rows = url, rows


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with upstreams() as mocks:
        models = [
            {"name": f"{how}-{client}-{path}", "upstream": upstream, "model": f"{how}-up"}
            for how in ("whole", "half", "cut")
            for client in DIALECTS
            for path, upstream in (("pass", client), ("trans", TRANSLATED_TO[client]))
        ]
        config = parse_config(
            {
                "upstreams": {
                    name: {"kind": name, "base_url": mock.base_url} for name, mock in mocks.items()
                },
                "models": models,
                "usage": False,
                # one failure cools a deployment: what counts against it shows at once
                "routing": {"cooldown": {"failures": 1, "window": 60, "duration": 60}},
            }
        )
        rows = Rows()
        with live_server(create_app(config, record_sinks=[rows])) as url:
            yield Stack(url, rows)


def ask(stack: Stack, client: str, model: str, hang_up_at: bytes | None) -> str:
    """One stream request; the client reads up to the line that holds ``hang_up_at``
    (None: to the end) and hangs up at once. The gateway's request id."""
    path, body, _ = DIALECTS[client]
    headers = {"anthropic-version": "2023-06-01"} if client == "anthropic" else {}
    with (
        httpx.Client(timeout=10) as http,
        http.stream("POST", stack.url + path, json={**body, "model": model}, headers=headers) as r,
    ):
        assert r.status_code == 200
        for line in r.iter_lines():
            if hang_up_at is not None and line.startswith(hang_up_at.decode()):
                break  # (leaving the block closes the connection: the rest is unread)
        return r.headers["x-request-id"]


def row_of(stack: Stack, request_id: str) -> Record:
    (row,) = stack.rows.matching(lambda r: r.request_id == request_id)
    return row


def metric(text: str, name: str, model: str, kind: str | None = None) -> float:
    """The value of ``name`` for ``model`` (and error ``kind``) in a /metrics page; 0 when
    absent."""
    total = 0.0
    for line in text.splitlines():
        ours = line.startswith(name + "{") and f'model="{model}"' in line
        if ours and (kind is None or f'kind="{kind}"' in line):
            total += float(line.rsplit(" ", 1)[1])
    return total


@pytest.mark.parametrize("path", ["pass", "trans"])
@pytest.mark.parametrize("client", list(DIALECTS))
def test_three_endings_three_outcomes(stack: Stack, client: str, path: str) -> None:
    last = DIALECTS[client][2]
    # Hangs up right after the last event: a success.
    whole = row_of(stack, ask(stack, client, f"whole-{client}-{path}", hang_up_at=last))
    assert (whole.status, whole.error, whole.stream) == (200, None, True)
    assert (whole.input_tokens, whole.output_tokens) == (9, 2)
    # Hangs up halfway (the upstream still holds the rest): the client's doing.
    half = row_of(stack, ask(stack, client, f"half-{client}-{path}", EARLY_LINE[client]))
    assert (half.status, half.error) == (200, "client_disconnect")
    # The upstream cuts it halfway: a broken stream, its 200 kept.
    cut = row_of(stack, ask(stack, client, f"cut-{client}-{path}", hang_up_at=None))
    assert (cut.status, cut.error) == (200, "upstream_error")
    names = {how: f"{how}-{client}-{path}" for how in ("whole", "half", "cut")}

    # The metrics count the same three outcomes.
    page = httpx.get(stack.url + "/metrics").text
    errors, left = "interlingua_request_errors_total", "interlingua_client_disconnects_total"
    assert [metric(page, errors, names[how]) for how in names] == [0, 0, 1]
    assert metric(page, errors, names["cut"], "upstream_error") == 1
    assert [metric(page, left, names[how]) for how in names] == [0, 1, 0]
    assert [metric(page, "interlingua_requests_total", names[how]) for how in names] == [1, 1, 1]

    # The status page: one failure, the cut one; only its deployment cools down.
    data = httpx.get(stack.url + "/ui/data").json()
    failed = [sum(data["traffic"]["model"][names[how]]["errors"]) for how in names]
    assert failed == [0, 0, 1]
    listed = {error["request_id"] for error in data["errors"]}
    assert cut.request_id in listed and not {whole.request_id, half.request_id} & listed
    cooling = {
        model["name"]: model["deployments"][0]["cooling_for"] is not None
        for model in data["models"]
        if model["name"] in names.values()
    }
    assert cooling == {names["whole"]: False, names["half"]: False, names["cut"]: True}
