"""Where an OpenAI Chat Completions request goes, and how it authenticates.

The one home of these wire facts (docs/protocols.md, "Chat Completions: endpoint and
headers"): the gateway's upstreams and the client both build their URLs and headers here.

>>> url, headers = endpoint("http://127.0.0.1:8000/v1/", "k")
>>> url, headers["authorization"]
('http://127.0.0.1:8000/v1/chat/completions', 'Bearer k')
"""

from __future__ import annotations

__all__ = ["endpoint"]


def endpoint(
    base_url: str, api_key: str | None, path: str = "chat/completions"
) -> tuple[str, dict[str, str]]:
    """The generation URL and the request headers (``Authorization`` only with a key).

    ``base_url`` is the API root including its version, as the OpenAI SDK takes it.
    Local servers usually need no key at all. ``path`` is the endpoint under the root:
    the Responses API shares this transport with another path
    (docs/protocols.md, "Responses: endpoint and headers").
    """
    headers = {"content-type": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    return f"{base_url.rstrip('/')}/{path}", headers
