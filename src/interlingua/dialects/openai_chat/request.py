"""OpenAI Chat Completions request body <-> neutral :class:`Request`.

Wire facts: docs/protocols.md, "Chat Completions: request body",
"Chat Completions: messages and content parts" and "Across the dialects".

``parse_request`` validates a client's body (400 naming the field in ``param``, e.g.
``messages[1].content[0].type``) and converts it; ``render_request`` builds the body for
an OpenAI-compatible upstream.

Fields with no neutral meaning go to ``Request.extra`` and are re-emitted only when the
request came from this dialect. Keys of ``extra`` starting with ``_openai_`` are markers of
this codec and never appear on the wire. Messages are handled in :mod:`._messages`.
"""

from __future__ import annotations

from typing import Any

from ...core import Reasoning, Request, ResponseFormat, ToolChoice, ToolSpec
from ...errors import InvalidRequestError
from .._common import expect_type, missing, optional
from ._messages import DIALECT_NAME, bad_value, parse_messages, render_messages, required_str

__all__ = ["ask_stream", "neutral_format", "parse_request", "render_effort", "render_request"]

MAX_TOKENS_FIELD = "_openai_max_tokens_field"  # which key the client used for max tokens
USER_FROM_SAFETY_ID = "_openai_user_from_safety_identifier"  # Request.user is not `user`
OTHER_TOOLS = "_openai_tools"  # tools of unknown types (server extensions), verbatim

# Body keys this codec maps to neutral fields; every other key goes to Request.extra.
_HANDLED = frozenset(
    {
        "model", "messages", "max_tokens", "max_completion_tokens", "stream", "stream_options",
        "temperature", "top_p", "seed", "stop", "user", "metadata", "tools", "tool_choice",
        "parallel_tool_calls", "response_format", "reasoning_effort", "functions",
        "function_call", "logprobs", "top_logprobs", "top_k", "min_p", "repetition_penalty",
        "modalities", "audio",
    }
)  # fmt: skip
_NUMBER = (int, float)


# --------------------------------------------------------------------------- parsing


def parse_request(body: Any) -> Request:
    """Validate and convert a Chat Completions request body.

    >>> parse_request({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).model
    'm'
    """
    if not isinstance(body, dict):
        raise InvalidRequestError("The request body must be a JSON object.", code="invalid_json")
    model = required_str(body, "model", "model")
    extra: dict[str, Any] = {k: v for k, v in body.items() if k not in _HANDLED and v is not None}
    messages = parse_messages(body.get("messages"))
    tools, tool_choice = _parse_tooling(body, extra)
    max_tokens = optional(body, "max_completion_tokens", int, "an integer")
    if max_tokens is not None:
        extra[MAX_TOKENS_FIELD] = "max_completion_tokens"
    else:
        max_tokens = optional(body, "max_tokens", int, "an integer")
    stream = bool(optional(body, "stream", bool, "a boolean"))
    user = optional(body, "user", str, "a string")
    safety_identifier = optional(body, "safety_identifier", str, "a string")
    if user is None and safety_identifier is not None:
        # `user` / `safety_identifier` both name the end user (Anthropic's metadata.user_id:
        # docs/protocols.md, "Sampling settings and output limits"). The original stays in
        # extra for an OpenAI upstream, which must not get a `user` the client never sent.
        user = safety_identifier
        extra[USER_FROM_SAFETY_ID] = True
    include_usage = False
    options = optional(body, "stream_options", dict, "an object")
    if options:
        include_usage = bool(options.get("include_usage"))
        rest = {k: v for k, v in options.items() if k != "include_usage"}
        if rest:
            extra["stream_options"] = rest
    return Request(
        model=model,
        messages=messages,
        max_tokens=max_tokens,
        stream=stream,
        temperature=optional(body, "temperature", _NUMBER, "a number"),
        top_p=optional(body, "top_p", _NUMBER, "a number"),
        seed=optional(body, "seed", int, "an integer"),
        stop=_parse_stop(body.get("stop")),
        user=user,
        metadata=optional(body, "metadata", dict, "an object"),
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=optional(body, "parallel_tool_calls", bool, "a boolean"),
        response_format=_parse_response_format(body.get("response_format")),
        reasoning=_parse_reasoning(body.get("reasoning_effort")),
        include_usage=include_usage,
        logprobs=bool(optional(body, "logprobs", bool, "a boolean")),
        top_logprobs=optional(body, "top_logprobs", int, "an integer"),
        top_k=optional(body, "top_k", int, "an integer"),
        min_p=optional(body, "min_p", _NUMBER, "a number"),
        repetition_penalty=optional(body, "repetition_penalty", _NUMBER, "a number"),
        output_audio=_parse_output_audio(body, extra),
        source_dialect=DIALECT_NAME,
        extra=extra,
    )


def _parse_output_audio(body: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any] | None:
    """``modalities: ["text", "audio"]`` + ``audio: {voice, format}`` -> the audio settings
    (an empty dict when audio is asked for without settings). Modalities that say nothing
    of audio stay in ``extra`` for an OpenAI upstream."""
    modalities = body.get("modalities")
    if modalities is not None:
        expect_type(modalities, list, "modalities", "an array")
        for i, item in enumerate(modalities):
            expect_type(item, str, f"modalities[{i}]", "a string")
    audio = optional(body, "audio", dict, "an object")
    if modalities is None or "audio" not in modalities:
        if modalities is not None:
            extra["modalities"] = modalities
        if audio is not None:
            extra["audio"] = audio  # settings without the modality: the upstream's call
        return None
    return dict(audio or {})


def _parse_stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    expect_type(value, list, "stop", "a string or an array of strings")
    for i, item in enumerate(value):
        expect_type(item, str, f"stop[{i}]", "a string")
    return tuple(value)


def _parse_reasoning(value: Any) -> Reasoning | None:
    if value is None:
        return None
    effort: str = expect_type(value, str, "reasoning_effort", "a string")
    # "none" is an explicit off switch; keep the word so an OpenAI upstream gets it back.
    return Reasoning(enabled=effort != "none", effort=effort)


def _parse_response_format(value: Any) -> ResponseFormat | None:
    if value is None:
        return None
    expect_type(value, dict, "response_format", "an object")
    kind = required_str(value, "type", "response_format.type")
    if kind == "text":
        return ResponseFormat(type="text")
    if kind == "json_object":
        return ResponseFormat(type="json_object")
    if kind != "json_schema":
        raise bad_value("response_format.type", kind, ("text", "json_object", "json_schema"))
    spec = value.get("json_schema")
    if spec is None:
        raise missing("response_format.json_schema")
    p = "response_format.json_schema"
    expect_type(spec, dict, p, "an object")
    return ResponseFormat(
        type="json_schema",
        name=optional(spec, "name", str, "a string"),
        schema=optional(spec, "schema", dict, "an object"),
        strict=optional(spec, "strict", bool, "a boolean"),
        description=optional(spec, "description", str, "a string"),
    )


def _parse_tooling(
    body: dict[str, Any], extra: dict[str, Any]
) -> tuple[tuple[ToolSpec, ...], ToolChoice | None]:
    """``tools``/``tool_choice``, or the legacy ``functions``/``function_call`` pair."""
    if body.get("tools") is None and body.get("functions") is not None:
        return _parse_functions(body.get("functions")), _parse_function_call(
            body.get("function_call")
        )
    tools: list[ToolSpec] = []
    others: list[Any] = []
    raw = body.get("tools")
    if raw is not None:
        expect_type(raw, list, "tools", "an array")
        for i, tool in enumerate(raw):
            spec = _parse_tool(tool, f"tools[{i}]")
            if spec is None:
                others.append(tool)
            else:
                tools.append(spec)
    if others:
        extra[OTHER_TOOLS] = others
    return tuple(tools), _parse_tool_choice(body.get("tool_choice"), extra)


def _parse_tool(tool: Any, p: str) -> ToolSpec | None:
    """A ``function`` or ``custom`` tool -> ToolSpec; any other type -> None (kept raw)."""
    expect_type(tool, dict, p, "an object")
    kind = required_str(tool, "type", f"{p}.type")
    if kind == "custom":
        return _custom_spec(tool.get("custom"), f"{p}.custom")
    if kind != "function":
        return None
    fn = tool.get("function")
    if fn is None:
        raise missing(f"{p}.function")
    return _function_spec(fn, f"{p}.function")


def _function_spec(fn: Any, p: str) -> ToolSpec:
    expect_type(fn, dict, p, "an object")
    name = required_str(fn, "name", f"{p}.name")
    if not name:
        raise InvalidRequestError(f"'{p}.name' must not be empty.", param=f"{p}.name")
    params = fn.get("parameters")
    strict = fn.get("strict")
    desc = fn.get("description")
    return ToolSpec(
        name=name,
        description=None if desc is None else expect_type(desc, str, f"{p}.description", "a string"),
        parameters=None if params is None else expect_type(params, dict, f"{p}.parameters", "an object"),
        strict=None if strict is None else expect_type(strict, bool, f"{p}.strict", "a boolean"),
    )  # fmt: skip


def _custom_spec(custom: Any, p: str) -> ToolSpec:
    """``{"name", "description"?, "format"?}`` of a ``custom`` tool -> a custom ToolSpec."""
    if custom is None:
        raise missing(p)
    expect_type(custom, dict, p, "an object")
    name = required_str(custom, "name", f"{p}.name")
    if not name:
        raise InvalidRequestError(f"'{p}.name' must not be empty.", param=f"{p}.name")
    desc, fmt = custom.get("description"), custom.get("format")
    if desc is not None:
        expect_type(desc, str, f"{p}.description", "a string")
    if fmt is not None:
        fmt = neutral_format(expect_type(fmt, dict, f"{p}.format", "an object"))
    return ToolSpec(name, desc, kind="custom", format=fmt)


def neutral_format(fmt: dict[str, Any]) -> dict[str, Any]:
    """A custom tool's ``format`` in its neutral form. Chat nests a grammar (``{"type":
    "grammar", "grammar": {"syntax", "definition"}}``); the neutral form is the Responses
    API's flat one. Other shapes are kept as they are (the client takes either form)."""
    grammar = fmt.get("grammar")
    if fmt.get("type") != "grammar" or not isinstance(grammar, dict) or len(fmt) != 2:
        return fmt
    return {"type": "grammar", **grammar}


def _chat_format(fmt: dict[str, Any]) -> dict[str, Any]:
    """The inverse of :func:`neutral_format`."""
    if fmt.get("type") != "grammar" or "grammar" in fmt:
        return fmt
    return {"type": "grammar", "grammar": {k: v for k, v in fmt.items() if k != "type"}}


def _parse_tool_choice(value: Any, extra: dict[str, Any]) -> ToolChoice | None:
    if value is None:
        return None
    if isinstance(value, str):
        if value not in ("auto", "none", "required"):
            raise bad_value("tool_choice", value, ("auto", "none", "required"))
        return ToolChoice(mode=value)  # type: ignore[arg-type]  # checked just above
    expect_type(value, dict, "tool_choice", "a string or an object")
    kind = required_str(value, "type", "tool_choice.type")
    if kind == "function":
        fn = value.get("function")
        if fn is None:
            raise missing("tool_choice.function")
        expect_type(fn, dict, "tool_choice.function", "an object")
        return ToolChoice(mode="tool", name=required_str(fn, "name", "tool_choice.function.name"))
    if kind == "custom":  # rendered back as custom because the named tool is custom
        custom = value.get("custom")
        if custom is None:
            raise missing("tool_choice.custom")
        expect_type(custom, dict, "tool_choice.custom", "an object")
        return ToolChoice(mode="tool", name=required_str(custom, "name", "tool_choice.custom.name"))
    # allowed_tools has no neutral form: keep the original for an OpenAI upstream;
    # other dialects get the closest neutral mode.
    extra["tool_choice"] = value
    if kind == "allowed_tools":
        allowed = value.get("allowed_tools")
        mode = allowed.get("mode") if isinstance(allowed, dict) else None
        return ToolChoice(mode="required" if mode == "required" else "auto")
    return None


def _parse_functions(raw: Any) -> tuple[ToolSpec, ...]:
    expect_type(raw, list, "functions", "an array")
    return tuple(_function_spec(fn, f"functions[{i}]") for i, fn in enumerate(raw))


def _parse_function_call(value: Any) -> ToolChoice | None:
    if value is None:
        return None
    if isinstance(value, str):
        if value not in ("auto", "none"):
            raise bad_value("function_call", value, ("auto", "none"))
        return ToolChoice(mode=value)  # type: ignore[arg-type]  # checked just above
    expect_type(value, dict, "function_call", "a string or an object")
    return ToolChoice(mode="tool", name=required_str(value, "name", "function_call.name"))


def render_effort(reasoning: Reasoning | None) -> str | None:
    """Neutral reasoning -> OpenAI's effort word (Chat's ``reasoning_effort``, Responses'
    ``reasoning.effort``); a token budget maps through the shared table."""
    if reasoning is None:
        return None
    if not reasoning.enabled:
        return "none" if reasoning.effort == "none" else None
    if reasoning.effort:
        return reasoning.effort
    budget = reasoning.budget_tokens
    if budget is None:
        return None
    if budget <= 2048:
        return "low"
    return "medium" if budget <= 12288 else "high"


def _render_tool_choice(choice: ToolChoice, tools: tuple[ToolSpec, ...]) -> Any:
    if choice.mode == "tool":
        if any(t.kind == "custom" and t.name == choice.name for t in tools):
            return {"type": "custom", "custom": {"name": choice.name}}
        return {"type": "function", "function": {"name": choice.name}}
    return choice.mode


def _render_tool(tool: ToolSpec) -> dict[str, Any]:
    if tool.kind == "custom":
        custom: dict[str, Any] = {"name": tool.name}
        if tool.description is not None:
            custom["description"] = tool.description
        if tool.format is not None:
            custom["format"] = _chat_format(tool.format)
        return {"type": "custom", "custom": custom}
    fn: dict[str, Any] = {"name": tool.name}
    if tool.description is not None:
        fn["description"] = tool.description
    if tool.parameters is not None:
        fn["parameters"] = tool.parameters
    if tool.strict is not None:
        fn["strict"] = tool.strict
    return {"type": "function", "function": fn}


def _render_response_format(fmt: ResponseFormat) -> dict[str, Any]:
    if fmt.type != "json_schema":
        return {"type": fmt.type}
    spec: dict[str, Any] = {"name": fmt.name or "response"}
    if fmt.description is not None:
        spec["description"] = fmt.description
    if fmt.schema is not None:
        spec["schema"] = fmt.schema
    if fmt.strict is not None:
        spec["strict"] = fmt.strict
    return {"type": "json_schema", "json_schema": spec}


def ask_stream(body: dict[str, Any], stream: bool) -> bool:
    """``body`` asking for a stream (``stream: true``, with the usage chunk) or for one
    whole answer (``stream: false``, no ``stream_options``: OpenAI rejects them without
    ``stream``), in place; True when this asked for the usage chunk the body lacked.

    A stream always asks for the usage chunk (``stream_options.include_usage``;
    docs/protocols.md, "Stream translation"): without it OpenAI reports no usage at all,
    which clients of other dialects, the token limits and the usage log all need. A client
    that did not ask for it must not see it: the gateway cuts it from the relayed stream
    when this returns True. A ``stream_options`` that is no object is left to the request's
    validation.

    >>> body = {"stream_options": {"x": 1}}
    >>> ask_stream(body, True), body
    (True, {'stream_options': {'x': 1, 'include_usage': True}, 'stream': True})
    >>> ask_stream(body, False), body
    (False, {'stream': False})
    """
    body["stream"] = stream
    if not stream:
        body.pop("stream_options", None)
        return False
    options = body.get("stream_options")
    if options is None:
        body["stream_options"] = {"include_usage": True}
        return True
    if not isinstance(options, dict) or options.get("include_usage") is True:
        return False
    body["stream_options"] = {**options, "include_usage": True}
    return True


def render_request(request: Request) -> dict[str, Any]:
    """The Chat Completions body for an OpenAI-compatible upstream.

    >>> from interlingua.core import Message, TextPart
    >>> render_request(Request("m", (Message("user", (TextPart("hi"),)),)))["messages"]
    [{'role': 'user', 'content': 'hi'}]
    """
    same = request.source_dialect == DIALECT_NAME
    extra = request.extra if same else {}
    body: dict[str, Any] = {"model": request.model, "messages": render_messages(request.messages)}
    if request.max_tokens is not None:
        key = extra.get(MAX_TOKENS_FIELD) or "max_tokens"
        body[key] = request.max_tokens
    for key, value in (
        ("temperature", request.temperature),
        ("top_p", request.top_p),
        # vLLM's and llama.cpp's samplers: an OpenAI-compatible server that has them
        # honours them, OpenAI itself refuses them (the caller asked: it should know).
        ("top_k", request.top_k),
        ("min_p", request.min_p),
        ("repetition_penalty", request.repetition_penalty),
        ("seed", request.seed),
        ("user", None if extra.get(USER_FROM_SAFETY_ID) else request.user),
        ("parallel_tool_calls", request.parallel_tool_calls),
        ("reasoning_effort", render_effort(request.reasoning)),
    ):
        if value is not None:
            body[key] = value
    if request.logprobs:
        body["logprobs"] = True
    if request.top_logprobs is not None and (request.logprobs or same):
        body["top_logprobs"] = request.top_logprobs  # the API needs logprobs with it
    if request.output_audio is not None:
        body["modalities"] = ["text", "audio"]
        body["audio"] = request.output_audio
    if request.stop:
        body["stop"] = list(request.stop)
    if same and request.metadata is not None:
        body["metadata"] = request.metadata  # OpenAI metadata means nothing elsewhere
    tools = [_render_tool(t) for t in request.tools] + list(extra.get(OTHER_TOOLS, ()))
    if tools:
        body["tools"] = tools
    if request.tool_choice is not None:
        body["tool_choice"] = _render_tool_choice(request.tool_choice, request.tools)
    if request.response_format is not None:
        body["response_format"] = _render_response_format(request.response_format)
    if request.stream:
        body["stream"] = True
        options = extra.get("stream_options")
        if options:
            body["stream_options"] = options  # (copied by ask_stream, never changed)
        ask_stream(body, True)
    for key, value in extra.items():
        if not key.startswith("_openai_") and key != "stream_options":
            body[key] = value
    return body
