"""What each upstream kind sends for a prefill (upstreams/prefill.py): the partial answer
as the trailing assistant message, vLLM's two fields on a Chat body only, and never the
marker itself, even from a same-dialect request (whose renderer re-emits
``Request.extra``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest
from aiohttp import web

from interlingua.core import Message, Request, TextPart
from interlingua.dialects import get_dialect
from interlingua.http_pool.engines import Transports
from interlingua.upstreams.anthropic import AnthropicUpstream
from interlingua.upstreams.fake import FakeUpstream
from interlingua.upstreams.http_upstream import HttpUpstream
from interlingua.upstreams.openai_compatible import OpenAICompatibleUpstream
from interlingua.upstreams.openai_responses import OpenAIResponsesUpstream
from interlingua.upstreams.prefill import PREFILL, with_prefill

from . import test_anthropic_upstream as anthropic
from . import test_openai_compatible as openai
from .conftest import Stub, json_response

PARTIAL = "The capital of France is"
VLLM_FIELDS = {"continue_final_message": True, "add_generation_prompt": False}

#: a client body of each dialect, with a field of its own (kept in Request.extra)
CLIENT_BODIES: dict[str, dict[str, Any]] = {
    "openai": {
        "model": "m",
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "max_tokens": 20,
        "logit_bias": {"42": 1},
    },
    "anthropic": {
        "model": "m",
        "max_tokens": 20,
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "service_tier": "auto",
    },
    "responses": {
        "model": "m",
        "input": [{"role": "user", "content": "What is the capital of France?"}],
        "max_output_tokens": 20,
        "truncation": "auto",
    },
}

UPSTREAMS: dict[str, type[HttpUpstream]] = {
    "openai": OpenAICompatibleUpstream,
    "anthropic": AnthropicUpstream,
    "responses": OpenAIResponsesUpstream,
}


def continuation(dialect: str) -> Request:
    """A client request of ``dialect``, continued: its question, the partial answer, the
    marker (as the continuation core builds it)."""
    request = get_dialect(dialect).parse_request(CLIENT_BODIES[dialect])
    partial = Message("assistant", (TextPart(PARTIAL),))
    return with_prefill(replace(request, messages=(*request.messages, partial)))


def trailing_assistant(dialect: str, body: dict[str, Any]) -> Any:
    """The last message of a ``dialect`` body, as the neutral parser reads it back."""
    parsed = get_dialect(dialect).parse_request(orjson.loads(orjson.dumps(body)))
    last = parsed.messages[-1]
    return last.role, "".join(p.text for p in last.parts if isinstance(p, TextPart))


def no_marker(body: dict[str, Any]) -> None:
    assert PREFILL.encode() not in orjson.dumps(body)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("client", list(CLIENT_BODIES))
@pytest.mark.parametrize("dialect", list(UPSTREAMS))
def test_every_http_kind_renders_a_prefill_its_own_way(
    dialect: str, client: str, stream: bool
) -> None:
    up = UPSTREAMS[dialect]("u", "http://h/v1")
    body = up.render(continuation(client), stream=stream)
    no_marker(body)
    assert trailing_assistant(dialect, body) == ("assistant", PARTIAL)
    fields = {key: body[key] for key in VLLM_FIELDS if key in body}
    assert fields == (VLLM_FIELDS if dialect == "openai" else {})


@pytest.mark.parametrize("dialect", list(UPSTREAMS))
def test_an_unmarked_request_gets_no_fields(dialect: str) -> None:
    request = continuation(dialect)
    plain = replace(request, extra={k: v for k, v in request.extra.items() if k != PREFILL})
    body = UPSTREAMS[dialect]("u", "http://h/v1").render(plain, stream=False)
    assert not VLLM_FIELDS.keys() & body.keys()
    assert trailing_assistant(dialect, body) == ("assistant", PARTIAL)


def test_a_models_params_do_not_undo_the_prefill_but_its_drops_do() -> None:
    from interlingua.config import ModelConfig
    from interlingua.upstreams.shaping import for_upstream

    up = OpenAICompatibleUpstream("u", "http://h/v1")
    forcing = ModelConfig("m", "u", params={"add_generation_prompt": True})
    body = up.render(for_upstream(continuation("openai"), "m", forcing), stream=False)
    assert body["add_generation_prompt"] is False and body["continue_final_message"] is True
    # a server that refuses the field by name: the operator drops it
    dropping = ModelConfig("m", "u", drop_params=("continue_final_message",))
    body = up.render(for_upstream(continuation("openai"), "m", dropping), stream=False)
    assert "continue_final_message" not in body and body["add_generation_prompt"] is False
    no_marker(body)


#: (how to build it against the stub, the base URL's tail, a good answer) per HTTP kind
POSTED = {
    "openai": (openai.build, "/v1/", openai.COMPLETION),
    "anthropic": (anthropic.build, "", anthropic.MESSAGE),
}


@pytest.mark.parametrize("dialect", list(POSTED))
async def test_the_posted_body_ends_with_the_prefill_and_has_no_marker(
    stub: Stub, transports: Transports, dialect: str
) -> None:
    build, base, answer = POSTED[dialect]

    async def handler(request: web.Request, body: bytes) -> web.StreamResponse:
        return json_response(answer)

    stub.handler = handler
    await build(stub.url + base, transports).complete(continuation(dialect))
    sent = stub.seen[0].json
    no_marker(sent)
    fields = {key: sent[key] for key in VLLM_FIELDS if key in sent}
    assert fields == (VLLM_FIELDS if dialect == "openai" else {})
    assert sent["messages"][-1] == {"role": "assistant", "content": PARTIAL}
    own = {"openai": "logit_bias", "anthropic": "service_tier"}[dialect]
    assert own in sent  # the client's own field still goes


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("wire", ["openai", "anthropic", "responses"])
async def test_the_fake_takes_the_marker_out_and_shows_the_wire(wire: str, stream: bool) -> None:
    fake = FakeUpstream("f", wire=wire)
    request = replace(continuation(wire), stream=stream)
    if stream:
        [event async for event in fake.stream(request)]
    else:
        await fake.complete(request)
    (sent,) = fake.wire_requests
    no_marker(sent)
    fields = {key: sent[key] for key in VLLM_FIELDS if key in sent}
    assert fields == (VLLM_FIELDS if wire == "openai" else {})
    assert trailing_assistant(wire, sent) == ("assistant", PARTIAL)
    assert PREFILL not in fake.requests[0].extra


async def test_the_fake_without_a_wire_takes_the_marker_out() -> None:
    fake = FakeUpstream("f")
    await fake.complete(continuation("openai"))
    (seen,) = fake.requests
    assert PREFILL not in seen.extra and seen.messages[-1].role == "assistant"
