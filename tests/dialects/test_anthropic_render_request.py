"""Anthropic request rendering: neutral Request -> upstream body.

The rules: docs/protocols.md, "Across the dialects".
"""

from __future__ import annotations

from typing import Any

import pytest

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
from interlingua.dialects._common import sanitize_tool_id
from interlingua.dialects.anthropic import DIALECT
from interlingua.errors import InvalidRequestError

PNG = "iVBORw0KGgo="


def msg(role: str, *parts: Any) -> Message:
    return Message(role, tuple(TextPart(p) if isinstance(p, str) else p for p in parts))  # type: ignore[arg-type]


def req(*messages: Message, **kw: Any) -> Request:
    return Request(model="claude-x", messages=messages, **kw)


def render(*messages: Message, **kw: Any) -> dict[str, Any]:
    return DIALECT.render_request(req(*messages, **kw))


def render_error(*messages: Message, **kw: Any) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as info:
        render(*messages, **kw)
    assert info.value.status == 400
    return info.value


def test_minimal_body_and_default_max_tokens() -> None:
    assert render(msg("user", "hi")) == {
        "model": "claude-x",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": "hi"}],
    }


def test_system_messages_are_hoisted_in_order() -> None:
    body = render(
        msg("system", "one"),
        msg("user", "hi"),
        msg("system", "two"),
        msg("assistant", "yo"),
        msg("user", "more"),
    )
    assert body["system"] == [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]


def test_single_plain_system_is_a_string_and_cache_control_survives() -> None:
    assert render(msg("system", "s"), msg("user", "u"))["system"] == "s"
    cc = {"type": "ephemeral"}
    body = render(Message("system", (TextPart("s", {"cache_control": cc}),)), msg("user", "u"))
    assert body["system"] == [{"type": "text", "text": "s", "cache_control": cc}]


def test_consecutive_same_role_messages_are_merged() -> None:
    body = render(msg("user", "a"), msg("user", "b"), msg("assistant", "c"), msg("assistant", "d"))
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "c"}, {"type": "text", "text": "d"}],
        },
    ]


def test_conversation_starting_with_assistant_gets_a_user_turn() -> None:
    body = render(msg("system", "s"), msg("assistant", "Hello!"), msg("user", "hi"))
    assert body["messages"][0] == {"role": "user", "content": "."}
    assert body["messages"][1] == {"role": "assistant", "content": "Hello!"}


def test_only_system_still_has_a_user_turn() -> None:
    assert render(msg("system", "s"))["messages"] == [{"role": "user", "content": "."}]


def test_empty_text_parts_and_empty_turns_are_dropped() -> None:
    body = render(msg("user", "hi", ""), msg("assistant", ""), msg("user", "  ", "again"))
    # the empty assistant turn disappears, so the two user turns merge
    assert body["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "again"}],
        }
    ]


def test_tool_results_come_first_in_their_user_turn() -> None:
    body = render(
        msg("user", "q"),
        msg("assistant", ToolCallPart("call_1", "f", '{"a":1}')),
        msg("user", "thanks, and:", ToolResultPart("call_1", (TextPart("42"),))),
    )
    content = body["messages"][2]["content"]
    assert [b["type"] for b in content] == ["tool_result", "text"]
    assert content[0] == {"type": "tool_result", "tool_use_id": "call_1", "content": "42"}


def test_openai_style_tool_messages_merge_into_one_user_turn() -> None:
    # OpenAI's separate tool messages arrive as consecutive user messages.
    body = render(
        msg("user", "q"),
        msg("assistant", ToolCallPart("a", "f", "{}"), ToolCallPart("b", "g", "")),
        msg("user", ToolResultPart("a", (TextPart("1"),))),
        msg("user", ToolResultPart("b", (TextPart("2"),), is_error=True)),
        msg("user", "go on"),
    )
    assert len(body["messages"]) == 3
    assistant, results = body["messages"][1]["content"], body["messages"][2]["content"]
    assert assistant == [
        {"type": "tool_use", "id": "a", "name": "f", "input": {}},
        {"type": "tool_use", "id": "b", "name": "g", "input": {}},
    ]
    assert results == [
        {"type": "tool_result", "tool_use_id": "a", "content": "1"},
        {"type": "tool_result", "tool_use_id": "b", "content": "2", "is_error": True},
        {"type": "text", "text": "go on"},
    ]


def test_tool_ids_are_sanitized_consistently() -> None:
    bad = "functions.Bash:0"
    body = render(
        msg("user", "q"),
        msg("assistant", ToolCallPart(bad, "Bash", '{"cmd":"ls"}')),
        msg("user", ToolResultPart(bad, (TextPart("ok"),))),
    )
    call_id = body["messages"][1]["content"][0]["id"]
    result_id = body["messages"][2]["content"][0]["tool_use_id"]
    assert call_id == result_id == sanitize_tool_id(bad)
    assert call_id.startswith("functions_Bash_0_")


@pytest.mark.parametrize("arguments", ['{"a":', "[1, 2]", "nope"])
def test_invalid_tool_arguments_are_rejected(arguments: str) -> None:
    err = render_error(
        msg("user", "q"),
        msg("assistant", "x", ToolCallPart("c1", "f", "{}"), ToolCallPart("c2", "g", arguments)),
    )
    assert err.param == "messages[1].tool_calls[1].function.arguments"
    assert "c2" in err.message


def test_images() -> None:
    body = render(
        msg(
            "user",
            ImagePart(media_type="image/png", data=PNG),
            ImagePart(url="https://x/y.png"),
            ImagePart(url=f"data:image/jpg;base64,{PNG}"),
        )
    )
    assert body["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": PNG}},
    ]


def test_unsupported_image_type_is_rejected() -> None:
    err = render_error(msg("user", "x", ImagePart(media_type="image/tiff", data=PNG)))
    assert err.param == "messages[0].content[1]"
    assert "image/tiff" in err.message


def test_documents() -> None:
    body = render(
        msg(
            "user",
            DocumentPart(media_type="application/pdf", data="JVBER", title="a.pdf"),
            DocumentPart(text="plain"),
            DocumentPart(media_type="text/plain", data="aGVsbG8="),
            DocumentPart(url="https://x/a.pdf"),
        )
    )
    sources = [b["source"] for b in body["messages"][0]["content"]]
    assert body["messages"][0]["content"][0]["title"] == "a.pdf"
    assert sources == [
        {"type": "base64", "media_type": "application/pdf", "data": "JVBER"},
        {"type": "text", "media_type": "text/plain", "data": "plain"},
        {"type": "text", "media_type": "text/plain", "data": "hello"},
        {"type": "url", "url": "https://x/a.pdf"},
    ]
    err = render_error(msg("user", DocumentPart(media_type="application/zip", data="UEs=")))
    assert err.param == "messages[0].content[0]"


def test_unknown_parts() -> None:
    raw = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}
    body = render(msg("user", "q"), msg("assistant", UnknownPart("anthropic", raw)))
    assert body["messages"][1]["content"] == [raw]
    audio = UnknownPart("openai", {"type": "input_audio", "input_audio": {"data": "x"}})
    err = render_error(msg("user", "listen", audio))
    assert err.message == "audio input is not supported by this model's API"
    assert err.param == "messages[0].content[1]"


def test_reasoning_parts() -> None:
    body = render(
        msg("user", "q"),
        msg(
            "assistant",
            ReasoningPart("signed", signature="sig"),
            ReasoningPart(redacted="opaque"),
            ReasoningPart("unsigned, from an OpenAI-side model"),
            "answer",
        ),
    )
    assert body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "signed", "signature": "sig"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "answer"},
    ]


def test_sampling_settings() -> None:
    body = render(
        msg("user", "q"),
        max_tokens=50,
        temperature=1.7,
        top_p=0.8,
        top_k=20,
        seed=7,
        stop=("###",),
        user="u-9",
        stream=True,
    )
    assert body["max_tokens"] == 50
    # clamped, not rescaled (docs/protocols.md, "Sampling settings and output limits")
    assert body["temperature"] == 1.0
    assert (body["top_p"], body["top_k"]) == (0.8, 20)
    assert body["stop_sequences"] == ["###"]
    assert body["metadata"] == {"user_id": "u-9"}
    assert body["stream"] is True
    assert "seed" not in body
    assert render(msg("user", "q"), temperature=-0.5)["temperature"] == 0.0


def test_tools_and_tool_choice() -> None:
    schema = {"type": "object", "properties": {"c": {"type": "string"}}}
    tools = (
        ToolSpec("get", "Get it", schema, strict=True),
        ToolSpec("noargs"),
        ToolSpec("loose", parameters={"properties": {"x": {}}}),
    )
    body = render(msg("user", "q"), tools=tools, tool_choice=ToolChoice("required"))
    assert body["tools"] == [
        {"name": "get", "description": "Get it", "input_schema": schema, "strict": True},
        {"name": "noargs", "input_schema": {"type": "object", "properties": {}}},
        {"name": "loose", "input_schema": {"type": "object", "properties": {"x": {}}}},
    ]
    assert body["tool_choice"] == {"type": "any"}


@pytest.mark.parametrize(
    ("choice", "parallel", "expected"),
    [
        (ToolChoice("auto"), None, {"type": "auto"}),
        (ToolChoice("auto"), False, {"type": "auto", "disable_parallel_tool_use": True}),
        (
            ToolChoice("tool", "get"),
            False,
            {"type": "tool", "name": "get", "disable_parallel_tool_use": True},
        ),
        (ToolChoice("none"), False, {"type": "none"}),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        (None, None, None),
    ],
)
def test_tool_choice_mapping(
    choice: ToolChoice | None, parallel: bool | None, expected: dict[str, Any] | None
) -> None:
    body = render(
        msg("user", "q"), tools=(ToolSpec("get"),), tool_choice=choice, parallel_tool_calls=parallel
    )
    assert body.get("tool_choice") == expected


def test_no_tool_choice_without_tools() -> None:
    assert "tool_choice" not in render(msg("user", "q"), tool_choice=ToolChoice("auto"))


@pytest.mark.parametrize(
    ("reasoning", "max_tokens", "thinking", "final_max"),
    [
        (Reasoning(effort="low"), None, {"type": "enabled", "budget_tokens": 1024}, 4096),
        (Reasoning(effort="medium"), 1000, {"type": "enabled", "budget_tokens": 8192}, 9216),
        (Reasoning(effort="high"), 64000, {"type": "enabled", "budget_tokens": 24576}, 64000),
        (Reasoning(budget_tokens=500), None, {"type": "enabled", "budget_tokens": 1024}, 4096),
        (Reasoning(enabled=False), None, {"type": "disabled"}, 4096),
        (Reasoning(effort="none"), None, {"type": "disabled"}, 4096),
    ],
)
def test_reasoning_to_thinking(
    reasoning: Reasoning, max_tokens: int | None, thinking: dict[str, Any], final_max: int
) -> None:
    body = render(msg("user", "q"), reasoning=reasoning, max_tokens=max_tokens, temperature=0.3)
    assert body["thinking"] == thinking
    assert body["max_tokens"] == final_max
    if thinking["type"] == "enabled":
        assert body["thinking"]["budget_tokens"] < body["max_tokens"]
        assert "temperature" not in body  # Anthropic rejects it with thinking on
    else:
        assert body["temperature"] == 0.3


def test_response_format_json_schema() -> None:
    schema = {"type": "object"}
    body = render(msg("user", "q"), response_format=ResponseFormat("json_schema", "x", schema))
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    assert "output_config" not in render(
        msg("user", "q"), response_format=ResponseFormat("json_object")
    )


def test_n_greater_than_one_is_rejected() -> None:
    request = Request("m", (msg("user", "q"),), source_dialect="openai", extra={"n": 2})
    with pytest.raises(InvalidRequestError) as info:
        DIALECT.render_request(request)
    assert info.value.param == "n"
    assert info.value.message == "n > 1 is not supported by the upstream API"
    ok = Request(
        "m", (msg("user", "q"),), source_dialect="openai", extra={"n": 1, "logprobs": True}
    )
    assert "logprobs" not in DIALECT.render_request(ok)  # other dialects' extras are dropped


ROUND_TRIP_BODIES: list[dict[str, Any]] = [
    {
        "model": "claude-x",
        "max_tokens": 2048,
        "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"city": "P"}},
                    {
                        "type": "server_tool_use",
                        "id": "srvtoolu_1",
                        "name": "web_search",
                        "input": {},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "content": [
                            {"type": "search_result", "source": "s", "title": "t", "content": []}
                        ],
                    },
                    {"type": "text", "text": "thanks", "citations": None},
                ],
            },
        ],
        "tools": [
            {
                "name": "get",
                "input_schema": {"type": "object"},
                "cache_control": {"type": "ephemeral"},
            },
            {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
        ],
        "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
        "thinking": {"type": "adaptive", "display": "summarized"},
        "output_config": {"effort": "high"},
        "metadata": {"user_id": "u"},
        "stop_sequences": ["###"],
        "temperature": 1.0,
        "top_k": 5,
        "service_tier": "auto",
        "container": "c",
        "stream": True,
    },
    {
        "model": "claude-x",
        "max_tokens": 20000,
        "messages": [{"role": "user", "content": "hi"}],
        "thinking": {"type": "enabled", "budget_tokens": 16000},
        "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
    },
]


@pytest.mark.parametrize("wire", ROUND_TRIP_BODIES)
def test_same_dialect_round_trip_is_lossless(wire: dict[str, Any]) -> None:
    assert DIALECT.render_request(DIALECT.parse_request(wire)) == wire


def test_count_tokens_body() -> None:
    request = DIALECT.parse_count_tokens_request(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "x"}],
            "system": "s",
            "cache_control": {"type": "ephemeral"},
        }
    )
    assert DIALECT.render_count_tokens_request(request) == {
        "model": "m",
        "system": "s",
        "messages": [{"role": "user", "content": "x"}],
        "cache_control": {"type": "ephemeral"},
    }


def test_thinking_is_left_out_where_anthropic_would_reject_it() -> None:
    # Forced tool use and thinking cannot be combined.
    forced = render(
        msg("user", "q"),
        tools=(ToolSpec("get"),),
        tool_choice=ToolChoice("required"),
        reasoning=Reasoning(effort="high"),
    )
    assert "thinking" not in forced
    # Mid tool loop, the assistant turn from an OpenAI history has no signed thinking.
    loop = (
        msg("user", "q"),
        msg("assistant", ToolCallPart("c1", "get", "{}")),
        msg("user", ToolResultPart("c1", (TextPart("ok"),))),
    )
    assert "thinking" not in render(*loop, tools=(ToolSpec("get"),), reasoning=Reasoning())
    # ...but with a signed thinking block first (an Anthropic-side model), it stays.
    signed = (
        loop[0],
        msg("assistant", ReasoningPart("hm", signature="s"), ToolCallPart("c1", "get", "{}")),
        loop[2],
    )
    body = render(*signed, tools=(ToolSpec("get"),), reasoning=Reasoning(effort="low"))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}


# ------------------------------------------- from an OpenAI client: its own indices in `param`


def openai_to_anthropic(body: dict[str, Any]) -> dict[str, Any]:
    from interlingua.dialects.openai_chat import DIALECT as OPENAI

    return DIALECT.render_request(OPENAI.parse_request({"model": "m", **body}))


def _call(call_id: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": "f", "arguments": arguments}}


def test_bad_arguments_param_names_the_clients_message_index() -> None:
    # Two tool messages merge into one neutral user message, so the last assistant is
    # neutral message 3 but the client's messages[4].
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [_call("a", "{}"), _call("b", "{}")]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("c", "{}"), _call("d", "{oops")],
        },
        {"role": "tool", "tool_call_id": "c", "content": "3"},
        {"role": "tool", "tool_call_id": "d", "content": "4"},
    ]
    with pytest.raises(InvalidRequestError) as info:
        openai_to_anthropic({"messages": messages})
    assert info.value.param == "messages[4].tool_calls[1].function.arguments"


def test_bad_arguments_param_names_legacy_calls() -> None:
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "tool_calls": [_call("a", "{}")]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "assistant", "function_call": {"name": "f", "arguments": "nope"}},
    ]
    with pytest.raises(InvalidRequestError) as info:
        openai_to_anthropic({"messages": messages})
    assert info.value.param == "messages[3].function_call.arguments"
    messages[3] = {"role": "assistant", "tool_calls": [_call("e", "{}"), _call("d", "[1]")]}
    with pytest.raises(InvalidRequestError) as info:
        openai_to_anthropic({"messages": messages})
    assert info.value.param == "messages[3].tool_calls[1].function.arguments"


def test_bad_image_param_names_the_clients_message_index() -> None:
    tiff = {"type": "image_url", "image_url": {"url": f"data:image/tiff;base64,{PNG}"}}
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "tool_calls": [_call("a", "{}"), _call("b", "{}")]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
        {"role": "user", "content": [{"type": "text", "text": "see"}, tiff]},
    ]
    with pytest.raises(InvalidRequestError) as info:
        openai_to_anthropic({"messages": messages})
    assert info.value.param == "messages[4].content[1]"


def test_upper_case_image_media_types_are_accepted() -> None:
    image = {"type": "image_url", "image_url": {"url": f"data:image/PNG;base64,{PNG}"}}
    body = openai_to_anthropic({"messages": [{"role": "user", "content": [image]}]})
    assert body["messages"][0]["content"] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    ]
    # Parts built directly (not from a data URI) are matched case-insensitively too.
    body = render(msg("user", ImagePart(media_type="Image/JPG", data=PNG)))
    assert body["messages"][0]["content"][0]["source"]["media_type"] == "image/jpeg"


def test_safety_identifier_becomes_metadata_user_id() -> None:
    messages = [{"role": "user", "content": "q"}]
    body = openai_to_anthropic({"messages": messages, "safety_identifier": "hash-1"})
    assert body["metadata"] == {"user_id": "hash-1"}
    assert "safety_identifier" not in body
    body = openai_to_anthropic({"messages": messages, "user": "u", "safety_identifier": "hash-1"})
    assert body["metadata"] == {"user_id": "u"}
