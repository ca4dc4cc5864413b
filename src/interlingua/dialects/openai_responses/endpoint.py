"""Where an OpenAI Responses request goes, and how it authenticates.

The same transport as Chat Completions, Bearer auth, under another path
(docs/protocols.md, "Responses: endpoint and headers").

>>> url, headers = endpoint("https://api.openai.com/v1/", "k")
>>> url, headers["authorization"]
('https://api.openai.com/v1/responses', 'Bearer k')
"""

from __future__ import annotations

from ..openai_chat.endpoint import endpoint as _openai_endpoint

__all__ = ["endpoint"]


def endpoint(base_url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
    """The generation URL and the request headers (``Authorization`` only with a key).

    ``base_url`` is the API root including its version, as the OpenAI SDK takes it.
    """
    return _openai_endpoint(base_url, api_key, "responses")
