"""A tool call no client could use (no name, arguments neither JSON text nor an object, a
call that is not an object) in an upstream's answer is an upstream fault that names the
call: a 502 ``UpstreamError`` with code ``malformed_tool_call``, raised by the body
decoders and ended with by the stream decoders of every dialect, never accepted with an
empty name nor dropped. The well-formed neighbours of each case still read as before."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from interlingua.core import Request, StreamError, StreamEvent, TextDelta, ToolCallPart, fold
from interlingua.dialects import get_dialect
from interlingua.errors import InterlinguaError, UpstreamError
from interlingua.sse import SSEEvent

REQUEST = Request("m", ())
CODE = "malformed_tool_call"


def malformed(error: BaseException, *names: str) -> None:
    """``error`` is the upstream fault for a malformed call, naming each of ``names``."""
    assert isinstance(error, UpstreamError), error
    assert error.status == 502 and error.code == CODE
    assert "malformed tool call" in error.message
    for name in names:
        assert name in error.message, (name, error.message)


def feed(dialect: str, events: list[tuple[str | None, Any]]) -> list[StreamEvent]:
    """Feed ``(event name, JSON payload)`` pairs to ``dialect``'s stream decoder."""
    decoder = get_dialect(dialect).stream_decoder(REQUEST)
    out: list[StreamEvent] = []
    for name, payload in events:
        data = payload if isinstance(payload, str) else orjson.dumps(payload).decode()
        out += decoder.feed(SSEEvent(data=data, event=name or "message"))
    return out + decoder.flush()


def failed(events: list[StreamEvent]) -> InterlinguaError:
    """The error a stream ended with (it must end with one, and only one)."""
    errors = [e for e in events if isinstance(e, StreamError)]
    assert len(errors) == 1 and events[-1] is errors[0], events
    return errors[0].error


# -- OpenAI Chat -----------------------------------------------------------------------


def chat_body(calls: Any, legacy: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": calls}
    if legacy is not None:
        message = {"role": "assistant", "content": None, "function_call": legacy}
    return {
        "id": "chatcmpl-1",
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


GOOD = {"id": "call_ok", "type": "function", "function": {"name": "f", "arguments": "{}"}}
CHAT_CASES = {
    "no name": ({"id": "call_9", "type": "function", "function": {"arguments": "{}"}}, "name"),
    "empty name": (
        {"id": "call_9", "type": "function", "function": {"name": "", "arguments": "{}"}},
        "name",
    ),
    "name not a string": (
        {"id": "call_9", "type": "function", "function": {"name": 7, "arguments": "{}"}},
        "name",
    ),
    "number arguments": (
        {"id": "call_9", "type": "function", "function": {"name": "f", "arguments": 42}},
        "arguments",
    ),
    "list arguments": (
        {"id": "call_9", "type": "function", "function": {"name": "f", "arguments": [1]}},
        "arguments",
    ),
    "function not an object": ({"id": "call_9", "type": "function", "function": "f"}, "function"),
    "custom input not a string": (
        {"id": "call_9", "type": "custom", "custom": {"name": "g", "input": {"a": 1}}},
        "input",
    ),
}


@pytest.mark.parametrize("case", sorted(CHAT_CASES))
def test_chat_body(case: str) -> None:
    call, problem = CHAT_CASES[case]
    with pytest.raises(UpstreamError) as caught:
        get_dialect("openai").parse_response(chat_body([GOOD, call]))
    malformed(caught.value, "tool_calls[1]", "call_9", problem)


def test_chat_body_call_not_an_object() -> None:
    with pytest.raises(UpstreamError) as caught:
        get_dialect("openai").parse_response(chat_body([GOOD, "call me"]))
    malformed(caught.value, "tool_calls[1]", "not an object")


def test_chat_body_legacy_function_call_without_a_name() -> None:
    with pytest.raises(UpstreamError) as caught:
        get_dialect("openai").parse_response(chat_body(None, legacy={"arguments": "{}"}))
    malformed(caught.value, "function_call", "name")


def test_chat_body_well_formed_calls_still_read() -> None:
    calls = [
        GOOD,
        {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": {"a": 1}}},
        {"id": "call_3", "type": "function", "function": {"name": "h"}},  # no arguments
    ]
    parts = get_dialect("openai").parse_response(chat_body(calls)).parts
    assert [(p.name, p.arguments) for p in parts if isinstance(p, ToolCallPart)] == [
        ("f", "{}"),
        ("g", '{"a":1}'),
        ("h", ""),
    ]


def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, dict[str, Any]]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return None, {"id": "c1", "model": "m", "choices": [choice]}


def chat_stream(*deltas: dict[str, Any]) -> list[StreamEvent]:
    head = [chunk({"role": "assistant", "content": "Let me look."})]
    return feed("openai", [*head, *(chunk(d) for d in deltas), chunk({}, "tool_calls")])


@pytest.mark.parametrize(
    ("call", "names"),
    [
        ({"index": 0, "id": "call_7", "function": {"arguments": ""}}, ("call_7", "name")),
        ({"index": 0, "id": "call_7", "function": {"name": "", "arguments": ""}}, ("name",)),
        ({"index": 0, "id": "call_7", "function": "f"}, ("call_7", "function")),
        ("a string", ("tool_calls[0]", "not an object")),
    ],
)
def test_chat_stream_opening_delta(call: Any, names: tuple[str, ...]) -> None:
    events = chat_stream({"tool_calls": [call]})
    malformed(failed(events), *names)
    # what came before the fault was still sent, in order
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Let me look."]


def test_chat_stream_arguments_that_are_not_text() -> None:
    opening = {"index": 0, "id": "call_7", "function": {"name": "f", "arguments": ""}}
    events = chat_stream(
        {"tool_calls": [opening]}, {"tool_calls": [{"index": 0, "function": {"arguments": 5}}]}
    )
    malformed(failed(events), "call_7", "arguments")


def test_chat_stream_well_formed_calls_still_read() -> None:
    opening = {"index": 0, "id": "call_7", "function": {"name": "f", "arguments": ""}}
    whole = {"index": 1, "id": "call_8", "function": {"name": "g", "arguments": {"a": 1}}}
    pieces = {"index": 0, "function": {"arguments": '{"a": 1}'}}
    events = chat_stream({"tool_calls": [opening, whole]}, {"tool_calls": [pieces]})
    calls = [p for p in fold(events).parts if isinstance(p, ToolCallPart)]
    assert [(c.id, c.name, c.arguments) for c in calls] == [
        ("call_7", "f", '{"a": 1}'),
        ("call_8", "g", '{"a":1}'),
    ]


# -- Anthropic -------------------------------------------------------------------------


def message(*content: Any) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [{"type": "text", "text": "Let me look."}, *content],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


@pytest.mark.parametrize(
    ("block", "problem"),
    [
        ({"type": "tool_use", "id": "toolu_9", "input": {}}, "name"),
        ({"type": "tool_use", "id": "toolu_9", "name": "", "input": {}}, "name"),
        ({"type": "tool_use", "id": "toolu_9", "name": 3, "input": {}}, "name"),
        ({"type": "tool_use", "id": "toolu_9", "name": "f", "input": "ls"}, "input"),
    ],
)
def test_anthropic_body(block: dict[str, Any], problem: str) -> None:
    with pytest.raises(UpstreamError) as caught:
        get_dialect("anthropic").parse_response(message(block))
    malformed(caught.value, "content[1]", "toolu_9", problem)


def anthropic_stream(block: dict[str, Any], *deltas: Any) -> list[StreamEvent]:
    start = {"type": "message_start", "message": {"id": "msg_1", "model": "claude"}}
    text = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}
    said = {"type": "text_delta", "text": "Let me look."}
    piece = {"type": "content_block_delta", "index": 0, "delta": said}
    events: list[tuple[str | None, Any]] = [
        ("message_start", start),
        ("content_block_start", text),
        ("content_block_delta", piece),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 1, "content_block": block},
        ),
    ]
    for delta in deltas:
        payload = {"type": "content_block_delta", "index": 1, "delta": delta}
        events.append(("content_block_delta", payload))
    return feed("anthropic", events)


@pytest.mark.parametrize(
    ("block", "problem"),
    [
        ({"type": "tool_use", "id": "toolu_9", "input": {}}, "name"),
        ({"type": "tool_use", "id": "toolu_9", "name": "", "input": {}}, "name"),
        ({"type": "tool_use", "id": "toolu_9", "name": "f", "input": "ls"}, "input"),
    ],
)
def test_anthropic_stream_block_start(block: dict[str, Any], problem: str) -> None:
    events = anthropic_stream(block)
    malformed(failed(events), "content[1]", "toolu_9", problem)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Let me look."]


def test_anthropic_stream_json_that_is_not_text() -> None:
    block = {"type": "tool_use", "id": "toolu_9", "name": "f", "input": {}}
    events = anthropic_stream(block, {"type": "input_json_delta", "partial_json": {"a": 1}})
    malformed(failed(events), "content[1]", "toolu_9", "partial_json")


# -- Responses -------------------------------------------------------------------------


def response(*items: Any) -> dict[str, Any]:
    text = {"type": "output_text", "text": "Let me look."}
    said = {"type": "message", "id": "msg_1", "role": "assistant", "content": [text]}
    return {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "model": "m",
        "output": [said, *items],
        "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
    }


RESPONSES_CASES = [
    ({"type": "function_call", "id": "fc_1", "call_id": "call_9", "arguments": "{}"}, "name"),
    (
        {"type": "function_call", "call_id": "call_9", "name": "", "arguments": "{}"},
        "name",
    ),
    ({"type": "function_call", "call_id": "call_9", "name": "f", "arguments": 5}, "arguments"),
    ({"type": "custom_tool_call", "call_id": "call_9", "name": "g", "input": [1]}, "input"),
]


@pytest.mark.parametrize(("item", "problem"), RESPONSES_CASES)
def test_responses_body(item: dict[str, Any], problem: str) -> None:
    with pytest.raises(UpstreamError) as caught:
        get_dialect("responses").parse_response(response(item))
    malformed(caught.value, "output[1]", "call_9", problem)


def responses_stream(
    added: dict[str, Any], *deltas: Any, ending: tuple[tuple[str | None, Any], ...] = ()
) -> list[StreamEvent]:
    created = {"type": "response.created", "response": {"id": "resp_1", "model": "m"}}
    events: list[tuple[str | None, Any]] = [
        (None, created),
        (None, {"type": "response.output_item.added", "output_index": 1, "item": added}),
    ]
    for delta in deltas:
        payload = {"type": "response.function_call_arguments.delta", "output_index": 1}
        events.append((None, {**payload, "delta": delta}))
    return feed("responses", [*events, *ending])


@pytest.mark.parametrize(("item", "problem"), RESPONSES_CASES[:2])
def test_responses_stream_item_added(item: dict[str, Any], problem: str) -> None:
    malformed(failed(responses_stream(item)), "output[1]", "call_9", problem)


def test_responses_stream_arguments_that_are_not_text() -> None:
    item = {"type": "function_call", "call_id": "call_9", "name": "f", "arguments": ""}
    malformed(failed(responses_stream(item, 5)), "output[1]", "call_9", "arguments")


def test_responses_well_formed_calls_still_read() -> None:
    item = {"type": "function_call", "call_id": "call_9", "name": "f", "arguments": {"a": 1}}
    parts = get_dialect("responses").parse_response(response(item)).parts
    calls = [(p.name, p.arguments) for p in parts if isinstance(p, ToolCallPart)]
    assert calls == [("f", '{"a":1}')]
    item = {"type": "function_call", "call_id": "call_9", "name": "f", "arguments": ""}
    done = {**item, "arguments": '{"a": 1}'}
    ending: tuple[tuple[str | None, Any], ...] = (
        (None, {"type": "response.output_item.done", "output_index": 1, "item": done}),
        (None, {"type": "response.completed", "response": {"status": "completed"}}),
    )
    events = responses_stream(item, '{"a"', ": 1}", ending=ending)
    calls = [(p.name, p.arguments) for p in fold(events).parts if isinstance(p, ToolCallPart)]
    assert calls == [("f", '{"a": 1}')]
