"""The official SDKs against a live gateway serving the bundled SmolLM2 (the default config).

This is what ``interlingua serve`` with no config does. The model is tiny and sampled
(llama.cpp's chat defaults), so assertions are about shape and invariants. Sampled text
differs from one CPU to another, even with a fixed seed and even greedy (an AMD EPYC stopped
after 11 tokens where a test expected 30), so exact content and exact token counts are
checked only where a JSON-schema grammar pins the answer down: a ``const``
(:func:`openai_forced`, :func:`anthropic_forced`) when the test needs one exact answer, a
schema when it needs valid JSON.
"""

from __future__ import annotations

# ruff: noqa: F811 (the fixtures imported from local_gateway are these tests' parameters)
import json
import threading
import time
from typing import Any

import anthropic
import httpx
import openai
import pytest

from interlingua.upstreams.local import LlamaEngine

from ..request_ids import without_request_id
from .local_gateway import (  # noqa: F401 (fixtures: found where they are imported)
    COUNT,
    COUNTED,
    LONG,
    QUESTION,
    SCHEMA,
    STORY,
    anthropic_client,
    anthropic_forced,
    check_city,
    claude,
    gpt,
    openai_client,
    openai_forced,
    prompt_tokens,
    tight_url,
    tokenizer,
    url,
    user,
)

# --- answers ---------------------------------------------------------------------------------


def test_openai_answers_the_question(gpt: openai.OpenAI, tokenizer: LlamaEngine) -> None:
    completion = gpt.chat.completions.create(
        model="smollm2", messages=user(QUESTION), max_tokens=30, seed=1
    )
    choice = completion.choices[0]
    assert (choice.message.content or "").strip()  # what it says is the CPU's business
    assert completion.model == "smollm2"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == prompt_tokens(tokenizer, user(QUESTION))
    if choice.finish_reason == "length":
        assert completion.usage.completion_tokens == 30
    else:
        assert choice.finish_reason == "stop"
        assert 0 < completion.usage.completion_tokens < 30


def test_openai_streams_with_exact_usage(gpt: openai.OpenAI, tokenizer: LlamaEngine) -> None:
    stream = gpt.chat.completions.create(
        model="default",
        messages=user(QUESTION),
        max_tokens=30,
        seed=1,
        stream=True,
        stream_options={"include_usage": True},
        response_format=openai_forced("The capital of France is Paris."),  # type: ignore[arg-type]
    )
    pieces: list[str] = []
    usage = None
    finish = None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            finish = choice.finish_reason or finish
    assert "".join(pieces) == '"The capital of France is Paris."'
    assert finish == "stop"
    assert usage is not None
    assert usage.prompt_tokens == prompt_tokens(tokenizer, user(QUESTION))
    # One chunk per generated token: forced ASCII, so every token is whole characters,
    # whichever tokens the sampler picked to spell it.
    assert usage.completion_tokens == len(pieces)


def test_anthropic_answers(claude: anthropic.Anthropic, tokenizer: LlamaEngine) -> None:
    message = claude.messages.create(
        model="smollm2",
        max_tokens=30,
        system="You are a geography teacher.",
        messages=[{"role": "user", "content": QUESTION}],
    )
    assert message.content and message.content[0].type == "text"
    assert message.content[0].text.strip()
    assert message.stop_reason in ("end_turn", "max_tokens")
    expected = prompt_tokens(
        tokenizer, [{"role": "system", "content": "You are a geography teacher."}, *user(QUESTION)]
    )
    # Anthropic's input_tokens leaves out the prompt tokens read from the cache (a
    # template prefix another request left there, say).
    usage = message.usage
    assert usage.input_tokens + (usage.cache_read_input_tokens or 0) == expected
    assert 0 < message.usage.output_tokens <= 30


def test_a_second_turn_reports_the_cached_prompt_openai(
    gpt: openai.OpenAI, tokenizer: LlamaEngine
) -> None:
    turn = user("Name three rivers of Europe, briefly.")
    first = gpt.chat.completions.create(model="smollm2", messages=turn, max_tokens=12, seed=1)
    answer = first.choices[0].message.content or ""
    turn += [{"role": "assistant", "content": answer}, *user("And of Asia?")]
    second = gpt.chat.completions.create(model="smollm2", messages=turn, max_tokens=4)  # type: ignore[arg-type]
    usage = second.usage
    assert usage is not None and usage.prompt_tokens_details is not None
    cached = usage.prompt_tokens_details.cached_tokens or 0
    assert first.usage is not None
    # The whole first prompt came from the cache, and the answer as far as it tokenizes
    # as it was generated; only the new turn was read.
    assert first.usage.prompt_tokens <= cached < usage.prompt_tokens
    assert cached <= first.usage.prompt_tokens + first.usage.completion_tokens
    assert usage.prompt_tokens == prompt_tokens(tokenizer, turn)


def test_a_second_turn_reports_the_cached_prompt_anthropic(
    claude: anthropic.Anthropic, tokenizer: LlamaEngine
) -> None:
    turn: list[dict[str, str]] = user("Name three mountains of Africa, briefly.")
    first = claude.messages.create(model="smollm2", max_tokens=12, messages=turn)  # type: ignore[arg-type]
    answer = "".join(b.text for b in first.content if b.type == "text")
    turn += [{"role": "assistant", "content": answer}, *user("And of Asia?")]
    with claude.messages.stream(model="smollm2", max_tokens=4, messages=turn) as stream:  # type: ignore[arg-type]
        started = next(e for e in stream if e.type == "message_start")
        final = stream.get_final_message()
    first_total = first.usage.input_tokens + (first.usage.cache_read_input_tokens or 0)
    for usage in (started.message.usage, final.usage):
        cached = usage.cache_read_input_tokens or 0
        assert first_total <= cached <= first_total + first.usage.output_tokens
        # input_tokens counts only what was not read from the cache (Anthropic's meaning)
        assert usage.input_tokens + cached == prompt_tokens(tokenizer, turn)
        assert usage.input_tokens > 0


def test_anthropic_streams(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model="smollm2", max_tokens=30, messages=[{"role": "user", "content": QUESTION}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text.strip()
    assert final.content[0].text == text  # type: ignore[union-attr]
    assert final.stop_reason in ("end_turn", "max_tokens")
    assert final.usage.output_tokens > 0


def test_anthropic_count_tokens_uses_the_model_tokenizer(
    claude: anthropic.Anthropic, tokenizer: LlamaEngine
) -> None:
    counted = claude.messages.count_tokens(
        model="smollm2", messages=[{"role": "user", "content": QUESTION}]
    )
    assert counted.input_tokens == prompt_tokens(tokenizer, user(QUESTION))


# --- limits: max_tokens, stop sequences ------------------------------------------------------


def test_openai_max_tokens_is_length(gpt: openai.OpenAI) -> None:
    # Forced: unforced, the model may end its turn within 5 tokens on some CPU.
    completion = gpt.chat.completions.create(
        model="smollm2",
        messages=user(STORY),
        max_tokens=5,
        response_format=openai_forced(LONG),  # type: ignore[arg-type]
    )
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 5


def test_anthropic_max_tokens_streaming(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model="smollm2",
        max_tokens=5,
        messages=[{"role": "user", "content": STORY}],
        extra_body={"output_config": anthropic_forced(LONG)},
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "max_tokens"
    assert final.usage.output_tokens == 5


def test_openai_stop_sequence_trims(gpt: openai.OpenAI) -> None:
    # Forced, not greedy: greedy text may differ on another CPU (near ties).
    completion = gpt.chat.completions.create(
        model="smollm2",
        messages=user(COUNT),
        stop=["3"],
        max_tokens=40,
        response_format=openai_forced(COUNTED),  # type: ignore[arg-type]
    )
    choice = completion.choices[0]
    assert choice.message.content == '"1, 2, '
    assert choice.finish_reason == "stop"


def test_anthropic_stop_sequence_is_reported(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="smollm2",
        max_tokens=40,
        stop_sequences=["3"],
        extra_body={"output_config": anthropic_forced(COUNTED)},
        messages=[{"role": "user", "content": COUNT}],
    )
    assert message.content[0].text == '"1, 2, '  # type: ignore[union-attr]
    assert message.stop_reason == "stop_sequence"
    assert message.stop_sequence == "3"


def test_anthropic_stop_sequence_streaming(claude: anthropic.Anthropic) -> None:
    with claude.messages.stream(
        model="smollm2",
        max_tokens=40,
        stop_sequences=["3"],
        extra_body={"output_config": anthropic_forced(COUNTED)},
        messages=[{"role": "user", "content": COUNT}],
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == '"1, 2, '
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", "3")


# --- structured output -----------------------------------------------------------------------


def test_openai_json_schema_output_validates(gpt: openai.OpenAI) -> None:
    completion = gpt.chat.completions.create(
        model="smollm2",
        messages=user("What is the largest city in France and its population? Answer in JSON."),
        max_tokens=200,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "city", "schema": SCHEMA, "strict": True},
        },
    )
    assert completion.choices[0].finish_reason == "stop"
    check_city(json.loads(completion.choices[0].message.content or ""))


def test_anthropic_json_schema_output_validates(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model="smollm2",
        max_tokens=200,
        messages=[{"role": "user", "content": "Name a big city and its population, as JSON."}],
        output_config={"format": {"type": "json_schema", "schema": SCHEMA}},
    )
    assert message.stop_reason == "end_turn"
    check_city(json.loads(message.content[0].text))  # type: ignore[union-attr]


def test_openai_json_object_output_parses(gpt: openai.OpenAI) -> None:
    completion = gpt.chat.completions.create(
        model="smollm2",
        messages=user("Describe a cat as a JSON object with a name and an age."),
        max_tokens=300,
        response_format={"type": "json_object"},
    )
    if completion.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(completion.choices[0].message.content or ""), dict)
    else:  # ran out of tokens inside the object: still the start of one
        assert (completion.choices[0].message.content or "").lstrip().startswith("{")


# --- concurrency: disconnects, the wait line, responsiveness ---------------------------------


def long_stream_body(model: str = "smollm2") -> dict[str, Any]:
    return {"model": model, "messages": user(STORY), "max_tokens": 2000, "stream": True}


def test_a_disconnect_mid_stream_frees_the_model(url: str) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        with client.stream("POST", "/v1/chat/completions", json=long_stream_body()) as response:
            assert response.status_code == 200
            next(response.iter_bytes())  # the generation is running
        # Closed after the first chunk. The next request needs the model: its first byte
        # (sent once it holds the model) must come at once, not after 2000 tokens.
        started = time.monotonic()
        body = {**long_stream_body(), "max_tokens": 3}
        with client.stream("POST", "/v1/chat/completions", json=body) as response:
            assert response.status_code == 200
            chunks = response.iter_bytes()
            next(chunks)
            first_byte = time.monotonic() - started
            rest = b"".join(chunks)
    assert first_byte < 2.0, f"the model was still busy: first byte after {first_byte:.2f} s"
    assert b"[DONE]" in rest


def test_a_client_gone_before_a_non_streaming_answer_frees_the_model(url: str) -> None:
    body = {**long_stream_body(), "stream": False}
    # The client gives up after 0.5 s of a 2000-token generation and closes.
    with (
        httpx.Client(base_url=url, timeout=httpx.Timeout(30, read=0.5)) as client,
        pytest.raises(httpx.ReadTimeout),
    ):
        client.post("/v1/chat/completions", json=body)
    started = time.monotonic()
    forced = {"max_tokens": 3, "response_format": openai_forced(LONG)}  # no early end of turn
    with httpx.Client(base_url=url, timeout=30) as client:
        answer = client.post("/v1/chat/completions", json={**body, **forced})
    elapsed = time.monotonic() - started
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == 3
    # Unfreed, the model would first finish ~2000 tokens (tens of seconds here).
    assert elapsed < 3.0, f"the model was still busy: answered after {elapsed:.2f} s"


def test_health_answers_during_generation(url: str) -> None:
    with (
        httpx.Client(base_url=url, timeout=30) as client,
        client.stream("POST", "/v1/chat/completions", json=long_stream_body()) as response,
    ):
        next(response.iter_bytes())
        started = time.monotonic()
        health = client.get("/health", timeout=5)
        elapsed = time.monotonic() - started
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert elapsed < 1.0


def hold_the_model(url: str) -> tuple[threading.Event, threading.Thread]:
    """Keep a long generation running in a thread until the returned event is set.

    Forced to a text longer than the context, so that it runs until the context is full
    (an unforced story may end within a few tokens).
    """
    started, release = threading.Event(), threading.Event()
    body = {**long_stream_body(), "response_format": openai_forced(LONG * 5)}

    def run() -> None:
        with (
            httpx.Client(base_url=url, timeout=30) as client,
            client.stream("POST", "/v1/chat/completions", json=body) as response,
        ):
            # The iterator is kept: dropping it would close the response, a hang-up
            # that frees the model as soon as the server sees it.
            chunks = response.iter_bytes()
            next(chunks)
            started.set()
            release.wait(30)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(30), "the long generation did not start"
    return release, thread


def test_a_full_wait_line_is_429_for_openai_and_overloaded_for_anthropic(tight_url: str) -> None:
    release, thread = hold_the_model(tight_url)
    try:
        with openai_client(tight_url) as gpt, pytest.raises(openai.RateLimitError) as oai:
            gpt.chat.completions.create(model="smollm2", messages=user("hi"), max_tokens=3)
        assert oai.value.status_code == 429
        assert oai.value.response.headers["retry-after"] == "1"
        assert "local model is busy" in oai.value.message
        with anthropic_client(tight_url) as claude, pytest.raises(anthropic.APIStatusError) as ant:
            claude.messages.create(
                model="smollm2", max_tokens=3, messages=[{"role": "user", "content": "hi"}]
            )
        assert ant.value.status_code == 529
        assert ant.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    finally:
        release.set()
        thread.join(10)
    # Once the holder is gone the model serves again.
    with openai_client(tight_url, retries=2) as gpt:
        assert gpt.chat.completions.create(model="smollm2", messages=user("hi"), max_tokens=3)


# --- context length --------------------------------------------------------------------------


def test_prompt_too_long_openai(tight_url: str) -> None:
    with openai_client(tight_url) as gpt, pytest.raises(openai.BadRequestError) as info:
        gpt.chat.completions.create(model="smollm2", messages=user("word " * 400), max_tokens=5)
    assert info.value.status_code == 400
    assert info.value.code == "context_length_exceeded"
    assert info.value.param == "messages"
    assert "prompt is too long" in info.value.message


def test_prompt_too_long_anthropic_streaming(tight_url: str) -> None:
    with (
        anthropic_client(tight_url) as claude,
        pytest.raises(anthropic.BadRequestError) as info,
        claude.messages.stream(
            model="smollm2", max_tokens=5, messages=[{"role": "user", "content": "word " * 400}]
        ) as stream,
    ):
        stream.get_final_message()
    error = info.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("prompt is too long: ")
    assert without_request_id(error["message"]).endswith(" tokens > 255 maximum")
