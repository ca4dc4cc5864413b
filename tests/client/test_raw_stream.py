"""Raw stream data: each event of a client stream carries the decoded JSON of the SSE event
it came from (``event.raw``), and a streamed result's ``raw`` is the folded answer as a
body in the dialect's own shape, as a plain call's ``raw`` is the server's body."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from interlingua.client import AsyncClient
from interlingua.core import BlockStart, StreamEnd, StreamStart, TextDelta
from interlingua.dialects import get_dialect

from .conftest import FakeServer, Gateway, Stream, openai_chunks


async def test_each_event_carries_the_chunk_it_came_from(server: FakeServer) -> None:
    chunks = openai_chunks(["Hel", "lo"])
    server.push(Stream(chunks))
    async with (
        AsyncClient(server.url + "/v1", model="m") as c,
        c.stream("q") as stream,
    ):
        events = [e async for e in stream]
    sent = [orjson.loads(c[len(b"data: ") :]) for c in chunks[:-1]]  # [DONE] is not JSON
    texts = [e for e in events if isinstance(e, TextDelta)]
    assert [e.raw for e in texts] == [sent[1], sent[2]]
    assert texts[0].raw["choices"][0]["delta"] == {"content": "Hel"}
    assert isinstance(events[0], StreamStart) and events[0].raw == sent[0]
    assert isinstance(events[-1], StreamEnd) and events[-1].raw is None  # made by [DONE]
    # raw is not part of the value: events compare as before
    assert texts[0] == TextDelta(texts[0].index, "Hel") and "raw" not in repr(texts[0])


async def test_a_streamed_results_raw_is_the_folded_body(server: FakeServer) -> None:
    server.push(Stream(openai_chunks(["Hel", "lo"])))
    async with AsyncClient(server.url + "/v1", model="m") as c, c.stream("q") as stream:
        result = await stream.final()
    raw = result.raw
    assert raw["object"] == "chat.completion" and raw["id"] == "chatcmpl-s"
    assert raw["choices"][0]["message"]["content"] == "Hello"
    assert raw["usage"]["prompt_tokens"] == 3


def shape(dialect: str, body: dict[str, Any]) -> str:
    return str(body.get("object") or body.get("type"))


@pytest.mark.parametrize(
    ("dialect", "kind"),
    [("openai", "chat.completion"), ("anthropic", "message"), ("responses", "response")],
)
async def test_every_dialect_through_the_gateway(gateway: Gateway, dialect: str, kind: str) -> None:
    base = gateway.url if dialect == "anthropic" else gateway.url + "/v1"
    c = AsyncClient(base, "sk-test", dialect=dialect, model="fake")
    async with c, c.stream("hello there") as stream:
        events = [e async for e in stream]
    assert all(isinstance(e.raw, dict) for e in events if isinstance(e, TextDelta | BlockStart))
    result = stream.result
    assert result is not None and shape(dialect, result.raw) == kind
    again = get_dialect(dialect).parse_response(result.raw)
    assert again.text == result.text == "echo: hello there"
