"""Chat ``messages`` <-> neutral :class:`Message` values.

Wire facts: docs/protocols.md, "Chat Completions: messages and content parts",
"System prompts and roles", "Content parts across dialects" and
"Tool definitions and tool calls".

Split from :mod:`.request` to keep modules small; shared validation helpers live here too.

* ``role: tool`` messages become one ``user`` message of :class:`ToolResultPart` values
  (consecutive tool messages merge into one, as Anthropic wants them); rendering splits
  them back into one ``tool`` message each, in order.
* ``developer`` becomes a neutral ``system`` message with ``meta["role"] = "developer"``
  so that an OpenAI upstream gets the same role back.
* ``input_audio`` parts become :class:`AudioPart` (a malformed one stays an
  :class:`UnknownPart`: the upstream judges it, as on the passthrough path); an assistant
  turn's :class:`AudioPart` (an earlier spoken answer) renders as its ``audio: {id}``.
* Unknown content-part types (server extensions such as vLLM's ``video_url``) become
  :class:`UnknownPart` so an OpenAI-compatible upstream still gets them; other renderers
  reject them.
* Every neutral message records the client's index of the message it came from in
  ``meta["source_index"]``, and every tool call the ``param`` of its arguments in
  ``meta["source_param"]`` (keys defined in ``dialects/_common.py``): once ``tool``
  messages merge, neutral indices no longer match the client's, and a renderer's 400
  must name the field the client actually sent.
"""

from __future__ import annotations

from typing import Any

from ...core import (
    AudioPart,
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
from .._common import (
    SOURCE_INDEX,
    SOURCE_PARAM,
    encode_body,
    expect_type,
    missing,
    parse_data_uri,
)

__all__ = ["DIALECT_NAME", "bad_value", "parse_messages", "render_messages", "required_str"]

DIALECT_NAME = "openai"


def bad_value(param: str, value: Any, allowed: tuple[str, ...]) -> InvalidRequestError:
    """The 400 for a value outside an enumeration."""
    return InvalidRequestError(
        f"Invalid value for '{param}': {value!r}. "
        f"Supported values are: {', '.join(map(repr, allowed))}.",
        param=param,
        code="invalid_value",
    )


def required_str(obj: dict[str, Any], key: str, param: str) -> str:
    """``obj[key]`` as a string; 400 naming ``param`` when absent or of another type."""
    value = obj.get(key)
    if value is None:
        raise missing(param)
    result: str = expect_type(value, str, param, "a string")
    return result


class _MessageParser:
    """Parses ``messages``; holds the state that spans messages (legacy function calls)."""

    def __init__(self) -> None:
        self.out: list[Message] = []
        # Legacy ``function_call`` turns have no ids: name -> the id we minted for it.
        self.legacy_ids: dict[str, str] = {}
        self.prev_was_tool = False

    def add(self, m: Any, i: int) -> None:
        p = f"messages[{i}]"
        expect_type(m, dict, p, "an object")
        role = required_str(m, "role", f"{p}.role")
        name = _opt_in(m, "name", str, f"{p}.name", "a string")
        if role in ("tool", "function"):
            self._add_tool_result(self._tool_result(m, p, role), i)
            return
        self.prev_was_tool = False
        if role in ("system", "developer"):
            meta: dict[str, Any] = {SOURCE_INDEX: i}
            if role == "developer":
                meta["role"] = "developer"
            parts = _text_parts(m.get("content"), f"{p}.content")
            self.out.append(Message("system", parts, name=name, meta=meta))
        elif role == "user":
            content = _user_parts(m.get("content"), p)
            self.out.append(Message("user", content, name=name, meta={SOURCE_INDEX: i}))
        elif role == "assistant":
            self.out.append(self._assistant(m, p, name, i))
        else:
            roles = ("system", "developer", "user", "assistant", "tool", "function")
            raise bad_value(f"{p}.role", role, roles)

    def _add_tool_result(self, part: ToolResultPart, i: int) -> None:
        # Consecutive tool messages answer one assistant turn: one neutral user message,
        # whose source index stays that of the first of them.
        if self.prev_was_tool:
            last = self.out[-1]
            self.out[-1] = Message("user", (*last.parts, part), meta=last.meta)
        else:
            self.out.append(Message("user", (part,), meta={SOURCE_INDEX: i}))
        self.prev_was_tool = True

    def _tool_result(self, m: dict[str, Any], p: str, role: str) -> ToolResultPart:
        if role == "tool":
            call_id = required_str(m, "tool_call_id", f"{p}.tool_call_id")
        else:  # legacy role "function": pair with the call of the same name
            fname = required_str(m, "name", f"{p}.name")
            call_id = self.legacy_ids.get(fname, f"call_{fname}")
        content = m.get("content")
        parts = () if content is None else _text_parts(content, f"{p}.content")
        return ToolResultPart(tool_call_id=call_id, content=parts)

    def _assistant(self, m: dict[str, Any], p: str, name: str | None, i: int) -> Message:
        parts: list[Part] = []
        reasoning = _reasoning_part(m, p)
        if reasoning is not None:
            parts.append(reasoning)  # reasoning precedes the answer it led to
        content = m.get("content")
        if isinstance(content, str):
            if content:
                parts.append(TextPart(content))
        elif content is not None:
            parts.extend(_assistant_parts(content, f"{p}.content"))
        refusal = _opt_in(m, "refusal", str, f"{p}.refusal", "a string")
        if refusal:
            parts.append(TextPart(refusal, meta={"refusal": True}))
        calls = m.get("tool_calls")
        if calls is not None:
            parts.extend(_tool_calls(calls, f"{p}.tool_calls"))
        fc = m.get("function_call")
        if fc is not None:
            parts.append(self._legacy_call(fc, f"{p}.function_call", len(self.out)))
        audio = m.get("audio")
        meta: dict[str, Any] = {SOURCE_INDEX: i}
        if audio is not None:
            meta["audio"] = audio
        return Message("assistant", tuple(parts), name=name, meta=meta)

    def _legacy_call(self, fc: Any, p: str, position: int) -> ToolCallPart:
        expect_type(fc, dict, p, "an object")
        fname = required_str(fc, "name", f"{p}.name")
        call_id = f"call_{fname}_{position}"
        self.legacy_ids[fname] = call_id
        q = f"{p}.arguments"
        return ToolCallPart(call_id, fname, _arguments(fc, q), meta={SOURCE_PARAM: q})


def _opt_in(obj: dict[str, Any], key: str, kind: type, param: str, what: str) -> Any:
    value = obj.get(key)
    return None if value is None else expect_type(value, kind, param, what)


def parse_messages(raw: Any) -> tuple[Message, ...]:
    """Validate and convert the ``messages`` array (400 naming ``messages[i]...``)."""
    if raw is None:
        raise missing("messages")
    expect_type(raw, list, "messages", "an array")
    if not raw:
        raise InvalidRequestError(
            "'messages' must contain at least one message.", param="messages", code="empty_array"
        )
    parser = _MessageParser()
    for i, m in enumerate(raw):
        parser.add(m, i)
    return tuple(parser.out)


def _part_type(c: Any, p: str) -> str:
    expect_type(c, dict, p, "an object")
    return required_str(c, "type", f"{p}.type")


def _text_of(c: dict[str, Any], p: str) -> TextPart:
    return TextPart(required_str(c, "text", f"{p}.text"))


def _text_parts(content: Any, p: str) -> tuple[TextPart, ...]:
    """Content that may only be text: system, developer and tool messages.

    docs/protocols.md, "Chat Completions: messages and content parts".
    """
    if isinstance(content, str):
        return (TextPart(content),)
    if content is None:
        raise missing(p)
    expect_type(content, list, p, "a string or an array")
    parts: list[TextPart] = []
    for j, c in enumerate(content):
        kind = _part_type(c, f"{p}[{j}]")
        if kind != "text":
            raise bad_value(f"{p}[{j}].type", kind, ("text",))
        parts.append(_text_of(c, f"{p}[{j}]"))
    return tuple(parts)


def _user_parts(content: Any, p: str) -> tuple[Part, ...]:
    p = f"{p}.content"
    if isinstance(content, str):
        return (TextPart(content),)
    if content is None:
        raise missing(p)
    expect_type(content, list, p, "a string or an array")
    parts: list[Part] = []
    for j, c in enumerate(content):
        q = f"{p}[{j}]"
        kind = _part_type(c, q)
        if kind == "text":
            parts.append(_text_of(c, q))
        elif kind == "image_url":
            parts.append(_image_part(c, q))
        elif kind == "file":
            parts.append(_file_part(c, q))
        elif kind == "refusal":
            raise bad_value(f"{q}.type", kind, ("text", "image_url", "input_audio", "file"))
        elif kind == "input_audio":
            parts.append(_audio_part(c))
        else:  # server extensions: only an OpenAI upstream can take them
            parts.append(UnknownPart(DIALECT_NAME, c))
    return tuple(parts)


def _audio_part(c: dict[str, Any]) -> Part:
    """``{"type": "input_audio", "input_audio": {"data", "format"}}`` -> AudioPart."""
    spec = c.get("input_audio")
    data = spec.get("data") if isinstance(spec, dict) else None
    fmt = spec.get("format") if isinstance(spec, dict) else None
    if not isinstance(data, str) or not (fmt is None or isinstance(fmt, str)) or len(c) != 2:
        return UnknownPart(DIALECT_NAME, c)  # not ours to judge: the upstream's 400
    return AudioPart(data=data, format=fmt)


def _image_part(c: dict[str, Any], p: str) -> ImagePart:
    spec = c.get("image_url")
    if spec is None:
        raise missing(f"{p}.image_url")
    if isinstance(spec, str):  # some clients send the URL bare; be lenient
        spec = {"url": spec}
    expect_type(spec, dict, f"{p}.image_url", "an object")
    url = required_str(spec, "url", f"{p}.image_url.url")
    detail = _opt_in(spec, "detail", str, f"{p}.image_url.detail", "a string")
    parsed = parse_data_uri(url)
    if parsed is not None:
        return ImagePart(media_type=parsed[0], data=parsed[1], detail=detail)
    return ImagePart(url=url, detail=detail)


def _file_part(c: dict[str, Any], p: str) -> DocumentPart:
    spec = c.get("file")
    if spec is None:
        raise missing(f"{p}.file")
    expect_type(spec, dict, f"{p}.file", "an object")
    filename = _opt_in(spec, "filename", str, f"{p}.file.filename", "a string")
    file_id = _opt_in(spec, "file_id", str, f"{p}.file.file_id", "a string")
    data = _opt_in(spec, "file_data", str, f"{p}.file.file_data", "a string")
    if data is None:
        if file_id is None:
            raise missing(f"{p}.file.file_data")
        # An uploaded file only an OpenAI upstream can resolve.
        return DocumentPart(title=filename, meta={"file_id": file_id})
    parsed = parse_data_uri(data)
    if parsed is not None:
        return DocumentPart(media_type=parsed[0], data=parsed[1], title=filename)
    # Bare base64: OpenAI's file parts are PDFs.
    return DocumentPart(media_type="application/pdf", data=data, title=filename)


def _assistant_parts(content: Any, p: str) -> list[Part]:
    expect_type(content, list, p, "a string, an array or null")
    parts: list[Part] = []
    for j, c in enumerate(content):
        q = f"{p}[{j}]"
        kind = _part_type(c, q)
        if kind == "text":
            parts.append(_text_of(c, q))
        elif kind == "refusal":
            refusal = required_str(c, "refusal", f"{q}.refusal")
            parts.append(TextPart(refusal, meta={"refusal": True}))
        else:
            parts.append(UnknownPart(DIALECT_NAME, c))
    return parts


def _reasoning_part(m: dict[str, Any], p: str) -> ReasoningPart | None:
    """``reasoning_content`` (DeepSeek, llama.cpp) ?? ``reasoning`` (vLLM, OpenRouter).

    docs/protocols.md, "Chat Completions: server extensions".
    """
    key = "reasoning_content"
    text = m.get(key)
    if text is None:
        key = "reasoning"
        text = m.get(key)
    details = m.get("reasoning_details")
    if text is None and details is None:
        return None
    if text is not None:
        expect_type(text, str, f"{p}.{key}", "a string")
    meta: dict[str, Any] = {}
    if key == "reasoning":
        meta["openai_field"] = "reasoning"
    if details is not None:
        # OpenRouter needs these echoed back verbatim to keep signatures
        # (docs/protocols.md, "Chat Completions: server extensions").
        meta["reasoning_details"] = details
    if not text and not details:
        return None
    return ReasoningPart(text=text or "", meta=meta)


def _arguments(fn: dict[str, Any], p: str) -> str:
    args = fn.get("arguments")
    if args is None:
        return ""
    if isinstance(args, dict):  # some clients send an object; the wire form is JSON text
        return encode_body(args, p).decode()
    result: str = expect_type(args, str, p, "a string")
    return result


def _tool_calls(raw: Any, p: str) -> list[Part]:
    expect_type(raw, list, p, "an array")
    parts: list[Part] = []
    for k, tc in enumerate(raw):
        q = f"{p}[{k}]"
        expect_type(tc, dict, q, "an object")
        kind = tc.get("type", "function")
        if kind == "custom":
            parts.append(_custom_call(tc, q))
            continue
        if kind != "function":  # a call type we do not model: only this dialect can re-emit it
            parts.append(UnknownPart(DIALECT_NAME, tc))
            continue
        call_id = required_str(tc, "id", f"{q}.id")
        fn = tc.get("function")
        if fn is None:
            raise missing(f"{q}.function")
        expect_type(fn, dict, f"{q}.function", "an object")
        name = required_str(fn, "name", f"{q}.function.name")
        r = f"{q}.function.arguments"
        parts.append(ToolCallPart(call_id, name, _arguments(fn, r), meta={SOURCE_PARAM: r}))
    return parts


def _custom_call(tc: dict[str, Any], q: str) -> ToolCallPart:
    """``{"type": "custom", "id", "custom": {"name", "input"}}``: the input is raw text."""
    call_id = required_str(tc, "id", f"{q}.id")
    custom = tc.get("custom")
    if custom is None:
        raise missing(f"{q}.custom")
    expect_type(custom, dict, f"{q}.custom", "an object")
    name = required_str(custom, "name", f"{q}.custom.name")
    text = required_str(custom, "input", f"{q}.custom.input")
    return ToolCallPart(
        call_id, name, text, meta={SOURCE_PARAM: f"{q}.custom.input"}, kind="custom"
    )


def render_tool_call(part: ToolCallPart) -> dict[str, Any]:
    """A ToolCallPart -> one entry of an assistant message's ``tool_calls``."""
    if part.kind == "custom":
        custom = {"name": part.name, "input": part.arguments}
        return {"id": part.id, "type": "custom", "custom": custom}
    fn = {"name": part.name, "arguments": part.arguments}
    return {"id": part.id, "type": "function", "function": fn}


def render_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Neutral messages -> the Chat ``messages`` array."""
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        # Errors name the client's own message position when the parser recorded it.
        where = f"messages[{m.meta.get(SOURCE_INDEX, i)}]"
        if m.role == "assistant":
            out.append(_render_assistant(m, where))
        elif m.role == "system":
            role = "developer" if m.meta.get("role") == "developer" else "system"
            content = _render_content(m.parts, m.parts, where)
            out.append(_with_name({"role": role, "content": content}, m))
        else:
            out.extend(_render_user(m, where))
    return out


def _with_name(msg: dict[str, Any], m: Message) -> dict[str, Any]:
    if m.name is not None:
        msg["name"] = m.name
    return msg


def _render_user(m: Message, where: str) -> list[dict[str, Any]]:
    """Each ToolResultPart becomes its own ``tool`` message, in order; the rest follows
    as one ``user`` message (docs/protocols.md, "Tool definitions and tool calls")."""
    out: list[dict[str, Any]] = []
    rest: list[Part] = []
    for part in m.parts:
        if isinstance(part, ToolResultPart):
            out.append(
                {"role": "tool", "tool_call_id": part.tool_call_id, "content": _tool_text(part)}
            )
        elif not isinstance(part, ReasoningPart):  # reasoning has no place in a user turn
            rest.append(part)
    if rest or not out:
        content = _render_content(rest, m.parts, where)
        out.append(_with_name({"role": "user", "content": content}, m))
    return out


def _tool_text(part: ToolResultPart) -> str:
    """Chat tool messages take text only: non-text results become placeholders.

    docs/protocols.md, "Tool definitions and tool calls".
    """
    pieces: list[str] = []
    for c in part.content:
        if isinstance(c, TextPart):
            pieces.append(c.text)
        elif isinstance(c, DocumentPart):
            pieces.append(c.text if c.text is not None else "[document omitted]")
        else:
            pieces.append("[image omitted]")
    text = "".join(pieces)
    return "Error: " + text if part.is_error else text


def _render_content(
    parts: list[Part] | tuple[Part, ...], all_parts: tuple[Part, ...], where: str
) -> str | list[dict[str, Any]]:
    """A lone text part (or nothing) renders as a string, anything else as a part list.

    ``all_parts`` is the whole message, so an error can name a part's own position.
    """
    if not parts:
        return ""
    if len(parts) == 1 and isinstance(parts[0], TextPart):
        return parts[0].text
    return [_render_part(p, _part_param(p, all_parts, where)) for p in parts]


def _part_param(part: Part, all_parts: tuple[Part, ...], where: str) -> str:
    position = next((j for j, p in enumerate(all_parts) if p is part), 0)
    return f"{where}.content[{position}]"


def _render_part(part: Part, param: str) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        image: dict[str, Any] = {"url": part.data_uri}
        if part.detail is not None:
            image["detail"] = part.detail
        return {"type": "image_url", "image_url": image}
    if isinstance(part, DocumentPart):
        return _render_document(part)
    if isinstance(part, AudioPart) and part.data:
        audio: dict[str, Any] = {"data": part.data}
        if part.format is not None:
            audio["format"] = part.format
        return {"type": "input_audio", "input_audio": audio}
    if isinstance(part, UnknownPart) and part.dialect == DIALECT_NAME:
        return part.raw
    what = part.raw.get("type") if isinstance(part, UnknownPart) else type(part).__name__
    raise InvalidRequestError(
        f"{param}: content of type {what!r} cannot be sent to an OpenAI Chat Completions upstream.",
        param=param,
    )


def _render_document(part: DocumentPart) -> dict[str, Any]:
    if part.data is not None:
        spec: dict[str, Any] = {
            "file_data": f"data:{part.media_type or 'application/pdf'};base64,{part.data}"
        }
    elif "file_id" in part.meta:
        spec = {"file_id": part.meta["file_id"]}
    elif part.text is not None:
        return {"type": "text", "text": part.text}  # plain-text documents are just text
    else:
        raise InvalidRequestError(
            "OpenAI Chat file parts need inline data; a document by URL cannot be sent.",
            param="messages",
        )
    if part.title is not None:
        spec["filename"] = part.title
    return {"type": "file", "file": spec}


def _render_assistant(m: Message, where: str) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    refusal: list[str] = []
    calls: list[dict[str, Any]] = []
    reasoning: list[ReasoningPart] = []
    audio: dict[str, Any] | None = m.meta.get("audio")
    for part in m.parts:
        if isinstance(part, ToolCallPart):
            calls.append(render_tool_call(part))
        elif isinstance(part, AudioPart) and part.id:
            audio = {"id": part.id}  # an earlier spoken answer, quoted by its id
        elif isinstance(part, ReasoningPart):
            reasoning.append(part)
        elif isinstance(part, TextPart) and part.meta.get("refusal"):
            refusal.append(part.text)
        elif isinstance(part, UnknownPart) and part.dialect == DIALECT_NAME and "id" in part.raw:
            calls.append(part.raw)  # a tool call of a type we do not model, parsed above
        else:
            content.append(_render_part(part, _part_param(part, m.parts, where)))
    msg: dict[str, Any] = {"role": "assistant"}
    if all(c.get("type") == "text" for c in content):
        text = "".join(c["text"] for c in content)
        # OpenAI requires content unless tool calls are present
        # (docs/protocols.md, "Chat Completions: messages and content parts").
        msg["content"] = text if text or not (calls or refusal or audio) else None
    else:
        msg["content"] = content
    if refusal:
        msg["refusal"] = "".join(refusal)
    if calls:
        msg["tool_calls"] = calls
    _render_reasoning(msg, reasoning)
    if audio is not None:
        msg["audio"] = audio
    return _with_name(msg, m)


def _render_reasoning(msg: dict[str, Any], parts: list[ReasoningPart]) -> None:
    """Echo reasoning on assistant history: DeepSeek requires it on tool-call turns.

    docs/protocols.md, "Chat Completions: server extensions".
    """
    text = "".join(p.text for p in parts)
    if text:
        named = any(p.meta.get("openai_field") == "reasoning" for p in parts)
        msg["reasoning" if named else "reasoning_content"] = text
    details = [d for p in parts for d in p.meta.get("reasoning_details") or ()]
    if details:
        msg["reasoning_details"] = details
