"""Tool calls written as XML: Qwen3-Coder's form, and the bare form without its envelope.

Qwen3-Coder's chat template writes a call as (one parameter per block, the value between
a newline after the opening tag and one before the closing tag)::

    <tool_call>
    <function=Bash>
    <parameter=command>
    ls -la
    </parameter>
    </function>
    </tool_call>

Served without vLLM's or llama.cpp's tool parser for it, that text reaches the gateway as
the answer. Models imitating Claude Code's transcript write the same without the
envelope, after Claude Code's bullet: ``● <function=Bash><parameter=command>ls</parameter>``
(the form free-claude-code's heuristic parser reads). :class:`XmlCall` reads one call of
either form from a buffer that grows as text streams in; :func:`typed_arguments` types
its parameter values by the offered tool's JSON schema.

What is read as a call (lenient where models are sloppy, strict where prose could be
mistaken for a call):

- ``<function=NAME>``, NAME an offered tool (a name runs to ``>`` and holds no blank,
  ``<`` or ``>``), then any number of ``<parameter=KEY>VALUE</parameter>``, then
  ``</function>`` and ``</tool_call>``, each optional; blanks between them are ignored.
- A value ends at ``</parameter>``, or (its closing tag missing) where the next
  ``<parameter=``, ``</function>`` or ``</tool_call>`` begins, as vLLM's ``qwen3_coder``
  parser reads it. A value cannot hold those four strings.
- Without ``</function>``, the call ends after its last parameter, where something other
  than another parameter or a closing tag follows (the text after the call), or at the
  end of the answer (a closing tag cut in half there is part of the call).
- ``<function=NAME>`` followed by anything else (a mention in prose: "use
  ``<function=Bash>``") is not a call, nor is a name that is not an offered tool, an
  empty or broken name, or a parameter with such a name. A call without parameters needs
  its ``</function>`` (or ``</tool_call>``).
- A parameter given twice keeps its last value.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

import orjson

from .stop import partial_suffix_len

__all__ = ["BULLETS", "FUNCTION_TAG", "XmlCall", "typed_arguments", "typed_value"]

FUNCTION_TAG = "<function="
PARAMETER_TAG = "<parameter="
END_PARAMETER = "</parameter>"
END_FUNCTION = "</function>"
END_CALL = "</tool_call>"  # the envelope's close, tool_calls.CLOSE_TAG
#: Claude Code's bullets (● in free-claude-code's parser, ⏺ in Claude Code's own
#: transcript): before a bare call they, and the blanks after them, are not answer text
BULLETS = "●⏺"

# Where a value ends, and what may follow a parameter (besides the text after the call).
_VALUE_ENDS = (END_PARAMETER, PARAMETER_TAG, END_FUNCTION, END_CALL)
_AFTER_PARAMETER = (PARAMETER_TAG, END_FUNCTION, END_CALL)
_LONGEST_END = max(map(len, _VALUE_ENDS))
_MAX_NAME = 256  # a longer "name" is prose, not a tool or parameter name
_NAME = re.compile(r"[^\s<>]*")
_BLANKS = re.compile(r"\s*")

# States of XmlCall, as module names (a global lookup is cheaper than an enum attribute)
_TOOL, _KEY, _VALUE, _BETWEEN, _CLOSED = range(5)

Call = tuple[str, dict[str, str]]
"""A call read: the tool's name and its parameters' raw texts."""
_WAIT: tuple[int, Call | None] = (0, None)


class XmlCall:
    """One XML call read incrementally; see the module docstring for what is a call.

    The caller keeps the call's text in one buffer that only grows, from the call's first
    character (a bullet, ``<tool_call>`` or ``<function=`` itself); ``start`` is where
    the name begins, just after ``<function=``. :meth:`advance` reads on from where it
    stopped, so a long value streamed in small chunks is scanned once.

    >>> text = "<function=Bash><parameter=command>ls</parameter></function> Done."
    >>> XmlCall({"Bash"}, 10).advance(text, eof=False)
    (59, ('Bash', {'command': 'ls'}))
    """

    __slots__ = ("_key", "_name", "_names", "_params", "_pos", "_search", "_state", "_value")

    def __init__(self, names: Collection[str], start: int) -> None:
        self._names = names
        self._state = _TOOL
        self._pos = start  # where reading goes on
        self._name = ""
        self._key = ""  # the parameter being read
        self._value = 0  # where its value starts
        # where to look for the value's end next time; after a parameter or
        # </function>, where the blanks seen so far end
        self._search = 0
        self._params: dict[str, str] = {}

    def advance(self, buf: str, eof: bool) -> tuple[int, Call | None] | None:
        """Read on in ``buf``; None while undecided (only before ``eof``).

        Else ``(end, call)``: ``buf[:end]`` is the call (``call`` its name and raw
        parameters), or, with ``call`` None, text that turned out not to be a call.
        ``end`` is never 0, and the caller goes on reading at ``buf[end:]``.
        """
        while True:
            state = self._state
            if state == _VALUE:
                step = self._read_value(buf, eof)
            elif state == _BETWEEN:
                step = self._after_parameter(buf, eof)
            elif state == _CLOSED:
                step = self._after_function(buf, eof)
            else:
                step = self._read_name(buf, eof)
            if step is not None:
                return step if step[0] else None

    # Each step returns None to go on with the next state, _WAIT for more text, or the
    # result of advance.

    def _read_name(self, buf: str, eof: bool) -> tuple[int, Call | None] | None:
        """The tool's or a parameter's name, up to ``>``."""
        pos = self._pos
        end = _NAME.match(buf, pos).end()  # type: ignore[union-attr]  # always matches
        if end == len(buf) and not eof and end - pos <= _MAX_NAME:
            return _WAIT
        if end == len(buf) or buf[end] != ">" or end == pos or end - pos > _MAX_NAME:
            return end, None  # a broken name: what was read is text
        name = buf[pos:end]
        self._pos = end + 1
        if self._state == _TOOL:
            if name not in self._names:
                return end + 1, None  # not an offered tool: the tag is text
            self._name, self._state = name, _BETWEEN
        else:
            self._key, self._state = name, _VALUE
            self._value = self._search = end + 1
        return None

    def _read_value(self, buf: str, eof: bool) -> tuple[int, Call | None] | None:
        """A parameter's value, up to where it ends."""
        end, marker = _first_end(buf, self._search)
        if end != -1:
            self._params[self._key] = buf[self._value : end]
            self._pos = end + len(END_PARAMETER) if marker == END_PARAMETER else end
            self._state = _BETWEEN
            return None
        if not eof:
            self._search = max(self._value, len(buf) - _LONGEST_END + 1)
            return _WAIT
        # The answer ended inside the value: a closing tag cut in half is not in it.
        end = len(buf) - partial_suffix_len(buf, _VALUE_ENDS)
        self._params[self._key] = buf[self._value : end]
        return len(buf), (self._name, self._params)

    def _after_parameter(self, buf: str, eof: bool) -> tuple[int, Call | None] | None:
        """After the name or a parameter: another parameter, a closing tag, or the end."""
        at = _BLANKS.match(buf, max(self._pos, self._search)).end()  # type: ignore[union-attr]
        if buf.startswith(PARAMETER_TAG, at):
            self._pos, self._state = at + len(PARAMETER_TAG), _KEY
            return None
        if buf.startswith(END_FUNCTION, at):
            self._pos, self._state = at + len(END_FUNCTION), _CLOSED
            return None
        if buf.startswith(END_CALL, at):
            return at + len(END_CALL), (self._name, self._params)
        rest = buf[at : at + _LONGEST_END]
        cut = any(tag.startswith(rest) for tag in _AFTER_PARAMETER)  # blanks or a tag's start
        if cut and not eof:
            # Blanks up to here are not scanned again: a model's runaway newlines, read
            # a chunk at a time from the call's start, would cost quadratic time.
            self._search = at
            return _WAIT
        if not self._params:
            return self._pos, None  # "<function=X>" and then prose: a mention, not a call
        # The call ends after its last parameter; at the end of the answer a closing tag
        # cut in half is the call's.
        return (len(buf) if cut else self._pos), (self._name, self._params)

    def _after_function(self, buf: str, eof: bool) -> tuple[int, Call | None] | None:
        """After ``</function>``: the envelope's ``</tool_call>``, if any, is the call's."""
        at = _BLANKS.match(buf, max(self._pos, self._search)).end()  # type: ignore[union-attr]
        if buf.startswith(END_CALL, at):
            return at + len(END_CALL), (self._name, self._params)
        if END_CALL.startswith(buf[at : at + len(END_CALL)]):
            if eof:
                return len(buf), (self._name, self._params)
            self._search = at  # as in _after_parameter
            return _WAIT
        return self._pos, (self._name, self._params)


def _first_end(buf: str, start: int) -> tuple[int, str]:
    """Where the first end of a value at or after ``start`` is, and which; (-1, "")."""
    i = buf.find("<", start)
    while i != -1:
        for marker in _VALUE_ENDS:
            if buf.startswith(marker, i):
                return i, marker
        i = buf.find("<", i + 1)
    return -1, ""


# --- values typed by the schema ---------------------------------------------------------


def typed_arguments(params: Mapping[str, str], schema: Any) -> str:
    """A call's raw parameter texts -> its arguments as compact JSON object text.

    Each value is typed by its property in the tool's ``schema`` (``properties``, else a
    schema-valued ``additionalProperties``), see :func:`typed_value`.

    >>> typed_arguments({"n": "\\n3\\n", "s": "3"}, {"properties": {"n": {"type": "integer"}}})
    '{"n":3,"s":"3"}'
    """
    properties: Any = None
    extra: Any = None
    if isinstance(schema, dict):
        properties, extra = schema.get("properties"), schema.get("additionalProperties")
    if not isinstance(properties, dict):
        properties = {}
    if not isinstance(extra, dict):
        extra = None
    typed = {key: typed_value(raw, properties.get(key, extra)) for key, raw in params.items()}
    return orjson.dumps(typed).decode()


def typed_value(raw: str, schema: Any) -> Any:
    """A parameter's text as the value its ``schema`` asks for.

    One newline right after the opening tag and one right before the closing tag are
    dropped (Qwen3-Coder's template writes them around every value); the rest is kept as
    written. Then, by the JSON types the schema allows (``type``, a ``type`` list, an
    ``enum``/``const``'s values, ``anyOf``/``oneOf``):

    - a string allowed, or no type said (no schema, a ``$ref``, an empty schema): the text
      itself (a string is valid against a schema without a type; reading ``42`` or
      ``{...}`` as JSON there would change what the model meant);
    - else the text (blanks around it ignored) read as JSON, kept if it is of an allowed
      type: ``integer`` (``5.0`` becomes ``5``), ``number``, ``object``, ``array``,
      ``null``; ``boolean`` also takes ``True``/``False`` in any case (a template writing
      a boolean with Python's ``str``);
    - anything else stays the text, and the client's own input check reports it to the
      model (more useful to an agent than losing the call).

    >>> typed_value("\\n60000\\n", {"type": "number"}), typed_value("False", {"type": "boolean"})
    (60000, False)
    """
    text = _unwrap(raw)
    kinds = _kinds(schema)
    if not kinds or "string" in kinds:
        return text
    word = text.strip()
    if "boolean" in kinds and word.lower() in ("true", "false"):
        return word.lower() == "true"
    try:
        value = orjson.loads(word)
    except orjson.JSONDecodeError:
        return text
    kind = _json_type(value)
    if kind in kinds or (kind == "integer" and "number" in kinds):
        return value
    if kind == "number" and "integer" in kinds and value.is_integer():
        return int(value)  # 5.0 for an integer
    return text


def _unwrap(value: str) -> str:
    """``value`` without one newline at each end (``\\r\\n`` counts as one)."""
    if value.startswith("\n"):
        value = value[1:]
    elif value.startswith("\r\n"):
        value = value[2:]
    if value.endswith("\r\n"):
        return value[:-2]
    return value[:-1] if value.endswith("\n") else value


def _kinds(schema: Any) -> frozenset[str]:
    """The JSON types ``schema`` allows; empty when it does not say (any value goes)."""
    if not isinstance(schema, dict):
        return frozenset()
    kind = schema.get("type")
    if isinstance(kind, str):
        return frozenset((kind,))
    if isinstance(kind, list):
        return frozenset(k for k in kind if isinstance(k, str))
    values = schema.get("enum")
    if isinstance(values, list) or "const" in schema:
        values = values if isinstance(values, list) else [schema["const"]]
        return frozenset(map(_json_type, values))
    kinds: set[str] = set()
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        for branch in branches if isinstance(branches, list) else ():
            more = _kinds(branch)
            if not more:
                return frozenset()  # a branch that allows anything allows a string
            kinds |= more
    return frozenset(kinds)


#: JSON Schema's name of each type a JSON document parses to (exact types: orjson and
#: json give no subclasses)
_JSON_TYPES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    dict: "object",
    list: "array",
    type(None): "null",
}


def _json_type(value: Any) -> str:
    """The JSON Schema type name of a parsed JSON value."""
    return _JSON_TYPES.get(type(value), "")
