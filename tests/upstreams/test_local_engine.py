"""The llama.cpp engine on the bundled SmolLM2-135M: template, tokens, generation thread.

Grammars force exact outputs, so the byte-level details (a UTF-8 character split over
tokens, a stop sequence split over tokens) are tested on real tokens, deterministically.

No assertion reads sampled text or the length of a sampled answer: another CPU's kernels
round the logits differently, so the same seed (even greedy decoding, on near ties) can
pick other tokens and stop elsewhere (11 tokens instead of 30 on an AMD EPYC).
What must hold on every machine is forced with a grammar, or checked as an invariant.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from collections.abc import Iterator

import llama_cpp
import pytest
from llama_cpp import LlamaGrammar

from interlingua.config import ConfigError
from interlingua.core import StopReason
from interlingua.errors import UpstreamError
from interlingua.upstreams.local.engine import (
    Finish,
    Item,
    Job,
    LlamaEngine,
    Sampling,
    Started,
)
from interlingua.upstreams.local.kind import bundled_model_path

from ..local_model import loaded_engine

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
#: Forced as the whole answer, it leaves the model no way to stop (end of turn) before
#: its last character: far more than the few tokens that the max_tokens tests allow.
LONG = "Once upon a time, a dragon lived alone on a high and windy mountain. " * 3


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaEngine]:
    with loaded_engine(2048) as eng:
        yield eng


async def generate(
    engine: LlamaEngine,
    messages: list[dict[str, str]],
    *,
    max_tokens: int = 64,
    stops: tuple[str, ...] = (),
    **sampling: object,
) -> tuple[list[str], Finish]:
    """Run one job in a worker thread; return its text items and its Finish."""
    job = Job(
        tokens=engine.tokenize(engine.render(messages)),
        max_tokens=max_tokens,
        sampling=Sampling(**sampling),  # type: ignore[arg-type]
        stops=stops,
        loop=asyncio.get_running_loop(),
    )
    await asyncio.to_thread(engine.run, job)
    items: list[Item] = []
    while not job.queue.empty():
        items.append(job.queue.get_nowait())
    started, *texts, last = items
    assert isinstance(started, Started)
    assert all(isinstance(t, str) for t in texts)
    assert isinstance(last, Finish), last
    return texts, last  # type: ignore[return-value]


def forced(text: str) -> LlamaGrammar:
    """A grammar that allows exactly ``text``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return LlamaGrammar.from_string(f'root ::= "{escaped}"', verbose=False)


def test_the_bundled_model_is_found_without_importing_its_package() -> None:
    path = bundled_model_path("smollm2")
    assert path.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    assert os.path.getsize(path) > 50_000_000
    with pytest.raises(ConfigError, match="unknown bundled model 'llama9'"):
        bundled_model_path("llama9")


def test_the_chat_template_comes_from_the_gguf(engine: LlamaEngine) -> None:
    # SmolLM2's template adds its default system prompt when none is given.
    assert engine.render(QUESTION) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    with_system = engine.render([{"role": "system", "content": "Be brief."}, *QUESTION])
    assert with_system.startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    assert "SmolLM" not in with_system


def test_a_configured_chat_template_overrides_the_gguf() -> None:
    eng = LlamaEngine(
        bundled_model_path("smollm2"),
        n_ctx=64,
        chat_template="{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}>",
    )
    eng.load()
    try:
        assert eng.render(QUESTION) == "[user] What is the capital of France?\n>"
    finally:
        eng.close()


def test_special_tokens_in_the_prompt_are_single_tokens(engine: LlamaEngine) -> None:
    tokens = engine.tokenize("<|im_start|>user\nhi<|im_end|>")
    assert tokens[0] == 1 and tokens[-1] == 2  # <|im_start|>, <|im_end|>
    assert len(tokens) < 8


async def test_max_tokens_stops_after_exactly_that_many(engine: LlamaEngine) -> None:
    # Unforced, the model may answer "Paris." (end of turn) within 5 tokens on some CPU.
    texts, finish = await generate(engine, QUESTION, max_tokens=5, grammar=forced(LONG), seed=1)
    assert finish == Finish(StopReason.MAX_TOKENS, None, 5)
    text = "".join(texts)
    assert text and LONG.startswith(text)  # which 5 tokens spell it is the sampler's choice


async def test_a_character_split_over_tokens_is_decoded_whole(engine: LlamaEngine) -> None:
    target = "héllo 😀 ok"
    pieces = [engine._piece(t) for t in engine.tokenize("😀")]
    assert len(pieces) > 1  # the emoji really spans several tokens
    texts, finish = await generate(engine, QUESTION, grammar=forced(target), seed=1)
    assert "".join(texts) == target
    assert "\ufffd" not in "".join(texts)
    assert finish.stop_reason is StopReason.END_TURN


async def test_a_stop_sequence_split_over_tokens_is_matched_and_trimmed(
    engine: LlamaEngine,
) -> None:
    assert len(engine.tokenize("abc</stop>def")) > 3
    texts, finish = await generate(
        engine, QUESTION, grammar=forced("abc</stop>def"), stops=("</stop>",), seed=1
    )
    assert "".join(texts) == "abc"
    assert finish.stop_reason is StopReason.STOP_SEQUENCE
    assert finish.stop_sequence == "</stop>"


async def test_same_seed_same_answer_also_through_the_prompt_cache(engine: LlamaEngine) -> None:
    first, _ = await generate(engine, QUESTION, seed=3, max_tokens=20)
    # The same prompt again (fully cached), another prompt, one sharing a prefix, then the
    # first again: whatever the cache holds, a seeded request samples the same tokens.
    assert "".join((await generate(engine, QUESTION, seed=3, max_tokens=20))[0]) == "".join(first)
    await generate(engine, [{"role": "user", "content": "Name a color."}], seed=5, max_tokens=5)
    await generate(engine, [{"role": "user", "content": "What is"}], max_tokens=3)
    again, _ = await generate(engine, QUESTION, seed=3, max_tokens=20)
    assert "".join(again) == "".join(first)


def test_the_default_sampling_is_llama_cpp_chat_defaults() -> None:
    # Why these defaults (measured, see Sampling): greedy decoding loops on nonsense on
    # this model, llama-cpp-python's chat defaults answer. What the sampler then says is
    # the CPU's business; that the defaults stay the chat ones is checked here.
    signature = inspect.signature(llama_cpp.Llama.create_chat_completion)
    defaults = Sampling()
    for name in ("temperature", "top_p", "top_k", "min_p", "repeat_penalty"):
        assert getattr(defaults, name) == signature.parameters[name].default, name
    assert (defaults.frequency_penalty, defaults.presence_penalty) == (0.0, 0.0)
    assert defaults.seed is None and defaults.grammar is None


async def test_the_default_sampling_answers_and_finishes_consistently(
    engine: LlamaEngine,
) -> None:
    # Any answer will do, but it is text, and its Finish tells the truth about it: the
    # end of turn before max_tokens, or exactly max_tokens tokens.
    texts, finish = await generate(engine, QUESTION, seed=1, max_tokens=30)
    text = "".join(texts)
    assert text.strip() and "\ufffd" not in text
    assert finish.stop_sequence is None
    if finish.stop_reason is StopReason.MAX_TOKENS:
        assert finish.output_tokens == 30
    else:
        assert finish.stop_reason is StopReason.END_TURN
        assert 0 < finish.output_tokens < 30


async def test_cancel_stops_the_worker_within_a_token(engine: LlamaEngine) -> None:
    story = [{"role": "user", "content": "Write a very long story about a dragon."}]
    job = Job(
        tokens=engine.tokenize(engine.render(story)),
        max_tokens=2000,
        sampling=Sampling(seed=1),
        stops=(),
        loop=asyncio.get_running_loop(),
    )
    worker = asyncio.create_task(asyncio.to_thread(engine.run, job))
    assert isinstance(await asyncio.wait_for(job.queue.get(), 10), Started)
    first = await asyncio.wait_for(job.queue.get(), 10)
    assert isinstance(first, str)
    cancelled_at = time.monotonic()
    job.cancel.set()
    await asyncio.wait_for(worker, 5)
    assert time.monotonic() - cancelled_at < 0.5
    items = [job.queue.get_nowait() for _ in range(job.queue.qsize())]
    assert isinstance(items[-1], UpstreamError)  # "stopped", for a consumer still there
    assert len(items) < 50  # far from the 2000 tokens it was allowed


async def test_cancel_before_the_start_generates_nothing(engine: LlamaEngine) -> None:
    job = Job(
        tokens=engine.tokenize(engine.render(QUESTION)),
        max_tokens=50,
        sampling=Sampling(),
        stops=(),
        loop=asyncio.get_running_loop(),
    )
    job.cancel.set()
    await asyncio.to_thread(engine.run, job)
    assert job.queue.qsize() == 1
    assert isinstance(job.queue.get_nowait(), UpstreamError)
