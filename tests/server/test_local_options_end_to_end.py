"""The bundled SmolLM2 behind a live gateway, past plain answers: the Responses API (stream,
json_schema, previous_response_id), logprobs, samplers and audio refusals, through the
official openai SDK. Invariants only: sampled text differs from one CPU to another (see
test_local_end_to_end)."""

from __future__ import annotations

# ruff: noqa: F811 (the fixtures imported from local_gateway are these tests' parameters)
import json
from typing import Any

import openai
import pytest

from interlingua.upstreams.local import LlamaEngine

from .local_gateway import (  # noqa: F401 (fixtures: found where they are imported)
    QUESTION,
    SCHEMA,
    STORY,
    check_city,
    gpt,
    openai_forced,
    prompt_tokens,
    tokenizer,
    url,
    user,
)


def test_responses_answer_and_stream_alike(gpt: openai.OpenAI, tokenizer: LlamaEngine) -> None:
    # Greedy decoding (temperature 0): the same prompt gives the same text within a run.
    ask: dict[str, Any] = {"model": "smollm2", "input": QUESTION, "temperature": 0}
    whole = gpt.responses.create(**ask, max_output_tokens=60)
    with gpt.responses.stream(**ask, max_output_tokens=60) as stream:
        # the SDK's get_final_response() wants response.completed; a length stop ends
        # with response.incomplete, as the API's own streams do
        ends = [
            e.response for e in stream if e.type in ("response.completed", "response.incomplete")
        ]
    assert len(ends) == 1
    streamed = ends[0]
    assert whole.status == streamed.status and whole.status in ("completed", "incomplete")
    assert whole.output_text.strip() and streamed.output_text == whole.output_text
    assert whole.usage is not None
    assert whole.usage.input_tokens == prompt_tokens(tokenizer, user(QUESTION))
    short = gpt.responses.create(**ask, max_output_tokens=3)
    assert short.status == "incomplete" and short.usage is not None
    assert short.incomplete_details is not None
    assert short.incomplete_details.reason == "max_output_tokens"
    assert short.usage.output_tokens == 3


def test_responses_json_schema_output_validates(gpt: openai.OpenAI) -> None:
    response = gpt.responses.create(
        model="smollm2",
        input="What is the largest city in France and its population? Answer in JSON.",
        max_output_tokens=200,
        text={"format": {"type": "json_schema", "name": "city", "schema": SCHEMA, "strict": True}},
    )
    assert response.status == "completed"
    check_city(json.loads(response.output_text))


def test_responses_previous_response_id_continues_the_conversation(
    gpt: openai.OpenAI, tokenizer: LlamaEngine
) -> None:
    first = gpt.responses.create(
        model="smollm2", input="My name is Ada.", max_output_tokens=20, temperature=0
    )
    assert first.store is True and first.output_text
    second = gpt.responses.create(
        model="smollm2",
        previous_response_id=first.id,
        input="What is my name?",
        max_output_tokens=20,
        temperature=0,
    )
    assert second.previous_response_id == first.id and second.output_text
    # The model was prompted with the whole conversation, exactly (its own token count).
    conversation = [
        {"role": "user", "content": "My name is Ada."},
        {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "What is my name?"},
    ]
    assert second.usage is not None
    assert second.usage.input_tokens == prompt_tokens(tokenizer, conversation)
    assert gpt.responses.retrieve(second.id).output_text == second.output_text
    listed = gpt.responses.input_items.list(second.id, order="asc")
    assert [item.type for item in listed.data] == ["message", "message", "message"]


# --- logprobs, samplers, audio ---------------------------------------------------------------


def check_logprobs(content: Any, text: str, top: int) -> None:
    """llama.cpp-server-shaped logprobs, invariants only (any CPU)."""
    assert content and "".join(t.token for t in content) == text  # forced ASCII
    for t in content:
        assert t.logprob <= 0 and t.bytes == list(t.token.encode())
        values = [a.logprob for a in t.top_logprobs]
        assert len(values) == top and values == sorted(values, reverse=True)


def test_openai_logprobs_from_the_local_model(gpt: openai.OpenAI) -> None:
    forced = openai_forced("Paris.")
    done = gpt.chat.completions.create(
        model="smollm2", messages=user(QUESTION), response_format=forced,  # type: ignore[arg-type]
        logprobs=True, top_logprobs=2,
    )  # fmt: skip
    logprobs = done.choices[0].logprobs
    assert logprobs is not None
    check_logprobs(logprobs.content, '"Paris."', 2)
    stream = gpt.chat.completions.create(
        model="smollm2", messages=user(QUESTION), response_format=forced,  # type: ignore[arg-type]
        logprobs=True, top_logprobs=1, stream=True,
    )  # fmt: skip
    tokens, text = [], ""
    with stream:
        for chunk in stream:
            for choice in chunk.choices:
                text += choice.delta.content or ""
                if choice.logprobs is not None:
                    tokens += choice.logprobs.content or []
    assert text == '"Paris."'
    check_logprobs(tokens, text, 1)


def test_responses_logprobs_from_the_local_model(gpt: openai.OpenAI) -> None:
    done = gpt.responses.create(
        model="smollm2",
        input=QUESTION,
        text={"format": {"type": "json_schema", "name": "f", "schema": {"const": "Paris."}}},
        include=["message.output_text.logprobs"],
        top_logprobs=2,
    )
    part = done.output[0].content[0]  # type: ignore[union-attr]
    assert part.type == "output_text"
    check_logprobs(part.logprobs, '"Paris."', 2)


def test_openai_top_k_reaches_the_local_sampler(gpt: openai.OpenAI) -> None:
    # top_k=1 is greedy whatever the seed: before, the Chat codec left top_k in extra
    # and the local engine sampled from its default 40 candidates.
    texts = {
        gpt.chat.completions.create(
            model="smollm2", messages=user(STORY), max_tokens=10, temperature=1.5, seed=seed,
            extra_body={"top_k": 1, "min_p": 0.0, "repetition_penalty": 1.0},
        ).choices[0].message.content
        for seed in (11, 12, 13)
    }  # fmt: skip
    assert len(texts) == 1


def test_audio_toward_the_local_model_is_refused(gpt: openai.OpenAI) -> None:
    audio: Any = [
        {"role": "user", "content": [
            {"type": "text", "text": "What is said?"},
            {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
        ]}
    ]  # fmt: skip
    with pytest.raises(openai.BadRequestError) as info:
        gpt.chat.completions.create(model="smollm2", messages=audio)
    assert isinstance(info.value.body, dict)
    assert info.value.body["param"] == "messages[0].content[1]"
    with pytest.raises(openai.BadRequestError) as info:
        gpt.chat.completions.create(
            model="smollm2", messages=user("hi"), modalities=["text", "audio"],
            audio={"voice": "alloy", "format": "wav"},
        )  # fmt: skip
    assert isinstance(info.value.body, dict) and info.value.body["param"] == "modalities"
