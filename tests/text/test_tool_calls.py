"""ToolCallTextParser: tool calls written as text, read back out of a stream."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from interlingua.text import ToolCallTextParser, parse_tool_calls
from tests.text import chunks, parse

CALL = '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}'
ARGS = '{"city":"Paris","unit":"c"}'
NAMES = {"get_weather", "f"}


# --- (a) Hermes / Qwen tags ----------------------------------------------------------


def test_hermes_tag() -> None:
    assert parse([f"<tool_call>\n{CALL}\n</tool_call>"]) == [("tool_call", "get_weather", ARGS)]


def test_text_before_call_streams_at_once() -> None:
    p = ToolCallTextParser()
    assert p.feed("Let me check.<tool_c") == [("text", "Let me check.")]
    assert p.feed(f"all>{CALL}") == []
    assert p.feed("</tool_call>") == [("tool_call", "get_weather", ARGS)]
    assert p.flush() == []


def test_arguments_as_json_string_and_parameters_key() -> None:
    s = '<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>'
    assert parse([s]) == [("tool_call", "f", '{"x":1}')]
    s = '<tool_call>{"name": "f", "parameters": {"x": [1, 2]}}</tool_call>'
    assert parse([s]) == [("tool_call", "f", '{"x":[1,2]}')]


def test_absent_or_empty_arguments_become_empty_object() -> None:
    assert parse(['<tool_call>{"name": "f"}</tool_call>']) == [("tool_call", "f", "{}")]
    s = '<tool_call>{"name": "f", "arguments": ""}</tool_call>'
    assert parse([s]) == [("tool_call", "f", "{}")]


def test_openai_function_shape_in_tag() -> None:
    s = '<tool_call>{"type": "function", "function": {"name": "f", "arguments": {}}}</tool_call>'
    assert parse([s]) == [("tool_call", "f", "{}")]


def test_parallel_calls_drop_whitespace_between() -> None:
    s = f"I'll check both.\n<tool_call>\n{CALL}\n</tool_call>\n<tool_call>\n"
    s += '{"name": "f", "arguments": {}}\n</tool_call>\n'
    assert parse([s]) == [
        ("text", "I'll check both.\n"),
        ("tool_call", "get_weather", ARGS),
        ("tool_call", "f", "{}"),
    ]


def test_text_after_a_call_is_kept_without_leading_whitespace() -> None:
    s = '<tool_call>{"name": "f"}</tool_call>\n\nDone, waiting.'
    assert parse([s]) == [("tool_call", "f", "{}"), ("text", "Done, waiting.")]


def test_smollm2_list_inside_tag() -> None:
    s = '<tool_call>[\n{"name": "f", "arguments": {"a": 1}},\n{"name": "g", "arguments": {}}\n]</tool_call>'
    assert parse([s]) == [("tool_call", "f", '{"a":1}'), ("tool_call", "g", "{}")]


def test_smollm2_empty_list_means_no_call() -> None:
    assert parse(["<tool_call>[]</tool_call>"]) == []
    assert parse(["<tool_call>[]</tool_call> The answer is 4."]) == [("text", "The answer is 4.")]


def test_one_object_per_line_inside_a_tag() -> None:
    s = '<tool_call>\n{"name": "f"}\n{"name": "g", "arguments": {"b": true}}\n</tool_call>'
    assert parse([s]) == [("tool_call", "f", "{}"), ("tool_call", "g", '{"b":true}')]


def test_tag_name_need_not_be_known() -> None:
    assert parse(['<tool_call>{"name": "other"}</tool_call>'], NAMES) == [
        ("tool_call", "other", "{}")
    ]


@pytest.mark.parametrize(
    "body",
    [
        '{"name": "f", "arguments": {"x": 1}',  # truncated JSON
        "not json at all",
        '{"arguments": {}}',  # no name
        '{"name": "f", "arguments": [1, 2]}',  # arguments not an object
        '{"name": "f", "arguments": "not json"}',
        "[1, 2]",
        "",
    ],
)
def test_invalid_json_in_tags_is_kept_as_text(body: str) -> None:
    s = f"before <tool_call>{body}</tool_call> after"
    assert parse([s]) == [("text", s)]
    assert parse(list(s)) == [("text", s)]


def test_partial_tag_false_alarm() -> None:
    p = ToolCallTextParser()
    assert p.feed("x <tool") == [("text", "x ")]
    assert p.feed("box is here") == [("text", "<toolbox is here")]
    assert parse(["a < b and <tool_cal", "ling"]) == [("text", "a < b and <tool_calling")]


def test_unclosed_tag_at_eof() -> None:
    assert parse(['<tool_call>{"name": "f", "arguments": {}}']) == [("tool_call", "f", "{}")]
    assert parse(['<tool_call>{"name": "f"}\n</tool_']) == [("tool_call", "f", "{}")]
    assert parse(['Hi <tool_call>{"name": "f", ']) == [("text", 'Hi <tool_call>{"name": "f", ')]


def test_partial_open_tag_at_eof_is_text() -> None:
    assert parse(["done <tool_ca"]) == [("text", "done <tool_ca")]


# --- (b, c, d) bare JSON ----------------------------------------------------------------


def test_bare_json_call_is_decided_at_flush() -> None:
    p = ToolCallTextParser(NAMES)
    assert p.feed("\n{") == []
    assert p.feed(CALL[1:]) == []
    assert p.flush() == [("tool_call", "get_weather", ARGS)]


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "f", "arguments": {"a": 1}}',
        '{"tool": "f", "arguments": {"a": 1}}',
        '{"function": {"name": "f", "arguments": "{\\"a\\": 1}"}}',
        '{"type": "function", "function": {"name": "f", "parameters": {"a": 1}}}',
        '{"function": "f", "args": {"a": 1}}',
        '```json\n{"name": "f", "arguments": {"a": 1}}\n```',
        '```\n{"name": "f", "arguments": {"a": 1}}```\n',
        '<|python_tag|>{"name": "f", "parameters": {"a": 1}}',
        '  {"name": "f", "parameters": {"a": 1}}  \n',
    ],
)
def test_bare_json_formats(text: str) -> None:
    assert parse([text], NAMES) == [("tool_call", "f", '{"a":1}')]
    assert parse(list(text), NAMES) == [("tool_call", "f", '{"a":1}')]


def test_bare_json_list_is_parallel_calls() -> None:
    text = '[{"name": "f", "arguments": {}}, {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}]'
    assert parse([text], NAMES) == [("tool_call", "f", "{}"), ("tool_call", "get_weather", ARGS)]
    mistral = '[TOOL_CALLS][{"name": "f", "arguments": {}}]'
    assert parse([mistral], NAMES) == [("tool_call", "f", "{}")]


@pytest.mark.parametrize(
    "text",
    [
        '{"name": "Alice", "age": 30}',  # ordinary JSON answer
        '{"name": "unknown_tool", "arguments": {}}',  # not one of the tools
        '{"name": "f", "arguments": {}, "note": "x"}',  # extra keys: not call-shaped
        '{"name": "f", "arguments": {}} and some prose',  # not the whole answer
        '[{"name": "f"}, {"name": "nope"}]',
        "[]",
        '{"answer": 42}',
        "{broken",
    ],
)
def test_bare_json_that_is_not_a_call_stays_text(text: str) -> None:
    assert parse([text], NAMES) == [("text", text)]


def test_bare_json_needs_tool_names() -> None:
    p = ToolCallTextParser()
    assert p.feed(CALL) == [("text", CALL)]  # streamed at once: no names, no hijacking
    assert p.flush() == []


def test_bare_candidate_can_still_contain_tags() -> None:
    text = '{"x": 1} <tool_call>{"name": "f"}</tool_call>'
    assert parse([text], NAMES) == [("text", '{"x": 1} '), ("tool_call", "f", "{}")]


def test_ordinary_answers_stream_immediately_with_tool_names() -> None:
    p = ToolCallTextParser(NAMES)
    assert p.feed("  ") == []  # leading whitespace: undecided yet
    assert p.feed("The weather") == [("text", "  The weather")]
    p = ToolCallTextParser(NAMES)
    assert p.feed("```py") == []
    assert p.feed("thon\nprint(1)") == [("text", "```python\nprint(1)")]
    p = ToolCallTextParser(NAMES)
    assert p.feed("[") == []
    assert p.feed("1] see") == [("text", "[1] see")]
    p = ToolCallTextParser(NAMES)
    assert p.feed("a < b") == [("text", "a < b")]


def test_whitespace_only_answer() -> None:
    assert parse(["\n \n"], NAMES) == [("text", "\n \n")]
    assert parse([""], NAMES) == []


def test_formats_option() -> None:
    tagged = '<tool_call>{"name": "f"}</tool_call>'
    assert parse([tagged], NAMES, formats={"json"}) == [("text", tagged)]
    bare = '{"name": "f"}'
    assert parse([bare], NAMES, formats={"tags"}) == [("text", bare)]
    assert parse([bare], NAMES, formats={"json"}) == [("tool_call", "f", "{}")]
    with pytest.raises(ValueError):
        ToolCallTextParser(NAMES, formats={"yaml"})


def test_parse_tool_calls_function() -> None:
    assert parse_tool_calls('{"name": "f", "parameters": {"x": 1}}') == [("f", '{"x":1}')]
    assert parse_tool_calls("nope") is None
    assert parse_tool_calls('{"name": "f", "extra": 1}', strict=True) is None
    assert parse_tool_calls('{"name": "f"}', {"g"}) is None


PIECES = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        '{"name": "f", "arguments": {"x": 1}}',
        '[{"name": "f"}]',
        "<tool",
        "_call>",
        "{",
        "}",
        "[",
        "]",
        "hi ",
        "\n",
        " ",
        "```json\n",
        "```",
        "<|python_tag|>",
        "<",
        '"name"',
    ]
)


@given(
    st.lists(PIECES, max_size=20).map("".join),
    st.lists(st.integers(min_value=0), max_size=12),
    st.booleans(),
)
@settings(max_examples=400, deadline=None)
def test_any_chunking_equals_the_whole_text(text: str, cuts: list[int], named: bool) -> None:
    names = NAMES if named else None
    whole = parse([text], names)
    assert parse(chunks(text, cuts), names) == whole
    assert parse(list(text), names) == whole


@given(st.lists(PIECES, max_size=20).map("".join))
@settings(max_examples=200, deadline=None)
def test_text_without_calls_is_returned_verbatim(text: str) -> None:
    # An empty list in a tag (SmolLM2's "no call") is consumed on purpose: skip those.
    bodies = re.findall(r"<tool_call>(.*?)(?:</tool_call>|$)", text, re.DOTALL)
    assume(all(parse_tool_calls(body) != [] for body in bodies))
    out = parse([text], NAMES)
    if not any(seg[0] == "tool_call" for seg in out):
        assert out == ([("text", text)] if text else [])
