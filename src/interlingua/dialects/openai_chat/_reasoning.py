"""OpenRouter's ``reasoning_details`` read as neutral reasoning, whole and streamed.

OpenRouter sends a model's reasoning as a list of details beside (or, from some
providers, instead of) the plain ``reasoning`` string (docs/protocols.md, "Chat
Completions: server extensions"). The list is the same in a message and in a stream's
deltas, where a detail's text comes in pieces. Each detail maps to neutral reasoning:

* ``reasoning.text``: its ``text`` is reasoning text, its ``signature`` the part's
  signature (Anthropic models through OpenRouter: a thinking block);
* ``reasoning.summary``: its ``summary`` is reasoning text (OpenAI's summaries);
* ``reasoning.encrypted``: its ``data`` is a part of its own, ``redacted`` (an Anthropic
  ``redacted_thinking`` block, OpenAI's encrypted reasoning);
* anything else: nothing (a whole answer still keeps every detail in its part's meta).

The text of the details is a copy of the plain field when both come: it is read only
when the answer has no plain reasoning text, so it is never counted twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any, Literal

from ...core import ReasoningPart

__all__ = ["detail_pieces", "reasoning_parts"]

Piece = tuple[Literal["text", "signature", "redacted"], str]


def detail_pieces(details: Any) -> Iterator[Piece]:
    """The non-empty text, signature and redacted payloads of ``details``, in order;
    what is not a list of detail objects gives nothing."""
    if not isinstance(details, list):
        return
    for detail in details:
        if not isinstance(detail, dict):
            continue
        kind = detail.get("type")
        if kind == "reasoning.text":
            value = detail.get("text")
            if isinstance(value, str) and value:
                yield "text", value
            value = detail.get("signature")
            if isinstance(value, str) and value:
                yield "signature", value
        elif kind == "reasoning.summary":
            value = detail.get("summary")
            if isinstance(value, str) and value:
                yield "text", value
        elif kind == "reasoning.encrypted":
            value = detail.get("data")
            if isinstance(value, str) and value:
                yield "redacted", value


def reasoning_parts(plain: str, details: Any, meta: dict[str, Any]) -> list[ReasoningPart]:
    """A whole answer's reasoning: one part for the text (``plain``, else the details'
    text) and the signature, then one redacted part per encrypted detail, as a stream of
    the same details folds; ``meta`` goes on the first part."""
    texts: list[str] = []
    signatures: list[str] = []
    redacted: list[str] = []
    for kind, value in detail_pieces(details):
        (texts if kind == "text" else signatures if kind == "signature" else redacted).append(value)
    text = plain or "".join(texts)
    parts: list[ReasoningPart] = []
    if text or signatures:
        parts.append(ReasoningPart(text, "".join(signatures) or None))
    parts += [ReasoningPart("", redacted=data) for data in redacted]
    if meta:
        parts[:1] = [replace(parts[0], meta=meta) if parts else ReasoningPart("", meta=meta)]
    return parts
