"""Stored Responses state, through the official openai SDK against a live gateway.

Three upstreams, all scripted fakes speaking a real wire: Chat Completions and Anthropic
Messages (translated) and the Responses API itself (passthrough). The store is SQLite in
a temporary directory. Each multi-turn test asserts what the upstream *received*: the
whole rebuilt conversation, with only the new request's instructions.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
import pytest

from interlingua.config import parse_config
from interlingua.core import Request, StopReason, StreamError, TextDelta, TextPart, ToolCallPart
from interlingua.errors import UpstreamError
from interlingua.server import create_app
from interlingua.upstreams.fake import FakeUpstream

from ...conformance.cases import reply
from ...live_server import live_server
from ...request_ids import without_request_id


def named(body: object) -> object:
    """An SDK error body with its message's request id checked and taken off."""
    assert isinstance(body, dict)
    return {**body, "message": without_request_id(body["message"])}


MODELS = ["via-chat", "via-anthropic", "via-responses"]
Gateway = tuple[str, dict[str, FakeUpstream]]


def _config(tmp: Path, **responses: Any) -> Any:
    return parse_config(
        {
            "upstreams": {
                "oai": {"kind": "fake"},
                "ant": {"kind": "fake"},
                "rsp": {"kind": "fake"},
            },
            "models": [
                {"name": "via-chat", "upstream": "oai", "model": "deepseek-chat"},
                {"name": "via-anthropic", "upstream": "ant", "model": "claude-haiku"},
                {"name": "via-responses", "upstream": "rsp", "model": "gpt-5"},
            ],
            "server": {"api_keys": ["sk-test"]},
            "responses": {"url": f"sqlite://{tmp}/responses.db", **responses},
        }
    )


def _fakes() -> dict[str, FakeUpstream]:
    return {
        "via-chat": FakeUpstream("oai", wire="openai", chunk_size=3),
        "via-anthropic": FakeUpstream("ant", wire="anthropic", chunk_size=3),
        "via-responses": FakeUpstream("rsp", wire="responses", chunk_size=3),
    }


def _serve(config: Any, fakes: dict[str, FakeUpstream]) -> Any:
    upstreams = {
        "oai": fakes["via-chat"],
        "ant": fakes["via-anthropic"],
        "rsp": fakes["via-responses"],
    }
    return live_server(create_app(config, upstreams=upstreams))


def _client(url: str) -> openai.OpenAI:
    """A client of a gateway of one test (closed by its ``with``: an open pool's socket
    would be a ResourceWarning at some later test's garbage collection)."""
    return openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    fakes = _fakes()
    with _serve(_config(tmp_path_factory.mktemp("store")), fakes) as url:
        yield url, fakes


@pytest.fixture
def gpt(gateway: Gateway) -> Iterator[openai.OpenAI]:
    with _client(gateway[0]) as client:
        yield client


_IDS = iter(range(10**6))


def _answer(*parts: Any, **kw: Any) -> Any:
    """A scripted answer with an id of its own (a Responses upstream's ids are unique)."""
    return replace(reply(*parts, **kw), id=f"resp_up{next(_IDS)}")


def _create(gpt: openai.OpenAI, stream: bool, **ask: Any) -> Any:
    if not stream:
        return gpt.responses.create(**ask)
    with gpt.responses.stream(**ask) as events:
        return events.get_final_response()


def _turns(sent: Request) -> list[tuple[str, str]]:
    """(role, text) of each non-system message the upstream received."""
    out = []
    for m in sent.messages:
        if m.role == "system":
            continue
        text = "".join(p.text for p in m.parts if isinstance(p, TextPart))
        out.append((m.role, text))
    return out


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", MODELS)
def test_create_retrieve_list_delete(
    gpt: openai.OpenAI, gateway: Gateway, model: str, stream: bool
) -> None:
    gateway[1][model].enqueue(_answer("Paris is the capital."))
    created = _create(gpt, stream, model=model, input="Capital of France?")
    assert created.output_text == "Paris is the capital."
    got = gpt.responses.retrieve(created.id)
    assert got.id == created.id and got.output_text == "Paris is the capital."
    assert got.status == "completed" and got.store is True
    assert [item.id for item in got.output] == [item.id for item in created.output]
    items = gpt.responses.input_items.list(created.id)
    assert len(items.data) == 1
    item = items.data[0]
    assert item.type == "message" and item.role == "user"  # type: ignore[union-attr]
    assert item.id.startswith("msg_")
    assert item.content[0].text == "Capital of France?"  # type: ignore[union-attr]
    assert items.first_id == items.last_id == item.id and items.has_more is False
    gpt.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError) as caught:
        gpt.responses.retrieve(created.id)
    assert named(caught.value.body) == {
        "message": f"Response with id '{created.id}' not found.",
        "type": "invalid_request_error",
        "param": None,
        "code": None,
    }
    with pytest.raises(openai.NotFoundError):
        gpt.responses.delete(created.id)
    with pytest.raises(openai.NotFoundError):
        gpt.responses.input_items.list(created.id)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", MODELS)
def test_previous_response_id_sends_the_whole_conversation(
    gpt: openai.OpenAI, gateway: Gateway, model: str, stream: bool
) -> None:
    fake = gateway[1][model]
    fake.enqueue(_answer("Hello Ada."))
    first = _create(gpt, stream, model=model, instructions="Be brief.", input="I am Ada.")
    fake.enqueue(_answer("Noted: blue."))
    second = _create(
        gpt, stream, model=model, previous_response_id=first.id,
        input=[{"role": "user", "content": "I like blue."}],
    )  # fmt: skip
    if model != "via-responses":  # (a passthrough answer is the upstream's, untouched)
        assert second.previous_response_id == first.id and second.store is True
    kept = gpt.responses.retrieve(second.id)  # the stored copy says what was done
    assert kept.previous_response_id == first.id and kept.store is True
    fake.enqueue(_answer("Ada, and blue."))
    third = _create(
        gpt, stream, model=model, previous_response_id=second.id,
        instructions="Answer in French.", input="Who am I and what do I like?",
    )  # fmt: skip
    assert third.output_text == "Ada, and blue."
    sent = fake.requests[-1]
    assert _turns(sent) == [
        ("user", "I am Ada."),
        ("assistant", "Hello Ada."),
        ("user", "I like blue."),
        ("assistant", "Noted: blue."),
        ("user", "Who am I and what do I like?"),
    ]
    # instructions are the new request's own, never inherited
    # (docs/protocols.md, "Responses: stored responses")
    assert sent.system_text == "Answer in French."
    if model == "via-responses":
        wire = fake.wire_requests[-1]
        assert "previous_response_id" not in wire and wire["instructions"] == "Answer in French."
    # the list of a chained response holds the conversation, newest first by default
    listed = gpt.responses.input_items.list(third.id, order="asc")
    texts = [item.content[0].text for item in listed.data]  # type: ignore[union-attr]
    assert texts == [
        "I am Ada.", "Hello Ada.", "I like blue.", "Noted: blue.", "Who am I and what do I like?"
    ]  # fmt: skip
    newest = gpt.responses.input_items.list(third.id, limit=2)
    assert [i.content[0].text for i in newest.data] == texts[::-1][:2]  # type: ignore[union-attr]
    assert newest.has_more is True
    rest = gpt.responses.input_items.list(third.id, limit=10, after=newest.last_id)
    assert [i.content[0].text for i in rest.data] == texts[::-1][2:]  # type: ignore[union-attr]
    assert rest.has_more is False
    # the SDK's auto-pagination walks every page
    assert len(list(gpt.responses.input_items.list(third.id, limit=2))) == 5


def test_function_calls_and_their_outputs_carry_over(gpt: openai.OpenAI, gateway: Gateway) -> None:
    fake = gateway[1]["via-chat"]
    weather = {
        "type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }  # fmt: skip
    call = ToolCallPart("call_9", "get_weather", '{"city":"Oslo"}')
    fake.enqueue(_answer("Checking.", call, stop=StopReason.TOOL_USE))
    first = gpt.responses.create(model="via-chat", input="Weather in Oslo?", tools=[weather])
    fake.enqueue(_answer("Cold in Oslo."))
    second = gpt.responses.create(
        model="via-chat", previous_response_id=first.id, tools=[weather],
        input=[{"type": "function_call_output", "call_id": "call_9", "output": "-5C"}],
    )  # fmt: skip
    assert second.output_text == "Cold in Oslo."
    parts = [type(p).__name__ for m in fake.requests[-1].messages for p in m.parts]
    assert parts == ["TextPart", "TextPart", "ToolCallPart", "ToolResultPart"]
    listed = gpt.responses.input_items.list(second.id, order="asc")
    assert [item.type for item in listed.data] == [
        "message", "message", "function_call", "function_call_output"
    ]  # fmt: skip
    assert listed.data[-1].id.startswith("fco_")


def test_store_false_keeps_nothing(gpt: openai.OpenAI, gateway: Gateway) -> None:
    gateway[1]["via-chat"].enqueue(_answer("Not kept."))
    response = gpt.responses.create(model="via-chat", input="hi", store=False)
    assert response.store is False
    with pytest.raises(openai.NotFoundError):
        gpt.responses.retrieve(response.id)
    with pytest.raises(openai.BadRequestError) as caught:
        gpt.responses.create(model="via-chat", input="and?", previous_response_id=response.id)
    assert caught.value.code == "previous_response_not_found"


@pytest.mark.parametrize("model", ["via-chat", "via-anthropic"])
def test_an_unknown_previous_id_is_a_400(gpt: openai.OpenAI, model: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        gpt.responses.create(model=model, input="and?", previous_response_id="resp_nope")
    assert named(caught.value.body) == {
        "message": "Previous response with id 'resp_nope' not found.",
        "type": "invalid_request_error",
        "param": "previous_response_id",
        "code": "previous_response_not_found",
    }


def test_an_unknown_previous_id_goes_to_a_responses_upstream_unchanged(
    gpt: openai.OpenAI, gateway: Gateway
) -> None:
    fake = gateway[1]["via-responses"]
    fake.enqueue(_answer("Continuing upstream."))
    response = gpt.responses.create(
        model="via-responses", input="and?", previous_response_id="resp_held_upstream"
    )
    assert response.output_text == "Continuing upstream."
    wire = fake.wire_requests[-1]
    assert wire["previous_response_id"] == "resp_held_upstream" and wire["input"] == "and?"
    # the upstream's conversation stays the upstream's: nothing half-known is stored here
    with pytest.raises(openai.NotFoundError):
        gpt.responses.retrieve(response.id)


@pytest.mark.parametrize("order", [("rsp", "oai"), ("oai", "rsp")], ids=["rsp-first", "oai-first"])
def test_a_foreign_previous_id_never_reaches_a_chat_deployment(
    tmp_path: Path, order: tuple[str, str]
) -> None:
    """A model with a Responses deployment and a Chat one, equal weights: an id only the
    Responses upstream holds goes there on every request, whichever deployment the config
    lists first. The Chat deployment would get the new input alone (the conversation
    silently dropped): whether a request may be relayed unchanged is decided per attempt,
    from the deployments that attempt may use."""
    config = parse_config(
        {
            "upstreams": {name: {"kind": "fake"} for name in ("oai", "ant", "rsp")},
            "models": [{"name": "m", "upstream": name, "model": "x"} for name in order],
            "server": {"api_keys": ["sk-test"]},
            "responses": {"url": f"sqlite://{tmp_path}/responses.db"},
        }
    )
    fakes = _fakes()
    with _serve(config, fakes) as url, _client(url) as gpt:
        for _ in range(12):
            response = gpt.responses.create(
                model="m", input="and?", previous_response_id="resp_held_upstream"
            )
            assert response.output_text == "echo: and?"
    assert fakes["via-chat"].requests == []
    sent = fakes["via-responses"].wire_requests
    assert len(sent) == 12
    assert all(wire["previous_response_id"] == "resp_held_upstream" for wire in sent)


def test_a_deleted_ancestor_is_reported(gpt: openai.OpenAI, gateway: Gateway) -> None:
    fake = gateway[1]["via-chat"]
    fake.enqueue(_answer("one"))
    first = gpt.responses.create(model="via-chat", input="1")
    fake.enqueue(_answer("two"))
    second = gpt.responses.create(model="via-chat", input="2", previous_response_id=first.id)
    gpt.responses.delete(first.id)
    with pytest.raises(openai.BadRequestError) as caught:
        gpt.responses.create(model="via-chat", input="3", previous_response_id=second.id)
    assert caught.value.code == "previous_response_not_found"
    assert first.id in caught.value.message


def test_a_failed_stream_is_stored_as_failed(gateway: Gateway) -> None:
    url, fakes = gateway
    fakes["via-chat"].enqueue(
        [TextDelta(0, "Half an ans"), StreamError(UpstreamError("upstream died", status=502))]
    )
    headers = {"authorization": "Bearer sk-test"}
    body = {"model": "via-chat", "input": "hi", "stream": True}
    with httpx.stream("POST", url + "/v1/responses", json=body, headers=headers) as answer:
        events = [line for line in answer.iter_lines() if line.startswith("data: ")]
    final = orjson.loads(events[-1][6:])
    assert final["type"] == "response.failed"
    rid = final["response"]["id"]
    stored = httpx.get(f"{url}/v1/responses/{rid}", headers=headers).json()
    assert stored["status"] == "failed" and stored["error"]["code"] == "server_error"


def test_background_is_refused(gpt: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        gpt.responses.create(model="via-chat", input="hi", background=True)
    assert caught.value.param == "background" and caught.value.code == "unsupported_parameter"


def test_the_endpoints_need_the_key(gateway: Gateway, gpt: openai.OpenAI) -> None:
    gateway[1]["via-chat"].enqueue(_answer("secret"))
    rid = gpt.responses.create(model="via-chat", input="hi").id
    for method, path in [
        ("GET", f"/v1/responses/{rid}"),
        ("GET", f"/responses/{rid}/input_items"),
        ("DELETE", f"/v1/responses/{rid}"),
    ]:
        assert httpx.request(method, gateway[0] + path).status_code == 401
    assert gpt.responses.retrieve(rid).output_text == "secret"


def test_list_parameters_are_checked(gpt: openai.OpenAI, gateway: Gateway) -> None:
    gateway[1]["via-chat"].enqueue(_answer("x"))
    rid = gpt.responses.create(model="via-chat", input="hi").id
    for bad in ({"limit": 0}, {"limit": 101}, {"order": "up"}, {"after": "msg_nope"}):
        with pytest.raises(openai.BadRequestError) as caught:
            gpt.responses.input_items.list(rid, **bad)  # type: ignore[arg-type]
        assert caught.value.param == next(iter(bad))
    with pytest.raises(openai.BadRequestError) as replay:
        gpt.responses.retrieve(rid, stream=True)
    assert replay.value.param == "stream"


def test_expired_responses_are_gone(tmp_path: Path) -> None:
    fakes = _fakes()
    with _serve(_config(tmp_path, expire_after=0.5), fakes) as url, _client(url) as gpt:
        fakes["via-chat"].enqueue(_answer("short-lived"))
        rid = gpt.responses.create(model="via-chat", input="hi").id
        assert gpt.responses.retrieve(rid).output_text == "short-lived"
        time.sleep(0.7)
        with pytest.raises(openai.NotFoundError):
            gpt.responses.retrieve(rid)
        with pytest.raises(openai.BadRequestError):
            gpt.responses.create(model="via-chat", input="and?", previous_response_id=rid)


def test_a_failing_store_never_fails_an_answer(tmp_path: Path) -> None:
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("")
    config = replace(
        _config(tmp_path),
        responses=replace(_config(tmp_path).responses, url=f"sqlite://{blocked}/r.db"),
    )
    fakes = _fakes()
    with _serve(config, fakes) as url, _client(url) as gpt:
        for model in ("via-chat", "via-responses"):
            fakes[model].enqueue(_answer("still answered"))
            assert gpt.responses.create(model=model, input="hi").output_text == "still answered"
            fakes[model].enqueue(_answer("streamed anyway"))
            assert _create(gpt, True, model=model, input="hi").output_text == "streamed anyway"
        with pytest.raises(openai.InternalServerError) as caught:
            gpt.responses.retrieve("resp_x")
        assert caught.value.status_code == 503


def test_storing_off_in_the_config(tmp_path: Path) -> None:
    fakes = _fakes()
    with _serve(_config(tmp_path, store=False), fakes) as url, _client(url) as gpt:
        fakes["via-chat"].enqueue(_answer("unkept"))
        response = gpt.responses.create(model="via-chat", input="hi")
        assert response.store is False
        with pytest.raises(openai.NotFoundError) as caught:
            gpt.responses.retrieve(response.id)
        assert "responses.store is false" in caught.value.message
    assert not (tmp_path / "responses.db").exists()
