"""The conformance cases: one neutral description per case, stamped out over every
client dialect x upstream dialect x stream/non-stream by test_conformance.py.

Each case gives the client's request (as a neutral Request, rendered into the client's
dialect by its codec), what the scripted upstream answers, and checks on what the
upstream received and what the client got back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from interlingua.core import (
    AudioPart,
    BlockStart,
    ImagePart,
    Message,
    ReasoningPart,
    Request,
    Response,
    StopReason,
    StreamError,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    TokenLogprob,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
    ToolSpec,
    Usage,
)
from interlingua.errors import InterlinguaError, OverloadedError, RateLimitError

PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
        "required": ["city"],
    },
)
TIME = ToolSpec(
    name="get_time",
    description="Local time in a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


def user(*parts: Any) -> Message:
    return Message("user", tuple(TextPart(p) if isinstance(p, str) else p for p in parts))


def assistant(*parts: Any) -> Message:
    return Message("assistant", tuple(TextPart(p) if isinstance(p, str) else p for p in parts))


def reply(*parts: Any, stop: StopReason = StopReason.END_TURN, **kw: Any) -> Response:
    usage = kw.pop("usage", Usage(input_tokens=21, output_tokens=9))
    return Response(
        id="resp_1",
        model="upstream-model",
        parts=tuple(TextPart(p) if isinstance(p, str) else p for p in parts),
        stop_reason=stop,
        usage=usage,
        created=1_700_000_000,
        **kw,
    )


Script = Response | list[StreamEvent] | InterlinguaError


@dataclass
class Case:
    """One conformance case."""

    name: str
    request: Request
    script: Script
    #: checks on the neutral request the upstream received (after both codecs)
    check_upstream: Callable[[Request], None] = lambda r: None
    #: the error the client must get (HTTP status by client dialect), if any
    error: tuple[int, int] | None = None  # (status for openai client, for anthropic client)
    #: the client sees partial output and then an in-band error (streams only)
    mid_stream_error: bool = False
    expect: dict[str, Any] = field(default_factory=dict)
    #: the client dialects that can ask for what the case tests
    clients: tuple[str, ...] = ("openai", "anthropic", "responses")
    #: the upstream dialects that can carry it
    wires: tuple[str, ...] = ("openai", "anthropic", "responses")


def _req(*messages: Message, **kw: Any) -> Request:
    kw.setdefault("max_tokens", 256)
    return Request(model="test-model", messages=messages, **kw)


def _system_seen(r: Request) -> None:
    assert r.messages[0].role == "system"
    assert r.system_text == "You are terse."


def _turns_seen(r: Request) -> None:
    roles = [m.role for m in r.messages]
    assert roles == ["user", "assistant", "user"], roles
    assert r.messages[1].parts[0] == TextPart("Paris.")


def _image_seen(r: Request) -> None:
    images = [p for p in r.messages[-1].parts if isinstance(p, ImagePart)]
    assert len(images) == 1
    assert images[0].media_type == "image/png"
    assert images[0].data == PNG_1PX


def _tools_seen(r: Request) -> None:
    assert [t.name for t in r.tools] == ["get_weather", "get_time"]
    assert r.tools[0].parameters == WEATHER.parameters
    assert r.tool_choice is not None and r.tool_choice.mode == "auto"


def _tool_result_seen(r: Request) -> None:
    results = [p for m in r.messages for p in m.parts if isinstance(p, ToolResultPart)]
    calls = [p for m in r.messages for p in m.parts if isinstance(p, ToolCallPart)]
    assert [c.id for c in calls] == ["call_1", "call_2"]
    assert [res.tool_call_id for res in results] == ["call_1", "call_2"]
    assert [res.text for res in results] == ["18C, cloudy", "14:05"]


def _stop_seen(r: Request) -> None:
    assert r.stop == ("###",)


def _max_tokens_seen(r: Request) -> None:
    assert r.max_tokens == 5


TOOL_HISTORY = (
    user("Weather and time in Paris?"),
    assistant(
        ToolCallPart("call_1", "get_weather", '{"city":"Paris"}'),
        ToolCallPart("call_2", "get_time", '{"city":"Paris"}'),
    ),
    Message(
        "user",
        (
            ToolResultPart("call_1", (TextPart("18C, cloudy"),)),
            ToolResultPart("call_2", (TextPart("14:05"),)),
        ),
    ),
)

APPLY_PATCH = ToolSpec(
    "apply_patch",
    "Edit files with a patch",
    kind="custom",
    format={"type": "grammar", "syntax": "lark", "definition": "start: /(.|\\n)+/"},
)
PATCH = '*** Begin Patch\n*** Update File: a.py\n-pritn("hi")\n+print("hi")\n*** End Patch\n'


def _custom_tool_seen(r: Request) -> None:
    kinds = {tool.name: tool.kind for tool in r.tools}
    assert kinds["get_weather"] == "function"
    # an Anthropic upstream sees the custom tool as a function (the wrapper is its codec's)
    assert "apply_patch" in kinds


def _token(text: str, logprob: float, *alternatives: tuple[str, float]) -> TokenLogprob:
    top = tuple(TokenLogprob(t, lp, tuple(t.encode())) for t, lp in alternatives)
    return TokenLogprob(text, logprob, tuple(text.encode()), top)


#: "Hi there!" token by token, each with its two most likely alternatives
HI_TOKENS = (
    _token("Hi", -0.25, ("Hi", -0.25), ("Hello", -1.75)),
    _token(" there", -0.5, (" there", -0.5), (" friend", -2.0)),
    _token("!", -0.125, ("!", -0.125), (".", -3.5)),
)
#: a WAV header and a few samples, base64
WAV_B64 = "UklGRjQAAABXQVZFZm10IBAAAAABAAEAgD4AAAB9AAACABAAZGF0YRAAAAAAAAEAAgADAAQABQAGAAcA"


def _logprobs_seen(r: Request) -> None:
    assert r.logprobs is True and r.top_logprobs == 2


def _samplers_seen(r: Request) -> None:
    assert (r.top_k, r.min_p, r.repetition_penalty) == (5, 0.1, 1.15)


def _top_k_seen(r: Request) -> None:
    assert r.top_k == 5


def _audio_seen(r: Request) -> None:
    audio = [p for p in r.messages[-1].parts if isinstance(p, AudioPart)]
    assert audio == [AudioPart(data=WAV_B64, format="wav")]


def _audio_output_seen(r: Request) -> None:
    assert r.output_audio == {"voice": "alloy", "format": "wav"}


CASES = [
    Case("plain_text", _req(user("Say hi")), reply("Hi there!")),
    Case(
        "system",
        _req(Message("system", (TextPart("You are terse."),)), user("Capital of France?")),
        reply("Paris."),
        check_upstream=_system_seen,
    ),
    Case(
        "multi_turn",
        _req(user("Capital of France?"), assistant("Paris."), user("And of Spain?")),
        reply("Madrid."),
        check_upstream=_turns_seen,
    ),
    Case(
        "image",
        _req(user("What is this?", ImagePart(media_type="image/png", data=PNG_1PX))),
        reply("A single pixel."),
        check_upstream=_image_seen,
    ),
    Case(
        "single_tool_call",
        _req(user("Weather in Paris?"), tools=(WEATHER, TIME), tool_choice=ToolChoice("auto")),
        reply(
            "Let me check.",
            ToolCallPart("call_1", "get_weather", '{"city": "Paris"}'),
            stop=StopReason.TOOL_USE,
        ),
        check_upstream=_tools_seen,
    ),
    Case(
        "parallel_tool_calls",
        _req(user("Weather and time?"), tools=(WEATHER, TIME), tool_choice=ToolChoice("auto")),
        reply(
            ToolCallPart("call_1", "get_weather", '{"city": "Paris", "unit": "C"}'),
            ToolCallPart("call_2", "get_time", '{"city": "Paris"}'),
            stop=StopReason.TOOL_USE,
        ),
        check_upstream=_tools_seen,
    ),
    Case(
        "custom_tool_call",
        _req(user("Fix the typo in a.py"), tools=(APPLY_PATCH, WEATHER)),
        reply(
            "Patching.",
            ToolCallPart("call_p", "apply_patch", PATCH, kind="custom"),
            stop=StopReason.TOOL_USE,
        ),
        check_upstream=_custom_tool_seen,
        # Messages has no custom tools for a client to declare; every upstream carries
        # them (Anthropic as a function with one string parameter)
        clients=("openai", "responses"),
    ),
    Case(
        "tool_result_turn",
        _req(*TOOL_HISTORY, tools=(WEATHER, TIME)),
        reply("It is 18C and cloudy; the time is 14:05."),
        check_upstream=_tool_result_seen,
    ),
    Case(
        "reasoning",
        _req(user("Is 97 prime?")),
        reply(ReasoningPart("97 is not divisible by 2, 3, 5 or 7.", signature="sig-1"), "Yes."),
    ),
    Case(
        "stop_sequence",
        _req(user("Count to ten"), stop=("###",)),
        reply("1 2 3", stop=StopReason.STOP_SEQUENCE, stop_sequence="###"),
        check_upstream=_stop_seen,
        # the Responses API has no stop sequences (toward it they are dropped: mapping.md)
        clients=("openai", "anthropic"),
        wires=("openai", "anthropic"),
    ),
    Case(
        "max_tokens",
        _req(user("Tell me a story"), max_tokens=5),
        reply("Once upon a time", stop=StopReason.MAX_TOKENS, usage=Usage(30, 5)),
        check_upstream=_max_tokens_seen,
    ),
    Case(
        "usage",
        _req(user("Hi")),
        reply(
            "Hello!",
            usage=Usage(input_tokens=1200, output_tokens=40, cache_read_tokens=1000),
        ),
    ),
    Case(
        "upstream_error_before_first_byte",
        _req(user("Hi")),
        RateLimitError("Rate limit reached for requests", retry_after=2),
        error=(429, 429),
    ),
    Case(
        "upstream_error_mid_stream",
        _req(user("Hi")),
        [
            StreamStart("resp_1", "upstream-model", 1_700_000_000, Usage(input_tokens=5)),
            BlockStart(0, TextPart("")),
            TextDelta(0, "Partial ans"),
            StreamError(OverloadedError("Overloaded")),
        ],
        error=(503, 529),
        mid_stream_error=True,
    ),
    Case(
        "logprobs",
        _req(user("Say hi"), logprobs=True, top_logprobs=2),
        reply(TextPart("Hi there!", logprobs=HI_TOKENS)),
        check_upstream=_logprobs_seen,
        # Messages has no logprobs (toward it they are refused: the next case)
        clients=("openai", "responses"),
        wires=("openai", "responses"),
    ),
    Case(
        "logprobs_refused_toward_anthropic",
        _req(user("Say hi"), logprobs=True, top_logprobs=2),
        reply("Hi there!"),
        error=(400, 400),
        clients=("openai", "responses"),
        wires=("anthropic",),
    ),
    Case(
        "samplers",
        _req(user("Say hi"), top_k=5, min_p=0.1, repetition_penalty=1.15),
        reply("Hi!"),
        check_upstream=_samplers_seen,
        clients=("openai",),  # the others have no min_p
        wires=("openai",),
    ),
    Case(
        "samplers_refused_where_the_api_has_none",
        _req(user("Say hi"), min_p=0.1),
        reply("Hi!"),
        error=(400, 400),
        clients=("openai",),
        wires=("anthropic", "responses"),
    ),
    Case(
        "top_k",
        _req(user("Say hi"), top_k=5),
        reply("Hi!"),
        check_upstream=_top_k_seen,
        clients=("openai", "anthropic"),  # the Responses API has no top_k
        wires=("openai", "anthropic"),
    ),
    Case(
        "top_k_refused_toward_responses",
        _req(user("Say hi"), top_k=5),
        reply("Hi!"),
        error=(400, 400),
        clients=("openai", "anthropic"),
        wires=("responses",),
    ),
    Case(
        "audio_input",
        _req(user("What is said?", AudioPart(data=WAV_B64, format="wav"))),
        reply("Hello."),
        check_upstream=_audio_seen,
        clients=("openai",),
        wires=("openai",),
    ),
    Case(
        "audio_input_refused",
        _req(user("What is said?", AudioPart(data=WAV_B64, format="wav"))),
        reply("Hello."),
        error=(400, 400),
        clients=("openai",),
        wires=("anthropic", "responses"),
    ),
    Case(
        "audio_output",
        _req(user("Say hello"), output_audio={"voice": "alloy", "format": "wav"}),
        reply(AudioPart(data=WAV_B64, transcript="Hello.", id="audio_1", expires_at=1_700_000_600)),
        check_upstream=_audio_output_seen,
        clients=("openai",),
        wires=("openai",),
    ),
    Case(
        "audio_output_refused",
        _req(user("Say hello"), output_audio={"voice": "alloy", "format": "wav"}),
        reply("Hello."),
        error=(400, 400),
        clients=("openai",),
        wires=("anthropic", "responses"),
    ),
]
