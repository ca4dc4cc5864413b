"""What a continued stream promises beyond its text, through a live gateway over fakes.

A tool call cut in half never reaches the client; a break inside reasoning closes it; the
usage the client sees is the sum of the attempts, and the usage rows are one per
attempt; a candidate that refuses a prefill is skipped (and not asked again); the number
of continuations is bounded; a client that hangs up stops the continuation.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any

import anthropic
import httpx
import openai
import pytest

from interlingua.config import parse_config
from interlingua.core import (
    ArgumentsDelta,
    BlockStart,
    BlockStop,
    ReasoningDelta,
    ReasoningPart,
    Request,
    StopReason,
    StreamEnd,
    StreamError,
    StreamStart,
    TextDelta,
    TextPart,
    ToolCallPart,
    Usage,
)
from interlingua.errors import InvalidRequestError, UpstreamError
from interlingua.server.app import create_app
from interlingua.upstreams.fake import FakeUpstream
from interlingua.usage.record import CONTINUED, Record

from ...conformance.cases import reply
from ...live_server import live_server

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
CUT = UpstreamError("connection reset mid-answer", status=502)


class Rows:
    """A record sink keeping every finished row."""

    def __init__(self) -> None:
        self.rows: list[Record] = []

    def records(self, rows: Sequence[Record]) -> None:
        self.rows.extend(rows)


@contextlib.contextmanager
def gateway(
    models: list[dict[str, Any]],
    wire: str,
    retries: dict[str, int] | None = None,
    delay: dict[str, float] | None = None,
) -> Iterator[tuple[str, dict[str, FakeUpstream], Rows]]:
    """A live gateway over one fake per upstream, its rows kept."""
    names = sorted({m["upstream"] for m in models})
    upstreams = {n: {"kind": "fake", "retries": {"max": (retries or {}).get(n, 0)}} for n in names}
    raw = {"upstreams": upstreams, "models": models, "usage": False}
    fakes = {
        n: FakeUpstream(n, wire=wire, chunk_size=2, delay=(delay or {}).get(n, 0.0)) for n in names
    }
    rows = Rows()
    app = create_app(parse_config(raw), upstreams=fakes, record_sinks=[rows])
    with live_server(app) as url:
        yield url, fakes, rows


def _main(*fallbacks: str, **extra: Any) -> list[dict[str, Any]]:
    main = {"name": "main", "upstream": "a", "fallbacks": list(fallbacks)}
    return [{**main, "on_stream_break": "continue", **extra}] + [
        {"name": name, "upstream": name} for name in fallbacks
    ]


def _start(input_tokens: int = 7) -> StreamStart:
    return StreamStart("msg_first", "m", 1_700_000_000, Usage(input_tokens=input_tokens))


def _openai(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="sk", max_retries=0, timeout=20)


def _chat_stream(url: str, **kw: Any) -> tuple[str, dict[int, dict[str, str]], Any]:
    """A Chat stream through the openai SDK: its text, its tool calls by index (name,
    arguments) and its usage."""
    text, calls, usage = "", {}, None
    with _openai(url) as client:
        stream = client.chat.completions.create(
            model="main",
            messages=[{"role": "user", "content": "weather?"}],
            stream=True,
            stream_options={"include_usage": True},
            **kw,
        )
        for chunk in stream:
            usage = chunk.usage or usage
            for choice in chunk.choices:
                text += choice.delta.content or ""
                for call in choice.delta.tool_calls or []:
                    got = calls.setdefault(call.index, {"name": "", "arguments": ""})
                    if call.function is not None:
                        got["name"] += call.function.name or ""
                        got["arguments"] += call.function.arguments or ""
    return text, calls, usage


def test_a_tool_call_cut_in_half_never_reaches_the_client() -> None:
    first = [
        _start(),
        BlockStart(0, TextPart("")),
        TextDelta(0, "Let me check."),
        BlockStop(0),
        BlockStart(1, ToolCallPart(id="call_1", name="get_weather")),
        ArgumentsDelta(1, '{"ci'),
        StreamError(CUT),
    ]
    asked: list[Request] = []

    def rest(request: Request) -> Any:
        asked.append(request)
        call = ToolCallPart(id="call_2", name="get_weather", arguments='{"city": "Paris"}')
        return reply(call)

    with gateway(_main("b"), wire="anthropic") as (url, fakes, _):
        fakes["a"].enqueue(first)
        fakes["b"].enqueue(rest)
        text, calls, _ = _chat_stream(url, tools=TOOLS)
    assert text == "Let me check."
    assert list(calls.values()) == [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]
    said = asked[0].messages[-1]
    assert said.role == "assistant"
    assert [type(p) for p in said.parts] == [TextPart]  # the half call is not in the prefix


def test_a_whole_tool_call_goes_out_whole_on_a_healthy_stream() -> None:
    events = [
        _start(),
        BlockStart(0, ToolCallPart(id="call_1", name="get_weather")),
        ArgumentsDelta(0, '{"city": '),
        ArgumentsDelta(0, '"Paris"}'),
        BlockStop(0),
        StreamEnd(StopReason.TOOL_USE, usage=Usage(input_tokens=7, output_tokens=5)),
    ]
    with gateway(_main("b"), wire="anthropic") as (url, fakes, _):
        fakes["a"].enqueue(events)
        _, calls, _ = _chat_stream(url, tools=TOOLS)
        assert len(fakes["b"].requests) == 0
    assert list(calls.values()) == [{"name": "get_weather", "arguments": '{"city": "Paris"}'}]


def test_a_break_inside_reasoning_closes_it_and_the_answer_follows() -> None:
    first = [
        _start(),
        BlockStart(0, ReasoningPart("")),
        ReasoningDelta(0, "The user wants"),
        StreamError(CUT),
    ]
    asked: list[Request] = []

    def rest(request: Request) -> Any:
        asked.append(request)
        return reply("It is sunny.")

    with gateway(_main("b"), wire="openai") as (url, fakes, _):
        fakes["a"].enqueue(first)
        fakes["b"].enqueue(rest)
        client = anthropic.Anthropic(base_url=url, api_key="sk", max_retries=0)
        with (
            client,
            client.messages.stream(
                model="main", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
            ) as stream,
        ):
            message = stream.get_final_message()
    assert [block.type for block in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "The user wants"  # type: ignore[union-attr]
    assert message.content[1].text == "It is sunny."  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    assert asked[0].messages[-1].role == "user"  # nothing to prefill: asked afresh


def test_usage_is_summed_for_the_client_and_each_attempt_has_its_row() -> None:
    first = [_start(input_tokens=30), BlockStart(0, TextPart("")), TextDelta(0, "x" * 40),
             StreamError(CUT)]  # fmt: skip
    with gateway(_main("b"), wire="anthropic") as (url, fakes, rows):
        fakes["a"].enqueue(first)
        fakes["b"].enqueue(reply("the rest", usage=Usage(input_tokens=45, output_tokens=3)))
        text, _, usage = _chat_stream(url)
        assert text == "x" * 40 + "the rest"
        assert (usage.prompt_tokens, usage.completion_tokens) == (30 + 45, 10 + 3)
        deadline = time.monotonic() + 5
        while len(rows.rows) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        metrics = httpx.get(url + "/metrics").text
    broken, finished = sorted(rows.rows, key=lambda row: row.error != CONTINUED)
    assert (broken.upstream, broken.error, broken.input_tokens, broken.output_tokens) == (
        "a", CONTINUED, 30, 10,
    )  # fmt: skip
    assert (finished.upstream, finished.error, finished.input_tokens, finished.output_tokens) == (
        "b", None, 45, 3,
    )  # fmt: skip
    assert finished.status == 200 and broken.request_id == finished.request_id
    assert (
        'interlingua_stream_continuations_total{fault="upstream_error",model="main"} 1.0' in metrics
    )


def test_a_candidate_that_refuses_a_prefill_is_skipped_and_remembered() -> None:
    refusal = InvalidRequestError(
        "This model does not support assistant message prefill. The conversation must "
        "end with a user message."
    )
    with gateway(_main("b", "c"), wire="anthropic") as (url, fakes, _):
        for _ in range(2):
            fakes["a"].enqueue([_start(), BlockStart(0, TextPart("")), TextDelta(0, "Hel"),
                                StreamError(CUT)])  # fmt: skip
        fakes["b"].enqueue(refusal)
        fakes["c"].enqueue(reply("lo."))
        fakes["c"].enqueue(reply("lo!"))
        assert _chat_stream(url)[0] == "Hello."
        assert _chat_stream(url)[0] == "Hello!"
        assert (len(fakes["a"].requests), len(fakes["b"].requests), len(fakes["c"].requests)) == (
            2, 1, 2,
        )  # fmt: skip


def test_continuations_are_bounded_and_the_original_fault_ends_the_stream() -> None:
    # a always breaks after some text; with retries.max 2 and no fallback, a is asked to
    # continue twice, then the client gets the first fault.
    def breaking(request: Request) -> Any:
        return [_start(), BlockStart(0, TextPart("")), TextDelta(0, "more "),
                StreamError(UpstreamError(f"cut #{len(fakes['a'].requests)}", status=502))]  # fmt: skip

    models = [{"name": "main", "upstream": "a", "on_stream_break": "continue"}]
    with gateway(models, wire="anthropic", retries={"a": 2}) as (url, fakes, _):
        for _ in range(3):
            fakes["a"].enqueue(breaking)
        with pytest.raises(openai.APIError) as raised:
            _chat_stream(url)
        assert len(fakes["a"].requests) == 3
    assert "cut #1" in str(raised.value)


def test_a_client_that_hangs_up_stops_the_continuation() -> None:
    first = [_start(), BlockStart(0, TextPart("")), TextDelta(0, "Hel"), StreamError(CUT)]
    with gateway(_main("b"), wire="anthropic", delay={"b": 3.0}) as (url, fakes, _):
        fakes["a"].enqueue(first)
        fakes["b"].enqueue(reply("lo"))
        body = {"model": "main", "stream": True, "messages": [{"role": "user", "content": "x"}]}
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=10) as answer:
            for line in answer.iter_lines():
                if "Hel" in line:
                    break
        deadline = time.monotonic() + 2.0  # well before b's 3 s delay is over
        while fakes["b"].in_flight and time.monotonic() < deadline:
            time.sleep(0.02)
        assert fakes["b"].in_flight == 0
        assert len(fakes["b"].requests) <= 1
