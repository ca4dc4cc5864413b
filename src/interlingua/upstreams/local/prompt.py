"""A neutral request -> the local model's chat messages, sampler settings and grammar.

The model sees plain chat turns (``{"role", "content"}`` strings) rendered by its own
chat template. What a small text-only model cannot take is refused with a 400 rather
than silently dropped (the drop policy of ``core/request.py``: dropping it would change
the answer): images, audio and binary documents, and audio output. Tool calls and results in the history become
text in the Hermes ``<tool_call>`` / ``<tool_response>`` format of
:mod:`interlingua.text.tool_prompt`, the format the tools prompt teaches.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import replace
from typing import Any

import orjson
from llama_cpp.llama_grammar import JSON_GBNF, LlamaGrammar

from ...core import (
    AudioPart,
    DocumentPart,
    ImagePart,
    Message,
    ReasoningPart,
    Request,
    ResponseFormat,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from ...errors import InvalidRequestError
from ...text.tool_prompt import (
    apply_text_tools,
    render_tool_call,
    render_tool_history,
    render_tool_result,
)
from .engine import Sampling

__all__ = ["chat_messages", "check_supported", "for_text_model", "grammar_for", "sampling_for"]

# Settings the neutral request has no field for: OpenAI-dialect clients send them in the
# body and they arrive in ``Request.extra`` (``min_p`` has a neutral field too, and
# ``repeat_penalty`` is llama.cpp's name of the neutral ``repetition_penalty``).
_EXTRA_FLOATS = ("min_p", "repeat_penalty", "frequency_penalty", "presence_penalty")
_MAX_TOP_LOGPROBS = 20  # OpenAI's bound; llama.cpp's server takes any n_probs


def for_text_model(request: Request, text_tool_calls: bool) -> Request:
    """``request`` with tools described in the system prompt and tool history as text.

    With ``text_tool_calls`` off the tools are not offered, but earlier calls and results
    in the conversation are still shown as text (the model must see what happened).
    """
    if request.tools and text_tool_calls:
        return apply_text_tools(request)
    return replace(request, messages=render_tool_history(request.messages))


def chat_messages(request: Request) -> list[dict[str, str]]:
    """The chat-template messages: one system turn first, then the other turns as text.

    All system messages are joined into one leading system turn (many templates accept
    it only there); consecutive turns of one role are merged (some templates insist on
    alternation). Reasoning from earlier turns is left out, as chat templates do.
    """
    system: list[str] = []
    turns: list[dict[str, str]] = []
    for i, message in enumerate(request.messages):
        text = _message_text(message, i)
        if message.role == "system":
            if text:
                system.append(text)
        elif turns and turns[-1]["role"] == message.role:
            turns[-1]["content"] += "\n\n" + text
        else:
            turns.append({"role": message.role, "content": text})
    if system:
        turns.insert(0, {"role": "system", "content": "\n\n".join(system)})
    return turns


def _message_text(message: Message, index: int) -> str:
    pieces: list[str] = []
    for j, part in enumerate(message.parts):
        where = f"messages[{index}].content[{j}]"
        if isinstance(part, TextPart):
            pieces.append(part.text)
        elif isinstance(part, ImagePart):
            raise InvalidRequestError("this model does not accept images", param=where)
        elif isinstance(part, AudioPart):
            raise InvalidRequestError(f"{where}: this model does not accept audio", param=where)
        elif isinstance(part, DocumentPart):
            pieces.append(_document_text(part, where))
        elif isinstance(part, ToolCallPart):
            # for_text_model() renders these already; a caller that skipped it still
            # gets them as text rather than an error.
            pieces.append(render_tool_call(part.name, part.arguments))
        elif isinstance(part, ToolResultPart):
            pieces.append(render_tool_result(part))
        elif isinstance(part, ReasoningPart):
            continue
        # UnknownPart: another dialect's block with no meaning for a local model.
    return "".join(pieces)


def _document_text(part: DocumentPart, where: str) -> str:
    """A text document's content (titled); binary documents are refused."""
    text = part.text
    if text is None and part.data is not None and (part.media_type or "").startswith("text/"):
        try:
            text = base64.b64decode(part.data, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            raise InvalidRequestError(
                "document data is not base64-encoded UTF-8 text", param=where
            ) from None
    if text is None:
        kind = part.media_type or ("a URL" if part.url else "binary")
        raise InvalidRequestError(
            f"this model accepts only text documents, not {kind}", param=where
        )
    return f"{part.title}\n\n{text}" if part.title else text


def check_supported(request: Request) -> None:
    """Refuse settings whose silent drop would change what the caller gets back.

    OpenAI's ``n`` (several choices) arrives in ``Request.extra``: one model instance
    generates one answer per request, and a client asking for three would get one.
    """
    n = request.extra.get("n")
    if n is not None and n != 1:
        raise InvalidRequestError(
            "this model generates one choice per request: 'n' must be 1", param="n"
        )
    if request.output_audio is not None:
        raise InvalidRequestError(
            "audio output is not supported by this model (it writes text only)",
            param="modalities",
        )
    top = request.top_logprobs
    if top is not None and not 0 <= top <= _MAX_TOP_LOGPROBS:
        raise InvalidRequestError(
            f"'top_logprobs' must be between 0 and {_MAX_TOP_LOGPROBS}", param="top_logprobs"
        )


def sampling_for(request: Request, grammar: Any = None) -> Sampling:
    """Sampler settings from the request; what it leaves out keeps :class:`Sampling`'s default."""
    defaults = Sampling()
    extra = {key: _number(request.extra[key], key) for key in _EXTRA_FLOATS if key in request.extra}
    return Sampling(
        temperature=_or(request.temperature, defaults.temperature),
        top_p=_or(request.top_p, defaults.top_p),
        top_k=_or(request.top_k, defaults.top_k),
        min_p=_or(request.min_p, extra.get("min_p", defaults.min_p)),
        repeat_penalty=_or(
            request.repetition_penalty, extra.get("repeat_penalty", defaults.repeat_penalty)
        ),
        frequency_penalty=extra.get("frequency_penalty", defaults.frequency_penalty),
        presence_penalty=extra.get("presence_penalty", defaults.presence_penalty),
        seed=request.seed,
        grammar=grammar,
    )


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def _number(value: Any, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequestError(f"Invalid type for '{key}': expected a number.", param=key)
    return float(value)


def grammar_for(response_format: ResponseFormat | None) -> LlamaGrammar | None:
    """The llama.cpp grammar that enforces ``response_format`` (None for plain text).

    ``json_object`` -> any JSON object; ``json_schema`` -> llama.cpp's schema-to-grammar
    conversion. A schema it cannot convert is the caller's 400, not our 500.
    """
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object" or response_format.schema is None:
        return LlamaGrammar.from_string(JSON_GBNF, verbose=False)
    try:
        return LlamaGrammar.from_json_schema(
            orjson.dumps(response_format.schema).decode(), verbose=False
        )
    except Exception as exc:  # the converter raises bare Exceptions/ValueErrors
        raise InvalidRequestError(
            f"response_format: this JSON schema cannot be enforced locally: {exc}",
            param="response_format",
        ) from None
