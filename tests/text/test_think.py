"""ThinkSplitter: <think> spans -> reasoning segments, safe across chunk boundaries."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlingua.text import ThinkSegment, ThinkSplitter
from tests.text import chunks


def merge(segments: list[ThinkSegment]) -> list[ThinkSegment]:
    out: list[ThinkSegment] = []
    for kind, text in segments:
        assert text, "no empty segments"
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + text)
        else:
            out.append((kind, text))
    return out


def split(pieces: list[str], **kwargs: bool) -> list[ThinkSegment]:
    s = ThinkSplitter(**kwargs)  # type: ignore[arg-type]
    segments: list[ThinkSegment] = []
    for piece in pieces:
        segments.extend(s.feed(piece))
    segments.extend(s.flush())
    return merge(segments)


def test_whole_span() -> None:
    assert split(["<think>I should greet.</think>\n\nHello!"]) == [
        ("reasoning", "I should greet."),
        ("text", "Hello!"),
    ]


def test_tag_split_across_chunks() -> None:
    s = ThinkSplitter()
    assert s.feed("<thi") == []
    assert s.feed("nk>hmm</th") == [("reasoning", "hmm")]
    assert s.inside
    assert s.feed("ink>\n\nHi") == [("text", "Hi")]
    assert not s.inside
    assert s.flush() == []


def test_false_alarm_is_released_as_soon_as_possible() -> None:
    s = ThinkSplitter()
    assert s.feed("a <th") == [("text", "a ")]
    assert s.feed("e end") == [("text", "<the end")]


def test_holds_back_only_the_longest_possible_prefix() -> None:
    s = ThinkSplitter()
    assert s.feed("abc<") == [("text", "abc")]
    assert s.feed("<") == [("text", "<")]  # "<<": only the last "<" may start a tag
    assert s.flush() == [("text", "<")]


@pytest.mark.parametrize("text", ["a < b", "<thinking about it>", "x <think/> y", "<THINK>"])
def test_text_that_only_resembles_a_tag(text: str) -> None:
    assert split([text]) == [("text", text)]
    assert split(list(text)) == [("text", text)]


def test_multiple_spans() -> None:
    assert split(["<think>a</think>one<think>b</think>two"]) == [
        ("reasoning", "a"),
        ("text", "one"),
        ("reasoning", "b"),
        ("text", "two"),
    ]


def test_unclosed_span_is_flushed_as_reasoning() -> None:
    s = ThinkSplitter()
    assert s.feed("<think>still thinking </thi") == [("reasoning", "still thinking ")]
    assert s.flush() == [("reasoning", "</thi")]


def test_text_before_the_span_is_kept() -> None:
    assert split(["Sure. <think>x</think>Done"]) == [
        ("text", "Sure. "),
        ("reasoning", "x"),
        ("text", "Done"),
    ]


def test_only_newlines_after_close_are_stripped() -> None:
    assert split(["<think>r</think>\n", "\n", "\nAnswer\n\nmore"]) == [
        ("reasoning", "r"),
        ("text", "Answer\n\nmore"),
    ]
    assert split(["<think>r</think> spaced"]) == [("reasoning", "r"), ("text", " spaced")]
    assert split(["\nleading kept"]) == [("text", "\nleading kept")]


def test_reasoning_is_verbatim() -> None:
    assert split(["<think>\nstep 1\n</think>ok"]) == [("reasoning", "\nstep 1\n"), ("text", "ok")]


def test_empty_span_yields_nothing() -> None:
    assert split(["<think></think>\n\nHi"]) == [("text", "Hi")]


def test_close_without_open_is_text() -> None:
    assert split(["a</think>b"]) == [("text", "a</think>b")]


def test_start_inside_for_templates_that_open_the_tag() -> None:
    assert split(["Okay, the user", " wants</think>\n\nHi"], start_inside=True) == [
        ("reasoning", "Okay, the user wants"),
        ("text", "Hi"),
    ]


def test_start_inside_drops_a_redundant_opening_tag() -> None:
    assert split(["<th", "ink>\nr</think>a"], start_inside=True) == [
        ("reasoning", "\nr"),
        ("text", "a"),
    ]
    # Not at the very start: an ordinary character of reasoning.
    assert split(["x<think>r"], start_inside=True) == [("reasoning", "x<think>r")]


def test_start_inside_unclosed_and_short() -> None:
    assert split(["<th"], start_inside=True) == [("reasoning", "<th")]
    assert split([], start_inside=True) == []


def test_custom_tags() -> None:
    s = ThinkSplitter("<reasoning>", "</reasoning>")
    out = s.feed("<reasoning>r</reasoning>t") + s.flush()
    assert merge(out) == [("reasoning", "r"), ("text", "t")]


def test_empty_tags_are_rejected() -> None:
    with pytest.raises(ValueError):
        ThinkSplitter("", "</think>")


PIECES = st.sampled_from(
    ["<think>", "</think>", "<th", "ink>", "</", "a", "b c", "\n", "\n\n", "<", ">", "x<think"]
)


@given(
    st.lists(PIECES, max_size=25).map("".join),
    st.lists(st.integers(min_value=0), max_size=12),
    st.booleans(),
)
@settings(max_examples=400, deadline=None)
def test_any_chunking_equals_the_whole_text(text: str, cuts: list[int], inside: bool) -> None:
    whole = split([text], start_inside=inside)
    assert split(chunks(text, cuts), start_inside=inside) == whole
    assert split(list(text), start_inside=inside) == whole


@given(st.lists(PIECES, max_size=25).map("".join))
@settings(max_examples=200, deadline=None)
def test_nothing_is_lost_but_tags_and_stripped_newlines(text: str) -> None:
    out = split([text])
    joined = "".join(t for _, t in out)
    assert len(joined) <= len(text)
    # Without tags in the input, output is exactly the input, as text.
    if "<think>" not in text:
        assert out == ([("text", text)] if text else [])
