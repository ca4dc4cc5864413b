"""Custom (free-form) tools on the client: both OpenAI forms and a marked function become
custom tools, each dialect gets them as the gateway sends them, a custom call comes back
with ``kind="custom"`` (stream and not), and ``run_tools`` hands its raw input to the tool
and answers with a custom tool output."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from interlingua.client import AsyncClient, ToolArgumentsError, ToolCall, custom_tool, tool_spec
from interlingua.client._build import to_tool_choice, to_tools
from interlingua.core import (
    Message,
    Request,
    Response,
    StopReason,
    TextPart,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
    ToolSpec,
    Usage,
)
from interlingua.dialects import get_dialect

from .conftest import FakeServer, Gateway, Reply, Stream, openai_body

GRAMMAR = {"type": "grammar", "syntax": "lark", "definition": "start: /[a-z]+/"}
PATCH = "*** Begin Patch\n*** Add File: a.py\n+print('hi')\n*** End Patch"


@pytest.fixture
async def client(server: FakeServer) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(server.url + "/v1", model="m") as c:
        yield c


def custom_call(call_id: str, name: str, text: str) -> dict[str, Any]:
    """One OpenAI Chat custom tool call."""
    return {"id": call_id, "type": "custom", "custom": {"name": name, "input": text}}


# --- the forms a custom tool is written in -----------------------------------------------


def test_both_openai_forms_become_custom_specs() -> None:
    chat_form = {
        "type": "custom",
        "custom": {
            "name": "apply_patch",
            "description": "Apply a patch.",
            "format": {"type": "grammar", "grammar": {"syntax": "lark", "definition": "start: /[a-z]+/"}},
        },
    }  # fmt: skip
    responses_form = {"type": "custom", "name": "shell", "format": GRAMMAR}
    patch, shell = to_tools([chat_form, responses_form])
    assert patch == ToolSpec("apply_patch", "Apply a patch.", kind="custom", format=GRAMMAR)
    assert shell == ToolSpec("shell", None, kind="custom", format=GRAMMAR)  # one neutral grammar
    bare = to_tools([{"type": "custom", "name": "note"}])[0]
    assert (bare.kind, bare.format, bare.parameters) == ("custom", None, None)


def test_a_custom_dict_without_a_name_is_refused() -> None:
    with pytest.raises(TypeError, match=r"tools\[0\]: a custom tool needs a 'name'"):
        to_tools([{"type": "custom", "custom": {"description": "x"}}])


def test_a_marked_function_is_a_custom_tool() -> None:
    @custom_tool(format=GRAMMAR)
    def apply_patch(patch: str) -> str:
        """Apply a patch in the V4A format.

        Not sent."""
        return "done"

    @custom_tool
    async def note(text: str) -> None:
        """Write a note."""

    assert tool_spec("apply_patch", apply_patch) == ToolSpec(
        "apply_patch", "Apply a patch in the V4A format.", kind="custom", format=GRAMMAR
    )
    assert to_tools([note])[0] == ToolSpec("note", "Write a note.", kind="custom")
    assert apply_patch("x") == "done"  # still the function


def test_custom_tool_choice_forms() -> None:
    assert to_tool_choice({"type": "custom", "custom": {"name": "p"}}) == ToolChoice("tool", "p")
    assert to_tool_choice({"type": "custom", "name": "p"}) == ToolChoice("tool", "p")


@pytest.mark.parametrize("dialect", ["openai", "responses", "anthropic"])
async def test_each_dialect_gets_custom_tools_as_the_gateway_sends_them(dialect: str) -> None:
    tools = [{"type": "custom", "name": "apply_patch", "description": "Patch.", "format": GRAMMAR}]
    async with AsyncClient("http://127.0.0.1:9/v1", dialect=dialect, model="m") as c:
        request = await c.prepare("go", tools=tools, tool_choice="apply_patch")
        body = c.render(request)
    expected = get_dialect(dialect).render_request(
        Request(
            "m",
            (Message("user", (TextPart("go"),)),),
            tools=(ToolSpec("apply_patch", "Patch.", kind="custom", format=GRAMMAR),),
            tool_choice=ToolChoice("tool", "apply_patch"),
        )
    )
    assert body["tools"] == expected["tools"]
    assert body["tool_choice"] == expected["tool_choice"]
    if dialect == "openai":
        assert body["tools"][0]["type"] == "custom"
        assert body["tools"][0]["custom"]["format"]["grammar"]["syntax"] == "lark"
        assert body["tool_choice"] == {"type": "custom", "custom": {"name": "apply_patch"}}
    elif dialect == "responses":
        assert body["tools"][0] == {"type": "custom", "name": "apply_patch", **_desc(GRAMMAR)}
    else:  # Anthropic has no custom tools: a function of one string, as the gateway does
        assert body["tools"][0]["input_schema"]["required"] == ["input"]


def _desc(fmt: dict[str, Any]) -> dict[str, Any]:
    return {"description": "Patch.", "format": fmt}


# --- calls coming back ---------------------------------------------------------------------


def test_tool_call_kind_and_raw_input() -> None:
    call = ToolCall.from_part(ToolCallPart("c1", "apply_patch", PATCH, kind="custom"))
    assert (call.kind, call.input, call.raw_arguments) == ("custom", PATCH, PATCH)
    with pytest.raises(ToolArgumentsError, match=r"custom tool.*raw text.*input"):
        _ = call.arguments
    plain = ToolCall.from_part(ToolCallPart("c2", "f", '{"a": 1}'))
    assert (plain.kind, plain.arguments, plain.input) == ("function", {"a": 1}, '{"a": 1}')


async def test_a_custom_call_comes_back_custom(client: AsyncClient, server: FakeServer) -> None:
    body = openai_body(None, tool_calls=[custom_call("c1", "apply_patch", PATCH)])
    server.push(Reply(body))
    result = await client.chat("go", tools=[{"type": "custom", "name": "apply_patch"}])
    (call,) = result.tool_calls
    assert (call.id, call.name, call.kind, call.input) == ("c1", "apply_patch", "custom", PATCH)


async def test_a_streamed_custom_call_comes_back_custom(
    client: AsyncClient, server: FakeServer
) -> None:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        payload = {"id": "s", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
        return b"data: " + orjson.dumps(payload) + b"\n\n"

    head = {"index": 0, "id": "c1", "type": "custom", "custom": {"name": "apply_patch"}}
    server.push(
        Stream(
            [
                chunk({"role": "assistant", "tool_calls": [head]}),
                chunk({"tool_calls": [{"index": 0, "custom": {"input": PATCH[:10]}}]}),
                chunk({"tool_calls": [{"index": 0, "custom": {"input": PATCH[10:]}}]}),
                chunk({}, "tool_calls"),
                b"data: [DONE]\n\n",
            ]
        )
    )
    async with client.stream("go", tools=[{"type": "custom", "name": "apply_patch"}]) as s:
        result = await s.final()
    (call,) = result.tool_calls
    assert (call.kind, call.input) == ("custom", PATCH)


# --- run_tools -----------------------------------------------------------------------------


async def test_run_tools_passes_the_raw_input(client: AsyncClient, server: FakeServer) -> None:
    got: list[str] = []

    @custom_tool
    def apply_patch(patch: str) -> str:
        """Apply a patch."""
        got.append(patch)
        return "Success. Updated a.py"

    server.push(
        Reply(openai_body(None, tool_calls=[custom_call("c1", "apply_patch", PATCH)])),
        Reply(openai_body("patched")),
    )
    result = await client.run_tools("patch it", {"apply_patch": apply_patch})
    assert result.text == "patched"
    assert got == [PATCH]
    first, second = server.bodies
    assert first["tools"] == [
        {"type": "custom", "custom": {"name": "apply_patch", "description": "Apply a patch."}}
    ]
    assert second["messages"][1]["tool_calls"] == [custom_call("c1", "apply_patch", PATCH)]
    assert second["messages"][2] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": "Success. Updated a.py",
    }


async def test_run_tools_answers_a_custom_call_with_a_custom_output(server: FakeServer) -> None:
    codec = get_dialect("responses")
    asked = Request("m", (), tools=(ToolSpec("apply_patch", kind="custom"),))
    calls = Response("r1", "m", (ToolCallPart("c1", "apply_patch", PATCH, kind="custom"),))
    done = Response("r2", "m", (TextPart("patched"),))
    server.push(
        Reply(codec.render_response(calls, asked)), Reply(codec.render_response(done, asked))
    )

    async def apply_patch(patch: str) -> str:
        return f"applied {len(patch)} chars"

    async with AsyncClient(server.url + "/v1", dialect="responses", model="m") as c:
        result = await c.run_tools(
            "patch it",
            {"apply_patch": apply_patch},
            specs=[{"type": "custom", "name": "apply_patch"}],
        )
    assert result.text == "patched"
    first, second = server.bodies
    assert first["tools"] == [{"type": "custom", "name": "apply_patch"}]
    kinds = [item.get("type") for item in second["input"]]
    assert kinds == ["message", "custom_tool_call", "custom_tool_call_output"]
    output = second["input"][2]
    assert output == {
        "type": "custom_tool_call_output",
        "call_id": "c1",
        "output": f"applied {len(PATCH)} chars",
    }


async def test_history_dicts_may_hold_custom_calls(client: AsyncClient) -> None:
    request = await client.prepare(
        [
            {"role": "user", "content": "patch it"},
            {"role": "assistant", "content": None, "tool_calls": [custom_call("c1", "p", PATCH)]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ]
    )
    (part,) = request.messages[1].parts
    assert part == ToolCallPart("c1", "p", PATCH, kind="custom")
    assert isinstance(request.messages[2].parts[0], ToolResultPart)


# --- through the gateway, every dialect, stream and not ---------------------------------


def _client(gateway: Gateway, dialect: str) -> AsyncClient:
    base = gateway.url if dialect == "anthropic" else gateway.url + "/v1"
    return AsyncClient(base, "sk-test", dialect=dialect, model="fake")


def _patch_call(request: Request) -> Response:
    """The upstream's answer: a custom call, or, when the client's dialect (Anthropic) has
    no custom tools and the gateway saw the function of one string, a call of that."""
    (spec,) = request.tools
    if spec.kind == "custom":
        assert (spec.name, spec.format) == ("apply_patch", GRAMMAR)
        call = ToolCallPart("call_1", "apply_patch", PATCH, kind="custom")
    else:
        assert spec.parameters is not None and spec.parameters["required"] == ["input"]
        call = ToolCallPart("call_1", "apply_patch", orjson.dumps({"input": PATCH}).decode())
    return Response("r1", "fake", (call,), StopReason.TOOL_USE, usage=Usage(10, 5))


def _sent(part: ToolCallPart) -> str:
    """The raw input a call in the gateway's request carries (unwrapped when Anthropic's)."""
    return PATCH if part.kind == "custom" else orjson.loads(part.arguments)["input"]


@pytest.mark.parametrize("dialect", ["openai", "anthropic", "responses"])
@pytest.mark.parametrize("streamed", [False, True], ids=["body", "stream"])
async def test_custom_calls_through_the_gateway(
    gateway: Gateway, dialect: str, streamed: bool
) -> None:
    gateway.fake.enqueue(_patch_call)

    def apply_patch(patch: str) -> str:
        return ""

    tools = [custom_tool(apply_patch, format=GRAMMAR)]
    async with _client(gateway, dialect) as c:
        if streamed:
            async with c.stream("patch it", tools=tools) as s:
                result = await s.final()
        else:
            result = await c.chat("patch it", tools=tools)
    (call,) = result.tool_calls
    assert (call.name, call.kind, call.input) == ("apply_patch", "custom", PATCH)


@pytest.mark.parametrize("dialect", ["openai", "anthropic", "responses"])
async def test_run_tools_with_a_custom_tool_through_the_gateway(
    gateway: Gateway, dialect: str
) -> None:
    got: list[str] = []

    @custom_tool(format=GRAMMAR)
    def apply_patch(patch: str) -> str:
        """Apply a patch."""
        got.append(patch)
        return "Success."

    gateway.fake.enqueue(_patch_call)
    gateway.fake.enqueue(Response("r2", "fake", (TextPart("patched"),), usage=Usage(20, 3)))
    async with _client(gateway, dialect) as c:
        result = await c.run_tools("patch it", {"apply_patch": apply_patch})
    assert result.text == "patched"
    assert got == [PATCH]
    last = gateway.fake.requests[-1]
    calls = [p for m in last.messages for p in m.parts if isinstance(p, ToolCallPart)]
    assert [_sent(p) for p in calls] == [PATCH]
    results = [p for m in last.messages for p in m.parts if isinstance(p, ToolResultPart)]
    assert [(r.tool_call_id, r.text, r.is_error) for r in results] == [
        (calls[0].id, "Success.", False)
    ]
