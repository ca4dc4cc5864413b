"""``POST /v1/embeddings`` through a live gateway, with the openai SDK as the client:
float and base64 (the SDK's default), ``dimensions``, list and token inputs, the answer
relayed byte for byte, converted when the upstream writes the other encoding; a fallback,
a key's model globs and its ``tpm``, the Anthropic refusal, the API's limits; the usage
rows and their ``endpoint``.

    openai SDK / httpx -> live gateway -> mock OpenAI Embeddings upstreams
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from aiohttp import web

from interlingua.config import parse_config
from interlingua.dialects.embeddings import encode_vector
from interlingua.server import create_app
from interlingua.usage.record import Record

from ..live_server import live_server
from .mock_upstream import MockOpenAI, mock_openai, status
from .test_keys import Rows

KEY_A, KEY_T, KEY_O = "sk-embed-team-a", "sk-embed-team-t", "sk-embed-team-o"
#: the prompt_tokens the mock reports for the input that costs a lot
HEAVY = 90


def _vector(text: Any, size: int) -> list[float]:
    seed = sum(map(ord, str(text))) % 97
    return [round((seed + i) / 100, 3) for i in range(size)]


def _inputs(value: Any) -> list[Any]:
    if isinstance(value, str) or (value and isinstance(value[0], int)):
        return [value]
    return list(value)


async def openai_like(
    mock: MockOpenAI, request: web.Request, body: dict[str, Any]
) -> web.StreamResponse:
    """An OpenAI embeddings server: honours ``encoding_format`` and ``dimensions``."""
    size = body.get("dimensions") or 4
    base64 = body.get("encoding_format") == "base64"
    inputs = _inputs(body["input"])
    data = []
    for i, text in enumerate(inputs):
        vector = _vector(text, size)
        data.append(
            {
                "object": "embedding",
                "index": i,
                "embedding": encode_vector(vector) if base64 else vector,
            }
        )
    tokens = HEAVY if inputs == ["heavy"] else 3 * len(inputs)
    answer = {
        "object": "list",
        "data": data,
        "model": body["model"],
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }
    # (spaced JSON, as some servers write it: a byte-exact relay must keep the spaces)
    payload = orjson.dumps(answer).replace(b'":', b'": ')
    return web.Response(body=payload, content_type="application/json")


async def floats_only(
    mock: MockOpenAI, request: web.Request, body: dict[str, Any]
) -> web.StreamResponse:
    """A server that knows only floats and 3 dimensions (ignores both fields)."""
    answer = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": [0.5, -0.25, 1.0]}
            for i, _ in enumerate(_inputs(body["input"]))
        ],
        "model": body["model"],
        "usage": {"prompt_tokens": 2, "total_tokens": 2},
    }
    return web.Response(body=orjson.dumps(answer), content_type="application/json")


class Stack:
    def __init__(self, url: str, emb: MockOpenAI, floaty: MockOpenAI, rows: Rows) -> None:
        self.url, self.emb, self.floaty, self.rows = url, emb, floaty, rows

    def client(self, key: str = KEY_A) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0)

    def row(self, request_id: str) -> Record:
        (found,) = self.rows.matching(lambda r: r.request_id == request_id)
        return found


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    mp = pytest.MonkeyPatch()
    mp.setenv("EMB_TEAM_A", KEY_A)
    mp.setenv("EMB_TEAM_T", KEY_T)
    mp.setenv("EMB_TEAM_O", KEY_O)
    with (
        mock_openai("/v1/embeddings", default=openai_like) as emb,
        mock_openai("/v1/embeddings", default=floats_only) as floaty,
        mock_openai("/v1/embeddings", default=status(503, {"error": {"message": "busy"}})) as down,
    ):
        config = parse_config(
            {
                "upstreams": {
                    "emb": {"kind": "openai", "base_url": emb.base_url},
                    "resp": {"kind": "responses", "base_url": emb.base_url},
                    "floaty": {"kind": "openai", "base_url": floaty.base_url},
                    "down": {
                        "kind": "openai",
                        "base_url": down.base_url,
                        "retries": {"max": 0},
                    },
                    "anth": {"kind": "anthropic", "base_url": "http://127.0.0.1:9"},
                },
                "models": [
                    {"name": "embed", "upstream": "emb", "model": "up-embed"},
                    {"name": "text-embedding-3-small", "upstream": "emb"},
                    {"name": "embed-resp", "upstream": "resp", "model": "up-resp"},
                    {"name": "floaty", "upstream": "floaty"},
                    {"name": "embed-down", "upstream": "down", "fallbacks": ["embed"]},
                    {"name": "claude-x", "upstream": "anth"},
                    {
                        "name": "embed-shaped",
                        "upstream": "emb",
                        "params": {"dimensions": 2},
                        "drop_params": ["user"],
                    },
                ],
                "keys": [
                    {"name": "team-a", "key_env": "EMB_TEAM_A", "models": ["*embed*", "floaty"]},
                    {"name": "team-t", "key_env": "EMB_TEAM_T", "limits": {"tpm": 100}},
                    {"name": "team-o", "key_env": "EMB_TEAM_O"},
                ],
            }
        )
        rows = Rows()
        try:
            with live_server(create_app(config, record_sinks=[rows])) as url:
                yield Stack(url, emb, floaty, rows)
        finally:
            mp.undo()


def _norm(vector: list[float]) -> list[float]:
    return [round(x, 3) for x in vector]


def test_floats_for_a_list_of_strings(stack: Stack) -> None:
    with stack.client() as client:
        answer = client.embeddings.create(
            model="embed", input=["first text", "second text"], encoding_format="float"
        )
    assert [d.index for d in answer.data] == [0, 1]
    assert answer.data[1].embedding == _vector("second text", 4)
    assert (answer.usage.prompt_tokens, answer.usage.total_tokens) == (6, 6)
    sent = stack.emb.received[-1]
    assert sent.path == "/v1/embeddings"
    assert sent.body == {
        "model": "up-embed",
        "input": ["first text", "second text"],
        "encoding_format": "float",
    }


def test_the_sdk_default_is_base64_and_decodes(stack: Stack) -> None:
    with stack.client() as client:
        answer = client.embeddings.create(model="embed", input="hi", dimensions=6)
    assert stack.emb.received[-1].body["encoding_format"] == "base64"
    assert stack.emb.received[-1].body["dimensions"] == 6
    assert _norm(answer.data[0].embedding) == _vector("hi", 6)


def test_token_inputs(stack: Stack) -> None:
    with stack.client() as client:
        one = client.embeddings.create(model="embed", input=[1, 2, 3], encoding_format="float")
        two = client.embeddings.create(model="embed", input=[[1, 2], [3]], encoding_format="float")
    assert one.data[0].embedding == _vector([1, 2, 3], 4)
    assert [d.embedding for d in two.data] == [_vector([1, 2], 4), _vector([3], 4)]
    assert stack.emb.received[-1].body["input"] == [[1, 2], [3]]


def test_relayed_byte_for_byte_when_the_name_needs_no_rewrite(stack: Stack) -> None:
    body = {"model": "text-embedding-3-small", "input": "abc", "encoding_format": "base64"}
    headers = {"authorization": f"Bearer {KEY_A}"}
    answer = httpx.post(stack.url + "/v1/embeddings", json=body, headers=headers)
    assert answer.status_code == 200
    assert stack.emb.received[-1].body == body  # forwarded as sent
    vector = encode_vector(_vector("abc", 4))
    expected = (
        b'{"object": "list","data": [{"object": "embedding","index": 0,"embedding": "'
        + vector.encode()
        + b'"}],"model": "text-embedding-3-small","usage": {"prompt_tokens": 3,'
        b'"total_tokens": 3}}'
    )
    assert answer.content == expected
    assert answer.headers["x-request-id"].startswith("req_")


def test_a_responses_upstream_serves_the_same_endpoint(stack: Stack) -> None:
    with stack.client() as client:
        answer = client.embeddings.create(model="embed-resp", input="x", encoding_format="float")
    assert answer.data[0].embedding == _vector("x", 4)
    assert stack.emb.received[-1].body["model"] == "up-resp"


@pytest.mark.parametrize("encoding", ["base64", "float", None])
def test_converted_when_the_upstream_writes_only_floats(stack: Stack, encoding: Any) -> None:
    body: dict[str, Any] = {"model": "floaty", "input": ["a", "b"]}
    if encoding is not None:
        body["encoding_format"] = encoding
    headers = {"authorization": f"Bearer {KEY_A}"}
    answer = httpx.post(stack.url + "/v1/embeddings", json=body, headers=headers).json()
    vectors = [d["embedding"] for d in answer["data"]]
    if encoding == "base64":
        assert vectors == [encode_vector([0.5, -0.25, 1.0])] * 2
    else:
        assert vectors == [[0.5, -0.25, 1.0]] * 2
    with stack.client() as client:  # (the SDK's default: base64, decoded by the SDK)
        assert client.embeddings.create(model="floaty", input="a").data[0].embedding == [
            0.5,
            -0.25,
            1.0,
        ]


def test_dimensions_an_upstream_ignores_are_refused_naming_them(stack: Stack) -> None:
    with stack.client() as client, pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model="floaty", input="a", dimensions=256)
    assert caught.value.body["param"] == "dimensions"  # type: ignore[index]
    assert "dimensions" in caught.value.message


def test_params_and_drop_params_shape_the_body(stack: Stack) -> None:
    with stack.client() as client:
        answer = client.embeddings.create(
            model="embed-shaped", input="s", user="u-1", encoding_format="float"
        )
    assert len(answer.data[0].embedding) == 2
    sent = stack.emb.received[-1].body
    assert sent["dimensions"] == 2 and "user" not in sent


def test_a_failing_deployment_falls_back(stack: Stack) -> None:
    with stack.client() as client:
        raw = client.embeddings.with_raw_response.create(
            model="embed-down", input="q", encoding_format="float"
        )
    assert raw.parse().data[0].embedding == _vector("q", 4)
    row = stack.row(raw.headers["x-request-id"])
    assert (row.upstream, row.upstream_model, row.status) == ("emb", "up-embed", 200)


def test_an_anthropic_upstream_has_no_embeddings(stack: Stack) -> None:
    with stack.client(KEY_O) as client, pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model="claude-x", input="q")
    assert "no embeddings" in caught.value.message
    assert caught.value.body["param"] == "model"  # type: ignore[index]


def test_a_key_s_model_globs_apply(stack: Stack) -> None:
    with stack.client() as client, pytest.raises(openai.PermissionDeniedError):
        client.embeddings.create(model="claude-x", input="q")


@pytest.mark.parametrize(
    ("value", "param"),
    [
        ("", "input"),
        ([""], "input"),
        (["a"] * 2049, "input"),
        ([[1], []], "input"),
        ([[1], ["x"]], "input"),
        (None, "input"),
    ],
)
def test_the_api_s_limits(stack: Stack, value: Any, param: str) -> None:
    body = {"model": "embed", "input": value}
    headers = {"authorization": f"Bearer {KEY_A}"}
    answer = httpx.post(stack.url + "/v1/embeddings", json=body, headers=headers)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", param)


def test_bad_encoding_format_is_refused(stack: Stack) -> None:
    body = {"model": "embed", "input": "x", "encoding_format": "int8"}
    headers = {"authorization": f"Bearer {KEY_A}"}
    answer = httpx.post(stack.url + "/v1/embeddings", json=body, headers=headers)
    assert (answer.status_code, answer.json()["error"]["param"]) == (400, "encoding_format")


def test_usage_rows_say_the_endpoint(stack: Stack) -> None:
    with stack.client() as client:
        raw = client.embeddings.with_raw_response.create(model="embed", input=["u", "v", "w"])
    # (a chat request's row says its endpoint too: this upstream answers it with a 404)
    chat = httpx.post(
        stack.url + "/v1/chat/completions",
        json={"model": "embed", "messages": [{"role": "user", "content": "hi"}]},
        headers={"authorization": f"Bearer {KEY_A}"},
    )
    row = stack.row(raw.headers["x-request-id"])
    assert (row.endpoint, row.dialect, row.key) == ("embeddings", "openai", "team-a")
    assert (row.input_tokens, row.output_tokens, row.status, row.stream) == (9, 0, 200, False)
    assert stack.row(chat.headers["x-request-id"]).endpoint == "chat/completions"
    # (and the metrics count it like any request)
    metrics = httpx.get(stack.url + "/metrics").text
    assert 'interlingua_requests_total{dialect="openai",key="team-a",model="embed"' in metrics


def test_a_key_s_tpm_counts_the_input_tokens(stack: Stack) -> None:
    with stack.client(KEY_T) as client:
        client.embeddings.create(model="embed", input="heavy")  # reports 90 tokens
        with pytest.raises(openai.RateLimitError):
            client.embeddings.create(model="embed", input="more text than ten tokens " * 4)


def test_vectors_round_trip_exactly() -> None:
    vector = [0.1, -1.5, 3.25, math.pi]
    from interlingua.dialects.embeddings import decode_vector

    decoded = decode_vector(encode_vector(vector))
    assert decoded[1:3] == [-1.5, 3.25] and abs(decoded[3] - math.pi) < 1e-6
