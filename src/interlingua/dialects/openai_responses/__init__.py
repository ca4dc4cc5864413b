"""The OpenAI Responses API dialect (``POST /v1/responses``).

Wire facts: docs/protocols.md, "Responses API".

Pure codecs, like :mod:`interlingua.dialects.openai_chat`: ``request`` (with ``_items``,
``_render`` and ``_tools``) converts request bodies both ways, ``response`` response
objects, ``stream`` the event stream (its decoder in ``_decoder``), ``errors`` error
bodies, ``endpoint`` builds the upstream URL and ``validate`` is the passthrough path's
fast check of a request body. ``DIALECT`` satisfies
:class:`interlingua.dialects.base.Dialect` (``get_dialect("responses")``);
``sealed`` packs reasoning into the ``encrypted_content`` tokens the gateway issues.
Stored state (``previous_response_id``) is the server's (server/responses/state.py); the
codec only echoes what it is told through ``response.STATE``.

>>> DIALECT.parse_request({"model": "m", "input": "hi"}).messages[0].parts[0].text
'hi'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...core import Request, Response
from ...errors import InterlinguaError
from .. import _common
from ..answers import responses_plainly_answered, rewrite_responses_text
from ..openai_chat.response import render_model_list
from ..relay import ResponsesRelayCheck
from .endpoint import endpoint
from .errors import client_status, parse_error, render_error
from .request import DIALECT_NAME, parse_request, render_request
from .response import parse_response, render_response
from .sealed import DEFAULT_SEALER, Sealer
from .stream import ResponsesStreamDecoder, ResponsesStreamEncoder
from .validate import validate_request


class ResponsesDialect:
    """The Responses codec; see :mod:`interlingua.dialects.base` for who calls what.

    ``sealer`` seals the reasoning a client keeps as ``encrypted_content`` and opens it on
    the next turn (:mod:`.sealed`); the gateway passes one with its configured key, so
    every worker and replica opens what another sealed. The default (``DIALECT``) has a
    random key of this process.
    """

    name = DIALECT_NAME
    output_limit_fields: tuple[str, ...] = ("max_output_tokens",)

    def __init__(self, sealer: Sealer = DEFAULT_SEALER) -> None:
        self.sealer = sealer

    def parse_request(self, body: Any) -> Request:
        """Validate and convert a client's request body (400 naming the field)."""
        return parse_request(body, self.sealer)

    def validate_request(self, body: dict[str, Any]) -> None:
        """The 400 ``parse_request`` would raise, found by a cheap walk (``validate``)."""
        validate_request(body)

    def render_request(self, request: Request) -> dict[str, Any]:
        """The body for a Responses upstream."""
        return render_request(request)

    #: ``stream`` said either way; a Responses stream reports its usage unasked, in its
    #: terminal event (the function itself: once per request on every path)
    ask_stream = staticmethod(_common.ask_stream)

    def drop_stream(self, body: dict[str, Any]) -> None:
        """No ``stream``, no ``stream_options``: one whole response."""
        _common.drop_stream(body)

    def place_output_limit(self, body: dict[str, Any], field: str | None) -> None:
        """Always ``max_output_tokens``: nothing to move."""

    def parse_response(self, body: Any, request: Request | None = None) -> Response:
        """An upstream's ``response`` object -> Response (``request`` unused)."""
        return parse_response(body)

    def render_response(self, response: Response, request: Request) -> dict[str, Any]:
        """Response -> a ``response`` object for a client."""
        return render_response(response, request, self.sealer)

    def plainly_answered(self, body: Any) -> bool:
        """Text in an ``output_text`` part of a ``message`` item."""
        return responses_plainly_answered(body)

    def rewrite_text(self, body: Any, rewrite: Callable[[str], str]) -> bool:
        """The first ``output_text`` part rewritten (added if none), and ``output_text``."""
        return rewrite_responses_text(body, rewrite)

    def stream_decoder(self, request: Request) -> ResponsesStreamDecoder:
        """A decoder for an upstream's event stream answering ``request``."""
        return ResponsesStreamDecoder(request)

    def stream_encoder(self, request: Request) -> ResponsesStreamEncoder:
        """An encoder of events for a client that sent ``request``."""
        return ResponsesStreamEncoder(request, self.sealer)

    def relay_check(self) -> ResponsesRelayCheck:
        """A check on an upstream's event stream relayed byte for byte."""
        return ResponsesRelayCheck()

    def parse_error(self, status: int, body: bytes, headers: dict[str, str]) -> InterlinguaError:
        """An upstream's non-2xx answer -> the error to raise."""
        return parse_error(status, body, headers)

    def render_error(self, error: InterlinguaError, request_id: str) -> tuple[int, dict[str, Any]]:
        """(HTTP status, ``{"error": {...}}``) for a client: the Chat shape."""
        return render_error(error, request_id)

    def client_status(self, status: int) -> int:
        """An error status as an OpenAI client should see it (529 -> 503)."""
        return client_status(status)

    def endpoint(self, base_url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
        """``{base_url}/responses`` and its headers (``Authorization: Bearer``)."""
        return endpoint(base_url, api_key)

    def render_model_list(self, names: list[str], created: int) -> dict[str, Any]:
        """The ``GET /v1/models`` body (the OpenAI list)."""
        return render_model_list(names, created)


DIALECT = ResponsesDialect()

__all__ = [
    "DIALECT",
    "ResponsesDialect",
    "ResponsesStreamDecoder",
    "ResponsesStreamEncoder",
    "Sealer",
    "parse_request",
    "parse_response",
    "render_request",
    "render_response",
]
