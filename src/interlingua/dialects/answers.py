"""An answer body's text, found and rewritten where each dialect puts it, without the codec.

Two callers look at a decoded answer body without reading it whole:

* the client judges a 2xx answer (an empty one is retried): when the text is where the
  dialect puts it, the answer is plainly an answer and the codec's full reading can wait
  (:func:`chat_plainly_answered` and its siblings: a quick look, False means "read it");
* the batch runner's ``--fold-reasoning`` rewrites the text of a body it writes out as
  the server sent it (:func:`rewrite_chat_text` and its siblings).

Where the text is:

* Chat Completions -- ``choices[0].message.content`` (a few servers answer with a list of
  parts: their texts, joined);
* Messages -- the first ``text`` block; a rewrite adds one after the thinking when the
  answer has none (a model that spent ``max_tokens`` thinking);
* Responses -- the first ``output_text`` part of the first ``message`` item (likewise
  added when missing), and the top-level ``output_text`` some servers add.

Each dialect's :class:`~.base.Dialect` object offers its pair as ``plainly_answered`` and
``rewrite_text``. Pure: bodies in, bodies changed in place, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "Rewrite",
    "chat_plainly_answered",
    "messages_plainly_answered",
    "responses_plainly_answered",
    "rewrite_chat_text",
    "rewrite_messages_text",
    "rewrite_responses_text",
]

#: what a rewrite does to the answer's text (its old text in, the new one out)
Rewrite = Callable[[str], str]

# What a body of another shape raises when looked at the quick way (the codec judges it).
_OTHER_SHAPE = (KeyError, IndexError, TypeError)


def chat_plainly_answered(body: Any) -> bool:
    """Whether a Chat Completions body holds text in its first choice's message.

    >>> chat_plainly_answered({"choices": [{"message": {"content": "hi"}}]})
    True
    """
    try:
        if "error" in body:
            return False
        content = body["choices"][0]["message"]["content"]
        return type(content) is str and content != ""
    except _OTHER_SHAPE:
        return False


def messages_plainly_answered(body: Any) -> bool:
    """Whether a Messages body holds a ``text`` block with some text."""
    try:
        return any(b["type"] == "text" and b["text"] for b in body["content"])
    except _OTHER_SHAPE:
        return False


def responses_plainly_answered(body: Any) -> bool:
    """Whether a Responses body holds an ``output_text`` part with some text."""
    try:
        return any(
            c["type"] == "output_text" and c["text"]
            for item in body["output"]
            if item["type"] == "message"
            for c in item["content"]
        )
    except _OTHER_SHAPE:
        return False


def rewrite_chat_text(body: Any, rewrite: Rewrite) -> bool:
    """Rewrite a Chat Completions body's text in place; whether there was a message."""
    if not isinstance(body, dict):
        return False
    choices = body.get("choices")
    message = choices[0].get("message") if isinstance(choices, list) and choices else None
    if not isinstance(message, dict):
        return False
    content = message.get("content")
    if isinstance(content, list):  # a few servers answer with a part list
        content = "".join(c.get("text") or "" for c in content if isinstance(c, dict))
    message["content"] = rewrite(content if isinstance(content, str) else "")
    return True


def rewrite_messages_text(body: Any, rewrite: Rewrite) -> bool:
    """Rewrite a Messages body's first text block in place (one added after the thinking
    when there is none); whether the body had content blocks."""
    blocks = body.get("content") if isinstance(body, dict) else None
    if not isinstance(blocks, list):
        return False
    for block in blocks:
        if isinstance(block, dict) and block.get("type") == "text":
            block["text"] = rewrite(str(block.get("text") or ""))
            return True
    after = max(
        (
            i + 1
            for i, b in enumerate(blocks)
            if isinstance(b, dict) and "thinking" in str(b.get("type"))
        ),
        default=0,
    )
    blocks.insert(after, {"type": "text", "text": rewrite("")})
    return True


def rewrite_responses_text(body: Any, rewrite: Rewrite) -> bool:
    """Rewrite a Responses body's first ``output_text`` part in place (a message item and
    the part added when missing), and its top-level ``output_text`` when it has one;
    whether the body had an output list."""
    output = body.get("output") if isinstance(body, dict) else None
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
    part["text"] = rewrite(str(part.get("text") or ""))
    if isinstance(body.get("output_text"), str):
        body["output_text"] = rewrite(body["output_text"])
    return True
