"""Keep-alives on translated streams whose upstream goes quiet, and the pump under them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import anthropic
import httpx
import openai
import pytest

from interlingua.config import parse_config
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
from interlingua.server import create_app, pings
from interlingua.server.pings import Ticker
from interlingua.upstreams.base import Upstream

from ..live_server import live_server

CONFIG = parse_config(
    {"upstreams": {"slow": {"kind": "fake"}}, "models": [{"name": "m", "upstream": "slow"}]}
)


class _Thinker(Upstream):
    """Sends a start, goes quiet for ``pause`` seconds (a model thinking), then answers."""

    def __init__(self, pause: float) -> None:
        super().__init__("slow")
        self.pause = pause

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        yield StreamStart("r1", "m", 1, Usage(input_tokens=3))
        await asyncio.sleep(self.pause)
        yield BlockStart(0, TextPart(""))
        yield TextDelta(0, "Done thinking.")
        yield BlockStop(0)
        yield StreamEnd(StopReason.END_TURN, usage=Usage(input_tokens=3, output_tokens=3))


@pytest.fixture
def quick_pings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pings, "KEEPALIVE_SECONDS", 0.05)


async def test_a_quiet_upstream_gets_anthropic_pings(quick_pings: None) -> None:
    app = create_app(CONFIG, upstreams={"slow": _Thinker(0.4)})
    body = {
        "model": "m",
        "max_tokens": 20,
        "stream": True,
        "messages": [{"role": "user", "content": "?"}],
    }
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://g") as c:
        resp = await c.post("/v1/messages", json=body)
    text = resp.text
    pings = text.count("event: ping")
    # One ping after the first block start (as the API does) plus the keep-alives.
    assert pings >= 4, text
    assert text.index("event: ping") > text.index("message_start")
    assert "Done thinking." in text and text.rstrip().endswith('{"type":"message_stop"}')


def test_real_clients_read_through_keepalives(quick_pings: None) -> None:
    with (
        live_server(create_app(CONFIG, upstreams={"slow": _Thinker(0.3)})) as url,
        anthropic.Anthropic(base_url=url, api_key="k", max_retries=0) as claude,
        openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as gpt,
    ):
        with claude.messages.stream(
            model="m", max_tokens=20, messages=[{"role": "user", "content": "?"}]
        ) as stream:
            final = stream.get_final_message()
        assert final.content[0].type == "text" and final.content[0].text == "Done thinking."
        chunks = list(
            gpt.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "?"}], stream=True
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "Done thinking."
        raw = httpx.post(
            url + "/v1/chat/completions",
            json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "?"}]},
        ).text
        assert ": ping" in raw  # OpenAI clients get SSE comments, which they ignore


async def test_the_ticker_pings_only_during_silences_and_stops() -> None:
    sent: list[bytes] = []

    async def send(message: dict[str, object]) -> None:
        sent.append(message["body"])  # type: ignore[arg-type]

    ticker = Ticker(send, b": ping\n\n", 0.25)  # type: ignore[arg-type]
    for _ in range(10):  # busy: a write every 10 ms, far inside the interval
        await asyncio.sleep(0.01)
        ticker.wrote()
    assert sent == []
    await asyncio.sleep(0.6)  # quiet: a ping per interval
    assert len(sent) >= 1 and set(sent) == {b": ping\n\n"}
    await ticker.stop()
    count = len(sent)
    await asyncio.sleep(0.5)
    assert len(sent) == count
