"""An HTTP upstream over its engine seam (``http_pool/engines.py``): a fake engine (no
sockets) answering, and each of the engines' ``TransportError`` tree mapped onto one
gateway error (the engines themselves: tests/http_pool/test_engines.py)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping

import orjson
import pytest

from interlingua.config import TimeoutConfig
from interlingua.core import StreamError, TextDelta
from interlingua.errors import UpstreamConnectionError, UpstreamTimeoutError
from interlingua.http_pool import (
    ConnectFailed,
    ConnectionLost,
    ConnectTimeout,
    DeadlineExceeded,
    ReadTimeout,
    TransportError,
)
from interlingua.http_pool.engines import LeanTransport, Transports
from interlingua.upstreams.anthropic import AnthropicUpstream
from interlingua.upstreams.openai_compatible import OpenAICompatibleUpstream

from .test_openai_compatible import COMPLETION, REQUEST, STREAM


class FakeAnswer:
    """An answer scripted as chunks, optionally failing after them."""

    def __init__(
        self,
        chunks: list[bytes],
        *,
        status: int = 200,
        headers: Mapping[str, str] | None = None,
        error: TransportError | None = None,
    ) -> None:
        self.status = status
        self.headers = dict(headers or {"content-type": "application/json"})
        self.chunks = chunks
        self.error = error
        self.released = False

    async def read(self) -> bytes:
        if self.error is not None:
            raise self.error
        return b"".join(self.chunks)

    async def iter_any(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            yield chunk
        if self.error is not None:
            raise self.error

    def release(self) -> None:
        self.released = True


class FakeEngine:
    """Records every post; answers with ``answer`` or raises ``error``."""

    def __init__(
        self, answer: FakeAnswer | None = None, error: TransportError | None = None
    ) -> None:
        self.answer = answer
        self.error = error
        self.posts: list[tuple[str, bytes, dict[str, str], dict[str, str] | None]] = []
        self.closed = False

    async def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        timeout: TimeoutConfig,
        extra: Mapping[str, str] | None = None,
    ) -> FakeAnswer:
        self.posts.append((url, body, dict(headers), dict(extra) if extra else None))
        if self.error is not None:
            raise self.error
        assert self.answer is not None
        return self.answer

    async def aclose(self) -> None:
        self.closed = True


def openai(fake: FakeEngine) -> OpenAICompatibleUpstream:
    engines = Transports(http=fake, https=FakeEngine())
    return OpenAICompatibleUpstream(
        "vllm", "http://up.test/v1", api_key="k", timeout=TimeoutConfig(2, 7), transports=engines
    )


# --- an HTTP upstream over a fake engine ----------------------------------------------


async def test_complete_posts_through_the_injected_transport() -> None:
    fake = FakeEngine(FakeAnswer([orjson.dumps(COMPLETION)]))
    up = openai(fake)
    assert (await up.complete(REQUEST)).text == "Hello there"
    [(url, body, headers, extra)] = fake.posts
    assert url == "http://up.test/v1/chat/completions" and extra is None
    assert headers["authorization"] == "Bearer k"
    assert orjson.loads(body)["model"] == "qwen"
    assert fake.answer is not None and fake.answer.released
    await up.aclose()
    assert not fake.closed  # shared engines are the app's to close


async def test_stream_decodes_the_transports_chunks_and_releases_the_answer() -> None:
    answer = FakeAnswer(STREAM, headers={"content-type": "text/event-stream"})
    up = openai(FakeEngine(answer))
    events = [event async for event in up.stream(REQUEST)]
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Hel", "lo"]
    assert answer.released


async def test_a_transport_error_mid_stream_is_one_stream_error() -> None:
    answer = FakeAnswer(
        STREAM[:3],
        headers={"content-type": "text/event-stream"},
        error=DeadlineExceeded("the answer did not end"),
    )
    events = [event async for event in openai(FakeEngine(answer)).stream(REQUEST)]
    assert isinstance(events[-1], StreamError)
    assert isinstance(events[-1].error, UpstreamTimeoutError)
    assert "did not finish its answer" in events[-1].error.message
    assert answer.released


async def test_a_relayed_stream_cut_short_raises_after_its_whole_events() -> None:
    lost = ConnectionLost("the upstream closed the connection mid-answer")
    answer = FakeAnswer(
        [STREAM[0], STREAM[1][:10]], headers={"content-type": "text/event-stream"}, error=lost
    )
    raw = await openai(FakeEngine(answer)).passthrough(b"{}", True, {})
    assert raw.chunks is not None
    got = []
    with pytest.raises(UpstreamConnectionError) as raised:
        async for data in raw.chunks:
            got.append(data)
    # the upstream named once, as the transport's own message names it
    assert raised.value.message == (
        "connection to upstream 'vllm' at http://up.test/v1 failed: "
        "the upstream closed the connection mid-answer"
    )
    assert b"".join(got) == STREAM[0]
    await raw.aclose()
    assert answer.released


async def test_forwarded_client_headers_go_as_extra() -> None:
    fake = FakeEngine(FakeAnswer([b'{"type":"message"}'], status=400))
    engines = Transports(http=fake, https=fake)
    up = AnthropicUpstream("claude", "http://up.test", api_key="k", transports=engines)
    await up.passthrough(b"{}", False, {"Anthropic-Beta": "b1", "Authorization": "theirs"})
    [(_, _, headers, extra)] = fake.posts
    assert extra == {"anthropic-beta": "b1"}  # never the client's credentials
    assert headers["x-api-key"] == "k"


@pytest.mark.parametrize(
    ("error", "kind", "text"),
    [
        (ConnectFailed(ConnectionRefusedError(111, "refused")), UpstreamConnectionError,
         "cannot reach upstream 'vllm' at http://up.test/v1: connection refused"),
        (ConnectTimeout("x"), UpstreamTimeoutError, "timed out connecting (after 2s)"),
        (ReadTimeout("x"), UpstreamTimeoutError, "no data for 7s"),
        (DeadlineExceeded("x"), UpstreamTimeoutError, "did not finish its answer within 3600.0s"),
        (ConnectionLost("reset"), UpstreamConnectionError, "failed: reset"),
    ],
)  # fmt: skip
async def test_each_transport_error_maps_to_one_gateway_error(
    error: TransportError, kind: type[Exception], text: str
) -> None:
    with pytest.raises(kind, match=re.escape(text)):
        await openai(FakeEngine(error=error)).complete(REQUEST)


async def test_an_upstream_without_transports_makes_and_closes_its_own() -> None:
    up = OpenAICompatibleUpstream("u", "http://up.test/v1")
    assert type(up._transport) is LeanTransport
    fake = up._transports.http = up._transports.https = FakeEngine()
    await up.aclose()
    assert fake.closed


async def test_a_header_that_cannot_be_sent_is_a_connection_error() -> None:
    up = OpenAICompatibleUpstream("u", "http://h/v1", headers={"x-bad": "a\r\nhost: evil"})
    with pytest.raises(
        UpstreamConnectionError, match=re.escape("cannot reach upstream 'u' at http://h/v1")
    ):
        await up.complete(REQUEST)


def test_upstream_maps_pool_errors() -> None:
    up = OpenAICompatibleUpstream("vllm", "http://127.0.0.1:9/v1", timeout=TimeoutConfig(3, 7))
    refused = up.transport_error(ConnectFailed(ConnectionRefusedError(111, "refused")))
    assert isinstance(refused, UpstreamConnectionError)
    assert refused.message == (
        "cannot reach upstream 'vllm' at http://127.0.0.1:9/v1: connection refused"
    )
    slow = up.transport_error(ConnectTimeout("x"))
    assert (
        isinstance(slow, UpstreamTimeoutError) and "timed out connecting (after 3s)" in slow.message
    )
    silent = up.transport_error(ReadTimeout("x"))
    assert isinstance(silent, UpstreamTimeoutError) and "no data for 7s" in silent.message
    lost = up.transport_error(ConnectionLost("the upstream closed the connection mid-answer"))
    assert isinstance(lost, UpstreamConnectionError) and "mid-answer" in lost.message
