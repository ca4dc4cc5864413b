"""Responses API SSE streams <-> neutral stream events.

Wire facts: docs/protocols.md, "Responses: stream events" and "Stream translation".

:class:`ResponsesStreamEncoder` writes the stream for a client: ``response.created``,
``response.in_progress``, one output item at a time (added, its content events, done),
then ``response.completed`` / ``response.incomplete`` holding the whole response, or
``response.failed``. Every event carries the next ``sequence_number``. Output items are
sequential, so neutral blocks that interleave (parallel tool calls from an OpenAI Chat
upstream) are buffered and replayed in order, as the Anthropic encoder does. A delta is
one template fill: a per-item prefix, the sequence number, the delta's JSON and a tail.

:class:`ResponsesStreamDecoder` (in :mod:`._decoder`) reads an upstream's stream.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import orjson

from ...core import (
    ArgumentsDelta,
    BlockStart,
    BlockStop,
    Part,
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
    TokenLogprob,
    ToolCallPart,
    UnknownPart,
    Usage,
)
from ...errors import ErrorKind, InterlinguaError
from ...sse import encode_json_event
from .._common import random_id
from .._sequence import OneAtATime
from ._decoder import ResponsesStreamDecoder
from .errors import render_error_body
from .response import (
    content_part,
    finish,
    item_id,
    item_prefix,
    own_id,
    render_item,
    render_logprobs,
    response_body,
    sealer_for,
)
from .sealed import DEFAULT_SEALER, Sealer

__all__ = ["ResponsesStreamDecoder", "ResponsesStreamEncoder", "render_failed_error"]

_PING = b": ping\n\n"

# ResponseError.code is a closed set in the SDK; these are the members that fit.
_FAILED_CODES: dict[ErrorKind, str] = {
    ErrorKind.RATE_LIMIT: "rate_limit_exceeded",
    ErrorKind.INVALID_REQUEST: "invalid_prompt",
    ErrorKind.REQUEST_TOO_LARGE: "invalid_prompt",
}

# Per item kind: the delta event's type, the index field it carries, and the tail after
# the delta's JSON.
_TEXT = ("response.output_text.delta", b'"content_index":0,', b',"logprobs":[]}\n\n')
_REFUSAL = ("response.refusal.delta", b'"content_index":0,', b"}\n\n")
_SUMMARY = ("response.reasoning_summary_text.delta", b'"summary_index":0,', b"}\n\n")
_ARGS = ("response.function_call_arguments.delta", b"", b"}\n\n")
_INPUT = ("response.custom_tool_call_input.delta", b"", b"}\n\n")


def render_failed_error(error: InterlinguaError) -> dict[str, Any]:
    """The ``response.error`` object of a failed response."""
    code = _FAILED_CODES.get(error.kind, "server_error")
    return {"code": code, "message": error.message}


def _delta_kind(part: Part) -> tuple[str, bytes, bytes]:
    if isinstance(part, TextPart):
        return _REFUSAL if part.meta.get("refusal") else _TEXT
    if isinstance(part, ReasoningPart):
        return _SUMMARY
    assert isinstance(part, ToolCallPart)
    return _INPUT if part.kind == "custom" else _ARGS


def _added_item(part: Part, iid: str) -> dict[str, Any]:
    """The ``output_item.added`` form of an item: in progress, content empty."""
    if isinstance(part, TextPart):
        return {"id": iid, "type": "message", "status": "in_progress", "role": "assistant",
                "content": []}  # fmt: skip
    if isinstance(part, ReasoningPart):
        return {"id": iid, "type": "reasoning", "summary": []}
    item = render_item(_with_content(part, ""), iid)
    if item.get("status"):
        item["status"] = "in_progress"
    return item


def _content(part: Part) -> str:
    if isinstance(part, ToolCallPart):
        return part.arguments
    return part.text if isinstance(part, TextPart | ReasoningPart) else ""


def _with_content(part: Part, text: str) -> Part:
    if isinstance(part, ToolCallPart):
        return replace(part, arguments=text)
    if isinstance(part, TextPart | ReasoningPart):
        return replace(part, text=text)
    return part


class ResponsesStreamEncoder(OneAtATime):
    """Neutral events -> the bytes of a Responses SSE stream. See the module docstring.

    The final object is built from the items as they were sent (``render_item`` of the
    folded part, ids from :func:`.response.item_id`), so it equals
    :func:`.response.render_response` of the folded stream.
    """

    __slots__ = (
        "_chunks",
        "_created",
        "_delta",
        "_done",
        "_iid",
        "_items",
        "_logprobs",
        "_part",
        "_request",
        "_resp_id",
        "_sealer",
        "_seq",
        "_signature",
        "_start_usage",
        "_summary",
        "_tail",
        "final",
    )

    def __init__(self, request: Request, sealer: Sealer = DEFAULT_SEALER) -> None:
        super().__init__()
        self._request = request
        self._sealer = sealer_for(request, sealer)
        self._seq = 0
        self._done = False
        self._resp_id = ""  # set by the start: nothing is sent before it
        self._created = 0
        self._start_usage: Usage | None = None
        self._items: list[dict[str, Any]] = []  # finished output items, in output order
        self._part: Part = TextPart("")  # its initial part
        self._iid = ""
        self._chunks: list[str] = []  # its content so far
        self._logprobs: list[TokenLogprob] | None = None  # its text's token logprobs
        self._signature: list[str] = []  # a reasoning item's signature deltas
        # a reasoning item's summary part: None (not a reasoning item), False (not yet
        # opened: it opens with the first text), True (open)
        self._summary: bool | None = None
        self._delta = b""  # delta prefix up to the sequence number
        self._tail = b""
        #: the response object of the terminal event once it is sent (completed,
        #: incomplete or failed), else None: what the gateway stores, without re-reading
        #: the bytes it wrote
        self.final: dict[str, Any] | None = None

    def ping(self) -> bytes:
        """A keep-alive comment; SSE clients ignore it."""
        return _PING

    def continue_numbering(self, after: int) -> None:
        """Number the next event ``after``: this encoder carries on a stream whose
        earlier events someone else wrote (a relayed upstream's, up to ``after - 1``)."""
        self._seq = max(self._seq, after)

    def relay_error(self, error: InterlinguaError) -> bytes:
        """The stream-level ``error`` event ending a stream this encoder did not write.

        One relayed from a Responses upstream
        (docs/protocols.md, "Responses: stream events"). A ``response.failed`` would need
        that stream's response id (the SDK refuses a second one: "Lifecycle response
        identity changed") and its ``sequence_number``, which only the upstream knew; the
        error event needs neither, so its number is left out."""
        self._done = True
        body = render_error_body(error)
        payload = orjson.dumps(
            {"type": "error", "code": body["code"] or body["type"], "message": body["message"],
             "param": body["param"]}
        )  # fmt: skip
        return encode_json_event(payload, "error")

    def _event(self, kind: str, fields: dict[str, Any]) -> bytes:
        seq = self._seq
        self._seq = seq + 1
        payload = orjson.dumps({"type": kind, "sequence_number": seq, **fields})
        return encode_json_event(payload, kind)

    def encode(self, event: StreamEvent) -> bytes:
        """The bytes owed for one neutral event (``b""`` while buffering)."""
        if self._done:
            return b""
        if type(event) is TextDelta:
            if event.index == self._current:
                if event.logprobs is not None:
                    return self._logprob_delta(event.text, event.logprobs)
                return self._delta_bytes(event.text)
        elif type(event) is ReasoningDelta:
            if event.index == self._current:
                return self._delta_bytes(event.text)
        elif type(event) is ArgumentsDelta and event.index == self._current:
            return self._delta_bytes(event.json)
        out: list[bytes] = []
        if not self._resp_id:
            start = event if isinstance(event, StreamStart) else None
            self._begin(start or StreamStart(random_id("resp_"), self._request.model), out)
            if start is not None:
                return b"".join(out)
        if isinstance(event, BlockStart):
            self._start_block(event, out)
        elif isinstance(event, StreamEnd):
            self._finish(event, out)
        elif isinstance(event, StreamError):
            self._fail(event.error, out)
        elif isinstance(event, StreamStart):
            pass  # a repeated start says nothing new
        else:
            self._block_event(event, event.index, out)
        return b"".join(out)

    def _delta_bytes(self, text: str) -> bytes:
        """One delta event of the open item: the hot path, a template fill."""
        if not text:
            return b""
        self._chunks.append(text)
        prefix = self._delta
        if self._summary is False:
            prefix = self._open_summary() + prefix
        seq = self._seq
        self._seq = seq + 1
        return b"".join((prefix, b"%d" % seq, b',"delta":', orjson.dumps(text), self._tail))

    def _logprob_delta(self, text: str, logprobs: tuple[TokenLogprob, ...]) -> bytes:
        """A text delta carrying its tokens' logprobs (the delta event's own shape)."""
        if isinstance(self._part, TextPart) and self._part.meta.get("refusal"):
            return self._delta_bytes(text)  # a refusal's delta event has no logprobs
        self._logprobs = [*(self._logprobs or ()), *logprobs]
        if not text and not logprobs:
            return b""
        self._chunks.append(text)
        tail = b',"logprobs":' + orjson.dumps(render_logprobs(logprobs)) + b"}\n\n"
        seq = self._seq
        self._seq = seq + 1
        return b"".join((self._delta, b"%d" % seq, b',"delta":', orjson.dumps(text), tail))

    def _begin(self, event: StreamStart, out: list[bytes]) -> None:
        self._resp_id = own_id(self._request, event.id)
        self._created = event.created or int(time.time())
        self._start_usage = event.usage
        for kind in ("response.created", "response.in_progress"):
            body = response_body(self._resp_id, self._created, self._request, "in_progress", [])
            out.append(self._event(kind, {"response": body}))

    def _open(self, event: BlockStart, out: list[bytes]) -> None:
        part = event.part
        prefix = item_prefix(part)
        if prefix is None:
            return  # another dialect's block: nothing to say in Responses terms
        index = len(self._items)
        iid = item_id(prefix, self._resp_id, index, part)
        if isinstance(part, UnknownPart):  # a hosted-tool item arrives whole
            item = render_item(part, iid)
            out.append(
                self._event("response.output_item.added", {"output_index": index, "item": item})
            )
            out.append(
                self._event("response.output_item.done", {"output_index": index, "item": item})
            )
            self._items.append(item)
            return
        self._current = event.index
        self._part = part
        self._iid = iid
        self._chunks = []
        self._logprobs = None
        self._signature = []
        self._summary = False if isinstance(part, ReasoningPart) else None
        kind, index_field, self._tail = _delta_kind(part)
        self._delta = b"".join((
            b"event: ", kind.encode(), b'\ndata: {"type":"', kind.encode(), b'","item_id":',
            orjson.dumps(iid), b',"output_index":%d,' % index, index_field, b'"sequence_number":',
        ))  # fmt: skip
        added = _added_item(part, iid)
        out.append(
            self._event("response.output_item.added", {"output_index": index, "item": added})
        )
        if isinstance(part, TextPart):
            empty = content_part(replace(part, text=""))
            out.append(self._event("response.content_part.added", self._ids({"part": empty})))
        initial = _content(part)
        if initial:
            out.append(self._delta_bytes(initial))

    def _ids(self, fields: dict[str, Any]) -> dict[str, Any]:
        """``fields`` with the open item's ``item_id``, ``output_index`` and the index
        of its (only) content or summary part."""
        ids: dict[str, Any] = {"item_id": self._iid, "output_index": len(self._items)}
        if isinstance(self._part, TextPart):
            ids["content_index"] = 0
        elif isinstance(self._part, ReasoningPart):
            ids["summary_index"] = 0
        return {**ids, **fields}

    def _open_summary(self) -> bytes:
        self._summary = True
        part = {"type": "summary_text", "text": ""}
        return self._event("response.reasoning_summary_part.added", self._ids({"part": part}))

    def _in_block(self, event: StreamEvent, out: list[bytes]) -> None:
        """An event of the open item (replayed from the buffer, or a stop)."""
        if isinstance(event, TextDelta) and event.logprobs is not None:
            out.append(self._logprob_delta(event.text, event.logprobs))
        elif isinstance(event, TextDelta | ReasoningDelta):
            out.append(self._delta_bytes(event.text))
        elif isinstance(event, ArgumentsDelta):
            out.append(self._delta_bytes(event.json))
        elif isinstance(event, BlockStop):
            self._close(out)
        elif isinstance(event, SignatureDelta):
            self._signature.append(event.signature)

    def _close(self, out: list[bytes]) -> None:
        """Finish the open item: its done events, then ``output_item.done``."""
        text = "".join(self._chunks)
        part = _with_content(self._part, text)
        if isinstance(part, TextPart) and self._logprobs is not None:
            part = replace(part, logprobs=(*(part.logprobs or ()), *self._logprobs))
        if isinstance(part, ReasoningPart) and self._signature:
            part = replace(part, signature=(part.signature or "") + "".join(self._signature))
        ids = self._ids
        if isinstance(part, TextPart):
            if part.meta.get("refusal"):
                out.append(self._event("response.refusal.done", ids({"refusal": text})))
            else:
                fields = {"text": text, "logprobs": render_logprobs(part.logprobs)}
                out.append(self._event("response.output_text.done", ids(fields)))
            out.append(self._event("response.content_part.done", ids({"part": content_part(part)})))
        elif isinstance(part, ReasoningPart):
            if self._summary:
                out.append(self._event("response.reasoning_summary_text.done", ids({"text": text})))
                summary = {"type": "summary_text", "text": text}
                out.append(
                    self._event("response.reasoning_summary_part.done", ids({"part": summary}))
                )
        elif isinstance(part, ToolCallPart):
            if part.kind == "custom":
                out.append(
                    self._event("response.custom_tool_call_input.done", ids({"input": text}))
                )
            else:
                fields = {"name": part.name, "arguments": text}
                out.append(self._event("response.function_call_arguments.done", ids(fields)))
        item = render_item(part, self._iid, self._sealer)
        index = len(self._items)
        out.append(self._event("response.output_item.done", {"output_index": index, "item": item}))
        self._items.append(item)
        self._current = None

    def _finish(self, event: StreamEnd, out: list[bytes]) -> None:
        self._done = True
        if self._current is not None:
            self._close(out)
        self._drain(out, close_all=True)
        usage = event.usage
        start = self._start_usage
        if start is not None and usage.input_tokens == 0:
            usage = replace(usage, input_tokens=start.input_tokens)  # as fold() does
        body = response_body(self._resp_id, self._created, self._request, "", self._items)
        finish(body, event.stop_reason, usage)
        kind = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
        out.append(self._event(kind, {"response": body}))
        self.final = body

    def _fail(self, error: InterlinguaError, out: list[bytes]) -> None:
        """``response.failed`` with the items finished so far; an open item is left
        unfinished (the API does the same: a failed response ends there)."""
        self._done = True
        body = response_body(self._resp_id, self._created, self._request, "failed", self._items)
        body["error"] = render_failed_error(error)
        out.append(self._event("response.failed", {"response": body}))
        self.final = body
