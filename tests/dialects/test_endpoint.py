"""Each dialect's wire facts: generation URL, auth headers, client-visible status."""

from __future__ import annotations

import pytest

from interlingua.dialects import get_dialect
from interlingua.dialects.anthropic import ANTHROPIC_VERSION
from interlingua.dialects.anthropic import DIALECT as ANTHROPIC
from interlingua.dialects.openai_chat import DIALECT as OPENAI
from interlingua.errors import OverloadedError


@pytest.mark.parametrize("base", ["http://h:1/v1", "http://h:1/v1/", "http://h:1/v1//"])
def test_openai_endpoint_appends_chat_completions_to_the_versioned_root(base: str) -> None:
    url, headers = OPENAI.endpoint(base, "sk-1")
    assert url == "http://h:1/v1/chat/completions"
    assert headers == {"content-type": "application/json", "authorization": "Bearer sk-1"}


@pytest.mark.parametrize("key", [None, ""])
def test_no_key_means_no_auth_header(key: str | None) -> None:
    assert OPENAI.endpoint("http://h", key)[1] == {"content-type": "application/json"}
    assert ANTHROPIC.endpoint("http://h", key)[1] == {
        "content-type": "application/json",
        "anthropic-version": ANTHROPIC_VERSION,
    }


@pytest.mark.parametrize("base", ["http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/"])
def test_anthropic_endpoint_accepts_base_with_or_without_v1(base: str) -> None:
    url, headers = ANTHROPIC.endpoint(base, "k")
    assert url == "http://h:1/v1/messages"
    assert headers == {
        "content-type": "application/json",
        "anthropic-version": "2023-06-01",
        "x-api-key": "k",
    }
    assert ANTHROPIC.count_tokens_url(base) == "http://h:1/v1/messages/count_tokens"


@pytest.mark.parametrize(("dialect", "status", "shown"), [
    ("openai", 529, 503), ("openai", 503, 503), ("openai", 429, 429),
    ("anthropic", 529, 529), ("anthropic", 503, 503),
])  # fmt: skip
def test_client_status(dialect: str, status: int, shown: int) -> None:
    assert get_dialect(dialect).client_status(status) == shown


def test_render_error_uses_client_status() -> None:
    assert OPENAI.render_error(OverloadedError("busy", status=529), "r")[0] == 503
