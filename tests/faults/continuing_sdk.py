"""The three official client paths against a gateway, each answer folded whole.

:func:`call` sends one request with the openai SDK to ``/v1/chat/completions``, the
anthropic SDK to ``/v1/messages`` or the openai SDK's Responses API to ``/v1/responses``,
reads the answer to its end (a stream event by event) and reduces it to an
:class:`Outcome`: a normal answer (text, reasoning, tool calls, how it ended, the ids
and sequence numbers it carried), a typed status error before the answer, an in-band
error (the SDK raised it mid-stream, or a Responses ``response.failed`` / ``error``
event), or a ``failure``: anything a caller could not act on (a transport exception, a
validation error on a 200, a read timeout). Judging it is the matrix's job
(:mod:`.test_continuation_matrix`).
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass, field
from typing import Any

import anthropic
import openai

from .continuing_upstream import TOOL
from .continuing_wire import CHAT, MESSAGES, RESPONSES
from .sdk_calls import CLIENT_KEY

#: the SDK's timeout of one read: above every wait a cell provokes in the gateway
SDK_TIMEOUT = 5.0
PROMPT = "Tell me about the fox."
#: one TLS context for every client (unused on http://, but each new one loads the CA
#: bundle: a quarter of a cell's CPU)
TLS = ssl.create_default_context()
_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
}
#: the tool the continuing upstream calls, offered in each dialect's spelling
TOOLS: dict[str, list[dict[str, Any]]] = {
    CHAT: [{"type": "function", "function": {"name": TOOL.name, "parameters": _SCHEMA}}],
    MESSAGES: [{"name": TOOL.name, "input_schema": _SCHEMA}],
    RESPONSES: [{"type": "function", "name": TOOL.name, "parameters": _SCHEMA}],
}


@dataclass
class Outcome:
    """What one SDK call ended in."""

    #: "answer" | "status" (an error before the answer) | "inband" | "failure"
    kind: str = "answer"
    status: int | None = None
    text: str = ""
    reasoning: str = ""
    #: (id, name) of every tool call started, and their arguments, concatenated
    tools: list[tuple[str, str]] = field(default_factory=list)
    args: str = ""
    #: the normal end: Chat's finish_reason, Messages' stop_reason once message_stop
    #: came, the Responses status once response.completed came; None when it never came
    finish: str | None = None
    ids: set[str] = field(default_factory=set)
    #: the Responses stream's sequence numbers, in order
    sequence: list[int] = field(default_factory=list)
    retry_after: str | None = None
    detail: str = ""
    #: the stream had begun (an error after it is in-band)
    started: bool = False

    def describe(self) -> str:
        """One line for an assertion message."""
        return (
            f"{self.kind} status={self.status} finish={self.finish!r} text={self.text!r} "
            f"reasoning={self.reasoning!r} tools={self.tools} args={self.args!r} "
            f"detail={self.detail!r}"
        )


def _options(http_client: type[Any]) -> dict[str, Any]:
    """An SDK client's options: no retries of its own, the shared TLS context."""
    http = http_client(verify=TLS, timeout=SDK_TIMEOUT)
    return {"api_key": CLIENT_KEY, "max_retries": 0, "timeout": SDK_TIMEOUT, "http_client": http}


def _chat(url: str, model: str, stream: bool, tools: bool, out: Outcome) -> None:
    client = openai.OpenAI(base_url=url + "/v1", **_options(openai.DefaultHttpxClient))
    extra: dict[str, Any] = {"tools": TOOLS[CHAT]} if tools else {}
    messages: Any = [{"role": "user", "content": PROMPT}]
    with client:
        if not stream:
            answer = client.chat.completions.create(model=model, messages=messages, **extra)
            out.ids.add(answer.id)
            choice = answer.choices[0]
            out.text = choice.message.content or ""
            out.reasoning = (choice.message.model_extra or {}).get("reasoning_content") or ""
            for call in choice.message.tool_calls or []:
                assert call.type == "function"
                out.tools.append((call.id, call.function.name))
                out.args += call.function.arguments
            out.finish = choice.finish_reason
            return
        chunks = client.chat.completions.create(
            model=model, messages=messages, stream=True, **extra
        )
        with chunks:
            out.started = True
            for chunk in chunks:
                out.ids.add(chunk.id)
                for c in chunk.choices:
                    delta = c.delta
                    out.text += delta.content or ""
                    out.reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
                    for tool in delta.tool_calls or []:
                        function = tool.function
                        if tool.id:
                            out.tools.append((tool.id, function.name if function else ""))
                        out.args += (function.arguments if function else None) or ""
                    out.finish = c.finish_reason or out.finish


def _messages_block(out: Outcome, block: Any) -> None:
    if block.type == "text":
        out.text += block.text
    elif block.type == "thinking":
        out.reasoning += block.thinking
    elif block.type == "tool_use":
        out.tools.append((block.id, block.name))
        out.args += json.dumps(block.input) if block.input else ""


def _messages(url: str, model: str, stream: bool, tools: bool, out: Outcome) -> None:
    client = anthropic.Anthropic(base_url=url, **_options(anthropic.DefaultHttpxClient))
    extra: dict[str, Any] = {"tools": TOOLS[MESSAGES]} if tools else {}
    messages: Any = [{"role": "user", "content": PROMPT}]
    with client:
        if not stream:
            message = client.messages.create(
                model=model, max_tokens=200, messages=messages, **extra
            )
            out.ids.add(message.id)
            for block in message.content:
                _messages_block(out, block)
            out.finish = message.stop_reason
            return
        events = client.messages.create(
            model=model, max_tokens=200, messages=messages, stream=True, **extra
        )
        with events:
            out.started = True
            stop = None
            for event in events:
                if event.type == "message_start":
                    out.ids.add(event.message.id)
                elif event.type == "content_block_start":
                    if event.content_block.type == "tool_use":
                        out.tools.append((event.content_block.id, event.content_block.name))
                elif event.type == "content_block_delta":
                    delta = event.delta
                    out.text += delta.text if delta.type == "text_delta" else ""
                    out.reasoning += delta.thinking if delta.type == "thinking_delta" else ""
                    out.args += delta.partial_json if delta.type == "input_json_delta" else ""
                elif event.type == "message_delta":
                    stop = event.delta.stop_reason
                elif event.type == "message_stop":
                    out.finish = stop  # (a stop reason without message_stop is no end)


def _responses_item(out: Outcome, item: Any) -> None:
    if item.type == "message":
        out.text += "".join(p.text for p in item.content if p.type == "output_text")
    elif item.type == "reasoning":
        out.reasoning += "".join(s.text for s in item.summary)
    elif item.type == "function_call":
        out.tools.append((item.call_id, item.name))
        out.args += item.arguments


def _responses_event(out: Outcome, event: Any) -> None:
    out.sequence.append(event.sequence_number)
    kind = event.type
    if kind == "response.created":
        out.ids.add(event.response.id)
    elif kind == "response.output_text.delta":
        out.text += event.delta
    elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
        out.reasoning += event.delta
    elif kind == "response.output_item.added" and event.item.type == "function_call":
        out.tools.append((event.item.call_id, event.item.name))
    elif kind == "response.function_call_arguments.delta":
        out.args += event.delta
    elif kind == "response.completed":
        out.finish = event.response.status
    elif kind in ("response.failed", "error"):
        out.kind = "inband"
        error = event.response.error if kind == "response.failed" else event
        out.detail = f"{kind}: {getattr(error, 'message', error)}"


def _responses(url: str, model: str, stream: bool, tools: bool, out: Outcome) -> None:
    client = openai.OpenAI(base_url=url + "/v1", **_options(openai.DefaultHttpxClient))
    extra: dict[str, Any] = {"tools": TOOLS[RESPONSES]} if tools else {}
    with client:
        if not stream:
            response = client.responses.create(model=model, input=PROMPT, **extra)
            out.ids.add(response.id)
            for item in response.output:
                _responses_item(out, item)
            out.finish = response.status
            if response.status == "failed":
                out.kind, out.detail = "inband", str(response.error)
            return
        events = client.responses.create(model=model, input=PROMPT, stream=True, **extra)
        with events:
            out.started = True
            for event in events:
                _responses_event(out, event)


_CALLERS = {CHAT: _chat, MESSAGES: _messages, RESPONSES: _responses}


def _short(exc: BaseException) -> str:
    return f"{type(exc).__module__}.{type(exc).__name__}: {str(exc)[:200]}"


def call(client: str, url: str, model: str, stream: bool, tools: bool = False) -> Outcome:
    """One request of ``client``'s dialect (:data:`~.continuing_wire.CHAT`, ``MESSAGES``,
    ``RESPONSES``) for ``model`` to the gateway at ``url``, offering the upstream's tool
    when ``tools``; the answer read whole."""
    out = Outcome()
    try:
        _CALLERS[client](url, model, stream, tools, out)
    except (openai.APIStatusError, anthropic.APIStatusError) as exc:
        # anthropic raises an `event: error` mid-stream as a status error of the 200
        out.kind = "inband" if out.started else "status"
        out.status = None if out.started else exc.status_code
        out.retry_after = exc.response.headers.get("retry-after")
        out.detail = _short(exc)
    except (openai.APIConnectionError, anthropic.APIConnectionError) as exc:
        out.kind, out.detail = "failure", _short(exc)
    except (openai.APIResponseValidationError, anthropic.APIResponseValidationError) as exc:
        out.kind, out.detail = "failure", _short(exc)
    except openai.APIError as exc:  # the openai SDK's `data: {"error": ...}` mid-stream
        out.kind = "inband" if out.started else "failure"
        out.detail = _short(exc)
    except Exception as exc:  # JSONDecodeError, httpx errors: failures
        out.kind, out.detail = "failure", _short(exc)
    return out
