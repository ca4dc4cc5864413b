"""OpenAI Responses request body <-> neutral :class:`Request`.

Wire facts: docs/protocols.md, "Responses: request body", "Responses: input items" and
"Across the dialects".

``parse_request`` validates a client's body (400 naming the field in ``param``, e.g.
``input[3].call_id``) and converts it; ``render_request`` builds the body for a Responses
upstream. Items are handled in :mod:`._items` / :mod:`._render`, tools in :mod:`._tools`.

* ``instructions`` is a leading ``system`` message marked ``meta["responses_instructions"]``.
  Rendering a request of another dialect puts its leading system messages (joined by a
  blank line) into ``instructions`` and any later one into a ``system``/``developer`` item.
* ``max_output_tokens`` is ``max_tokens``; ``reasoning.effort`` is :class:`Reasoning`
  (``"none"`` = off); ``text.format`` is :class:`ResponseFormat` (json_schema is flat).
  ``reasoning.summary`` and ``text.verbosity`` ride in ``extra`` for a Responses upstream.
* Fields with no neutral meaning (``store``, ``previous_response_id``, ``include``,
  ``prompt_cache_key``, ``truncation``, ``background``, ``safety_identifier``, unknown
  ones, ...) go to ``Request.extra`` and are re-emitted only when the request came from
  this dialect. Keys of ``extra`` starting with ``_responses_`` are markers of this codec
  and never appear on the wire.
* ``top_logprobs`` is :attr:`Request.top_logprobs`; ``include`` naming
  ``message.output_text.logprobs`` sets :attr:`Request.logprobs` (``include`` itself
  stays in ``extra``). Rendering another dialect's request for logprobs adds that
  ``include`` entry.
* Toward Responses, ``stop`` and ``seed`` of other dialects are dropped (the API has
  neither; an upstream of kind ``responses`` enforces ``stop`` itself); Chat's ``n`` > 1,
  ``top_k``, ``min_p``, ``repetition_penalty`` and audio output are refused (400 naming
  the parameter: the API has no such setting, and a caller who asked for one would not
  get it); ``metadata`` is re-emitted for Responses clients only.

Normalization on a Responses round trip (besides :mod:`._items`'): ``null`` fields and
``stream: false`` are dropped.
"""

from __future__ import annotations

from typing import Any

from ...core import Message, Reasoning, Request, ResponseFormat, TextPart
from ...errors import InvalidRequestError
from .._common import expect_type, missing, optional, refuse_unsupported
from ..openai_chat.request import render_effort
from ._items import DIALECT_NAME, bad_value, parse_input, required_str
from ._render import render_input
from ._tools import parse_tool_choice, parse_tools, render_tool_choice, render_tools
from .sealed import Sealer

__all__ = ["DIALECT_NAME", "parse_request", "render_request"]

INSTRUCTIONS = "responses_instructions"  # Message.meta: this system message is `instructions`
INPUT_STRING = "_responses_input_string"  # the client sent `input` as a bare string
USER_FROM_SAFETY_ID = "_responses_user_from_safety_identifier"  # Request.user is not `user`
REASONING_REST = "_responses_reasoning"  # `reasoning` without `effort` (summary, ...)
TEXT_REST = "_responses_text"  # `text` without `format` (verbosity, ...)
LOGPROBS_INCLUDE = "message.output_text.logprobs"  # the `include` entry asking for them

# Body keys this codec maps to neutral fields; every other key goes to Request.extra.
_HANDLED = frozenset(
    {
        "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls",
        "reasoning", "text", "max_output_tokens", "temperature", "top_p", "stream", "user",
        "metadata", "top_logprobs",
    }
)  # fmt: skip
_NUMBER = (int, float)


def parse_request(body: Any, sealer: Sealer | None = None) -> Request:
    """Validate and convert a Responses request body; ``sealer`` opens the reasoning
    tokens the gateway issued (:mod:`.sealed`).

    >>> parse_request({"model": "m", "input": "hi"}).messages[0].parts[0].text
    'hi'
    """
    if not isinstance(body, dict):
        raise InvalidRequestError("The request body must be a JSON object.", code="invalid_json")
    model = required_str(body, "model", "model")
    extra: dict[str, Any] = {k: v for k, v in body.items() if k not in _HANDLED and v is not None}
    messages, bare = parse_input(body.get("input"), sealer)
    if bare:
        extra[INPUT_STRING] = True
    instructions = optional(body, "instructions", str, "a string")
    if instructions is not None:
        system = Message("system", (TextPart(instructions),), meta={INSTRUCTIONS: True})
        messages = (system, *messages)
    tools = parse_tools(body.get("tools"), extra)
    user = optional(body, "user", str, "a string")
    safety_identifier = optional(body, "safety_identifier", str, "a string")
    if user is None and safety_identifier is not None:
        # As the Chat codec (docs/protocols.md, "Sampling settings and output limits");
        # the original stays in extra.
        user = safety_identifier
        extra[USER_FROM_SAFETY_ID] = True
    return Request(
        model=model,
        messages=messages,
        max_tokens=optional(body, "max_output_tokens", int, "an integer"),
        stream=bool(optional(body, "stream", bool, "a boolean")),
        temperature=optional(body, "temperature", _NUMBER, "a number"),
        top_p=optional(body, "top_p", _NUMBER, "a number"),
        user=user,
        metadata=optional(body, "metadata", dict, "an object"),
        tools=tools,
        tool_choice=parse_tool_choice(body.get("tool_choice"), extra),
        parallel_tool_calls=optional(body, "parallel_tool_calls", bool, "a boolean"),
        response_format=_parse_text(body.get("text"), extra),
        reasoning=_parse_reasoning(body.get("reasoning"), extra),
        logprobs=_wants_logprobs(body.get("include")),
        top_logprobs=optional(body, "top_logprobs", int, "an integer"),
        source_dialect=DIALECT_NAME,
        extra=extra,
    )


def _wants_logprobs(include: Any) -> bool:
    return isinstance(include, list) and LOGPROBS_INCLUDE in include


_UNSUPPORTED = ("top_k", "min_p", "repetition_penalty", "modalities")


def _parse_reasoning(value: Any, extra: dict[str, Any]) -> Reasoning | None:
    if value is None:
        return None
    expect_type(value, dict, "reasoning", "an object")
    rest = {k: v for k, v in value.items() if k != "effort" and v is not None}
    if rest:
        extra[REASONING_REST] = rest
    effort = value.get("effort")
    if effort is None:
        return None  # only a summary setting: nothing another dialect could act on
    expect_type(effort, str, "reasoning.effort", "a string")
    # "none" is an explicit off switch; keep the word so an OpenAI upstream gets it back.
    return Reasoning(enabled=effort != "none", effort=effort)


def _parse_text(value: Any, extra: dict[str, Any]) -> ResponseFormat | None:
    if value is None:
        return None
    expect_type(value, dict, "text", "an object")
    rest = {k: v for k, v in value.items() if k != "format" and v is not None}
    if rest:
        extra[TEXT_REST] = rest
    fmt = value.get("format")
    if fmt is None:
        return None
    expect_type(fmt, dict, "text.format", "an object")
    kind = required_str(fmt, "type", "text.format.type")
    if kind in ("text", "json_object"):
        return ResponseFormat(type=kind)  # type: ignore[arg-type]  # checked just above
    if kind != "json_schema":
        raise bad_value("text.format.type", kind, ("text", "json_object", "json_schema"))
    schema = fmt.get("schema")
    if schema is None:
        raise missing("text.format.schema")
    p = "text.format"
    return ResponseFormat(
        type="json_schema",
        name=required_str(fmt, "name", f"{p}.name"),
        schema=expect_type(schema, dict, f"{p}.schema", "an object"),
        strict=None if fmt.get("strict") is None else expect_type(fmt["strict"], bool, f"{p}.strict", "a boolean"),
        description=None if fmt.get("description") is None else expect_type(fmt["description"], str, f"{p}.description", "a string"),
    )  # fmt: skip


# --------------------------------------------------------------------------- rendering


def render_request(request: Request) -> dict[str, Any]:
    """The Responses body for an OpenAI Responses upstream.

    >>> render_request(Request("m", (Message("user", (TextPart("hi"),)),)))["input"]
    [{'type': 'message', 'role': 'user', 'content': 'hi'}]
    """
    same = request.source_dialect == DIALECT_NAME
    extra = request.extra if same else {}
    n = None if same else request.extra.get("n")
    if isinstance(n, int) and not isinstance(n, bool) and n > 1:
        # One answer per request in this API: dropping n would answer one choice of n.
        raise InvalidRequestError("n > 1 is not supported by the upstream API", param="n")
    refuse_unsupported(request, _UNSUPPORTED, "OpenAI Responses")
    instructions, messages = _split_instructions(request.messages, same)
    body: dict[str, Any] = {"model": request.model}
    if instructions is not None:
        body["instructions"] = instructions
    if _bare_input(messages, extra):
        body["input"] = messages[0].parts[0].text  # type: ignore[union-attr]  # checked
    else:
        body["input"] = render_input(messages, same)
    for key, value in (
        ("max_output_tokens", request.max_tokens),
        ("temperature", request.temperature),
        ("top_p", request.top_p),
        ("user", None if extra.get(USER_FROM_SAFETY_ID) else request.user),
        ("parallel_tool_calls", request.parallel_tool_calls),
        ("metadata", request.metadata if same else None),
        ("top_logprobs", request.top_logprobs),
    ):
        if value is not None:
            body[key] = value
    if request.logprobs and not same:
        body["include"] = [LOGPROBS_INCLUDE]
    if request.stream:
        body["stream"] = True
    tools = render_tools(request.tools, extra)
    if tools:
        body["tools"] = tools
    if request.tool_choice is not None:
        body["tool_choice"] = render_tool_choice(request.tool_choice, request.tools)
    reasoning = {**extra.get(REASONING_REST, {})}
    effort = render_effort(request.reasoning)
    if effort is not None:
        reasoning["effort"] = effort
    if reasoning:
        body["reasoning"] = reasoning
    text = {**extra.get(TEXT_REST, {})}
    if request.response_format is not None:
        text["format"] = _render_format(request.response_format)
    if text:
        body["text"] = text
    for key, value in extra.items():
        if not key.startswith("_responses_"):
            body[key] = value  # a Responses client's own fields, tool_choice included
    return body


def _split_instructions(
    messages: tuple[Message, ...], same: bool
) -> tuple[str | None, tuple[Message, ...]]:
    """(``instructions``, the messages left for ``input``).

    Our own client's ``instructions`` is the marked first message; another dialect's
    leading all-text system messages are hoisted into it (Codex-style upstreams want it).
    """
    if same:
        if messages and messages[0].meta.get(INSTRUCTIONS):
            return messages[0].parts[0].text, messages[1:]  # type: ignore[union-attr]  # ours: one TextPart
        return None, messages
    n = 0
    while (
        n < len(messages)
        and messages[n].role == "system"
        and all(isinstance(p, TextPart) for p in messages[n].parts)
    ):
        n += 1
    if n == 0:
        return None, messages
    texts = ("".join(p.text for p in m.parts if isinstance(p, TextPart)) for m in messages[:n])
    return "\n\n".join(texts), messages[n:]


def _bare_input(messages: tuple[Message, ...], extra: dict[str, Any]) -> bool:
    if not extra.get(INPUT_STRING) or len(messages) != 1:
        return False
    m = messages[0]
    return m.role == "user" and len(m.parts) == 1 and isinstance(m.parts[0], TextPart)


def _render_format(fmt: ResponseFormat) -> dict[str, Any]:
    if fmt.type != "json_schema":
        return {"type": fmt.type}
    out: dict[str, Any] = {"type": "json_schema", "name": fmt.name or "response"}
    if fmt.description is not None:
        out["description"] = fmt.description
    out["schema"] = fmt.schema if fmt.schema is not None else {"type": "object"}
    if fmt.strict is not None:
        out["strict"] = fmt.strict
    return out
