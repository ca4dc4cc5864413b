"""The tool prompt side: tools, calls and results rendered as text for the model."""

from __future__ import annotations

import orjson

from interlingua.core import (
    ImagePart,
    Message,
    Request,
    TextPart,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
    ToolSpec,
)
from interlingua.text import (
    ToolCallTextParser,
    apply_text_tools,
    render_tool_call,
    render_tool_history,
    render_tool_result,
    render_tools_prompt,
)

WEATHER = ToolSpec(
    "get_weather",
    "Current weather for a city.",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
TIME = ToolSpec("get_time")


def test_render_tools_prompt_lists_tools_and_format() -> None:
    prompt = render_tools_prompt([WEATHER, TIME])
    lines = prompt.splitlines()
    tools = [orjson.loads(line) for line in lines if line.startswith('{"type"')]
    assert tools == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": WEATHER.parameters,
            },
        },
        {
            "type": "function",
            "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
        },
    ]
    assert "<tools>" in prompt and "</tools>" in prompt
    assert (
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
        in prompt
    )
    assert "one <tool_call></tool_call> block per call" in prompt
    assert prompt.endswith("without any <tool_call> tag.")


def test_render_tools_prompt_tool_choice() -> None:
    required = render_tools_prompt([WEATHER, TIME], ToolChoice("required"))
    assert required.endswith("answer only with <tool_call></tool_call> blocks.")
    named = render_tools_prompt([WEATHER, TIME], ToolChoice("tool", "get_time"))
    assert 'You must call the function "get_time" now' in named
    assert "get_weather" not in named
    none = render_tools_prompt([WEATHER], ToolChoice("none"))
    assert none.endswith("answer the user directly in plain text.")
    assert render_tools_prompt([]) == ""


def test_render_tool_call_round_trips_through_the_parser() -> None:
    text = render_tool_call("get_weather", '{"city": "Paris"}')
    assert text == '<tool_call>\n{"name":"get_weather","arguments":{"city":"Paris"}}\n</tool_call>'
    parser = ToolCallTextParser()
    assert parser.feed(text) + parser.flush() == [("tool_call", "get_weather", '{"city":"Paris"}')]
    assert render_tool_call("f", "") == '<tool_call>\n{"name":"f","arguments":{}}\n</tool_call>'
    assert '"arguments":"{bad"' in render_tool_call("f", "{bad")


def test_render_tool_result() -> None:
    ok = ToolResultPart("call_1", (TextPart("18C"),))
    assert render_tool_result(ok) == "<tool_response>\n18C\n</tool_response>"
    bad = ToolResultPart("call_1", (TextPart("no such city"),), is_error=True)
    assert render_tool_result(bad) == "<tool_response>\nError: no such city\n</tool_response>"


def test_render_tool_history() -> None:
    image = ImagePart(media_type="image/png", data="AAAA")
    messages = (
        Message("user", (TextPart("Weather?"),)),
        Message(
            "assistant",
            (TextPart("Checking."), ToolCallPart("call_1", "get_weather", '{"city":"Paris"}')),
        ),
        Message(
            "user",
            (ToolResultPart("call_1", (TextPart("18C"), image)), TextPart("Thanks")),
        ),
    )
    out = render_tool_history(messages)
    assert out[0] is messages[0]
    assert out[1] == Message(
        "assistant",
        (TextPart("Checking.\n" + render_tool_call("get_weather", '{"city":"Paris"}')),),
    )
    assert out[2] == Message(
        "user",
        (TextPart("<tool_response>\n18C\n</tool_response>"), image, TextPart("Thanks")),
    )


def test_apply_text_tools() -> None:
    request = Request(
        "m",
        (Message("system", (TextPart("Be brief."),)), Message("user", (TextPart("Hi"),))),
        tools=(WEATHER,),
        tool_choice=ToolChoice("auto"),
        parallel_tool_calls=True,
    )
    out = apply_text_tools(request)
    assert out.tools == () and out.tool_choice is None and out.parallel_tool_calls is None
    assert out.messages[0].parts == (
        TextPart("Be brief."),
        TextPart("\n\n" + render_tools_prompt([WEATHER], ToolChoice("auto"))),
    )
    assert out.messages[1] == request.messages[1]
    bare = apply_text_tools(Request("m", (Message("user", (TextPart("Hi"),)),), tools=(TIME,)))
    assert bare.messages[0] == Message("system", (TextPart(render_tools_prompt([TIME])),))
    plain = Request("m", (Message("user", (TextPart("Hi"),)),))
    assert apply_text_tools(plain).messages == plain.messages
