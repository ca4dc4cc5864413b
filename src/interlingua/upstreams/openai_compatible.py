"""Any server speaking OpenAI Chat Completions: vLLM, llama.cpp, Ollama, LM Studio, NIM,
OpenRouter, OpenAI itself.

``base_url`` is the API root including its version, as the OpenAI SDK takes it
(``http://127.0.0.1:8000/v1``); requests go to ``{base_url}/chat/completions`` with
``Authorization: Bearer <key>`` when a key is configured
(docs/protocols.md, "Chat Completions: endpoint and headers"; the dialect's
:func:`~..dialects.openai_chat.endpoint.endpoint` says how). Local servers usually need
no key at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

from ..config import ConfigError, TimeoutConfig, UpstreamConfig
from ..dialects import Dialect
from ..dialects.openai_chat import DIALECT, MAX_TOKENS_FIELDS, place_max_tokens
from ..http_pool.engines import Transports
from .base import RawResponse
from .http_upstream import HttpUpstream, merge_headers

__all__ = ["MAX_TOKENS_FIELDS", "OpenAICompatibleUpstream", "check_options"]


class OpenAICompatibleUpstream(HttpUpstream):
    """An OpenAI Chat Completions upstream.

    >>> OpenAICompatibleUpstream("vllm", "http://127.0.0.1:8000/v1/").url
    'http://127.0.0.1:8000/v1/chat/completions'

    A subclass for another OpenAI API on the same root sets ``codec`` (its URL, headers
    and wire) and ``kind`` (its config name): upstreams/openai_responses.py.
    """

    codec: ClassVar[Dialect] = DIALECT
    kind: ClassVar[str] = "openai"

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: TimeoutConfig | None = None,
        transports: Transports | None = None,
        max_tokens_field: str | None = None,
    ) -> None:
        if max_tokens_field is not None and max_tokens_field not in MAX_TOKENS_FIELDS:
            raise ValueError(f"max_tokens_field must be one of {MAX_TOKENS_FIELDS}")
        #: the field every Chat body's output limit goes in; None: chosen by model name
        #: (:mod:`interlingua.dialects.openai_chat.max_tokens`)
        self.max_tokens_field = max_tokens_field
        url, ours = self.codec.endpoint(base_url, api_key)
        super().__init__(
            name,
            dialect=self.codec.name,
            base_url=base_url.rstrip("/"),
            url=url,
            headers=merge_headers(ours, headers),
            timeout=timeout,
            transports=transports,
        )

    @classmethod
    def from_config(cls, cfg: UpstreamConfig, transports: Transports | None) -> Self:
        """Build from config; reads the key from ``api_key_env`` now."""
        # Also when called directly, not through the registry (which checks first).
        base_url = check_options(cfg, f"upstreams.{cfg.name}", cls.kind)
        return cls(
            cfg.name,
            base_url,
            api_key=cfg.api_key(),
            headers=cfg.headers,
            timeout=cfg.timeout,
            transports=transports,
            max_tokens_field=cfg.options.get("max_tokens_field"),
        )

    async def embed(self, body: bytes, headers: Mapping[str, str]) -> RawResponse:
        """``POST {base_url}/embeddings``, the answer relayed as it came (the same API
        root serves Chat, Responses and Embeddings)."""
        return await self.relay_json(self.base_url + "/embeddings", body, headers, _has_data)

    async def complete_text(
        self, body: bytes, stream: bool, headers: Mapping[str, str]
    ) -> RawResponse:
        """``POST {base_url}/completions``, relayed as a Chat passthrough is (the same
        API root serves text completions on servers that have them: OpenAI, vLLM,
        llama.cpp)."""
        return await self.relay_text_completion(body, stream, headers)

    def adjust_body(self, body: dict[str, Any]) -> None:
        """A Chat body's output limit in the field this upstream takes: ``max_tokens_field``
        when configured, else by model name (o-series and gpt-5 models refuse
        ``max_tokens``); on every path, passthrough included."""
        if self.codec is DIALECT:
            place_max_tokens(body, self.max_tokens_field)


def _has_data(data: bytes) -> bool:
    """Whether a 2xx body looks like an Embeddings answer (a JSON object with ``data``),
    judged without parsing it: anything else is the upstream's fault (a 502), not a
    body for the client's SDK to fail on."""
    return data.lstrip()[:1] == b"{" and b'"data"' in data


def check_options(cfg: UpstreamConfig, where: str, kind: str = "openai") -> str:
    """The registry's check of an ``openai`` (or ``responses``) entry; returns its
    ``base_url``, which the kind requires (there is no default server to talk to)."""
    if not cfg.base_url:
        raise ConfigError(f"{where}.base_url: required for kind {kind}")
    field = cfg.options.get("max_tokens_field")
    if field is not None and field not in MAX_TOKENS_FIELDS:
        raise ConfigError(
            f"{where}.max_tokens_field: expected one of {', '.join(MAX_TOKENS_FIELDS)}, "
            f"got {field!r}"
        )
    return cfg.base_url
