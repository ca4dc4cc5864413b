"""AsyncClient against a plain fake OpenAI/Anthropic server over real sockets: what goes
on the wire for every input form and option, and what comes back."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from interlingua.client import AsyncClient, JSONExtractionError
from interlingua.core import StopReason, Usage

from .conftest import GIF_1PX, FakeServer, Reply, anthropic_body, call, openai_body, png_bytes


@pytest.fixture
async def client(server: FakeServer) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(server.url + "/v1", "sk-test", model="m") as c:
        yield c


def image_urls(body: dict[str, Any]) -> list[str]:
    content = body["messages"][-1]["content"]
    return [c["image_url"]["url"] for c in content if c.get("type") == "image_url"]


async def test_plain_chat(client: AsyncClient, server: FakeServer) -> None:
    result = await client.chat("hello", system="be brief", max_tokens=20, temperature=0.2)
    assert result.text == "echo: hello"
    assert result.request_id == "req_1"
    assert result.usage == Usage(5, 2)
    assert result.stop_reason is StopReason.END_TURN
    (seen,) = server.seen
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == "Bearer sk-test"
    assert seen.body == {
        "model": "m",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello"},
        ],
        "max_tokens": 20,
        "temperature": 0.2,
    }


async def test_every_input_form_on_the_wire(
    client: AsyncClient, server: FakeServer, tmp_path: Path
) -> None:
    png = png_bytes()
    path = tmp_path / "p.jpg"  # a PNG under a .jpg name
    path.write_bytes(png)
    server.files["cat"] = GIF_1PX
    png_uri = "data:image/png;base64," + base64.b64encode(png).decode()
    gif_uri = "data:image/gif;base64," + base64.b64encode(GIF_1PX).decode()

    await client.chat(["a", path])
    await client.chat([{"type": "text", "value": "b"}, {"type": "image", "value": png}])
    await client.chat("c", images=[str(path), server.url + "/files/cat", png_uri])
    await client.chat([{"role": "user", "content": ["d", bytearray(GIF_1PX)]}])
    from PIL import Image

    with Image.open(path) as img:
        await client.chat(["e", img])

    urls = [image_urls(b) for b in server.bodies]
    assert urls == [[png_uri], [png_uri], [png_uri, gif_uri, png_uri], [gif_uri], [png_uri]]
    assert server.bodies[0]["messages"][0]["content"][0] == {"type": "text", "text": "a"}
    # images= go before the text of the last user message
    assert server.bodies[2]["messages"][0]["content"][-1] == {"type": "text", "text": "c"}


async def test_same_image_encoded_once_across_requests(
    client: AsyncClient, server: FakeServer, tmp_path: Path, encodes: list[str]
) -> None:
    path = tmp_path / "shared.png"
    path.write_bytes(png_bytes())
    for i in range(3):
        await client.chat(f"q{i}", images=[path])
    assert len(encodes) == 1
    assert len({image_urls(b)[0] for b in server.bodies}) == 1


async def test_options_on_the_wire(client: AsyncClient, server: FakeServer) -> None:
    def get_weather(city: str, unit: str = "C") -> str:
        """Current weather for a city."""
        return "sunny"

    await client.chat(
        "hi",
        stop="END",
        top_p=0.9,
        seed=7,
        tools=[get_weather],
        tool_choice="get_weather",
        reasoning="low",
        extra_body={"top_k": 5, "chat_template_kwargs": {"enable_thinking": False}},
    )
    body = server.bodies[0]
    assert body["stop"] == ["END"]
    assert (body["top_p"], body["seed"], body["reasoning_effort"]) == (0.9, 7, "low")
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                    "required": ["city"],
                },
            },
        }
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert body["top_k"] == 5
    assert body["chat_template_kwargs"] == {"enable_thinking": False}


class City(BaseModel):
    name: str
    population: int


async def test_response_format_pydantic(client: AsyncClient, server: FakeServer) -> None:
    server.push(Reply(openai_body('{"name": "Paris", "population": 2100000}')))
    result = await client.chat("a city", response_format=City)
    assert result.parsed == City(name="Paris", population=2100000)
    fmt = server.bodies[0]["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "City"
    assert fmt["json_schema"]["schema"] == City.model_json_schema()


async def test_response_format_schema_dict_and_parse_json(
    client: AsyncClient, server: FakeServer
) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    server.push(
        Reply(openai_body('{"ok": true}')),
        Reply(openai_body('Sure:\n```json\n{"items": [1, 2]}\n```')),
        Reply(openai_body("no json here")),
    )
    assert (await client.chat("x", response_format=schema)).parsed == {"ok": True}
    assert server.bodies[0]["response_format"]["json_schema"]["schema"] == schema
    assert (await client.chat("y", parse_json=True)).parsed == {"items": [1, 2]}
    with pytest.raises(JSONExtractionError, match="it starts: 'no json here'"):
        await client.chat("z", parse_json=True)
    assert len(server.seen) == 3  # a parse failure is not retried


async def test_reasoning_and_think_tags(client: AsyncClient, server: FakeServer) -> None:
    server.push(Reply(openai_body("4", reasoning="2+2")), Reply(openai_body("4", reasoning="2+2")))
    plain = await client.chat("2+2?")
    assert (plain.text, plain.reasoning) == ("4", "2+2")
    assert (
        await client.chat("2+2?", think_tags=True)
    ).text == "<think>\n2+2\n</think>\n\n4"  # BaseAPI's format


async def test_tool_calls_parsed(client: AsyncClient, server: FakeServer) -> None:
    server.push(Reply(openai_body(None, tool_calls=[call("c1", "f", '{"a": [1]}')])))
    result = await client.chat("call f")
    assert result.stop_reason is StopReason.TOOL_USE
    (tc,) = result.tool_calls
    assert (tc.id, tc.name, tc.arguments) == ("c1", "f", {"a": [1]})


@pytest.mark.parametrize(
    ("usage", "top", "expected"),
    [
        ({"prompt_tokens": 9, "completion_tokens": 4}, {}, Usage(9, 4)),
        # Ollama's OpenAI endpoint on old versions: counts under Ollama's own names
        ({"prompt_eval_count": 26, "eval_count": 3}, {}, Usage(26, 3)),
        # no usage object at all, counts at top level (Ollama native fields)
        (None, {"prompt_eval_count": 11, "eval_count": 5}, Usage(11, 5)),
    ],
)
async def test_usage_normalized_from_the_wire(
    client: AsyncClient,
    server: FakeServer,
    usage: dict[str, int] | None,
    top: dict[str, int],
    expected: Usage,
) -> None:
    body = openai_body("x", usage=usage or {})
    if usage is None:
        del body["usage"]
    body.update(top)
    server.push(Reply(body))
    assert (await client.chat("x")).usage == expected


async def test_anthropic_dialect(server: FakeServer, tmp_path: Path) -> None:
    server.push(
        Reply(
            anthropic_body(
                "bonjour",
                usage={"input_tokens": 3, "cache_read_input_tokens": 7, "output_tokens": 2},
            )
        )
    )
    async with AsyncClient(server.url + "/v1", "sk-ant", dialect="anthropic", model="c") as c:
        result = await c.chat(["hi", GIF_1PX], system="sys", max_tokens=50)
    assert result.text == "bonjour"
    assert result.usage == Usage(10, 2, cache_read_tokens=7)
    (seen,) = server.seen
    assert seen.path == "/v1/messages"  # a trailing /v1 on the base URL is tolerated
    assert seen.headers["x-api-key"] == "sk-ant"
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in seen.headers
    assert seen.body["system"] == "sys"
    assert seen.body["max_tokens"] == 50
    assert seen.body["messages"][0]["content"] == [
        {"type": "text", "text": "hi"},
        {
            "type": "image",
            "source": {
                "type": "base64",
                "media_type": "image/gif",
                "data": base64.b64encode(GIF_1PX).decode(),
            },
        },
    ]


async def test_send_raw_keeps_the_exact_body(client: AsyncClient, server: FakeServer) -> None:
    reply = await client.send_raw({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    assert reply.status == 200
    assert reply.request_id == "req_1"
    assert reply.json()["choices"][0]["message"]["content"] == "echo: x"


async def test_model_is_required(server: FakeServer) -> None:
    async with AsyncClient(server.url + "/v1") as c:
        with pytest.raises(ValueError, match="model is required"):
            await c.chat("x")
