"""The OpenAI Chat Completions dialect (``POST /v1/chat/completions``).

Wire facts: docs/protocols.md, "Chat Completions".

A pure codec; ``DIALECT`` satisfies :class:`interlingua.dialects.base.Dialect`:

>>> from interlingua.dialects.openai_chat import DIALECT
>>> DIALECT.parse_request({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).model
'm'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...core import Request, Response
from ...errors import InterlinguaError
from .. import _common
from ..answers import chat_plainly_answered, rewrite_chat_text
from ..relay import OpenAIChatRelayCheck
from .endpoint import endpoint
from .errors import client_status, parse_error, render_error, render_stream_error
from .max_tokens import MAX_TOKENS_FIELDS, default_max_tokens_field, place_max_tokens
from .request import ask_stream, parse_request, render_request
from .response import parse_response, render_model_list, render_response
from .stream import OpenAIChatStreamDecoder, OpenAIChatStreamEncoder
from .validate import validate_request


class OpenAIChatDialect:
    """The Chat Completions codec; see :mod:`interlingua.dialects.base` for who calls what."""

    name = "openai"
    output_limit_fields: tuple[str, ...] = MAX_TOKENS_FIELDS

    def parse_request(self, body: Any) -> Request:
        """Validate and convert a client's request body (400 naming the field)."""
        return parse_request(body)

    def validate_request(self, body: dict[str, Any]) -> None:
        """The 400 ``parse_request`` would raise, without converting (passthrough)."""
        validate_request(body)

    def render_request(self, request: Request) -> dict[str, Any]:
        """The body for an OpenAI-compatible upstream."""
        return render_request(request)

    #: ``stream`` said either way; a stream with the usage chunk (True: asked here). The
    #: function itself, not a method calling it: once per request on every path.
    ask_stream = staticmethod(ask_stream)

    def drop_stream(self, body: dict[str, Any]) -> None:
        """No ``stream``, no ``stream_options``: one whole completion."""
        _common.drop_stream(body)

    def place_output_limit(self, body: dict[str, Any], field: str | None) -> None:
        """The limit in ``max_tokens`` or ``max_completion_tokens``, as the model needs."""
        place_max_tokens(body, field)

    def parse_response(self, body: Any, request: Request | None = None) -> Response:
        """An upstream's ``chat.completion`` body -> Response (``request`` unused: Chat
        carries custom calls natively)."""
        return parse_response(body)

    def render_response(self, response: Response, request: Request) -> dict[str, Any]:
        """Response -> ``chat.completion`` body for a client."""
        return render_response(response, request)

    def plainly_answered(self, body: Any) -> bool:
        """Text in ``choices[0].message.content``."""
        return chat_plainly_answered(body)

    def rewrite_text(self, body: Any, rewrite: Callable[[str], str]) -> bool:
        """``choices[0].message.content`` rewritten."""
        return rewrite_chat_text(body, rewrite)

    def stream_decoder(self, request: Request) -> OpenAIChatStreamDecoder:
        """A decoder for an upstream's chunk stream answering ``request``."""
        return OpenAIChatStreamDecoder(request)

    def stream_encoder(self, request: Request) -> OpenAIChatStreamEncoder:
        """An encoder of chunks for a client that sent ``request``."""
        return OpenAIChatStreamEncoder(request)

    def relay_check(self) -> OpenAIChatRelayCheck:
        """A check on an upstream's stream of this dialect relayed byte for byte."""
        return OpenAIChatRelayCheck()

    def parse_error(self, status: int, body: bytes, headers: dict[str, str]) -> InterlinguaError:
        """An upstream's non-2xx answer -> the error to raise."""
        return parse_error(status, body, headers)

    def render_error(self, error: InterlinguaError, request_id: str) -> tuple[int, dict[str, Any]]:
        """(HTTP status, ``{"error": {...}}``) for a client."""
        return render_error(error, request_id)

    def client_status(self, status: int) -> int:
        """An error status as an OpenAI client should see it (529 -> 503)."""
        return client_status(status)

    def endpoint(self, base_url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
        """``{base_url}/chat/completions`` and its headers (``Authorization: Bearer``)."""
        return endpoint(base_url, api_key)

    def render_model_list(self, names: list[str], created: int) -> dict[str, Any]:
        """The ``GET /v1/models`` body."""
        return render_model_list(names, created)


DIALECT = OpenAIChatDialect()

__all__ = [
    "DIALECT",
    "MAX_TOKENS_FIELDS",
    "OpenAIChatDialect",
    "OpenAIChatStreamDecoder",
    "OpenAIChatStreamEncoder",
    "client_status",
    "default_max_tokens_field",
    "endpoint",
    "parse_error",
    "parse_request",
    "parse_response",
    "place_max_tokens",
    "render_error",
    "render_model_list",
    "render_request",
    "render_response",
    "render_stream_error",
    "validate_request",
]
