"""Reasoning folded into the text byte for byte as datastudio BaseAPI writes it:
``"<think>\\n" + reasoning.strip() + "\\n</think>\\n\\n" + answer.strip()``, the same in a
plain result, in a stream's ``text_stream()`` piece by piece, and in the batch runner's
``--fold-reasoning``."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from interlingua.batch.fold import fold_body
from interlingua.client import AsyncClient, ChatResult, StreamedFold, fold_reasoning
from interlingua.core import ReasoningPart, Response, TextPart
from interlingua.text.think import ThinkSplitter

from .conftest import FakeServer, Stream
from .test_answers import chunk


def basapi(reasoning: str, answer: str) -> str:
    """BaseAPI's formula, written out as its users know it."""
    return "<think>\n" + reasoning.strip() + "\n</think>\n\n" + answer.strip()


def test_padding_around_either_part_is_stripped() -> None:
    assert fold_reasoning("\nwhy\n", "\n\nans") == "<think>\nwhy\n</think>\n\nans"
    assert fold_reasoning("  a\n\nb  ", "x \n y\n") == "<think>\na\n\nb\n</think>\n\nx \n y"
    assert fold_reasoning("why", "") == basapi("why", "")
    # whitespace alone is still reasoning (there was some): an empty think block
    assert fold_reasoning("\n", " ans ") == "<think>\n\n</think>\n\nans"


def test_without_reasoning_the_answer_is_left_as_it_is() -> None:
    # BaseAPI applies its formula only when there is reasoning; the answer alone is the
    # server's text, untouched (a pipeline that never asked for reasoning sees no change).
    assert fold_reasoning("", "\n ans \n") == "\n ans \n"


def test_a_result_folds_the_same() -> None:
    r = Response("r", "m", (ReasoningPart("\n\nthink\n"), TextPart("\n\n42\n")))
    assert ChatResult(r, think_tags=True).text == "<think>\nthink\n</think>\n\n42"


def stream_fold(pieces: list[tuple[str, str]]) -> str:
    fold = StreamedFold()
    out = [fold.reasoning(p) if kind == "r" else fold.text(p) for kind, p in pieces]
    return "".join([*out, fold.end()])


def test_a_stream_holds_whitespace_at_the_joins_and_keeps_it_inside() -> None:
    pieces = [("r", "\n"), ("r", " a "), ("r", "\n"), ("r", "b\n\n"), ("t", "\n\n"), ("t", "x ")]
    pieces += [("t", " "), ("t", "y"), ("t", "\n")]
    assert stream_fold(pieces) == "<think>\na \nb\n</think>\n\nx  y"
    # an empty first content (as many servers open a stream) is not an answer yet
    assert stream_fold([("t", ""), ("r", " x"), ("t", " y")]) == "<think>\nx\n</think>\n\ny"
    assert stream_fold([("t", " y "), ("r", "x")]) == " y "  # no reasoning in front: as it is


_PIECE = st.text(alphabet=" \n\tab", max_size=4)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECE, max_size=5), st.lists(_PIECE, max_size=5))
def test_a_stream_joins_to_the_plain_fold(reasoning: list[str], answer: list[str]) -> None:
    pieces = [("r", p) for p in reasoning] + [("t", p) for p in answer]
    assert stream_fold(pieces) == fold_reasoning("".join(reasoning), "".join(answer))


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=" \nab<>/", max_size=12), st.text(alphabet=" \nab", max_size=12))
def test_the_gateways_split_then_the_clients_fold_is_the_original(
    reasoning: str, answer: str
) -> None:
    # A model writing BaseAPI's format in its text, split by the gateway's ``think_tags``
    # and folded again by the client, gives its text back byte for byte.
    written = basapi(reasoning.replace("</think>", ""), answer)
    splitter = ThinkSplitter()
    segments = splitter.feed(written) + splitter.flush()
    thought = "".join(t for kind, t in segments if kind == "reasoning")
    text = "".join(t for kind, t in segments if kind == "text")
    if thought:
        assert fold_reasoning(thought, text) == written


async def test_a_streams_text_equals_the_results_with_padding(server: FakeServer) -> None:
    chunks = [
        chunk({"role": "assistant", "reasoning_content": "\n"}),
        chunk({"reasoning_content": "let me \n"}),
        chunk({"reasoning_content": "see\n\n"}),
        chunk({"content": "\n\n"}),
        chunk({"content": "It is "}),
        chunk({"content": "4.\n"}),
        chunk({}, "stop"),
        b"data: [DONE]\n\n",
    ]
    server.push(Stream(chunks))
    async with (
        AsyncClient(server.url + "/v1", model="m") as c,
        c.stream("q", think_tags=True) as stream,
    ):
        pieces = [p async for p in stream.text_stream()]
    assert "".join(pieces) == "<think>\nlet me \nsee\n</think>\n\nIt is 4."
    assert stream.result is not None and stream.result.text == "".join(pieces)


def test_the_batch_runner_folds_the_same() -> None:
    body = {"choices": [{"message": {"content": "\n\nans\n", "reasoning_content": "\nwhy\n"}}]}
    assert fold_body("openai", body, "\nwhy\n")
    assert body["choices"][0]["message"]["content"] == "<think>\nwhy\n</think>\n\nans"
