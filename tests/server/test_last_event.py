"""Catching a relayed Responses stream's final object (server/last_event.py), and the
normalization of a request's own input items (server/responses/state.py)."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator

import orjson
import pytest

from interlingua.server.last_event import LastEvent, keep_last_response, terminal_response
from interlingua.server.responses.state import item_ids, normalize_input, resolve
from interlingua.usage import Chain, Link

FINAL = {"id": "resp_1", "status": "completed", "output": [{"type": "message", "text": "é\n"}]}
EVENTS = [
    b'event: response.created\ndata: {"type":"response.created","response":{"id":"resp_1"}}\n\n',
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"a"}\n\n',
    b": keep-alive\n\n",
    b"event: response.completed\ndata: "
    + orjson.dumps({"type": "response.completed", "response": FINAL})
    + b"\n\n",
]


def _final(chunks: list[bytes]) -> dict[str, object] | None:
    last = LastEvent()
    for chunk in chunks:
        last.feed(chunk)
    return next(
        (r for e in reversed(last.events()) if (r := terminal_response(e)) is not None), None
    )


@pytest.mark.parametrize("tail", [b"", b": bye\n\n", b"\n"])
def test_the_terminal_event_is_found_however_the_bytes_are_split(tail: bytes) -> None:
    data = b"".join(EVENTS) + tail
    assert _final([data]) == FINAL
    assert _final([data[i : i + 1] for i in range(len(data))]) == FINAL  # byte by byte
    rng = random.Random(7)
    for _ in range(500):
        cuts = sorted(rng.sample(range(1, len(data)), rng.randint(1, 12)))
        chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        assert _final(chunks) == FINAL


def test_a_stream_without_a_terminal_event_has_none() -> None:
    assert _final(EVENTS[:3]) is None
    assert _final([]) is None
    assert terminal_response(b"data: not json") is None


def test_last_event_holds_at_most_two_events() -> None:
    last = LastEvent()
    for _ in range(1000):
        last.feed(EVENTS[1])
    assert len(last._pieces) <= 2


async def test_keep_last_response_relays_unchanged_then_keeps() -> None:
    kept: list[bytes] = []

    async def keep(body: bytes) -> None:
        kept.append(body)

    async def chunks() -> AsyncIterator[bytes]:
        for event in EVENTS:
            yield event

    relayed = [chunk async for chunk in keep_last_response(chunks(), keep)]
    assert relayed == EVENTS
    assert [orjson.loads(k) for k in kept] == [FINAL]


def test_input_is_normalized_to_listed_items() -> None:
    assert normalize_input("hi") == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    ]
    items = normalize_input(
        [
            {"role": "assistant", "content": "yes"},
            {"type": "function_call_output", "call_id": "c", "output": "1"},
            {"id": "rs_own", "type": "reasoning", "summary": []},
        ]
    )
    assert items[0] == {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "yes", "annotations": []}],
    }
    ids = item_ids(items)
    assert ids[0].startswith("msg_") and ids[1].startswith("fco_") and ids[2] == "rs_own"
    assert "id" not in items[0]  # minted ids are kept apart, never sent upstream


async def test_resolve_rebuilds_oldest_first_without_old_instructions() -> None:
    first = Link(
        "resp_a", None, [{"type": "message", "role": "user", "content": "q1"}], ["msg_1"],
        {"output": [{"type": "message", "role": "assistant", "content": "a1"}]},
    )  # fmt: skip

    async def lookup(rid: str) -> Chain | None:
        return Chain([first]) if rid == "resp_a" else None

    body = {"model": "m", "input": "q2", "previous_response_id": "resp_a", "instructions": "I"}
    turn = await resolve(body, lookup, storing=True)
    assert turn.body["input"] == [
        {"type": "message", "role": "user", "content": "q1"},
        {"type": "message", "role": "assistant", "content": "a1"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q2"}]},
    ]
    assert "previous_response_id" not in turn.body and turn.body["instructions"] == "I"
    assert turn.store and turn.previous_response_id == "resp_a"
    assert turn.ancestors == {"resp_a"}


async def test_resolve_touches_nothing_without_state() -> None:
    async def lookup(rid: str) -> Chain | None:
        raise AssertionError("no lookup without previous_response_id")

    body = {"model": "m", "input": "hi", "store": False}
    turn = await resolve(body, lookup, storing=True)
    assert turn.body is body and not turn.store and turn.items == []
