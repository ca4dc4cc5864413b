"""Where an Anthropic Messages request goes, and how it authenticates.

The one home of these wire facts (docs/protocols.md, "Messages: endpoint and headers"):
the gateway's upstreams and the client both build their URLs and headers here.

>>> url, headers = endpoint("https://api.anthropic.com/v1/", "k")
>>> url, headers["anthropic-version"], headers["x-api-key"]
('https://api.anthropic.com/v1/messages', '2023-06-01', 'k')
"""

from __future__ import annotations

__all__ = ["ANTHROPIC_VERSION", "api_root", "count_tokens_url", "endpoint"]

ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header every request carries (required; docs/protocols.md,
"Messages: endpoint and headers")."""


def api_root(base_url: str) -> str:
    """``base_url`` without trailing slashes or ``/v1``.

    The Anthropic SDK takes the base URL without ``/v1``; OpenAI-style configs tend to add
    it, so both are accepted.

    >>> api_root("http://h:1/v1/")
    'http://h:1'
    """
    return base_url.rstrip("/").removesuffix("/v1")


def endpoint(base_url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
    """The Messages URL and the request headers (``x-api-key`` only with a key)."""
    headers = {"content-type": "application/json", "anthropic-version": ANTHROPIC_VERSION}
    if api_key:
        headers["x-api-key"] = api_key
    return f"{api_root(base_url)}/v1/messages", headers


def count_tokens_url(base_url: str) -> str:
    """The token counting URL; same headers as :func:`endpoint`.

    docs/protocols.md, "Messages: token counting".
    """
    return f"{api_root(base_url)}/v1/messages/count_tokens"
