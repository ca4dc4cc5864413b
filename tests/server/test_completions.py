"""``POST /v1/completions`` through a live gateway, with the openai SDK as the client:
stream and not, the prompt forms and the sampling fields passed on, the answer relayed
byte for byte, a stream's usage asked for (and cut when the client did not ask), a
fallback, the API's checks, the refusal of an upstream without text completions; the
usage rows and their ``endpoint``.

    openai SDK / httpx -> live gateway -> mock OpenAI Completions upstreams
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from aiohttp import web

from interlingua.config import parse_config
from interlingua.server import create_app
from interlingua.usage.record import Record

from ..live_server import live_server
from .mock_upstream import MockOpenAI, mock_openai, status
from .test_cost_served import chat_answer, messages_answer
from .test_keys import Rows

KEY = "sk-completions-team"
WORDS = [" upon", " a", " time"]
USAGE = {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}


def _answer(model: str) -> bytes:
    answer = {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": model,
        "choices": [
            {"index": 0, "text": "".join(WORDS), "logprobs": None, "finish_reason": "stop"}
        ],
        "usage": USAGE,
    }
    # (spaced JSON, as some servers write it: a byte-exact relay must keep the spaces)
    return orjson.dumps(answer).replace(b'":', b'": ')


def _chunk(model: str, text: str, finish: str | None = None) -> bytes:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    chunk = {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": model,
        "choices": [choice],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def stream_events(model: str, include_usage: bool) -> list[bytes]:
    """A text completion stream as OpenAI writes it (the usage chunk only when asked)."""
    events = [_chunk(model, w) for w in WORDS] + [_chunk(model, "", "length")]
    if include_usage:
        usage = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": model}
        usage.update(choices=[], usage=USAGE)  # type: ignore[arg-type]
        events.append(b"data: " + orjson.dumps(usage) + b"\n\n")
    return [*events, b"data: [DONE]\n\n"]


async def completions_server(
    mock: MockOpenAI, request: web.Request, body: dict[str, Any]
) -> web.StreamResponse:
    """An OpenAI Completions server."""
    model = str(body["model"])
    if not body.get("stream"):
        return web.Response(body=_answer(model), content_type="application/json")
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    include = bool((body.get("stream_options") or {}).get("include_usage"))
    for event in stream_events(model, include):
        await resp.write(event)
    await resp.write_eof()
    return resp


class Stack:
    def __init__(self, url: str, up: MockOpenAI, anth: MockOpenAI, rows: Rows) -> None:
        self.url, self.up, self.anth, self.rows = url, up, anth, rows

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=KEY, max_retries=0)

    def row(self, request_id: str) -> Record:
        (found,) = self.rows.matching(lambda r: r.request_id == request_id)
        return found


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    mp = pytest.MonkeyPatch()
    mp.setenv("COMPLETIONS_KEY", KEY)
    with (
        mock_openai("/v1/completions", default=completions_server) as up,
        mock_openai("/v1/completions", default=status(503, {"error": {"message": "busy"}})) as down,
        mock_openai("/v1/messages", default=messages_answer) as anth,
        mock_openai(default=chat_answer) as chat,
    ):
        config = parse_config(
            {
                "upstreams": {
                    "up": {"kind": "openai", "base_url": up.base_url},
                    "resp": {"kind": "responses", "base_url": up.base_url},
                    "down": {"kind": "openai", "base_url": down.base_url, "retries": {"max": 0}},
                    "anth": {"kind": "anthropic", "base_url": anth.base_url},
                    "chat": {"kind": "openai", "base_url": chat.base_url},
                    "paced": {
                        "kind": "openai",
                        "base_url": up.base_url,
                        "limits": {"rpm": 1000, "tpm": 100000, "max_concurrency": 2},
                        "timeout": {"first_byte": 5, "idle": 5},
                    },
                },
                "models": [
                    {"name": "gpt-3.5-turbo-instruct", "upstream": "up"},
                    {"name": "smollm2", "upstream": "up", "model": "up-smol"},
                    {"name": "via-responses", "upstream": "resp", "model": "up-resp"},
                    {"name": "flaky", "upstream": "down", "fallbacks": ["smollm2"]},
                    {"name": "claude-x", "upstream": "anth"},
                    {"name": "claude-text", "upstream": "anth", "completions": "as_chat"},
                    {"name": "chat-text", "upstream": "chat", "completions": "as_chat"},
                    {"name": "paced", "upstream": "paced", "model": "up-paced"},
                    {
                        "name": "shaped",
                        "upstream": "up",
                        "params": {"temperature": 0},
                        "drop_params": ["user"],
                    },
                ],
                "keys": [{"name": "team", "key_env": "COMPLETIONS_KEY"}],
            }
        )
        rows = Rows()
        try:
            with live_server(create_app(config, record_sinks=[rows])) as url:
                yield Stack(url, up, anth, rows)
        finally:
            mp.undo()


def test_a_whole_completion(stack: Stack) -> None:
    with stack.client() as client:
        raw = client.completions.with_raw_response.create(
            model="smollm2", prompt="Once", max_tokens=3, temperature=0.5, stop=["\n"]
        )
    answer = raw.parse()
    assert answer.object == "text_completion"
    assert answer.choices[0].text == "".join(WORDS)
    assert answer.usage is not None and answer.usage.total_tokens == 7
    sent = stack.up.received[-1]
    assert sent.path == "/v1/completions"
    assert sent.body == {
        "model": "up-smol",
        "prompt": "Once",
        "max_tokens": 3,
        "temperature": 0.5,
        "stop": ["\n"],
    }
    row = stack.row(raw.headers["x-request-id"])
    assert (row.endpoint, row.dialect, row.key, row.model) == (
        "completions",
        "openai",
        "team",
        "smollm2",
    )
    assert (row.input_tokens, row.output_tokens, row.status, row.stream) == (4, 3, 200, False)
    metrics = httpx.get(stack.url + "/metrics").text  # (counted like any request)
    assert 'interlingua_requests_total{dialect="openai",key="team",model="smollm2"' in metrics


def test_relayed_byte_for_byte_when_the_name_needs_no_rewrite(stack: Stack) -> None:
    body = {
        "model": "gpt-3.5-turbo-instruct",
        "prompt": [[1, 2], [3]],
        "echo": True,
        "logprobs": 2,
        "suffix": "end",
        "n": 2,
        "best_of": 3,
    }
    headers = {"authorization": f"Bearer {KEY}"}
    answer = httpx.post(stack.url + "/v1/completions", json=body, headers=headers)
    assert answer.status_code == 200
    assert stack.up.received[-1].body == body  # forwarded as sent
    assert answer.content == _answer("gpt-3.5-turbo-instruct")


def test_a_stream_without_usage_asked(stack: Stack) -> None:
    headers = {"authorization": f"Bearer {KEY}"}
    body = {"model": "gpt-3.5-turbo-instruct", "prompt": "Once", "stream": True}
    answer = httpx.post(stack.url + "/v1/completions", json=body, headers=headers)
    # asked for upstream (the usage log needs it), cut from what the client gets
    assert stack.up.received[-1].body["stream_options"] == {"include_usage": True}
    assert answer.content == b"".join(stream_events("gpt-3.5-turbo-instruct", False))
    row = stack.row(answer.headers["x-request-id"])
    assert (row.endpoint, row.stream, row.input_tokens, row.output_tokens) == (
        "completions",
        True,
        4,
        3,
    )


def test_the_sdk_s_stream_with_usage(stack: Stack) -> None:
    with stack.client() as client:
        chunks = list(
            client.completions.create(
                model="smollm2",
                prompt=["Once", "Twice"],
                stream=True,
                stream_options={"include_usage": True},
            )
        )
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "".join(WORDS)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3
    assert stack.up.received[-1].body["prompt"] == ["Once", "Twice"]


def test_a_responses_upstream_serves_the_same_endpoint(stack: Stack) -> None:
    with stack.client() as client:
        answer = client.completions.create(model="via-responses", prompt=[5, 6, 7])
        chunks = list(client.completions.create(model="via-responses", prompt="x", stream=True))
    assert answer.choices[0].text == "".join(WORDS)
    assert stack.up.received[-1].body["model"] == "up-resp"
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "".join(WORDS)


def test_params_shape_the_body(stack: Stack) -> None:
    with stack.client() as client:
        client.completions.create(model="shaped", prompt="p", user="u-1")
    sent = stack.up.received[-1].body
    assert sent["temperature"] == 0 and "user" not in sent


def test_a_failing_deployment_falls_back(stack: Stack) -> None:
    with stack.client() as client:
        raw = client.completions.with_raw_response.create(model="flaky", prompt="q")
    assert raw.parse().choices[0].text == "".join(WORDS)
    row = stack.row(raw.headers["x-request-id"])
    assert (row.upstream, row.upstream_model, row.status) == ("up", "up-smol", 200)


def test_an_anthropic_upstream_has_no_text_completions(stack: Stack) -> None:
    with stack.client() as client, pytest.raises(openai.BadRequestError) as caught:
        client.completions.create(model="claude-x", prompt="q")
    assert "/v1/completions" in caught.value.message
    assert "as_chat" in caught.value.message
    assert caught.value.body["param"] == "model"  # type: ignore[index]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": [1, "a"]}, "prompt"),
        ({"prompt": [[1], []]}, "prompt"),
        ({"prompt": "p", "logprobs": 6}, "logprobs"),
        ({"prompt": "p", "logprobs": True}, "logprobs"),
        ({"prompt": "p", "n": 0}, "n"),
        ({"prompt": "p", "n": 3, "best_of": 2}, "best_of"),
        ({"prompt": "p", "echo": "yes"}, "echo"),
        ({"prompt": "p", "stream_options": {"include_usage": True}}, "stream_options"),
    ],
)
def test_the_api_s_checks(stack: Stack, fields: dict[str, Any], param: str) -> None:
    body = {"model": "smollm2", **fields}
    headers = {"authorization": f"Bearer {KEY}"}
    answer = httpx.post(stack.url + "/v1/completions", json=body, headers=headers)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)


def test_as_chat_over_an_anthropic_upstream(stack: Stack) -> None:
    with stack.client() as client:
        raw = client.completions.with_raw_response.create(
            model="claude-text", prompt="Say hi", max_tokens=5, stop=["\n"]
        )
        chunks = list(
            client.completions.create(model="claude-text", prompt=["Say hi"], stream=True)
        )
    answer = raw.parse()
    assert (answer.object, answer.choices[0].text) == ("text_completion", "hi")
    assert answer.choices[0].finish_reason == "stop"
    sent = stack.anth.received[-1].body
    assert sent["messages"] == [{"role": "user", "content": "Say hi"}]
    assert all(c.object == "text_completion" for c in chunks)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "hi"
    row = stack.row(raw.headers["x-request-id"])
    assert (row.endpoint, row.upstream, row.output_tokens) == ("completions", "anth", 5030)


def test_as_chat_over_a_chat_only_upstream(stack: Stack) -> None:
    headers = {"authorization": f"Bearer {KEY}"}
    body = {"model": "chat-text", "prompt": "Say hi", "stream": True}
    answer = httpx.post(stack.url + "/v1/completions", json=body, headers=headers)
    events = [e for e in answer.content.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]"
    chunks = [orjson.loads(e[6:]) for e in events[:-1]]
    assert [c["object"] for c in chunks] == ["text_completion"] * len(chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == "hi"
    assert all("usage" not in c for c in chunks)  # (not asked for: cut)
    row = stack.row(answer.headers["x-request-id"])
    assert (row.endpoint, row.stream, row.output_tokens) == ("completions", True, 30000)


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"echo": True}, "echo"),
        ({"suffix": "end"}, "suffix"),
        ({"logprobs": 0}, "logprobs"),
        ({"best_of": 2}, "best_of"),
        ({"prompt": [1, 2]}, "prompt"),
        ({"prompt": ["a", "b"]}, "prompt"),
        ({"n": 2}, "n"),  # (Anthropic takes one answer a request)
    ],
)
def test_as_chat_refuses_what_has_no_chat_counterpart(
    stack: Stack, fields: dict[str, Any], param: str
) -> None:
    body = {"model": "claude-text", "prompt": "p", **fields}
    headers = {"authorization": f"Bearer {KEY}"}
    answer = httpx.post(stack.url + "/v1/completions", json=body, headers=headers)
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == param


def test_upstream_limits_and_phase_deadlines_apply(stack: Stack) -> None:
    """Through an upstream's ``limits`` (a ticket, settled with the answer's usage) and
    its ``first_byte`` deadline (met by a text chunk, which is content)."""
    with stack.client() as client:
        whole = client.completions.create(model="paced", prompt="p")
        chunks = list(client.completions.create(model="paced", prompt="p", stream=True))
    assert whole.choices[0].text == "".join(WORDS)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "".join(WORDS)
    assert stack.up.received[-1].body["model"] == "up-paced"
