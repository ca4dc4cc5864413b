"""The request that asks a candidate to carry on with a broken answer.

The client's request, plus the assistant's words so far (:func:`.splice.prefix_parts`),
in the way the candidate's upstream continues a turn (``continue_with``,
:mod:`interlingua.upstreams.prefill`):

* ``prefill``: the words are the conversation's last message, the assistant's, and the
  model carries on from its last token (the upstream renders it its own way: vLLM's
  ``continue_final_message``, Anthropic's prefill, the local engine's prompt cut after
  the words). Anthropic refuses a prefill that ends in whitespace: that whitespace is
  cut, and the continuation's repeat of it dropped (:class:`.splice.Splice`).
* ``instruct``: the words are a finished assistant turn, and a user turn asks the model
  to go on exactly where it stopped. Any chat model takes it; it is best effort (a model
  may repeat itself), so it is never chosen unless the operator set it.

With no words yet (the break came before any text, or inside the first reasoning) the
request is the client's own: the candidate answers afresh, after what was sent.
"""

from __future__ import annotations

from ...core import Message, Request, replace_request
from ...core.parts import TextPart
from ...upstreams.prefill import CONTINUE_INSTRUCTION, with_prefill
from .splice import AnswerSoFar, prefix_parts

__all__ = ["continuation_request"]

#: the upstream dialects that refuse a prefill ending in whitespace
_TRIMMED = frozenset({"anthropic"})


def continuation_request(
    request: Request, answer: AnswerSoFar, mode: str, dialect: str | None
) -> tuple[Request, str]:
    """``request`` continued after ``answer`` in ``mode`` (``prefill`` or ``instruct``)
    for an upstream of ``dialect``; and the whitespace the words lost at their end."""
    parts, trimmed = prefix_parts(answer, trim_end=mode == "prefill" and dialect in _TRIMMED)
    if not parts:
        return request, trimmed
    said = Message(role="assistant", parts=parts)
    if mode == "prefill":
        return with_prefill(replace_request(request, messages=(*request.messages, said))), trimmed
    ask = Message(role="user", parts=(TextPart(CONTINUE_INSTRUCTION),))
    return replace_request(request, messages=(*request.messages, said, ask)), trimmed
