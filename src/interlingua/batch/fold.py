"""``--fold-reasoning``: an output body's reasoning written into its text.

Data pipelines built on datastudio's BaseAPI read one string per answer, the reasoning in
front of it as ``<think>\\n{reasoning}\\n</think>\\n\\n{text}``
(:func:`~interlingua.client.fold_reasoning`). With ``--fold-reasoning`` the runner writes
each successful body so: the text of the answer, in the body's own dialect, becomes the
folded text; everything else (the reasoning fields themselves, usage, ids) stays as the
server sent it. A body without reasoning is left byte for byte.

Where the text is, per dialect:

* ``openai`` -- ``choices[0].message.content``;
* ``anthropic`` -- the first ``text`` block (one is added after the thinking when the
  answer has none, e.g. a model that spent ``max_tokens`` thinking);
* ``responses`` -- the first ``output_text`` part of the first ``message`` item (likewise
  added when missing), and the top-level ``output_text`` some servers add.
"""

from __future__ import annotations

from typing import Any

from ..client import fold_reasoning

__all__ = ["fold_body"]


def fold_body(dialect: str, body: Any, reasoning: str) -> bool:
    """Fold ``reasoning`` into ``body``'s text in place; whether anything changed."""
    if not reasoning or not isinstance(body, dict):
        return False
    if dialect == "openai":
        return _fold_chat(body, reasoning)
    if dialect == "anthropic":
        return _fold_messages(body, reasoning)
    return _fold_responses(body, reasoning)


def _fold_chat(body: dict[str, Any], reasoning: str) -> bool:
    choices = body.get("choices")
    message = choices[0].get("message") if isinstance(choices, list) and choices else None
    if not isinstance(message, dict):
        return False
    content = message.get("content")
    if isinstance(content, list):  # a few servers answer with a part list
        content = "".join(c.get("text") or "" for c in content if isinstance(c, dict))
    message["content"] = fold_reasoning(reasoning, content if isinstance(content, str) else "")
    return True


def _fold_messages(body: dict[str, Any], reasoning: str) -> bool:
    blocks = body.get("content")
    if not isinstance(blocks, list):
        return False
    for block in blocks:
        if isinstance(block, dict) and block.get("type") == "text":
            block["text"] = fold_reasoning(reasoning, str(block.get("text") or ""))
            return True
    after = max(
        (
            i + 1
            for i, b in enumerate(blocks)
            if isinstance(b, dict) and "thinking" in str(b.get("type"))
        ),
        default=0,
    )
    blocks.insert(after, {"type": "text", "text": fold_reasoning(reasoning, "")})
    return True


def _fold_responses(body: dict[str, Any], reasoning: str) -> bool:
    output = body.get("output")
    if not isinstance(output, list):
        return False
    message = next((i for i in output if isinstance(i, dict) and i.get("type") == "message"), None)
    if message is None:
        message = {"type": "message", "role": "assistant", "status": "completed", "content": []}
        output.append(message)
    content = message.get("content")
    if not isinstance(content, list):
        content = message["content"] = []
    part = next(
        (c for c in content if isinstance(c, dict) and c.get("type") == "output_text"), None
    )
    if part is None:
        part = {"type": "output_text", "text": "", "annotations": []}
        content.insert(0, part)
    text = str(part.get("text") or "")
    part["text"] = fold_reasoning(reasoning, text)
    if isinstance(body.get("output_text"), str):
        body["output_text"] = fold_reasoning(reasoning, body["output_text"])
    return True
