"""The ``local`` upstream with ``embedding: true``: an embedding model served in process.

Config::

    upstreams:
      embedder:
        kind: local
        path: /models/bge-small-en-v1.5-q8_0.gguf
        embedding: true
        n_ctx: 512         # an input's token limit (default 512, BERT-family models' own)
        n_threads: 2       # default: half the cores this process may use

It answers ``POST /v1/embeddings`` (:meth:`LocalEmbeddingUpstream.embed`) with the API's
JSON, in the encoding the request asks for; generation requests are refused with a 400
(an embedding model writes no text). Strings are tokenized with the model's special tokens;
token-id inputs are taken as the model's own ids. ``dimensions`` other than the model's
own length is a 400 naming it (the model's vectors are not truncatable in general).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping

import orjson

from ...config import ConfigError, UpstreamConfig
from ...core import Request, Response, StreamEvent
from ...dialects.embeddings import check_request, render_embeddings
from ...errors import InvalidRequestError
from ..base import RawResponse, Upstream
from .embedder import LlamaEmbedder
from .kind import bundled_model_path

__all__ = ["LocalEmbeddingUpstream"]

_JSON = {"content-type": "application/json"}


class LocalEmbeddingUpstream(Upstream):
    """A GGUF embedding model run by llama.cpp (see the module docstring)."""

    dialect = None
    model_kind = "embedding"

    def __init__(self, name: str, embedder: LlamaEmbedder) -> None:
        super().__init__(name)
        self.embedder = embedder

    @classmethod
    def from_config(cls, cfg: UpstreamConfig) -> LocalEmbeddingUpstream:
        """Build from a checked ``local`` entry with ``embedding: true``."""
        where = f"upstreams.{cfg.name}"
        options = cfg.options
        try:
            path = options.get("path") or bundled_model_path(options.get("bundled") or "")
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if not os.path.isfile(path):
            raise ConfigError(f"{where}.path: no such model file: {path}")
        embedder = LlamaEmbedder(
            path, n_ctx=options.get("n_ctx"), n_threads=options.get("n_threads")
        )
        return cls(cfg.name, embedder)

    async def start(self) -> None:
        """Load the model off the event loop (also done on first use)."""
        if not self.embedder.loaded:
            await asyncio.to_thread(self.embedder.load)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.embedder.close)

    async def embed(self, body: bytes, headers: Mapping[str, str]) -> RawResponse:
        """The vectors of the body's inputs, as the Embeddings API answers them."""
        await self.start()
        request = orjson.loads(body)
        inputs = check_request(request)
        embedder = self.embedder
        dimensions = request.get("dimensions")
        if dimensions is not None and dimensions != embedder.n_embd:
            raise InvalidRequestError(
                f"Model {request.get('model')!r} (upstream '{self.name}') does not support "
                f"'dimensions' = {dimensions}: its embeddings have {embedder.n_embd} "
                "dimensions.",
                param="dimensions",
                code="invalid_value",
            )
        tokens = [embedder.tokenize(item) if isinstance(item, str) else item for item in inputs]
        vectors = await embedder.embed(tokens)
        used = sum(map(len, tokens))
        encoding = request.get("encoding_format") or "float"
        answer = render_embeddings(vectors, str(request.get("model")), used, encoding)
        return RawResponse(200, dict(_JSON), body=orjson.dumps(answer))

    async def complete(self, request: Request) -> Response:
        raise self._not_generative()

    def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        raise self._not_generative()

    def _not_generative(self) -> InvalidRequestError:
        return InvalidRequestError(
            f"upstream '{self.name}' is an embedding model (embedding: true): it answers "
            "/v1/embeddings only",
            param="model",
            code="model_not_supported",
        )
