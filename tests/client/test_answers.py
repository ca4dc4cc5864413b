"""Answers that are not answers (retry_on_empty), refusals apart from the text, reasoning
folded BaseAPI's way, and each call's timings: scripted server and live gateway."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from interlingua.client import (
    AsyncClient,
    ChatResult,
    Client,
    EmptyAnswerError,
    UnreadableAnswerError,
    fold_reasoning,
    is_empty_answer,
)
from interlingua.core import ReasoningPart, Response, StopReason, TextPart, ToolCallPart, Usage

from .conftest import FakeServer, Gateway, Reply, Seen, Stream, call, openai_body
from .test_client_gateway import DIALECTS, client_for


async def instant(_: float) -> None:
    """No waiting between retries."""


def client(server: FakeServer, **kwargs: Any) -> AsyncClient:
    c = AsyncClient(server.url + "/v1", model="m", **kwargs)
    c._sleep = instant
    return c


def garbage(seen: Seen) -> Any:
    """A 2xx body that is no chat answer."""
    return Reply({"unexpected": True})


def refusal_body(words: str) -> dict[str, Any]:
    body = openai_body(None)
    body["choices"][0]["message"]["refusal"] = words
    return body


# --- what counts as empty -----------------------------------------------------------


def test_what_is_an_empty_answer() -> None:
    def answer(*parts: Any, stop: StopReason = StopReason.END_TURN) -> Response:
        return Response("r", "m", parts, stop)

    assert is_empty_answer(answer())
    assert is_empty_answer(answer(TextPart("")))
    assert is_empty_answer(answer(ReasoningPart("all thinking"), stop=StopReason.MAX_TOKENS))
    assert not is_empty_answer(answer(TextPart("x")))
    assert not is_empty_answer(answer(ToolCallPart("c", "f", "{}"), stop=StopReason.TOOL_USE))
    assert not is_empty_answer(answer(TextPart("no", meta={"refusal": True})))
    assert not is_empty_answer(answer(stop=StopReason.REFUSAL))  # refused without words


def test_fold_reasoning_is_basapis_format() -> None:
    assert fold_reasoning("a\nb", "answer") == "<think>\na\nb\n</think>\n\nanswer"
    assert fold_reasoning("only thought", "") == "<think>\nonly thought\n</think>\n\n"
    assert fold_reasoning("", "answer") == "answer"


# --- retry_on_empty -----------------------------------------------------------------


async def test_empty_answers_are_retried_within_max_retries(server: FakeServer) -> None:
    server.push(
        Reply(openai_body("")),
        Reply(openai_body(None, reasoning="thinking, out of tokens", finish="length")),
        Reply(openai_body("at last")),
    )
    async with client(server, max_retries=2) as c:
        result = await c.chat("q", retry_on_empty=True)
        assert result.text == "at last"
        assert (c.retries, c.empty_retries, c.unreadable_retries) == (2, 2, 0)


async def test_persistent_empty_answers_raise_with_the_last_answer(server: FakeServer) -> None:
    server.push(*[Reply(openai_body(""), headers={"x-request-id": "req_e"})] * 3)
    async with client(server, max_retries=2) as c:
        with pytest.raises(EmptyAnswerError) as info:
            await c.chat("q", retry_on_empty=True)
    err = info.value
    assert (err.status, err.attempts, err.request_id, err.kind) == (
        200,
        3,
        "req_e",
        "empty_response",
    )
    assert isinstance(err.result, ChatResult) and err.result.text == ""
    assert "no text, no tool call and no refusal" in err.message
    assert len(server.seen) == 3


async def test_plain_chat_returns_an_empty_answer_as_it_is(server: FakeServer) -> None:
    server.push(Reply(openai_body("")))
    async with client(server) as c:
        assert (await c.chat("q")).text == ""
        assert c.retries == 0
    assert len(server.seen) == 1


async def test_answers_that_are_answers_are_not_retried(server: FakeServer) -> None:
    server.push(
        Reply(refusal_body("I can't help with that.")),
        Reply(openai_body(None, tool_calls=[call("c1", "f", "{}")])),
        Reply(openai_body(None, finish="content_filter")),
    )
    async with client(server, defaults={"retry_on_empty": True}) as c:
        refused = await c.chat("q")
        tool = await c.chat("q")
        filtered = await c.chat("q")
        assert c.retries == 0
    assert (refused.refusal, refused.text) == ("I can't help with that.", "")
    assert tool.tool_calls[0].name == "f" and tool.refusal is None
    assert (filtered.refusal, filtered.stop_reason) == ("", StopReason.REFUSAL)


async def test_an_unreadable_body_is_retried_once(server: FakeServer) -> None:
    server.push(garbage, garbage, garbage)
    async with client(server, max_retries=5) as c:
        with pytest.raises(UnreadableAnswerError) as info:
            await c.chat("q", retry_on_empty=True)
        assert (c.retries, c.unreadable_retries) == (1, 1)
    assert info.value.attempts == 2 and info.value.kind == "invalid_response"
    assert len(server.seen) == 2
    server.push(garbage)
    async with client(server, max_retries=5) as c:
        with pytest.raises(UnreadableAnswerError):
            await c.chat("q")  # not asked: raised at once
    assert len(server.seen) == 3


async def test_an_unreadable_body_then_an_answer(server: FakeServer) -> None:
    server.push(garbage, Reply(openai_body("fine")))
    async with client(server) as c:
        assert (await c.chat("q", retry_on_empty=True)).text == "fine"


async def test_send_raw_judges_the_answer_when_asked(server: FakeServer) -> None:
    server.push(Reply(openai_body("")), Reply(openai_body("ok")), Reply(refusal_body("no")))
    body = {"model": "m", "messages": [{"role": "user", "content": "q"}]}
    async with client(server) as c:
        reply = await c.send_raw(body, retry_on_empty=True)
        assert c.empty_retries == 1
        refused = await c.send_raw(body, retry_on_empty=True)
    # text where the dialect puts it: judged without the codec, the body decoded once
    assert reply.response is None and reply.json() == orjson.loads(reply.body)
    assert reply.json()["choices"][0]["message"]["content"] == "ok"
    # anything else is read by the codec to judge it, and the reading comes along
    assert refused.response is not None and refused.response.parts[0].meta["refusal"]


def test_the_sync_client_counts_the_same(server: FakeServer) -> None:
    server.push(Reply(openai_body("")), Reply(openai_body("ok")))
    with Client(server.url + "/v1", model="m") as c:
        c.async_client._sleep = instant
        assert c.chat("q", retry_on_empty=True).text == "ok"
        assert (c.retries, c.empty_retries, c.unreadable_retries) == (1, 1, 0)


# --- think tags in streams ------------------------------------------------------------


def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    payload = {
        "id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }  # fmt: skip
    return b"data: " + orjson.dumps(payload) + b"\n\n"


async def test_a_streams_folded_text_equals_the_results(server: FakeServer) -> None:
    chunks = [
        chunk({"role": "assistant", "reasoning_content": "let me "}),
        chunk({"reasoning_content": "see"}),
        chunk({"content": "It is "}),
        chunk({"content": "4."}),
        chunk({}, "stop"),
        b"data: [DONE]\n\n",
    ]
    server.push(Stream(chunks, delay=0.05))
    async with client(server) as c, c.stream("q", think_tags=True) as stream:
        pieces = [p async for p in stream.text_stream()]
    assert "".join(pieces) == "<think>\nlet me see\n</think>\n\nIt is 4."
    assert stream.result is not None and stream.result.text == "".join(pieces)


async def test_a_streamed_refusal_stays_out_of_the_text(server: FakeServer) -> None:
    chunks = [
        chunk({"role": "assistant", "refusal": "I can't "}),
        chunk({"refusal": "do that."}),
        chunk({}, "stop"),
        b"data: [DONE]\n\n",
    ]
    server.push(Stream(chunks))
    async with client(server) as c, c.stream("q") as stream:
        pieces = [p async for p in stream.text_stream()]
    assert pieces == []
    assert stream.result is not None and stream.result.refusal == "I can't do that."


# --- timings --------------------------------------------------------------------------


async def test_timings_of_a_plain_call_and_a_stream(server: FakeServer) -> None:
    server.push(Reply(openai_body("slow"), delay=0.2))
    chunks = [chunk({"role": "assistant", "content": "a"}), chunk({"content": "b"})]
    server.push(Stream([*chunks, chunk({}, "stop"), b"data: [DONE]\n\n"], delay=0.15))
    async with client(server) as c:
        plain = await c.chat("q")
        async with c.stream("q") as stream:
            streamed = await stream.final()
    assert plain.ttft is not None and plain.latency is not None
    assert 0.2 <= plain.ttft <= plain.latency < 5
    assert streamed.ttft is not None and streamed.latency is not None
    # the first token came with the first chunk; the rest took three more pauses
    assert streamed.ttft < 0.15 and streamed.latency >= 0.3
    assert isinstance(streamed.ttft, float) and isinstance(plain.latency, float)


# --- the live gateway ---------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_through_the_gateway(gateway: Gateway, dialect: str) -> None:
    fake = gateway.fake
    fake.enqueue(Response("r1", "fake", (), usage=Usage(3, 0)))
    fake.enqueue(Response("r2", "fake", (ReasoningPart("2 + 2"), TextPart("4")), usage=Usage(3, 2)))
    fake.enqueue(Response("r3", "fake", (TextPart("partial"),), StopReason.REFUSAL))
    async with client_for(gateway, dialect, max_retries=2) as c:
        c._sleep = instant
        folded = await c.chat("q", retry_on_empty=True, think_tags=True)
        assert c.empty_retries == 1
        refused = await c.chat("q")
        async with c.stream("stream me") as stream:
            streamed = await stream.final()
    assert folded.text == "<think>\n2 + 2\n</think>\n\n4" and folded.reasoning == "2 + 2"
    assert refused.refusal == "" and refused.stop_reason is StopReason.REFUSAL
    for result in (folded, refused, streamed):
        assert result.ttft is not None and result.latency is not None
        assert 0 < result.ttft <= result.latency
    assert streamed.text == "echo: stream me"
