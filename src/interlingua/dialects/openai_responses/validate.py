"""Structural validation of a Responses body for the passthrough path.

The same scheme as :mod:`..openai_chat.validate` (which says why in full): :func:`looks_valid`
is a yes/no walk that allocates nothing and builds no ``param`` strings; when it says
no, :func:`.request.parse_request` runs and raises its own error, so the 400's message
and ``param`` are the translated path's by construction. The walk may be stricter than
the parser (a rare shape, such as ``arguments`` sent as an object, takes the slow path
and is accepted if the parser accepts it), never more lenient:
tests/fuzz/test_validator_property.py checks that with generated bodies and with every
single fault of a rich body.

What is checked is what ``parse_request`` checks: ``model``; ``input`` a string or items,
each item an object whose ``type`` (default ``message``) decides its required fields
(message roles and content parts, ``function_call`` / ``custom_tool_call`` ids, names
and arguments, tool outputs, reasoning summaries); top-level types; ``tools`` (function,
custom, namespace members), ``tool_choice``, ``text.format`` and ``reasoning.effort``.
Items, parts and tools the parser keeps verbatim (hosted tools, ``item_reference``,
``input_audio``, ...) and unknown top-level fields are the upstream's business and pass.
"""

from __future__ import annotations

from typing import Any

from .._common import opt_str, top_level_ok
from .request import parse_request

__all__ = ["looks_valid", "validate_request"]

# `type(x) is T` rather than isinstance, as in the Chat walk: orjson builds exactly these
# types, and JSON `true` must not pass for a number (bool is an int subclass).
_NUMBER = (int, float)
_ROLES = ("user", "assistant", "system", "developer")
_TOOL_CHOICE_WORDS = ("auto", "none", "required")
_CALLS = ("function_call", "custom_tool_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")


def validate_request(body: dict[str, Any]) -> None:
    """Raise the translated path's ``InvalidRequestError`` if ``body`` is malformed.

    >>> validate_request({"model": "m", "input": "hi"})
    >>> validate_request({"model": "m", "input": 5})
    Traceback (most recent call last):
    interlingua.errors.InvalidRequestError: Invalid type for 'input': expected a string or an array, but got a number.
    """
    if not looks_valid(body):
        parse_request(body)  # raises the precise error, or accepts a shape we skipped


def looks_valid(body: Any) -> bool:
    """True only if :func:`parse_request` would accept ``body`` (False: ask it)."""
    if type(body) is not dict or type(body.get("model")) is not str:
        return False
    return top_level_ok(body, _SCALARS, _FIELDS)


# ------------------------------------------------------------------------ top level


def _input_ok(v: Any) -> bool:
    if type(v) is str:
        return True
    if type(v) is not list:
        return False
    for item in v:
        if type(item) is not dict:
            return False
        kind = item.get("type")
        if kind is None or kind == "message":
            role = item.get("role")
            content = item.get("content")
            if type(content) is str:
                ok = role in _ROLES
            elif role == "assistant":
                ok = _assistant_parts_ok(content)
            else:
                ok = role in _ROLES and _input_parts_ok(content)
        elif type(kind) is not str:
            return False
        elif kind in _CALLS:
            ok = _call_ok(item, kind)
        elif kind in _OUTPUTS:
            output = item.get("output")
            ok = type(item.get("call_id")) is str and (
                type(output) is str or _input_parts_ok(output)
            )
        elif kind == "reasoning":
            ok = _reasoning_ok(item)
        else:
            continue  # hosted-tool calls and outputs, item_reference: kept verbatim
        if not ok:
            return False
    return True


def _input_parts_ok(content: Any) -> bool:
    """A list of ``input_*`` parts (a user/system message's content or a tool output)."""
    if type(content) is not list:
        return False
    for c in content:
        if type(c) is not dict:
            return False
        kind = c.get("type")
        if kind == "input_text":
            ok = type(c.get("text")) is str
        elif kind == "input_image":
            url = c.get("image_url")
            if url is None:  # an uploaded image (file_id), kept whole for OpenAI
                ok = c.get("file_id") is not None
            else:
                ok = type(url) is str and opt_str(c.get("detail"))
        elif kind == "input_file":
            data = c.get("file_data")
            url = c.get("file_url")
            file_id = c.get("file_id")
            ok = (
                opt_str(c.get("filename"))
                and opt_str(data)
                and opt_str(url)
                and opt_str(file_id)
                and (data is not None or url is not None or file_id is not None)
            )
        else:
            ok = type(kind) is str  # input_audio, extensions: relayed
        if not ok:
            return False
    return True


def _assistant_parts_ok(content: Any) -> bool:
    if type(content) is not list:
        return False
    for c in content:
        if type(c) is not dict:
            return False
        kind = c.get("type")
        if kind == "output_text" or kind == "input_text":
            if type(c.get("text")) is not str:
                return False
        elif kind == "refusal":
            if type(c.get("refusal")) is not str:
                return False
        else:
            # Another part makes the parser keep the whole item unread, but only if every
            # part before it passed: an honest walk would need to look back. Ask it.
            return False
    return True


def _call_ok(item: dict[str, Any], kind: str) -> bool:
    if type(item.get("call_id")) is not str or type(item.get("name")) is not str:
        return False
    if not opt_str(item.get("namespace")):
        return False
    if kind == "function_call":
        return opt_str(item.get("arguments"))  # an object: the parser re-encodes it
    return type(item.get("input")) is str


def _reasoning_ok(item: dict[str, Any]) -> bool:
    for key in ("content", "summary"):
        value = item.get(key)
        if value is None:
            continue
        if type(value) is not list:
            return False
        for s in value:
            if type(s) is not dict or type(s.get("text")) is not str:
                return False
    return opt_str(item.get("encrypted_content"))


def _tool_spec_ok(tool: dict[str, Any], kind: str) -> bool:
    """A function or custom tool (top-level or a namespace member)."""
    name = tool.get("name")
    if type(name) is not str or name == "" or not opt_str(tool.get("description")):
        return False
    if kind == "custom":
        fmt = tool.get("format")
        return fmt is None or type(fmt) is dict
    params = tool.get("parameters")
    strict = tool.get("strict")
    return (params is None or type(params) is dict) and (strict is None or type(strict) is bool)


def _tools_ok(v: Any) -> bool:
    if type(v) is not list:
        return False
    for tool in v:
        if type(tool) is not dict:
            return False
        kind = tool.get("type")
        if kind == "function" or kind == "custom":
            ok = _tool_spec_ok(tool, kind)
        elif kind == "namespace" and tool.get("tools"):
            ok = _namespace_ok(tool)
        else:
            ok = type(kind) is str  # a hosted tool (or an empty namespace): kept verbatim
        if not ok:
            return False
    return True


def _namespace_ok(tool: dict[str, Any]) -> bool:
    members = tool.get("tools")
    if type(tool.get("name")) is not str or type(members) is not list:
        return False
    for member in members:
        if type(member) is not dict:
            return False
        kind = member.get("type")
        if (kind != "function" and kind != "custom") or not _tool_spec_ok(member, kind):
            return False
    return True


def _tool_choice_ok(v: Any) -> bool:
    if type(v) is str:
        return v in _TOOL_CHOICE_WORDS
    if type(v) is not dict:
        return False
    kind = v.get("type")
    if kind == "function" or kind == "custom":
        return type(v.get("name")) is str
    return type(kind) is str  # allowed_tools, hosted tools, mcp: kept verbatim


def _text_ok(v: Any) -> bool:
    if type(v) is not dict:
        return False
    fmt = v.get("format")
    if fmt is None:
        return True
    if type(fmt) is not dict:
        return False
    kind = fmt.get("type")
    if kind == "text" or kind == "json_object":
        return True
    if kind != "json_schema":
        return False
    strict = fmt.get("strict")
    return (
        type(fmt.get("schema")) is dict
        and type(fmt.get("name")) is str
        and (strict is None or type(strict) is bool)
        and opt_str(fmt.get("description"))
    )


def _reasoning_field_ok(v: Any) -> bool:
    return type(v) is dict and opt_str(v.get("effort"))


# Top-level keys the parser type-checks; any other key is relayed unread.
_INT = (int,)
_BOOL = (bool,)
_STR = (str,)
_SCALARS: dict[str, tuple[type, ...]] = {
    "max_output_tokens": _INT,
    "temperature": _NUMBER,
    "top_p": _NUMBER,
    "stream": _BOOL,
    "parallel_tool_calls": _BOOL,
    "instructions": _STR,
    "user": _STR,
    "safety_identifier": _STR,
    "metadata": (dict,),
    "top_logprobs": _INT,
}
_FIELDS = {
    "input": _input_ok,
    "tools": _tools_ok,
    "tool_choice": _tool_choice_ok,
    "text": _text_ok,
    "reasoning": _reasoning_field_ok,
}
