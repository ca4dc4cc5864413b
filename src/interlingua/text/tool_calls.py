"""Tool calls written as text, for models without native tool calling.

A model with no tool-calling support in its server (a local GGUF, a raw completion
endpoint) can still call tools if the prompt tells it how (:mod:`.tool_prompt` writes that
prompt); :class:`ToolCallTextParser` reads the calls back out of the streamed answer.

Formats understood by the parser:

- ``tags`` -- Hermes / Qwen ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
  one tag per call; inside the tag also a JSON *list* of calls (SmolLM2-Instruct's
  format: ``<tool_call>[{...}, {...}]</tool_call>``; its empty list ``[]`` means "no
  call" and produces nothing), or one JSON object per line. A tag is recognized in any
  chunking; text before it streams at once (only a possible partial ``<tool_call>`` is
  held back). The name in a tag is accepted even if it is not in ``tool_names``: the
  tag makes the intent unambiguous and the client reports unknown tools itself.
- ``json`` -- the *whole* answer (stripped) is a JSON call object, a JSON list of them,
  optionally fenced (```` ```json ````) or prefixed by Llama 3's ``<|python_tag|>`` or
  Mistral's ``[TOOL_CALLS]``. Only with ``tool_names``, only when every name is one of
  them, and only with call-shaped keys (``name``/``tool``/``function`` plus
  ``arguments``/``parameters``), so an ordinary JSON answer is not hijacked. Whether the
  answer is *whole* is known only at the end, so **an answer whose first non-blank
  character starts such a candidate (``{``, ``[{``, a code fence followed by ``{``/``[``,
  a prefix tag) is buffered until** :meth:`ToolCallTextParser.flush`; anything else
  streams normally (a fence followed by other code is released as soon as that is clear).

Never lose output: a tag whose content is not valid call JSON is emitted verbatim as
text (tags included), as is a ``json`` candidate that turns out not to be a call. An
unclosed ``<tool_call>`` at the end of the stream is a call if its content parses, else
text. Arguments are always emitted as compact JSON object text (``{}`` when absent); a
JSON *string* holding an object is accepted too (some models double-encode).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from enum import IntEnum
from typing import Any, Literal, TypeAlias

import orjson

from .stop import partial_suffix_len

__all__ = [
    "CLOSE_TAG",
    "DEFAULT_FORMATS",
    "OPEN_TAG",
    "Segment",
    "TextSegment",
    "ToolCallSegment",
    "ToolCallTextParser",
    "parse_tool_calls",
]

TextSegment: TypeAlias = tuple[Literal["text"], str]
ToolCallSegment: TypeAlias = tuple[Literal["tool_call"], str, str]
Segment: TypeAlias = TextSegment | ToolCallSegment
"""``("text", text)`` or ``("tool_call", name, arguments_json)``."""

DEFAULT_FORMATS: frozenset[str] = frozenset({"tags", "json"})

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
_OPEN_TAGS = (OPEN_TAG,)
_CLOSE_TAGS = (CLOSE_TAG,)

# Prefixes that announce a bare JSON call: Llama 3.1 ``<|python_tag|>`` (when the
# detokenizer keeps special tokens), Mistral ``[TOOL_CALLS]``, and a Markdown fence.
_FENCE = "```"
_BARE_PREFIXES = ("<|python_tag|>", "[TOOL_CALLS]", _FENCE)
_FENCE_LANG = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
_NAME_KEYS = ("name", "tool", "tool_name")
_ARGS_KEYS = ("arguments", "parameters", "args")
# A bare JSON answer counts as a call only if it has no other keys than these.
_CALL_KEYS = frozenset({*_NAME_KEYS, *_ARGS_KEYS, "function", "type", "id"})


class _Verdict(IntEnum):
    """What the start of an answer says about a bare JSON call, see _bare_verdict."""

    WAIT = 0  # undecided: it could still become either
    JSON = 1  # a call candidate: buffer the answer until flush
    NO = 2  # not a call: stream normally


# Module names for the members: an enum attribute lookup costs a descriptor call on
# Python 3.11, which showed in the parser's per-chunk benchmark; a global does not.
_WAIT, _JSON, _NO = _Verdict.WAIT, _Verdict.JSON, _Verdict.NO


def _arguments_json(args: Any) -> str | None:
    """Arguments value -> compact JSON object text, or None if it is not an object."""
    if args is None:
        return "{}"
    if isinstance(args, str):
        if not args.strip():
            return "{}"
        try:
            args = orjson.loads(args)  # double-encoded arguments
        except orjson.JSONDecodeError:
            return None
    if isinstance(args, dict):
        return orjson.dumps(args).decode()
    return None


def _one_call(item: Any, strict: bool) -> tuple[str, str] | None:
    """One call object -> (name, arguments_json), or None if it is not a call."""
    if not isinstance(item, dict) or (strict and not item.keys() <= _CALL_KEYS):
        return None
    function = item.get("function")
    if isinstance(function, dict):  # OpenAI shape: {"type": "function", "function": {...}}
        return _one_call(function, strict)
    name = next((item[k] for k in _NAME_KEYS if k in item), function)
    if not isinstance(name, str) or not name:
        return None
    arguments = _arguments_json(next((item[k] for k in _ARGS_KEYS if k in item), None))
    return None if arguments is None else (name, arguments)


def _calls(value: Any, strict: bool, names: Collection[str] | None) -> list[tuple[str, str]] | None:
    """A parsed JSON value -> its calls, or None if any element is not a call."""
    items = value if isinstance(value, list) else [value]
    calls: list[tuple[str, str]] = []
    for item in items:
        call = _one_call(item, strict)
        if call is None or (names is not None and call[0] not in names):
            return None
        calls.append(call)
    return calls


def _unfence(text: str) -> str:
    """Strip a surrounding Markdown code fence (and its language tag), if any."""
    if text.startswith(_FENCE) and text.endswith(_FENCE) and len(text) >= 2 * len(_FENCE):
        return text[len(_FENCE) : -len(_FENCE)].lstrip(_FENCE_LANG).strip()
    return text


def parse_tool_calls(
    text: str, names: Collection[str] | None = None, *, strict: bool = False
) -> list[tuple[str, str]] | None:
    """Parse call JSON (object, list, fenced, prefixed) into ``[(name, arguments_json)]``.

    Returns None when ``text`` is not valid call JSON. ``strict`` (used for bare answers)
    rejects objects with keys other than call keys; ``names`` restricts the tool names.
    Inside a tag, several objects one per line are accepted too.

    >>> parse_tool_calls('{"name": "f", "parameters": {"x": 1}}')
    [('f', '{"x":1}')]
    """
    body = text.strip()
    for prefix in _BARE_PREFIXES[:2]:
        if body.startswith(prefix):
            body = body[len(prefix) :].lstrip()
    body = _unfence(body)
    try:
        return _calls(orjson.loads(body), strict, names)
    except orjson.JSONDecodeError:
        pass
    lines = [line for line in body.splitlines() if line.strip()]
    if strict or len(lines) < 2:
        return None
    calls: list[tuple[str, str]] = []
    for line in lines:  # Hermes-style models sometimes put several objects in one tag
        try:
            more = _calls(orjson.loads(line), strict, names)
        except orjson.JSONDecodeError:
            return None
        if more is None:
            return None
        calls.extend(more)
    return calls


def _bare_verdict(text: str) -> _Verdict:
    """Could an answer starting with ``text`` be a bare JSON call? WAIT, JSON or NO.

    Monotone by construction: once JSON or NO, every extension of ``text`` gets the
    same verdict, which is what makes the parser independent of chunking.
    """
    s = text.lstrip()
    if not s:
        return _WAIT
    for prefix in _BARE_PREFIXES:
        if s.startswith(prefix):
            rest = s[len(prefix) :]
            if prefix == _FENCE:
                rest = rest.lstrip(_FENCE_LANG)
            rest = rest.lstrip()
            if not rest:
                return _WAIT
            return _JSON if rest[0] in "{[" else _NO
        if prefix.startswith(s):
            return _WAIT
    if s[0] == "{":
        return _JSON
    if s[0] == "[":
        rest = s[1:].lstrip()
        if not rest:
            return _WAIT
        return _JSON if rest[0] == "{" else _NO
    return _NO


class ToolCallTextParser:
    """Stream-safe parser of tool calls written as text; see the module docstring.

    ``feed(text)`` and ``flush()`` return segments: ``("text", text)`` or
    ``("tool_call", name, arguments_json)``. Concatenating the segments of any chunking
    of an answer gives the same result as feeding it whole. Whitespace right after a
    call (between parallel calls, before the end) is dropped.

    >>> p = ToolCallTextParser()
    >>> p.feed('Let me check.<tool_c')
    [('text', 'Let me check.')]
    >>> p.feed('all>{"name": "w", "arguments": {"city": "Paris"}}</tool_call>')
    [('tool_call', 'w', '{"city":"Paris"}')]
    """

    __slots__ = ("_after_call", "_bare", "_buf", "_chunks", "_in_tag", "_names", "_tags")

    def __init__(
        self,
        tool_names: Collection[str] | None = None,
        formats: Iterable[str] = DEFAULT_FORMATS,
    ) -> None:
        chosen = frozenset(formats)
        if not chosen <= DEFAULT_FORMATS:
            raise ValueError(f"unknown tool-call formats: {sorted(chosen - DEFAULT_FORMATS)}")
        self._names = frozenset(tool_names or ())
        self._tags = "tags" in chosen
        # The bare-JSON check needs names to tell a call from an ordinary JSON answer.
        # None = undecided start (buffered in _buf), True = buffering a candidate in
        # _chunks until flush, False = normal streaming.
        self._bare: bool | None = None if ("json" in chosen and self._names) else False
        self._chunks: list[str] = []
        self._buf = ""  # held back: undecided start, partial tag, or open tag content
        self._in_tag = False
        self._after_call = False

    def feed(self, text: str) -> list[Segment]:
        """Add streamed text; return the segments that are now certain."""
        out: list[Segment] = []
        if self._bare is False:
            self._stream(text, out)
        elif self._bare:
            self._chunks.append(text)
        else:
            start = self._buf + text
            verdict = _bare_verdict(start)
            if verdict == _WAIT:
                self._buf = start
            elif verdict == _JSON:
                self._bare, self._buf = True, ""
                self._chunks.append(start)
            else:
                self._bare, self._buf = False, ""
                self._stream(start, out)
        return out

    def flush(self) -> list[Segment]:
        """End of stream: decide a buffered candidate, release what was held back."""
        out: list[Segment] = []
        if self._bare is not False:
            raw = "".join(self._chunks) if self._bare else self._buf
            self._bare, self._buf, self._chunks = False, "", []
            calls = parse_tool_calls(raw, self._names, strict=True) if raw.strip() else None
            if calls:
                self._emit_calls(calls, out)
                return out
            self._stream(raw, out)  # not a call after all: the answer is ordinary text
        buf, self._buf = self._buf, ""
        if self._in_tag:
            self._in_tag = False
            # Lenient at the end: a model stopped right before "</tool_call>" (stop token,
            # max tokens) still made a call if the content parses.
            body = buf[: len(buf) - partial_suffix_len(buf, _CLOSE_TAGS)]
            calls = parse_tool_calls(body)
            if calls is not None:
                self._emit_calls(calls, out)
            else:
                self._emit_text(OPEN_TAG + buf, out)
        else:
            self._emit_text(buf, out)
        return out

    def _stream(self, text: str, out: list[Segment]) -> None:
        """Normal streaming: text passes, ``<tool_call>`` tags are parsed."""
        if not self._tags:
            self._emit_text(text, out)
            return
        buf = self._buf + text if self._buf else text
        # Inside a tag, the close tag cannot start before the old buffer's tail.
        start = max(0, len(self._buf) - len(CLOSE_TAG) + 1) if self._in_tag else 0
        while True:
            if self._in_tag:
                j = buf.find(CLOSE_TAG, start)
                if j == -1:
                    self._buf = buf
                    return
                body, buf = buf[:j], buf[j + len(CLOSE_TAG) :]
                self._in_tag = False
                calls = parse_tool_calls(body)
                if calls is None:  # invalid JSON: keep the model's text, tags and all
                    self._emit_text(OPEN_TAG + body + CLOSE_TAG, out)
                else:
                    self._emit_calls(calls, out)
            else:
                i = buf.find(OPEN_TAG)
                if i == -1:
                    keep = len(buf) - partial_suffix_len(buf, _OPEN_TAGS)
                    self._emit_text(buf[:keep], out)
                    self._buf = buf[keep:]
                    return
                self._emit_text(buf[:i], out)
                buf = buf[i + len(OPEN_TAG) :]
                self._in_tag = True
                start = 0

    def _emit_calls(self, calls: list[tuple[str, str]], out: list[Segment]) -> None:
        for name, arguments in calls:
            out.append(("tool_call", name, arguments))
        self._after_call = True

    def _emit_text(self, text: str, out: list[Segment]) -> None:
        if self._after_call:
            text = text.lstrip()
            if text:
                self._after_call = False
        if not text:
            return
        last = out[-1] if out else None
        if last is not None and last[0] == "text":
            out[-1] = ("text", last[1] + text)
        else:
            out.append(("text", text))
