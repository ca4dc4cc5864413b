"""Logprobs, audio and samplers through the live gateway, seen by the official SDKs.

    openai SDK -> live gateway -> mock Chat upstream (hand-written OpenAI answers)
                               -> mock Messages upstream

A model with ``options`` takes the translated path even from a Chat client to a Chat
upstream: there the answer goes through the neutral core, and its ``logprobs`` and
``audio`` must come back as the passthrough path relays them (they used to become
``null``). Toward the Messages API a request for what it has no field for is refused
with a 400 naming the parameter, unless the model's ``drop_params`` says to drop it.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import openai
import orjson
import pytest
from aiohttp import web

from interlingua.config import parse_config
from interlingua.server import create_app

from ..live_server import live_server
from .mock_upstream import MockOpenAI, mock_openai
from .test_shaping import anthropic_answer

TOKENS = [
    {"token": "Hi", "logprob": -0.25, "bytes": [72, 105],
     "top_logprobs": [{"token": "Hi", "logprob": -0.25, "bytes": [72, 105]},
                      {"token": "Hey", "logprob": -1.5, "bytes": [72, 101, 121]}]},
    {"token": "!", "logprob": -0.5, "bytes": [33],
     "top_logprobs": [{"token": "!", "logprob": -0.5, "bytes": [33]},
                      {"token": ".", "logprob": -1.0, "bytes": [46]}]},
]  # fmt: skip
WAV = b"RIFF$\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x80>\x00\x00\x00}\x00\x00"
WAV_B64 = base64.b64encode(WAV).decode()
HELLO: Any = [{"role": "user", "content": "hello"}]


def _chunk(delta: dict[str, Any], logprobs: Any = None, finish: str | None = None) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
    payload = {
        "id": "chatcmpl-lp",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "qwen3",
        "choices": [choice],
    }
    return b"data: " + orjson.dumps(payload) + b"\n\n"


async def answer(
    mock: MockOpenAI, request: web.Request, body: dict[str, Any]
) -> web.StreamResponse:
    """ "Hi!" with its tokens' logprobs when asked, and a spoken answer when audio is."""
    wants_logprobs = body.get("logprobs") is True
    wants_audio = "audio" in (body.get("modalities") or ())
    logprobs = {"content": TOKENS, "refusal": None} if wants_logprobs else None
    if not body.get("stream"):
        message: dict[str, Any] = {"role": "assistant", "content": "Hi!", "refusal": None}
        if wants_audio:
            message["audio"] = {"id": "audio_1", "data": WAV_B64, "expires_at": 1_800_000_000,
                                "transcript": "Hi!"}  # fmt: skip
        payload = {
            "id": "chatcmpl-lp",
            "object": "chat.completion",
            "created": 1,
            "model": "qwen3",
            "choices": [
                {"index": 0, "message": message, "logprobs": logprobs, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        }
        return web.Response(body=orjson.dumps(payload), content_type="application/json")
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    chunks = [_chunk({"role": "assistant", "content": ""})]
    for i, token in enumerate(TOKENS):
        lp = {"content": [TOKENS[i]], "refusal": None} if wants_logprobs else None
        chunks.append(_chunk({"content": token["token"]}, lp))
    if wants_audio:
        half = len(WAV) // 2
        chunks += [
            _chunk({"audio": {"id": "audio_1", "transcript": "Hi!"}}),
            _chunk({"audio": {"data": base64.b64encode(WAV[:half]).decode()}}),
            _chunk({"audio": {"data": base64.b64encode(WAV[half:]).decode()}}),
            _chunk({"audio": {"expires_at": 1_800_000_000}}),
        ]
    chunks += [_chunk({}, None, "stop"), b"data: [DONE]\n\n"]
    for chunk in chunks:
        await resp.write(chunk)
    await resp.write_eof()
    return resp


class Stack:
    def __init__(self, url: str, chat: MockOpenAI, messages: MockOpenAI) -> None:
        self.url, self.chat, self.messages = url, chat, messages


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with (
        mock_openai(default=answer) as chat,
        mock_openai("/v1/messages", default=anthropic_answer) as messages,
    ):
        cfg = parse_config(
            {
                "upstreams": {
                    "chat": {"kind": "openai", "base_url": chat.base_url},
                    "anth": {"kind": "anthropic", "base_url": messages.base_url},
                },
                "models": [
                    {"name": "plain", "upstream": "chat", "model": "qwen3"},
                    # any model option takes the translated path, Chat to Chat
                    {"name": "translated", "upstream": "chat", "model": "qwen3",
                     "options": {"think_tags": True}},
                    {"name": "claude", "upstream": "anth", "model": "claude-x"},
                    {"name": "claude-drop", "upstream": "anth", "model": "claude-x",
                     "drop_params": ["logprobs", "top_logprobs", "min_p"]},
                ],
            }
        )  # fmt: skip
        with live_server(create_app(cfg)) as url:
            yield Stack(url, chat, messages)


@pytest.fixture
def gpt(stack: Stack) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=stack.url + "/v1", api_key="sk-client", max_retries=0) as client:
        yield client


def _tokens(content: Any) -> list[tuple[str, float, list[int] | None, list[str]]]:
    return [(t.token, t.logprob, t.bytes, [a.token for a in t.top_logprobs]) for t in content or ()]


EXPECTED = [("Hi", -0.25, [72, 105], ["Hi", "Hey"]), ("!", -0.5, [33], ["!", "."])]


@pytest.mark.parametrize("model", ["plain", "translated"])
def test_chat_logprobs_non_stream(gpt: openai.OpenAI, stack: Stack, model: str) -> None:
    done = gpt.chat.completions.create(model=model, messages=HELLO, logprobs=True, top_logprobs=2)
    sent = stack.chat.received[-1].body
    assert (sent["logprobs"], sent["top_logprobs"]) == (True, 2)
    assert done.choices[0].message.content == "Hi!"
    logprobs = done.choices[0].logprobs
    assert logprobs is not None and _tokens(logprobs.content) == EXPECTED
    plain = gpt.chat.completions.create(model=model, messages=HELLO)
    assert plain.choices[0].logprobs is None


@pytest.mark.parametrize("model", ["plain", "translated"])
def test_chat_logprobs_streamed_chunk_by_chunk(gpt: openai.OpenAI, model: str) -> None:
    stream = gpt.chat.completions.create(
        model=model, messages=HELLO, logprobs=True, top_logprobs=2, stream=True
    )
    pieces: list[tuple[str, Any]] = []
    with stream:
        for chunk in stream:
            for choice in chunk.choices:
                if choice.logprobs is not None and choice.logprobs.content:
                    pieces.append((choice.delta.content or "", choice.logprobs.content))
    # one chunk per token, its text and its logprobs together, as the upstream sent them
    assert [text for text, _ in pieces] == ["Hi", "!"]
    assert [tok for _, content in pieces for tok in _tokens(content)] == EXPECTED


@pytest.mark.parametrize("stream", [False, True])
def test_responses_client_gets_output_text_logprobs(
    gpt: openai.OpenAI, stack: Stack, stream: bool
) -> None:
    kwargs: dict[str, Any] = {"include": ["message.output_text.logprobs"], "top_logprobs": 2}
    if stream:
        with gpt.responses.stream(model="plain", input="hello", **kwargs) as events:
            deltas = [e for e in events if e.type == "response.output_text.delta"]
            done = events.get_final_response()
        assert [d.delta for d in deltas] == ["Hi", "!"]
        assert [[lp.token for lp in d.logprobs] for d in deltas] == [["Hi"], ["!"]]
    else:
        done = gpt.responses.create(model="plain", input="hello", **kwargs)
    sent = stack.chat.received[-1].body
    assert (sent["logprobs"], sent["top_logprobs"]) == (True, 2)
    part = done.output[0].content[0]  # type: ignore[union-attr]
    assert part.type == "output_text" and part.text == "Hi!"
    assert _tokens(part.logprobs) == EXPECTED


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_upstream_refuses_logprobs_naming_them(
    gpt: openai.OpenAI, stack: Stack, stream: bool
) -> None:
    before = len(stack.messages.received)
    with pytest.raises(openai.BadRequestError) as info:
        gpt.chat.completions.create(model="claude", messages=HELLO, logprobs=True, stream=stream)
    error = info.value.body
    assert isinstance(error, dict) and error["param"] == "logprobs"
    assert "logprobs" in error["message"] and "Anthropic" in error["message"]
    with pytest.raises(openai.BadRequestError) as info:
        gpt.chat.completions.create(model="claude", messages=HELLO, extra_body={"min_p": 0.1})
    assert isinstance(info.value.body, dict) and info.value.body["param"] == "min_p"
    assert len(stack.messages.received) == before  # nothing reached the upstream


def test_drop_params_turns_the_refusal_into_a_drop(gpt: openai.OpenAI, stack: Stack) -> None:
    done = gpt.chat.completions.create(
        model="claude-drop",
        messages=HELLO,
        logprobs=True,
        top_logprobs=3,
        extra_body={"min_p": 0.1, "top_k": 4},
    )
    assert done.choices[0].message.content == "hi"
    assert done.choices[0].logprobs is None
    sent = stack.messages.received[-1].body
    assert not {"logprobs", "top_logprobs", "min_p"} & set(sent)
    assert sent["top_k"] == 4  # Anthropic's own sampler is kept


@pytest.mark.parametrize("model", ["plain", "translated"])
def test_samplers_reach_a_chat_upstream(gpt: openai.OpenAI, stack: Stack, model: str) -> None:
    extra = {"top_k": 5, "min_p": 0.05, "repetition_penalty": 1.1}
    gpt.chat.completions.create(model=model, messages=HELLO, extra_body=extra)
    sent = stack.chat.received[-1].body
    assert {k: sent[k] for k in extra} == extra


# --- audio ----------------------------------------------------------------------------------

AUDIO_QUESTION: Any = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is said?"},
            {"type": "input_audio", "input_audio": {"data": WAV_B64, "format": "wav"}},
        ],
    }
]


@pytest.mark.parametrize("model", ["plain", "translated"])
def test_audio_in_and_out_on_the_chat_path(gpt: openai.OpenAI, stack: Stack, model: str) -> None:
    done = gpt.chat.completions.create(
        model=model,
        messages=AUDIO_QUESTION,
        modalities=["text", "audio"],
        audio={"voice": "alloy", "format": "wav"},
    )
    sent = stack.chat.received[-1].body
    assert sent["messages"][0]["content"][1] == AUDIO_QUESTION[0]["content"][1]
    assert sent["modalities"] == ["text", "audio"]
    assert sent["audio"] == {"voice": "alloy", "format": "wav"}
    audio = done.choices[0].message.audio
    assert audio is not None
    assert (audio.id, audio.transcript, audio.expires_at) == ("audio_1", "Hi!", 1_800_000_000)
    assert base64.b64decode(audio.data) == WAV


def test_audio_streamed_on_the_translated_path(gpt: openai.OpenAI) -> None:
    stream = gpt.chat.completions.create(
        model="translated",
        messages=HELLO,
        modalities=["text", "audio"],
        audio={"voice": "alloy", "format": "wav"},
        stream=True,
    )
    data, transcript, ids = b"", "", set()
    with stream:
        for chunk in stream:
            for choice in chunk.choices:
                audio = getattr(choice.delta, "audio", None)
                if audio:
                    data += base64.b64decode(audio.data or "")
                    transcript += audio.transcript or ""
                    ids.add(audio.id)
    assert (data, transcript) == (WAV, "Hi!")
    assert "audio_1" in ids


@pytest.mark.parametrize("stream", [False, True])
def test_audio_toward_anthropic_is_refused_naming_the_part(
    gpt: openai.OpenAI, stack: Stack, stream: bool
) -> None:
    before = len(stack.messages.received)
    with pytest.raises(openai.BadRequestError) as info:
        gpt.chat.completions.create(model="claude", messages=AUDIO_QUESTION, stream=stream)
    assert isinstance(info.value.body, dict)
    assert info.value.body["param"] == "messages[0].content[1]"
    assert "audio" in info.value.body["message"]
    with pytest.raises(openai.BadRequestError) as info:
        gpt.chat.completions.create(
            model="claude", messages=HELLO, modalities=["text", "audio"], audio={"voice": "alloy"}
        )
    assert isinstance(info.value.body, dict) and info.value.body["param"] == "modalities"
    assert len(stack.messages.received) == before
