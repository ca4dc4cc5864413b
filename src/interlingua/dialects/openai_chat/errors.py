"""OpenAI Chat error bodies <-> the neutral error tree.

Wire facts: docs/protocols.md, "Chat Completions: errors" and "Errors and statuses".

Upstream side: :func:`parse_error` turns a non-2xx answer into the right
:class:`~interlingua.errors.InterlinguaError` subclass (status kept, ``retry-after``
parsed), and :func:`error_from_payload` does the same for an in-band stream error,
where there is no status and the class comes from ``error.type``.

Client side: :func:`render_error` gives ``(status, {"error": {message, type, param,
code}})`` and :func:`render_stream_error` the in-band ``data: {"error": {...}}`` event
that the official SDK raises on mid-stream.
"""

from __future__ import annotations

from typing import Any

import orjson

from ...errors import (
    AuthenticationError,
    ErrorKind,
    InterlinguaError,
    InvalidRequestError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
    RateLimitError,
    RequestTooLargeError,
    UpstreamError,
    UpstreamTimeoutError,
    error_class_for_status,
    parse_retry_after,
)
from ...sse import encode_json_event
from ..relay import relayed_headers

__all__ = [
    "client_status",
    "error_from_payload",
    "parse_error",
    "render_error",
    "render_error_body",
    "render_stream_error",
]

_MAX_TEXT = 500

# error.type strings seen from OpenAI and OpenAI-compatible servers (some echo Anthropic
# names) -> class, for in-band errors that carry no HTTP status
# (docs/protocols.md, "Chat Completions: errors").
_CLASS_BY_TYPE: dict[str, type[InterlinguaError]] = {
    "invalid_request_error": InvalidRequestError,
    "authentication_error": AuthenticationError,
    "permission_error": PermissionDeniedError,
    "not_found_error": NotFoundError,
    "request_too_large": RequestTooLargeError,
    "rate_limit_error": RateLimitError,
    "rate_limit_exceeded": RateLimitError,
    "requests": RateLimitError,
    "tokens": RateLimitError,
    "insufficient_quota": RateLimitError,
    "server_error": UpstreamError,
    "api_error": UpstreamError,
    "overloaded_error": OverloadedError,
    "timeout_error": UpstreamTimeoutError,
}

# error.code strings that say more than error.type (401 arrives as type
# "invalid_request_error" + code "invalid_api_key"; our own 503s as "server_error" +
# "overloaded"), so they are looked at first.
_CLASS_BY_CODE: dict[str, type[InterlinguaError]] = {
    "invalid_api_key": AuthenticationError,
    "model_not_found": NotFoundError,
    "rate_limit_exceeded": RateLimitError,
    "insufficient_quota": RateLimitError,
    "overloaded": OverloadedError,
    "timeout": UpstreamTimeoutError,
}

# Neutral kind -> (OpenAI error.type, default error.code)
# (docs/protocols.md, "Chat Completions: errors").
_TYPE_BY_KIND: dict[ErrorKind, tuple[str, str | None]] = {
    ErrorKind.INVALID_REQUEST: ("invalid_request_error", None),
    ErrorKind.REQUEST_TOO_LARGE: ("invalid_request_error", "request_too_large"),
    ErrorKind.NOT_FOUND: ("invalid_request_error", "model_not_found"),
    ErrorKind.AUTHENTICATION: ("authentication_error", "invalid_api_key"),
    ErrorKind.PERMISSION: ("permission_error", None),
    ErrorKind.RATE_LIMIT: ("requests", "rate_limit_exceeded"),
    ErrorKind.UPSTREAM_ERROR: ("server_error", None),
    ErrorKind.OVERLOADED: ("server_error", "overloaded"),
    ErrorKind.TIMEOUT: ("server_error", "timeout"),
}

# Upstream error.type values that are genuine OpenAI Chat types: when an OpenAI upstream's
# error is relayed to an OpenAI client these are kept (``tokens`` vs ``requests``,
# ``insufficient_quota`` matter to clients); anything else is re-derived from the kind.
_OPENAI_TYPES = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "server_error",
        "requests",
        "tokens",
        "insufficient_quota",
    }
)


def _code_str(value: Any) -> str | None:
    """``error.code`` is usually a string; some servers send the HTTP status as an int."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str | int):
        return str(value)
    return None


def _text(body: bytes, status: int) -> str:
    text = body.decode("utf-8", errors="replace").strip()
    if not text:
        return f"upstream returned HTTP {status}"
    return text[:_MAX_TEXT]


def _fields(payload: Any, body: bytes, status: int) -> tuple[str, str | None, Any, Any]:
    """(message, type, param, code) from whatever shape the upstream used."""
    if isinstance(payload, dict):
        err = payload.get("error")
        if isinstance(err, dict):
            msg = err.get("message")
            etype = err.get("type")
            return (
                msg if isinstance(msg, str) and msg else _text(body, status),
                etype if isinstance(etype, str) else None,
                err.get("param"),
                err.get("code"),
            )
        if isinstance(err, str) and err:
            return err, None, None, payload.get("code")
        # FastAPI-style servers answer {"detail": "..."}; others {"message": "..."}.
        for key in ("message", "detail"):
            value = payload.get(key)
            if isinstance(value, str) and value:
                return value, None, None, payload.get("code")
    return _text(body, status), None, None, None


def parse_error(status: int, body: bytes, headers: dict[str, str]) -> InterlinguaError:
    """An upstream's non-2xx answer -> the error to raise.

    >>> parse_error(429, b'{"error":{"message":"slow","type":"requests"}}',
    ...             {"retry-after": "2"}).retry_after
    2.0
    """
    try:
        payload: Any = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        payload = None
    message, etype, param, code = _fields(payload, body, status)
    lowered = {k.lower(): v for k, v in headers.items()}
    cls = error_class_for_status(status)
    return cls(
        message,
        status=status,
        param=param if isinstance(param, str) else None,
        code=_code_str(code),
        retry_after=parse_retry_after(lowered),
        upstream_type=etype,
        headers=relayed_headers(lowered),
        body=payload if payload is not None else _text(body, status),
    )


def error_from_payload(error: Any) -> InterlinguaError:
    """The ``error`` value of an in-band stream event -> an error instance.

    There is no HTTP status mid-stream, so the class comes from ``error.code`` when it is
    telling (``overloaded``, ``invalid_api_key``), else from ``error.type``, else from
    ``error.code`` when a server puts a status number there (OpenRouter does); otherwise
    it is an :class:`UpstreamError`.
    """
    if not isinstance(error, dict):
        text = error if isinstance(error, str) and error else "upstream stream error"
        return UpstreamError(text, body=error)
    msg = error.get("message")
    message = msg if isinstance(msg, str) and msg else "upstream stream error"
    etype = error.get("type")
    code = error.get("code")
    cls: type[InterlinguaError] = UpstreamError
    status: int | None = None
    if isinstance(code, str) and code in _CLASS_BY_CODE:
        cls = _CLASS_BY_CODE[code]
    elif isinstance(etype, str) and etype in _CLASS_BY_TYPE:
        cls = _CLASS_BY_TYPE[etype]
    elif isinstance(code, int) and not isinstance(code, bool) and 400 <= code <= 599:
        cls = error_class_for_status(code)
        status = code
    param = error.get("param")
    return cls(
        message,
        status=status,
        param=param if isinstance(param, str) else None,
        code=_code_str(code),
        upstream_type=etype if isinstance(etype, str) else None,
        body=error,
    )


def render_error_body(error: InterlinguaError) -> dict[str, Any]:
    """The inner ``{"message", "type", "param", "code"}`` object for ``error``."""
    etype, default_code = _TYPE_BY_KIND.get(error.kind, ("server_error", None))
    if error.upstream_type in _OPENAI_TYPES:
        etype = error.upstream_type
    return {
        "message": error.message,
        "type": etype,
        "param": error.param,
        "code": error.code if error.code is not None else default_code,
    }


def client_status(status: int) -> int:
    """The HTTP status to show an OpenAI client for an error of ``status``.

    529 becomes 503: OpenAI clients know 503 as "overloaded" and nothing of 529
    (Anthropic's word for it), and the OpenAI SDK retries a 503 (docs/protocols.md,
    "Errors and statuses" and "Retries and relayed headers").

    >>> client_status(529), client_status(429)
    (503, 429)
    """
    return 503 if status == 529 else status


def render_error(error: InterlinguaError, request_id: str = "") -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) for an OpenAI client; the status as :func:`client_status`.

    ``request_id`` travels in the ``x-request-id`` header, not in OpenAI's body.
    """
    return client_status(error.status), {"error": render_error_body(error)}


def render_stream_error(error: InterlinguaError) -> bytes:
    """The in-band error event: ``data: {"error": {...}}`` with no ``event:`` line.

    As OpenAI sends it (docs/protocols.md, "Chat Completions: errors").
    """
    return encode_json_event(orjson.dumps({"error": render_error_body(error)}))
