"""Request shaping without sockets: the merge rules, the marker's travel, the upstreams
without a wire (neutral fields), and the Chat output-limit field."""

from __future__ import annotations

from typing import Any

import pytest

from interlingua.config import ConfigError, ModelConfig, parse_config
from interlingua.core import Message, Request, TextPart
from interlingua.dialects.openai_chat import default_max_tokens_field, place_max_tokens
from interlingua.errors import InvalidRequestError
from interlingua.upstreams.fake import FakeUpstream
from interlingua.upstreams.openai_compatible import OpenAICompatibleUpstream
from interlingua.upstreams.shaping import (
    SHAPING,
    for_upstream,
    merge_params,
    neutral_request,
    shape_body,
    take_shaping,
)

REQUEST = Request(model="client-name", messages=(Message("user", (TextPart("hi"),)),))


def entry(**fields: Any) -> ModelConfig:
    return ModelConfig(name="m", upstream="u", **fields)


SHAPED = entry(
    params={"temperature": 0.6, "top_p": 0.5, "chat_template_kwargs": {"enable_thinking": True}},
    force_params=("top_p",),
    drop_params=("reasoning_effort",),
)


# --- the wire merge ---------------------------------------------------------------------


def test_client_wins_unless_forced_and_drops_go() -> None:
    body = {"model": "x", "temperature": 0.1, "top_p": 0.9, "reasoning_effort": "low"}
    shape_body(body, SHAPED, FakeUpstream())
    assert body == {
        "model": "x",
        "temperature": 0.1,
        "top_p": 0.5,
        "chat_template_kwargs": {"enable_thinking": True},
    }


def test_merge_is_shallow_and_copies() -> None:
    body: dict[str, Any] = {"chat_template_kwargs": {"other": 1}}
    merge_params(body, SHAPED)
    assert body["chat_template_kwargs"] == {"other": 1}  # the client's object, whole
    fresh: dict[str, Any] = {}
    merge_params(fresh, SHAPED)
    fresh["chat_template_kwargs"]["enable_thinking"] = False
    assert SHAPED.params["chat_template_kwargs"] == {"enable_thinking": True}


def test_null_counts_as_absent() -> None:
    body: dict[str, Any] = {"temperature": None}
    merge_params(body, SHAPED)
    assert body["temperature"] == 0.6


def test_max_tokens_names_are_one_key() -> None:
    limit = entry(params={"max_tokens": 4096})
    body: dict[str, Any] = {"max_completion_tokens": 100}
    merge_params(body, limit)
    assert body == {"max_completion_tokens": 100}
    forced = entry(params={"max_tokens": 4096}, force_params=("max_tokens",))
    merge_params(body, forced)
    assert body == {"max_tokens": 4096}


def test_no_shaping_leaves_the_body_alone() -> None:
    body = {"model": "x", "max_tokens": 5, "messages": []}
    before = dict(body)
    shape_body(body, entry(), FakeUpstream())
    shape_body(body, None, FakeUpstream())
    assert body == before and list(body) == list(before)


def test_marker_only_when_shaping() -> None:
    plain = for_upstream(REQUEST, "up", entry())
    assert plain.model == "up" and SHAPING not in plain.extra
    shaped = for_upstream(REQUEST, "up", SHAPED)
    assert shaped.extra[SHAPING] is SHAPED
    back, found = take_shaping(shaped)
    assert found is SHAPED and SHAPING not in back.extra


def test_config_refuses_a_key_both_added_and_dropped() -> None:
    raw = {
        "upstreams": {"u": {"kind": "fake"}},
        "models": [{"name": "m", "upstream": "u", "params": {"a": 1}, "drop_params": ["a"]}],
    }
    with pytest.raises(ConfigError, match=r"models\[0\]\.drop_params\[0\]"):
        parse_config(raw)


# --- the translated path: rendered bodies -----------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_http_render_applies_shaping_and_never_the_marker(stream: bool) -> None:
    upstream = OpenAICompatibleUpstream("u", "http://127.0.0.1:1/v1")
    request = for_upstream(
        Request(
            model="c",
            messages=REQUEST.messages,
            temperature=0.2,
            source_dialect="openai",
            extra={"reasoning_effort": "low"},
        ),
        "qwen",
        SHAPED,
    )
    wire = upstream.render(request, stream=stream)
    assert wire["temperature"] == 0.2 and wire["top_p"] == 0.5
    assert wire["chat_template_kwargs"] == {"enable_thinking": True}
    assert "reasoning_effort" not in wire and SHAPING not in wire
    assert ("stream_options" in wire) is stream


def test_drop_acts_after_the_gateway_adds_its_own() -> None:
    upstream = OpenAICompatibleUpstream("u", "http://127.0.0.1:1/v1")
    request = for_upstream(REQUEST, "qwen", entry(drop_params=("stream_options",)))
    assert "stream_options" not in upstream.render(request, stream=True)


@pytest.mark.parametrize("wire", ["openai", "anthropic", "responses"])
async def test_fake_with_a_wire_shapes_its_wire_body(wire: str) -> None:
    fake = FakeUpstream(wire=wire)
    shaping = entry(params={"temperature": 0.6, "top_k": 3}, drop_params=("top_p",))
    request = Request(model="c", messages=REQUEST.messages, top_p=0.9, max_tokens=16)
    await fake.complete(for_upstream(request, "up", shaping))
    sent = fake.wire_requests[-1]
    assert sent["temperature"] == 0.6 and sent["top_k"] == 3 and "top_p" not in sent
    assert SHAPING not in fake.requests[-1].extra


# --- upstreams without a wire -----------------------------------------------------------


def test_neutral_fields_from_params() -> None:
    shaping = entry(
        params={
            "temperature": 0.6,
            "top_k": 20,
            "max_completion_tokens": 64,
            "stop": "END",
            "min_p": 0.05,
            "seed": 1,
        },
        force_params=("seed",),
        drop_params=("top_p", "repeat_penalty"),
    )
    request = Request(
        model="c",
        messages=REQUEST.messages,
        temperature=0.1,
        top_p=0.9,
        seed=7,
        extra={"repeat_penalty": 1.3},
    )
    out = neutral_request(for_upstream(request, "up", shaping))
    assert out.temperature == 0.1  # the client's
    assert out.top_k == 20 and out.max_tokens == 64 and out.stop == ("END",)
    assert out.seed == 1  # forced
    assert out.top_p is None
    assert out.min_p == 0.05 and out.extra == {}


def test_neutral_samplers_and_logprobs_from_params_and_drops() -> None:
    shaping = entry(params={"repetition_penalty": 1.1, "logprobs": True, "top_logprobs": 2})
    out = neutral_request(for_upstream(REQUEST, "up", shaping))
    assert (out.repetition_penalty, out.logprobs, out.top_logprobs) == (1.1, True, 2)
    client = Request(model="c", messages=REQUEST.messages, seed=0, temperature=0.0)
    kept = neutral_request(for_upstream(client, "up", entry(params={"seed": 5, "temperature": 1})))
    assert (kept.seed, kept.temperature) == (0, 0.0)  # a client's zero is a value, not absent
    asked = Request(model="c", messages=REQUEST.messages, logprobs=True, top_logprobs=3, min_p=0.2)
    dropped = neutral_request(for_upstream(asked, "up", entry(drop_params=("logprobs", "min_p"))))
    assert (dropped.logprobs, dropped.top_logprobs, dropped.min_p) == (False, None, None)


@pytest.mark.parametrize("wire", ["anthropic", "responses"])
async def test_drop_params_turn_a_codec_refusal_into_a_drop(wire: str) -> None:
    asked = Request(
        model="c",
        messages=REQUEST.messages,
        logprobs=True,
        top_logprobs=2,
        min_p=0.1,
        repetition_penalty=1.2,
        output_audio={"voice": "alloy"},
    )
    with pytest.raises(InvalidRequestError):
        await FakeUpstream(wire=wire).complete(for_upstream(asked, "up", entry()))
    names = ("logprobs", "min_p", "repetition_penalty", "audio")
    fake = FakeUpstream(wire=wire)
    await fake.complete(for_upstream(asked, "up", entry(drop_params=names)))
    sent = fake.wire_requests[-1]
    assert not {"logprobs", "top_logprobs", "include", "min_p", "modalities", "audio"} & set(sent)
    upstream = OpenAICompatibleUpstream("u", "http://127.0.0.1:1/v1")
    wire_body = upstream.render(for_upstream(asked, "up", entry(drop_params=names)), stream=False)
    assert not {"logprobs", "top_logprobs", "min_p", "repetition_penalty"} & set(wire_body)


def test_neutral_skips_a_value_of_the_wrong_type(caplog: pytest.LogCaptureFixture) -> None:
    out = neutral_request(for_upstream(REQUEST, "up", entry(params={"temperature": "hot"})))
    assert out.temperature is None
    assert "params.temperature" in caplog.text


async def test_fake_without_wire_applies_neutral_fields() -> None:
    fake = FakeUpstream()
    await fake.complete(for_upstream(REQUEST, "up", entry(params={"temperature": 0.6})))
    assert fake.requests[-1].temperature == 0.6
    assert SHAPING not in fake.requests[-1].extra


# --- max_tokens_field -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "field"),
    [
        ("o1", "max_completion_tokens"),
        ("o3-mini-2025-01-31", "max_completion_tokens"),
        ("o4-mini", "max_completion_tokens"),
        ("openai/o3", "max_completion_tokens"),
        ("gpt-5", "max_completion_tokens"),
        ("gpt-5.1-codex", "max_completion_tokens"),
        ("GPT-5-mini", "max_completion_tokens"),
        ("gpt-4o", "max_tokens"),
        ("gpt-4.1-mini", "max_tokens"),
        ("omni-moderation", "max_tokens"),
        ("olmo-2", "max_tokens"),
        ("deepseek-ai/deepseek-r1", "max_tokens"),
    ],
)
def test_default_field_by_model_name(model: str, field: str) -> None:
    assert default_max_tokens_field(model) == field


def test_place_max_tokens() -> None:
    body: dict[str, Any] = {"model": "o3", "max_tokens": 8}
    place_max_tokens(body)
    assert body == {"model": "o3", "max_completion_tokens": 8}
    body = {"model": "gpt-4o", "max_completion_tokens": 8}
    place_max_tokens(body)
    assert body == {"model": "gpt-4o", "max_completion_tokens": 8}  # the client's choice
    place_max_tokens(body, "max_tokens")
    assert body == {"model": "gpt-4o", "max_tokens": 8}
    both: dict[str, Any] = {"model": "o3", "max_tokens": 9, "max_completion_tokens": 8}
    place_max_tokens(both)
    assert both == {"model": "o3", "max_completion_tokens": 8}


def test_configured_field_on_the_upstream() -> None:
    upstream = OpenAICompatibleUpstream(
        "u", "http://127.0.0.1:1/v1", max_tokens_field="max_completion_tokens"
    )
    wire = upstream.render(
        Request(model="llama", messages=REQUEST.messages, max_tokens=5), stream=False
    )
    assert wire["max_completion_tokens"] == 5 and "max_tokens" not in wire
    with pytest.raises(ValueError):
        OpenAICompatibleUpstream("u", "http://127.0.0.1:1/v1", max_tokens_field="max_output_tokens")
