"""The continuation helpers (interlingua.upstreams.prefill) and the ``continue_with``
every built upstream carries, ``auto`` resolved by kind, wrappers included."""

from __future__ import annotations

import pytest

from interlingua import upstreams as registry
from interlingua.config import LimitsConfig, ModelOptions, UpstreamConfig, parse_config
from interlingua.core import Message, Request, TextPart
from interlingua.upstreams import Upstream, build_upstream, build_upstreams, register_kind
from interlingua.upstreams.limited import LimitedUpstream
from interlingua.upstreams.prefill import (
    CONTINUE_INSTRUCTION,
    PREFILL,
    continue_mode,
    prefill_fields,
    take_prefill,
    with_prefill,
)
from interlingua.upstreams.text_options import TextOptionsUpstream


def partial(prefix: str = "The capital of France is") -> Request:
    """A continuation request: the question, then the assistant's partial answer."""
    return Request(
        model="m",
        messages=(
            Message("user", (TextPart("What is the capital of France?"),)),
            Message("assistant", (TextPart(prefix),)),
        ),
        extra={"top_k": 3},
    )


def test_the_marker_goes_on_and_comes_off_leaving_the_request_as_it_was() -> None:
    request = partial()
    marked = with_prefill(request)
    assert marked.extra == {"top_k": 3, PREFILL: True} and request.extra == {"top_k": 3}
    taken, prefill = take_prefill(marked)
    assert prefill and taken == request
    assert take_prefill(request) == (request, False)


def test_a_marked_request_not_ending_with_the_assistant_is_no_prefill() -> None:
    question = Request(model="m", messages=(Message("user", (TextPart("hi"),)),))
    taken, prefill = take_prefill(with_prefill(question))
    assert not prefill and PREFILL not in taken.extra
    empty = Request(model="m", messages=())
    assert take_prefill(with_prefill(empty))[1] is False


def test_only_the_chat_dialect_gets_fields_and_each_call_a_new_dict() -> None:
    assert prefill_fields("openai") == {
        "continue_final_message": True,
        "add_generation_prompt": False,
    }
    assert prefill_fields("anthropic") == prefill_fields("responses") == prefill_fields(None) == {}
    prefill_fields("openai")["continue_final_message"] = False
    assert prefill_fields("openai")["continue_final_message"] is True


def test_the_instruction_asks_for_the_rest_without_repeating() -> None:
    lowered = CONTINUE_INSTRUCTION.lower()
    assert "continue" in lowered and "repeat" in lowered and "preamble" in lowered


@pytest.mark.parametrize(
    ("kind", "setting", "mode"),
    [
        ("local", "auto", "prefill"),
        ("anthropic", "auto", "prefill"),
        ("fake", "auto", "prefill"),
        ("openai", "auto", "none"),
        ("responses", "auto", "none"),
        ("gemini", "auto", "none"),  # an outside kind: unknown, so no
        ("openai", "prefill", "prefill"),
        ("openai", "instruct", "instruct"),
        ("anthropic", "none", "none"),
        ("anthropic", "instruct", "instruct"),
    ],
)
def test_continue_mode_resolves_auto_by_kind(kind: str, setting: str, mode: str) -> None:
    assert continue_mode(UpstreamConfig(name="u", kind=kind, continue_with=setting)) == mode


def test_every_built_upstream_carries_its_resolved_mode() -> None:
    config = parse_config(
        {
            "upstreams": {
                "vllm": {"kind": "openai", "base_url": "http://h/v1", "continue_with": "prefill"},
                "nim": {"kind": "openai", "base_url": "http://h/v1"},
                "oai": {"kind": "responses", "base_url": "http://h/v1"},
                "claude": {"kind": "anthropic"},
                "fake": {"kind": "fake", "wire": "openai"},
                "plain": {"kind": "fake", "continue_with": "instruct"},
                # wrapped in its limits: the wrapper says the same
                "paced": {"kind": "anthropic", "limits": {"rpm": 5}},
            },
            "models": [{"name": "m", "upstream": "vllm"}],
        }
    )
    built = build_upstreams(config, None)
    assert {name: up.continue_with for name, up in built.items()} == {
        "vllm": "prefill",
        "nim": "none",
        "oai": "none",
        "claude": "prefill",
        "fake": "prefill",
        "plain": "instruct",
        "paced": "prefill",
    }
    assert isinstance(built["paced"], LimitedUpstream)


def test_an_outside_kind_gets_its_mode_set_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_KINDS", dict(registry._KINDS))

    class Echo(Upstream):
        pass

    register_kind("echo", lambda cfg, transports: Echo(cfg.name))
    assert Echo("x").continue_with == "none"  # the class default
    cfg = UpstreamConfig(name="e", kind="echo", continue_with="prefill")
    assert build_upstream(cfg, None).continue_with == "prefill"


def test_wrappers_forward_the_mode() -> None:
    inner = Upstream("u")
    inner.continue_with = "instruct"
    assert LimitedUpstream(inner, LimitsConfig(rpm=1)).continue_with == "instruct"
    assert TextOptionsUpstream(inner, ModelOptions(think_tags=True)).continue_with == "instruct"
