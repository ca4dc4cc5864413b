"""Stored responses belong to the key that stored them: through the official openai SDK
against a live gateway with two named keys (``team-a``, ``team-b``) and a plain
``server.api_keys`` key, and against one with no keys at all.

Another key's response is answered exactly as a missing one: the same 404 (retrieve,
input_items, delete) and the same 400 ``previous_response_not_found`` (continuing it),
nothing sent upstream -- not even to a Responses upstream, which relays ids the gateway
does not hold. The store's own owner rules are tested in tests/usage/test_response_store.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import openai
import pytest
from websockets.asyncio.client import connect

from interlingua.config import parse_config
from interlingua.core import Request, TextPart
from interlingua.errors import InvalidRequestError
from interlingua.server.keys import ClientKey
from interlingua.server.responses.state import owner_of, resolve
from interlingua.upstreams.fake import FakeUpstream
from interlingua.usage import Chain

from ...conformance.cases import reply
from ...request_ids import without_request_id
from .socket_helpers import create, guarded_gateway, response_events, ws_url

KEY_A = "sk-owner-team-a-0123456789"
KEY_B = "sk-owner-team-b-abcdefghij"
PLAIN = "sk-owner-plain-shared"
MODELS = ["via-chat", "via-responses"]  # translated; passthrough (may relay unknown ids)
Served = tuple[str, dict[str, FakeUpstream]]


def _config(tmp: Path, keys: bool) -> Any:
    raw: dict[str, Any] = {
        "upstreams": {"oai": {"kind": "fake"}, "rsp": {"kind": "fake"}},
        "models": [
            {"name": "via-chat", "upstream": "oai", "model": "deepseek-chat"},
            {"name": "via-responses", "upstream": "rsp", "model": "gpt-5"},
        ],
        "responses": {"url": f"sqlite://{tmp}/responses.db"},
        "usage": False,
    }
    if keys:
        raw["keys"] = [
            {"name": name, "key_sha256": hashlib.sha256(key.encode()).hexdigest()}
            for name, key in (("team-a", KEY_A), ("team-b", KEY_B))
        ]
        raw["server"] = {"api_keys": [PLAIN]}
    return parse_config(raw)


def test_owner_of() -> None:
    assert owner_of(None) == ""  # keys off
    assert owner_of(ClientKey(None, b"d")) == ""  # a server.api_keys key: no name
    assert owner_of(ClientKey("team-a", b"d")) == "team-a"


async def test_an_id_another_owner_holds_is_never_relayed() -> None:
    """``resolve``: an id the owner does not hold goes to a Responses upstream only when
    no other owner holds it either (else the upstream may continue it for anyone)."""
    held = {"resp_theirs"}

    async def lookup(rid: str) -> Chain | None:
        return None  # nothing of this owner's

    async def foreign(rid: str) -> bool:
        return rid in held

    for rid, relayed in (("resp_theirs", False), ("resp_upstreams", True)):
        body = {"model": "m", "input": "hi", "previous_response_id": rid}
        if relayed:
            turn = await resolve(body, lookup, storing=True, may_relay=True, foreign=foreign)
            assert turn.body is body and not turn.store  # sent on as is, not kept
        else:
            with pytest.raises(InvalidRequestError) as caught:
                await resolve(body, lookup, storing=True, may_relay=True, foreign=foreign)
            assert caught.value.code == "previous_response_not_found"
            assert str(caught.value) == f"Previous response with id '{rid}' not found."


def _serve(config: Any) -> Any:
    fakes = {
        "via-chat": FakeUpstream("oai", wire="openai", chunk_size=3),
        "via-responses": FakeUpstream("rsp", wire="responses", chunk_size=3),
    }
    upstreams = {"oai": fakes["via-chat"], "rsp": fakes["via-responses"]}
    return guarded_gateway(config, upstreams), fakes


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    server, fakes = _serve(_config(tmp_path_factory.mktemp("owner"), keys=True))
    with server as (url, _server):
        yield url, fakes


Client = Callable[[str], openai.OpenAI]


@pytest.fixture
def client(served: Served) -> Iterator[Client]:
    """``client(key)``: an SDK client of the gateway with that key (closed after)."""
    made: list[openai.OpenAI] = []

    def make(key: str) -> openai.OpenAI:
        made.append(openai.OpenAI(base_url=served[0] + "/v1", api_key=key, max_retries=0))
        return made[-1]

    yield make
    for one in made:
        one.close()


_IDS = iter(range(10**6))


def _answer(text: str) -> Any:
    """A scripted answer with an id of its own (a Responses upstream's ids are unique)."""
    return replace(reply(text), id=f"resp_own{next(_IDS)}")


def _create(gpt: openai.OpenAI, fake: FakeUpstream, stream: bool, text: str, **ask: Any) -> Any:
    fake.enqueue(_answer(f"answer to {text}"))
    if not stream:
        return gpt.responses.create(input=text, **ask)
    with gpt.responses.stream(input=text, **ask) as events:
        return events.get_final_response()


def _turns(sent: Request) -> list[str]:
    return ["".join(p.text for p in m.parts if isinstance(p, TextPart)) for m in sent.messages]


def _error(call: Callable[[], Any], kind: type[openai.APIStatusError]) -> Any:
    """The error body ``call`` raised, as the SDK parsed it."""
    with pytest.raises(kind) as caught:
        call()
    body = caught.value.body
    if isinstance(body, dict) and "message" in body:  # (compared across requests)
        body["message"] = without_request_id(body["message"])
    return body


def _unknown_id(like: str) -> str:
    """An id of the same shape and length as ``like`` that nobody stored."""
    return like[:-4] + ("zzzz" if not like.endswith("zzzz") else "yyyy")


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", MODELS)
def test_another_key_gets_a_404_for_a_response(
    client: Client, served: Served, model: str, stream: bool
) -> None:
    a, b, plain = client(KEY_A), client(KEY_B), client(PLAIN)
    made = _create(a, served[1][model], stream, "Capital of France?", model=model)
    never = _unknown_id(made.id)
    for other in (b, plain):
        for call in (
            lambda rid, c=other: c.responses.retrieve(rid),
            lambda rid, c=other: c.responses.input_items.list(rid),
            lambda rid, c=other: c.responses.delete(rid),
        ):
            theirs = _error(lambda c=call: c(made.id), openai.NotFoundError)
            missing = _error(lambda c=call: c(never), openai.NotFoundError)
            # the same answer, byte for byte but for the id: nothing says it exists
            assert theirs == {**missing, "message": missing["message"].replace(never, made.id)}
            assert theirs["message"] == f"Response with id '{made.id}' not found."
    # ... and the owner still has all of it (the delete above deleted nothing)
    got = a.responses.retrieve(made.id)
    assert got.id == made.id and got.output_text == "answer to Capital of France?"
    listed = a.responses.input_items.list(made.id)
    assert [item.content[0].text for item in listed.data] == ["Capital of France?"]  # type: ignore[union-attr]
    a.responses.delete(made.id)  # (the SDK returns None; a 404 would raise)
    with pytest.raises(openai.NotFoundError):
        a.responses.retrieve(made.id)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("model", MODELS)
def test_another_key_cannot_continue_a_conversation(
    client: Client, served: Served, model: str, stream: bool
) -> None:
    a, b = client(KEY_A), client(KEY_B)
    fake = served[1][model]
    first = _create(a, fake, stream, "I am Ada.", model=model)
    second = _create(a, fake, stream, "I like blue.", model=model, previous_response_id=first.id)
    for rid in (first.id, second.id):
        before = len(fake.requests)
        body = _error(
            lambda r=rid: b.responses.create(
                model=model, input="Who am I?", previous_response_id=r
            ),
            openai.BadRequestError,
        )
        assert body == {
            "message": f"Previous response with id '{rid}' not found.",
            "type": "invalid_request_error",
            "param": "previous_response_id",
            "code": "previous_response_not_found",
        }
        # nothing went upstream: a Responses upstream holding the id under the gateway's
        # own key would have continued team-a's conversation for team-b
        assert len(fake.requests) == before
    third = _create(a, fake, stream, "Who am I?", model=model, previous_response_id=second.id)
    assert _turns(fake.requests[-1]) == [
        "I am Ada.", "answer to I am Ada.", "I like blue.", "answer to I like blue.", "Who am I?"
    ]  # fmt: skip
    listed = a.responses.input_items.list(third.id, order="asc")
    assert len(listed.data) == 5
    with pytest.raises(openai.NotFoundError):
        b.responses.input_items.list(third.id)


def test_an_id_held_nowhere_still_goes_to_a_responses_upstream(
    client: Client, served: Served
) -> None:
    fake = served[1]["via-responses"]
    fake.enqueue(_answer("Continuing upstream."))
    answer = client(KEY_B).responses.create(
        model="via-responses", input="and?", previous_response_id="resp_held_upstream"
    )
    assert answer.output_text == "Continuing upstream."
    assert fake.wire_requests[-1]["previous_response_id"] == "resp_held_upstream"


def test_each_key_continues_its_own(client: Client, served: Served) -> None:
    """Two keys, two conversations side by side: each sees only its own."""
    fake = served[1]["via-chat"]
    own = {}
    for key in (KEY_A, KEY_B, PLAIN):
        gpt = client(key)
        first = _create(gpt, fake, False, f"hello from {key}", model="via-chat")
        _create(gpt, fake, False, "again", model="via-chat", previous_response_id=first.id)
        assert _turns(fake.requests[-1]) == [f"hello from {key}", f"answer to hello from {key}",
                                             "again"]  # fmt: skip
        own[key] = first.id
    for key, rid in own.items():
        for other in (KEY_A, KEY_B, PLAIN):
            if other == key:
                assert client(other).responses.retrieve(rid).id == rid
            else:
                with pytest.raises(openai.NotFoundError):
                    client(other).responses.retrieve(rid)


async def test_a_websocket_turn_cannot_continue_another_keys_response(
    client: Client, served: Served
) -> None:
    url, fakes = served
    mine = _create(client(KEY_A), fakes["via-chat"], False, "secret plans", model="via-chat")
    before = len(fakes["via-chat"].requests)
    async with connect(ws_url(url), additional_headers={"x-api-key": KEY_B}) as ws:
        await ws.send(create("via-chat", "tell me", previous_response_id=mine.id))
        (error,) = await response_events(ws)
        assert error["type"] == "error" and error["status"] == 400
        assert error["error"]["code"] == "previous_response_not_found"
        message = without_request_id(error["error"]["message"])
        assert message == f"Previous response with id '{mine.id}' not found."
    assert len(fakes["via-chat"].requests) == before
    async with connect(ws_url(url), additional_headers={"x-api-key": KEY_A}) as ws:
        await ws.send(create("via-chat", "go on", previous_response_id=mine.id))
        assert (await response_events(ws))[-1]["type"] == "response.completed"
    assert _turns(fakes["via-chat"].requests[-1])[0] == "secret plans"


@pytest.mark.parametrize("model", MODELS)
def test_without_keys_everything_works_as_before(tmp_path: Path, model: str) -> None:
    server, fakes = _serve(_config(tmp_path, keys=False))
    fake = fakes[model]
    with (
        server as (url, _server),
        openai.OpenAI(base_url=url + "/v1", api_key="anything", max_retries=0) as gpt,
    ):
        first = _create(gpt, fake, False, "I am Ada.", model=model)
        second = _create(gpt, fake, True, "Who am I?", model=model, previous_response_id=first.id)
        assert _turns(fake.requests[-1]) == ["I am Ada.", "answer to I am Ada.", "Who am I?"]
        assert gpt.responses.retrieve(second.id).output_text == "answer to Who am I?"
        listed = gpt.responses.input_items.list(second.id, order="asc")
        assert [item.content[0].text for item in listed.data] == [  # type: ignore[union-attr]
            "I am Ada.", "answer to I am Ada.", "Who am I?"
        ]  # fmt: skip
        gpt.responses.delete(first.id)
        with pytest.raises(openai.NotFoundError):
            gpt.responses.retrieve(first.id)
