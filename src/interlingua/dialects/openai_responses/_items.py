"""Responses ``input`` items <-> neutral :class:`Message` values.

Wire facts: docs/protocols.md, "Responses: input items", "System prompts and roles",
"Content parts across dialects" and "Tool definitions and tool calls".

Split from :mod:`.request` to keep modules small.

Grouping. Consecutive assistant-side items (``message`` with role ``assistant``,
``function_call``, ``custom_tool_call``, ``reasoning``, unknown ``*_call`` items) become
ONE neutral ``assistant`` message, in order; consecutive tool outputs
(``function_call_output``, ``custom_tool_call_output``, unknown ``*_output`` items)
become one neutral ``user`` message of :class:`ToolResultPart` values, as the core wants
them; every other message item is a neutral message of its own (``developer`` is a
``system`` message with ``meta["role"] = "developer"``, as in the Chat codec).

What the wire has beyond the neutral fields rides in ``meta`` so that rendering back to
Responses restores the items (the keys below); a renderer of another dialect ignores it:

* ``ITEM``: the item's own keys that have no neutral field (``id``, ``status``, ``type``
  when the client wrote it, ``namespace``, ...) -- on ``Message.meta`` for user/system
  items, on the FIRST content part of an assistant ``message`` item (it marks where
  that item starts), on tool-call and tool-result parts; a reasoning part holds its whole
  item (``summary``, ``content``, ``encrypted_content``), since only OpenAI can read it
  (unless its ``encrypted_content`` is a token the gateway sealed: see :mod:`.sealed`).
* ``PART``: a content part's keys other than its text/image/file payload (``type``,
  ``annotations``, ``logprobs``, ...).
* ``STRING``: the client sent ``content`` (or a tool ``output``) as a plain string.

Items we do not model (``item_reference``, ``web_search_call``, ``computer_call_output``,
..., and an assistant ``message`` with a part other than text or refusal) are kept whole
as :class:`UnknownPart` with dialect ``ITEM_DIALECT``; another dialect's renderer rejects
them with a 400, as it does any history it cannot carry.

Rendering a request of another dialect: reasoning parts are DROPPED (a Responses
``reasoning`` item must carry an ``rs_`` id and OpenAI's ``encrypted_content``; a
foreign thinking text or signature cannot be replayed), assistant text becomes a
``message`` item with string content, each tool result a ``function_call_output``
(``custom_tool_call_output`` when it answers a custom call) placed before the rest of
its user turn.

Normalization on a Responses round trip: ``null`` values are dropped, an assistant
``message`` item with empty ``content`` is dropped, object ``arguments`` become JSON text,
and a data URI loses its parameters (``;charset=...``) and has its media type lower-cased.
"""

from __future__ import annotations

from typing import Any

from ...core import (
    DocumentPart,
    ImagePart,
    Message,
    Part,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    UnknownPart,
)
from ...errors import InvalidRequestError
from .._common import SOURCE_INDEX, SOURCE_PARAM, encode_body, expect_type, missing, parse_data_uri
from .sealed import Sealer

DIALECT_NAME = "responses"
ITEM_DIALECT = "responses.item"  # UnknownPart.dialect of a whole input item kept verbatim

ITEM = "responses_item"
PART = "responses_part"
STRING = "responses_string"
OUTPUT = "responses_output"  # a tool output kept whole (it has parts we do not model)
NAMESPACE_SEP = "__"  # a namespaced tool `ns` / `name` is the neutral tool `ns__name`

_CALLS = ("function_call", "custom_tool_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")
_ROLES = ("user", "assistant", "system", "developer")


def required_str(obj: dict[str, Any], key: str, param: str) -> str:
    """``obj[key]`` as a string, or a 400 naming ``param``."""
    value = obj.get(key)
    if value is None:
        raise missing(param)
    result: str = expect_type(value, str, param, "a string")
    return result


def bad_value(param: str, value: Any, allowed: tuple[str, ...]) -> InvalidRequestError:
    """The 400 for a string field with a value outside ``allowed``."""
    choices = ", ".join(repr(a) for a in allowed)
    return InvalidRequestError(
        f"Invalid value for '{param}': {value!r}. Supported values are: {choices}.",
        param=param,
        code="invalid_value",
    )


def _rest(obj: dict[str, Any], known: tuple[str, ...]) -> dict[str, Any]:
    """``obj`` without the ``known`` keys and without nulls (null means absent)."""
    return {k: v for k, v in obj.items() if k not in known and v is not None}


# --------------------------------------------------------------------------- parsing


class _ItemParser:
    """Folds the items into neutral messages; ``group`` is the open assistant or tool
    output run (role, client index of its first item, parts)."""

    __slots__ = ("group", "out", "sealer")

    def __init__(self, sealer: Sealer | None) -> None:
        self.out: list[Message] = []
        self.group: tuple[str, int, list[Part]] | None = None
        self.sealer = sealer

    def add(self, item: Any, i: int) -> None:
        p = f"input[{i}]"
        expect_type(item, dict, p, "an object")
        kind = item.get("type")
        kind = "message" if kind is None else expect_type(kind, str, f"{p}.type", "a string")
        if kind == "message":
            role = required_str(item, "role", f"{p}.role")
            if role not in _ROLES:
                raise bad_value(f"{p}.role", role, _ROLES)
            if role == "assistant":
                self._into("assistant", i).extend(_assistant_content(item, p))
            else:
                self.close()
                self.out.append(_message(item, p, role, i))
        elif kind in _CALLS:
            self._into("assistant", i).append(_call(item, p, kind))
        elif kind == "reasoning":
            self._into("assistant", i).append(_reasoning(item, p, self.sealer))
        elif kind in _OUTPUTS:
            self._into("user", i).append(_output(item, p))
        else:  # a hosted tool's call or output, item_reference, ...: kept whole
            role = "user" if kind.endswith("_output") else "assistant"
            self._into(role, i).append(UnknownPart(ITEM_DIALECT, item))

    def _into(self, role: str, i: int) -> list[Part]:
        if self.group is None or self.group[0] != role:
            self.close()
            self.group = (role, i, [])
        return self.group[2]

    def close(self) -> None:
        if self.group is not None:
            role, i, parts = self.group
            if parts:
                self.out.append(Message(role, tuple(parts), meta={SOURCE_INDEX: i}))  # type: ignore[arg-type]  # "user" | "assistant"
            self.group = None


def parse_input(raw: Any, sealer: Sealer | None = None) -> tuple[tuple[Message, ...], bool]:
    """Validate and convert ``input``; also whether it was a bare string. ``sealer``
    opens the reasoning tokens the gateway issued (:mod:`.sealed`)."""
    if raw is None:
        return (), False
    if isinstance(raw, str):
        return (Message("user", (TextPart(raw),), meta={SOURCE_INDEX: 0}),), True
    expect_type(raw, list, "input", "a string or an array")
    parser = _ItemParser(sealer)
    for i, item in enumerate(raw):
        parser.add(item, i)
    parser.close()
    return tuple(parser.out), False


def _message(item: dict[str, Any], p: str, role: str, i: int) -> Message:
    content = item.get("content")
    meta: dict[str, Any] = {SOURCE_INDEX: i, ITEM: _rest(item, ("role", "content"))}
    if role == "developer":
        meta["role"] = "developer"
    if isinstance(content, str):
        meta[STRING] = True
        parts: tuple[Part, ...] = (TextPart(content),)
    else:
        parts = tuple(input_parts(content, f"{p}.content"))
    return Message("user" if role == "user" else "system", parts, meta=meta)


def input_parts(content: Any, p: str) -> list[Part]:
    """A list of ``input_*`` content parts (a message's content or a tool's output)."""
    if content is None:
        raise missing(p)
    expect_type(content, list, p, "a string or an array")
    parts: list[Part] = []
    for j, c in enumerate(content):
        q = f"{p}[{j}]"
        expect_type(c, dict, q, "an object")
        kind = required_str(c, "type", f"{q}.type")
        if kind == "input_text":
            parts.append(
                TextPart(required_str(c, "text", f"{q}.text"), meta={PART: _rest(c, ("text",))})
            )
        elif kind == "input_image":
            parts.append(_image(c, q))
        elif kind == "input_file":
            parts.append(_file(c, q))
        else:  # input_audio, output_text in a user turn, extensions: OpenAI only
            parts.append(UnknownPart(DIALECT_NAME, c))
    return parts


def _image(c: dict[str, Any], p: str) -> Part:
    url = c.get("image_url")
    if url is None:
        if c.get("file_id") is None:
            raise missing(f"{p}.image_url")
        return UnknownPart(DIALECT_NAME, c)  # an uploaded image only OpenAI can resolve
    expect_type(url, str, f"{p}.image_url", "a string")
    detail = c.get("detail")
    if detail is not None:
        expect_type(detail, str, f"{p}.detail", "a string")
    meta = {PART: _rest(c, ("image_url", "detail"))}
    parsed = parse_data_uri(url)
    if parsed is not None:
        return ImagePart(media_type=parsed[0], data=parsed[1], detail=detail, meta=meta)
    return ImagePart(url=url, detail=detail, meta=meta)


def _file(c: dict[str, Any], p: str) -> DocumentPart:
    fields = {}
    for key in ("filename", "file_data", "file_url", "file_id"):
        value = c.get(key)
        fields[key] = None if value is None else expect_type(value, str, f"{p}.{key}", "a string")
    meta: dict[str, Any] = {PART: _rest(c, ("filename", "file_data", "file_url", "file_id"))}
    title, data = fields["filename"], fields["file_data"]
    if data is not None:
        parsed = parse_data_uri(data)
        if parsed is not None:
            return DocumentPart(media_type=parsed[0], data=parsed[1], title=title, meta=meta)
        meta["bare"] = True  # bare base64: OpenAI's file parts are PDFs
        return DocumentPart(media_type="application/pdf", data=data, title=title, meta=meta)
    if fields["file_url"] is not None:
        return DocumentPart(url=fields["file_url"], title=title, meta=meta)
    if fields["file_id"] is None:
        raise missing(f"{p}.file_data")
    meta["file_id"] = fields["file_id"]  # the Chat codec's key: an OpenAI upstream resolves it
    return DocumentPart(title=title, meta=meta)


def _assistant_content(item: dict[str, Any], p: str) -> list[Part]:
    """An assistant message item's parts; the first carries the item's own keys."""
    content = item.get("content")
    envelope = _rest(item, ("role", "content"))
    if isinstance(content, str):
        return [TextPart(content, meta={ITEM: envelope, STRING: True})]
    p = f"{p}.content"
    if content is None:
        raise missing(p)
    expect_type(content, list, p, "a string or an array")
    parts: list[Part] = []
    for j, c in enumerate(content):
        q = f"{p}[{j}]"
        expect_type(c, dict, q, "an object")
        kind = required_str(c, "type", f"{q}.type")
        meta: dict[str, Any] = {} if parts else {ITEM: envelope}
        if kind in ("output_text", "input_text"):
            meta[PART] = _rest(c, ("text",))
            parts.append(TextPart(required_str(c, "text", f"{q}.text"), meta=meta))
        elif kind == "refusal":
            meta.update({PART: _rest(c, ("refusal",)), "refusal": True})
            parts.append(TextPart(required_str(c, "refusal", f"{q}.refusal"), meta=meta))
        else:  # a part we do not model: keep the whole item, only OpenAI can take it
            return [UnknownPart(ITEM_DIALECT, item)]
    return parts


def _call(item: dict[str, Any], p: str, kind: str) -> ToolCallPart:
    call_id = required_str(item, "call_id", f"{p}.call_id")
    name = required_str(item, "name", f"{p}.name")
    namespace = item.get("namespace")
    if namespace is not None:
        name = expect_type(namespace, str, f"{p}.namespace", "a string") + NAMESPACE_SEP + name
    key = "arguments" if kind == "function_call" else "input"
    q = f"{p}.{key}"
    value = item.get(key)
    if value is None:
        if kind == "custom_tool_call":
            raise missing(q)
        value = ""
    elif isinstance(value, dict) and kind == "function_call":
        value = encode_body(value, q).decode()  # some clients send an object
    else:
        expect_type(value, str, q, "a string")
    meta = {ITEM: _rest(item, ("type", "call_id", "name", key)), SOURCE_PARAM: q}
    custom = kind == "custom_tool_call"
    return ToolCallPart(call_id, name, value, meta=meta, kind="custom" if custom else "function")


def _output(item: dict[str, Any], p: str) -> ToolResultPart:
    call_id = required_str(item, "call_id", f"{p}.call_id")
    output = item.get("output")
    meta: dict[str, Any] = {ITEM: _rest(item, ("call_id", "output"))}
    if isinstance(output, str):
        meta[STRING] = True
        return ToolResultPart(call_id, (TextPart(output),), meta=meta)
    parts = input_parts(output, f"{p}.output")
    content = [c for c in parts if isinstance(c, TextPart | ImagePart | DocumentPart)]
    if len(content) != len(parts):
        meta[OUTPUT] = output  # a part the core cannot hold: keep the original for OpenAI
    return ToolResultPart(call_id, tuple(content), meta=meta)


def _reasoning(item: dict[str, Any], p: str, sealer: Sealer | None) -> ReasoningPart:
    """The neutral text is the reasoning content, else the summary (what other dialects
    may show); the item itself is kept for an OpenAI upstream. A token the gateway
    sealed (:mod:`.sealed`) gives back the upstream's own reasoning instead, exactly as
    it came (an Anthropic signature, a redacted payload): that goes to no OpenAI upstream,
    which could not read it."""
    texts: dict[str, list[str]] = {}
    for key in ("content", "summary"):
        value = item.get(key)
        if value is None:
            continue
        expect_type(value, list, f"{p}.{key}", "an array")
        for j, s in enumerate(value):
            expect_type(s, dict, f"{p}.{key}[{j}]", "an object")
            texts.setdefault(key, []).append(required_str(s, "text", f"{p}.{key}[{j}].text"))
    encrypted = item.get("encrypted_content")
    if encrypted is not None:
        expect_type(encrypted, str, f"{p}.encrypted_content", "a string")
        opened = sealer.open(encrypted) if sealer is not None else None
        if opened is not None:
            return opened
    text = "\n\n".join(texts.get("content") or texts.get("summary") or ())
    return ReasoningPart(text=text, meta={ITEM: _rest(item, ())})
