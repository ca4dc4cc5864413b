"""The local engine continues a prefill: its prompt is the chat template without the
generation prompt, cut right after the assistant's partial text (no end of turn), on the
bundled SmolLM2 (one model load per module, a fraction of a second)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from interlingua.core import (
    Message,
    Request,
    StreamEnd,
    StreamStart,
    TextPart,
)
from interlingua.upstreams.local import LocalUpstream
from interlingua.upstreams.local.engine import LlamaEngine, continued_prompt
from interlingua.upstreams.local.kind import bundled_model_path
from interlingua.upstreams.local.prompt import chat_messages
from interlingua.upstreams.prefill import with_prefill

from ..local_model import loaded_engine

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
PARTIAL = "The capital of France is"
END_OF_TURN = "<|im_end|>"


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaEngine]:
    with loaded_engine(2048) as eng:
        yield eng


def with_partial(partial: str = PARTIAL) -> list[dict[str, str]]:
    return [*QUESTION, {"role": "assistant", "content": partial}]


def test_the_prompt_ends_with_the_partial_text_and_no_end_of_turn(engine: LlamaEngine) -> None:
    prompt = engine.render(with_partial(), prefill=True)
    assert prompt.endswith("<|im_start|>assistant\n" + PARTIAL)
    assert not prompt.endswith(END_OF_TURN) and prompt.count(END_OF_TURN) == 2  # system, user
    # what the model would have been given had it written the partial text itself
    assert prompt == engine.render(QUESTION) + PARTIAL
    # unmarked, the same messages are a finished turn (and a new one is opened)
    finished = engine.render(with_partial())
    assert PARTIAL + END_OF_TURN in finished and finished.endswith("<|im_start|>assistant\n")


def test_trailing_whitespace_the_template_keeps_is_kept(engine: LlamaEngine) -> None:
    prompt = engine.render(with_partial(PARTIAL + " "), prefill=True)
    assert prompt.endswith(PARTIAL + " ")


def _engine_with(template: str) -> LlamaEngine:
    eng = LlamaEngine(bundled_model_path("smollm2"), n_ctx=64, chat_template=template)
    eng.load()
    return eng


def test_a_template_that_trims_or_rewrites_the_text() -> None:
    trimming = _engine_with(
        "{% for m in messages %}[{{ m.role }}] {{ m.content | trim }}</s>\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant] {% endif %}"
    )
    try:
        prompt = trimming.render(with_partial("  " + PARTIAL + "  "), prefill=True)
        assert prompt.endswith("[assistant] " + PARTIAL)
    finally:
        trimming.close()
    shouting = _engine_with(
        "{% for m in messages %}[{{ m.role }}] {{ m.content | upper }}</s>\n{% endfor %}"
        "{% if add_generation_prompt %}[assistant] {% endif %}"
    )
    try:
        # the text is not in the rendered turns: the turns before it, opened, then it
        prompt = shouting.render(with_partial(), prefill=True)
        assert prompt == shouting.render(QUESTION) + PARTIAL
        assert prompt.endswith("[assistant] " + PARTIAL)
    finally:
        shouting.close()


@pytest.mark.parametrize(
    ("rendered", "partial", "expected"),
    [
        ("<a>Hi</a><b>Hello wor</b>", "Hello wor", "<a>Hi</a><b>Hello wor"),
        # the last occurrence: an answer that repeats the question's words
        ("<a>Paris</a><b>Paris</b>", "Paris", "<a>Paris</a><b>Paris"),
        ("<b>Hello </b>", "Hello ", "<b>Hello "),  # kept by the template: kept
        ("<b>Hello</b>", "Hello\n\n", "<b>Hello"),  # trimmed by the template: not added
        ("<b>Hello</b>", "  Hello", "<b>Hello"),
        ("<b>HELLO</b>", "Hello", None),
        ("<b></b>", "   ", None),
    ],
)
def test_continued_prompt_cuts_after_the_last_occurrence(
    rendered: str, partial: str, expected: str | None
) -> None:
    assert continued_prompt(rendered, partial) == expected


def marked_request(**kw: object) -> Request:
    return with_prefill(
        Request(
            model="smollm2",
            messages=(
                Message("user", (TextPart(QUESTION[0]["content"]),)),
                Message("assistant", (TextPart(PARTIAL),)),
            ),
            **kw,  # type: ignore[arg-type]
        )
    )


async def test_the_upstream_generates_from_the_prefilled_prompt(engine: LlamaEngine) -> None:
    local = LocalUpstream("local", engine, max_queue=1)
    request = marked_request(seed=1, max_tokens=8)
    unmarked = Request(model="smollm2", messages=request.messages)
    expected = len(engine.tokenize(engine.render(chat_messages(request), prefill=True)))
    assert await local.count_tokens(request) == expected
    assert await local.count_tokens(unmarked) != expected
    events = [event async for event in local.stream(request)]
    start, end = events[0], events[-1]
    assert isinstance(start, StreamStart) and start.usage is not None
    assert start.usage.input_tokens == expected
    assert isinstance(end, StreamEnd) and 0 < end.usage.output_tokens <= 8
    completed = await local.complete(request)
    assert completed.usage.input_tokens == expected
