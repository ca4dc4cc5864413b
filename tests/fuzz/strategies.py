"""Hypothesis strategies for request bodies of every dialect, structure-aware.

``valid_body(dialect)`` draws a plausible, well-formed body (messages of every role, parts
of every kind, tools, tool calls and results, sampling knobs, unknown fields).
``mutated_body(dialect)`` then breaks it in a few random places: a value replaced by one of
another JSON type, a key dropped, null, empty strings and lists, unknown keys. ``raw_body``
serializes that and may splice in what a decoded value cannot hold: numbers beyond a
double (``1e400``) or beyond 64 bits, lone surrogates escaped in JSON, deep nesting,
duplicate keys, truncation.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import orjson
from hypothesis import strategies as st

# --- leaves and wrong values -------------------------------------------------------------

TEXT = st.text(max_size=12)  # hypothesis text includes any code point but lone surrogates
NAMES = st.sampled_from(["f", "get_weather", "a-b_c", "x" * 64, "bad name!", ""])
NUMBERS = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, 1, -1, 2**31, 2**63 - 1, 2**64 - 1, 1e308, -1e308, 5e-324, 0.5]),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT, st.sampled_from(["", "user", "text"]))
JSON: st.SearchStrategy[Any] = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
WRONG = st.one_of(JSON, st.sampled_from([None, "", [], {}, 0, True, [None], {"type": None}]))

# Tokens spliced into the serialized body in place of a placeholder string.
_RAW_TOKENS = [
    b"1e400",
    b"-1e400",
    b"1180591620717411303424",  # 2**70: orjson reads it as a float
    b"18446744073709551615",  # 2**64 - 1: still an int
    b"-9223372036854775809",
    b"1.0e-400",
    b'"\\ud800"',
    b'"tail \\udfff"',
    b'"\\ud83d\\ude00 ok"',
    b'"\\u0000"',
    b'"\\u202e\\ufeff"',
    b"[" * 200 + b"]" * 200,
    b"[" * 256 + b"]" * 256,
    b"[" * 600 + b"]" * 600,
    b"[" * 1100 + b"]" * 1100,
    b'{"a":' * 300 + b"1" + b"}" * 300,
]
_PLACEHOLDER = "\x01raw{}\x01"
_PLACEHOLDER_RE = re.compile(rb'"\\u0001raw(\d+)\\u0001"')
RAW = st.integers(min_value=0, max_value=len(_RAW_TOKENS) - 1).map(_PLACEHOLDER.format)


# --- well-formed bodies ------------------------------------------------------------------

_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def _conversation(
    head: list[dict[str, Any]],
    first: dict[str, Any],
    turns: list[list[dict[str, Any]]],
    last: dict[str, Any],
) -> list[dict[str, Any]]:
    """One message list: ``head``, a user turn, the middle turns flattened, a user turn."""
    return [*head, first, *(m for turn in turns for m in turn), last]


def _openai_user_part() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.builds(lambda t: {"type": "text", "text": t}, TEXT),
        st.sampled_from(
            [
                {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{_PNG}"}},
                {"type": "image_url", "image_url": "https://x/bare.png"},
                {"type": "file", "file": {"file_data": f"data:application/pdf;base64,{_PNG}"}},
                {"type": "file", "file": {"file_id": "file-abc", "filename": "a.pdf"}},
                {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
                {"type": "video_url", "video_url": {"url": "https://x/v.mp4"}},
            ]
        ),
    )


def _openai_tool_call(i: int) -> dict[str, Any]:
    fn = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    return {"id": f"call_{i}", "type": "function", "function": fn}


def _openai_messages() -> st.SearchStrategy[list[dict[str, Any]]]:
    content = st.one_of(TEXT, st.lists(_openai_user_part(), min_size=1, max_size=3))
    user = st.builds(lambda c: {"role": "user", "content": c}, content)
    system = st.builds(
        lambda role, t, as_parts: {
            "role": role,
            "content": [{"type": "text", "text": t}] if as_parts else t,
        },
        st.sampled_from(["system", "developer"]),
        TEXT,
        st.booleans(),
    )
    tool_turn = st.builds(
        lambda text, reasoning: [
            {"role": "assistant", "content": text, "tool_calls": [_openai_tool_call(1)]}
            | ({"reasoning_content": reasoning} if reasoning is not None else {}),
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        ],
        st.one_of(st.none(), TEXT),
        st.one_of(st.none(), TEXT),
    )
    assistant = st.builds(
        lambda c: {"role": "assistant", "content": c},
        st.one_of(
            TEXT, st.just([{"type": "text", "text": "a"}, {"type": "refusal", "refusal": "no"}])
        ),
    )
    turn = st.one_of(user.map(lambda m: [m]), assistant.map(lambda m: [m]), tool_turn)
    return st.builds(
        lambda first, sys, turns, last: _conversation([sys] if sys else [], first, turns, last),
        user,
        st.one_of(st.none(), system),
        st.lists(turn, max_size=3),
        user,
    )


_OPENAI_OPTIONAL: dict[str, st.SearchStrategy[Any]] = {
    "temperature": st.floats(0, 2),
    "top_p": st.floats(0, 1),
    "max_tokens": st.integers(1, 4096),
    "max_completion_tokens": st.integers(1, 4096),
    "stream": st.booleans(),
    "stream_options": st.just({"include_usage": True}),
    "stop": st.one_of(TEXT, st.lists(TEXT, max_size=4)),
    "seed": st.integers(0, 2**31),
    "n": st.integers(1, 3),
    "user": TEXT,
    "metadata": st.just({"k": "v"}),
    "tools": st.just([{"type": "function", "function": {"name": "get_weather", "parameters": _SCHEMA}}]),
    "tool_choice": st.sampled_from(["auto", "none", "required", {"type": "function", "function": {"name": "get_weather"}}]),
    "parallel_tool_calls": st.booleans(),
    "response_format": st.sampled_from([{"type": "json_object"}, {"type": "json_schema", "json_schema": {"name": "r", "schema": _SCHEMA}}]),
    "reasoning_effort": st.sampled_from(["low", "medium", "high", "none"]),
    "x_unknown": JSON,
}  # fmt: skip


def _anthropic_block() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.builds(lambda t: {"type": "text", "text": t}, TEXT),
        st.sampled_from(
            [
                {"type": "text", "text": "c", "cache_control": {"type": "ephemeral"}},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _PNG}},
                {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
                {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "doc"}},
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": _PNG}, "title": "a.pdf"},
                {"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}},
                {"type": "search_result", "source": "s", "title": "t", "content": []},
            ]
        ),
    )  # fmt: skip


def _anthropic_messages() -> st.SearchStrategy[list[dict[str, Any]]]:
    content = st.one_of(TEXT, st.lists(_anthropic_block(), min_size=1, max_size=3))
    user = st.builds(lambda c: {"role": "user", "content": c}, content)
    use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "P"}}
    tool_turn = st.builds(
        lambda thinking, result: [
            {"role": "assistant", "content": ([thinking] if thinking else []) + [use]},
            {"role": "user", "content": [result]},
        ],
        st.one_of(st.none(), st.just({"type": "thinking", "thinking": "hm", "signature": "s"})),
        st.sampled_from(
            [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
                {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True},
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18C"}]},
            ]
        ),
    )  # fmt: skip
    assistant = st.builds(lambda c: {"role": "assistant", "content": c}, TEXT)
    turn = st.one_of(user.map(lambda m: [m]), assistant.map(lambda m: [m]), tool_turn)
    return st.builds(
        lambda first, turns, last: _conversation([], first, turns, last),
        user,
        st.lists(turn, max_size=3),
        user,
    )


_ANTHROPIC_OPTIONAL: dict[str, st.SearchStrategy[Any]] = {
    "system": st.one_of(TEXT, st.just([{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}])),
    "temperature": st.floats(0, 1),
    "top_p": st.floats(0, 1),
    "top_k": st.integers(1, 500),
    "stream": st.booleans(),
    "stop_sequences": st.lists(TEXT, max_size=4),
    "metadata": st.just({"user_id": "u1"}),
    "tools": st.just([
        {"name": "get_weather", "description": "weather", "input_schema": _SCHEMA},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 1},
    ]),
    "tool_choice": st.sampled_from([{"type": "auto"}, {"type": "any"}, {"type": "none"}, {"type": "tool", "name": "get_weather"}]),
    "thinking": st.sampled_from([{"type": "enabled", "budget_tokens": 1024}, {"type": "disabled"}, {"type": "adaptive"}]),
    "output_config": st.sampled_from([{"effort": "low"}, {"format": {"type": "json_schema", "schema": _SCHEMA}}]),
    "x_unknown": JSON,
}  # fmt: skip


def _responses_input_part() -> st.SearchStrategy[dict[str, Any]]:
    return st.one_of(
        st.builds(lambda t: {"type": "input_text", "text": t}, TEXT),
        st.sampled_from(
            [
                {"type": "input_image", "image_url": "https://x/y.png", "detail": "low"},
                {"type": "input_image", "image_url": f"data:image/png;base64,{_PNG}"},
                {"type": "input_image", "file_id": "file-img"},
                {"type": "input_file", "file_data": f"data:application/pdf;base64,{_PNG}", "filename": "a.pdf"},
                {"type": "input_file", "file_url": "https://x/a.pdf"},
                {"type": "input_file", "file_id": "file-abc"},
                {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
            ]
        ),
    )  # fmt: skip


_RS = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "hm"}],
       "encrypted_content": "gAAA"}  # fmt: skip
_FC = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
       "arguments": '{"city": "Paris"}', "status": "completed"}  # fmt: skip


def _responses_input() -> st.SearchStrategy[Any]:
    content = st.one_of(TEXT, st.lists(_responses_input_part(), min_size=1, max_size=3))
    user = st.builds(
        lambda c, typed: {"role": "user", "content": c} | ({"type": "message"} if typed else {}),
        content,
        st.booleans(),
    )
    system = st.builds(
        lambda role, t: {"type": "message", "role": role, "content": t},
        st.sampled_from(["system", "developer"]),
        TEXT,
    )
    assistant = st.builds(
        lambda t, as_parts: {
            "type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
            "content": [{"type": "output_text", "text": t, "annotations": []}] if as_parts else t,
        },
        TEXT,
        st.booleans(),
    )  # fmt: skip
    tool_turn = st.builds(
        lambda reasoning, output: [*([_RS] if reasoning else []), _FC, output],
        st.booleans(),
        st.sampled_from(
            [
                {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
                {"type": "function_call_output", "call_id": "call_1",
                 "output": [{"type": "input_text", "text": "18C"}]},
                {"type": "custom_tool_call_output", "call_id": "call_1", "output": "ok"},
            ]
        ),
    )  # fmt: skip
    other = st.sampled_from(
        [
            [{"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": "*** x"}],
            [{"type": "item_reference", "id": "msg_0"}],
            [{"type": "web_search_call", "id": "ws_1", "status": "completed"}],
        ]
    )  # fmt: skip
    turn = st.one_of(user.map(lambda m: [m]), assistant.map(lambda m: [m]), tool_turn, other)
    items = st.builds(
        lambda sys, first, turns: [*([sys] if sys else []), first, *(m for t in turns for m in t)],
        st.one_of(st.none(), system),
        user,
        st.lists(turn, max_size=3),
    )
    return st.one_of(TEXT, items)


_RESPONSES_OPTIONAL: dict[str, st.SearchStrategy[Any]] = {
    "instructions": TEXT,
    "temperature": st.floats(0, 2),
    "top_p": st.floats(0, 1),
    "max_output_tokens": st.integers(16, 4096),
    "stream": st.booleans(),
    "store": st.booleans(),
    "include": st.just(["reasoning.encrypted_content"]),
    "user": TEXT,
    "safety_identifier": TEXT,
    "metadata": st.just({"k": "v"}),
    "tools": st.just([
        {"type": "function", "name": "get_weather", "description": "weather", "parameters": _SCHEMA},
        {"type": "function", "name": "strict_one", "parameters": _SCHEMA, "strict": False},
        {"type": "custom", "name": "apply_patch", "format": {"type": "text"}},
        {"type": "namespace", "name": "ns", "tools": [{"type": "function", "name": "t"}]},
        {"type": "web_search"},
    ]),
    "tool_choice": st.sampled_from(["auto", "none", "required", {"type": "function", "name": "get_weather"},
                                    {"type": "allowed_tools", "mode": "auto", "tools": []}, {"type": "web_search"}]),
    "parallel_tool_calls": st.booleans(),
    "text": st.sampled_from([{"format": {"type": "text"}}, {"format": {"type": "json_object"}}, {"verbosity": "low"},
                             {"format": {"type": "json_schema", "name": "r", "schema": _SCHEMA, "strict": True}}]),
    "reasoning": st.sampled_from([{"effort": "low"}, {"effort": "none"}, {"summary": "auto"}]),
    "truncation": st.just("auto"),
    "x_unknown": JSON,
}  # fmt: skip


@st.composite
def valid_body(draw: st.DrawFn, dialect: str) -> dict[str, Any]:
    """A well-formed request body of ``dialect`` (``openai``, ``anthropic`` or ``responses``)."""
    if dialect == "responses":
        optional = _RESPONSES_OPTIONAL
        body: dict[str, Any] = {"model": "m", "input": draw(_responses_input())}
    else:
        optional = _OPENAI_OPTIONAL if dialect == "openai" else _ANTHROPIC_OPTIONAL
        messages = _openai_messages() if dialect == "openai" else _anthropic_messages()
        body = {"model": "m", "messages": draw(messages)}
    if dialect == "anthropic":
        body["max_tokens"] = draw(st.integers(0, 4096))
    keys = draw(st.lists(st.sampled_from(sorted(optional)), unique=True, max_size=6))
    for key in keys:
        body[key] = draw(optional[key])
    # st.just and sampled_from hand out the same objects every time: copy before mutating.
    return copy.deepcopy(body)


# --- breaking them -----------------------------------------------------------------------


def _containers(value: Any, out: list[Any]) -> list[Any]:
    """Every dict and list inside ``value``, outermost first."""
    if isinstance(value, dict | list):
        out.append(value)
        for child in value.values() if isinstance(value, dict) else value:
            _containers(child, out)
    return out


@st.composite
def mutated_body(draw: st.DrawFn, dialect: str, raw_tokens: bool = False) -> dict[str, Any]:
    """A valid body broken in 0-3 places (``raw_tokens``: may hold placeholders for
    :func:`raw_body` to splice)."""
    body = draw(valid_body(dialect))
    # Copies: sampled values are shared objects, and one inserted into itself is a cycle.
    replacement = (st.one_of(WRONG, RAW) if raw_tokens else WRONG).map(copy.deepcopy)
    for _ in range(draw(st.integers(0, 3))):
        node = draw(st.sampled_from(_containers(body, [])))
        action = draw(st.sampled_from(["replace", "replace", "drop", "add"]))
        if isinstance(node, dict):
            if action == "add" or not node:
                node[draw(st.sampled_from(["type", "role", "content", "text", "x", "id"]))] = draw(
                    replacement
                )
                continue
            key = draw(st.sampled_from(sorted(node)))
            if action == "drop":
                del node[key]
            else:
                node[key] = draw(replacement)
        elif action == "add" or not node:
            node.append(draw(replacement))
        else:
            i = draw(st.integers(0, len(node) - 1))
            if action == "drop":
                del node[i]
            else:
                node[i] = draw(replacement)
    return body


@st.composite
def raw_body(draw: st.DrawFn, dialect: str) -> bytes:
    """The bytes of a (possibly broken) body, with raw JSON tokens spliced in."""
    body = draw(mutated_body(dialect, raw_tokens=True))
    data = orjson.dumps(body)
    data = _PLACEHOLDER_RE.sub(lambda m: _RAW_TOKENS[int(m.group(1))], data)
    edit = draw(st.sampled_from(["none"] * 8 + ["duplicate-model", "truncate", "trailing"]))
    if edit == "duplicate-model":
        data = b'{"model":"m",' + data[1:]
    elif edit == "truncate" and len(data) > 2:
        data = data[: draw(st.integers(1, len(data) - 1))]
    elif edit == "trailing":
        data += b" x"
    return data
