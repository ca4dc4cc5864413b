"""Structural validation of a Chat Completions body for the passthrough path.

The passthrough path forwards the client's body without converting it, so nothing else
checks it: a body with no ``messages``, a numeric ``content`` or a string ``temperature``
would reach the upstream, and a lenient one would answer 200 (docs/decisions.md,
"Passthrough validates the body and forwards it as parsed"). :func:`validate_request`
gives it the same 400 the translated path gives, at a fraction of the cost of
:func:`.request.parse_request`.

How the two cannot drift: :func:`looks_valid` is a fast yes/no walk that allocates
nothing and builds no ``param`` strings. When it says yes, the body is forwarded; when it
says no, :func:`parse_request` runs and raises its own error, so the message and ``param``
are the translated path's by construction. ``looks_valid`` may be *stricter* than the
parser (a rare shape it does not know, such as the legacy ``function`` role, just takes
the slow path and is accepted if the parser accepts it); it must never be more lenient.
tests/fuzz/test_validator_property.py checks that with generated bodies.

What is checked is what ``parse_request`` checks: top-level types, each message an object
with a known role and content of an allowed type, parts typed, tool calls and tool results
well-formed. Unknown fields, unknown part types and content only another dialect cannot
carry (``input_audio``, ``n`` > 1, ...) are the upstream's business and pass.
"""

from __future__ import annotations

from typing import Any

from .._common import opt_str, top_level_ok
from .request import parse_request

__all__ = ["looks_valid", "validate_request"]

# `type(x) is T` rather than isinstance: the body comes from orjson, which builds exactly
# these types, and JSON `true` must not pass for a number (bool is an int subclass).
_NUMBER = (int, float)
_TOOL_CHOICE_WORDS = ("auto", "none", "required")
_FUNCTION_CALL_WORDS = ("auto", "none")
# Roles whose message is complete with a string content (a tuple: `in` compares with ==,
# so a role that is a list or an object cannot raise the TypeError a set lookup would).
_PLAIN_ROLES = ("user", "system", "developer", "assistant")


def validate_request(body: dict[str, Any]) -> None:
    """Raise the translated path's ``InvalidRequestError`` if ``body`` is malformed.

    >>> validate_request({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    >>> validate_request({"model": "m", "messages": "hi"})
    Traceback (most recent call last):
    interlingua.errors.InvalidRequestError: Invalid type for 'messages': expected an array, but got a string.
    """
    if not looks_valid(body):
        parse_request(body)  # raises the precise error, or accepts a shape we skipped


def looks_valid(body: Any) -> bool:
    """True only if :func:`parse_request` would accept ``body`` (False: ask it)."""
    if type(body) is not dict or type(body.get("model")) is not str:
        return False
    return top_level_ok(body, _SCALARS, _FIELDS) and _messages_ok(body.get("messages"))


def _stop_ok(v: Any) -> bool:
    if type(v) is str:
        return True
    return type(v) is list and all(type(s) is str for s in v)


def _function_ok(fn: Any) -> bool:
    """A function tool's ``function`` object (or a legacy ``functions`` entry)."""
    if type(fn) is not dict:
        return False
    name = fn.get("name")
    params = fn.get("parameters")
    strict = fn.get("strict")
    return (
        type(name) is str
        and name != ""
        and opt_str(fn.get("description"))
        and (params is None or type(params) is dict)
        and (strict is None or type(strict) is bool)
    )


def _tools_ok(v: Any) -> bool:
    if type(v) is not list:
        return False
    for tool in v:
        if type(tool) is not dict or type(tool.get("type")) is not str:
            return False
        if tool["type"] == "function" and not _function_ok(tool.get("function")):
            return False
        if tool["type"] == "custom" and not _custom_ok(tool.get("custom")):
            return False
    return True


def _custom_ok(custom: Any) -> bool:
    """A custom tool's ``custom`` object."""
    if type(custom) is not dict:
        return False
    name = custom.get("name")
    fmt = custom.get("format")
    return (
        type(name) is str
        and name != ""
        and opt_str(custom.get("description"))
        and (fmt is None or type(fmt) is dict)
    )


def _functions_ok(v: Any) -> bool:
    return type(v) is list and all(_function_ok(fn) for fn in v)


def _tool_choice_ok(v: Any) -> bool:
    if type(v) is str:
        return v in _TOOL_CHOICE_WORDS
    if type(v) is not dict or type(v.get("type")) is not str:
        return False
    kind = v["type"]
    if kind != "function" and kind != "custom":
        return True  # allowed_tools: kept verbatim
    fn = v.get(kind)
    return type(fn) is dict and type(fn.get("name")) is str


def _function_call_ok(v: Any) -> bool:
    if type(v) is str:
        return v in _FUNCTION_CALL_WORDS
    return type(v) is dict and type(v.get("name")) is str


def _response_format_ok(v: Any) -> bool:
    if type(v) is not dict:
        return False
    kind = v.get("type")
    if kind == "text" or kind == "json_object":
        return True
    if kind != "json_schema":
        return False
    spec = v.get("json_schema")
    if type(spec) is not dict:
        return False
    schema = spec.get("schema")
    strict = spec.get("strict")
    return (
        opt_str(spec.get("name"))
        and opt_str(spec.get("description"))
        and (schema is None or type(schema) is dict)
        and (strict is None or type(strict) is bool)
    )


# Top-level keys the parser type-checks; any other key is relayed unread. Plain types are
# looked up inline (a function call per key costs more than the check itself).
_INT = (int,)
_BOOL = (bool,)
_STR = (str,)
_SCALARS: dict[str, tuple[type, ...]] = {
    "max_completion_tokens": _INT,
    "max_tokens": _INT,
    "seed": _INT,
    "temperature": _NUMBER,
    "top_p": _NUMBER,
    "stream": _BOOL,
    "parallel_tool_calls": _BOOL,
    "user": _STR,
    "safety_identifier": _STR,
    "reasoning_effort": _STR,
    "stream_options": (dict,),
    "metadata": (dict,),
    "logprobs": _BOOL,
    "top_logprobs": _INT,
    "top_k": _INT,
    "min_p": _NUMBER,
    "repetition_penalty": _NUMBER,
    "audio": (dict,),
}
_FIELDS = {
    "modalities": lambda v: type(v) is list and all(type(m) is str for m in v),
    "stop": _stop_ok,
    "tools": _tools_ok,
    "tool_choice": _tool_choice_ok,
    "functions": _functions_ok,
    "function_call": _function_call_ok,
    "response_format": _response_format_ok,
}


# ------------------------------------------------------------------------- messages


def _messages_ok(msgs: Any) -> bool:
    if type(msgs) is not list or not msgs:
        return False
    for m in msgs:
        if type(m) is not dict:
            return False
        role = m.get("role")
        content = m.get("content")
        if len(m) == 2 and type(content) is str and role in _PLAIN_ROLES:
            continue  # {"role": ..., "content": "text"}: most messages, nothing else to check
        if not opt_str(m.get("name")):
            return False
        if role == "user":
            ok = type(content) is str or _user_parts_ok(content)
        elif role == "assistant":
            ok = _assistant_ok(m, content)
        elif role == "system" or role == "developer":
            ok = _text_parts_ok(content)
        elif role == "tool":
            ok = type(m.get("tool_call_id")) is str and (content is None or _text_parts_ok(content))
        else:
            return False  # unknown role, or the legacy `function` role: the parser decides
        if not ok:
            return False
    return True


def _text_parts_ok(content: Any) -> bool:
    if type(content) is str:
        return True
    if type(content) is not list:
        return False
    for c in content:
        if type(c) is not dict or c.get("type") != "text" or type(c.get("text")) is not str:
            return False
    return True


def _user_parts_ok(content: Any) -> bool:
    if type(content) is not list:
        return False
    for c in content:
        if type(c) is not dict:
            return False
        kind = c.get("type")
        if type(kind) is not str:
            return False
        if kind == "text":
            ok = type(c.get("text")) is str
        elif kind == "image_url":
            ok = _image_ok(c.get("image_url"))
        elif kind == "file":
            ok = _file_ok(c.get("file"))
        else:
            ok = kind != "refusal"  # other types (input_audio, extensions) are relayed
        if not ok:
            return False
    return True


def _image_ok(spec: Any) -> bool:
    if type(spec) is str:
        return True
    return type(spec) is dict and type(spec.get("url")) is str and opt_str(spec.get("detail"))


def _file_ok(spec: Any) -> bool:
    if type(spec) is not dict:
        return False
    file_id = spec.get("file_id")
    data = spec.get("file_data")
    return (
        opt_str(spec.get("filename"))
        and opt_str(file_id)
        and opt_str(data)
        and (data is not None or file_id is not None)
    )


def _assistant_ok(m: dict[str, Any], content: Any) -> bool:
    reasoning = m.get("reasoning_content")
    if reasoning is None:
        reasoning = m.get("reasoning")
    if not opt_str(reasoning) or not opt_str(m.get("refusal")):
        return False
    if content is not None and type(content) is not str and not _assistant_parts_ok(content):
        return False
    calls = m.get("tool_calls")
    if calls is not None and not _tool_calls_ok(calls):
        return False
    return m.get("function_call") is None  # legacy calls: the parser decides


def _assistant_parts_ok(content: Any) -> bool:
    if type(content) is not list:
        return False
    for c in content:
        if type(c) is not dict:
            return False
        kind = c.get("type")
        if type(kind) is not str or (kind == "text" and type(c.get("text")) is not str):
            return False
        if kind == "refusal" and type(c.get("refusal")) is not str:
            return False
    return True


def _tool_calls_ok(calls: Any) -> bool:
    if type(calls) is not list:
        return False
    for tc in calls:
        if type(tc) is not dict:
            return False
        kind = tc.get("type", "function")
        if kind == "custom":
            custom = tc.get("custom")
            if type(tc.get("id")) is not str or type(custom) is not dict:
                return False
            if type(custom.get("name")) is not str or type(custom.get("input")) is not str:
                return False
            continue
        if kind != "function":
            continue  # call types we do not model are relayed as they are
        fn = tc.get("function")
        if type(tc.get("id")) is not str or type(fn) is not dict:
            return False
        args = fn.get("arguments")
        if type(fn.get("name")) is not str:
            return False
        if args is not None and type(args) is not str and type(args) is not dict:
            return False
    return True
