"""Several requests decoded side by side in one llama.cpp context (docs/decisions.md,
"Local engine: parallel sequences in one context, n_ctx per request, caches kept").

On the bundled SmolLM2-135M with four places. What a batch must not change is checked
against the same engine's own output for the request alone, never against fixed text:
another CPU rounds the logits differently (an AMD EPYC stopped after 11 tokens where a
test expected 30). Where a test needs an answer that cannot end early, a ``json_schema``
``const`` forces it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator

import pytest

from interlingua.core import (
    Message,
    Request,
    ResponseFormat,
    StopReason,
    StreamEnd,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    fold,
)
from interlingua.upstreams.local import LocalUpstream
from interlingua.upstreams.local.engine import LlamaEngine
from interlingua.upstreams.local.prompt import chat_messages

from ..local_model import loaded_engine

LONG = "Once upon a time, a dragon lived alone on a high and windy mountain. " * 3
PROMPTS = (
    "Write a story about a dragon.",
    "Describe the sea in winter.",
    "List some fruits and their colors.",
    "Explain how a bicycle works.",
)
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 20}, "population": {"type": "integer"}},
    "required": ["city", "population"],
    "additionalProperties": False,
}


def ask(text: str, **kw: object) -> Request:
    return Request(model="smollm2", messages=(Message("user", (TextPart(text),)),), **kw)  # type: ignore[arg-type]


def forced(text: str) -> ResponseFormat:
    return ResponseFormat("json_schema", name="forced", schema={"const": text})


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaEngine]:
    with loaded_engine(1024, parallel=4) as eng:
        yield eng


@pytest.fixture
def local(engine: LlamaEngine) -> LocalUpstream:
    return LocalUpstream("local", engine, max_queue=4)


class Timeline:
    """The order in which several streams' events arrive."""

    def __init__(self) -> None:
        self.marks: list[tuple[str, int]] = []

    async def run(self, i: int, events: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
        got: list[StreamEvent] = []
        async for event in events:
            if isinstance(event, TextDelta) and not any(isinstance(e, TextDelta) for e in got):
                self.marks.append(("first", i))
            elif isinstance(event, StreamEnd):
                self.marks.append(("end", i))
            got.append(event)
        return got

    def position(self, kind: str, i: int) -> int:
        return self.marks.index((kind, i))


async def test_four_streams_all_start_before_any_finishes(local: LocalUpstream) -> None:
    assert local.engine.parallel == 4
    timeline = Timeline()
    requests = [
        ask(p, max_tokens=24, seed=i, response_format=forced(LONG)) for i, p in enumerate(PROMPTS)
    ]
    results = await asyncio.gather(
        *(timeline.run(i, local.stream(r)) for i, r in enumerate(requests))
    )
    last_start = max(timeline.position("first", i) for i in range(4))
    first_end = min(timeline.position("end", i) for i in range(4))
    assert last_start < first_end, timeline.marks
    for events in results:
        response = fold(events)
        assert response.stop_reason is StopReason.MAX_TOKENS
        assert response.usage.output_tokens == 24
        assert f'"{LONG}'.startswith(response.text)


async def test_each_batched_answer_equals_its_answer_alone(local: LocalUpstream) -> None:
    # Greedy (temperature 0) with a fixed seed: one answer per prompt on this CPU, which
    # the same engine gives alone; decoding beside three others must not change it.
    requests = [ask(p, temperature=0, seed=7, max_tokens=20) for p in PROMPTS]
    alone = [(await local.complete(r)).text for r in requests]
    together = await asyncio.gather(*(local.complete(r) for r in requests))
    assert [r.text for r in together] == alone
    # ...also when they arrive one step apart, prompts read beside others' answers.
    staggered: list[asyncio.Task[str]] = []
    for r in requests:
        staggered.append(asyncio.create_task(_text(local, r)))
        await asyncio.sleep(0.02)
    assert [await t for t in staggered] == alone


async def _text(local: LocalUpstream, request: Request) -> str:
    return (await local.complete(request)).text


async def test_closing_one_stream_leaves_the_others_running(local: LocalUpstream) -> None:
    streams = [local.stream(ask(p, max_tokens=30, response_format=forced(LONG))) for p in PROMPTS]
    for stream in streams:  # all four running: each has its first text
        while not isinstance(await anext(stream), TextDelta):
            pass
    assert local.slot.held == 4
    await streams[1].aclose()  # type: ignore[attr-defined]
    assert local.slot.held == 3  # its place is free at once
    rest = [[e async for e in s] for i, s in enumerate(streams) if i != 1]
    for events in rest:
        end = events[-1]
        assert isinstance(end, StreamEnd), end
        assert end.stop_reason is StopReason.MAX_TOKENS
        assert end.usage.output_tokens == 30
    assert not local.slot.busy


async def test_a_schema_and_free_text_in_one_batch_each_keep_their_constraint(
    local: LocalUpstream,
) -> None:
    city = ask("Give a city and its population as JSON.", response_format=ResponseFormat(
        "json_schema", name="city", schema=SCHEMA), max_tokens=60, seed=3)  # fmt: skip
    free = ask(PROMPTS[0], temperature=0, seed=3, max_tokens=20)
    free_alone = (await local.complete(free)).text
    structured, text = await asyncio.gather(local.complete(city), local.complete(free))
    data = json.loads(structured.text)
    assert set(data) == {"city", "population"}
    assert isinstance(data["city"], str) and len(data["city"]) <= 20
    assert isinstance(data["population"], int)
    assert text.text == free_alone  # no grammar leaked into the free-text sequence


async def test_a_second_turn_reads_only_the_new_tokens(
    local: LocalUpstream, engine: LlamaEngine
) -> None:
    first = ask("Name three rivers of Europe, briefly.", temperature=0, seed=1, max_tokens=12)
    answer = await local.complete(first)
    first_prompt = engine.tokenize(engine.render(chat_messages(first)))
    # Others run in between: they take other places and leave this conversation's cache.
    await asyncio.gather(*(local.complete(ask(p, max_tokens=4)) for p in PROMPTS[:3]))
    second = Request(
        model="smollm2",
        messages=(
            *first.messages,
            Message("assistant", (TextPart(answer.text),)),
            Message("user", (TextPart("And of Asia?"),)),
        ),
        max_tokens=4,
    )
    events = [e async for e in local.stream(second)]
    second_prompt = engine.tokenize(engine.render(chat_messages(second)))
    start, end = events[0], events[-1]
    assert isinstance(start, StreamStart) and isinstance(end, StreamEnd)
    assert start.usage is not None
    cached = end.usage.cache_read_tokens
    assert start.usage.cache_read_tokens == cached
    # The whole first prompt, and the answer as far as it tokenizes the same way again
    # (the cache holds every generated token but the last, which was never decoded).
    assert len(first_prompt) <= cached <= len(first_prompt) + answer.usage.output_tokens
    assert cached < len(second_prompt) == end.usage.input_tokens
