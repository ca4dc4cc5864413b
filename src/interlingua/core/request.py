"""The neutral request: what every dialect's request parses into and renders from.

A request is a sequence of :class:`Message` values plus generation settings. System
prompts are messages with ``role="system"`` (the top-level Anthropic ``system`` becomes
the first of them); a renderer for a dialect with a single system slot hoists them all,
in order. Tool results are :class:`ToolResultPart` values inside a ``user`` message, as
in Anthropic; the OpenAI codec splits them into ``role: tool`` messages.

Field drop policy (docs/mapping.md, "2. The drop policy", has the complete lists): a
request is rejected with a 400 only when the target dialect cannot serve it meaningfully
-- n > 1, input the model would never see (audio and other unsupported content parts,
unsupported image or document types), history it cannot carry (tool-call arguments that
are not a JSON object), and the settings a caller asked for by name and would silently
not get: ``logprobs`` / ``top_logprobs``, audio output, ``min_p`` and
``repetition_penalty`` (and ``top_k`` toward the Responses API) where the target has no
such parameter. A model's ``drop_params`` in the gateway (or ``drop_unsupported=True``
on the client) turns such a refusal into a silent drop. Everything else a target cannot
express is dropped silently: settings that only tune sampling or are advisory (seed,
penalties, metadata, ...), and output extras the target cannot produce (prediction,
verbosity, web_search_options, the json_object response format toward Anthropic, custom
and server tools) -- the response then simply lacks them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from .frozen import quick_init, replacer
from .parts import Meta, Part, _no_meta

Role: TypeAlias = Literal["system", "user", "assistant"]


@quick_init
@dataclass(frozen=True, slots=True)
class Message:
    """One turn. ``name`` is OpenAI's optional participant name."""

    role: Role
    parts: tuple[Part, ...]
    name: str | None = None
    meta: Meta = field(default_factory=_no_meta, compare=False)


@quick_init
@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A client tool definition. ``parameters`` is the JSON Schema, passed through intact.

    ``kind`` is ``function`` (arguments are a JSON object per ``parameters``) or
    ``custom`` (the OpenAI Responses API's free-form tools, e.g. Codex's ``apply_patch``:
    the input is raw text, optionally constrained by ``format``, the client's
    ``{"type": "text"}`` or ``{"type": "grammar", "syntax": ..., "definition": ...}``).
    A dialect without custom tools offers one as a function with a single string
    parameter and turns its call back into a custom call.
    """

    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    meta: Meta = field(default_factory=_no_meta, compare=False)
    kind: Literal["function", "custom"] = "function"
    format: dict[str, Any] | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class ToolChoice:
    """How the model may use tools: ``auto`` | ``required`` | ``none`` | ``tool`` (named)."""

    mode: Literal["auto", "required", "none", "tool"]
    name: str | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class ResponseFormat:
    """Structured output: ``json_object`` or ``json_schema`` (with ``schema``)."""

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = None
    schema: dict[str, Any] | None = None
    strict: bool | None = None
    description: str | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class Reasoning:
    """A request for reasoning. ``effort`` is OpenAI's scale, ``budget_tokens`` Anthropic's.

    ``enabled=False`` means the caller explicitly turned reasoning off.
    """

    enabled: bool = True
    effort: str | None = None
    budget_tokens: int | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class Request:
    """A chat request in neutral form.

    ``extra`` holds fields of the source dialect that have no neutral meaning; a renderer
    for the *same* dialect passes them through, any other renderer ignores them (the
    documented drop policy).
    """

    model: str
    messages: tuple[Message, ...]
    max_tokens: int | None = None
    stream: bool = False
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    seed: int | None = None
    stop: tuple[str, ...] = ()
    user: str | None = None
    metadata: dict[str, Any] | None = None
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    reasoning: Reasoning | None = None
    include_usage: bool = False
    #: per-token log probabilities of the answer (``TextPart.logprobs``), with the
    #: ``top_logprobs`` most likely alternatives at each position
    logprobs: bool = False
    top_logprobs: int | None = None
    #: samplers of vLLM / llama.cpp (OpenAI-compatible servers take them in the body)
    min_p: float | None = None
    repetition_penalty: float | None = None
    #: audio output (Chat ``modalities: ["text", "audio"]``): the ``audio`` settings,
    #: ``{"voice", "format"}``; None for a text-only answer
    output_audio: dict[str, Any] | None = None
    source_dialect: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def system_text(self) -> str:
        """All system messages' text, joined by blank lines (for single-slot dialects)."""
        from .parts import TextPart

        return "\n\n".join(
            "".join(p.text for p in m.parts if isinstance(p, TextPart))
            for m in self.messages
            if m.role == "system"
        )


#: the settings a codec refuses toward an API without them (docstring above), by the
#: wire name its 400 gives in ``param``, and the neutral fields that dropping one clears
#: (``logprobs`` takes ``top_logprobs`` with it; ``modalities`` / ``audio``: audio output)
REFUSABLE_SETTINGS: dict[str, dict[str, Any]] = {
    "logprobs": {"logprobs": False, "top_logprobs": None},
    "top_logprobs": {"top_logprobs": None},
    "top_k": {"top_k": None},
    "min_p": {"min_p": None},
    "repetition_penalty": {"repetition_penalty": None},
    "modalities": {"output_audio": None},
    "audio": {"output_audio": None},
}


def drop_settings(request: Request, params: Iterable[str]) -> Request:
    """``request`` without the refusable settings named in ``params`` (wire names; the
    others are ignored); ``request`` itself when none of them is set.

    >>> drop_settings(Request("m", (), min_p=0.1), ["min_p"]).min_p is None
    True
    """
    changes: dict[str, Any] = {}
    for param in params:
        for name, cleared in REFUSABLE_SETTINGS.get(param, {}).items():
            if getattr(request, name) != cleared:
                changes[name] = cleared
    return replace_request(request, **changes) if changes else request


#: ``dataclasses.replace(request, **changes)``, faster (the request path copies requests)
replace_request: Callable[..., Request] = replacer(Request)
