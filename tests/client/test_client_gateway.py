"""The client against the live interlingua gateway (uvicorn + create_app over a FakeUpstream),
in both dialects: the same neutral answers come back whichever way the client speaks."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from interlingua.client import AsyncClient, RateLimitError
from interlingua.core import ImagePart, Response, StopReason, TextPart, ToolCallPart, Usage
from interlingua.errors import RateLimitError as UpstreamRateLimit

from .conftest import GIF_1PX, Gateway, png_bytes

DIALECTS = ["openai", "anthropic"]


def client_for(gateway: Gateway, dialect: str, **kwargs: object) -> AsyncClient:
    base = gateway.url + "/v1" if dialect == "openai" else gateway.url
    return AsyncClient(base, "sk-test", dialect=dialect, model="fake", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_chat_and_stream(gateway: Gateway, dialect: str) -> None:
    async with client_for(gateway, dialect) as c:
        result = await c.chat("hello there", system="sys", max_tokens=64)
        async with c.stream("hello there") as stream:
            pieces = [t async for t in stream.text_stream()]
    assert result.text == "echo: hello there"
    assert result.stop_reason is StopReason.END_TURN
    assert result.usage.output_tokens > 0
    assert len(pieces) > 1 and "".join(pieces) == "echo: hello there"  # chunk_size=3
    assert stream.result is not None and stream.result.text == result.text
    assert gateway.fake.requests[-2].system_text == "sys"


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_images_reach_the_upstream(gateway: Gateway, dialect: str) -> None:
    png = png_bytes()
    async with client_for(gateway, dialect) as c:
        await c.chat(["what is this?", png, {"type": "image", "value": GIF_1PX}])
    parts = gateway.fake.requests[-1].messages[-1].parts
    images = [p for p in parts if isinstance(p, ImagePart)]
    assert [(i.media_type, base64.b64decode(i.data or "")) for i in images] == [
        ("image/png", png),
        ("image/gif", GIF_1PX),
    ]
    assert TextPart("what is this?") in parts


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_upstream_rate_limit_retried_with_retry_after(gateway: Gateway, dialect: str) -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    gateway.fake.enqueue(UpstreamRateLimit("slow down", retry_after=2))
    gateway.fake.enqueue(UpstreamRateLimit("still slow", retry_after=2))
    async with client_for(gateway, dialect, max_retries=1) as c:
        c._sleep = sleep
        with pytest.raises(RateLimitError) as info:
            await c.chat("x")
        assert slept == [2.0]
        assert info.value.status == 429
        assert "still slow" in info.value.message
        assert info.value.request_id  # the gateway's request id
        assert (await c.chat("x")).text == "echo: x"


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_tool_loop_through_the_gateway(gateway: Gateway, dialect: str) -> None:
    calls = (
        ToolCallPart("call_1", "add", '{"a": 2, "b": 3}'),
        ToolCallPart("call_2", "add", '{"a": 10, "b": 1}'),
    )
    gateway.fake.enqueue(Response("r1", "fake", calls, StopReason.TOOL_USE, usage=Usage(10, 5)))
    gateway.fake.enqueue(Response("r2", "fake", (TextPart("5 and 11"),), usage=Usage(20, 3)))

    async def add(a: int, b: int) -> int:
        return a + b

    async with client_for(gateway, dialect) as c:
        result = await c.run_tools("add things", {"add": add})
    assert result.text == "5 and 11"
    last = gateway.fake.requests[-1]
    results = [p for m in last.messages for p in m.parts if hasattr(p, "tool_call_id")]
    assert [(r.tool_call_id, r.text) for r in results] == [("call_1", "5"), ("call_2", "11")]
    assert [t.name for t in last.tools] == ["add"]


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_baseapi_items_reach_the_upstream(
    gateway: Gateway, dialect: str, tmp_path: Path
) -> None:
    png = png_bytes()
    path = tmp_path / "p.png"
    path.write_bytes(png)
    prompt = [
        {"type": "system", "value": "be brief"},
        {"type": "image", "value": [str(path), GIF_1PX]},
        str(path),
        "what are these?",
    ]
    async with client_for(gateway, dialect) as c:
        result = await c.chat(prompt, paths_as_images=True)
    assert result.text == "echo: what are these?"
    request = gateway.fake.requests[-1]
    assert request.system_text == "be brief"
    parts = request.messages[-1].parts
    images = [base64.b64decode(p.data or "") for p in parts if isinstance(p, ImagePart)]
    assert images == [png, GIF_1PX, png]
    assert [p for p in parts if isinstance(p, TextPart)] == [TextPart("what are these?")]
