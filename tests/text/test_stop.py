"""StopMatcher: stop sequences across chunk boundaries (earliest match, longest on ties)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from interlingua.text import StopMatcher, partial_suffix_len
from tests.text import chunks


def run(stops: list[str], pieces: list[str]) -> tuple[str, str | None]:
    m = StopMatcher(stops)
    released: list[str] = []
    for piece in pieces:
        text, _ = m.feed(piece)
        released.append(text)
    released.append(m.flush())
    return "".join(released), m.matched


def oracle(stops: list[str], text: str) -> tuple[str, str | None]:
    """Whole-text answer: the earliest match, the longest sequence on a tie."""
    found = [(text.find(s), -len(s), s) for s in stops if s and s in text]
    if not found:
        return text, None
    pos, _, stop = min(found)
    return text[:pos], stop


def test_partial_suffix_len() -> None:
    assert partial_suffix_len("a <thi", ["<think>"]) == 4
    assert partial_suffix_len("a <the", ["<think>"]) == 0
    assert partial_suffix_len("<think>", ["<think>"]) == 0  # complete: not a *proper* prefix
    assert partial_suffix_len("xab", ["abc", "bcd", "b"]) == 2
    assert partial_suffix_len("", ["abc"]) == 0
    assert partial_suffix_len("aaa", ["aaab"]) == 3
    assert partial_suffix_len("abc", ["", "cd"]) == 1


def test_match_in_one_chunk() -> None:
    m = StopMatcher(["</answer>"])
    assert m.feed("42</answer> and more") == ("42", "</answer>")
    assert m.matched == "</answer>"


def test_match_across_chunks_holds_back_only_partial() -> None:
    m = StopMatcher(["</answer>"])
    assert m.feed("42</ans") == ("42", None)
    assert m.feed("wer> more") == ("", "</answer>")


def test_false_alarm_is_released() -> None:
    m = StopMatcher(["</s>"])
    assert m.feed("hello </") == ("hello ", None)
    assert m.feed("b> x") == ("</b> x", None)
    assert m.flush() == ""
    assert m.matched is None


def test_after_match_everything_is_dropped() -> None:
    m = StopMatcher(["STOP"])
    assert m.feed("aSTOPb") == ("a", "STOP")
    assert m.feed("more text") == ("", "STOP")
    assert m.flush() == ""
    assert m.matched == "STOP"


def test_earliest_match_wins() -> None:
    m = StopMatcher(["zz", "b"])
    assert m.feed("abzz") == ("a", "b")


def test_tie_prefers_longest() -> None:
    assert run(["ab", "abc"], ["xabc"]) == ("x", "abc")
    assert run(["ab", "abc"], ["xab", "c"]) == ("x", "abc")
    assert run(["ab", "abc"], ["xab", "d"]) == ("x", "ab")


def test_shared_prefix_defers_until_decided() -> None:
    m = StopMatcher(["ab", "abc"])
    # "ab" is complete but "abc" may still match at the same position: wait.
    assert m.feed("xab") == ("x", None)
    assert m.feed("c tail") == ("", "abc")


def test_longer_sequence_starting_earlier_overrides_later_match() -> None:
    # "bc" is complete in "abc", but "abcd" could still start earlier (position 0).
    m = StopMatcher(["bc", "abcd"])
    assert m.feed("abc") == ("", None)
    assert m.feed("d") == ("", "abcd")
    assert run(["bc", "abcd"], ["abc", "x"]) == ("a", "bc")


def test_deferred_match_is_resolved_at_flush() -> None:
    m = StopMatcher(["bc", "abcd"])
    assert m.feed("abc") == ("", None)
    assert m.flush() == "a"
    assert m.matched == "bc"


def test_overlapping_sequences() -> None:
    assert run(["aab"], ["a", "a", "a", "b"]) == ("a", "aab")
    assert run(["abab"], ["aba", "bab"]) == ("", "abab")


def test_no_stops_passes_through() -> None:
    m = StopMatcher([])
    assert m.feed("anything </s>") == ("anything </s>", None)
    assert m.flush() == ""
    assert StopMatcher(["", ""]).feed("x") == ("x", None)


def test_unicode_and_newline_stops() -> None:
    assert run(["\n\n"], ["line one\n", "\nline two"]) == ("line one", "\n\n")
    assert run(["停"], ["你好", "停止"]) == ("你好", "停")


ALPHABET = st.sampled_from(["a", "b", "c", "ab", "abc", "</", "s>", "\n"])
STOPS = st.lists(st.text(alphabet="abc</s>\n", min_size=1, max_size=4), min_size=1, max_size=4)


@given(
    STOPS,
    st.lists(ALPHABET, max_size=30).map("".join),
    st.lists(st.integers(min_value=0), max_size=12),
)
@settings(max_examples=400, deadline=None)
def test_any_chunking_equals_the_whole_text_oracle(
    stops: list[str], text: str, cuts: list[int]
) -> None:
    assert run(stops, chunks(text, cuts)) == oracle(stops, text)
    assert run(stops, [text]) == oracle(stops, text)
