"""Custom tools (free-form text input) across dialects: Chat carries them natively,
Anthropic as a function of one string parameter, unwrapped again on the way back."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from interlingua.core import (
    ArgumentsDelta,
    BlockStart,
    BlockStop,
    Message,
    Request,
    Response,
    StopReason,
    StreamEnd,
    StreamStart,
    TextPart,
    ToolCallPart,
    ToolChoice,
    ToolSpec,
    Usage,
    fold,
)
from interlingua.dialects.anthropic import DIALECT as ANTHROPIC
from interlingua.dialects.anthropic.render import render_request as render_anthropic
from interlingua.dialects.openai_chat import DIALECT as CHAT
from interlingua.dialects.openai_chat.request import parse_request, render_request
from interlingua.dialects.openai_chat.response import parse_response, render_message
from interlingua.dialects.openai_chat.validate import looks_valid, validate_request
from interlingua.dialects.openai_responses.request import parse_request as parse_responses
from interlingua.dialects.openai_responses.request import render_request as render_responses
from interlingua.errors import InvalidRequestError
from interlingua.sse import SSEDecoder, SSEEvent

GRAMMAR = 'start: begin_patch hunk+ end_patch\nbegin_patch: "*** Begin Patch" LF'
PATCH = '*** Begin Patch\n*** Add File: a.txt\n+hi "there"\n*** End Patch'
CUSTOM_TOOL = {
    "type": "custom",
    "custom": {
        "name": "apply_patch",
        "description": "Edit files.",
        "format": {"type": "grammar", "grammar": {"syntax": "lark", "definition": GRAMMAR}},
    },
}
FUNCTION_TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
CUSTOM_CALL = {"id": "call_1", "type": "custom", "custom": {"name": "apply_patch", "input": PATCH}}


def chat_body(**kw: Any) -> dict[str, Any]:
    messages = [
        {"role": "user", "content": "patch it"},
        {"role": "assistant", "content": None, "tool_calls": [CUSTOM_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Done"},
    ]
    return {"model": "m", "messages": messages, "tools": [CUSTOM_TOOL, FUNCTION_TOOL], **kw}


# --- OpenAI Chat -----------------------------------------------------------------------


def test_chat_parses_custom_tools_and_calls_into_neutral() -> None:
    r = parse_request(chat_body(tool_choice={"type": "custom", "custom": {"name": "apply_patch"}}))
    fmt = {"type": "grammar", "syntax": "lark", "definition": GRAMMAR}  # the neutral, flat form
    assert r.tools[0] == ToolSpec("apply_patch", "Edit files.", kind="custom", format=fmt)
    assert r.tools[1].kind == "function"
    assert r.tool_choice == ToolChoice("tool", "apply_patch")
    assert r.messages[1].parts == (ToolCallPart("call_1", "apply_patch", PATCH, kind="custom"),)
    assert "_openai_tools" not in r.extra and "tool_choice" not in r.extra


@pytest.mark.parametrize(
    "choice", [None, "auto", {"type": "custom", "custom": {"name": "apply_patch"}},
               {"type": "function", "function": {"name": "f"}}],
)  # fmt: skip
def test_chat_request_round_trip_is_exact(choice: Any) -> None:
    body = chat_body() if choice is None else chat_body(tool_choice=choice)
    original = copy.deepcopy(body)
    assert looks_valid(body)
    assert render_request(parse_request(body)) == original


def test_chat_renders_another_dialects_custom_tool_natively() -> None:
    r = parse_request(chat_body(tool_choice={"type": "custom", "custom": {"name": "apply_patch"}}))
    foreign = Request("m", r.messages, tools=r.tools, tool_choice=r.tool_choice)
    out = render_request(foreign)
    assert out["tools"] == [CUSTOM_TOOL, FUNCTION_TOOL]
    assert out["messages"][1]["tool_calls"] == [CUSTOM_CALL]
    assert out["tool_choice"] == {"type": "custom", "custom": {"name": "apply_patch"}}


@pytest.mark.parametrize(
    ("call", "param"),
    [
        ({"id": "c", "type": "custom"}, "messages[1].tool_calls[0].custom"),
        ({"id": "c", "type": "custom", "custom": {"name": "g"}}, "messages[1].tool_calls[0].custom.input"),
        ({"id": "c", "type": "custom", "custom": {"input": "x"}}, "messages[1].tool_calls[0].custom.name"),
        ({"type": "custom", "custom": {"name": "g", "input": "x"}}, "messages[1].tool_calls[0].id"),
    ],
)  # fmt: skip
def test_chat_malformed_custom_call_is_a_400_on_both_paths(call: Any, param: str) -> None:
    body = chat_body()
    body["messages"][1]["tool_calls"] = [call]
    assert not looks_valid(body)
    with pytest.raises(InvalidRequestError) as err:
        validate_request(body)
    assert err.value.param == param


def test_chat_malformed_custom_tool_is_a_400() -> None:
    body = chat_body(tools=[{"type": "custom", "custom": {"name": "g", "format": "text"}}])
    assert not looks_valid(body)
    with pytest.raises(InvalidRequestError) as err:
        validate_request(body)
    assert err.value.param == "tools[0].custom.format"


def test_chat_response_custom_call_round_trip() -> None:
    message = {"role": "assistant", "content": None, "refusal": None, "tool_calls": [CUSTOM_CALL]}
    body = {
        "id": "chatcmpl-1",
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
    }
    response = parse_response(body)
    assert response.parts == (ToolCallPart("call_1", "apply_patch", PATCH, kind="custom"),)
    assert response.stop_reason == StopReason.TOOL_USE
    assert render_message(response.parts) == message


def _chat_stream_events() -> list[Any]:
    call = ToolCallPart("call_1", "apply_patch", kind="custom")
    return [
        StreamStart("chatcmpl-1", "m"),
        BlockStart(0, TextPart("")),
        BlockStop(0),  # an empty text block: nothing on the wire
        BlockStart(1, call),
        ArgumentsDelta(1, PATCH[:10]),
        ArgumentsDelta(1, PATCH[10:]),
        BlockStop(1),
        BlockStart(2, ToolCallPart("call_2", "f")),
        ArgumentsDelta(2, '{"a": 1}'),
        BlockStop(2),
        StreamEnd(StopReason.TOOL_USE, usage=Usage(1, 2)),
    ]


def test_chat_stream_carries_custom_calls_both_ways() -> None:
    request = Request("m", (Message("user", (TextPart("hi"),)),), stream=True)
    encoder = CHAT.stream_encoder(request)
    wire = b"".join(encoder.encode(e) for e in _chat_stream_events())
    chunks = [orjson.loads(line[6:]) for line in wire.split(b"\n\n") if line[6:11] == b'{"id"']
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert {"tool_calls": [{"index": 0, "custom": {"input": PATCH[:10]}}]} in deltas
    opening = next(d for d in deltas if "tool_calls" in d)["tool_calls"][0]
    assert opening == {
        "index": 0,
        "id": "call_1",
        "type": "custom",
        "custom": {"name": "apply_patch", "input": ""},
    }
    decoder = CHAT.stream_decoder(request)
    sse = SSEDecoder()
    events = [e for ev in sse.decode(wire) for e in decoder.feed(ev)] + decoder.flush()
    folded = fold(events)
    assert folded.parts == (
        ToolCallPart("call_1", "apply_patch", PATCH, kind="custom"),
        ToolCallPart("call_2", "f", '{"a": 1}'),
    )


# --- Anthropic: offered as a function of one string ------------------------------------


def test_anthropic_offers_a_custom_tool_as_a_function_of_one_string() -> None:
    body = render_anthropic(parse_request({**chat_body(), "max_tokens": 9}))
    tool = body["tools"][0]
    assert tool["name"] == "apply_patch" and tool["description"] == "Edit files."
    schema = tool["input_schema"]
    assert schema["required"] == ["input"] and schema["properties"]["input"]["type"] == "string"
    assert "lark" in schema["properties"]["input"]["description"]
    assert GRAMMAR in schema["properties"]["input"]["description"]
    # The custom call in history (raw text, not JSON) is wrapped, not a 400.
    use = body["messages"][1]["content"][0]
    assert use == {
        "type": "tool_use",
        "id": "call_1",
        "name": "apply_patch",
        "input": {"input": PATCH},
    }


def test_anthropic_text_format_hint() -> None:
    spec = ToolSpec("t", kind="custom", format={"type": "text"})
    body = render_anthropic(Request("m", (Message("user", (TextPart("hi"),)),), tools=(spec,)))
    prop = body["tools"][0]["input_schema"]["properties"]["input"]
    assert prop["description"].startswith("The raw input text")


ANTHROPIC_MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "claude",
    "content": [
        {"type": "text", "text": "Patching."},
        {"type": "tool_use", "id": "toolu_1", "name": "apply_patch", "input": {"input": PATCH}},
        {"type": "tool_use", "id": "toolu_2", "name": "f", "input": {"input": "x"}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 5, "output_tokens": 7},
}


def _request() -> Request:
    return parse_request({**chat_body(), "max_tokens": 9})


def test_anthropic_response_unwraps_calls_of_custom_tools() -> None:
    response = ANTHROPIC.parse_response(ANTHROPIC_MESSAGE, _request())
    assert response.parts[1] == ToolCallPart("toolu_1", "apply_patch", PATCH, kind="custom")
    # A function tool with an `input` parameter is left alone.
    assert response.parts[2] == ToolCallPart("toolu_2", "f", '{"input":"x"}')
    # Without the request nothing is known to be custom.
    assert ANTHROPIC.parse_response(ANTHROPIC_MESSAGE).parts[1].kind == "function"


def _anthropic_sse(message: dict[str, Any]) -> list[SSEEvent]:
    """The stream the API sends for ``message``, tool input in small JSON fragments."""
    head = {**message, "content": [], "stop_reason": None}
    events: list[dict[str, Any]] = [{"type": "message_start", "message": head}]
    for i, block in enumerate(message["content"]):
        if block["type"] == "text":
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        else:
            start = {**block, "input": {}}
            raw = orjson.dumps(block["input"]).decode()
            deltas = [{"type": "input_json_delta", "partial_json": ""}] + [
                {"type": "input_json_delta", "partial_json": raw[k : k + 7]}
                for k in range(0, len(raw), 7)
            ]
        events.append({"type": "content_block_start", "index": i, "content_block": start})
        events += [{"type": "content_block_delta", "index": i, "delta": d} for d in deltas]
        events.append({"type": "content_block_stop", "index": i})
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": message["usage"]["output_tokens"]},
        }
    )
    events.append({"type": "message_stop"})
    return [SSEEvent(event=e["type"], data=orjson.dumps(e).decode()) for e in events]


def test_anthropic_stream_of_a_custom_call_folds_to_the_non_stream_parse() -> None:
    request = _request()
    decoder = ANTHROPIC.stream_decoder(request)
    events = [e for ev in _anthropic_sse(ANTHROPIC_MESSAGE) for e in decoder.feed(ev)]
    events += decoder.flush()
    # The custom call opens at once; its unwrapped text comes whole just before its stop.
    start = next(i for i, e in enumerate(events) if isinstance(e, BlockStart) and e.index == 1)
    assert events[start].part == ToolCallPart("toolu_1", "apply_patch", kind="custom")  # type: ignore[union-attr]
    assert events[start + 1 : start + 3] == [ArgumentsDelta(1, PATCH), BlockStop(1)]
    folded: Response = fold(events)
    parsed = ANTHROPIC.parse_response(ANTHROPIC_MESSAGE, request)
    assert folded.parts == parsed.parts
    assert folded.stop_reason == parsed.stop_reason


def test_anthropic_stream_custom_call_without_the_input_key_keeps_the_json() -> None:
    message = copy.deepcopy(ANTHROPIC_MESSAGE)
    message["content"][1]["input"] = {"patch": PATCH}
    decoder = ANTHROPIC.stream_decoder(_request())
    events = [e for ev in _anthropic_sse(message) for e in decoder.feed(ev)] + decoder.flush()
    call = fold(events).parts[1]
    assert call == ToolCallPart(
        "toolu_1", "apply_patch", orjson.dumps({"patch": PATCH}).decode(), kind="custom"
    )
    assert call == ANTHROPIC.parse_response(message, _request()).parts[1]


# --- OpenAI Responses: tool_choice naming a namespace member ---------------------------

NAMESPACED = {
    "model": "m",
    "input": "hi",
    "tools": [
        {"type": "function", "name": "top", "parameters": {"type": "object"}, "strict": False},
        {
            "type": "namespace",
            "name": "crm",
            "description": "d",
            "tools": [
                {
                    "type": "function",
                    "name": "lookup",
                    "parameters": {"type": "object"},
                    "strict": False,
                },
                {"type": "custom", "name": "note"},
            ],
        },
    ],
}


@pytest.mark.parametrize(
    ("choice", "name"),
    [
        ({"type": "function", "name": "lookup"}, "crm__lookup"),
        ({"type": "custom", "name": "note"}, "crm__note"),
        ({"type": "function", "name": "top"}, "top"),
        ({"type": "function", "name": "lookup", "namespace": "crm"}, "crm__lookup"),
    ],
)  # fmt: skip
def test_responses_tool_choice_names_the_flattened_namespace_member(choice: Any, name: str) -> None:
    body = {**copy.deepcopy(NAMESPACED), "tool_choice": choice}
    r = parse_responses(body)
    assert r.tool_choice == ToolChoice("tool", name)
    assert not any(k.startswith("_responses_namespaced") for k in r.extra)
    assert render_responses(r) == {**NAMESPACED, "tool_choice": choice}
    # Toward Chat the flattened name is the tool's name.
    chat = render_request(Request("m", r.messages, tools=r.tools, tool_choice=r.tool_choice))
    kind = "custom" if name == "crm__note" else "function"
    assert chat["tool_choice"] == {"type": kind, kind: {"name": name}}
