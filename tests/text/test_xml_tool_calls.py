"""Tool calls written as XML: Qwen3-Coder's ``<tool_call><function=...>`` and the bare
``● <function=...>`` form, read back out of a stream split anywhere."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlingua.text import Segment, ToolCallTextParser
from tests.text import chunks, merge, parse

BASH: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string"},
        "timeout": {"type": "number"},
        "description": {"type": "string"},
        "run_in_background": {"type": "boolean"},
    },
    "required": ["command"],
}
EDIT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "line": {"type": "integer"},
        "options": {"type": "object"},
        "paths": {"type": "array", "items": {"type": "string"}},
        "mode": {"enum": ["fast", "slow"]},
        "limit": {"type": ["integer", "null"]},
        "either": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
        "anything": {"description": "no type given"},
    },
}
SCHEMAS: dict[str, Any] = {"Bash": BASH, "Edit": EDIT, "Ping": None}
NAMES = set(SCHEMAS)

QWEN = (
    "<tool_call>\n<function=Bash>\n<parameter=command>\nls -la\n</parameter>\n"
    "<parameter=timeout>\n60000\n</parameter>\n</function>\n</tool_call>"
)
BARE = "● <function=Bash><parameter=command>ls</parameter>"


def xml(pieces: list[str], names: Any = NAMES, **kw: Any) -> list[Segment]:
    """Parse with the XML tools' names and schemas."""
    return parse(pieces, names, schemas=SCHEMAS, **kw)


def call(name: str, **arguments: Any) -> Segment:
    return ("tool_call", name, orjson.dumps(arguments).decode())


def every_split(text: str) -> list[list[str]]:
    """The text whole, one character per chunk, and cut in two at every offset."""
    return [[text], list(text), *([text[:i], text[i:]] for i in range(len(text) + 1))]


def same_for_every_split(text: str, names: Any = NAMES) -> list[Segment]:
    whole = xml([text], names)
    for pieces in every_split(text):
        assert xml(pieces, names) == whole, pieces
    return whole


# --- Qwen3-Coder: <tool_call><function=...> ---------------------------------------------


def test_qwen3_coder_call() -> None:
    assert xml([QWEN]) == [call("Bash", command="ls -la", timeout=60000)]


def test_qwen3_coder_call_is_the_same_for_every_chunk_split() -> None:
    text = f"Let me list the files.\n{QWEN}\n"
    expected = [("text", "Let me list the files.\n"), call("Bash", command="ls -la", timeout=60000)]
    assert same_for_every_split(text) == expected


def test_text_before_a_call_streams_at_once() -> None:
    p = ToolCallTextParser(NAMES, schemas=SCHEMAS)
    assert p.feed("Listing.\n<tool_call>\n<func") == [("text", "Listing.\n")]
    assert p.feed("tion=Bash>\n<parameter=command>\nls\n</para") == []
    assert p.feed("meter>\n</function>\n</tool_call>") == [call("Bash", command="ls")]
    assert p.flush() == []


def test_a_partial_function_tag_is_held_back_not_emitted() -> None:
    p = ToolCallTextParser(NAMES, schemas=SCHEMAS)
    assert p.feed("Running it: <func") == [("text", "Running it: ")]
    assert p.feed("tion=Bash><parameter=command>ls</parameter>") == []
    assert p.flush() == [call("Bash", command="ls")]
    p = ToolCallTextParser(NAMES, schemas=SCHEMAS)
    assert p.feed("a <fun") == [("text", "a ")]
    assert p.feed("ny story") == [("text", "<funny story")]


def test_several_calls_in_one_answer() -> None:
    second = QWEN.replace("ls -la", "pwd").replace("60000", "5")
    text = f"Two commands.\n{QWEN}\n{second}\nBoth started."
    assert same_for_every_split(text) == [
        ("text", "Two commands.\n"),
        call("Bash", command="ls -la", timeout=60000),
        call("Bash", command="pwd", timeout=5),
        ("text", "Both started."),
    ]


def test_several_functions_in_one_tool_call_tag() -> None:
    text = (
        "<tool_call>\n<function=Bash>\n<parameter=command>\nls\n</parameter>\n</function>\n"
        "<function=Ping>\n</function>\n</tool_call>"
    )
    assert same_for_every_split(text) == [call("Bash", command="ls"), call("Ping")]


def test_missing_closing_tags() -> None:
    no_tool_call_close = QWEN.removesuffix("\n</tool_call>")
    no_function_close = "<tool_call>\n<function=Bash>\n<parameter=command>\nls\n</parameter>\n"
    no_parameter_close = "<tool_call>\n<function=Bash>\n<parameter=command>\nls\n"
    only_tool_call_close = "<tool_call><function=Bash><parameter=command>ls</parameter></tool_call>"
    expected = [call("Bash", command="ls -la", timeout=60000)]
    assert same_for_every_split(no_tool_call_close) == expected
    for text in (no_function_close, no_parameter_close, only_tool_call_close):
        assert same_for_every_split(text) == [call("Bash", command="ls")]


def test_a_parameter_closed_by_the_next_one() -> None:
    # As vLLM's qwen3_coder parser reads it: a value also ends where the next
    # parameter, the function's end or the call's end begins.
    text = "<tool_call><function=Bash><parameter=command>ls<parameter=timeout>5</function>"
    assert same_for_every_split(text) == [call("Bash", command="ls", timeout=5)]


def test_text_after_a_call_without_its_closing_tags() -> None:
    text = "<tool_call>\n<function=Bash>\n<parameter=command>\nls\n</parameter>\n\nDone."
    assert same_for_every_split(text) == [call("Bash", command="ls"), ("text", "Done.")]


# --- the bare form ---------------------------------------------------------------------


def test_bare_call_with_bullet() -> None:
    assert same_for_every_split(BARE) == [call("Bash", command="ls")]


def test_bullet_and_whitespace_before_a_bare_call_are_not_text() -> None:
    text = "I'll list the files.\n●  \n<function=Bash><parameter=command>ls</parameter>"
    assert same_for_every_split(text) == [
        ("text", "I'll list the files.\n"),
        call("Bash", command="ls"),
    ]
    # Claude Code's own bullet, as a model imitating its transcript writes it
    assert xml(["⏺ <function=Bash><parameter=command>ls</parameter>"]) == [
        call("Bash", command="ls")
    ]


def test_bare_call_without_bullet_and_with_closing_tags() -> None:
    text = "Listing:\n<function=Bash>\n<parameter=command>\nls\n</parameter>\n</function>\nDone."
    assert same_for_every_split(text) == [
        ("text", "Listing:\n"),
        call("Bash", command="ls"),
        ("text", "Done."),
    ]


def test_several_bare_calls() -> None:
    text = (
        "● <function=Bash><parameter=command>ls</parameter>\n"
        "● <function=Bash><parameter=command>pwd</parameter><parameter=timeout>9</parameter>\n"
        "Both ran."
    )
    assert same_for_every_split(text) == [
        call("Bash", command="ls"),
        call("Bash", command="pwd", timeout=9),
        ("text", "Both ran."),
    ]


def test_bullets_in_prose_stream_as_text() -> None:
    text = "● First point\n● Second point with <b>bold</b>\n"
    assert same_for_every_split(text) == [("text", text)]
    p = ToolCallTextParser(NAMES, schemas=SCHEMAS)
    assert p.feed("● ") == []
    assert p.feed("Fi") == [("text", "● Fi")]


@pytest.mark.parametrize(
    "text",
    [
        "Use `<function=Bash>` to run a command.",  # a mention, not a call
        "<function=Bash> is how the model writes it",
        "<function=Bash>",  # a bare tag with nothing after it
        "see <function=Bash <parameter=command>ls</parameter>",  # broken name
        "<function=Bash><parameter=com mand>ls</parameter>",  # broken parameter name
        "<function=>",
        "x <function=Bash",
    ],
)
def test_what_is_not_a_call_stays_text_verbatim(text: str) -> None:
    assert same_for_every_split(text) == [("text", text)]


# --- tools that were not offered -------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        QWEN.replace("Bash", "Shell"),
        BARE.replace("Bash", "Shell"),
        "Run: <function=bash><parameter=command>ls</parameter></function> now",  # case matters
    ],
)
def test_a_tool_that_was_not_offered_stays_text(text: str) -> None:
    assert same_for_every_split(text) == [("text", text)]


def test_xml_calls_need_the_offered_tools() -> None:
    assert parse([QWEN]) == [("text", QWEN)]  # no tool list: nothing was offered
    assert parse([BARE]) == [("text", BARE)]
    assert parse([BARE], NAMES) == [call("Bash", command="ls")]  # no schemas: strings
    assert parse([QWEN], NAMES) == [call("Bash", command="ls -la", timeout="60000")]


def test_unknown_tool_then_known_tool() -> None:
    text = "● <function=Shell><parameter=command>ls</parameter>\n● <function=Bash><parameter=command>ls</parameter>"
    head = "● <function=Shell><parameter=command>ls</parameter>\n"
    assert same_for_every_split(text) == [("text", head), call("Bash", command="ls")]


def test_xml_format_can_be_turned_off() -> None:
    assert xml([BARE], formats={"tags", "json"}) == [("text", BARE)]
    assert xml([QWEN], formats={"tags", "json"}) == [("text", QWEN)]
    # Hermes JSON tags still work next to the XML form
    hermes = '<tool_call>{"name": "Bash", "arguments": {"command": "ls"}}</tool_call>'
    assert xml([hermes]) == [("tool_call", "Bash", '{"command":"ls"}')]


# --- parameter values typed by the tool's schema ---------------------------------------


def edit(parameter: str, value: str) -> Any:
    """The value the Edit tool's ``parameter`` gets when the model writes ``value``."""
    text = f"<tool_call>\n<function=Edit>\n<parameter={parameter}>\n{value}\n</parameter>\n</function>\n</tool_call>"
    segments = xml([text])
    assert len(segments) == 1 and segments[0][0] == "tool_call", segments
    return orjson.loads(segments[0][2])[parameter]


@pytest.mark.parametrize(
    ("parameter", "value", "expected"),
    [
        ("line", "42", 42),
        ("line", " 42 ", 42),
        ("line", "42.0", 42),
        ("line", "-3", -3),
        ("line", "forty", "forty"),  # not a number: kept as written, the client reports it
        ("line", "4.5", "4.5"),
        ("options", '{"a": 1, "b": [true]}', {"a": 1, "b": [True]}),
        ("options", "[1]", "[1]"),
        ("options", "{broken", "{broken"),
        ("paths", '["a.py", "b.py"]', ["a.py", "b.py"]),
        ("mode", "fast", "fast"),
        ("limit", "null", None),
        ("limit", "7", 7),
        ("either", "true", True),
        ("either", "3", 3),
        ("anything", "42", "42"),  # no type: the value is a string, as written
        ("anything", '{"a": 1}', '{"a": 1}'),
        ("undeclared", "42", "42"),
        ("path", "  two spaces  ", "  two spaces  "),
        ("path", "\nextra newlines\n", "\nextra newlines\n"),
        ("path", "", ""),
        ("path", "null", "null"),
    ],
)
def test_values_are_typed_by_the_schema(parameter: str, value: str, expected: Any) -> None:
    assert edit(parameter, value) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [("true", True), ("false", False), ("True", True), ("FALSE", False), ("yes", "yes")],
)
def test_boolean_values(value: str, expected: Any) -> None:
    text = f"● <function=Bash><parameter=command>ls</parameter><parameter=run_in_background>{value}</parameter>"
    assert xml([text]) == [call("Bash", command="ls", run_in_background=expected)]


def test_number_values() -> None:
    text = "<function=Bash><parameter=command>ls</parameter><parameter=timeout>1.5</parameter></function>"
    assert xml([text]) == [call("Bash", command="ls", timeout=1.5)]


def test_a_string_loses_exactly_one_newline_at_each_end() -> None:
    script = "\n\ncat <<'EOF'\n  indented </b> & <i>\nEOF\n\n"
    text = f"<tool_call>\n<function=Bash>\n<parameter=command>\n{script}\n</parameter>\n</function>\n</tool_call>"
    assert same_for_every_split(text) == [call("Bash", command=script)]
    crlf = "<function=Bash><parameter=command>\r\nls\r\n</parameter></function>"
    assert xml([crlf]) == [call("Bash", command="ls")]


def test_a_repeated_parameter_keeps_the_last_value() -> None:
    text = "<function=Bash><parameter=command>ls</parameter><parameter=command>pwd</parameter></function>"
    assert xml([text]) == [call("Bash", command="pwd")]


# --- any chunking ----------------------------------------------------------------------

PIECES = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "<function=Bash>",
        "<function=Shell>",
        "<function=",
        "</function>",
        "<parameter=command>",
        "<parameter=timeout>",
        "</parameter>",
        "<parameter=",
        "●",
        "⏺",
        " ",
        "\n",
        "ls",
        "42",
        "<",
        ">",
        "hi ",
        '{"name": "Bash", "arguments": {"command": "ls"}}',
    ]
)


@given(
    st.lists(PIECES, max_size=24).map("".join),
    st.lists(st.integers(min_value=0), max_size=12),
)
@settings(max_examples=500, deadline=None)
def test_any_chunking_equals_the_whole_text(text: str, cuts: list[int]) -> None:
    whole = xml([text])
    assert xml(chunks(text, cuts)) == whole
    assert xml(list(text)) == whole


@given(st.lists(PIECES, max_size=24).map("".join))
@settings(max_examples=300, deadline=None)
def test_text_of_an_answer_is_never_lost(text: str) -> None:
    """Without a call the answer comes back verbatim; with calls, the text segments are
    pieces of the answer in order."""
    out = xml([text])
    texts = [seg[1] for seg in out if seg[0] == "text"]
    if len(texts) == len(out):
        assert merge(out) == ([("text", text)] if text else [])
    rest = text
    for piece in texts:
        found = rest.find(piece)
        assert found != -1, (piece, text)
        rest = rest[found + len(piece) :]


class _CountingBlanks:
    """Stands in for xml_calls' blank-run pattern, adding up the characters it scans."""

    def __init__(self) -> None:
        import re

        self.pattern = re.compile(r"\s*")
        self.scanned = 0

    def match(self, text: str, pos: int) -> Any:
        found = self.pattern.match(text, pos)
        assert found is not None
        self.scanned += found.end() - pos
        return found


@pytest.mark.parametrize("close", ["", "</function>"])
def test_runaway_blanks_after_a_parameter_are_scanned_once(
    close: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model that loops on newlines after a call's parameter (up to its token limit),
    streamed a chunk at a time, must not have the blanks read again at every chunk: that
    is quadratic time on the gateway's event loop (seconds for a few 10,000 newlines)."""
    from interlingua.text import xml_calls

    counter = _CountingBlanks()
    monkeypatch.setattr(xml_calls, "_BLANKS", counter)
    blanks = 4000
    text = "<function=Bash><parameter=command>ls</parameter>" + close + "\n" * blanks
    parser = ToolCallTextParser(NAMES, schemas=SCHEMAS)
    segments: list[Segment] = []
    for i in range(0, len(text), 2):
        segments += parser.feed(text[i : i + 2])
    segments += parser.flush()
    assert segments == [("tool_call", "Bash", '{"command":"ls"}')]
    assert counter.scanned <= 2 * blanks


def test_runaway_blanks_after_a_bullet_are_not_held_without_end() -> None:
    """A bullet holds back the blanks after it (a bare call may follow), but only up to
    MAX_BULLET_GAP of them: a model looping on newlines after a bullet must not grow the
    held text (rescanned at every chunk: quadratic time) to the end of its answer."""
    from interlingua.text.tool_calls import MAX_BULLET_GAP

    text = "Done. \u25cf" + "\n" * 20_000
    parser = ToolCallTextParser(NAMES, schemas=SCHEMAS)
    segments: list[Segment] = []
    for i in range(0, len(text), 2):
        segments += parser.feed(text[i : i + 2])
        assert len(parser._buf) <= MAX_BULLET_GAP + 2
    segments += parser.flush()
    assert merge(segments) == [("text", text)]


@pytest.mark.parametrize("gap", [1, 63, 64, 65, 200])
def test_a_bullet_is_the_call_s_only_within_the_gap_in_any_chunking(gap: int) -> None:
    """Within MAX_BULLET_GAP blanks the bullet belongs to the bare call after it; past
    it, the bullet and blanks are text. Either way every chunking agrees."""
    from interlingua.text.tool_calls import MAX_BULLET_GAP

    call = "<function=Bash><parameter=command>ls</parameter></function>"
    text = "Next: \u25cf" + " " * gap + call
    whole = merge(parse([text], NAMES, schemas=SCHEMAS))
    kept = "Next: " if gap <= MAX_BULLET_GAP else "Next: \u25cf" + " " * gap
    assert whole == [("text", kept), ("tool_call", "Bash", '{"command":"ls"}')]
    for size in (1, 2, 7):
        pieces = [text[i : i + size] for i in range(0, len(text), size)]
        assert merge(parse(pieces, NAMES, schemas=SCHEMAS)) == whole
