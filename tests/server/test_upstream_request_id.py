"""The upstream's request id reaches the client as ``upstream-request-id``, and the
gateway's own ends every error message it writes; read with the official SDKs over real
sockets.

    openai / anthropic SDK -> live gateway -> mock Chat upstream (answers x-request-id)
                                           -> mock Messages upstream (answers request-id)

Each SDK reaches both upstreams: one in its own dialect (passthrough), the other
translated; answers whole and streamed, and error answers. The id is what a user quotes
to the provider, so it must survive every path; it is renamed so that it is never taken
for the gateway's own ``x-request-id`` / ``request-id``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import orjson
import pytest
from aiohttp import web

from interlingua.config import parse_config
from interlingua.core import Response, TextPart, Usage, unfold
from interlingua.dialects import get_dialect
from interlingua.errors import InvalidRequestError, UpstreamError
from interlingua.limits.queue import QueueRefused
from interlingua.server import create_app

from ..live_server import live_server
from .mock_upstream import Behaviour, MockOpenAI, drop_after, mock_openai, status, stream_events

CHAT_ID, MESSAGES_ID = "req_chat_up_1", "req_msg_up_1"
HELLO: Any = [{"role": "user", "content": "hello"}]
CHAT_ERROR = {"error": {"message": "bad", "type": "invalid_request_error", "param": None}}
MESSAGES_ERROR = {"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}


def answering(dialect: str, header: str, value: str) -> Behaviour:
    """Answer "hi" in ``dialect`` (whole or streamed), with the request id ``header``."""

    async def behaviour(
        mock: MockOpenAI, request: web.Request, body: dict[str, Any]
    ) -> web.StreamResponse:
        codec = get_dialect(dialect)
        parsed = codec.parse_request(body)
        answer = Response(id="x_1", model=parsed.model, parts=(TextPart("hi"),), usage=Usage(5, 1))
        if not body.get("stream"):
            payload = orjson.dumps(codec.render_response(answer, parsed))
            return web.Response(
                body=payload, content_type="application/json", headers={header: value}
            )
        resp = web.StreamResponse(headers={"content-type": "text/event-stream", header: value})
        await resp.prepare(request)
        encoder = codec.stream_encoder(parsed)
        await resp.write(b"".join(encoder.encode(event) for event in unfold(answer)))
        await resp.write_eof()
        return resp

    return behaviour


#: the gateway's URL, its Chat upstream and its Messages upstream
Stack = tuple[str, MockOpenAI, MockOpenAI]


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    with (
        mock_openai(default=answering("openai", "x-request-id", CHAT_ID)) as chat,
        mock_openai(
            "/v1/messages", default=answering("anthropic", "request-id", MESSAGES_ID)
        ) as messages,
    ):
        config = parse_config(
            {
                "upstreams": {
                    "chat": {"kind": "openai", "base_url": chat.base_url},
                    "msg": {"kind": "anthropic", "base_url": messages.base_url},
                    # limited: a whole answer is awaited in a task of its own (cancelled
                    # when the client leaves), which must not lose the id
                    "slow": {
                        "kind": "openai",
                        "base_url": chat.base_url,
                        "limits": {"max_concurrency": 4},
                    },
                },
                "models": [
                    {"name": "to-chat", "upstream": "chat", "model": "up-chat"},
                    {"name": "to-msg", "upstream": "msg", "model": "up-msg"},
                    {"name": "to-limited", "upstream": "slow", "model": "up-chat"},
                ],
            }
        )
        with live_server(create_app(config)) as url:
            yield url, chat, messages


@pytest.fixture
def gpt(stack: Stack) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=stack[0] + "/v1", api_key="sk-c", max_retries=0) as client:
        yield client


@pytest.fixture
def claude(stack: Stack) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=stack[0], api_key="sk-c", max_retries=0) as client:
        yield client


# (model, the upstream's id): for the openai SDK the first is passthrough, the second
# translated; for the anthropic SDK the other way round
ROUTES = [("to-chat", CHAT_ID), ("to-msg", MESSAGES_ID)]


@pytest.mark.parametrize(("model", "upstream_id"), ROUTES)
def test_openai_sdk_reads_the_upstream_id(gpt: openai.OpenAI, model: str, upstream_id: str) -> None:
    raw = gpt.chat.completions.with_raw_response.create(model=model, messages=HELLO)
    assert raw.parse().choices[0].message.content == "hi"
    assert raw.headers["upstream-request-id"] == upstream_id
    assert raw.headers["x-request-id"] != upstream_id  # (the gateway's own, apart)
    with gpt.chat.completions.with_streaming_response.create(
        model=model, messages=HELLO, stream=True
    ) as streamed:
        assert streamed.headers["upstream-request-id"] == upstream_id
        texts = [c.choices[0].delta.content for c in streamed.parse() if c.choices]
    assert "".join(t or "" for t in texts) == "hi"


@pytest.mark.parametrize(("model", "upstream_id"), ROUTES)
def test_anthropic_sdk_reads_the_upstream_id(
    claude: anthropic.Anthropic, model: str, upstream_id: str
) -> None:
    raw = claude.messages.with_raw_response.create(model=model, max_tokens=8, messages=HELLO)
    assert raw.parse().content[0].text == "hi"  # type: ignore[union-attr]
    assert raw.headers["upstream-request-id"] == upstream_id
    assert raw.headers["request-id"] != upstream_id
    with claude.messages.with_streaming_response.create(
        model=model, max_tokens=8, messages=HELLO, stream=True
    ) as streamed:
        assert streamed.headers["upstream-request-id"] == upstream_id
        kinds = [event.type for event in streamed.parse()]
    assert kinds[-1] == "message_stop"


def _fail(stack: Stack, model: str) -> str:
    """Make the next answer of ``model``'s upstream a 400 with its own id; that id."""
    if model == "to-chat":
        stack[1].enqueue(status(400, CHAT_ERROR, {"x-request-id": "req_chat_bad"}))
        return "req_chat_bad"
    stack[2].enqueue(status(400, MESSAGES_ERROR, {"request-id": "req_msg_bad"}))
    return "req_msg_bad"


@pytest.mark.parametrize("model", ["to-chat", "to-msg"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_an_error_answer_carries_the_upstream_id(
    stack: Stack, gpt: openai.OpenAI, claude: anthropic.Anthropic, model: str, stream: bool
) -> None:
    bad = _fail(stack, model)
    with pytest.raises(openai.BadRequestError) as caught:
        gpt.chat.completions.create(model=model, messages=HELLO, stream=stream)
    assert caught.value.response.headers["upstream-request-id"] == bad
    bad = _fail(stack, model)
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model=model, max_tokens=8, messages=HELLO, stream=stream)
    assert refused.value.response.headers["upstream-request-id"] == bad


def test_a_limited_upstream_keeps_the_id(claude: anthropic.Anthropic) -> None:
    raw = claude.messages.with_raw_response.create(model="to-limited", max_tokens=8, messages=HELLO)
    assert raw.headers["upstream-request-id"] == CHAT_ID


async def _error_first(
    mock: MockOpenAI, request: web.Request, body: dict[str, Any]
) -> web.StreamResponse:
    """A Messages stream whose first event is an in-band error (an overload, say)."""
    headers = {"content-type": "text/event-stream", "request-id": "req_msg_busy"}
    resp = web.StreamResponse(headers=headers)
    await resp.prepare(request)
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    await resp.write(b"event: error\ndata: " + orjson.dumps(error) + b"\n\n")
    await resp.write_eof()
    return resp


def test_an_in_band_error_first_carries_the_id(
    stack: Stack, gpt: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    """A stream that fails before its first event is answered with a real status, on the
    passthrough and the translated path alike, and names the upstream's answer."""
    stack[2].enqueue(_error_first)
    with pytest.raises(anthropic.APIStatusError) as relayed:
        claude.messages.create(model="to-msg", max_tokens=8, messages=HELLO, stream=True)
    assert relayed.value.response.headers["upstream-request-id"] == "req_msg_busy"
    stack[2].enqueue(_error_first)
    with pytest.raises(openai.APIStatusError) as translated:
        gpt.chat.completions.create(model="to-msg", messages=HELLO, stream=True)
    assert translated.value.response.headers["upstream-request-id"] == "req_msg_busy"


# -- the gateway's own id, in every error message it writes ----------------------------
#
# Claude Code (and most tools) show a user only an error's message, so the id a user can
# quote is appended to it: `` (request id: req_...)``, the same id as the gateway's
# ``x-request-id`` / ``request-id`` header. Whole answers and in-band stream errors, the
# gateway's own errors, an upstream's error relayed as it came (passthrough) or
# translated, in every client dialect.


def names_the_id(message: str, request_id: str, first: str) -> None:
    """``message`` is ``first``'s text, then the request id, once."""
    assert request_id.startswith("req_")
    assert message.startswith(first)
    assert message.endswith(f" (request id: {request_id})")
    assert message.count("(request id:") == 1


def _message(body: object) -> str:
    """The message of an SDK error's body (openai: the inner object; anthropic: whole)."""
    assert isinstance(body, dict)
    inner = body.get("error", body)
    assert isinstance(inner, dict)
    message = inner["message"]
    assert isinstance(message, str)
    return message


# -- whole answers ---------------------------------------------------------------------


def test_the_gateways_own_error_in_each_dialect(
    gpt: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    with pytest.raises(openai.NotFoundError) as chat:
        gpt.chat.completions.create(model="nope", messages=HELLO)
    names_the_id(_message(chat.value.body), chat.value.response.headers["x-request-id"], "")
    assert "nope" in _message(chat.value.body).split(" (request id:")[0]
    with pytest.raises(openai.NotFoundError) as responses:
        gpt.responses.create(model="nope", input="hello")
    rid = responses.value.response.headers["x-request-id"]
    names_the_id(_message(responses.value.body), rid, "")
    with pytest.raises(anthropic.NotFoundError) as messages:
        claude.messages.create(model="nope", max_tokens=8, messages=HELLO)
    rid = messages.value.response.headers["request-id"]
    names_the_id(_message(messages.value.body), rid, "")
    assert messages.value.body["request_id"] == rid  # type: ignore[index]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_an_upstream_error_relayed_as_it_came(
    stack: Stack, gpt: openai.OpenAI, claude: anthropic.Anthropic, stream: bool
) -> None:
    """The passthrough path: the upstream's own body, its message first."""
    stack[1].enqueue(status(400, CHAT_ERROR))
    with pytest.raises(openai.BadRequestError) as chat:
        gpt.chat.completions.create(model="to-chat", messages=HELLO, stream=stream)
    names_the_id(_message(chat.value.body), chat.value.response.headers["x-request-id"], "bad")
    stack[2].enqueue(status(400, MESSAGES_ERROR))
    with pytest.raises(anthropic.BadRequestError) as messages:
        claude.messages.create(model="to-msg", max_tokens=8, messages=HELLO, stream=stream)
    rid = messages.value.response.headers["request-id"]
    names_the_id(_message(messages.value.body), rid, "bad")


def test_an_upstream_error_translated(
    stack: Stack, gpt: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    stack[1].enqueue(status(400, CHAT_ERROR))
    with pytest.raises(anthropic.BadRequestError) as messages:
        claude.messages.create(model="to-chat", max_tokens=8, messages=HELLO)
    rid = messages.value.response.headers["request-id"]
    names_the_id(_message(messages.value.body), rid, "bad")
    stack[2].enqueue(status(400, MESSAGES_ERROR))
    with pytest.raises(openai.BadRequestError) as chat:
        gpt.chat.completions.create(model="to-msg", messages=HELLO)
    names_the_id(_message(chat.value.body), chat.value.response.headers["x-request-id"], "bad")


# -- in-band, after the first byte -----------------------------------------------------

BROKEN = drop_after(stream_events("up-chat")[:3])


def test_a_broken_stream_in_each_dialect(
    stack: Stack, gpt: openai.OpenAI, claude: anthropic.Anthropic
) -> None:
    # Chat client, passthrough: the gateway's in-band error after the relayed bytes
    stack[1].enqueue(BROKEN)
    with gpt.chat.completions.with_streaming_response.create(
        model="to-chat", messages=HELLO, stream=True
    ) as streamed:
        rid = streamed.headers["x-request-id"]
        with pytest.raises(openai.APIError) as chat:
            list(streamed.parse())
    names_the_id(chat.value.message, rid, "")
    # Anthropic client, translated: its error event
    stack[1].enqueue(BROKEN)
    with claude.messages.with_streaming_response.create(
        model="to-chat", max_tokens=8, messages=HELLO, stream=True
    ) as streamed_messages:
        rid = streamed_messages.headers["request-id"]
        with pytest.raises(anthropic.APIStatusError) as messages:
            list(streamed_messages.parse())
    names_the_id(_message(messages.value.body), rid, "")
    # Responses client, translated: response.failed
    stack[1].enqueue(BROKEN)
    with gpt.responses.with_streaming_response.create(
        model="to-chat", input="hello", stream=True
    ) as streamed_responses:
        rid = streamed_responses.headers["x-request-id"]
        events = list(streamed_responses.parse())
    failed = [e for e in events if e.type == "response.failed"]
    assert failed, [e.type for e in events]
    error = failed[0].response.error  # type: ignore[attr-defined]
    assert error is not None
    names_the_id(error.message, rid, "")


# -- once ------------------------------------------------------------------------------


def test_an_error_rendered_twice_names_the_id_once() -> None:
    error = UpstreamError("upstream broke", status=502)
    shown = error.with_request_id("req_1")
    assert shown.message == "upstream broke (request id: req_1)"
    assert shown.with_request_id("req_1") is shown
    assert error.message == "upstream broke"  # the original is left as it is
    assert error.with_request_id("") is error
    assert type(shown) is UpstreamError and shown.status == 502


def test_the_note_keeps_the_errors_details() -> None:
    error = InvalidRequestError("bad temperature", param="temperature", code="bad")
    shown = error.with_request_id("req_2")
    assert (shown.param, shown.code, shown.status) == ("temperature", "bad", 400)
    assert shown.args == (shown.message,)
    # a subclass whose constructor takes other arguments is copied too
    refused = QueueRefused("queue full", reason="queue_full", retry_after=3)
    copied = refused.with_request_id("req_3")
    assert (type(copied), copied.reason, copied.retry_after) == (QueueRefused, "queue_full", 3)
    assert copied.message == "queue full (request id: req_3)"
