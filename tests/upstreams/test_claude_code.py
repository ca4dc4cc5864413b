"""The Claude Code options, on the neutral path: a scripted upstream wrapped as the router
wraps it (``with_options``), stream and not; the stream folds to the non-stream answer."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from interlingua.config import ModelOptions
from interlingua.core import (
    ArgumentsDelta,
    Message,
    ReasoningPart,
    Request,
    Response,
    StreamEvent,
    StreamStart,
    TextPart,
    ToolCallPart,
    ToolSpec,
    Usage,
    fold,
)
from interlingua.core.tokens import estimate_request_tokens
from interlingua.upstreams.base import Upstream
from interlingua.upstreams.fake import FakeUpstream
from interlingua.upstreams.text_options import TextOptionsUpstream, with_options

SCHEMA: Any = {
    "type": "object",
    "properties": {
        "prompt": {"type": "string"},
        "subagent_type": {"type": "string"},
        "run_in_background": {"type": "boolean"},
    },
}
TOOLS = (
    ToolSpec("Agent", parameters=SCHEMA),
    ToolSpec("Task", parameters={"type": "object", "properties": {"prompt": {"type": "string"}}}),
    ToolSpec("Bash", parameters={"type": "object", "properties": {"run_in_background": {}}}),
)
REQUEST = Request(model="m", messages=(Message("user", (TextPart("do it " * 50),)),), tools=TOOLS)
BACKGROUND = ModelOptions(force_background_tasks_off=True)
FILL = ModelOptions(fill_empty_answer=True)
ESTIMATE = ModelOptions(estimate_input_tokens=True)
BG = "run_in_background"


def answer(*parts: Any, usage: Usage | None = None) -> Response:
    return Response(id="r1", model="m", parts=parts, usage=usage or Usage(0, 3))


def call(name: str, arguments: dict[str, Any], call_id: str = "c1") -> ToolCallPart:
    return ToolCallPart(call_id, name, orjson.dumps(arguments).decode())


async def both(
    options: ModelOptions, response: Response, wire: str | None = None
) -> tuple[Response, list[StreamEvent]]:
    """The wrapped upstream's answer to REQUEST, and its stream's events."""
    fake = FakeUpstream(wire=wire, chunk_size=3)
    fake.enqueue(response)
    fake.enqueue(response)
    upstream: Upstream = with_options(fake, options)
    assert isinstance(upstream, TextOptionsUpstream)
    whole = await upstream.complete(REQUEST)
    events = [event async for event in upstream.stream(REQUEST)]
    # streaming equals non-streaming (kinds and contents: an Anthropic wire's round trip
    # of a signature-less thinking block differs in its empty signature, not our concern)
    assert content(fold(events)) == content(whole)
    return whole, events


def content(response: Response) -> list[tuple[type, str]]:
    return [
        (type(p), getattr(p, "text", None) or getattr(p, "arguments", "")) for p in response.parts
    ]


def arguments(part: Any) -> dict[str, Any]:
    assert isinstance(part, ToolCallPart)
    value: dict[str, Any] = orjson.loads(part.arguments)
    return value


@pytest.mark.parametrize("wire", [None, "openai", "anthropic"])
async def test_background_agents_are_turned_off(wire: str | None) -> None:
    response = answer(
        TextPart("Starting."),
        call("Agent", {"prompt": "look", "run_in_background": True}, "c1"),
        call("Agent", {"prompt": "look again"}, "c2"),  # declared: set even when absent
        call("Task", {"prompt": "x", "run_in_background": True}, "c3"),  # set: turned off
        call("Task", {"prompt": "y"}, "c4"),  # not declared, not set: untouched
        call("Bash", {"command": "make", "run_in_background": True}, "c5"),  # not an agent
    )
    whole, events = await both(BACKGROUND, response, wire)
    parts = whole.parts
    assert arguments(parts[1]) == {"prompt": "look", "run_in_background": False}
    assert arguments(parts[2]) == {"prompt": "look again", "run_in_background": False}
    assert arguments(parts[3]) == {"prompt": "x", "run_in_background": False}
    assert parts[4] == response.parts[4]
    assert arguments(parts[5])["run_in_background"] is True
    # an agent call's arguments go out whole, once, just before its block stops
    agent_deltas = [e for e in events if isinstance(e, ArgumentsDelta) and e.index in (1, 2)]
    assert len(agent_deltas) == 2


@pytest.mark.parametrize("wire", [None, "openai", "anthropic"])
async def test_background_agents_are_turned_off_in_calls_written_as_text(
    wire: str | None,
) -> None:
    # With text_tool_calls the tools travel in the prompt, not in the request the upstream
    # gets; the quirks must still see them as the client offered them.
    options = ModelOptions(force_background_tasks_off=True, text_tool_calls=True)
    written = orjson.dumps({"name": "Agent", "arguments": {"prompt": "look", BG: True}})
    response = answer(TextPart(f"Starting.\n<tool_call>\n{written.decode()}\n</tool_call>"))
    whole, events = await both(options, response, wire)
    (use,) = [p for p in whole.parts if isinstance(p, ToolCallPart)]
    assert use.name == "Agent"
    assert arguments(use) == {"prompt": "look", BG: False}
    folded = [p for p in fold(events).parts if isinstance(p, ToolCallPart)]
    assert [arguments(p) for p in folded] == [{"prompt": "look", BG: False}]


async def test_background_untouched_without_the_option() -> None:
    response = answer(call("Agent", {"prompt": "look", "run_in_background": True}))
    fake = FakeUpstream()
    fake.enqueue(response)
    assert with_options(fake, ModelOptions()) is fake
    assert arguments((await fake.complete(REQUEST)).parts[0])["run_in_background"] is True


@pytest.mark.parametrize("wire", [None, "openai", "anthropic"])
@pytest.mark.parametrize(
    "parts",
    [(), (ReasoningPart("thinking only"),)],
    ids=["nothing", "reasoning-only"],
)
async def test_an_empty_answer_gets_an_empty_text_block(
    wire: str | None, parts: tuple[Any, ...]
) -> None:
    whole, _ = await both(FILL, answer(*parts), wire)
    assert whole.parts[-1] == TextPart("")
    assert len(whole.parts) == len(parts) + 1


async def test_an_answer_with_content_is_left_alone() -> None:
    response = answer(TextPart("hi"))
    whole, _ = await both(FILL, response)
    assert whole.parts == (TextPart("hi"),)
    whole, _ = await both(FILL, answer(call("Bash", {"command": "ls"})))
    assert len(whole.parts) == 1


async def test_first_event_carries_the_estimate() -> None:
    _, events = await both(ESTIMATE, answer(TextPart("hi")))
    start = events[0]
    assert isinstance(start, StreamStart) and start.usage is not None
    assert start.usage.input_tokens == estimate_request_tokens(REQUEST) > 0
    assert start.usage.estimated


async def test_the_upstreams_own_count_is_kept() -> None:
    _, events = await both(ESTIMATE, answer(TextPart("hi"), usage=Usage(1234, 3)))
    start = events[0]
    assert isinstance(start, StreamStart) and start.usage is not None
    assert start.usage.input_tokens == 1234 and not start.usage.estimated
