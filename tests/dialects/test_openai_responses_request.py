"""OpenAI Responses request codec: validation (400 + param path), parse, render, round trips."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from openai.types.responses import response_create_params
from pydantic import TypeAdapter

from interlingua.core import (
    DocumentPart,
    ImagePart,
    Message,
    Reasoning,
    ReasoningPart,
    Request,
    ResponseFormat,
    TextPart,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
    ToolSpec,
    UnknownPart,
)
from interlingua.dialects.anthropic import parse_request as parse_anthropic
from interlingua.dialects.openai_chat import parse_request as parse_chat
from interlingua.dialects.openai_responses.request import (
    DIALECT_NAME,
    parse_request,
    render_request,
)
from interlingua.errors import InvalidRequestError

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
SHELL_SCHEMA = {
    "type": "object",
    "properties": {"command": {"type": "array", "items": {"type": "string"}}},
    "required": ["command"],
    "additionalProperties": False,
}
LARK = 'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF\n'

# A body shaped like what Codex sends: instructions, a developer message, custom
# apply_patch with a lark grammar, function and namespace tools, a hosted tool, reasoning
# with encrypted_content, function/custom call history (docs/protocols.md,
# "Responses: request body" and "Responses: input items").
CODEX: dict[str, Any] = {
    "model": "gpt-5-codex",
    "instructions": "You are Codex, a coding agent.",
    "input": [
        {
            "type": "message",
            "role": "developer",
            "content": [
                {"type": "input_text", "text": "<permissions>workspace-write</permissions>"}
            ],
        },
        {
            "type": "message",
            "role": "user",
            "content": [
                {
                    "type": "input_text",
                    "text": "<environment_context>cwd=/repo</environment_context>",
                }
            ],
        },
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "fix the failing test"}],
        },
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "**Inspecting the repo**"}],
            "encrypted_content": "gAAAAABoEncrypted==",
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "name": "shell",
            "arguments": '{"command":["bash","-lc","pytest -q"]}',
            "call_id": "call_1",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "1 failed"},
        {
            "type": "custom_tool_call",
            "id": "ctc_1",
            "status": "completed",
            "call_id": "call_2",
            "name": "apply_patch",
            "input": "*** Begin Patch\n*** Update File: a.py\n@@\n-x\n+y\n*** End Patch\n",
        },
        {"type": "custom_tool_call_output", "call_id": "call_2", "output": "Success. Updated a.py"},
        {
            "type": "function_call",
            "name": "read",
            "namespace": "mcp__fs",
            "arguments": '{"path":"a.py"}',
            "call_id": "call_3",
        },
        {
            "type": "function_call_output",
            "call_id": "call_3",
            "output": [{"type": "input_text", "text": "y"}],
        },
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Fixed the test.", "annotations": []}],
        },
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "thanks, now commit"}],
        },
    ],
    "tools": [
        {
            "type": "function",
            "name": "shell",
            "description": "Runs a shell command and returns its output.",
            "strict": False,
            "parameters": SHELL_SCHEMA,
        },
        {
            "type": "custom",
            "name": "apply_patch",
            "description": "Use the `apply_patch` tool to edit files.",
            "format": {"type": "grammar", "syntax": "lark", "definition": LARK},
        },
        {"type": "web_search"},
        {
            "type": "namespace",
            "name": "mcp__fs",
            "description": "Filesystem MCP server",
            "tools": [
                {
                    "type": "function",
                    "name": "read",
                    "description": "Read a file",
                    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
                    "defer_loading": True,
                }
            ],
        },
    ],
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "reasoning": {"effort": "medium", "summary": "auto"},
    "store": False,
    "stream": True,
    "include": ["reasoning.encrypted_content"],
    "prompt_cache_key": "019a-session",
    "text": {"verbosity": "low"},
}

# A body shaped like the OpenAI Agents SDK's: string-content easy messages, function tools
# with strict true, structured output, metadata, previous_response_id.
AGENTS: dict[str, Any] = {
    "model": "gpt-4.1",
    "instructions": "You are a helpful assistant.",
    "input": [
        {"role": "user", "content": "What's the weather in Paris?"},
        {
            "type": "function_call",
            "call_id": "call_w",
            "name": "get_weather",
            "arguments": '{"city":"Paris"}',
            "id": "fc_w",
            "status": "completed",
        },
        {"type": "function_call_output", "call_id": "call_w", "output": "18C"},
        {
            "id": "msg_w",
            "content": [
                {"annotations": [], "text": "It is 18C.", "type": "output_text", "logprobs": []}
            ],
            "role": "assistant",
            "status": "completed",
            "type": "message",
        },
        {"role": "user", "content": "And in Rome?"},
    ],
    "tools": [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "additionalProperties": False,
            },
            "strict": True,
        }
    ],
    "tool_choice": {"type": "function", "name": "get_weather"},
    "temperature": 0.3,
    "top_p": 0.9,
    "max_output_tokens": 500,
    "text": {
        "format": {
            "type": "json_schema",
            "name": "answer",
            "schema": {"type": "object", "properties": {"a": {"type": "string"}}},
            "strict": True,
        }
    },
    "metadata": {"trace": "t1"},
    "previous_response_id": "resp_1",
    "truncation": "disabled",
    "user": "u-1",
}

_STREAMING = TypeAdapter(response_create_params.ResponseCreateParamsStreaming)
_PLAIN = TypeAdapter(response_create_params.ResponseCreateParamsNonStreaming)


def sdk_valid(body: dict[str, Any]) -> None:
    """The body validates against the official SDK's request TypedDicts."""
    (_STREAMING if body.get("stream") else _PLAIN).validate_python(body)


def body(*items: Any, **kw: Any) -> dict[str, Any]:
    return {"model": "gpt-5", "input": list(items) or "hi", **kw}


def bad(payload: Any) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as info:
        parse_request(payload)
    assert info.value.status == 400
    return info.value


def round_trip(payload: dict[str, Any]) -> dict[str, Any]:
    original = copy.deepcopy(payload)
    out = render_request(parse_request(payload))
    assert payload == original  # parsing does not mutate the client's body
    return out


# ----------------------------------------------------------------------------- round trips


def test_codex_body_round_trips_exactly() -> None:
    out = round_trip(CODEX)
    assert out == CODEX
    sdk_valid(out)


def test_agents_sdk_body_round_trips_exactly() -> None:
    out = round_trip(AGENTS)
    assert out == AGENTS
    sdk_valid(out)


def test_bare_string_input_round_trips() -> None:
    assert round_trip(body()) == body()


def test_normalization_drops_nulls_and_stream_false() -> None:
    payload = body({"role": "user", "content": "x"}, stream=False, temperature=None)
    assert round_trip(payload) == body({"role": "user", "content": "x"})


@pytest.mark.parametrize(
    "item",
    [
        {"type": "item_reference", "id": "msg_0"},
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"type": "search"},
        },
        {"type": "computer_call_output", "call_id": "c", "output": {"type": "computer_screenshot"}},
    ],
)
def test_unknown_items_are_kept_whole(item: dict[str, Any]) -> None:
    payload = body({"role": "user", "content": "a"}, item, {"role": "user", "content": "b"})
    r = parse_request(payload)
    assert any(isinstance(p, UnknownPart) and p.raw == item for m in r.messages for p in m.parts)
    assert round_trip(payload) == payload


# ----------------------------------------------------------------------------- parsing


def test_codex_body_parses_to_the_neutral_form() -> None:
    r = parse_request(CODEX)
    assert r.source_dialect == DIALECT_NAME == "responses"
    assert [m.role for m in r.messages] == [
        "system", "system", "user", "user", "assistant", "user", "assistant", "user",
        "assistant", "user", "assistant", "user",
    ]  # fmt: skip
    assert r.messages[0].parts == (TextPart("You are Codex, a coding agent."),)
    assert r.messages[1].meta["role"] == "developer"
    reasoning, call = r.messages[4].parts
    assert isinstance(reasoning, ReasoningPart) and reasoning.text == "**Inspecting the repo**"
    assert reasoning.signature is None
    assert reasoning.meta["responses_item"]["encrypted_content"] == "gAAAAABoEncrypted=="
    assert call == ToolCallPart("call_1", "shell", '{"command":["bash","-lc","pytest -q"]}')
    assert call.meta["source_param"] == "input[4].arguments"
    assert r.messages[5].parts == (ToolResultPart("call_1", (TextPart("1 failed"),)),)
    (patch,) = r.messages[6].parts
    assert isinstance(patch, ToolCallPart) and patch.kind == "custom"
    assert patch.arguments.startswith("*** Begin Patch")
    assert r.messages[7].parts == (ToolResultPart("call_2", (TextPart("Success. Updated a.py"),)),)
    (ns_call,) = r.messages[8].parts
    assert isinstance(ns_call, ToolCallPart) and ns_call.name == "mcp__fs__read"
    shell, apply_patch, read = r.tools
    assert shell == ToolSpec(
        "shell", "Runs a shell command and returns its output.", SHELL_SCHEMA, False
    )
    assert apply_patch.kind == "custom" and apply_patch.format == CODEX["tools"][1]["format"]
    # omitted strict = true (docs/protocols.md, "Responses: request body")
    assert read.name == "mcp__fs__read" and read.strict is True
    assert r.tool_choice == ToolChoice("auto")
    assert r.parallel_tool_calls is False
    assert r.reasoning == Reasoning(effort="medium")
    assert r.stream is True
    for key in ("store", "include", "prompt_cache_key"):
        assert r.extra[key] == CODEX[key]


def test_agents_body_parses_to_the_neutral_form() -> None:
    r = parse_request(AGENTS)
    assert r.max_tokens == 500 and r.temperature == 0.3 and r.top_p == 0.9
    assert r.user == "u-1" and r.metadata == {"trace": "t1"}
    assert r.tool_choice == ToolChoice("tool", "get_weather")
    assert r.response_format == ResponseFormat(
        "json_schema", "answer", AGENTS["text"]["format"]["schema"], strict=True
    )
    assert r.extra["previous_response_id"] == "resp_1"
    _, turn, results, answer, again = r.messages[1:]
    assert turn.role == "assistant" and isinstance(turn.parts[0], ToolCallPart)
    assert results.role == "user" and isinstance(results.parts[0], ToolResultPart)
    assert answer.parts == (TextPart("It is 18C."),)
    assert again.parts == (TextPart("And in Rome?"),)


def test_one_assistant_turn_groups_message_calls_and_reasoning() -> None:
    r = parse_request(
        body(
            {"role": "user", "content": "go"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Checking."}],
            },
            {"type": "function_call", "call_id": "c1", "name": "a", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "b", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "1"},
            {"type": "function_call_output", "call_id": "c2", "output": "2"},
        )
    )
    assert [m.role for m in r.messages] == ["user", "assistant", "user"]
    assert [type(p).__name__ for p in r.messages[1].parts] == [
        "ReasoningPart", "TextPart", "ToolCallPart", "ToolCallPart",
    ]  # fmt: skip
    assert [p.tool_call_id for p in r.messages[2].parts] == ["c1", "c2"]  # type: ignore[union-attr]
    assert r.messages[2].meta["source_index"] == 5


def test_two_assistant_message_items_round_trip_as_two() -> None:
    payload = body(
        {"role": "user", "content": "go"},
        {
            "type": "message",
            "role": "assistant",
            "id": "m1",
            "content": [{"type": "output_text", "text": "a"}],
        },
        {"type": "message", "role": "assistant", "id": "m2", "content": "b"},
    )
    r = parse_request(payload)
    assert len(r.messages) == 2 and len(r.messages[1].parts) == 2
    assert round_trip(payload) == payload


def test_content_parts() -> None:
    parts = [
        {"type": "input_text", "text": "look"},
        {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "high"},
        {"type": "input_image", "image_url": "https://x/cat.png", "detail": "auto"},
        {
            "type": "input_file",
            "file_data": "data:application/pdf;base64,JVBE",
            "filename": "a.pdf",
        },
        {"type": "input_file", "file_data": "JVBE", "filename": "b.pdf"},
        {"type": "input_file", "file_url": "https://x/c.pdf"},
        {"type": "input_file", "file_id": "file-1"},
        {"type": "input_image", "file_id": "file-2", "detail": "low"},
        {"type": "input_audio", "input_audio": {"data": "UklG", "format": "wav"}},
    ]
    payload = body({"type": "message", "role": "user", "content": parts})
    got = parse_request(payload).messages[0].parts
    assert got[:7] == (
        TextPart("look"),
        ImagePart(media_type="image/png", data=PNG, detail="high"),
        ImagePart(url="https://x/cat.png", detail="auto"),
        DocumentPart(media_type="application/pdf", data="JVBE", title="a.pdf"),
        DocumentPart(media_type="application/pdf", data="JVBE", title="b.pdf"),
        DocumentPart(url="https://x/c.pdf"),
        DocumentPart(),
    )
    assert got[6].meta["file_id"] == "file-1"
    assert got[7:] == (UnknownPart(DIALECT_NAME, parts[7]), UnknownPart(DIALECT_NAME, parts[8]))
    assert round_trip(payload) == payload


def test_assistant_refusal_and_unknown_parts() -> None:
    refusal = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "refusal", "refusal": "No."}],
    }
    r = parse_request(body(refusal))
    (part,) = r.messages[0].parts
    assert part == TextPart("No.") and part.meta["refusal"] is True
    odd = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_audio", "data": "x"}],
    }
    assert parse_request(body(odd)).messages[0].parts == (UnknownPart("responses.item", odd),)
    payload = body(refusal, odd)
    assert round_trip(payload) == payload


def test_tool_output_parts() -> None:
    image = {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"}
    output = [{"type": "input_text", "text": "see"}, image]
    payload = body(
        {"type": "function_call_output", "call_id": "c", "output": output, "id": "fco_1"}
    )
    (result,) = parse_request(payload).messages[0].parts
    assert isinstance(result, ToolResultPart)
    assert result.content == (
        TextPart("see"),
        ImagePart(media_type="image/png", data=PNG, detail="auto"),
    )
    assert round_trip(payload) == payload
    odd = [{"type": "input_image", "file_id": "file-1", "detail": "auto"}]
    payload = body({"type": "function_call_output", "call_id": "c", "output": odd})
    assert parse_request(payload).messages[0].parts == (ToolResultPart("c"),)
    assert round_trip(payload) == payload


def test_reasoning_item_with_content_prefers_content_text() -> None:
    item = {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "S"}],
        "content": [
            {"type": "reasoning_text", "text": "A"},
            {"type": "reasoning_text", "text": "B"},
        ],
    }
    (part,) = parse_request(body(item)).messages[0].parts
    assert isinstance(part, ReasoningPart) and part.text == "A\n\nB"
    assert round_trip(body(item)) == body(item)


def test_function_call_arguments_object_and_absent() -> None:
    r = parse_request(
        body(
            {"type": "function_call", "call_id": "c1", "name": "a", "arguments": {"x": 1}},
            {"type": "function_call", "call_id": "c2", "name": "b"},
        )
    )
    assert [p.arguments for p in r.messages[0].parts] == ['{"x":1}', ""]  # type: ignore[union-attr]


def test_input_may_be_absent() -> None:
    r = parse_request({"model": "m", "instructions": "sys", "previous_response_id": "resp_1"})
    assert [m.role for m in r.messages] == ["system"]
    assert render_request(r) == {
        "model": "m", "instructions": "sys", "input": [], "previous_response_id": "resp_1",
    }  # fmt: skip


def test_safety_identifier_stands_in_for_user() -> None:
    payload = body(safety_identifier="s-1")
    r = parse_request(payload)
    assert r.user == "s-1"
    assert round_trip(payload) == payload  # no `user` invented


@pytest.mark.parametrize(
    ("fmt", "expected"),
    [
        ({"type": "text"}, ResponseFormat("text")),
        ({"type": "json_object"}, ResponseFormat("json_object")),
        (
            {"type": "json_schema", "name": "n", "schema": {"type": "object"}, "description": "d"},
            ResponseFormat("json_schema", "n", {"type": "object"}, description="d"),
        ),
    ],
)
def test_text_format(fmt: dict[str, Any], expected: ResponseFormat) -> None:
    payload = body(text={"format": fmt, "verbosity": "high"})
    r = parse_request(payload)
    assert r.response_format == expected
    assert round_trip(payload) == payload


@pytest.mark.parametrize(
    ("reasoning", "expected"),
    [
        ({"effort": "high"}, Reasoning(effort="high")),
        ({"effort": "none"}, Reasoning(enabled=False, effort="none")),
        ({"summary": "detailed"}, None),
    ],
)
def test_reasoning(reasoning: dict[str, Any], expected: Reasoning | None) -> None:
    payload = body(reasoning=reasoning)
    assert parse_request(payload).reasoning == expected
    assert round_trip(payload) == payload


# ----------------------------------------------------------------------------- tools


def test_function_tool_strict_default_is_true_and_restored() -> None:
    payload = body(tools=[{"type": "function", "name": "f", "parameters": {"type": "object"}}])
    (spec,) = parse_request(payload).tools
    assert spec.strict is True
    assert round_trip(payload) == payload


def test_custom_tool_without_format_and_custom_tool_choice() -> None:
    payload = body(
        tools=[{"type": "custom", "name": "patch", "description": "raw"}],
        tool_choice={"type": "custom", "name": "patch"},
    )
    r = parse_request(payload)
    assert r.tools == (ToolSpec("patch", "raw", kind="custom"),)
    assert r.tool_choice == ToolChoice("tool", "patch")
    assert round_trip(payload) == payload


@pytest.mark.parametrize(
    ("choice", "neutral"),
    [
        ("none", ToolChoice("none")),
        ("required", ToolChoice("required")),
        ({"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "f"}]}, ToolChoice("required")),
        ({"type": "allowed_tools", "mode": "auto", "tools": []}, ToolChoice("auto")),
        ({"type": "web_search_preview"}, None),
        ({"type": "mcp", "server_label": "s", "name": "t"}, None),
    ],
)  # fmt: skip
def test_tool_choice(choice: Any, neutral: ToolChoice | None) -> None:
    payload = body(tools=[{"type": "function", "name": "f", "strict": True}], tool_choice=choice)
    assert parse_request(payload).tool_choice == neutral
    assert round_trip(payload) == payload


def test_hosted_tools_keep_their_positions() -> None:
    tools = [
        {"type": "file_search", "vector_store_ids": ["vs_1"]},
        {"type": "function", "name": "f", "strict": False, "parameters": {"type": "object"}},
        {"type": "code_interpreter", "container": {"type": "auto"}},
        {"type": "tool_search"},
        {"type": "namespace", "name": "empty", "description": "d", "tools": []},
    ]
    payload = body(tools=tools)
    assert [t.name for t in parse_request(payload).tools] == ["f"]
    assert round_trip(payload) == payload


def test_namespace_with_custom_member_and_two_namespaces() -> None:
    tools = [
        {"type": "namespace", "name": "a", "description": "A", "tools": [
            {"type": "function", "name": "x", "strict": True, "parameters": {"type": "object"}},
            {"type": "custom", "name": "y"},
        ]},
        {"type": "namespace", "name": "b", "description": "B", "tools": [
            {"type": "function", "name": "x", "strict": False, "parameters": None},
        ]},
    ]  # fmt: skip
    payload = body(tools=tools)
    r = parse_request(payload)
    assert [(t.name, t.kind) for t in r.tools] == [
        ("a__x", "function"),
        ("a__y", "custom"),
        ("b__x", "function"),
    ]
    expected = copy.deepcopy(payload)
    del expected["tools"][1]["tools"][0]["parameters"]  # null means absent
    assert round_trip(payload) == expected
    call = {
        "type": "custom_tool_call",
        "call_id": "c",
        "name": "y",
        "namespace": "a",
        "input": "raw",
    }
    payload = body(call, tools=tools)
    assert parse_request(payload).messages[0].parts[0].name == "a__y"  # type: ignore[union-attr]
    assert round_trip(payload)["input"] == [call]


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        ({"input": "hi"}, "model"),
        ({"model": 3, "input": "hi"}, "model"),
        (body(input=5), "input"),
        (body(3), "input[0]"),
        (body({"type": 3}), "input[0].type"),
        (body({"content": "x"}), "input[0].role"),
        (body({"role": "tool", "content": "x"}), "input[0].role"),
        (body({"role": "user"}), "input[0].content"),
        (body({"role": "user", "content": 5}), "input[0].content"),
        (body({"role": "assistant", "content": 5}), "input[0].content"),
        (body({"role": "assistant"}), "input[0].content"),
        (body({"role": "user", "content": ["x"]}), "input[0].content[0]"),
        (body({"role": "user", "content": [{"text": "x"}]}), "input[0].content[0].type"),
        (body({"role": "user", "content": [{"type": "input_text"}]}), "input[0].content[0].text"),
        (body({"role": "assistant", "content": [{"type": "output_text"}]}), "input[0].content[0].text"),
        (body({"role": "assistant", "content": [{"type": "refusal"}]}), "input[0].content[0].refusal"),
        (body({"role": "user", "content": [{"type": "input_image"}]}), "input[0].content[0].image_url"),
        (body({"role": "user", "content": [{"type": "input_image", "image_url": 1}]}), "input[0].content[0].image_url"),
        (body({"role": "user", "content": [{"type": "input_image", "image_url": "u", "detail": 1}]}), "input[0].content[0].detail"),
        (body({"role": "user", "content": [{"type": "input_file"}]}), "input[0].content[0].file_data"),
        (body({"role": "user", "content": [{"type": "input_file", "file_url": 1}]}), "input[0].content[0].file_url"),
        (body({"role": "user", "content": "a"}, {"type": "function_call", "name": "f"}), "input[1].call_id"),
        (body({"type": "function_call", "call_id": "c"}), "input[0].name"),
        (body({"type": "function_call", "call_id": "c", "name": "f", "arguments": 1}), "input[0].arguments"),
        (body({"type": "function_call", "call_id": "c", "name": "f", "namespace": 1}), "input[0].namespace"),
        (body({"type": "custom_tool_call", "call_id": "c", "name": "f"}), "input[0].input"),
        (body({"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"type": "function_call_output", "output": "x"}), "input[2].call_id"),
        (body({"type": "function_call_output", "call_id": "c"}), "input[0].output"),
        (body({"type": "function_call_output", "call_id": "c", "output": 1}), "input[0].output"),
        (body({"type": "reasoning", "summary": 1}), "input[0].summary"),
        (body({"type": "reasoning", "summary": [1]}), "input[0].summary[0]"),
        (body({"type": "reasoning", "summary": [{"type": "summary_text"}]}), "input[0].summary[0].text"),
        (body({"type": "reasoning", "summary": [], "encrypted_content": 1}), "input[0].encrypted_content"),
        (body(instructions=1), "instructions"),
        (body(tools={}), "tools"),
        (body(tools=[1]), "tools[0]"),
        (body(tools=[{}]), "tools[0].type"),
        (body(tools=[{"type": "function"}]), "tools[0].name"),
        (body(tools=[{"type": "function", "name": ""}]), "tools[0].name"),
        (body(tools=[{"type": "function", "name": "f", "parameters": 1}]), "tools[0].parameters"),
        (body(tools=[{"type": "function", "name": "f", "strict": "yes"}]), "tools[0].strict"),
        (body(tools=[{"type": "function", "name": "f", "description": 1}]), "tools[0].description"),
        (body(tools=[{"type": "custom", "name": "f", "format": "lark"}]), "tools[0].format"),
        (body(tools=[{"type": "namespace", "tools": [{}]}]), "tools[0].name"),
        (body(tools=[{"type": "namespace", "name": "n", "tools": 5}]), "tools[0].tools"),
        (body(tools=[{"type": "namespace", "name": "n", "tools": [{"type": "web_search"}]}]), "tools[0].tools[0].type"),
        (body(tools=[{"type": "namespace", "name": "n", "tools": [{"type": "function"}]}]), "tools[0].tools[0].name"),
        (body(tool_choice="any"), "tool_choice"),
        (body(tool_choice=1), "tool_choice"),
        (body(tool_choice={}), "tool_choice.type"),
        (body(tool_choice={"type": "function"}), "tool_choice.name"),
        (body(reasoning="high"), "reasoning"),
        (body(reasoning={"effort": 1}), "reasoning.effort"),
        (body(text=1), "text"),
        (body(text={"format": 1}), "text.format"),
        (body(text={"format": {}}), "text.format.type"),
        (body(text={"format": {"type": "xml"}}), "text.format.type"),
        (body(text={"format": {"type": "json_schema", "name": "n"}}), "text.format.schema"),
        (body(text={"format": {"type": "json_schema", "schema": {}}}), "text.format.name"),
        (body(text={"format": {"type": "json_schema", "name": "n", "schema": 1}}), "text.format.schema"),
        (body(text={"format": {"type": "json_schema", "name": "n", "schema": {}, "strict": 1}}), "text.format.strict"),
        (body(max_output_tokens="5"), "max_output_tokens"),
        (body(temperature=True), "temperature"),
        (body(top_p="x"), "top_p"),
        (body(stream="yes"), "stream"),
        (body(user=1), "user"),
        (body(safety_identifier=1), "safety_identifier"),
        (body(metadata=[]), "metadata"),
        (body(parallel_tool_calls="no"), "parallel_tool_calls"),
    ],
)  # fmt: skip
def test_invalid_fields_are_400s_naming_the_field(payload: Any, param: str) -> None:
    assert bad(payload).param == param


def test_non_object_body() -> None:
    assert bad([1]).code == "invalid_json"


def test_too_deep_arguments_object_is_a_400() -> None:
    deep: Any = {}
    for _ in range(300):
        deep = {"a": deep}
    payload = body({"type": "function_call", "call_id": "c", "name": "f", "arguments": deep})
    assert bad(payload).param == "input[0].arguments"


# ----------------------------------------------------------------------------- other dialects


def test_chat_request_renders_to_a_valid_responses_body() -> None:
    chat = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": "Use tools."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"}},
            ]},
            {"role": "assistant", "content": "Checking.", "reasoning_content": "hmm", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
            {"role": "system", "content": "late system"},
            {"role": "user", "content": "thanks"},
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
        "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": {"type": "object"}}},
        "max_completion_tokens": 100,
        "reasoning_effort": "low",
        "stop": ["END"],
        "seed": 1,
        "stream": True,
        "stream_options": {"include_usage": True},
        "user": "u",
        "metadata": {"k": "v"},
    }  # fmt: skip
    out = render_request(parse_chat(chat))
    sdk_valid(out)
    assert out == {
        "model": "gpt-4o",
        "instructions": "Be brief.\n\nUse tools.",
        "input": [
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "What is this?"},
                {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}", "detail": "auto"},
                {"type": "input_file", "file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"},
            ]},
            # the reasoning_content is dropped: Responses replays only its own rs_ items
            {"type": "message", "role": "assistant", "content": "Checking."},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
            {"type": "message", "role": "system", "content": "late system"},
            {"type": "message", "role": "user", "content": "thanks"},
        ],
        "max_output_tokens": 100,
        "user": "u",
        "stream": True,
        # Chat's omitted strict means false; Responses' means true: always explicit
        # (docs/protocols.md, "Tool definitions and tool calls").
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": False}],
        "tool_choice": {"type": "function", "name": "get_weather"},
        "reasoning": {"effort": "low"},
        "text": {"format": {"type": "json_schema", "name": "w", "schema": {"type": "object"}}},
    }  # fmt: skip


def test_anthropic_request_renders_to_a_valid_responses_body() -> None:
    anthropic = {
        "model": "claude-x",
        "max_tokens": 2000,
        "system": [{"type": "text", "text": "You are terse."}],
        "thinking": {"type": "enabled", "budget_tokens": 4000},
        "tools": [{"name": "get_weather", "input_schema": {"type": "object", "properties": {}}}],
        "tool_choice": {"type": "any"},
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "Weather?"},
                {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}},
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "let me see", "signature": "sig"},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C", "is_error": True},
                {"type": "text", "text": "and?"},
            ]},
        ],
    }  # fmt: skip
    out = render_request(parse_anthropic(anthropic))
    sdk_valid(out)
    assert out["instructions"] == "You are terse."
    assert out["reasoning"] == {"effort": "medium"}  # budget 4000 via the shared table
    assert out["tool_choice"] == "required"
    assert out["input"] == [
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Weather?"},
            {"type": "input_image", "image_url": "https://x/y.png", "detail": "auto"},
            {"type": "input_text", "text": "notes"},
        ]},
        {"type": "function_call", "call_id": "toolu_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
        {"type": "function_call_output", "call_id": "toolu_1", "output": "Error: 18C"},
        {"type": "message", "role": "user", "content": "and?"},
    ]  # fmt: skip


def test_neutral_custom_tools_render_as_custom() -> None:
    fmt = {"type": "grammar", "syntax": "lark", "definition": LARK}
    request = Request(
        "m",
        (
            Message("user", (TextPart("patch it"),)),
            Message(
                "assistant", (ToolCallPart("c1", "apply_patch", "*** Begin Patch", kind="custom"),)
            ),
            Message("user", (ToolResultPart("c1", (TextPart("ok"),)),)),
        ),
        tools=(
            ToolSpec("apply_patch", "edit", kind="custom", format=fmt),
            ToolSpec("f", strict=True),
        ),
        tool_choice=ToolChoice("tool", "apply_patch"),
        source_dialect="anthropic",
        extra={"store": True},  # another dialect's extra is never sent
    )
    out = render_request(request)
    sdk_valid(out)
    assert out == {
        "model": "m",
        "input": [
            {"type": "message", "role": "user", "content": "patch it"},
            {
                "type": "custom_tool_call",
                "call_id": "c1",
                "name": "apply_patch",
                "input": "*** Begin Patch",
            },
            {"type": "custom_tool_call_output", "call_id": "c1", "output": "ok"},
        ],
        "tools": [
            {"type": "custom", "name": "apply_patch", "description": "edit", "format": fmt},
            {
                "type": "function",
                "name": "f",
                "parameters": {"type": "object", "properties": {}},
                "strict": True,
            },
        ],
        "tool_choice": {"type": "custom", "name": "apply_patch"},
    }


def test_foreign_parts_that_cannot_be_sent_are_400s() -> None:
    audio = UnknownPart("openai", {"type": "input_audio", "input_audio": {}})
    request = Request("m", (Message("user", (TextPart("a"), audio), meta={"source_index": 2}),))
    with pytest.raises(InvalidRequestError) as info:
        render_request(request)
    assert info.value.param == "messages[2].content[1]"
    request = Request("m", (Message("assistant", (ImagePart(url="u"),)),))
    with pytest.raises(InvalidRequestError) as info:
        render_request(request)
    assert info.value.param == "messages[0].content[0]"
    request = Request("m", (Message("user", (DocumentPart(media_type="text/plain"),)),))
    with pytest.raises(InvalidRequestError):
        render_request(request)


def test_foreign_tool_results_with_images_and_documents() -> None:
    content = (
        TextPart("see"),
        ImagePart(url="https://x/i.png"),
        DocumentPart(url="https://x/d.pdf", title="d"),
    )
    request = Request(
        "m",
        (
            Message(
                "user", (ToolResultPart("c", content), ReasoningPart("x"), ToolCallPart("z", "n"))
            ),
        ),
    )
    out = render_request(request)
    sdk_valid(out)
    assert out["input"] == [
        {"type": "function_call_output", "call_id": "c", "output": [
            {"type": "input_text", "text": "see"},
            {"type": "input_image", "image_url": "https://x/i.png", "detail": "auto"},
            {"type": "input_file", "file_url": "https://x/d.pdf", "filename": "d"},
        ]},
    ]  # fmt: skip


def test_reasoning_budget_and_off_switch() -> None:
    def effort(reasoning: Reasoning) -> Any:
        return render_request(Request("m", (), reasoning=reasoning)).get("reasoning")

    assert effort(Reasoning(budget_tokens=1024)) == {"effort": "low"}
    assert effort(Reasoning(budget_tokens=30000)) == {"effort": "high"}
    assert effort(Reasoning()) is None
    assert effort(Reasoning(enabled=False)) is None  # a non-reasoning model rejects "none"
    assert effort(Reasoning(enabled=False, effort="none")) == {"effort": "none"}


def test_rendered_body_is_json() -> None:
    assert orjson.loads(orjson.dumps(render_request(parse_request(CODEX)))) == CODEX
