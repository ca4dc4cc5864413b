"""The transport seam: ``AsyncClient(transport=...)`` answered from memory, no sockets.

The fake below implements :class:`interlingua.client._transport.Transport` the way a test
of code built on the client would: scripted answers, the bodies it was sent, and the
client's own status mapping (:func:`status_error`) for non-2xx answers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest

from interlingua.client import (
    APIConnectionError,
    AsyncClient,
    ChatResult,
    Client,
    InputError,
    RateLimitError,
)
from interlingua.client._transport import Answer, Transport, status_error
from interlingua.core import TextDelta
from interlingua.dialects import get_dialect

from .conftest import error_body, openai_body, openai_chunks

URL = "http://fake.test/v1/chat/completions"


class Broken(ConnectionResetError):
    """The fake's "connection dropped" (listed in ``FakeTransport.errors``)."""


@dataclass
class Say:
    """One scripted answer: JSON ``body``, or SSE chunks (a list) cut short if ``cut``."""

    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)
    cut: bool = False


class FakeAnswer:
    """A 2xx answer whose body arrives as ``chunks``; ``Broken`` ends it if ``cut``."""

    def __init__(self, chunks: list[bytes], headers: Mapping[str, str], cut: bool) -> None:
        self.headers = headers
        self.finished = False
        self._chunks = deque(chunks)
        self._cut = cut

    @property
    def readany(self) -> Callable[[], Awaitable[bytes]]:
        return self._next

    async def _next(self) -> bytes:
        if self._chunks:
            return self._chunks.popleft()
        if self._cut:
            raise Broken("peer reset")
        return b""

    def finish(self) -> None:
        self.finished = True


class FakeTransport:
    """Answers from ``script``: :class:`Say` actions, or exceptions to fail with."""

    url = URL
    base_url = "http://fake.test/v1"
    errors = (Broken,)

    def __init__(self, *script: Any) -> None:
        self.script = deque(script)
        self.bodies: list[Any] = []
        self.answers: list[FakeAnswer] = []
        self.closed = False
        self._codec = get_dialect("openai")

    async def open(self, body: bytes) -> Answer:
        self.bodies.append(orjson.loads(body))
        action = self.script.popleft()
        if isinstance(action, BaseException):
            raise self.transport_error(action)
        headers = {"x-request-id": f"req_{len(self.bodies)}", **action.headers}
        if action.status >= 300:
            data = orjson.dumps(action.body)
            raise status_error(self._codec, self.url, action.status, data, headers)
        body = action.body
        chunks = body if isinstance(body, list) else [orjson.dumps(body)]
        self.answers.append(FakeAnswer(chunks, headers, action.cut))
        return self.answers[-1]

    async def post(self, body: bytes) -> tuple[bytes, dict[str, str]]:
        answer = await self.open(body)
        data = b"".join([chunk async for chunk in _drain(answer)])
        answer.finish()
        return data, dict(answer.headers)

    async def get(self, url: str) -> bytes:
        raise InputError(f"cannot fetch image {url}: the fake has no network")

    def transport_error(self, exc: BaseException) -> APIConnectionError:
        return APIConnectionError(f"connection to {self.base_url} failed: {exc}")

    async def aclose(self) -> None:
        self.closed = True


async def _drain(answer: Answer) -> Any:
    while chunk := await answer.readany():
        yield chunk


def fake_client(transport: Transport, slept: list[float] | None = None, **kw: Any) -> AsyncClient:
    """A client over ``transport`` whose retry sleeps are recorded in ``slept``, not slept."""
    client = AsyncClient(model="m", transport=transport, **kw)

    async def sleep(seconds: float) -> None:
        if slept is not None:
            slept.append(seconds)

    client._sleep = sleep
    return client


def test_the_fake_is_a_transport() -> None:
    transport: Transport = FakeTransport()  # mypy checks the protocol here
    client = AsyncClient(transport=transport)
    assert (client.url, client.base_url) == (URL, "http://fake.test/v1")


async def test_a_429_is_retried_after_its_retry_after_then_succeeds() -> None:
    transport = FakeTransport(
        Say(429, error_body("slow down", "rate_limit_error"), {"retry-after": "2"}),
        Say(200, openai_body("done")),
    )
    slept: list[float] = []
    client = fake_client(transport, slept)
    result = await client.chat("hello")
    assert result.text == "done"
    assert slept == [2.0]
    assert result.request_id == "req_2"
    assert client.retries == 1
    assert len(transport.bodies) == 2
    assert transport.bodies[0] == transport.bodies[1]  # rendered once, sent twice
    assert transport.bodies[0]["messages"] == [{"role": "user", "content": "hello"}]


async def test_a_429_past_max_retries_is_the_typed_error() -> None:
    transport = FakeTransport(Say(429, error_body("slow down", "rate_limit_error")))
    with pytest.raises(RateLimitError) as info:
        await fake_client(transport, max_retries=0).chat("hello")
    assert info.value.status == 429
    assert info.value.request_id == "req_1"
    assert "slow down" in info.value.message


async def test_a_stream_split_anywhere_decodes_and_finishes_its_answer() -> None:
    wire = b"".join(openai_chunks(["Hel", "lo", " wörld"]))
    chunks = [wire[i : i + 7] for i in range(0, len(wire), 7)]  # splits events and UTF-8
    transport = FakeTransport(Say(200, chunks))
    async with fake_client(transport).stream("hi") as stream:
        texts = [e.text async for e in stream if isinstance(e, TextDelta)]
    assert "".join(texts) == "Hello wörld"
    assert isinstance(stream.result, ChatResult)
    assert stream.result.text == "Hello wörld"
    assert stream.request_id == "req_1"
    assert transport.bodies[0]["stream"] is True
    assert transport.answers[0].finished


async def test_a_dropped_connection_before_the_stream_opens_is_retried() -> None:
    transport = FakeTransport(Broken("refused"), Say(200, openai_chunks(["ok"])))
    slept: list[float] = []
    client = fake_client(transport, slept)
    async with client.stream("hi") as stream:
        result = await stream.final()
    assert result.text == "ok"
    assert client.retries == 1
    assert len(slept) == 1


async def test_a_transport_error_mid_stream_is_mapped_and_not_retried() -> None:
    transport = FakeTransport(Say(200, openai_chunks(["a", "b"])[:3], cut=True))
    client = fake_client(transport)
    seen = []
    with pytest.raises(APIConnectionError) as info:
        async with client.stream("hi") as stream:
            async for event in stream:
                seen.append(event)
    message = info.value.message
    assert message.startswith("connection to http://fake.test/v1 failed: peer reset")
    assert f"interrupted after {len(seen)} events" in message
    assert [e.text for e in seen if isinstance(e, TextDelta)] == ["a", "b"]
    assert "not retried" in message
    assert info.value.request_id == "req_1"
    assert client.retries == 0
    assert transport.answers[0].finished


async def test_an_injected_transport_is_left_open_and_excludes_a_session() -> None:
    transport = FakeTransport()
    async with AsyncClient(transport=transport):
        pass
    assert not transport.closed  # its owner closes it, like an injected session
    with pytest.raises(ValueError, match="transport= or session="):
        AsyncClient(transport=transport, session=object())  # type: ignore[arg-type]


def test_the_sync_client_takes_a_transport_too() -> None:
    transport = FakeTransport(Say(200, openai_body("sync")))
    with Client(model="m", transport=transport) as client:
        assert client.chat("hi").text == "sync"
    assert len(transport.bodies) == 1


# --- the Responses dialect: the same client over /v1/responses ------------------------

RESPONSES_STREAM = (
    Path(__file__).parent.parent / "fixtures" / "openai_responses_tools.sse"
).read_bytes()


def _completed() -> dict[str, Any]:
    """The final ``response`` object of the recorded stream (its last event)."""
    last = RESPONSES_STREAM.strip().rsplit(b"\n\n", 1)[-1]
    payload: dict[str, Any] = orjson.loads(last.split(b"data: ", 1)[1])
    return payload["response"]  # type: ignore[no-any-return]


async def test_a_responses_client_reads_answers_and_streams_alike() -> None:
    body = _completed()
    split = [RESPONSES_STREAM[i : i + 97] for i in range(0, len(RESPONSES_STREAM), 97)]
    transport = FakeTransport(Say(200, body), Say(200, split))
    client = AsyncClient(model="m", transport=transport, dialect="responses")
    whole = await client.chat("Weather in Paris and Rome?", max_tokens=50)
    async with client.stream("Weather in Paris and Rome?", max_tokens=50) as stream:
        streamed = await stream.final()
    for result in (whole, streamed):
        assert [call.name for call in result.tool_calls] == ["get_weather", "get_weather"]
        assert result.usage.input_tokens == body["usage"]["input_tokens"]
        assert result.usage.output_tokens == body["usage"]["output_tokens"]
    assert streamed.text == whole.text and streamed.reasoning == whole.reasoning
    sent = transport.bodies[0]
    assert sent["input"][0]["role"] == "user" and sent["max_output_tokens"] == 50
    assert "messages" not in sent and transport.bodies[1]["stream"] is True


def test_a_responses_client_defaults_to_the_local_gateway() -> None:
    client = AsyncClient(dialect="responses")
    assert client.url == "http://127.0.0.1:8400/v1/responses"
