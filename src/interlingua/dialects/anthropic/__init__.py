"""The Anthropic Messages dialect (``POST /v1/messages``, ``/v1/messages/count_tokens``).

``DIALECT`` is the codec object (see :mod:`interlingua.dialects.base`)::

    from interlingua.dialects.anthropic import DIALECT
    request = DIALECT.parse_request(body)          # client body -> neutral
    upstream_body = DIALECT.render_request(request) # neutral -> Anthropic upstream body

Modules: :mod:`.request` (request parse/render, content blocks), :mod:`.response`
(responses, usage, model list), :mod:`.stream` (SSE decoder/encoder), :mod:`.errors`,
:mod:`.endpoint` (URLs, headers, :data:`ANTHROPIC_VERSION`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...core import Request, Response
from ...errors import InterlinguaError
from .. import _common
from ..answers import messages_plainly_answered, rewrite_messages_text
from ..relay import AnthropicRelayCheck
from .endpoint import ANTHROPIC_VERSION, api_root, count_tokens_url, endpoint
from .errors import parse_error, render_error, render_stream_error
from .render import render_count_tokens_request, render_request
from .request import parse_count_tokens_request, parse_request
from .response import parse_response, render_model_list, render_response
from .stream import AnthropicStreamDecoder, AnthropicStreamEncoder
from .validate import validate_request


class AnthropicDialect:
    """The Anthropic Messages codec; stateless, one shared instance (:data:`DIALECT`)."""

    name = "anthropic"
    output_limit_fields: tuple[str, ...] = ("max_tokens",)

    def parse_request(self, body: Any) -> Request:
        """A ``/v1/messages`` body -> neutral request (400 with ``param`` when invalid)."""
        return parse_request(body)

    def parse_count_tokens_request(self, body: Any) -> Request:
        """A ``/v1/messages/count_tokens`` body (no ``max_tokens``/``stream``) -> request."""
        return parse_count_tokens_request(body)

    def validate_request(self, body: dict[str, Any]) -> None:
        """The 400 ``parse_request`` would raise, without converting (passthrough)."""
        validate_request(body)

    def render_request(self, request: Request) -> dict[str, Any]:
        """Neutral request -> the body for an Anthropic upstream."""
        return render_request(request)

    #: ``stream`` said either way; a Messages stream reports its usage unasked (the
    #: function itself: once per request on every path)
    ask_stream = staticmethod(_common.ask_stream)

    def drop_stream(self, body: dict[str, Any]) -> None:
        """No ``stream``: one whole message."""
        _common.drop_stream(body)

    def place_output_limit(self, body: dict[str, Any], field: str | None) -> None:
        """Always ``max_tokens``: nothing to move."""

    def render_count_tokens_request(self, request: Request) -> dict[str, Any]:
        """Neutral request -> the body for an upstream ``/v1/messages/count_tokens``."""
        return render_count_tokens_request(request)

    def parse_response(self, body: Any, request: Request | None = None) -> Response:
        """An Anthropic upstream's message -> neutral response (``request``, the one sent,
        turns calls of custom tools back into custom calls)."""
        return parse_response(body, request)

    def render_response(self, response: Response, request: Request) -> dict[str, Any]:
        """Neutral response -> the message body for an Anthropic client."""
        return render_response(response, request)

    def plainly_answered(self, body: Any) -> bool:
        """Text in a ``text`` block."""
        return messages_plainly_answered(body)

    def rewrite_text(self, body: Any, rewrite: Callable[[str], str]) -> bool:
        """The first ``text`` block rewritten (one added after the thinking if none)."""
        return rewrite_messages_text(body, rewrite)

    def stream_decoder(self, request: Request) -> AnthropicStreamDecoder:
        """A decoder for one Anthropic upstream stream."""
        return AnthropicStreamDecoder(request)

    def stream_encoder(self, request: Request) -> AnthropicStreamEncoder:
        """An encoder for one stream to an Anthropic client."""
        return AnthropicStreamEncoder(request)

    def relay_check(self) -> AnthropicRelayCheck:
        """A check on an upstream's stream of this dialect relayed byte for byte."""
        return AnthropicRelayCheck()

    def parse_error(self, status: int, body: bytes, headers: dict[str, str]) -> InterlinguaError:
        """An Anthropic upstream's error answer -> the error to raise."""
        return parse_error(status, body, headers)

    def render_error(self, error: InterlinguaError, request_id: str) -> tuple[int, dict[str, Any]]:
        """(status, body) of an error for an Anthropic client."""
        return render_error(error, request_id)

    def client_status(self, status: int) -> int:
        """An error status as an Anthropic client should see it: unchanged."""
        return status

    def endpoint(self, base_url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
        """``/v1/messages`` under ``base_url`` (with or without ``/v1``) and its headers."""
        return endpoint(base_url, api_key)

    def count_tokens_url(self, base_url: str) -> str:
        """``/v1/messages/count_tokens`` under ``base_url``; :meth:`endpoint`'s headers."""
        return count_tokens_url(base_url)

    def render_stream_error(self, error: InterlinguaError) -> bytes:
        """The in-band ``event: error`` for a failure after streaming began."""
        return render_stream_error(error)

    def render_model_list(self, names: list[str], created: int) -> dict[str, Any]:
        """``GET /v1/models`` in Anthropic's shape."""
        return render_model_list(names, created)


DIALECT = AnthropicDialect()
"""The shared Anthropic codec instance."""

__all__ = [
    "ANTHROPIC_VERSION",
    "DIALECT",
    "AnthropicDialect",
    "AnthropicStreamDecoder",
    "AnthropicStreamEncoder",
    "api_root",
    "validate_request",
]
