"""dialects/answers.py: an answer body's text, found and rewritten where each dialect puts
it (the client's quick judging of an answer; the batch runner's --fold-reasoning)."""

from __future__ import annotations

from typing import Any

from interlingua.dialects import get_dialect


def _chat(text: str | None) -> dict[str, Any]:
    message = {"role": "assistant", "content": text}
    return {"id": "chatcmpl-1", "object": "chat.completion", "choices": [{"message": message}]}


def plainly_answered(dialect: str, body: Any) -> bool:
    return get_dialect(dialect).plainly_answered(body)


def test_plainly_answered_looks_only_where_each_dialect_puts_text() -> None:
    chat = _chat("hi")
    assert plainly_answered("openai", chat)
    assert not plainly_answered("openai", _chat(""))
    assert not plainly_answered("openai", {**chat, "error": {"message": "x"}})
    assert plainly_answered("anthropic", {"content": [{"type": "text", "text": "hi"}]})
    assert not plainly_answered("anthropic", {"content": [{"type": "thinking", "thinking": "t"}]})
    message = {"type": "message", "content": [{"type": "output_text", "text": "hi"}]}
    assert plainly_answered("responses", {"output": [{"type": "reasoning"}, message]})
    for odd in (None, [], {"choices": []}, {"content": "text"}, {"output": [1]}):
        for dialect in ("openai", "anthropic", "responses"):
            assert not plainly_answered(dialect, odd)


def test_rewrite_text_finds_the_text_or_adds_it() -> None:
    def loud(text: str) -> str:
        return text.upper() + "!"

    chat = {"choices": [{"message": {"content": [{"type": "text", "text": "a"}, {"text": "b"}]}}]}
    assert get_dialect("openai").rewrite_text(chat, loud)
    assert chat["choices"][0]["message"]["content"] == "AB!"
    messages = {"content": [{"type": "thinking"}, {"type": "text", "text": "x"}]}
    assert get_dialect("anthropic").rewrite_text(messages, loud)
    assert messages["content"][1] == {"type": "text", "text": "X!"}
    responses: dict[str, Any] = {"output": [], "output_text": "y"}
    assert get_dialect("responses").rewrite_text(responses, loud)
    assert responses["output"][0]["content"][0]["text"] == "!"
    assert responses["output_text"] == "Y!"
    for odd in (None, {"choices": []}, {"content": "text"}, {"output": "x"}):
        for dialect in ("openai", "anthropic", "responses"):
            assert not get_dialect(dialect).rewrite_text(odd, loud)


def test_output_limit_fields() -> None:
    assert get_dialect("openai").output_limit_fields == ("max_tokens", "max_completion_tokens")
    assert get_dialect("anthropic").output_limit_fields == ("max_tokens",)
    assert get_dialect("responses").output_limit_fields == ("max_output_tokens",)
