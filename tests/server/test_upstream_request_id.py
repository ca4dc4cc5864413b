"""The upstream's request id reaches the client as ``upstream-request-id``, read with the
official SDKs over real sockets.

    openai / anthropic SDK -> live gateway -> mock Chat upstream (answers x-request-id)
                                           -> mock Messages upstream (answers request-id)

Each SDK reaches both upstreams: one in its own dialect (passthrough), the other
translated; answers whole and streamed, and error answers. The id is what a user quotes
to the provider, so it must survive every path; it is renamed so that it is never taken
for the gateway's own ``x-request-id`` / ``request-id``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import orjson
import pytest
from aiohttp import web

from interlingua.config import parse_config
from interlingua.core import Response, TextPart, Usage, unfold
from interlingua.dialects import get_dialect
from interlingua.server import create_app

from ..live_server import live_server
from .mock_upstream import Behaviour, MockOpenAI, mock_openai, status

CHAT_ID, MESSAGES_ID = "req_chat_up_1", "req_msg_up_1"
HELLO: Any = [{"role": "user", "content": "hello"}]
CHAT_ERROR = {"error": {"message": "bad", "type": "invalid_request_error", "param": None}}
MESSAGES_ERROR = {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}


def answering(dialect: str, header: str, value: str) -> Behaviour:
    """Answer "hi" in ``dialect`` (whole or streamed), with the request id ``header``."""

    async def behaviour(
        mock: MockOpenAI, request: web.Request, body: dict[str, Any]
    ) -> web.StreamResponse:
        codec = get_dialect(dialect)
        parsed = codec.parse_request(body)
        answer = Response(id="x_1", model=parsed.model, parts=(TextPart("hi"),), usage=Usage(5, 1))
        if not body.get("stream"):
            payload = orjson.dumps(codec.render_response(answer, parsed))
            return web.Response(
                body=payload, content_type="application/json", headers={header: value}
            )
        resp = web.StreamResponse(headers={"content-type": "text/event-stream", header: value})
        await resp.prepare(request)
        encoder = codec.stream_encoder(parsed)
        await resp.write(b"".join(encoder.encode(event) for event in unfold(answer)))
        await resp.write_eof()
        return resp

    return behaviour


#: the gateway's URL, its Chat upstream and its Messages upstream
Stack = tuple[str, MockOpenAI, MockOpenAI]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with (
        mock_openai(default=answering("openai", "x-request-id", CHAT_ID)) as chat,
        mock_openai(
            "/v1/messages", default=answering("anthropic", "request-id", MESSAGES_ID)
        ) as messages,
    ):
        config = parse_config(
            {
                "upstreams": {
                    "chat": {"kind": "openai", "base_url": chat.base_url},
                    "msg": {"kind": "anthropic", "base_url": messages.base_url},
                    # limited: a whole answer is awaited in a task of its own (cancelled
                    # when the client leaves), which must not lose the id
                    "slow": {
                        "kind": "openai",
                        "base_url": chat.base_url,
                        "limits": {"max_concurrency": 4},
                    },
                },
                "models": [
                    {"name": "to-chat", "upstream": "chat", "model": "up-chat"},
                    {"name": "to-msg", "upstream": "msg", "model": "up-msg"},
                    {"name": "to-limited", "upstream": "slow", "model": "up-chat"},
                ],
            }
        )
        with live_server(create_app(config)) as url:
            yield url, chat, messages


@pytest.fixture
def gpt(stack: Stack) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=stack[0] + "/v1", api_key="sk-c", max_retries=0) as client:
        yield client


@pytest.fixture
def claude(stack: Stack) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=stack[0], api_key="sk-c", max_retries=0) as client:
        yield client


# (model, the upstream's id): for the openai SDK the first is passthrough, the second
# translated; for the anthropic SDK the other way round
ROUTES = [("to-chat", CHAT_ID), ("to-msg", MESSAGES_ID)]


@pytest.mark.parametrize(("model", "upstream_id"), ROUTES)
def test_openai_sdk_reads_the_upstream_id(gpt: openai.OpenAI, model: str, upstream_id: str) -> None:
    raw = gpt.chat.completions.with_raw_response.create(model=model, messages=HELLO)
    assert raw.parse().choices[0].message.content == "hi"
    assert raw.headers["upstream-request-id"] == upstream_id
    assert raw.headers["x-request-id"] != upstream_id  # (the gateway's own, apart)
    with gpt.chat.completions.with_streaming_response.create(
        model=model, messages=HELLO, stream=True
    ) as streamed:
        assert streamed.headers["upstream-request-id"] == upstream_id
        texts = [c.choices[0].delta.content for c in streamed.parse() if c.choices]
    assert "".join(t or "" for t in texts) == "hi"


@pytest.mark.parametrize(("model", "upstream_id"), ROUTES)
def test_anthropic_sdk_reads_the_upstream_id(
    claude: anthropic.Anthropic, model: str, upstream_id: str
) -> None:
    raw = claude.messages.with_raw_response.create(model=model, max_tokens=8, messages=HELLO)
    assert raw.parse().content[0].text == "hi"  # type: ignore[union-attr]
    assert raw.headers["upstream-request-id"] == upstream_id
    assert raw.headers["request-id"] != upstream_id
    with claude.messages.with_streaming_response.create(
        model=model, max_tokens=8, messages=HELLO, stream=True
    ) as streamed:
        assert streamed.headers["upstream-request-id"] == upstream_id
        kinds = [event.type for event in streamed.parse()]
    assert kinds[-1] == "message_stop"


def _fail(stack: Stack, model: str) -> str:
    """Make the next answer of ``model``'s upstream a 400 with its own id; that id."""
    if model == "to-chat":
        stack[1].enqueue(status(400, CHAT_ERROR, {"x-request-id": "req_chat_bad"}))
        return "req_chat_bad"
    stack[2].enqueue(status(400, MESSAGES_ERROR, {"request-id": "req_msg_bad"}))
    return "req_msg_bad"


@pytest.mark.parametrize("model", ["to-chat", "to-msg"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_an_error_answer_carries_the_upstream_id(
    stack: Stack, gpt: openai.OpenAI, claude: anthropic.Anthropic, model: str, stream: bool
) -> None:
    bad = _fail(stack, model)
    with pytest.raises(openai.BadRequestError) as caught:
        gpt.chat.completions.create(model=model, messages=HELLO, stream=stream)
    assert caught.value.response.headers["upstream-request-id"] == bad
    bad = _fail(stack, model)
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model=model, max_tokens=8, messages=HELLO, stream=stream)
    assert refused.value.response.headers["upstream-request-id"] == bad


def test_a_limited_upstream_keeps_the_id(claude: anthropic.Anthropic) -> None:
    raw = claude.messages.with_raw_response.create(model="to-limited", max_tokens=8, messages=HELLO)
    assert raw.headers["upstream-request-id"] == CHAT_ID


async def _error_first(
    mock: MockOpenAI, request: web.Request, body: dict[str, Any]
) -> web.StreamResponse:
    """A Messages stream whose first event is an in-band error (an overload, say)."""
    headers = {"content-type": "text/event-stream", "request-id": "req_msg_busy"}
    resp = web.StreamResponse(headers=headers)
    await resp.prepare(request)
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    await resp.write(b"event: error\ndata: " + orjson.dumps(error) + b"\n\n")
    await resp.write_eof()
    return resp


def test_an_in_band_error_first_carries_the_id(
    stack: Stack, gpt: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    """A stream that fails before its first event is answered with a real status, on the
    passthrough and the translated path alike, and names the upstream's answer."""
    stack[2].enqueue(_error_first)
    with pytest.raises(anthropic.APIStatusError) as relayed:
        claude.messages.create(model="to-msg", max_tokens=8, messages=HELLO, stream=True)
    assert relayed.value.response.headers["upstream-request-id"] == "req_msg_busy"
    stack[2].enqueue(_error_first)
    with pytest.raises(openai.APIStatusError) as translated:
        gpt.chat.completions.create(model="to-msg", messages=HELLO, stream=True)
    assert translated.value.response.headers["upstream-request-id"] == "req_msg_busy"
