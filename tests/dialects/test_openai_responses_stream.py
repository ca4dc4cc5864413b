"""Responses stream codec: every encoded event validated by the official SDK's types and
fed to its accumulator, whose final response must equal our ``response.completed``
object and ``render_response`` of the folded stream; interleaved blocks buffered into
sequential items; length -> incomplete, error -> failed; a recorded-style upstream
stream decoded whole and split at every byte, folding to ``parse_response`` of its
final object."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai._types import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response as SDKResponse
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from interlingua.core import (
    ArgumentsDelta,
    BlockStart,
    BlockStop,
    Message,
    ReasoningPart,
    Request,
    Response,
    StopReason,
    StreamEnd,
    StreamError,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    ToolCallPart,
    Usage,
    fold,
    unfold,
)
from interlingua.dialects import EventDecoder
from interlingua.dialects.openai_responses.response import parse_response, render_response
from interlingua.dialects.openai_responses.stream import (
    ResponsesStreamDecoder,
    ResponsesStreamEncoder,
)
from interlingua.errors import RateLimitError, UpstreamError
from interlingua.sse import SSEDecoder, SSEEvent

FIXTURES = Path(__file__).parent.parent / "fixtures"
REQUEST = Request("client-model", (Message("user", (TextPart("hi"),)),))
INCLUDING = replace(REQUEST, extra={"include": ["reasoning.encrypted_content"]})
EVENTS = TypeAdapter(ResponseStreamEvent)
USAGE = Usage(input_tokens=12, output_tokens=30, cache_read_tokens=4, reasoning_tokens=9)


def _encode(events: list[StreamEvent], request: Request = REQUEST) -> list[dict[str, Any]]:
    """Encode ``events`` and read the bytes back: one payload per SSE event, whose
    ``event:`` name and ``type`` agree."""
    encoder = ResponsesStreamEncoder(request)
    raw = b"".join(encoder.encode(event) for event in events)
    sse = SSEDecoder()
    payloads = []
    for event in [*sse.decode(raw), *sse.flush()]:
        payload = json.loads(event.data)
        assert event.event == payload["type"]
        payloads.append(payload)
    return payloads


def _accumulate(payloads: list[dict[str, Any]]) -> tuple[Any, Any]:
    """Each payload validated as a ResponseStreamEvent and fed to the SDK's accumulator:
    (the final response it built, its last snapshot)."""
    state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
    final = None
    for n, payload in enumerate(payloads):
        assert payload["sequence_number"] == n
        for out in state.handle_event(EVENTS.validate_python(payload)):
            if out.type == "response.completed":
                final = out.response
    return final, state._ResponseStreamState__current_snapshot  # type: ignore[attr-defined]


def _sdk(body: dict[str, Any]) -> dict[str, Any]:
    return SDKResponse.model_validate(body).model_dump(exclude_none=True)


def _check_completed(response: Response, chunk_size: int | None = 3) -> list[dict[str, Any]]:
    events = list(unfold(response, chunk_size=chunk_size))
    payloads = _encode(events)
    final, _snapshot = _accumulate(payloads)
    assert payloads[-1]["type"] == "response.completed"
    ours = payloads[-1]["response"]
    assert ours == render_response(fold(events), REQUEST)
    assert final is not None
    assert final.id == ours["id"] and final.usage.model_dump() == ours["usage"] | {
        "input_tokens_details": final.usage.input_tokens_details.model_dump()
    }
    assert [o.model_dump(exclude_none=True) for o in final.output] == [
        o.model_dump(exclude_none=True) for o in SDKResponse.model_validate(ours).output
    ]
    return payloads


def test_text_turn_event_order_and_ids() -> None:
    response = Response("resp_1", "m", (TextPart("Hello there!"),), usage=USAGE, created=7)
    payloads = _check_completed(response)
    types = [p["type"] for p in payloads]
    assert types[:5] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
    ]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    ids = {p["item_id"] for p in payloads if "item_id" in p}
    assert len(ids) == 1 and next(iter(ids)).startswith("msg_")
    final = payloads[-1]["response"]
    assert final["status"] == "completed" and final["model"] == "client-model"
    assert final["usage"] == {
        "input_tokens": 12,
        "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 0},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 9},
        "total_tokens": 42,
    }
    assert final["output"][0]["content"][0]["text"] == "Hello there!"


def test_reasoning_then_text_then_tool_call() -> None:
    parts = (
        ReasoningPart("Think first.", meta={"encrypted_content": "gAAA"}),
        TextPart("Checking."),
        ToolCallPart("call_1", "get_weather", '{"city": "Paris"}'),
    )
    response = Response("r2", "m", parts, StopReason.TOOL_USE, usage=USAGE, created=5)
    payloads = _check_completed(response)
    types = [p["type"] for p in payloads]
    assert "response.reasoning_summary_part.added" in types
    assert "response.reasoning_summary_text.done" in types
    assert "response.function_call_arguments.done" in types
    final = payloads[-1]["response"]
    assert final["id"] == "resp_r2"
    assert [o["type"] for o in final["output"]] == ["reasoning", "message", "function_call"]
    assert final["output"][0]["summary"] == [{"type": "summary_text", "text": "Think first."}]
    assert final["output"][2]["call_id"] == "call_1"
    assert final["output"][2]["id"].startswith("fc_")


def test_custom_tool_call() -> None:
    patch = "*** Begin Patch\n*** End Patch\n"
    call = ToolCallPart("call_p", "apply_patch", patch, kind="custom")
    payloads = _check_completed(Response("r3", "m", (call,), StopReason.TOOL_USE, created=1))
    types = [p["type"] for p in payloads]
    assert "response.custom_tool_call_input.delta" in types
    done = next(p for p in payloads if p["type"] == "response.custom_tool_call_input.done")
    assert done["input"] == patch
    item = payloads[-1]["response"]["output"][0]
    assert item["type"] == "custom_tool_call" and item["input"] == patch
    assert item["id"].startswith("ctc_")


def test_interleaved_tool_calls_become_sequential_items() -> None:
    events: list[StreamEvent] = [
        StreamStart("r4", "m", 3),
        BlockStart(0, ToolCallPart("call_a", "f")),
        BlockStart(1, ToolCallPart("call_b", "g")),
        ArgumentsDelta(0, '{"x":'),
        ArgumentsDelta(1, '{"y":'),
        ArgumentsDelta(0, "1}"),
        ArgumentsDelta(1, "2}"),
        BlockStop(1),
        BlockStop(0),
        StreamEnd(StopReason.TOOL_USE, usage=USAGE),
    ]
    payloads = _encode(events)
    final, _ = _accumulate(payloads)
    ours = payloads[-1]["response"]
    assert ours == render_response(fold(events), REQUEST)
    assert [(o["call_id"], o["arguments"]) for o in ours["output"]] == [
        ("call_a", '{"x":1}'),
        ("call_b", '{"y":2}'),
    ]
    assert [o.arguments for o in final.output] == ['{"x":1}', '{"y":2}']
    # items never overlap: each item's events sit between its added and done
    current = None
    for p in payloads:
        if p["type"] == "response.output_item.added":
            assert current is None
            current = p["output_index"]
        elif p["type"] == "response.output_item.done":
            assert current == p["output_index"]
            current = None
        elif "output_index" in p:
            assert p["output_index"] == current


def test_length_is_incomplete() -> None:
    response = Response("r5", "m", (TextPart("cut sh"),), StopReason.MAX_TOKENS, created=1)
    events = list(unfold(response))
    payloads = _encode(events)
    _accumulate(payloads)
    last = payloads[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["status"] == "incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert last["response"] == render_response(fold(events), REQUEST)


def test_error_is_failed_never_completed() -> None:
    events: list[StreamEvent] = [
        StreamStart("r6", "m", 1),
        BlockStart(0, TextPart("")),
        TextDelta(0, "partial"),
        StreamError(RateLimitError("slow down")),
        StreamEnd(StopReason.END_TURN),
    ]
    payloads = _encode(events)
    _accumulate(payloads)
    types = [p["type"] for p in payloads]
    assert types[-1] == "response.failed" and "response.completed" not in types
    failed = payloads[-1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": "rate_limit_exceeded", "message": "slow down"}


def test_error_before_start_still_makes_a_valid_stream() -> None:
    payloads = _encode([StreamError(UpstreamError("boom"))])
    _accumulate(payloads)
    assert [p["type"] for p in payloads] == [
        "response.created",
        "response.in_progress",
        "response.failed",
    ]
    assert payloads[-1]["response"]["error"]["code"] == "server_error"


def test_reasoning_without_text_has_empty_summary_and_no_summary_events() -> None:
    parts = (ReasoningPart(""), TextPart("ok"))
    payloads = _check_completed(Response("r7", "m", parts, created=1))
    assert not any(p["type"].startswith("response.reasoning_summary") for p in payloads)
    assert payloads[-1]["response"]["output"][0]["summary"] == []


def test_ping_is_a_comment() -> None:
    assert ResponsesStreamEncoder(REQUEST).ping().startswith(b":")


# -- decoder ------------------------------------------------------------------------


def _fixture() -> bytes:
    return (FIXTURES / "openai_responses_tools.sse").read_bytes()


def _decode(chunks: list[bytes]) -> list[StreamEvent]:
    sse = SSEDecoder()
    decoder = ResponsesStreamDecoder(REQUEST)
    out: list[StreamEvent] = []
    for chunk in chunks:
        for event in sse.decode(chunk):
            out.extend(decoder.feed(event))
    for event in sse.flush():
        out.extend(decoder.feed(event))
    out.extend(decoder.flush())
    return out


def _final_object() -> dict[str, Any]:
    sse = SSEDecoder()
    events = [*sse.decode(_fixture()), *sse.flush()]
    return json.loads(events[-1].data)["response"]  # type: ignore[no-any-return]


def test_fixture_decodes_to_the_final_object() -> None:
    events = _decode([_fixture()])
    assert isinstance(events[0], StreamStart) and isinstance(events[-1], StreamEnd)
    folded = fold(events)
    assert folded == parse_response(_final_object())
    assert folded.stop_reason == StopReason.TOOL_USE
    assert [type(p).__name__ for p in folded.parts] == [
        "ReasoningPart",
        "TextPart",
        "ToolCallPart",
        "ToolCallPart",
    ]
    assert folded.parts[0].signature == "gAAAAB-encrypted"  # type: ignore[union-attr]
    assert folded.usage.cache_read_tokens == 64


def test_fixture_split_at_every_byte_decodes_the_same() -> None:
    """Cut in two at every byte of the first events and around every line break (where
    a decoder keeps state: a field, a line, an event), at a stride elsewhere."""
    data = _fixture()
    whole = _decode([data])
    breaks = [i for i in range(len(data)) if data[i] == ord("\n")]
    cuts = set(range(1, 2048)) | set(range(1, len(data), 5))
    cuts |= {i + k for i in breaks for k in range(-4, 5)}
    for cut in sorted(c for c in cuts if 0 < c < len(data)):
        assert _decode([data[:cut], data[cut:]]) == whole


class _Dialect:
    """Just enough of a dialect for :class:`EventDecoder`."""

    def stream_decoder(self, request: Request) -> ResponsesStreamDecoder:
        return ResponsesStreamDecoder(request)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=11_000), max_size=12))
def test_fixture_split_anywhere_through_event_decoder(cuts: list[int]) -> None:
    data = _fixture()
    bounds = [0, *sorted(c % len(data) for c in cuts), len(data)]
    decoder = EventDecoder(_Dialect(), REQUEST)  # type: ignore[arg-type]
    out: list[StreamEvent] = []
    for a, b in itertools.pairwise(bounds):
        out.extend(decoder.decode(data[a:b]))
    out.extend(decoder.flush())
    assert out == _decode([data])
    assert decoder.ended


def test_fixture_round_trips_through_our_encoder() -> None:
    events = _decode([_fixture()])
    payloads = _encode(events, INCLUDING)
    final, _ = _accumulate(payloads)
    assert final is not None
    encoder = ResponsesStreamEncoder(INCLUDING)
    again = fold(_decode([b"".join(encoder.encode(e) for e in events)]))
    assert again == replace(fold(events), model=REQUEST.model)  # the client's name echoed
    # without `include`, reasoning items carry no encrypted_content (as the API)
    plain = [p for p in _encode(events) if p["type"] == "response.output_item.done"]
    assert plain and all("encrypted_content" not in p["item"] for p in plain)
    assert any("encrypted_content" in p["item"] for p in payloads if "item" in p)


def _feed(*payloads: dict[str, Any]) -> list[StreamEvent]:
    decoder = ResponsesStreamDecoder(REQUEST)
    out: list[StreamEvent] = []
    for p in payloads:
        out.extend(decoder.feed(SSEEvent(p.get("type", "message"), json.dumps(p))))
    out.extend(decoder.flush())
    return out


_CREATED = {"type": "response.created", "response": {"id": "resp_x", "model": "m", "created_at": 9}}


def test_failed_and_error_events_are_stream_errors_and_last() -> None:
    failed = {
        "type": "response.failed",
        "response": {"error": {"code": "rate_limit_exceeded", "message": "slow"}},
    }
    out = _feed(_CREATED, failed, {"type": "response.completed", "response": {}})
    assert isinstance(out[-1], StreamError) and out[-1].error.message == "slow"
    assert isinstance(out[-1].error, RateLimitError)
    out = _feed(_CREATED, {"type": "error", "code": "server_error", "message": "bad"})
    assert isinstance(out[-1], StreamError) and out[-1].error.message == "bad"


def test_incomplete_is_max_tokens_and_cut_stream_is_an_error() -> None:
    incomplete = {
        "type": "response.incomplete",
        "response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}},
    }
    out = _feed(_CREATED, incomplete)
    assert out[-1] == StreamEnd(StopReason.MAX_TOKENS)
    out = _feed(_CREATED)
    assert isinstance(out[-1], StreamError)
    assert _feed() == []


def test_not_json_is_an_error_and_unknown_events_are_ignored() -> None:
    decoder = ResponsesStreamDecoder(REQUEST)
    assert decoder.feed(SSEEvent("response.queued", json.dumps({"type": "response.queued"}))) == []
    out = decoder.feed(SSEEvent("message", "{not json"))
    assert isinstance(out[-1], StreamError)
    assert decoder.feed(SSEEvent("response.created", json.dumps(_CREATED))) == []


def test_done_only_items_are_filled_from_the_finished_item() -> None:
    item = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"}
    msg = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
           "content": [{"type": "output_text", "text": "hi", "annotations": []}]}  # fmt: skip
    out = _feed(
        _CREATED,
        {"type": "response.output_item.done", "output_index": 0, "item": msg},
        {"type": "response.output_item.done", "output_index": 1, "item": item},
        {"type": "response.completed", "response": {"status": "completed", "output": [msg, item]}},
    )
    folded = fold(out)
    assert folded == parse_response(
        {"id": "resp_x", "model": "m", "created_at": 9, "output": [msg, item]}
    )
    assert folded.text == "hi" and folded.tool_calls[0].arguments == "{}"


@pytest.mark.parametrize("kind", ["web_search_call"])
def test_hosted_tool_items_are_unknown_parts(kind: str) -> None:
    item = {"type": kind, "id": "ws_1", "status": "completed"}
    out = _feed(
        _CREATED,
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": {"status": "completed"}},
    )
    assert fold(out).parts == parse_response({"output": [item]}).parts
