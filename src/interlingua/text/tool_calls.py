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
  held back). The name in a tag of JSON is accepted even if it is not in ``tool_names``:
  the tag makes the intent unambiguous and the client reports unknown tools itself. (A
  tag holding ``<function=...>`` is an ``xml`` call.)
- ``json`` -- the *whole* answer (stripped) is a JSON call object, a JSON list of them,
  optionally fenced (```` ```json ````) or prefixed by Llama 3's ``<|python_tag|>`` or
  Mistral's ``[TOOL_CALLS]``. Only with ``tool_names``, only when every name is one of
  them, and only with call-shaped keys (``name``/``tool``/``function`` plus
  ``arguments``/``parameters``), so an ordinary JSON answer is not hijacked. Whether the
  answer is *whole* is known only at the end, so **an answer whose first non-blank
  character starts such a candidate (``{``, ``[{``, a code fence followed by ``{``/``[``,
  a prefix tag) is buffered until** :meth:`ToolCallTextParser.flush`; anything else
  streams normally (a fence followed by other code is released as soon as that is clear).
- ``xml`` -- Qwen3-Coder's ``<tool_call><function=NAME><parameter=KEY>value</parameter>
  </function></tool_call>``, and the same without the envelope, after Claude Code's
  bullet (``● <function=NAME>...``: the bullet and the blanks after it are not answer
  text); closing tags may be missing. Only for offered tools (``tool_names``): a call to
  any other name stays text, verbatim. Values are typed by the tool's JSON schema
  (``schemas``). What exactly is a call, and how values are typed: :mod:`.xml_calls`.
  Text before a call streams at once; only what could still start a call is held back
  (a partial ``<function=``, a bullet and blanks), and a call is emitted once it ended.

Never lose output: a tag whose content is not valid call JSON is emitted verbatim as
text (tags included), as is a ``json`` candidate that turns out not to be a call. An
unclosed ``<tool_call>`` at the end of the stream is a call if its content parses, else
text. Arguments are always emitted as compact JSON object text (``{}`` when absent); a
JSON *string* holding an object is accepted too (some models double-encode).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from enum import IntEnum
from typing import Any, Literal, TypeAlias

import orjson

from .stop import partial_suffix_len
from .xml_calls import BULLETS, FUNCTION_TAG, XmlCall, typed_arguments

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

DEFAULT_FORMATS: frozenset[str] = frozenset({"tags", "json", "xml"})

OPEN_TAG = "<tool_call>"
CLOSE_TAG = "</tool_call>"
_OPEN_TAGS = (OPEN_TAG,)
_CLOSE_TAGS = (CLOSE_TAG,)
_BULLET_A, _BULLET_B = BULLETS[0], BULLETS[1]  # two `in` tests are cheaper than a loop
#: the most blanks between a bullet and a bare call that still make the bullet part of
#: the call: a stream holds a bullet back while blanks follow it, and a model looping on
#: blanks after one must not be held (and rescanned at every chunk) without end
MAX_BULLET_GAP = 64

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
    call (between parallel calls, before the end) is dropped. ``schemas`` maps the
    offered tools' names to their parameters' JSON schemas, which type the values of
    XML calls.

    >>> p = ToolCallTextParser()
    >>> p.feed('Let me check.<tool_c')
    [('text', 'Let me check.')]
    >>> p.feed('all>{"name": "w", "arguments": {"city": "Paris"}}</tool_call>')
    [('tool_call', 'w', '{"city":"Paris"}')]
    """

    __slots__ = (
        "_after_call",
        "_bare",
        "_buf",
        "_call",
        "_chunks",
        "_in_tag",
        "_markers",
        "_names",
        "_schemas",
        "_tags",
        "_xml",
    )

    def __init__(
        self,
        tool_names: Collection[str] | None = None,
        formats: Iterable[str] = DEFAULT_FORMATS,
        *,
        schemas: Mapping[str, Any] | None = None,
    ) -> None:
        chosen = frozenset(formats)
        if not chosen <= DEFAULT_FORMATS:
            raise ValueError(f"unknown tool-call formats: {sorted(chosen - DEFAULT_FORMATS)}")
        self._names = frozenset(tool_names or ())
        self._schemas = schemas or {}
        self._tags = "tags" in chosen
        # XML calls are taken only for offered tools: without names there are none.
        self._xml = "xml" in chosen and bool(self._names)
        # What may start a call in streamed text (held back while it could).
        self._markers = (OPEN_TAG,) * self._tags + (FUNCTION_TAG,) * self._xml
        # The bare-JSON check needs names to tell a call from an ordinary JSON answer.
        # None = undecided start (buffered in _buf), True = buffering a candidate in
        # _chunks until flush, False = normal streaming.
        self._bare: bool | None = None if ("json" in chosen and self._names) else False
        self._chunks: list[str] = []
        self._buf = ""  # held back: undecided start, partial tag, open tag or XML call
        self._in_tag = False  # inside a <tool_call> tag of JSON
        self._call: XmlCall | None = None  # reading an XML call (its text in _buf)
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
        raw = ""
        if self._bare is not False:
            raw = "".join(self._chunks) if self._bare else self._buf
            self._bare, self._buf, self._chunks = False, "", []
            calls = parse_tool_calls(raw, self._names, strict=True) if raw.strip() else None
            if calls:
                self._emit_calls(calls, out)
                return out
            # not a call after all: the answer is ordinary text
        self._stream(raw, out, eof=True)
        return out

    def _stream(self, text: str, out: list[Segment], eof: bool = False) -> None:
        """Normal streaming: text passes, ``<tool_call>`` tags and XML calls are parsed.

        At ``eof`` nothing is held back: an open tag or call is decided leniently (a
        model stopped right before its closing tags, by a stop token or max tokens).
        """
        if not self._markers or not (self._buf or self._in_tag or _may_start_call(text)):
            self._emit_text(text, out)  # the common chunk: plain text, nothing held
            return
        rest: str | None = self._buf + text if self._buf else text
        # Inside a tag, the close tag cannot start before the old buffer's tail.
        start = max(0, len(self._buf) - len(CLOSE_TAG) + 1) if self._in_tag else 0
        self._buf = ""
        while rest is not None:
            if self._call is not None:
                rest = self._read_call(self._call, rest, eof, out)
            elif self._in_tag:
                rest = self._read_tag(rest, start, eof, out)
                start = 0
            else:
                rest = self._read_text(rest, eof, out)

    def _read_text(self, buf: str, eof: bool, out: list[Segment]) -> str | None:
        """Text up to the next call: emit it, return the rest from the call (or None)."""
        i = buf.find(OPEN_TAG) if self._tags else -1
        f = buf.find(FUNCTION_TAG) if self._xml else -1
        if f != -1 and (i == -1 or f < i):  # a bare XML call, maybe after a bullet
            begin = _bullet_start(buf, f)
            self._emit_text(buf[:begin], out)
            self._call = XmlCall(self._names, f - begin + len(FUNCTION_TAG))
            return buf[begin:]
        if i != -1:
            self._emit_text(buf[:i], out)
            buf = buf[i:]
            if self._xml:  # Qwen3-Coder's <tool_call><function=...>, or JSON in the tag?
                body = buf[len(OPEN_TAG) :].lstrip()
                if body.startswith(FUNCTION_TAG):
                    self._call = XmlCall(self._names, len(buf) - len(body) + len(FUNCTION_TAG))
                    return buf
                if not eof and FUNCTION_TAG.startswith(body):
                    self._buf = buf  # undecided: blanks or the start of "<function="
                    return None
            self._in_tag = True
            return buf[len(OPEN_TAG) :]
        keep = len(buf) if eof else len(buf) - self._held(buf)
        self._emit_text(buf[:keep], out)
        self._buf = buf[keep:]
        return None

    def _held(self, buf: str) -> int:
        """How much of the end of ``buf`` could still start a call (is held back)."""
        held = _partial_tag(buf, self._markers)
        if self._xml and (_BULLET_A in buf or _BULLET_B in buf):
            # a bullet, blanks, and maybe the start of "<function="
            k = max(buf.rfind(_BULLET_A), buf.rfind(_BULLET_B))
            after = buf[k + 1 :]
            rest = after.lstrip()
            if len(after) - len(rest) <= MAX_BULLET_GAP and FUNCTION_TAG.startswith(rest):
                held = max(held, len(buf) - k)
        return held

    def _read_tag(self, buf: str, start: int, eof: bool, out: list[Segment]) -> str | None:
        """Inside a ``<tool_call>`` tag of JSON: parse it once closed."""
        j = buf.find(CLOSE_TAG, start)
        if j == -1:
            if not eof:
                self._buf = buf
                return None
            self._in_tag = False
            # Lenient at the end: a model stopped right before "</tool_call>" still made
            # a call if the content parses.
            calls = parse_tool_calls(buf[: len(buf) - partial_suffix_len(buf, _CLOSE_TAGS)])
            if calls is not None:
                self._emit_calls(calls, out)
            else:
                self._emit_text(OPEN_TAG + buf, out)
            return None
        body, rest = buf[:j], buf[j + len(CLOSE_TAG) :]
        self._in_tag = False
        calls = parse_tool_calls(body)
        if calls is None:  # invalid JSON: keep the model's text, tags and all
            self._emit_text(OPEN_TAG + body + CLOSE_TAG, out)
        else:
            self._emit_calls(calls, out)
        return rest

    def _read_call(self, call: XmlCall, buf: str, eof: bool, out: list[Segment]) -> str | None:
        """Reading an XML call: emit it (or its text, if it was none) once decided."""
        done = call.advance(buf, eof)
        if done is None:
            self._buf = buf
            return None
        end, found = done
        self._call = None
        if found is None:
            self._emit_text(buf[:end], out)
        else:
            name, params = found
            self._emit_calls([(name, typed_arguments(params, self._schemas.get(name)))], out)
        return buf[end:]

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


def _partial_tag(buf: str, tags: tuple[str, ...]) -> int:
    """:func:`~.stop.partial_suffix_len` for tags that all start with ``<``: one scan
    for the candidates, whatever the number of tags."""
    n = len(buf)
    p = buf.find("<", max(0, n - len(OPEN_TAG) + 1))  # OPEN_TAG is the longest tag
    while p != -1:
        tail = buf[p:]
        for tag in tags:
            if tag.startswith(tail):
                return n - p
        p = buf.find("<", p + 1)
    return 0


def _may_start_call(text: str) -> bool:
    """Whether ``text`` holds what could begin a call: every tag starts with ``<``.

    A bullet counts too, though only the ``xml`` format needs it: checking is cheaper
    than asking (a character wider than the text's is not searched for at all).
    """
    return "<" in text or _BULLET_A in text or _BULLET_B in text


def _bullet_start(buf: str, call: int) -> int:
    """Where a bare call at ``call`` begins: at a bullet before it (at most
    :data:`MAX_BULLET_GAP` blanks between)."""
    i = call
    while i and call - i < MAX_BULLET_GAP and buf[i - 1].isspace():
        i -= 1
    return i - 1 if i and buf[i - 1] in BULLETS else call
