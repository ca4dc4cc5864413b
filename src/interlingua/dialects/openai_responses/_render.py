"""Neutral messages -> Responses ``input`` items: the inverse of :mod:`._items`.

The rules (what ``meta`` restores, what a request of another dialect becomes) are in
:mod:`._items`' docstring.
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
from .._common import SOURCE_INDEX, spoken_answer, spoken_answer_text
from ._items import DIALECT_NAME, ITEM, ITEM_DIALECT, NAMESPACE_SEP, OUTPUT, PART, STRING

__all__ = ["render_input"]


class _Renderer:
    """Renders messages in order; ``kinds`` remembers each call's kind so that a result
    from another dialect answers a custom call with a ``custom_tool_call_output``."""

    __slots__ = ("kinds", "out", "prefix")

    def __init__(self, prefix: str) -> None:
        self.out: list[dict[str, Any]] = []
        self.kinds: dict[str, str] = {}
        self.prefix = prefix  # "input" for our own client's params, else "messages"

    def message(self, m: Message, i: int) -> None:
        where = f"{self.prefix}[{m.meta.get(SOURCE_INDEX, i)}]"
        if m.role == "assistant":
            self._assistant(m, where)
        elif m.role == "system":
            self.out.append(
                _message(m, "developer" if m.meta.get("role") == "developer" else "system", where)
            )
        else:
            self._user(m, where)

    def _user(self, m: Message, where: str) -> None:
        """Tool results (and kept output items) first, in order, then the rest as one
        ``user`` message item."""
        rest: list[Part] = []
        emitted = False
        for part in m.parts:
            if isinstance(part, ToolResultPart):
                self.out.append(self._result(part, where))
                emitted = True
            elif isinstance(part, UnknownPart) and part.dialect == ITEM_DIALECT:
                self.out.append(part.raw)
                emitted = True
            elif not isinstance(part, ReasoningPart | ToolCallPart):
                rest.append(part)
        if rest or not emitted:
            self.out.append(_message(Message(m.role, tuple(rest), meta=m.meta), "user", where))

    def _result(self, part: ToolResultPart, where: str) -> dict[str, Any]:
        envelope = part.meta.get(ITEM)
        if envelope is None:
            custom = self.kinds.get(part.tool_call_id) == "custom"
            envelope = {"type": "custom_tool_call_output" if custom else "function_call_output"}
        output: Any
        if OUTPUT in part.meta:
            output = part.meta[OUTPUT]
        elif part.meta.get(STRING) or (
            ITEM not in part.meta and all(isinstance(c, TextPart) for c in part.content)
        ):
            output = ("Error: " if part.is_error else "") + part.text
        else:
            output = [_input_part(c, f"{where}.output") for c in part.content]
        return {**envelope, "call_id": part.tool_call_id, "output": output}

    def _assistant(self, m: Message, where: str) -> None:
        current: dict[str, Any] | None = None  # the open assistant message item
        for j, part in enumerate(m.parts):
            if spoken_answer(part):  # the Responses API has no audio: what was said, as text
                part = spoken_answer_text(part, f"{where}.content[{j}]", "OpenAI Responses")
            if isinstance(part, TextPart):
                if current is None or ITEM in part.meta:
                    current = _assistant_item(part)
                    self.out.append(current)
                _add_text(current, part)
                continue
            current = None
            if isinstance(part, ToolCallPart):
                self.kinds[part.id] = part.kind
                self.out.append(_call(part))
            elif isinstance(part, ReasoningPart):
                if ITEM in part.meta:  # ours; another dialect's reasoning is dropped
                    self.out.append(dict(part.meta[ITEM]))
            elif isinstance(part, UnknownPart) and part.dialect == ITEM_DIALECT:
                self.out.append(part.raw)
            else:
                raise _unsupported(part, f"{where}.content[{j}]")


def render_input(messages: tuple[Message, ...], same: bool) -> list[dict[str, Any]]:
    """The ``input`` array; ``same`` says the request came from a Responses client (a
    400 then names ``input[i]``, else the client's ``messages[i]``)."""
    renderer = _Renderer("input" if same else "messages")
    for i, m in enumerate(messages):
        renderer.message(m, i)
    return renderer.out


def _message(m: Message, role: str, where: str) -> dict[str, Any]:
    envelope = m.meta.get(ITEM)
    item: dict[str, Any] = {"type": "message"} if envelope is None else dict(envelope)
    item["role"] = role
    parts = m.parts
    lone_text = len(parts) == 1 and isinstance(parts[0], TextPart) and PART not in parts[0].meta
    if m.meta.get(STRING) or (lone_text and envelope is None):
        item["content"] = "".join(p.text for p in parts if isinstance(p, TextPart))
    else:
        item["content"] = [_input_part(p, f"{where}.content[{j}]") for j, p in enumerate(parts)]
    return item


def _input_part(part: Part, param: str) -> dict[str, Any]:
    own = part.meta.get(PART) if not isinstance(part, UnknownPart) else None
    if isinstance(part, TextPart):
        return {**(own or {"type": "input_text"}), "text": part.text}
    if isinstance(part, ImagePart):
        out: dict[str, Any] = {**(own or {"type": "input_image"}), "image_url": part.data_uri}
        if part.detail is not None or own is None:
            out["detail"] = part.detail or "auto"  # required by the API for a new part
        return out
    if isinstance(part, DocumentPart):
        return _document(part, own, param)
    if isinstance(part, UnknownPart) and part.dialect == DIALECT_NAME:
        return part.raw
    raise _unsupported(part, param)


def _document(part: DocumentPart, own: dict[str, Any] | None, param: str) -> dict[str, Any]:
    out: dict[str, Any] = dict(own or {"type": "input_file"})
    if part.data is not None:
        bare = part.meta.get("bare")
        out["file_data"] = (
            part.data if bare else f"data:{part.media_type or 'application/pdf'};base64,{part.data}"
        )
    elif part.url is not None:
        out["file_url"] = part.url
    elif "file_id" in part.meta:
        out["file_id"] = part.meta["file_id"]
    elif part.text is not None:
        return {"type": "input_text", "text": part.text}  # a plain-text document is text
    else:
        raise _unsupported(part, param)
    if part.title is not None:
        out["filename"] = part.title
    return out


def _assistant_item(first: TextPart) -> dict[str, Any]:
    envelope = first.meta.get(ITEM)
    if envelope is None:  # another dialect's text: one message item, string content
        return {"type": "message", "role": "assistant", "content": ""}
    item = {**envelope, "role": "assistant"}
    item["content"] = "" if first.meta.get(STRING) else []
    return item


def _add_text(item: dict[str, Any], part: TextPart) -> None:
    content = item["content"]
    if isinstance(content, str):
        item["content"] = content + part.text
        return
    own = part.meta.get(PART)
    key = "refusal" if part.meta.get("refusal") else "text"
    base = own if own is not None else {"type": key if key == "refusal" else "output_text"}
    content.append({**base, key: part.text})


def _call(part: ToolCallPart) -> dict[str, Any]:
    envelope = part.meta.get(ITEM) or {}
    name = part.name
    namespace = envelope.get("namespace")
    if namespace is not None and name.startswith(namespace + NAMESPACE_SEP):
        name = name[len(namespace) + len(NAMESPACE_SEP) :]
    if part.kind == "custom":
        return {
            "type": "custom_tool_call",
            **envelope,
            "call_id": part.id,
            "name": name,
            "input": part.arguments,
        }
    return {
        "type": "function_call",
        **envelope,
        "call_id": part.id,
        "name": name,
        "arguments": part.arguments,
    }


def _unsupported(part: Part, param: str) -> InvalidRequestError:
    what = part.raw.get("type") if isinstance(part, UnknownPart) else type(part).__name__
    if isinstance(part, AudioPart):
        what = "input_audio"  # the SDK declares the type but no input accepts it
    return InvalidRequestError(
        f"{param}: content of type {what!r} cannot be sent to an OpenAI Responses upstream.",
        param=param,
    )
