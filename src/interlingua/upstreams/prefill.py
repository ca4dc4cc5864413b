"""How an upstream is asked to carry on an answer another upstream broke off.

When a stream breaks after its first byte and the model says ``on_stream_break:
continue``, the gateway asks the next candidate to finish the same assistant turn. An
upstream's ``continue_with`` (docs/config.md, "Continuing a broken stream") says how:

* ``prefill`` -- the original request plus the partial answer as a trailing assistant
  message, marked with :data:`PREFILL` in ``Request.extra`` (:func:`with_prefill`). Every
  upstream takes the marker out before it renders (:func:`take_prefill`: a same-dialect
  renderer re-emits ``Request.extra`` keys, and the marker must never reach a wire) and
  says it in its own way: an OpenAI Chat body gets vLLM's two fields
  (:func:`prefill_fields`), Anthropic and Responses send the trailing assistant message
  as it is, the local engine cuts its prompt right after the partial text.
* ``instruct`` -- the partial answer as a finished assistant turn, then a user turn
  saying :data:`CONTINUE_INSTRUCTION`; no marker (any chat model takes it; best effort).
* ``none`` -- the upstream does not continue.

``auto`` is resolved by kind when the registry builds the upstream
(:func:`continue_mode`): ``prefill`` where the kind is known to continue a trailing
assistant message, ``none`` elsewhere (an OpenAI-compatible server may or may not: the
operator says ``prefill`` for vLLM and llama.cpp).
"""

from __future__ import annotations

from typing import Any

from ..config import UpstreamConfig
from ..core import Request, replace_request

__all__ = [
    "CONTINUE_INSTRUCTION",
    "PREFILL",
    "PREFILL_KINDS",
    "continue_mode",
    "prefill_fields",
    "take_prefill",
    "with_prefill",
]

#: the ``Request.extra`` key saying "the last message is a partial answer to carry on"
#: (never rendered on a wire)
PREFILL = "interlingua.prefill"

#: the kinds ``continue_with: auto`` continues with a prefill: the local engine cuts its
#: own prompt, Anthropic's Messages API takes a trailing assistant message as its prefill,
#: and the scripted upstream does what it is told
PREFILL_KINDS = frozenset({"local", "anthropic", "fake"})

#: the user turn of an ``instruct`` continuation, after the partial answer
CONTINUE_INSTRUCTION = (
    "Your previous message was cut off. Continue it exactly where it stopped, from the "
    "next character on: do not repeat anything already written, and add no preamble, "
    "comment or summary."
)

# vLLM's way of continuing the final message (its chat template renders no end of turn
# after it and no new assistant header); llama.cpp's server continues a trailing assistant
# message by itself and ignores both.
_CHAT_PREFILL_FIELDS: dict[str, Any] = {
    "continue_final_message": True,
    "add_generation_prompt": False,
}


def continue_mode(config: UpstreamConfig) -> str:
    """``prefill``, ``instruct`` or ``none``: the upstream's ``continue_with``, with
    ``auto`` resolved by its kind (:data:`PREFILL_KINDS`)."""
    if config.continue_with != "auto":
        return config.continue_with
    return "prefill" if config.kind in PREFILL_KINDS else "none"


def with_prefill(request: Request) -> Request:
    """``request`` marked as a prefill: its last message (the assistant's partial answer)
    is to be carried on, not answered."""
    return replace_request(request, extra={**request.extra, PREFILL: True})


def take_prefill(request: Request) -> tuple[Request, bool]:
    """``request`` without the :data:`PREFILL` marker, and whether it was there. A marked
    request whose last message is not the assistant's is no prefill (nothing to carry
    on): the marker is dropped and False returned."""
    if not request.extra or PREFILL not in request.extra:
        return request, False
    extra = {k: v for k, v in request.extra.items() if k != PREFILL}
    request = replace_request(request, extra=extra)
    return request, bool(request.messages) and request.messages[-1].role == "assistant"


def prefill_fields(dialect: str | None) -> dict[str, Any]:
    """What a body of wire ``dialect`` gets on top of the trailing assistant message to
    say "continue it": vLLM's two fields for OpenAI Chat, nothing for the others (a new
    dict: the caller may merge it into a body)."""
    return dict(_CHAT_PREFILL_FIELDS) if dialect == "openai" else {}
