"""OpenAI Chat request codec: validation (400 + param path), parse and render, both ways."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from interlingua.core import (
    AudioPart,
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
from interlingua.dialects.openai_chat import DIALECT, parse_request, render_request
from interlingua.errors import InvalidRequestError

PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "City name"}},
    "required": ["city"],
    "additionalProperties": False,
}


def body(*messages: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": list(messages) or [user("hi")], **kw}


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def bad(payload: Any) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as info:
        parse_request(payload)
    assert info.value.status == 400
    return info.value


def neutral(*messages: Message, **kw: Any) -> Request:
    return Request(model="m", messages=messages, **kw)


# ----------------------------------------------------------------------------- validation


def test_minimal_request() -> None:
    r = parse_request(body())
    assert r.model == "gpt-4o"
    assert r.messages == (Message("user", (TextPart("hi"),)),)
    assert r.source_dialect == "openai"
    assert r.stream is False and r.max_tokens is None and r.extra == {}


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        ({"messages": [user("hi")]}, "model"),
        ({"model": 3, "messages": [user("hi")]}, "model"),
        ({"model": "m"}, "messages"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": {"role": "user"}}, "messages"),
        ({"model": "m", "messages": ["hi"]}, "messages[0]"),
        ({"model": "m", "messages": [{"content": "hi"}]}, "messages[0].role"),
        (
            {"model": "m", "messages": [user("a"), {"role": "robot", "content": "x"}]},
            "messages[1].role",
        ),
        (body(user("a"), user([{"text": "x"}])), "messages[1].content[0].type"),
        (body(user("a"), user([{"type": 7}])), "messages[1].content[0].type"),
        (body(user([{"type": "text"}])), "messages[0].content[0].text"),
        (body(user([{"type": "text", "text": 1}])), "messages[0].content[0].text"),
        (body(user([{"type": "refusal", "refusal": "no"}])), "messages[0].content[0].type"),
        (body(user([{"type": "image_url"}])), "messages[0].content[0].image_url"),
        (
            body(user([{"type": "image_url", "image_url": {}}])),
            "messages[0].content[0].image_url.url",
        ),
        (body(user(None)), "messages[0].content"),
        (body(user(5)), "messages[0].content"),
        (
            body({"role": "system", "content": [{"type": "image_url"}]}),
            "messages[0].content[0].type",
        ),
        (body({"role": "tool", "content": "x"}), "messages[0].tool_call_id"),
        (
            body({"role": "assistant", "tool_calls": [{"type": "function"}]}),
            "messages[0].tool_calls[0].id",
        ),
        (
            body({"role": "assistant", "tool_calls": [{"id": "c", "function": {"arguments": ""}}]}),
            "messages[0].tool_calls[0].function.name",
        ),
        (body({"role": "assistant", "tool_calls": "x"}), "messages[0].tool_calls"),
        (body(user("a"), {"role": "user", "content": "b", "name": 3}), "messages[1].name"),
        (body(temperature="hot"), "temperature"),
        (body(temperature=True), "temperature"),
        (body(max_tokens=1.5), "max_tokens"),
        (body(max_completion_tokens="9"), "max_completion_tokens"),
        (body(stop=["a", 1]), "stop[1]"),
        (body(stop=3), "stop"),
        (body(stream="yes"), "stream"),
        (body(tools={"type": "function"}), "tools"),
        (body(tools=[{"function": {"name": "f"}}]), "tools[0].type"),
        (body(tools=[{"type": "function"}]), "tools[0].function"),
        (body(tools=[{"type": "function", "function": {}}]), "tools[0].function.name"),
        (body(tools=[{"type": "function", "function": {"name": ""}}]), "tools[0].function.name"),
        (
            body(tools=[{"type": "function", "function": {"name": "f", "parameters": []}}]),
            "tools[0].function.parameters",
        ),
        (body(tool_choice="sometimes"), "tool_choice"),
        (body(tool_choice={"type": "function", "function": {}}), "tool_choice.function.name"),
        (body(response_format={"type": "yaml"}), "response_format.type"),
        (body(response_format={"type": "json_schema"}), "response_format.json_schema"),
        (body(response_format="json"), "response_format"),
        (body(reasoning_effort=3), "reasoning_effort"),
        (body(metadata="x"), "metadata"),
    ],
)
def test_validation_names_the_field(payload: Any, param: str) -> None:
    err = bad(payload)
    assert err.param == param
    assert param in err.message


def test_body_must_be_an_object() -> None:
    assert bad(["not", "an", "object"]).param is None


# ----------------------------------------------------------------------------- roles


def test_system_and_developer_roles() -> None:
    r = parse_request(
        body(
            {"role": "system", "content": "Be terse."},
            {"role": "developer", "content": [{"type": "text", "text": "Use JSON."}]},
            user("hi"),
        )
    )
    assert [m.role for m in r.messages] == ["system", "system", "user"]
    assert r.messages[1].meta == {"role": "developer", "source_index": 1}
    assert r.system_text == "Be terse.\n\nUse JSON."
    msgs = render_request(r)["messages"]
    assert msgs[:2] == [
        {"role": "system", "content": "Be terse."},
        {"role": "developer", "content": "Use JSON."},
    ]


def test_user_content_parts() -> None:
    r = parse_request(
        body(
            user(
                [
                    {"type": "text", "text": "Look"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                    {"type": "image_url", "image_url": {"url": "https://x/y.jpg", "detail": "low"}},
                    {
                        "type": "file",
                        "file": {
                            "file_data": "data:application/pdf;base64,JVBE",
                            "filename": "a.pdf",
                        },
                    },
                    {"type": "file", "file": {"file_id": "file-abc"}},
                    {"type": "input_audio", "input_audio": {"data": "AAA", "format": "wav"}},
                ]
            )
        )
    )
    parts = r.messages[0].parts
    assert parts[0] == TextPart("Look")
    assert parts[1] == ImagePart(media_type="image/png", data=PNG)
    assert parts[2] == ImagePart(url="https://x/y.jpg", detail="low")
    assert parts[3] == DocumentPart(media_type="application/pdf", data="JVBE", title="a.pdf")
    assert isinstance(parts[4], DocumentPart) and parts[4].meta == {"file_id": "file-abc"}
    assert parts[5] == AudioPart(data="AAA", format="wav")


def test_user_content_parts_render_back_verbatim() -> None:
    content = [
        {"type": "text", "text": "Look"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
        {"type": "image_url", "image_url": {"url": "https://x/y.jpg", "detail": "low"}},
        {
            "type": "file",
            "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"},
        },
        {"type": "file", "file": {"file_id": "file-abc"}},
        {"type": "input_audio", "input_audio": {"data": "AAA", "format": "wav"}},
    ]
    out = render_request(parse_request(body(user(content))))
    assert out["messages"] == [{"role": "user", "content": content}]


def test_assistant_history_with_reasoning_refusal_and_tool_calls() -> None:
    r = parse_request(
        body(
            user("weather?"),
            {
                "role": "assistant",
                "content": "Checking.",
                "reasoning_content": "Need the tool.",
                "refusal": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "w", "arguments": '{"city":"Paris"}'},
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "w", "arguments": {"city": "Oslo"}},
                    },
                ],
            },
        )
    )
    parts = r.messages[1].parts
    assert parts == (
        ReasoningPart("Need the tool."),
        TextPart("Checking."),
        ToolCallPart("call_1", "w", '{"city":"Paris"}'),
        ToolCallPart("call_2", "w", '{"city":"Oslo"}'),
    )
    out = render_request(r)["messages"][1]
    assert out == {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "w", "arguments": '{"city":"Paris"}'},
            },
            {
                "id": "call_2",
                "type": "function",
                "function": {"name": "w", "arguments": '{"city":"Oslo"}'},
            },
        ],
        "reasoning_content": "Need the tool.",
    }


def test_assistant_reasoning_field_and_details_round_trip() -> None:
    details = [{"type": "reasoning.text", "text": "hmm", "signature": "sig"}]
    msg = {"role": "assistant", "content": "ok", "reasoning": "hmm", "reasoning_details": details}
    r = parse_request(body(user("q"), msg))
    part = r.messages[1].parts[0]
    assert isinstance(part, ReasoningPart) and part.text == "hmm"
    assert part.meta["reasoning_details"] == details
    assert render_request(r)["messages"][1] == msg


def test_assistant_refusal_and_content_null() -> None:
    r = parse_request(
        body(
            user("q"),
            {"role": "assistant", "content": None, "refusal": "I can't."},
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "No."}]},
            {"role": "assistant", "content": None},
        )
    )
    assert r.messages[1].parts == (TextPart("I can't."),)
    assert r.messages[1].parts[0].meta == {"refusal": True}
    assert r.messages[3].parts == ()
    msgs = render_request(r)["messages"]
    assert msgs[1] == {"role": "assistant", "content": None, "refusal": "I can't."}
    assert msgs[2] == {"role": "assistant", "content": None, "refusal": "No."}
    assert msgs[3] == {"role": "assistant", "content": ""}  # content required without tool calls


def test_tool_messages_merge_into_one_user_turn_and_split_back() -> None:
    original = [
        user("Weather in Paris and Tokyo?"),
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "w", "arguments": "{}"}},
                {"id": "call_2", "type": "function", "function": {"name": "w", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "25C"}]},
        user("Thanks"),
    ]
    r = parse_request(body(*original))
    assert [m.role for m in r.messages] == ["user", "assistant", "user", "user"]
    assert r.messages[2].parts == (
        ToolResultPart("call_1", (TextPart("18C"),)),
        ToolResultPart("call_2", (TextPart("25C"),)),
    )
    msgs = render_request(r)["messages"]
    assert msgs[2:] == [
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        {"role": "tool", "tool_call_id": "call_2", "content": "25C"},
        {"role": "user", "content": "Thanks"},
    ]


def test_messages_record_the_clients_index() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "w", "arguments": "{}"}}
    r = parse_request(
        body(
            user("q"),
            {"role": "assistant", "tool_calls": [call, {**call, "id": "d"}]},
            {"role": "tool", "tool_call_id": "c", "content": "1"},
            {"role": "tool", "tool_call_id": "d", "content": "2"},
            {"role": "assistant", "content": "done"},
        )
    )
    assert [m.meta["source_index"] for m in r.messages] == [0, 1, 2, 4]
    calls = r.messages[1].parts
    assert [p.meta["source_param"] for p in calls] == [
        "messages[1].tool_calls[0].function.arguments",
        "messages[1].tool_calls[1].function.arguments",
    ]


def test_upper_case_data_uri_media_type_is_lower_cased() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/PNG;base64,iVBO"}}
    part = parse_request(body(user([image]))).messages[0].parts[0]
    assert isinstance(part, ImagePart)
    assert (part.media_type, part.data) == ("image/png", "iVBO")


def test_safety_identifier_is_the_user_when_user_is_absent() -> None:
    r = parse_request(body(safety_identifier="hash-123"))
    assert r.user == "hash-123"
    out = render_request(r)  # an OpenAI upstream gets exactly what the client sent
    assert out["safety_identifier"] == "hash-123"
    assert "user" not in out
    both = parse_request(body(user="u-1", safety_identifier="hash-123"))
    assert both.user == "u-1"
    out = render_request(both)
    assert (out["user"], out["safety_identifier"]) == ("u-1", "hash-123")
    assert bad(body(safety_identifier=5)).param == "safety_identifier"


def test_name_is_kept_both_ways() -> None:
    msgs = [
        {"role": "system", "content": "s", "name": "sys"},
        {"role": "user", "content": "hi", "name": "alice"},
        {"role": "assistant", "content": "yo", "name": "bot"},
    ]
    r = parse_request(body(*msgs))
    assert [m.name for m in r.messages] == ["sys", "alice", "bot"]
    assert render_request(r)["messages"] == msgs


def test_legacy_functions_and_function_messages() -> None:
    r = parse_request(
        {
            "model": "m",
            "messages": [
                user("hi"),
                {
                    "role": "assistant",
                    "content": None,
                    "function_call": {"name": "f", "arguments": "{}"},
                },
                {"role": "function", "name": "f", "content": "done"},
            ],
            "functions": [{"name": "f", "parameters": WEATHER}],
            "function_call": {"name": "f"},
        }
    )
    assert r.tools == (ToolSpec("f", parameters=WEATHER),)
    assert r.tool_choice == ToolChoice("tool", "f")
    call = r.messages[1].parts[0]
    assert isinstance(call, ToolCallPart) and call.name == "f"
    assert r.messages[2].parts == (ToolResultPart(call.id, (TextPart("done"),)),)
    out = render_request(r)
    assert out["tools"] == [{"type": "function", "function": {"name": "f", "parameters": WEATHER}}]
    assert out["messages"][2] == {"role": "tool", "tool_call_id": call.id, "content": "done"}
    assert "functions" not in out and "function_call" not in out


@pytest.mark.parametrize(("value", "mode"), [("auto", "auto"), ("none", "none")])
def test_legacy_function_call_strings(value: str, mode: str) -> None:
    r = parse_request(body(functions=[{"name": "f"}], function_call=value))
    assert r.tool_choice == ToolChoice(mode)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- tools


def test_function_tools_pass_parameters_intact() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "d",
                "parameters": WEATHER,
                "strict": True,
            },
        },
        {"type": "function", "function": {"name": "noargs"}},
    ]
    r = parse_request(body(tools=copy.deepcopy(tools)))
    assert r.tools == (ToolSpec("get_weather", "d", WEATHER, True), ToolSpec("noargs"))
    assert r.tools[0].parameters == WEATHER
    assert render_request(r)["tools"] == tools


def test_custom_tools_are_neutral_tool_specs() -> None:
    custom = {"type": "custom", "custom": {"name": "grammar", "format": {"type": "text"}}}
    fn = {"type": "function", "function": {"name": "f"}}
    r = parse_request(body(tools=[fn, custom]))
    assert r.tools == (ToolSpec("f"), ToolSpec("grammar", kind="custom", format={"type": "text"}))
    assert render_request(r)["tools"] == [fn, custom]
    # Neutral, so a request from another dialect carries them too.
    assert render_request(Request("m", r.messages, tools=r.tools))["tools"] == [fn, custom]


def test_tools_of_unknown_types_ride_in_extra() -> None:
    other = {"type": "web_search_preview"}
    fn = {"type": "function", "function": {"name": "f"}}
    r = parse_request(body(tools=[fn, other]))
    assert r.tools == (ToolSpec("f"),)
    assert render_request(r)["tools"] == [fn, other]
    assert render_request(Request("m", r.messages, tools=r.tools))["tools"] == [fn]


@pytest.mark.parametrize(
    ("wire", "choice"),
    [
        ("auto", ToolChoice("auto")),
        ("none", ToolChoice("none")),
        ("required", ToolChoice("required")),
        ({"type": "function", "function": {"name": "f"}}, ToolChoice("tool", "f")),
    ],
)
def test_tool_choice_both_ways(wire: Any, choice: ToolChoice) -> None:
    r = parse_request(
        body(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice=wire)
    )
    assert r.tool_choice == choice
    assert render_request(neutral(*r.messages, tool_choice=choice))["tool_choice"] == wire


@pytest.mark.parametrize(("mode", "neutral_mode"), [("auto", "auto"), ("required", "required")])
def test_allowed_tools_tool_choice(mode: str, neutral_mode: str) -> None:
    wire = {
        "type": "allowed_tools",
        "allowed_tools": {"mode": mode, "tools": [{"type": "function", "function": {"name": "f"}}]},
    }
    r = parse_request(body(tool_choice=wire))
    assert r.tool_choice == ToolChoice(neutral_mode)  # type: ignore[arg-type]
    assert r.extra["tool_choice"] == wire
    assert render_request(r)["tool_choice"] == wire


def test_parallel_tool_calls() -> None:
    r = parse_request(body(parallel_tool_calls=False))
    assert r.parallel_tool_calls is False
    assert render_request(r)["parallel_tool_calls"] is False
    assert "parallel_tool_calls" not in render_request(parse_request(body()))


@pytest.mark.parametrize(
    ("wire", "fmt"),
    [
        ({"type": "text"}, ResponseFormat("text")),
        ({"type": "json_object"}, ResponseFormat("json_object")),
        (
            {
                "type": "json_schema",
                "json_schema": {"name": "w", "description": "d", "schema": WEATHER, "strict": True},
            },
            ResponseFormat("json_schema", "w", WEATHER, True, "d"),
        ),
    ],
)
def test_response_format_both_ways(wire: dict[str, Any], fmt: ResponseFormat) -> None:
    r = parse_request(body(response_format=wire))
    assert r.response_format == fmt
    assert render_request(r)["response_format"] == wire


# ----------------------------------------------------------------------------- settings


def test_max_completion_tokens_preferred_and_key_remembered() -> None:
    r = parse_request(body(max_completion_tokens=100, max_tokens=50))
    assert r.max_tokens == 100
    out = render_request(r)
    assert out["max_completion_tokens"] == 100 and "max_tokens" not in out
    assert not any(k.startswith("_") for k in out)


def test_max_tokens_key_used_otherwise() -> None:
    r = parse_request(body(max_tokens=50))
    assert r.max_tokens == 50
    out = render_request(r)
    assert out["max_tokens"] == 50 and "max_completion_tokens" not in out
    # A request from another dialect uses the classic key.
    assert render_request(neutral(*r.messages, max_tokens=7))["max_tokens"] == 7


def test_sampling_fields_both_ways() -> None:
    r = parse_request(body(temperature=0.2, top_p=1, seed=42, stop="END", user="u-1"))
    assert (r.temperature, r.top_p, r.seed, r.stop, r.user) == (0.2, 1, 42, ("END",), "u-1")
    out = render_request(r)
    assert (out["temperature"], out["top_p"], out["seed"], out["stop"], out["user"]) == (
        0.2,
        1,
        42,
        ["END"],
        "u-1",
    )
    r = parse_request(body(stop=["a", "b"]))
    assert r.stop == ("a", "b") and render_request(r)["stop"] == ["a", "b"]


def test_null_optional_fields_are_absent() -> None:
    r = parse_request(body(temperature=None, stop=None, tools=None, tool_choice=None, n=None))
    assert r.temperature is None and r.stop == () and r.tools == () and r.extra == {}


@pytest.mark.parametrize("effort", ["minimal", "low", "medium", "high", "xhigh"])
def test_reasoning_effort_both_ways(effort: str) -> None:
    r = parse_request(body(reasoning_effort=effort))
    assert r.reasoning == Reasoning(effort=effort)
    assert render_request(r)["reasoning_effort"] == effort


def test_reasoning_effort_none_is_off_but_re_sent() -> None:
    r = parse_request(body(reasoning_effort="none"))
    assert r.reasoning is not None and r.reasoning.enabled is False
    assert render_request(r)["reasoning_effort"] == "none"


@pytest.mark.parametrize(
    ("reasoning", "effort"),
    [
        (Reasoning(budget_tokens=1024), "low"),
        (Reasoning(budget_tokens=2048), "low"),
        (Reasoning(budget_tokens=2049), "medium"),
        (Reasoning(budget_tokens=12288), "medium"),
        (Reasoning(budget_tokens=24576), "high"),
        (Reasoning(effort="high", budget_tokens=1024), "high"),
        (Reasoning(enabled=False, budget_tokens=4096), None),
        (Reasoning(), None),
    ],
)
def test_reasoning_from_budget_table(reasoning: Reasoning, effort: str | None) -> None:
    out = render_request(neutral(Message("user", (TextPart("q"),)), reasoning=reasoning))
    assert out.get("reasoning_effort") == effort


def test_stream_options_include_usage() -> None:
    r = parse_request(
        body(stream=True, stream_options={"include_usage": True, "include_obfuscation": False})
    )
    assert r.stream is True and r.include_usage is True
    out = render_request(r)
    assert out["stream"] is True
    assert out["stream_options"] == {"include_obfuscation": False, "include_usage": True}


def test_streaming_upstream_always_asked_for_usage() -> None:
    r = parse_request(body(stream=True))
    assert r.include_usage is False
    assert render_request(r)["stream_options"] == {"include_usage": True}
    assert "stream_options" not in render_request(parse_request(body()))
    assert "stream" not in render_request(parse_request(body(stream=False)))


def test_unmapped_fields_go_to_extra_and_back_to_openai_only() -> None:
    extras = {
        "n": 2,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "logit_bias": {"50256": -100},
        "service_tier": "flex",
        "store": True,
        "prediction": {"type": "content", "content": "x"},
    }
    r = parse_request(body(**extras, metadata={"k": "v"}))
    assert r.extra == extras
    out = render_request(r)
    assert {k: out[k] for k in extras} == extras
    assert out["metadata"] == {"k": "v"}
    foreign = Request(
        "m",
        r.messages,
        metadata={"user_id": "u"},
        top_k=40,
        source_dialect="anthropic",
        extra={"n": 3},
    )
    rendered = render_request(foreign)
    assert not set(extras) & set(rendered)
    assert "metadata" not in rendered
    assert rendered["top_k"] == 40  # a sampler the caller named: OpenAI-compatible servers take it


def test_logprobs_samplers_and_audio_output_are_neutral_fields() -> None:
    sent = {
        "logprobs": True,
        "top_logprobs": 3,
        "top_k": 40,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
        "modalities": ["text", "audio"],
        "audio": {"voice": "alloy", "format": "wav"},
    }
    r = parse_request(body(**sent))
    assert (r.logprobs, r.top_logprobs, r.top_k) == (True, 3, 40)
    assert (r.min_p, r.repetition_penalty) == (0.05, 1.1)
    assert r.output_audio == {"voice": "alloy", "format": "wav"}
    assert not set(sent) & set(r.extra)
    out = render_request(r)
    assert {k: out[k] for k in sent} == sent
    # another dialect's request gets the same body: the fields are neutral
    assert {k: render_request(replace(r, source_dialect="responses"))[k] for k in sent} == sent


def test_text_only_modalities_and_bad_types() -> None:
    r = parse_request(body(modalities=["text"]))
    assert r.output_audio is None and r.extra["modalities"] == ["text"]
    for field, value, param in (
        ("logprobs", "yes", "logprobs"),
        ("top_logprobs", 1.5, "top_logprobs"),
        ("min_p", "0.1", "min_p"),
        ("modalities", ["text", 1], "modalities[1]"),
    ):
        with pytest.raises(InvalidRequestError) as info:
            parse_request(body(**{field: value}))
        assert info.value.param == param


# ----------------------------------------------------------------------------- render only


def test_render_tool_results_errors_images_and_trailing_user_parts() -> None:
    r = neutral(
        Message(
            "user",
            (
                ToolResultPart("t1", (TextPart("boom"),), is_error=True),
                ToolResultPart("t2", (TextPart("see "), ImagePart("image/png", PNG))),
                ToolResultPart("t3", (DocumentPart(text="doc text"),)),
                TextPart("Now summarise"),
                ImagePart(url="https://x/y.png"),
            ),
        ),
    )
    assert render_request(r)["messages"] == [
        {"role": "tool", "tool_call_id": "t1", "content": "Error: boom"},
        {"role": "tool", "tool_call_id": "t2", "content": "see [image omitted]"},
        {"role": "tool", "tool_call_id": "t3", "content": "doc text"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Now summarise"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            ],
        },
    ]


def test_render_assistant_tool_calls_only_has_null_content() -> None:
    r = neutral(
        Message(
            "assistant",
            (
                ReasoningPart("think", signature="sig-from-anthropic"),
                ToolCallPart("toolu_01", "w", '{"a":1}'),
            ),
        )
    )
    msg = render_request(r)["messages"][0]
    assert msg == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "toolu_01",
                "type": "function",
                "function": {"name": "w", "arguments": '{"a":1}'},
            }
        ],
        "reasoning_content": "think",
    }


def test_render_documents() -> None:
    pdf = DocumentPart(media_type="application/pdf", data="JVBE", title="a.pdf")
    text_doc = DocumentPart(media_type="text/plain", text="plain words")
    out = render_request(neutral(Message("user", (pdf, text_doc))))
    assert out["messages"][0]["content"] == [
        {
            "type": "file",
            "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"},
        },
        {"type": "text", "text": "plain words"},
    ]
    with pytest.raises(InvalidRequestError):
        render_request(neutral(Message("user", (DocumentPart(url="https://x/a.pdf"),))))


def test_render_rejects_other_dialects_unknown_parts() -> None:
    part = UnknownPart("anthropic", {"type": "server_tool_use", "id": "x"})
    with pytest.raises(InvalidRequestError) as info:
        render_request(neutral(Message("user", (part,))))
    assert "server_tool_use" in info.value.message


def test_render_multiple_system_blocks_and_tools_from_neutral() -> None:
    r = neutral(
        Message("system", (TextPart("a"), TextPart("b"))),
        Message("user", (TextPart("hi"),)),
        tools=(ToolSpec("w", "weather", WEATHER),),
        tool_choice=ToolChoice("tool", "w"),
        stop=("x",),
        top_k=5,
    )
    out = render_request(r)
    assert out["messages"][0] == {
        "role": "system",
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
    }
    assert out["tools"] == [
        {
            "type": "function",
            "function": {"name": "w", "description": "weather", "parameters": WEATHER},
        }
    ]
    assert out["tool_choice"] == {"type": "function", "function": {"name": "w"}}
    assert out["stop"] == ["x"]
    assert out["top_k"] == 5


def test_full_body_round_trip_is_identity() -> None:
    original = {
        "model": "gpt-4o",
        "messages": [
            {"role": "developer", "content": "Be terse."},
            {"role": "user", "content": "Weather?", "name": "al"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "w", "arguments": "{}"},
                    }
                ],
                "reasoning_content": "use tool",
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        ],
        "tools": [{"type": "function", "function": {"name": "w", "parameters": WEATHER}}],
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "response_format": {"type": "json_object"},
        "max_completion_tokens": 500,
        "temperature": 0.5,
        "top_p": 0.9,
        "seed": 1,
        "stop": ["\n\n"],
        "user": "u",
        "metadata": {"a": "b"},
        "reasoning_effort": "low",
        "stream": True,
        "stream_options": {"include_usage": True},
        "n": 1,
        "service_tier": "auto",
    }
    assert render_request(DIALECT.parse_request(copy.deepcopy(original))) == original
