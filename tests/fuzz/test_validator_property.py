"""The passthrough validator and ``parse_request`` accept exactly the same bodies.

``looks_valid`` (the fast walk) must never say yes to a body ``parse_request`` rejects --
that would send a malformed body upstream -- and ``validate_request`` must raise exactly
what ``parse_request`` raises. The converse (the validator never refuses what the parser
accepts: no false 400s) holds by construction, and is checked all the same. No
cross-dialect exceptions are needed: ``parse_request`` only judges the client's own
dialect; what another dialect cannot carry is refused later, by ``render_request``.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interlingua.dialects import anthropic, openai_chat, openai_responses
from interlingua.dialects.anthropic import validate as anthropic_validate
from interlingua.dialects.openai_chat import validate as openai_validate
from interlingua.dialects.openai_responses import validate as responses_validate
from interlingua.errors import InvalidRequestError

from .strategies import mutated_body, valid_body

CODECS = {
    "openai": (openai_validate, openai_chat.parse_request),
    "anthropic": (anthropic_validate, anthropic.request.parse_request),
    "responses": (responses_validate, openai_responses.parse_request),
}
DIALECTS = list(CODECS)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _outcome(fn: Any, body: dict[str, Any]) -> tuple[str, str | None] | None:
    """None if ``fn(body)`` accepts, else the (message, param) of its 400."""
    try:
        fn(body)
    except InvalidRequestError as err:
        return err.message, err.param
    return None


@pytest.mark.parametrize("dialect", DIALECTS)
@SETTINGS
@given(data=st.data())
def test_validator_agrees_with_the_parser(dialect: str, data: st.DataObject) -> None:
    # Through JSON and back, as the gateway sees a body (tuples would not survive).
    body = orjson.loads(orjson.dumps(data.draw(mutated_body(dialect))))
    module, parse = CODECS[dialect]
    parsed = _outcome(parse, body)
    if module.looks_valid(body):
        assert parsed is None, f"fast path accepted a body the parser refuses: {parsed}"
    assert _outcome(module.validate_request, body) == parsed


@pytest.mark.parametrize("dialect", DIALECTS)
@SETTINGS
@given(data=st.data())
def test_well_formed_bodies_take_the_fast_path(dialect: str, data: st.DataObject) -> None:
    # The fast walk is only worth having if ordinary traffic never falls back to parsing.
    body = orjson.loads(orjson.dumps(data.draw(valid_body(dialect))))
    module, parse = CODECS[dialect]
    parse(body)  # the generator makes only well-formed bodies
    assert module.looks_valid(body)


# Shapes the fast walk leaves to the parser on purpose: correct either way, just slower.
SLOW_BUT_VALID = {
    "openai": [
        {"role": "function", "name": "f", "content": "legacy result"},
        {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
    ],
    "anthropic": [
        {"role": "system", "content": "mid-conversation system"},
        {"role": "user", "content": [{"type": "mid_conv_system", "content": "sys"}]},
    ],
    "responses": [
        {
            "role": "assistant",
            "content": [
                {"type": "output_text", "text": "a"},
                {"type": "output_audio", "data": "x"},
            ],
        },
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": {"city": "P"}},
    ],
}


@pytest.mark.parametrize("dialect", DIALECTS)
def test_rare_shapes_fall_back_and_are_accepted(dialect: str) -> None:
    module, _ = CODECS[dialect]
    for message in SLOW_BUT_VALID[dialect]:
        body: dict[str, Any] = {"model": "m", "max_tokens": 5, "messages": [message]}
        if dialect == "responses":
            body = {"model": "m", "input": [message]}
        assert not module.looks_valid(body)
        module.validate_request(body)  # no error: the parser accepts it


# --- every single fault in rich bodies, exhaustively --------------------------------------
# Random mutations rarely reach a key deep in a rare block; these bodies hold every part,
# block and field the parser checks, and each of their values is broken in turn.

_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
_CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
_CUSTOM_CALL = {"id": "c2", "type": "custom", "custom": {"name": "g", "input": "raw"}}
RICH: dict[str, dict[str, Any]] = {
    "openai": {
        "model": "m", "max_tokens": 5, "max_completion_tokens": 5, "stream": False,
        "stream_options": {"include_usage": True}, "temperature": 0.5, "top_p": 1, "seed": 1,
        "stop": ["a"], "user": "u", "safety_identifier": "s", "metadata": {"k": "v"},
        "parallel_tool_calls": True, "reasoning_effort": "low", "n": 2,
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "r", "schema": _SCHEMA, "strict": True, "description": "d"}},
        "tools": [
            {"type": "function", "function": {"name": "f", "description": "d",
                                              "parameters": _SCHEMA, "strict": False}},
            {"type": "custom", "custom": {"name": "g"}},
            {"type": "custom", "custom": {"name": "h", "description": "d",
                                          "format": {"type": "text"}}},
        ],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": "s"}], "name": "n"},
            {"role": "developer", "content": "d"},
            {"role": "user", "content": [
                {"type": "text", "text": "t"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
                {"type": "file", "file": {"file_data": "QUJD", "filename": "a.pdf"}},
                {"type": "file", "file": {"file_id": "file-1"}},
                {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
            ]},
            {"role": "assistant", "content": [{"type": "text", "text": "a"},
                                              {"type": "refusal", "refusal": "r"}],
             "reasoning_content": "why", "refusal": "no", "tool_calls": [_CALL, _CUSTOM_CALL]},
            {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "ok"}]},
        ],
    },
    "anthropic": {
        "model": "m", "max_tokens": 5, "stream": False, "temperature": 0.5, "top_p": 1,
        "top_k": 3, "stop_sequences": ["a"], "metadata": {"user_id": "u"},
        "system": [{"type": "text", "text": "s"}],
        "tools": [{"name": "f", "description": "d", "input_schema": _SCHEMA, "strict": True},
                  {"type": "web_search_20250305", "name": "web_search"}],
        "tool_choice": {"type": "tool", "name": "f", "disable_parallel_tool_use": True},
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": _SCHEMA}},
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "t"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "QQ"}},
                {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                {"type": "document", "title": "d", "source": {"type": "text", "data": "doc"}},
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "QQ"}},
                {"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}},
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hm", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "tool_use", "id": "t1", "name": "f", "input": {"city": "P"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "is_error": False, "content": [
                    {"type": "text", "text": "18C"},
                    {"type": "tool_result", "tool_use_id": "t0", "content": "nested"},
                ]},
            ]},
        ],
    },
    "responses": {
        "model": "m", "instructions": "i", "max_output_tokens": 50, "stream": False,
        "temperature": 0.5, "top_p": 1, "user": "u", "safety_identifier": "s",
        "metadata": {"k": "v"}, "parallel_tool_calls": True, "store": False,
        "reasoning": {"effort": "low", "summary": "auto"},
        "text": {"format": {"type": "json_schema", "name": "r", "schema": _SCHEMA,
                            "strict": True, "description": "d"}, "verbosity": "low"},
        "tools": [
            {"type": "function", "name": "f", "description": "d", "parameters": _SCHEMA,
             "strict": False},
            {"type": "custom", "name": "g", "description": "d", "format": {"type": "text"}},
            {"type": "namespace", "name": "ns", "description": "d", "tools": [
                {"type": "function", "name": "t", "parameters": _SCHEMA},
                {"type": "custom", "name": "u"}]},
            {"type": "web_search"},
        ],
        "tool_choice": {"type": "function", "name": "f"},
        "input": [
            {"type": "message", "role": "developer", "content": "d"},
            {"role": "system", "content": [{"type": "input_text", "text": "s"}]},
            {"role": "user", "content": [
                {"type": "input_text", "text": "t"},
                {"type": "input_image", "image_url": "https://x/y.png", "detail": "low"},
                {"type": "input_file", "file_data": "QUJD", "filename": "a.pdf"},
                {"type": "input_file", "file_url": "https://x/a.pdf"},
                {"type": "input_file", "file_id": "file-1"},
                {"type": "input_image", "file_id": "file-2"},
                {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
            ]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "h"}],
             "content": [{"type": "reasoning_text", "text": "r"}], "encrypted_content": "gA"},
            {"type": "message", "role": "assistant", "id": "msg_1", "content": [
                {"type": "output_text", "text": "a", "annotations": []},
                {"type": "refusal", "refusal": "no"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}",
             "namespace": "ns"},
            {"type": "custom_tool_call", "call_id": "c2", "name": "g", "input": "raw"},
            {"type": "function_call_output", "call_id": "c1", "output": [
                {"type": "input_text", "text": "ok"}]},
            {"type": "custom_tool_call_output", "call_id": "c2", "output": "done"},
            {"type": "item_reference", "id": "msg_0"},
        ],
    },
}  # fmt: skip
FAULTS: list[Any] = [None, 0, 1.5, True, "", "x", [], {}, [None], {"type": None}, {"type": 7}]
_DROP = object()


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key / index path inside ``value``."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    out: list[tuple[Any, ...]] = []
    for key, child in items:
        out.append((*prefix, key))
        if isinstance(child, dict | list):
            out += _paths(child, (*prefix, key))
    return out


def _broken(body: dict[str, Any], path: tuple[Any, ...], fault: Any) -> dict[str, Any]:
    copy: dict[str, Any] = orjson.loads(orjson.dumps(body))
    node: Any = copy
    for key in path[:-1]:
        node = node[key]
    if fault is _DROP:
        del node[path[-1]]
    else:
        node[path[-1]] = fault
    return copy


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_single_fault_in_a_rich_body(dialect: str) -> None:
    module, parse = CODECS[dialect]
    body = RICH[dialect]
    parse(body)
    assert module.looks_valid(body)
    refused = 0
    for path in _paths(body):
        for fault in [_DROP, *FAULTS]:
            broken = _broken(body, path, fault)
            parsed = _outcome(parse, broken)
            if module.looks_valid(broken):
                assert parsed is None, (path, fault, parsed)
            assert _outcome(module.validate_request, broken) == parsed, (path, fault)
            refused += parsed is not None
    assert refused > 100  # the faults do break things: the check above is not idle
