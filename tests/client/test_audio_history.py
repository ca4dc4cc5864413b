"""An earlier spoken answer in history: OpenAI's ``{"role": "assistant", "audio": {"id"}}``
is quoted by its id on the Chat API; toward an API that cannot refer to OpenAI's stored
audio it is sent as its transcript, or refused when there is none."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest

from interlingua.client import AsyncClient, InputError
from interlingua.core import AudioPart, Message
from interlingua.errors import InvalidRequestError

from .conftest import FakeServer, Reply, anthropic_body, openai_body

SPOKEN = {"id": "audio_1", "data": "AAAA", "expires_at": 1_700_000_000, "transcript": "Hello!"}


@pytest.fixture
async def client(server: FakeServer) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(server.url + "/v1", "sk-test", model="m") as c:
        yield c


def history(assistant: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "say hello"},
        {"role": "assistant", **assistant},
        {"role": "user", "content": "again, slower"},
    ]


async def test_an_audio_reference_is_sent_as_such(client: AsyncClient, server: FakeServer) -> None:
    await client.chat(history({"audio": {"id": "audio_1"}}))
    await client.chat(history({"audio": SPOKEN}))  # the SDK's whole message.audio
    await client.chat(history({"content": "Here:", "audio": {"id": "audio_1"}}))
    sent = [body["messages"][1] for body in server.bodies]
    assert sent == [
        {"role": "assistant", "content": None, "audio": {"id": "audio_1"}},
        {"role": "assistant", "content": None, "audio": {"id": "audio_1"}},
        {"role": "assistant", "content": "Here:", "audio": {"id": "audio_1"}},
    ]


async def test_the_reference_is_an_audio_part(client: AsyncClient) -> None:
    request = await client.prepare(history({"audio": SPOKEN}))
    assert request.messages[1] == Message(
        "assistant", (AudioPart(transcript="Hello!", id="audio_1", expires_at=1_700_000_000),)
    )


async def test_a_spoken_answer_goes_back_by_its_id(client: AsyncClient, server: FakeServer) -> None:
    body = openai_body(None)
    body["choices"][0]["message"]["audio"] = {**SPOKEN, "data": base64.b64encode(b"x").decode()}
    server.push(Reply(body))
    first = await client.chat("say hello", modalities=["text", "audio"])
    turn = Message("assistant", first.response.parts)
    await client.chat(
        [{"role": "user", "content": "say hello"}, turn, {"role": "user", "content": "again"}]
    )
    assert server.bodies[1]["messages"][1] == {
        "role": "assistant",
        "content": None,
        "audio": {"id": "audio_1"},
    }


@pytest.mark.parametrize("bad", [{"audio": "audio_1"}, {"audio": {"transcript": "Hi"}}])
async def test_a_malformed_audio_reference_names_the_message(
    client: AsyncClient, bad: dict[str, Any]
) -> None:
    with pytest.raises(InputError, match=r"messages\[1\]\.audio: .*'id'"):
        await client.prepare(history(bad))


@pytest.mark.parametrize("dialect", ["anthropic", "responses"])
async def test_elsewhere_the_transcript_is_sent(server: FakeServer, dialect: str) -> None:
    base = server.url if dialect == "anthropic" else server.url + "/v1"
    async with AsyncClient(base, "k", dialect=dialect, model="m") as c:
        body = c.render(await c.prepare(history({"audio": SPOKEN})))
    if dialect == "anthropic":
        assert body["messages"][1] == {"role": "assistant", "content": "Hello!"}
    else:
        assert body["input"][1] == {"type": "message", "role": "assistant", "content": "Hello!"}


@pytest.mark.parametrize("dialect", ["anthropic", "responses"])
async def test_elsewhere_a_bare_reference_is_refused(server: FakeServer, dialect: str) -> None:
    server.push(Reply(anthropic_body()))
    base = server.url if dialect == "anthropic" else server.url + "/v1"
    async with AsyncClient(base, "k", dialect=dialect, model="m") as c:
        with pytest.raises(InvalidRequestError, match=r"messages\[1\].*'audio_1'.*transcript") as e:
            await c.chat(history({"audio": {"id": "audio_1"}}))
    assert e.value.param is not None and e.value.param.startswith("messages[1]")
    assert not server.seen
