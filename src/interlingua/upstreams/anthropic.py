"""The Anthropic Messages API (or anything that speaks it).

Requests go to ``{base_url}/v1/messages`` with ``x-api-key`` and ``anthropic-version:
2023-06-01`` (PROTOCOLS.md 2.1). ``base_url`` defaults to ``https://api.anthropic.com``
and is accepted with or without a trailing ``/v1`` (the Anthropic SDK takes it without,
OpenAI-style configs tend to add it). Token counts come from
``/v1/messages/count_tokens`` (PROTOCOLS.md 2.7).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import aiohttp
import orjson

from ..config import TimeoutConfig, UpstreamConfig
from ..core import Request
from ..errors import UpstreamError
from .http import HttpUpstream, merge_headers

__all__ = ["DEFAULT_BASE_URL", "AnthropicUpstream"]

DEFAULT_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
# The body fields count_tokens accepts (PROTOCOLS.md 2.7); it rejects max_tokens/stream.
_COUNT_FIELDS = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "thinking",
        "output_config",
        "cache_control",
    }
)


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
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        root = (base_url or DEFAULT_BASE_URL).rstrip("/")
        root = root.removesuffix("/v1")
        ours = {"content-type": "application/json", "anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            ours["x-api-key"] = api_key
        super().__init__(
            name,
            dialect="anthropic",
            base_url=root,
            url=f"{root}/v1/messages",
            headers=merge_headers(ours, headers),
            timeout=timeout,
            session=session,
        )
        self.count_url = f"{root}/v1/messages/count_tokens"

    @classmethod
    def from_config(
        cls, cfg: UpstreamConfig, session: aiohttp.ClientSession | None
    ) -> AnthropicUpstream:
        """Build from config; reads the key from ``api_key_env`` now."""
        return cls(
            cfg.name,
            cfg.base_url,
            api_key=cfg.api_key(),
            headers=cfg.headers,
            timeout=cfg.timeout,
            session=session,
        )

    async def count_tokens(self, request: Request) -> int | None:
        """Input tokens by Anthropic's own count; raises the upstream's error on failure."""
        wire = self.codec.render_request(replace(request, stream=False))
        body = orjson.dumps({k: v for k, v in wire.items() if k in _COUNT_FIELDS})
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
