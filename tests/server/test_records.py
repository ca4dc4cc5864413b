"""Each generation's record, which the usage log, metrics and limits read: the exact token
counts the upstream reported, on the passthrough path (read from the relayed bytes) and the
translated one, stream and not; where it went; how it ended.

    openai / anthropic SDK, httpx -> live gateway -> mock Chat, Messages, Responses upstreams
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from interlingua.config import parse_config
from interlingua.server import create_app
from interlingua.usage.record import Record

from ..live_server import live_server
from .mock_upstream import USAGE as CHAT_USAGE
from .mock_upstream import (
    MockOpenAI,
    _start_sse,
    completion,
    drop_after,
    mock_openai,
    status,
    stream_events,
)
from .responses.mock_responses import USAGE as RESPONSES_USAGE
from .responses.mock_responses import mock_responses
from .test_keys import Rows
from .test_shaping import anthropic_answer

HELLO: Any = [{"role": "user", "content": "hello"}]


class Stack:
    def __init__(self, url: str, chat: MockOpenAI, rows: Rows) -> None:
        self.url, self.chat, self.rows = url, chat, rows

    def last(self, model: str, timeout: float = 5.0) -> Record:
        """The newest record of ``model`` (a stream's lands when it has closed)."""
        deadline = time.monotonic() + timeout
        while True:
            rows = [r for r in self.rows.rows if r.model == model]
            if rows:
                return rows[-1]
            if time.monotonic() > deadline:
                raise AssertionError(f"no record of {model}")
            time.sleep(0.01)


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with (
        mock_openai() as chat,
        mock_openai("/v1/messages", default=anthropic_answer) as messages,
        mock_responses() as responses,
    ):
        config = parse_config(
            {
                "upstreams": {
                    "chat": {"kind": "openai", "base_url": chat.base_url},
                    "anth": {"kind": "anthropic", "base_url": messages.base_url},
                    "resp": {"kind": "responses", "base_url": responses.base_url},
                },
                "models": [
                    {"name": "gpt-x", "upstream": "chat", "model": "up-gpt"},
                    {"name": "claude-x", "upstream": "anth", "model": "up-claude"},
                    {"name": "resp-x", "upstream": "resp", "model": "up-resp"},
                ],
            }
        )
        rows = Rows()
        with live_server(create_app(config, record_sinks=[rows])) as url:
            yield Stack(url, chat, rows)


@pytest.fixture(autouse=True)
def fresh(stack: Stack) -> None:
    stack.rows.rows.clear()


def gpt(stack: Stack) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.url + "/v1", api_key="x", max_retries=0)


def claude(stack: Stack) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stack.url, api_key="x", max_retries=0)


def ask_messages(stack: Stack, model: str, stream: bool) -> None:
    """One Messages request for ``model`` through the gateway, its answer read whole."""
    with claude(stack) as client:
        if stream:
            with client.messages.stream(model=model, max_tokens=8, messages=HELLO) as events:
                list(events)
        else:
            client.messages.create(model=model, max_tokens=8, messages=HELLO)


def tokens(row: Record) -> tuple[int, int, int, int]:
    return row.input_tokens, row.output_tokens, row.cached_tokens, row.reasoning_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_chat_passthrough_counts_what_the_upstream_reported(stack: Stack, stream: bool) -> None:
    with gpt(stack) as client:
        if stream:
            chunks = list(
                client.chat.completions.create(model="gpt-x", messages=HELLO, stream=True)
            )
            # the client did not ask for usage: the chunk the gateway asked for is cut
            assert all(chunk.usage is None and chunk.choices for chunk in chunks)
        else:
            client.chat.completions.create(model="gpt-x", messages=HELLO)
    row = stack.last("gpt-x")
    assert stack.chat.received[-1].body.get("stream_options") == (
        {"include_usage": True} if stream else None
    )
    assert tokens(row) == (CHAT_USAGE["prompt_tokens"], CHAT_USAGE["completion_tokens"], 0, 0)
    assert (row.upstream, row.upstream_model, row.dialect) == ("chat", "up-gpt", "openai")
    assert (row.status, row.error, row.stream, row.key) == (200, None, stream, None)
    assert row.latency > 0 and (row.ttft is not None) == stream
    assert row.ttft is None or row.ttft <= row.latency


def test_a_chat_client_that_asked_for_usage_still_gets_it(stack: Stack) -> None:
    with gpt(stack) as client:
        chunks = list(
            client.chat.completions.create(
                model="gpt-x", messages=HELLO, stream=True, stream_options={"include_usage": True}
            )
        )
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 59
    assert tokens(stack.last("gpt-x"))[:2] == (42, 17)


@pytest.mark.parametrize("stream", [False, True])
def test_messages_passthrough_and_translated(stack: Stack, stream: bool) -> None:
    ask_messages(stack, "claude-x", stream)
    assert tokens(stack.last("claude-x")) == (5, 1, 0, 0)  # the mock's Usage(5, 1)
    stack.rows.rows.clear()
    with gpt(stack) as client:  # Chat client -> Messages upstream: translated
        if stream:
            list(client.chat.completions.create(model="claude-x", messages=HELLO, stream=True))
        else:
            client.chat.completions.create(model="claude-x", messages=HELLO)
    row = stack.last("claude-x")
    assert tokens(row) == (5, 1, 0, 0) and row.dialect == "openai" and row.upstream == "anth"


@pytest.mark.parametrize("stream", [False, True])
def test_a_translated_answer_keeps_the_upstreams_counts(stack: Stack, stream: bool) -> None:
    # Messages client -> Chat upstream: a Messages usage has no reasoning count, so only
    # the upstream's own counts (the gateway's, as it renders the answer) can say 3.
    usage = {
        "prompt_tokens": 40,
        "completion_tokens": 9,
        "prompt_tokens_details": {"cached_tokens": 30},
        "completion_tokens_details": {"reasoning_tokens": 3},
    }
    if stream:
        chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1}
        chunk |= {"model": "up-gpt", "choices": [], "usage": usage}
        events = stream_events("up-gpt", include_usage=False)[:-1]
        events += [b"data: " + orjson.dumps(chunk) + b"\n\n", b"data: [DONE]\n\n"]

        async def behaviour(mock: Any, request: Any, body: dict[str, Any]) -> Any:
            resp = await _start_sse(request)
            for event in events:
                await resp.write(event)
            await resp.write_eof()
            return resp

        stack.chat.enqueue(behaviour)
    else:
        stack.chat.enqueue(status(200, {**completion("up-gpt"), "usage": usage}))
    ask_messages(stack, "gpt-x", stream)
    row = stack.last("gpt-x")
    assert tokens(row) == (40, 9, 30, 3) and row.dialect == "anthropic"


@pytest.mark.parametrize("stream", [False, True])
def test_responses_counts_cached_and_reasoning_tokens(stack: Stack, stream: bool) -> None:
    with gpt(stack) as client:
        if stream:
            with client.responses.stream(model="resp-x", input="hi") as events:
                list(events)
        else:
            client.responses.create(model="resp-x", input="hi")
    expected = (
        RESPONSES_USAGE["input_tokens"],
        RESPONSES_USAGE["output_tokens"],
        RESPONSES_USAGE["input_tokens_details"]["cached_tokens"],
        RESPONSES_USAGE["output_tokens_details"]["reasoning_tokens"],
    )
    row = stack.last("resp-x")
    assert tokens(row) == expected and row.dialect == "responses"


def test_an_upstream_error_is_recorded_with_its_kind(stack: Stack) -> None:
    stack.chat.enqueue(status(503, {"error": {"message": "busy", "type": "server_error"}}))
    with gpt(stack) as client, pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="gpt-x", messages=HELLO)
    row = stack.last("gpt-x")
    assert (row.status, row.error, row.upstream) == (503, "overloaded", "chat")


def stream_gpt_x(stack: Stack) -> tuple[int, bytes]:
    """A Chat stream of model gpt-x through the gateway: its status and bytes."""
    with httpx.stream(
        "POST",
        stack.url + "/v1/chat/completions",
        json={"model": "gpt-x", "messages": HELLO, "stream": True},
    ) as answer:
        return answer.status_code, b"".join(answer.iter_bytes())


def test_a_stream_cut_mid_way_is_recorded_failed(stack: Stack) -> None:
    stack.chat.enqueue(drop_after(stream_events("up-gpt", include_usage=False)[:2]))
    status, body = stream_gpt_x(stack)
    assert status == 200 and b'"error"' in body
    row = stack.last("gpt-x")
    assert row.status == 200 and row.error is not None and row.stream


def test_an_error_event_the_upstream_streams_is_recorded_with_its_kind(stack: Stack) -> None:
    # The upstream's own in-band error (Chat: a data line with "error"), its event split
    # over two writes, then the end of the stream: found among the stream's last events.
    error = b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'

    async def behaviour(mock: Any, request: Any, body: dict[str, Any]) -> Any:
        resp = await _start_sse(request)
        for event in stream_events("up-gpt", include_usage=False)[:3]:
            await resp.write(event)
        await resp.write(error[:20])
        await asyncio.sleep(0.005)
        await resp.write(error[20:])
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    stack.chat.enqueue(behaviour)
    status, body = stream_gpt_x(stack)
    assert status == 200 and b"overloaded" in body
    row = stack.last("gpt-x")
    assert row.status == 200 and row.error == "upstream_error" and row.stream


def stream_messages_gpt_x(stack: Stack) -> tuple[int, bytes]:
    """A Messages stream of model gpt-x (a Chat upstream: translated): status, bytes."""
    with httpx.stream(
        "POST",
        stack.url + "/v1/messages",
        json={"model": "gpt-x", "max_tokens": 8, "messages": HELLO, "stream": True},
    ) as answer:
        return answer.status_code, b"".join(answer.iter_bytes())


def test_a_translated_stream_records_its_usage_time_and_errors(stack: Stack) -> None:
    # A translated stream counts itself as the gateway encodes it (StreamResponse.counted):
    # its usage, its first byte's time and an in-band error, without reading the bytes.
    status, body = stream_messages_gpt_x(stack)
    row = stack.last("gpt-x")
    assert status == 200 and b"message_stop" in body
    assert (row.status, row.error, row.stream, row.dialect) == (200, None, True, "anthropic")
    assert row.input_tokens > 0 and row.output_tokens > 0
    assert row.ttft is not None and 0 < row.ttft <= row.latency

    error = b'data: {"error": {"message": "overloaded", "type": "server_error"}}\n\n'

    async def behaviour(mock: Any, request: Any, body: dict[str, Any]) -> Any:
        resp = await _start_sse(request)
        for event in stream_events("up-gpt", include_usage=False)[:3]:
            await resp.write(event)
        await resp.write(error)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    stack.rows.rows.clear()
    stack.chat.enqueue(behaviour)
    status, body = stream_messages_gpt_x(stack)
    assert status == 200 and b"event: error" in body
    row = stack.last("gpt-x")
    assert row.status == 200 and row.error == "upstream_error" and row.stream

    stack.rows.rows.clear()
    stack.chat.enqueue(drop_after(stream_events("up-gpt", include_usage=False)[:2]))
    status, body = stream_messages_gpt_x(stack)
    assert status == 200 and b"event: error" in body
    row = stack.last("gpt-x")
    assert row.status == 200 and row.error is not None and row.stream


def test_a_refused_request_is_recorded(stack: Stack) -> None:
    answer = httpx.post(stack.url + "/v1/chat/completions", content=b"{not json")
    assert answer.status_code == 400
    rows = stack.rows.matching(lambda r: r.status == 400)
    assert rows and rows[-1].error == "invalid_request" and rows[-1].upstream is None


def test_unknown_model_is_recorded_with_the_name_asked(stack: Stack) -> None:
    answer = httpx.post(
        stack.url + "/v1/chat/completions", json={"model": "nope", "messages": HELLO}
    )
    assert answer.status_code == 404
    row = stack.last("nope")
    assert row.error == "not_found" and row.upstream is None
    assert orjson.loads(answer.content)["error"]["message"]
