"""Neutral request -> chat turns, sampler settings and grammar for the local model."""

from __future__ import annotations

import base64

import pytest

from interlingua.core import (
    AudioPart,
    DocumentPart,
    ImagePart,
    Message,
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
from interlingua.errors import InvalidRequestError
from interlingua.upstreams.local.engine import Sampling
from interlingua.upstreams.local.prompt import (
    chat_messages,
    check_supported,
    for_text_model,
    grammar_for,
    sampling_for,
)


def msg(role: str, *parts: object) -> Message:
    return Message(role, tuple(TextPart(p) if isinstance(p, str) else p for p in parts))  # type: ignore[arg-type]


def req(*messages: Message, **kw: object) -> Request:
    return Request(model="m", messages=messages, **kw)  # type: ignore[arg-type]


WEATHER = ToolSpec(
    "get_weather",
    "Weather of a city",
    {"type": "object", "properties": {"city": {"type": "string"}}},
)


def test_system_messages_are_joined_into_one_leading_turn() -> None:
    request = req(
        msg("user", "hi"),
        msg("system", "Be brief."),
        msg("assistant", "Hello"),
        msg("system", "Answer in French."),
        msg("user", "Capital of France?"),
    )
    assert chat_messages(request) == [
        {"role": "system", "content": "Be brief.\n\nAnswer in French."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Capital of France?"},
    ]


def test_no_system_message_leaves_the_template_default() -> None:
    assert chat_messages(req(msg("user", "a", "b"))) == [{"role": "user", "content": "ab"}]


def test_consecutive_turns_of_one_role_are_merged() -> None:
    request = req(msg("user", "one"), msg("user", "two"), msg("assistant", "x"))
    assert chat_messages(request) == [
        {"role": "user", "content": "one\n\ntwo"},
        {"role": "assistant", "content": "x"},
    ]


def test_reasoning_and_unknown_parts_are_left_out() -> None:
    request = req(
        msg("user", "q"),
        msg("assistant", ReasoningPart("thinking..."), "answer", UnknownPart("anthropic", {})),
    )
    assert chat_messages(request)[1] == {"role": "assistant", "content": "answer"}


def test_images_are_refused_with_a_400_naming_the_part() -> None:
    request = req(msg("user", "look", ImagePart(media_type="image/png", data="iVBOR")))
    with pytest.raises(InvalidRequestError) as info:
        chat_messages(request)
    assert info.value.status == 400
    assert info.value.message == "this model does not accept images"
    assert info.value.param == "messages[0].content[1]"


def test_text_documents_are_inlined_and_binary_ones_refused() -> None:
    data = base64.b64encode("é text".encode()).decode()
    request = req(
        msg(
            "user",
            DocumentPart(text="plain", title="Notes"),
            DocumentPart(media_type="text/plain", data=data),
        )
    )
    assert chat_messages(request)[0]["content"] == "Notes\n\nplainé text"
    pdf = req(msg("user", DocumentPart(media_type="application/pdf", data="JVBER")))
    with pytest.raises(InvalidRequestError, match="only text documents, not application/pdf"):
        chat_messages(pdf)


def test_tools_go_into_the_system_prompt_and_history_becomes_text() -> None:
    request = req(
        msg("system", "Be helpful."),
        msg("user", "Weather in Paris?"),
        msg("assistant", ToolCallPart("call_1", "get_weather", '{"city": "Paris"}')),
        msg("user", ToolResultPart("call_1", (TextPart("sunny"),))),
        tools=(WEATHER,),
    )
    view = for_text_model(request, text_tool_calls=True)
    assert view.tools == ()
    turns = chat_messages(view)
    assert turns[0]["role"] == "system"
    assert turns[0]["content"].startswith("Be helpful.\n\n")
    assert '"name":"get_weather"' in turns[0]["content"]
    assert "<tool_call>" in turns[0]["content"]
    assert turns[2] == {
        "role": "assistant",
        "content": '<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris"}}\n</tool_call>',
    }
    assert turns[3] == {"role": "user", "content": "<tool_response>\nsunny\n</tool_response>"}


def test_without_text_tool_calls_tools_are_not_offered_but_history_is_text() -> None:
    request = req(
        msg("assistant", ToolCallPart("call_1", "f", "{}")),
        tools=(WEATHER,),
        tool_choice=ToolChoice("auto"),
    )
    view = for_text_model(request, text_tool_calls=False)
    turns = chat_messages(view)
    assert turns == [
        {"role": "assistant", "content": '<tool_call>\n{"name":"f","arguments":{}}\n</tool_call>'}
    ]


def test_sampling_defaults_are_llama_cpp_chat_defaults() -> None:
    assert sampling_for(req(msg("user", "x"))) == Sampling(
        temperature=0.2, top_p=0.95, top_k=40, min_p=0.05, repeat_penalty=1.0
    )


def test_sampling_takes_request_fields_and_extra_settings() -> None:
    request = req(
        msg("user", "x"),
        temperature=0.0,
        top_p=0.5,
        top_k=3,
        seed=7,
        extra={"min_p": 0.1, "repeat_penalty": 1.3, "frequency_penalty": 0.5, "logprobs": True},
    )
    assert sampling_for(request) == Sampling(
        temperature=0.0,
        top_p=0.5,
        top_k=3,
        min_p=0.1,
        repeat_penalty=1.3,
        frequency_penalty=0.5,
        presence_penalty=0.0,
        seed=7,
    )


def test_a_non_numeric_extra_setting_is_a_400() -> None:
    with pytest.raises(InvalidRequestError) as info:
        sampling_for(req(msg("user", "x"), extra={"min_p": "high"}))
    assert info.value.param == "min_p"


def test_grammar_for_each_response_format() -> None:
    assert grammar_for(None) is None
    assert grammar_for(ResponseFormat("text")) is None
    assert "object" in grammar_for(ResponseFormat("json_object"))._grammar
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    grammar = grammar_for(ResponseFormat("json_schema", schema=schema))
    assert '\\"n\\"' in grammar._grammar  # the key is spelled out in the grammar


def test_a_schema_llama_cpp_cannot_convert_is_a_400() -> None:
    with pytest.raises(InvalidRequestError) as info:
        grammar_for(ResponseFormat("json_schema", schema={"type": "no-such-type"}))
    assert info.value.param == "response_format"
    assert "cannot be enforced locally" in info.value.message


def test_several_choices_are_refused_and_one_is_fine() -> None:
    check_supported(req(msg("user", "x"), extra={"n": 1}))
    with pytest.raises(InvalidRequestError) as info:
        check_supported(req(msg("user", "x"), extra={"n": 3}))
    assert info.value.param == "n"
    assert info.value.message == "this model generates one choice per request: 'n' must be 1"


def test_neutral_samplers_win_over_extra_and_reach_the_sampler() -> None:
    # What a Chat client sends as top_k / min_p / repetition_penalty arrives in neutral
    # fields (the codec parses them); llama.cpp's own repeat_penalty name still works.
    request = req(
        msg("user", "x"),
        top_k=1,
        min_p=0.2,
        repetition_penalty=1.15,
        extra={"min_p": 0.9, "repeat_penalty": 1.9},
    )
    sampling = sampling_for(request)
    assert (sampling.top_k, sampling.min_p, sampling.repeat_penalty) == (1, 0.2, 1.15)
    assert sampling_for(req(msg("user", "x"), extra={"repeat_penalty": 1.3})).repeat_penalty == 1.3


def test_audio_in_and_out_are_refused_naming_the_part() -> None:
    audio = Message("user", (TextPart("what is said?"), AudioPart(data="UklGRg==", format="wav")))
    with pytest.raises(InvalidRequestError) as info:
        chat_messages(req(msg("user", "hi"), audio))
    assert info.value.param == "messages[1].content[1]"
    assert "audio" in info.value.message
    with pytest.raises(InvalidRequestError) as info:
        check_supported(req(msg("user", "x"), output_audio={"voice": "alloy"}))
    assert info.value.param == "modalities"


def test_top_logprobs_beyond_twenty_is_refused() -> None:
    check_supported(req(msg("user", "x"), logprobs=True, top_logprobs=20))
    with pytest.raises(InvalidRequestError) as info:
        check_supported(req(msg("user", "x"), logprobs=True, top_logprobs=21))
    assert info.value.param == "top_logprobs"
