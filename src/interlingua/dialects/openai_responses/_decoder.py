"""An upstream's Responses SSE stream -> neutral stream events.

Wire facts: docs/protocols.md, "Responses: stream events".

Neutral blocks follow the output items: a reasoning item, each content part of a
message (``output_text`` or ``refusal``), and each function or custom tool call is one
block, numbered in the order it appears. Items we do not model (hosted-tool calls)
become an :class:`~interlingua.core.UnknownPart` block when they are done. What the
done events hold but no delta carried (a server that sends only the finished item) is
sent as one delta before the block stops, and a reasoning item's
``encrypted_content`` as its signature, so the fold equals
:func:`.response.parse_response` of the final object.
"""

from __future__ import annotations

from typing import Any

import orjson

from ...core import (
    ArgumentsDelta,
    BlockStart,
    BlockStop,
    ReasoningDelta,
    ReasoningPart,
    Request,
    SignatureDelta,
    StreamEnd,
    StreamError,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    ToolCallPart,
    UnknownPart,
)
from ...errors import InterlinguaError, MalformedToolCallError, UpstreamError
from ...sse import SSEEvent
from .._common import random_id
from ..openai_chat.errors import error_from_payload
from .response import NAME, parse_item, parse_logprobs, parse_usage, stop_reason_for

__all__ = ["ResponsesStreamDecoder"]

_Key = tuple[int, int]  # (output_index, content index; 0 for reasoning and calls)
_MODELLED = ("reasoning", "function_call", "custom_tool_call", "message")
_ARGUMENTS = ("response.function_call_arguments.delta", "response.custom_tool_call_input.delta")


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


class ResponsesStreamDecoder:
    """Upstream Responses SSE events -> neutral events. See the module docstring.

    ``response.completed`` and ``response.incomplete`` end the stream (StreamEnd with
    the stop reason and usage of their ``response``); ``response.failed`` and ``error``
    events fail it (StreamError). Unknown event types are ignored.
    """

    __slots__ = (
        "_blocks",
        "_call_ids",
        "_done",
        "_filled",
        "_items",
        "_next",
        "_open",
        "_started",
        "_tools",
        "last",
    )

    def __init__(self, request: Request) -> None:
        del request  # nothing in the request changes how a Responses stream reads
        #: the JSON of the event fed last (see StreamDecoder)
        self.last: Any = None
        self._started = False
        self._done = False
        self._next = 0  # the next neutral block index
        self._blocks: dict[_Key, int] = {}  # (output_index, sub-index) -> neutral index
        self._items: dict[int, str] = {}  # output_index -> item type, for open items
        self._open: list[int] = []  # open neutral blocks, in opening order
        self._filled: set[int] = set()  # neutral blocks that received content
        self._tools = False  # a tool call was seen (TOOL_USE at the end)
        self._call_ids: dict[int, Any] = {}  # output_index -> call id, to name a fault

    def feed(self, event: SSEEvent) -> list[StreamEvent]:
        """One SSE event -> zero or more neutral events."""
        if self._done:
            return []
        try:
            data = self.last = orjson.loads(event.data)
        except orjson.JSONDecodeError:
            data = None
        if not isinstance(data, dict):
            if not event.data.strip():
                return []  # an empty keep-alive
            return self._fail(
                UpstreamError("upstream sent a stream event that is not JSON", status=502)
            )
        kind = data.get("type")
        if not isinstance(kind, str):
            kind = event.event
        handler = _HANDLERS.get(kind)
        if handler is None:
            return []
        out: list[StreamEvent] = []
        if not self._started and kind != "error":
            self._start(data.get("response") if kind == "response.created" else None, out)
        try:
            handler(self, data, out)
        except MalformedToolCallError as exc:  # a call no client could use ends the stream
            out.extend(self._fail(exc))
        return out

    def flush(self) -> list[StreamEvent]:
        """End of input before a terminal event: an error once something started."""
        if self._done or not self._started:
            self._done = True
            return []
        return self._fail(UpstreamError("upstream stream ended before the response completed"))

    def _fail(self, error: InterlinguaError) -> list[StreamEvent]:
        self._done = True
        return [StreamError(error)]

    def _start(self, response: Any, out: list[StreamEvent]) -> None:
        self._started = True
        response = response if isinstance(response, dict) else {}
        created = response.get("created_at")
        out.append(
            StreamStart(
                id=str(response.get("id") or random_id("resp_")),
                model=str(response.get("model") or ""),
                created=int(created)
                if isinstance(created, int | float) and not isinstance(created, bool)
                else 0,
            )
        )

    def _created(self, data: dict[str, Any], out: list[StreamEvent]) -> None:
        """Nothing more to do: the start was made from it in :meth:`feed`."""

    def _open_block(self, key: _Key, part: Any, out: list[StreamEvent]) -> int:
        index = self._blocks[key] = self._next
        self._next += 1
        self._open.append(index)
        out.append(BlockStart(index, part))
        return index

    def _stop(self, index: int, out: list[StreamEvent]) -> None:
        if index in self._open:
            self._open.remove(index)
            out.append(BlockStop(index))

    def _item_added(self, data: dict[str, Any], out: list[StreamEvent]) -> None:
        item, position = data.get("item"), data.get("output_index")
        if not isinstance(item, dict) or not isinstance(position, int):
            return
        kind = item.get("type")
        self._items[position] = kind if isinstance(kind, str) else ""
        if kind == "reasoning":
            part = parse_item({**item, "summary": [], "content": [], "encrypted_content": None})
            self._open_block((position, 0), part[0], out)
        elif kind in ("function_call", "custom_tool_call"):
            self._tools = True
            self._call_ids[position] = item.get("call_id")
            (call,) = parse_item(item, f"output[{position}]")
            assert isinstance(call, ToolCallPart)
            index = self._open_block((position, 0), call, out)
            if call.arguments:
                self._filled.add(index)

    def _part_added(self, data: dict[str, Any], out: list[StreamEvent]) -> None:
        position, sub, part = data.get("output_index"), data.get("content_index"), data.get("part")
        if not isinstance(position, int) or not isinstance(sub, int) or not isinstance(part, dict):
            return
        if part.get("type") == "refusal":
            self._open_block((position, sub), TextPart("", meta={"refusal": True}), out)
        elif part.get("type") == "output_text":
            meta = (
                {"id": data["item_id"]} if sub == 0 and isinstance(data.get("item_id"), str) else {}
            )
            self._open_block((position, sub), TextPart("", meta=meta), out)

    def _summary_added(self, data: dict[str, Any], out: list[StreamEvent]) -> None:
        # Summary parts of one item fold into one reasoning block, joined as
        # parse_response joins them.
        index = self._blocks.get((_int(data.get("output_index")), 0))
        if index is not None and data.get("summary_index", 0) and index in self._filled:
            out.append(ReasoningDelta(index, "\n\n"))

    def _delta(self, data: dict[str, Any], out: list[StreamEvent]) -> None:
        delta = data.get("delta")
        kind = data["type"]
        logprobs = None
        if kind == "response.output_text.delta":
            logprobs = parse_logprobs(data.get("logprobs"))
        if not isinstance(delta, str) or not (delta or logprobs):
            if delta is not None and not isinstance(delta, str) and kind in _ARGUMENTS:
                raise self._bad_arguments(data)
            return
        text = kind in ("response.output_text.delta", "response.refusal.delta")
        sub = _int(data.get("content_index")) if text else 0  # one block per reasoning item
        index = self._blocks.get((_int(data.get("output_index")), sub))
        if index is None or index not in self._open:
            return
        self._filled.add(index)
        if text:
            out.append(TextDelta(index, delta, logprobs))
        elif kind.startswith("response.reasoning"):
            out.append(ReasoningDelta(index, delta))
        else:
            out.append(ArgumentsDelta(index, delta))

    def _bad_arguments(self, data: dict[str, Any]) -> MalformedToolCallError:
        """An arguments delta that is not text: the call cannot be read."""
        position = _int(data.get("output_index"))
        where, call_id = f"output[{position}]", self._call_ids.get(position)
        return MalformedToolCallError("an arguments delta that is not a string", where, call_id)

    def _item_done(self, data: dict[str, Any], out: list[StreamEvent]) -> None:
        """Close the item's blocks, sending first what only the finished item holds."""
        item, position = data.get("item"), data.get("output_index")
        if not isinstance(item, dict) or not isinstance(position, int):
            return
        if item.get("type") not in _MODELLED:  # a hosted-tool item: one whole block
            self._items.pop(position, None)
            self._stop(self._open_block((position, 0), UnknownPart(NAME, item), out), out)
            return
        if position not in self._items:  # an item that was never added: open it now
            self._item_added(data, out)
            if item.get("type") == "message":
                self._message_parts(position, item, out)
        self._items.pop(position, None)
        parts = parse_item(item, f"output[{position}]")
        subs = sorted(sub for (pos, sub) in self._blocks if pos == position)
        for sub, part in zip(subs, parts, strict=False):
            index = self._blocks[(position, sub)]
            self._fill(index, part, out)
            self._stop(index, out)

    def _message_parts(self, position: int, item: dict[str, Any], out: list[StreamEvent]) -> None:
        for sub, content in enumerate(item.get("content") or ()):
            if isinstance(content, dict):
                self._part_added({"output_index": position, "content_index": sub, "part": content,
                                  "item_id": item.get("id")}, out)  # fmt: skip

    def _fill(self, index: int, part: Any, out: list[StreamEvent]) -> None:
        if index not in self._open:
            return
        if index not in self._filled:
            if isinstance(part, TextPart) and part.text:
                out.append(TextDelta(index, part.text))
            elif isinstance(part, ReasoningPart) and part.text:
                out.append(ReasoningDelta(index, part.text))
            elif isinstance(part, ToolCallPart) and part.arguments:
                out.append(ArgumentsDelta(index, part.arguments))
        if isinstance(part, ReasoningPart) and part.signature:
            out.append(SignatureDelta(index, part.signature))

    def _end(self, data: dict[str, Any], out: list[StreamEvent]) -> None:
        self._done = True
        response = data.get("response")
        response = response if isinstance(response, dict) else {}
        for index in list(self._open):
            self._stop(index, out)
        stop = stop_reason_for(
            response.get("status"), response.get("incomplete_details"), self._tools
        )
        usage = parse_usage(response.get("usage"))
        out.append(StreamEnd(stop) if usage is None else StreamEnd(stop, usage=usage))

    def _failed(self, data: dict[str, Any], out: list[StreamEvent]) -> None:
        response = data.get("response")
        error = response.get("error") if isinstance(response, dict) else None
        out.extend(self._fail(error_from_payload(error or "upstream response failed")))

    def _error(self, data: dict[str, Any], out: list[StreamEvent]) -> None:
        error = data.get("error") if isinstance(data.get("error"), dict) else data
        out.extend(self._fail(error_from_payload(error)))


_HANDLERS = {
    "response.created": ResponsesStreamDecoder._created,
    "response.output_item.added": ResponsesStreamDecoder._item_added,
    "response.content_part.added": ResponsesStreamDecoder._part_added,
    "response.reasoning_summary_part.added": ResponsesStreamDecoder._summary_added,
    "response.output_text.delta": ResponsesStreamDecoder._delta,
    "response.refusal.delta": ResponsesStreamDecoder._delta,
    "response.reasoning_summary_text.delta": ResponsesStreamDecoder._delta,
    "response.reasoning_text.delta": ResponsesStreamDecoder._delta,
    "response.function_call_arguments.delta": ResponsesStreamDecoder._delta,
    "response.custom_tool_call_input.delta": ResponsesStreamDecoder._delta,
    "response.output_item.done": ResponsesStreamDecoder._item_done,
    "response.completed": ResponsesStreamDecoder._end,
    "response.incomplete": ResponsesStreamDecoder._end,
    "response.failed": ResponsesStreamDecoder._failed,
    "error": ResponsesStreamDecoder._error,
}
