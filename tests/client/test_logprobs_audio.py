"""Logprobs, audio in and out, and the samplers, on the client: what goes on the wire,
what comes back (stream and not), and what a dialect without the setting does."""

from __future__ import annotations

import base64
import io
import wave
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from interlingua.client import (
    AsyncClient,
    Audio,
    Client,
    InputError,
    UnsupportedParameterError,
)
from interlingua.core import AudioPart, Response, TextPart, TokenLogprob, Usage
from interlingua.errors import InvalidRequestError

from .conftest import FakeServer, Gateway, Reply, Stream, anthropic_body, openai_body

TOKENS = [
    {"token": "Hi", "logprob": -0.25, "bytes": [72, 105],
     "top_logprobs": [{"token": "Hi", "logprob": -0.25, "bytes": [72, 105]},
                      {"token": "Hello", "logprob": -1.5, "bytes": [72, 101, 108, 108, 111]}]},
    {"token": "!", "logprob": -0.01, "bytes": [33],
     "top_logprobs": [{"token": "!", "logprob": -0.01, "bytes": [33]},
                      {"token": ".", "logprob": -4.5, "bytes": [46]}]},
]  # fmt: skip


def wav_bytes(frames: bytes = b"\x00\x01" * 240, rate: int = 16_000) -> bytes:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(frames)
    return buf.getvalue()


MP3_FRAME = b"\xff\xfb\x90\x64" + b"\x00" * 60  # an MPEG-1 layer III frame header


@pytest.fixture
async def client(server: FakeServer) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(server.url + "/v1", "sk-test", model="m") as c:
        yield c


def _chunk(delta: dict[str, Any], logprobs: Any = None, finish: str | None = None) -> bytes:
    payload = {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _check_tokens(tokens: tuple[TokenLogprob, ...] | None) -> None:
    assert tokens is not None
    assert [(t.token, t.logprob, t.bytes) for t in tokens] == [
        ("Hi", -0.25, (72, 105)),
        ("!", -0.01, (33,)),
    ]
    assert [a.token for a in tokens[0].top_logprobs] == ["Hi", "Hello"]
    assert tokens[1].top_logprobs[1] == TokenLogprob(".", -4.5, (46,))


# --- logprobs ------------------------------------------------------------------------------


async def test_logprobs_non_stream(client: AsyncClient, server: FakeServer) -> None:
    body = openai_body("Hi!")
    body["choices"][0]["logprobs"] = {"content": TOKENS, "refusal": None}
    server.push(Reply(body))
    result = await client.chat("hello", logprobs=True, top_logprobs=2)
    assert server.bodies[0]["logprobs"] is True and server.bodies[0]["top_logprobs"] == 2
    _check_tokens(result.logprobs)
    server.push(Reply(openai_body("plain")))
    assert (await client.chat("hello")).logprobs is None
    assert "logprobs" not in server.bodies[1] and "top_logprobs" not in server.bodies[1]


async def test_logprobs_streamed_are_gathered_from_every_chunk(
    client: AsyncClient, server: FakeServer
) -> None:
    chunks = [
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"content": "Hi"}, {"content": TOKENS[:1], "refusal": None}),
        _chunk({"content": "!"}, {"content": TOKENS[1:], "refusal": None}),
        _chunk({}, None, "stop"),
        b"data: [DONE]\n\n",
    ]
    server.push(Stream(chunks))
    async with client.stream("hello", top_logprobs=2) as stream:
        texts = [t async for t in stream.text_stream()]
    assert texts == ["Hi", "!"]
    assert server.bodies[0]["logprobs"] is True  # top_logprobs alone asks for them
    assert stream.result is not None
    _check_tokens(stream.result.logprobs)


def test_sync_client_logprobs(server: FakeServer) -> None:
    body = openai_body("Hi!")
    body["choices"][0]["logprobs"] = {"content": TOKENS, "refusal": None}
    server.push(Reply(body))
    with Client(server.url + "/v1", "sk-test", model="m") as c:
        _check_tokens(c.chat("hello", logprobs=True).logprobs)


# --- samplers and settings a dialect lacks ---------------------------------------------------


async def test_samplers_go_in_the_openai_body(client: AsyncClient, server: FakeServer) -> None:
    await client.chat("hello", top_k=5, min_p=0.1, repetition_penalty=1.2)
    body = server.bodies[0]
    assert (body["top_k"], body["min_p"], body["repetition_penalty"]) == (5, 0.1, 1.2)


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"min_p": 0.1}, "min_p"),
        ({"repetition_penalty": 1.1}, "repetition_penalty"),
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 3}, "logprobs"),
        ({"modalities": ["text", "audio"], "audio": {"voice": "alloy"}}, "modalities"),
    ],
)
async def test_anthropic_dialect_refuses_what_it_has_no_field_for(
    server: FakeServer, kwargs: dict[str, Any], param: str
) -> None:
    async with AsyncClient(server.url, "k", dialect="anthropic", model="claude") as c:
        with pytest.raises(UnsupportedParameterError) as info:
            await c.chat("hello", top_k=7, **kwargs)
        assert info.value.param == param
        assert "drop_unsupported=True" in str(info.value)
        assert not server.seen  # refused before anything was sent
        server.push(Reply(anthropic_body("fine")))
        result = await c.chat("hello", top_k=7, drop_unsupported=True, **kwargs)
    assert result.text == "fine"
    (seen,) = server.seen
    assert seen.body["top_k"] == 7  # Anthropic's own sampler goes through
    assert not {"min_p", "repetition_penalty", "logprobs", "top_logprobs", "modalities"} & set(
        seen.body
    )


async def test_drop_unsupported_on_the_client_and_the_responses_dialect(
    server: FakeServer,
) -> None:
    async with AsyncClient(server.url + "/v1", "k", dialect="responses", model="m") as c:
        with pytest.raises(UnsupportedParameterError) as info:
            c.render(await c.prepare("hi", top_k=3))
        assert info.value.param == "top_k"
        body = c.render(await c.prepare("hi", logprobs=True, top_logprobs=2))
    assert body["include"] == ["message.output_text.logprobs"]  # Responses has logprobs
    assert body["top_logprobs"] == 2
    async with AsyncClient(
        server.url, "k", dialect="anthropic", model="claude", drop_unsupported=True
    ) as c:
        body = c.render(await c.prepare("hi", min_p=0.2, logprobs=True, top_k=4))
    assert body["top_k"] == 4 and "min_p" not in body and "logprobs" not in body


# --- audio in --------------------------------------------------------------------------------


async def test_audio_items_become_input_audio_parts(
    client: AsyncClient, server: FakeServer, tmp_path: Path
) -> None:
    wav = wav_bytes()
    path = tmp_path / "q.wav"
    path.write_bytes(wav)
    data_uri = "data:audio/mpeg;base64," + base64.b64encode(MP3_FRAME).decode()
    await client.chat(
        [
            "what is said?",
            {"type": "audio", "value": str(path)},
            {"type": "audio", "value": MP3_FRAME},
            path,  # a .wav Path in a prompt list is audio, not an image
            wav,  # so are bytes that start like WAV
            {"type": "audio", "value": data_uri},
            {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
        ]
    )
    content = server.bodies[0]["messages"][-1]["content"]
    assert content[0] == {"type": "text", "text": "what is said?"}
    audio = [c["input_audio"] for c in content[1:]]
    assert all(c["type"] == "input_audio" for c in content[1:])
    assert [a["format"] for a in audio] == ["wav", "mp3", "wav", "wav", "mp3", "wav"]
    assert base64.b64decode(audio[0]["data"]) == wav
    assert base64.b64decode(audio[1]["data"]) == MP3_FRAME
    assert audio[4]["data"] == data_uri.split(",", 1)[1]


async def test_bad_audio_items_name_the_item(client: AsyncClient, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"prompt\[1\]: the audio bytes is not audio"):
        await client.prepare(["x", {"type": "audio", "value": b"not audio at all"}])
    with pytest.raises(InputError, match=r"prompt\[0\]: an audio item needs 'value'"):
        await client.prepare([{"type": "audio"}])
    raw = tmp_path / "clip.raw"
    raw.write_bytes(b"\x00" * 32)
    part = (await client.prepare([{"type": "audio", "value": raw, "format": "wav"}])).messages
    assert isinstance(part[0].parts[0], AudioPart) and part[0].parts[0].format == "wav"


async def test_audio_toward_anthropic_is_refused_by_the_codec(server: FakeServer) -> None:
    async with AsyncClient(server.url, "k", dialect="anthropic", model="claude") as c:
        with pytest.raises(InvalidRequestError, match=r"messages\[0\]\.content\[1\].*audio"):
            await c.chat(["hear this", {"type": "audio", "value": wav_bytes()}])
    assert not server.seen


# --- audio out -------------------------------------------------------------------------------


async def test_audio_answer_non_stream(
    client: AsyncClient, server: FakeServer, tmp_path: Path
) -> None:
    wav = wav_bytes()
    body = openai_body(None)
    body["choices"][0]["message"]["audio"] = {
        "id": "audio_1",
        "data": base64.b64encode(wav).decode(),
        "expires_at": 1_700_000_000,
        "transcript": "Hello there.",
    }
    server.push(Reply(body))
    result = await client.chat(
        "say hello", modalities=["text", "audio"], audio={"voice": "alloy", "format": "wav"}
    )
    sent = server.bodies[0]
    assert sent["modalities"] == ["text", "audio"]
    assert sent["audio"] == {"voice": "alloy", "format": "wav"}
    audio = result.audio
    assert isinstance(audio, Audio)
    assert (audio.data, audio.transcript, audio.id, audio.format) == (
        wav,
        "Hello there.",
        "audio_1",
        "wav",
    )
    assert audio.expires_at == 1_700_000_000
    audio.save(tmp_path / "a.wav")
    assert (tmp_path / "a.wav").read_bytes() == wav
    assert result.text == ""


async def test_audio_answer_streamed_in_pieces(client: AsyncClient, server: FakeServer) -> None:
    pcm = bytes(range(256)) * 3
    # each piece is base64 of its own (padding and all): they join as bytes, not as text
    pieces = [pcm[:100], pcm[100:401], pcm[401:]]
    chunks = [
        _chunk({"role": "assistant", "content": None}),
        _chunk({"audio": {"id": "audio_s", "transcript": "Hel"}}),
        _chunk({"audio": {"transcript": "lo."}}),
        *[_chunk({"audio": {"data": base64.b64encode(p).decode()}}) for p in pieces],
        _chunk({"audio": {"expires_at": 99}}),
        _chunk({}, None, "stop"),
        b"data: [DONE]\n\n",
    ]
    server.push(Stream(chunks))
    async with client.stream("say hello", audio={"voice": "alloy", "format": "pcm16"}) as s:
        result = await s.final()
    assert server.bodies[0]["modalities"] == ["text", "audio"]
    audio = result.audio
    assert audio is not None
    assert (audio.data, audio.transcript, audio.id, audio.expires_at) == (
        pcm,
        "Hello.",
        "audio_s",
        99,
    )
    assert audio.format == "pcm16"


async def test_a_spoken_answers_first_piece_is_its_first_token(
    client: AsyncClient, server: FakeServer
) -> None:
    """ttft of a stream that answers in audio only: its first audio piece, not its end."""
    data = base64.b64encode(b"\x00\x01" * 8).decode()
    chunks = [
        _chunk({"role": "assistant", "content": None}),
        _chunk({"audio": {"id": "audio_t", "transcript": "Hi"}}),
        _chunk({"audio": {"data": data}}),
        _chunk({"audio": {"data": data}}),
        _chunk({}, None, "stop"),
        b"data: [DONE]\n\n",
    ]
    server.push(Stream(chunks, delay=0.1))
    async with client.stream("say hi", audio={"voice": "alloy", "format": "pcm16"}) as s:
        result = await s.final()
    assert result.audio is not None and result.text == ""
    assert result.ttft is not None and result.latency is not None
    # three pauses of 0.1 s at least came after the first piece
    assert result.latency - result.ttft >= 0.25


def test_pcm16_saves_as_a_playable_wav(tmp_path: Path) -> None:
    samples = b"\x01\x00\xff\x7f" * 10
    Audio(samples, format="pcm16").save(tmp_path / "x.wav")
    with wave.open(str(tmp_path / "x.wav"), "rb") as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 24_000)
        assert w.readframes(w.getnframes()) == samples
    Audio(samples, format="pcm16").save(tmp_path / "x.pcm")
    assert (tmp_path / "x.pcm").read_bytes() == samples


# --- through the live gateway ----------------------------------------------------------------


def _scripted(gateway: Gateway) -> Response:
    tokens = tuple(
        TokenLogprob(t["token"], t["logprob"], tuple(t["bytes"]),
                     tuple(TokenLogprob(a["token"], a["logprob"], tuple(a["bytes"]))
                           for a in t["top_logprobs"]))
        for t in TOKENS
    )  # fmt: skip
    answer = Response(
        "r1",
        "fake",
        (
            TextPart("Hi!", logprobs=tokens),
            AudioPart(data=base64.b64encode(wav_bytes()).decode(), transcript="Hi!", id="au_1"),
        ),
        usage=Usage(3, 2),
    )
    gateway.fake.enqueue(answer)
    return answer


@pytest.mark.parametrize("stream", [False, True])
async def test_logprobs_and_audio_through_the_gateway(gateway: Gateway, stream: bool) -> None:
    _scripted(gateway)
    async with AsyncClient(gateway.url + "/v1", "sk", model="fake") as c:
        kwargs: dict[str, Any] = {"logprobs": True, "top_logprobs": 2, "audio": {"format": "wav"}}
        if stream:
            async with c.stream("hi", **kwargs) as s:
                result = await s.final()
        else:
            result = await c.chat("hi", **kwargs)
    seen = gateway.fake.requests[-1]
    assert (seen.logprobs, seen.top_logprobs, seen.output_audio) == (True, 2, {"format": "wav"})
    assert result.text == "Hi!"
    _check_tokens(result.logprobs)
    assert result.audio is not None and result.audio.data == wav_bytes()
    assert (result.audio.transcript, result.audio.id, result.audio.format) == ("Hi!", "au_1", "wav")
