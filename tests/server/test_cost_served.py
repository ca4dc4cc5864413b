"""Each request's cost behind a running gateway, from the usage its upstream reported:
passthrough and translated, stream and not, in the Chat and Messages dialects, with
cache reads, cache writes and reasoning each at their own rate (the worked examples of
docs/usage-log.md, "Cost"); a fallback priced at its own model; NULL when unpriced.

    httpx client -> live gateway (prices in the config) -> mock Chat / Messages upstreams
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml
from aiohttp import web

from interlingua.config import load_config
from interlingua.server import create_app
from interlingua.server.accounting import Accounting
from interlingua.server.app import OPENAI
from interlingua.server.asgi_io import BytesResponse
from interlingua.usage.cost import Pricing
from interlingua.usage.record import CONTINUED, Record

from ..live_server import live_server
from .mock_upstream import MockOpenAI, mock_openai, status

#: what the Chat upstream reports: 200,600 input of which 192,000 cached, 30,000 output
#: of which 19,200 reasoning ($0.5615 at a gpt-4o-class price)
OPENAI_USAGE = {
    "prompt_tokens": 200600,
    "completion_tokens": 30000,
    "total_tokens": 230600,
    "prompt_tokens_details": {"cached_tokens": 192000, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 19200, "audio_tokens": 0},
}
OPENAI_COST = Decimal("0.5615")
#: what the Messages upstream reports: input excludes the cache ($0.2133 at Sonnet 4.5's)
ANTHROPIC_USAGE = {
    "input_tokens": 20950,
    "cache_creation_input_tokens": 12000,
    "cache_read_input_tokens": 100000,
    "output_tokens": 5030,
    # (8,000 of the writes to the one-hour cache: $0.2313 with that priced apart)
    "cache_creation": {"ephemeral_5m_input_tokens": 4000, "ephemeral_1h_input_tokens": 8000},
}
ANTHROPIC_COST = Decimal("0.2133")


def _sse(data: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


async def chat_answer(mock: MockOpenAI, request: web.Request, body: dict[str, Any]) -> Any:
    """An OpenAI answer with :data:`OPENAI_USAGE` (a stream's usage chunk when asked)."""
    model = body["model"]
    base = {"id": "chatcmpl-c", "created": 1, "model": model}
    if not body.get("stream"):
        message = {"role": "assistant", "content": "hi", "refusal": None}
        choice = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
        answer = {**base, "object": "chat.completion", "choices": [choice], "usage": OPENAI_USAGE}
        return web.json_response(answer)
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    chunk = {**base, "object": "chat.completion.chunk"}
    for delta, finish in (({"role": "assistant", "content": "hi"}, None), ({}, "stop")):
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        await resp.write(_sse({**chunk, "choices": [choice]}))
    if (body.get("stream_options") or {}).get("include_usage"):
        await resp.write(_sse({**chunk, "choices": [], "usage": OPENAI_USAGE}))
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


async def messages_answer(mock: MockOpenAI, request: web.Request, body: dict[str, Any]) -> Any:
    """A Messages answer with :data:`ANTHROPIC_USAGE` (a stream's input and cache counts in
    ``message_start``, its output in ``message_delta``, as Anthropic sends them)."""
    message = {"id": "msg_c", "type": "message", "role": "assistant", "model": body["model"]}
    if not body.get("stream"):
        content = [{"type": "text", "text": "hi"}]
        answer = {**message, "content": content, "stop_reason": "end_turn",
                  "stop_sequence": None, "usage": ANTHROPIC_USAGE}  # fmt: skip
        return web.json_response(answer)
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {**ANTHROPIC_USAGE, "output_tokens": 1}}  # fmt: skip
    events = [
        ("message_start", {"type": "message_start", "message": start}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": "hi"}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 5030}}),
        ("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip
    for name, data in events:
        await resp.write(_sse(data, name))
    await resp.write_eof()
    return resp


class Rows:
    """A record sink that keeps every finished row."""

    def __init__(self) -> None:
        self.rows: list[Record] = []

    def records(self, rows: Sequence[Record]) -> None:
        self.rows.extend(rows)

    def wait(self, count: int) -> list[Record]:
        deadline = time.monotonic() + 10
        while len(self.rows) < count:
            assert time.monotonic() < deadline, f"{len(self.rows)} rows of {count}"
            time.sleep(0.01)
        rows, self.rows = self.rows, []
        return rows


SONNET = {"input": 3.00, "output": 15.00, "cache_read": 0.30, "cache_write": 3.75}
GPT = {"input": 2.50, "output": 10.00, "cache_read": 1.25}


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Rows]]:
    tmp = tmp_path_factory.mktemp("cost")
    with (
        mock_openai(default=chat_answer) as chat,
        mock_openai("/v1/messages", default=messages_answer) as anth,
        mock_openai(default=status(500, {"error": {"message": "down", "type": "server"}})) as bad,
    ):
        config = {
            "upstreams": {
                "chat": {"kind": "openai", "base_url": chat.base_url},
                "anth": {"kind": "anthropic", "base_url": anth.base_url},
                "bad": {"kind": "openai", "base_url": bad.base_url},
            },
            "models": [
                {"name": "gpt", "upstream": "chat", "model": "gpt-4o", "price": GPT},
                {"name": "claude", "upstream": "anth", "model": "claude-sonnet-4-5",
                 "price": SONNET},
                {"name": "free-claude", "upstream": "anth", "model": "claude-x"},
                {"name": "claude-1h", "upstream": "anth", "model": "claude-sonnet-4-5-1h",
                 "price": {**SONNET, "cache_write_1h": 6.00}},
                {"name": "primary", "upstream": "bad", "model": "gpt-5",
                 "price": {"input": 100, "output": 100}, "fallbacks": ["gpt"]},
            ],
            "usage": False,
        }  # fmt: skip
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        rows = Rows()
        with live_server(create_app(load_config(path), record_sinks=[rows])) as base:
            yield base, rows


def _ask(base: str, dialect: str, model: str, stream: bool) -> None:
    hello = [{"role": "user", "content": "hello"}]
    body: dict[str, Any] = {"model": model, "messages": hello, "stream": stream}
    if dialect == "anthropic":
        body["max_tokens"] = 64
        url = base + "/v1/messages"
    else:
        url = base + "/v1/chat/completions"
    with httpx.stream("POST", url, json=body, timeout=30) as response:
        response.read()
        assert response.status_code == 200, response.text


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
@pytest.mark.parametrize(
    ("dialect", "model", "cost", "counts"),
    [
        # passthrough: the same dialect both sides, the bytes relayed
        ("openai", "gpt", OPENAI_COST, (200600, 30000, 192000, 0, 19200)),
        ("anthropic", "claude", ANTHROPIC_COST, (132950, 5030, 100000, 12000, 0)),
        # translated: the other dialect's client
        ("anthropic", "gpt", OPENAI_COST, (200600, 30000, 192000, 0, 19200)),
        ("openai", "claude", ANTHROPIC_COST, (132950, 5030, 100000, 12000, 0)),
    ],
    ids=["chat-passthrough", "messages-passthrough", "messages-to-chat", "chat-to-messages"],
)
def test_a_request_costs_what_its_upstream_reported(
    gateway: tuple[str, Rows],
    dialect: str,
    model: str,
    cost: Decimal,
    counts: tuple[int, ...],
    stream: bool,
) -> None:
    base, rows = gateway
    _ask(base, dialect, model, stream)
    (row,) = rows.wait(1)
    got = (row.input_tokens, row.output_tokens, row.cached_tokens)
    assert (*got, row.cache_write_tokens, row.reasoning_tokens) == counts
    assert row.cost_usd == cost and row.stream is stream


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_a_fallback_is_priced_at_its_own_model(gateway: tuple[str, Rows], stream: bool) -> None:
    base, rows = gateway
    _ask(base, "openai", "primary", stream)
    (row,) = rows.wait(1)
    assert (row.upstream, row.upstream_model) == ("chat", "gpt-4o")
    assert row.cost_usd == OPENAI_COST  # (at gpt-5's $100 it would be $23)


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
def test_one_hour_cache_writes_at_their_own_price_when_relayed(
    gateway: tuple[str, Rows], stream: bool
) -> None:
    """A relayed Messages answer keeps Anthropic's split of the cache writes; a
    translated one (the neutral usage has no such split) bills them all as 5-minute."""
    base, rows = gateway
    _ask(base, "anthropic", "claude-1h", stream)
    (row,) = rows.wait(1)
    assert (row.cache_write_tokens, row.cache_write_1h_tokens) == (12000, 8000)
    assert row.cost_usd == Decimal("0.2313")
    _ask(base, "openai", "claude-1h", stream)
    (row,) = rows.wait(1)
    assert (row.cache_write_tokens, row.cache_write_1h_tokens) == (12000, 0)
    assert row.cost_usd == ANTHROPIC_COST


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_an_unpriced_model_costs_null_not_zero(gateway: tuple[str, Rows], dialect: str) -> None:
    base, rows = gateway
    _ask(base, dialect, "free-claude", True)
    (row,) = rows.wait(1)
    assert row.input_tokens == 132950 and row.cost_usd is None


def test_a_continued_streams_attempts_are_each_priced_at_their_own_deployment(
    tmp_path: Path,
) -> None:
    """The broken attempt's row (error ``continued``) at its deployment's price, the
    request's row at the finishing one's: their sum is what the request cost."""
    path = tmp_path / "config.yaml"
    models = [
        {"name": "m", "upstream": "anth", "model": "claude-sonnet-4-5", "price": SONNET,
         "on_stream_break": "continue"},
        {"name": "m", "upstream": "chat", "model": "gpt-4o", "price": GPT},
    ]  # fmt: skip
    upstreams = {"chat": {"kind": "fake"}, "anth": {"kind": "fake"}}
    path.write_text(yaml.safe_dump({"upstreams": upstreams, "models": models}))
    rows = Rows()
    accounting = Accounting([rows], Pricing(load_config(path)))
    tab = accounting.open("r", "openai")  # (no loop: each row drained at once)
    broken = Record(at=0.0, request_id="r", key=None, dialect="openai", model="m",
                    upstream="anth", upstream_model="claude-sonnet-4-5", error=CONTINUED,
                    input_tokens=132950, output_tokens=5030, cached_tokens=100000,
                    cache_write_tokens=12000)  # fmt: skip
    accounting.add_row(broken)
    tab.record.upstream, tab.record.upstream_model = "chat", "gpt-4o"
    body = orjson.dumps({"id": "c", "choices": [], "usage": OPENAI_USAGE})
    accounting.close(tab, BytesResponse(body), OPENAI)
    accounting.drain()
    assert [row.cost_usd for row in rows.rows] == [ANTHROPIC_COST, OPENAI_COST]
    assert sum(row.cost_usd or 0 for row in rows.rows) == Decimal("0.7748")
