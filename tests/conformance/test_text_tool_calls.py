"""Tool calls an upstream writes as text reach every client as tool calls.

A model served without its tool parser (``text_tool_calls: true``) writes its calls into
the answer's text. Each form below, streamed and not, over every upstream dialect, must
reach every client dialect as real tool calls: Anthropic ``tool_use`` blocks (read by
the ``anthropic`` SDK itself too), Chat ``tool_calls`` and Responses ``function_call``
items, with arguments typed by the offered tool's schema and the text before the call
kept. The harness is the main suite's: the answer crosses the upstream dialect's codec
both ways, and what the client gets is validated with the SDKs' own types.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import pytest

from interlingua.config import parse_config
from interlingua.core import (
    Message,
    Request,
    Response,
    StopReason,
    TextPart,
    ToolChoice,
    ToolSpec,
    Usage,
    fold,
)
from interlingua.dialects import get_dialect
from interlingua.server import create_app
from interlingua.upstreams.fake import FakeUpstream
from tests.live_server import live_server

from .cases import Case
from .test_conformance import CLIENTS, DIALECTS, PATHS, _client_events, _client_response

CONFIG = parse_config(
    {
        "upstreams": {"fake": {"kind": "fake"}},
        "models": [
            {
                "name": "test-model",
                "upstream": "fake",
                "model": "upstream-model",
                "options": {"text_tool_calls": True},
            }
        ],
    }
)
BASH = ToolSpec(
    name="Bash",
    description="Run a shell command",
    parameters={
        "type": "object",
        "properties": {
            "command": {"type": "string"},
            "timeout": {"type": "number"},
            "run_in_background": {"type": "boolean"},
        },
        "required": ["command"],
    },
)
REQUEST = Request(
    model="test-model",
    messages=(Message("user", (TextPart("List the files"),)),),
    tools=(BASH,),
    tool_choice=ToolChoice("auto"),
    max_tokens=256,
)
#: the forms a model writes, and the text the client must get before the call
FORMS = {
    "qwen3_coder": (
        "I'll list them.\n<tool_call>\n<function=Bash>\n<parameter=command>\nls -la\n"
        "</parameter>\n<parameter=timeout>\n60000\n</parameter>\n"
        "<parameter=run_in_background>\nfalse\n</parameter>\n</function>\n</tool_call>",
        "I'll list them.\n",
    ),
    "bare": (
        "I'll list them.\n● <function=Bash><parameter=command>ls -la</parameter>"
        "<parameter=timeout>60000</parameter><parameter=run_in_background>false</parameter>",
        "I'll list them.\n",
    ),
}
ARGUMENTS = {"command": "ls -la", "timeout": 60000, "run_in_background": False}


def _answer(text: str) -> Response:
    return Response(
        id="resp_1",
        model="upstream-model",
        parts=(TextPart(text),),
        stop_reason=StopReason.END_TURN,
        usage=Usage(input_tokens=21, output_tokens=9),
        created=1_700_000_000,
    )


def _app(wire: str, text: str) -> Any:
    fake = FakeUpstream("fake", wire=wire, chunk_size=3)
    fake.enqueue(_answer(text))
    return create_app(CONFIG, upstreams={"fake": fake}), fake


def _body(client_dialect: str, stream: bool) -> dict[str, Any]:
    body = get_dialect(client_dialect).render_request(REQUEST)
    body["model"] = "test-model"
    if stream:
        body["stream"] = True
    return body


COMBOS = [
    pytest.param(c, w, s, form, id=f"{c}-via-{w}-{'stream' if s else 'json'}-{form}")
    for form in FORMS
    for c in CLIENTS
    for w in DIALECTS
    for s in (False, True)
]


@pytest.mark.parametrize(("client_dialect", "wire", "stream", "form"), COMBOS)
async def test_text_written_calls_reach_every_client(
    client_dialect: str, wire: str, stream: bool, form: str
) -> None:
    text, before = FORMS[form]
    app, fake = _app(wire, text)
    headers = {"anthropic-version": "2023-06-01"} if client_dialect == "anthropic" else {}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        response = await client.post(
            PATHS[client_dialect], json=_body(client_dialect, stream), headers=headers
        )
    assert response.status_code == 200, response.text
    # the tools went into the prompt, not the upstream's tool list
    assert fake.requests[0].tools == () and "Bash" in fake.requests[0].system_text
    case = Case(form, REQUEST, _answer(text))
    if stream:
        got = fold(_client_events(client_dialect, case, response.content))
    else:
        got = _client_response(client_dialect, response.json())
    assert got.text == before
    assert [(c.name, json.loads(c.arguments)) for c in got.tool_calls] == [("Bash", ARGUMENTS)]
    assert got.stop_reason == StopReason.TOOL_USE


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("form", list(FORMS))
def test_the_anthropic_sdk_reads_tool_use_blocks(form: str, stream: bool) -> None:
    """What Claude Code's own SDK sees, over a real socket: a text block, then a
    ``tool_use`` block whose ``input`` is typed (a number stays a number, a boolean a
    boolean)."""
    text, before = FORMS[form]
    app, _ = _app("openai", text)
    tool: Any = {"name": "Bash", "description": BASH.description, "input_schema": BASH.parameters}
    messages: Any = [{"role": "user", "content": "List the files"}]
    with (
        live_server(app) as url,
        anthropic.Anthropic(base_url=url, api_key="k", max_retries=0) as sdk,
    ):
        if stream:
            with sdk.messages.stream(
                model="test-model", max_tokens=256, messages=messages, tools=[tool]
            ) as events:
                message = events.get_final_message()
        else:
            message = sdk.messages.create(
                model="test-model", max_tokens=256, messages=messages, tools=[tool]
            )
    assert [block.type for block in message.content] == ["text", "tool_use"]
    first, use = message.content
    assert isinstance(first, anthropic.types.TextBlock) and first.text == before
    assert isinstance(use, anthropic.types.ToolUseBlock)
    assert use.name == "Bash" and use.input == ARGUMENTS
    assert message.stop_reason == "tool_use"
