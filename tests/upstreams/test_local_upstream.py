"""LocalUpstream: neutral events, usage, refusals, the slot, cancellation, text tools.

Most tests run the bundled SmolLM2-135M (one model load per module, a fraction of a
second); the text-processing paths use a scripted engine so their output is exact.

Sampled text (even greedy) differs from one CPU to another, so where a test needs exact
text or an exact token count, a ``json_schema`` ``const`` forces the answer (:func:`forced`);
elsewhere only invariants are checked.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence

import pytest

from interlingua.config import ConfigError, UpstreamConfig
from interlingua.core import (
    AudioPart,
    BlockStart,
    BlockStop,
    ImagePart,
    Message,
    ReasoningPart,
    Request,
    ResponseFormat,
    StopReason,
    StreamEnd,
    StreamError,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    TokenLogprob,
    ToolCallPart,
    ToolChoice,
    ToolSpec,
    fold,
)
from interlingua.errors import InvalidRequestError, OverloadedError, UpstreamError
from interlingua.upstreams import build_upstream
from interlingua.upstreams.local import LocalUpstream, create_upstream
from interlingua.upstreams.local.engine import Finish, Job, LlamaEngine, Started
from interlingua.upstreams.local.prompt import chat_messages

from ..local_model import loaded_engine

QUESTION = "What is the capital of France?"
STORY = "Write a very long story about a dragon."
#: Long enough that a forced answer cannot end within the max_tokens of these tests.
LONG = "Once upon a time, a dragon lived alone on a high and windy mountain. " * 3


def ask(text: str = QUESTION, **kw: object) -> Request:
    return Request(model="smollm2", messages=(Message("user", (TextPart(text),)),), **kw)  # type: ignore[arg-type]


def forced(text: str) -> ResponseFormat:
    """A response format that allows exactly the JSON string ``text`` (quotes included).

    llama.cpp compiles a ``const`` to a grammar with no optional whitespace, so the model
    cannot end its turn before the last character, nor write anything else.
    """
    return ResponseFormat("json_schema", name="forced", schema={"const": text})


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaEngine]:
    with loaded_engine(2048) as eng:
        yield eng


@pytest.fixture
def local(engine: LlamaEngine) -> LocalUpstream:
    return LocalUpstream("local", engine, max_queue=1)


async def collect(events: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
    return [event async for event in events]


# --- the model through the upstream -------------------------------------------------------


async def test_stream_is_one_text_block_with_true_token_counts(
    local: LocalUpstream, engine: LlamaEngine
) -> None:
    answer = "The capital of France is Paris."
    request = ask(seed=1, max_tokens=40, response_format=forced(answer))
    events = await collect(local.stream(request))
    start, block, *deltas, stop, end = events
    prompt_tokens = len(engine.tokenize(engine.render(chat_messages(request))))
    assert isinstance(start, StreamStart) and start.model == "smollm2"
    assert start.usage is not None and start.usage.input_tokens == prompt_tokens
    assert block == BlockStart(0, TextPart(""))
    assert all(isinstance(d, TextDelta) and d.index == 0 and d.text for d in deltas)
    assert stop == BlockStop(0)
    assert isinstance(end, StreamEnd)
    assert end.usage.input_tokens == prompt_tokens
    # Forced ASCII: every generated token is whole characters, so one delta, whichever
    # tokens the sampler picked to spell it; the count is checkable.
    assert end.usage.output_tokens == len(deltas)
    assert end.stop_reason is StopReason.END_TURN
    assert fold(events).text == f'"{answer}"'
    assert await local.count_tokens(request) == prompt_tokens


async def test_complete_is_the_folded_stream(local: LocalUpstream) -> None:
    request = ask(seed=2, max_tokens=25)
    # Asked once first, so that the stream and the complete both start from the prompt
    # cache this request leaves, whatever an earlier test of the module left there.
    await local.complete(request)
    streamed = fold(await collect(local.stream(request)))
    completed = await local.complete(request)
    assert completed.text == streamed.text  # same seed, same cache state: same tokens
    assert completed.usage == streamed.usage
    assert completed.stop_reason == streamed.stop_reason


async def test_max_tokens_gives_max_tokens_with_that_many_tokens(local: LocalUpstream) -> None:
    # Forced: unforced, the model may end its turn within 5 tokens on some CPU.
    response = await local.complete(ask(STORY, max_tokens=5, response_format=forced(LONG)))
    assert response.stop_reason is StopReason.MAX_TOKENS
    assert response.usage.output_tokens == 5
    assert response.text and f'"{LONG}'.startswith(response.text)


async def test_stop_sequence_trims_and_is_reported(local: LocalUpstream) -> None:
    # Forced, not greedy: greedy text may differ on another CPU (near ties).
    request = ask(
        "Count from 1 to 10, separated by commas.",
        stop=("3",),
        response_format=forced("1, 2, 3, 4, 5"),
    )
    response = await local.complete(request)
    assert response.text == '"1, 2, '
    assert response.stop_reason is StopReason.STOP_SEQUENCE
    assert response.stop_sequence == "3"


async def test_images_are_refused_before_the_stream_starts(local: LocalUpstream) -> None:
    request = Request(
        model="smollm2",
        messages=(Message("user", (TextPart("What is this?"), ImagePart(url="http://x/a.png"))),),
    )
    with pytest.raises(InvalidRequestError, match="does not accept images"):
        await anext(local.stream(request))
    assert not local.slot.busy


async def test_closing_the_stream_frees_the_model_at_once(local: LocalUpstream) -> None:
    events = local.stream(ask(STORY, max_tokens=2000))
    assert isinstance(await anext(events), StreamStart)
    await anext(events)
    assert local.slot.busy
    closed_at = time.monotonic()
    await events.aclose()  # sets the cancel flag and waits for the worker
    assert time.monotonic() - closed_at < 1.0
    assert not local.slot.busy
    assert not local._running
    # ...and the next request runs normally.
    response = await local.complete(ask(max_tokens=3, response_format=forced(LONG)))
    assert response.usage.output_tokens == 3


async def test_cancelling_the_consumer_task_frees_the_model(local: LocalUpstream) -> None:
    started = asyncio.Event()

    async def consume() -> None:
        async for _ in local.stream(ask(STORY, max_tokens=2000)):
            started.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), 10)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not local.slot.busy


async def hold_every_place(local: LocalUpstream) -> list[AsyncIterator[StreamEvent]]:
    """Start as many long generations as the model runs side by side."""
    streams = [local.stream(ask(STORY, max_tokens=2000)) for _ in range(local.engine.parallel)]
    for stream in streams:
        await anext(stream)
    assert local.slot.held == local.engine.parallel
    return streams


async def test_a_full_line_is_refused_with_429(engine: LlamaEngine) -> None:
    local = LocalUpstream("local", engine, max_queue=0)
    busy = await hold_every_place(local)
    try:
        with pytest.raises(OverloadedError) as info:
            await anext(local.stream(ask()))
        assert info.value.status == 429
        assert info.value.retry_after == 1.0
        assert info.value.message == "local model is busy: 0 requests waiting"
    finally:
        for stream in busy:
            await stream.aclose()  # type: ignore[attr-defined]


async def test_a_waiting_request_runs_when_a_place_frees(local: LocalUpstream) -> None:
    first, *others = await hold_every_place(local)
    waiting = asyncio.create_task(local.complete(ask(max_tokens=4, response_format=forced(LONG))))
    await asyncio.sleep(0.05)
    assert local.slot.waiting == 1 and not waiting.done()
    await first.aclose()  # type: ignore[attr-defined]
    response = await asyncio.wait_for(waiting, 10)
    assert response.usage.output_tokens == 4
    for stream in others:
        await stream.aclose()  # type: ignore[attr-defined]


# --- context length -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def small() -> Iterator[LocalUpstream]:
    cfg = UpstreamConfig(name="small", kind="local", options={"bundled": "smollm2", "n_ctx": 64})
    upstream = create_upstream(cfg, None)
    yield upstream
    upstream.engine.close()


async def test_a_prompt_too_long_is_context_length_exceeded(small: LocalUpstream) -> None:
    with pytest.raises(InvalidRequestError) as info:
        await small.complete(ask("word " * 200))
    error = info.value
    assert error.status == 400
    assert error.code == "context_length_exceeded"
    assert error.param == "messages"
    assert error.message.startswith("prompt is too long: ")
    assert error.message.endswith(" tokens > 63 maximum")
    assert not small.slot.busy


async def test_max_tokens_is_clipped_to_what_fits(small: LocalUpstream) -> None:
    request = ask(STORY, max_tokens=1000)
    response = await small.complete(request)
    room = 64 - response.usage.input_tokens
    assert response.usage.output_tokens <= room
    if response.stop_reason is StopReason.MAX_TOKENS:
        assert response.usage.output_tokens == room


async def test_the_model_loads_lazily_without_start(small: LocalUpstream) -> None:
    # `small` was built by the registry's factory and never started: a request loads it
    # (whichever test asks first; this one does not count on an earlier one having asked).
    assert await small.count_tokens(ask()) > 10
    assert small.engine.loaded
    fresh = create_upstream(
        UpstreamConfig(name="f", kind="local", options={"bundled": "smollm2", "n_ctx": 64}), None
    )
    assert not fresh.engine.loaded
    assert await fresh.count_tokens(ask()) > 10
    assert fresh.engine.loaded
    await fresh.aclose()
    assert not fresh.engine.loaded


# --- config -------------------------------------------------------------------------------


def test_from_config_takes_the_local_options() -> None:
    cfg = UpstreamConfig(
        name="smol",
        kind="local",
        options={
            "bundled": "smollm2",
            "n_ctx": 1024,
            "n_threads": 3,
            "parallel": 2,
            "max_queue": 2,
            "think_tags": True,
            "text_tool_calls": False,
            "chat_template": "{{ messages }}",
        },
    )
    upstream = build_upstream(cfg, None)
    assert isinstance(upstream, LocalUpstream)
    assert upstream.dialect is None  # never the passthrough path
    assert (upstream.engine.n_ctx, upstream.engine.n_threads) == (1024, 3)
    assert upstream.slot.max_queue == 2
    assert upstream.engine.parallel == upstream.slot.capacity == 2
    assert (upstream.think_tags, upstream.text_tool_calls) == (True, False)
    assert upstream.engine._template_override == "{{ messages }}"
    assert not upstream.engine.loaded


def test_from_config_defaults() -> None:
    upstream = create_upstream(
        UpstreamConfig(name="l", kind="local", options={"bundled": "smollm2"}), None
    )
    assert upstream.engine.n_ctx == 8192
    assert upstream.slot.max_queue == 16
    assert (upstream.think_tags, upstream.text_tool_calls) == (False, True)


def test_a_missing_model_file_is_a_config_error() -> None:
    cfg = UpstreamConfig(name="l", kind="local", options={"path": "/no/such/model.gguf"})
    with pytest.raises(ConfigError, match=r"upstreams\.l\.path: no such model file"):
        create_upstream(cfg, None)


# --- text processing, on a scripted engine ------------------------------------------------


class ScriptedEngine(LlamaEngine):
    """An engine that 'generates' the given pieces, honouring cancel, with no model."""

    def __init__(self, pieces: Sequence[str], finish: Finish | Exception | None = None) -> None:
        super().__init__("/scripted.gguf", n_ctx=1000)
        self.pieces = list(pieces)
        self.finish = finish or Finish(StopReason.END_TURN, None, len(self.pieces))
        self.prompts: list[str] = []

    @property
    def loaded(self) -> bool:
        return True

    def load(self) -> None:
        pass

    def close(self) -> None:
        pass

    def render(self, messages: Sequence[dict[str, str]], *, prefill: bool = False) -> str:
        prompt = "\n".join(f"{m['role']}: {m['content']}" for m in messages)
        self.prompts.append(prompt)
        return prompt

    def tokenize(self, prompt: str) -> list[int]:
        return list(range(len(prompt.split())))

    def submit(self, job: Job) -> None:
        threading.Thread(target=self.run, args=(job,), daemon=True).start()

    def run(self, job: Job) -> None:
        try:
            job.emit(Started(0))
            for piece in self.pieces:
                if job.cancel.is_set():
                    return
                job.emit(piece)
            job.emit(self.finish)
        finally:
            job.finished()


WEATHER = ToolSpec("get_weather", "Weather", {"type": "object", "properties": {}})
CALL_TEXT = (
    'Let me check.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
)


async def test_tool_calls_written_as_text_become_tool_call_blocks() -> None:
    engine = ScriptedEngine(list(CALL_TEXT))  # one character per "token"
    local = LocalUpstream("local", engine)
    events = await collect(local.stream(ask("Weather in Paris?", tools=(WEATHER,))))
    response = fold(events)
    assert response.text == "Let me check."
    (call,) = response.tool_calls
    assert (call.name, call.arguments) == ("get_weather", '{"city":"Paris"}')
    assert call.id.startswith("call_")
    assert response.stop_reason is StopReason.TOOL_USE
    assert isinstance(response.parts[1], ToolCallPart)
    assert "get_weather" in engine.prompts[0]  # the tools prompt reached the model


async def test_tool_choice_none_leaves_the_text_alone() -> None:
    local = LocalUpstream("local", ScriptedEngine([CALL_TEXT]))
    request = ask("Weather?", tools=(WEATHER,), tool_choice=ToolChoice("none"))
    response = await local.complete(request)
    assert response.text == CALL_TEXT and not response.tool_calls


async def test_text_tool_calls_off_leaves_the_text_alone() -> None:
    engine = ScriptedEngine([CALL_TEXT])
    local = LocalUpstream("local", engine, text_tool_calls=False)
    response = await local.complete(ask("Weather?", tools=(WEATHER,)))
    assert response.text == CALL_TEXT and not response.tool_calls
    assert "get_weather" not in engine.prompts[0]


async def test_think_tags_become_reasoning() -> None:
    local = LocalUpstream(
        "local", ScriptedEngine(["<thi", "nk>hmm</th", "ink>\n\nHi"]), think_tags=True
    )
    response = await local.complete(ask())
    assert response.parts == (ReasoningPart("hmm"), TextPart("Hi"))


async def test_a_failure_in_the_engine_is_an_in_band_error() -> None:
    local = LocalUpstream("local", ScriptedEngine(["partial"], RuntimeError("boom")))
    events = await collect(local.stream(ask()))
    assert isinstance(events[-1], StreamError)
    error = events[-1].error
    assert isinstance(error, UpstreamError)
    assert error.message == "local model failed: RuntimeError: boom"
    assert not local.slot.busy


async def test_cancelling_a_non_streaming_call_frees_the_model(engine: LlamaEngine) -> None:
    local = LocalUpstream("local", engine)
    task = asyncio.create_task(local.complete(ask(STORY, max_tokens=2000)))
    for _ in range(500):
        if local.slot.busy:
            break
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # generating now
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not local.slot.busy and not local._running


# --- logprobs and samplers ------------------------------------------------------------


def _check_logprobs(tokens: tuple[TokenLogprob, ...], text: str, top: int) -> None:
    """Invariants of llama.cpp-style logprobs that hold on any CPU."""
    assert "".join(t.token for t in tokens) == text  # ASCII: every token is whole text
    for t in tokens:
        assert t.logprob <= 0.0
        assert t.bytes == tuple(t.token.encode())
        assert len(t.top_logprobs) == top
        values = [a.logprob for a in t.top_logprobs]
        assert values == sorted(values, reverse=True)
        if top:
            # the alternatives are the most likely tokens of the whole vocabulary
            assert values[0] >= t.logprob
            assert sum(math.exp(v) for v in values) <= 1.0 + 1e-6


async def test_logprobs_stream_with_each_delta_and_fold_into_the_text(
    local: LocalUpstream,
) -> None:
    answer = "Paris is the capital."
    request = ask(seed=3, max_tokens=40, response_format=forced(answer), logprobs=True,
                  top_logprobs=3)  # fmt: skip
    events = await collect(local.stream(request))
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert deltas and all(d.logprobs for d in deltas)
    for delta in deltas:  # each delta's tokens spell that delta
        assert "".join(t.token for t in delta.logprobs or ()) == delta.text
    folded = fold(events)
    part = folded.parts[0]
    assert isinstance(part, TextPart) and part.logprobs is not None
    assert len(part.logprobs) == folded.usage.output_tokens
    _check_logprobs(part.logprobs, f'"{answer}"', 3)


async def test_logprobs_non_stream_and_none_unless_asked(local: LocalUpstream) -> None:
    forced_answer = forced("Yes.")
    response = await local.complete(ask(response_format=forced_answer, logprobs=True))
    part = response.parts[0]
    assert isinstance(part, TextPart) and part.logprobs
    _check_logprobs(part.logprobs, '"Yes."', 0)
    plain = await local.complete(ask(response_format=forced_answer))
    assert all(getattr(p, "logprobs", None) is None for p in plain.parts)
    assert not any(
        isinstance(e, TextDelta) and e.logprobs is not None
        for e in await collect(local.stream(ask(response_format=forced_answer)))
    )


async def test_top_k_one_is_greedy_whatever_the_seed(local: LocalUpstream) -> None:
    # top_k=1 leaves the sampler one candidate: two seeds that sample differently at a
    # high temperature must agree. (Without top_k they are free to differ.)
    texts = {
        (await local.complete(ask(STORY, seed=seed, temperature=1.5, top_k=1, max_tokens=12))).text
        for seed in (1, 2, 3)
    }
    assert len(texts) == 1


async def test_audio_is_refused_before_the_stream_starts(local: LocalUpstream) -> None:
    request = Request(
        model="smollm2",
        messages=(Message("user", (AudioPart(data="UklGRg==", format="wav"),)),),
    )
    with pytest.raises(InvalidRequestError) as info:
        await anext(local.stream(request))
    assert info.value.param == "messages[0].content[0]"
    assert not local.slot.busy
