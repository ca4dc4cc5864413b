"""The Anthropic Messages API (or anything that speaks it).

Requests go to ``{base_url}/v1/messages`` with ``x-api-key`` and ``anthropic-version``
(docs/protocols.md, "Messages: endpoint and headers"; the dialect's
:func:`~..dialects.anthropic.endpoint.endpoint` says how). ``base_url`` defaults to ``https://api.anthropic.com`` and is accepted with or
without a trailing ``/v1`` (the Anthropic SDK takes it without, OpenAI-style configs tend
to add it). Token counts come from ``/v1/messages/count_tokens``
(docs/protocols.md, "Messages: token counting").
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from ..config import TimeoutConfig, UpstreamConfig
from ..core import Request
from ..dialects.anthropic import DIALECT, api_root
from ..errors import UpstreamError
from ..http_pool.engines import Transports
from .http_upstream import HttpUpstream, merge_headers

__all__ = ["DEFAULT_BASE_URL", "AnthropicUpstream"]

DEFAULT_BASE_URL = "https://api.anthropic.com"


class AnthropicUpstream(HttpUpstream):
    """An Anthropic Messages upstream.

    >>> AnthropicUpstream("claude", "https://api.anthropic.com/v1/").url
    'https://api.anthropic.com/v1/messages'
    """

    #: a client's beta flags and API version matter to the same-dialect upstream
    forward_headers = ("anthropic-beta", "anthropic-version")

    def __init__(
        self,
        name: str,
        base_url: str | None = None,
        *,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: TimeoutConfig | None = None,
        transports: Transports | None = None,
    ) -> None:
        root = api_root(base_url or DEFAULT_BASE_URL)
        url, ours = DIALECT.endpoint(root, api_key)
        super().__init__(
            name,
            dialect="anthropic",
            base_url=root,
            url=url,
            headers=merge_headers(ours, headers),
            timeout=timeout,
            transports=transports,
        )
        self.count_url = DIALECT.count_tokens_url(root)

    @classmethod
    def from_config(cls, cfg: UpstreamConfig, transports: Transports | None) -> AnthropicUpstream:
        """Build from config; reads the key from ``api_key_env`` now."""
        return cls(
            cfg.name,
            cfg.base_url,
            api_key=cfg.api_key(),
            headers=cfg.headers,
            timeout=cfg.timeout,
            transports=transports,
        )

    async def count_tokens(self, request: Request) -> int | None:
        """Input tokens by Anthropic's own count; raises the upstream's error on failure."""
        body = orjson.dumps(DIALECT.render_count_tokens_request(request))
        data = await self.post_json(self.count_url, body)
        try:
            count = orjson.loads(data).get("input_tokens")
        except (ValueError, AttributeError):
            count = None
        if not isinstance(count, int) or isinstance(count, bool):
            raise UpstreamError(
                f"upstream '{self.name}' sent a token count that could not be read", status=502
            )
        return count
