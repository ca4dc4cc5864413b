"""Request shaping seen where it matters: in the body the upstream receives.

    openai / anthropic SDK, httpx -> live gateway -> mock Chat, Messages, Responses upstreams

A model's ``params`` are merged in (the client's value wins unless forced), its
``drop_params`` removed, and an OpenAI Chat upstream gets the output limit in the field
its model takes; on the passthrough path (Chat -> Chat, Messages -> Messages, Responses
-> Responses) as on the translated one, stream and not. A model with none of these is
still relayed byte-exact: the upstream gets the orjson of the client's parsed body with
only ``model`` replaced.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from aiohttp import web

from interlingua.config import parse_config
from interlingua.core import Response, TextPart, Usage, unfold
from interlingua.dialects import get_dialect
from interlingua.routing import Router
from interlingua.server import create_app
from interlingua.server.gateway import Gateway
from interlingua.upstreams import build_upstreams

from ..live_server import live_server
from .mock_upstream import Behaviour, MockOpenAI, mock_openai, ok
from .responses.mock_responses import mock_responses

SHAPED = {
    "params": {
        "temperature": 0.6,
        "top_p": 0.5,
        "chat_template_kwargs": {"enable_thinking": True},
    },
    "force_params": ["top_p"],
    "drop_params": ["reasoning_effort"],
}
HELLO: Any = [{"role": "user", "content": "hello"}]


async def anthropic_answer(
    mock: MockOpenAI, request: web.Request, body: dict[str, Any]
) -> web.StreamResponse:
    """A Messages API answer ("hi"), as JSON or as its event stream."""
    codec = get_dialect("anthropic")
    parsed = codec.parse_request(body)
    answer = Response(
        id="msg_1", model=str(body["model"]), parts=(TextPart("hi"),), usage=Usage(5, 1)
    )
    if not body.get("stream"):
        payload = orjson.dumps(codec.render_response(answer, parsed))
        return web.Response(body=payload, content_type="application/json")
    encoder = codec.stream_encoder(parsed)
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(b"".join(encoder.encode(event) for event in unfold(answer)))
    await resp.write_eof()
    return resp


def config(chat: str, messages: str, responses: str) -> dict[str, Any]:
    return {
        "upstreams": {
            "chat": {"kind": "openai", "base_url": chat},
            "fixed": {
                "kind": "openai",
                "base_url": chat,
                "max_tokens_field": "max_completion_tokens",
            },
            "anth": {"kind": "anthropic", "base_url": messages},
            "resp": {"kind": "responses", "base_url": responses},
        },
        "models": [
            {"name": "shaped", "upstream": "chat", "model": "qwen3", **SHAPED},
            {"name": "plain", "upstream": "chat", "model": "qwen3"},
            {"name": "reasoner", "upstream": "chat", "model": "o3-mini"},
            {"name": "fixed", "upstream": "fixed", "model": "llama"},
            {
                "name": "claude-shaped",
                "upstream": "anth",
                "model": "claude-x",
                "params": {"top_k": 7, "temperature": 0.3},
                "force_params": ["temperature"],
                "drop_params": ["metadata"],
            },
            {"name": "claude-plain", "upstream": "anth", "model": "claude-x"},
            {
                "name": "resp-shaped",
                "upstream": "resp",
                "model": "gpt-x",
                "params": {"temperature": 0.6, "parallel_tool_calls": False},
                "drop_params": ["top_p"],
            },
            {"name": "resp-plain", "upstream": "resp", "model": "gpt-x"},
        ],
    }


class Stack:
    def __init__(self, url: str, chat: MockOpenAI, messages: MockOpenAI, responses: MockOpenAI):
        self.url, self.chat, self.messages, self.responses = url, chat, messages, responses


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with (
        mock_openai() as chat,
        mock_openai("/v1/messages", default=anthropic_answer) as messages,
        mock_responses() as responses,
    ):
        cfg = parse_config(config(chat.base_url, messages.base_url, responses.base_url))
        with live_server(create_app(cfg)) as url:
            yield Stack(url, chat, messages, responses)


@pytest.fixture
def gpt(stack: Stack) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=stack.url + "/v1", api_key="sk-client", max_retries=0) as client:
        yield client


@pytest.fixture
def claude(stack: Stack) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=stack.url, api_key="sk-client", max_retries=0) as client:
        yield client


def chat_call(gpt: openai.OpenAI, stream: bool, model: str = "shaped", **kwargs: Any) -> None:
    if stream:
        for _ in gpt.chat.completions.create(model=model, messages=HELLO, stream=True, **kwargs):
            pass
    else:
        gpt.chat.completions.create(model=model, messages=HELLO, **kwargs)


# (this SDK takes the sampling settings only in extra_body)
SAMPLING = ("temperature", "top_p", "top_k")


def messages_call(claude: anthropic.Anthropic, stream: bool, model: str, **kwargs: Any) -> None:
    kwargs.setdefault("max_tokens", 20)
    extra = {key: kwargs.pop(key) for key in SAMPLING if key in kwargs}
    if extra:
        kwargs["extra_body"] = extra
    if stream:
        with claude.messages.stream(model=model, messages=HELLO, **kwargs) as events:
            events.get_final_message()
    else:
        claude.messages.create(model=model, messages=HELLO, **kwargs)


def responses_call(gpt: openai.OpenAI, stream: bool, model: str, **kwargs: Any) -> None:
    if stream:
        for _ in gpt.responses.create(model=model, input="hello", stream=True, **kwargs):
            pass
    else:
        gpt.responses.create(model=model, input="hello", **kwargs)


def last(mock: MockOpenAI) -> dict[str, Any]:
    return mock.received[-1].body


STREAM = pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])


# --- params / force_params / drop_params ------------------------------------------------


def test_shaping_keeps_the_passthrough_path(stack: Stack) -> None:
    cfg = parse_config(
        config(stack.chat.base_url, stack.messages.base_url, stack.responses.base_url)
    )
    router = Router(cfg, build_upstreams(cfg, None))
    for dialect, model in (
        ("openai", "shaped"),
        ("anthropic", "claude-shaped"),
        ("responses", "resp-shaped"),
    ):
        assert Gateway.passes_through(get_dialect(dialect), router.resolve(model))


@STREAM
def test_chat_client_passthrough(gpt: openai.OpenAI, stack: Stack, stream: bool) -> None:
    chat_call(gpt, stream, temperature=0.2, top_p=0.9, reasoning_effort="low", max_tokens=20)
    body = last(stack.chat)
    assert body["model"] == "qwen3"
    assert body["temperature"] == 0.2  # the client's value wins
    assert body["top_p"] == 0.5  # forced
    assert body["chat_template_kwargs"] == {"enable_thinking": True}
    assert "reasoning_effort" not in body
    assert body["max_tokens"] == 20


@STREAM
def test_messages_client_translated(
    claude: anthropic.Anthropic, stack: Stack, stream: bool
) -> None:
    thinking: Any = {"type": "enabled", "budget_tokens": 1024}
    messages_call(
        claude, stream, "shaped", temperature=1.0, top_p=0.9, thinking=thinking, max_tokens=2000
    )
    body = last(stack.chat)
    assert body["temperature"] == 1.0
    assert body["top_p"] == 0.5
    assert body["chat_template_kwargs"] == {"enable_thinking": True}
    assert "reasoning_effort" not in body  # rendered from `thinking`, then dropped
    assert body["max_tokens"] == 2000
    assert "_interlingua_shaping" not in orjson.dumps(body).decode()


@STREAM
def test_messages_client_translated_without_client_values(
    claude: anthropic.Anthropic, stack: Stack, stream: bool
) -> None:
    messages_call(claude, stream, "shaped")
    body = last(stack.chat)
    assert body["temperature"] == 0.6  # the configured default fills the gap
    assert body["top_p"] == 0.5


@STREAM
def test_responses_client_translated(gpt: openai.OpenAI, stack: Stack, stream: bool) -> None:
    responses_call(
        gpt,
        stream,
        "shaped",
        temperature=0.2,
        top_p=0.9,
        reasoning={"effort": "low"},
        max_output_tokens=64,
    )
    body = last(stack.chat)
    assert body["temperature"] == 0.2
    assert body["top_p"] == 0.5
    assert body["chat_template_kwargs"] == {"enable_thinking": True}
    assert "reasoning_effort" not in body
    assert body["max_tokens"] == 64


@STREAM
def test_messages_client_passthrough(
    claude: anthropic.Anthropic, stack: Stack, stream: bool
) -> None:
    messages_call(claude, stream, "claude-shaped", temperature=0.9, metadata={"user_id": "u1"})
    body = last(stack.messages)
    assert body["model"] == "claude-x"
    assert body["temperature"] == 0.3  # forced
    assert body["top_k"] == 7
    assert "metadata" not in body


@STREAM
def test_responses_client_passthrough(gpt: openai.OpenAI, stack: Stack, stream: bool) -> None:
    responses_call(gpt, stream, "resp-shaped", top_p=0.9, parallel_tool_calls=True)
    body = last(stack.responses)
    assert body["model"] == "gpt-x"
    assert body["temperature"] == 0.6
    assert body["parallel_tool_calls"] is True  # the client's value wins
    assert "top_p" not in body


# --- max_tokens_field -------------------------------------------------------------------


@STREAM
def test_reasoning_model_gets_max_completion_tokens_on_every_path(
    gpt: openai.OpenAI, claude: anthropic.Anthropic, stack: Stack, stream: bool
) -> None:
    chat_call(gpt, stream, "reasoner", max_tokens=30)  # passthrough
    assert last(stack.chat)["max_completion_tokens"] == 30
    assert "max_tokens" not in last(stack.chat)
    messages_call(claude, stream, "reasoner", max_tokens=31)  # Messages -> Chat
    assert last(stack.chat)["max_completion_tokens"] == 31
    assert "max_tokens" not in last(stack.chat)
    responses_call(gpt, stream, "reasoner", max_output_tokens=32)  # Responses -> Chat
    assert last(stack.chat)["max_completion_tokens"] == 32
    assert "max_tokens" not in last(stack.chat)


@STREAM
def test_configured_max_tokens_field(
    gpt: openai.OpenAI, claude: anthropic.Anthropic, stack: Stack, stream: bool
) -> None:
    chat_call(gpt, stream, "fixed", max_tokens=30)
    assert last(stack.chat)["max_completion_tokens"] == 30
    messages_call(claude, stream, "fixed", max_tokens=31)
    assert last(stack.chat)["max_completion_tokens"] == 31
    assert "max_tokens" not in last(stack.chat)


def test_other_models_keep_the_clients_field(gpt: openai.OpenAI, stack: Stack) -> None:
    chat_call(gpt, False, "plain", max_completion_tokens=30)
    assert last(stack.chat)["max_completion_tokens"] == 30
    assert "max_tokens" not in last(stack.chat)
    chat_call(gpt, False, "plain", max_tokens=31)
    assert last(stack.chat)["max_tokens"] == 31


# --- passthrough stays byte-exact -------------------------------------------------------


def recording(raw: list[bytes], then: Behaviour) -> Behaviour:
    async def behaviour(
        mock: MockOpenAI, request: web.Request, body: dict[str, Any]
    ) -> web.StreamResponse:
        raw.append(await request.read())
        return await then(mock, request, body)

    return behaviour


# Key order, unusual spacing in the client's bytes, unicode, numbers: what the upstream
# gets is exactly orjson's writing of the parsed body with only `model` replaced.
CASES = [
    (
        "/v1/chat/completions",
        "chat",
        "plain",
        "qwen3",
        {
            "messages": [{"role": "user", "content": "h\u00e9 \u2603"}],
            "max_tokens": 7,
            "temperature": 0.25,
            "logit_bias": {"50256": -100},
        },
    ),
    (
        "/v1/chat/completions",
        "chat",
        "reasoner",
        "o3-mini",
        {"messages": HELLO, "max_completion_tokens": 7, "seed": 1},
    ),
    (
        "/v1/messages",
        "messages",
        "claude-plain",
        "claude-x",
        {"messages": HELLO, "max_tokens": 7, "metadata": {"user_id": "u"}},
    ),
    (
        "/v1/responses",
        "responses",
        "resp-plain",
        "gpt-x",
        {"input": "hello", "top_p": 0.9, "store": False},
    ),
]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize(
    ("path", "mock", "model", "upstream_model", "fields"), CASES, ids=[c[2] for c in CASES]
)
def test_passthrough_without_shaping_is_byte_exact(
    stack: Stack,
    path: str,
    mock: str,
    model: str,
    upstream_model: str,
    fields: dict[str, Any],
    stream: bool,
) -> None:
    target: MockOpenAI = getattr(stack, mock)
    raw: list[bytes] = []
    then = {"chat": ok, "messages": anthropic_answer}.get(mock)
    target.enqueue(recording(raw, then or (target.default or ok)))
    body = {"model": model, **fields, **({"stream": True} if stream else {})}
    sent = orjson.dumps(body).replace(b",", b" ,  ")  # the client's own bytes differ
    headers = {"content-type": "application/json", "authorization": "Bearer k", "x-api-key": "k"}
    if mock == "messages":
        headers["anthropic-version"] = "2023-06-01"
    reply = httpx.post(stack.url + path, content=sent, headers=headers, timeout=10)
    assert reply.status_code == 200, reply.text
    expected = {**body, "model": upstream_model}
    if mock == "chat" and stream:
        # the usage log asks a Chat stream for its usage (and cuts that chunk for the
        # client): the one change to a passthrough body the client did not ask for
        expected["stream_options"] = {"include_usage": True}
    assert raw == [orjson.dumps(expected)]
