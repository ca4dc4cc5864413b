"""Anthropic error bodies, both ways.

Wire facts: docs/protocols.md, "Messages: errors" and "Errors and statuses".

Wire shape: ``{"type": "error", "error": {"type": "<error type>", "message": "..."},
"request_id": "req_..."}``. Mid-stream the same ``{"type": "error", "error": {...}}``
object travels as an ``event: error`` SSE event (HTTP status already 200).

Parsing picks the error class from ``error.type`` first (it is more specific than the
status: ``overloaded_error`` may come with 529 or, through proxies, 503) and from the
HTTP status otherwise. Rendering picks ``error.type`` from the error's neutral ``kind``
and keeps the error's own HTTP status (docs/protocols.md, "Errors and statuses"): an
upstream 409 or 422 reaches the client as 409/422 ``invalid_request_error``, a 408 as 408
``timeout_error``. The one exception is overload: Anthropic's word for it is 529
``overloaded_error``, so a 503 becomes 529.
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

# Anthropic error.type -> our class. billing_error (402) has no neutral kind of its own;
# it is a "you may not" answer, so it becomes a permission error that keeps status 402
# and its upstream type (render_error gives it back as billing_error).
_CLASS_BY_TYPE: dict[str, type[InterlinguaError]] = {
    "invalid_request_error": InvalidRequestError,
    "authentication_error": AuthenticationError,
    "billing_error": PermissionDeniedError,
    "permission_error": PermissionDeniedError,
    "not_found_error": NotFoundError,
    "request_too_large": RequestTooLargeError,
    "rate_limit_error": RateLimitError,
    "api_error": UpstreamError,
    "timeout_error": UpstreamTimeoutError,
    "overloaded_error": OverloadedError,
}

# kind -> (Anthropic error.type, HTTP status used when the error has no usable status).
_TYPE_BY_KIND: dict[ErrorKind, tuple[str, int]] = {
    ErrorKind.INVALID_REQUEST: ("invalid_request_error", 400),
    ErrorKind.AUTHENTICATION: ("authentication_error", 401),
    ErrorKind.PERMISSION: ("permission_error", 403),
    ErrorKind.NOT_FOUND: ("not_found_error", 404),
    ErrorKind.REQUEST_TOO_LARGE: ("request_too_large", 413),
    ErrorKind.RATE_LIMIT: ("rate_limit_error", 429),
    ErrorKind.UPSTREAM_ERROR: ("api_error", 500),
    ErrorKind.OVERLOADED: ("overloaded_error", 529),
    ErrorKind.TIMEOUT: ("timeout_error", 504),
}


def error_from_type(
    error_type: str, message: str, status: int | None = None, **kwargs: Any
) -> InterlinguaError:
    """Build the error for an Anthropic ``error.type`` (used by the stream decoder too).

    Unknown types fall back to the HTTP status when there is one, else ``UpstreamError``.
    """
    cls = _CLASS_BY_TYPE.get(error_type)
    if cls is None:
        cls = error_class_for_status(status) if status is not None else UpstreamError
    return cls(message, status=status, upstream_type=error_type or None, **kwargs)


def parse_error(status: int, body: bytes, headers: dict[str, str]) -> InterlinguaError:
    """An Anthropic upstream's non-2xx answer -> the error to raise.

    The HTTP status is kept; ``retry_after`` comes from ``retry-after-ms``/``retry-after``.
    A body that is not Anthropic's JSON shape (an HTML page from a proxy, plain text)
    still yields an error of the status's class, its message taken from the text.
    """
    lower = {k.lower(): v for k, v in headers.items()}
    relayed = relayed_headers(lower)
    retry_after = parse_retry_after(lower)
    parsed: Any = None
    try:
        parsed = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        parsed = None
    error_type = ""
    message = ""
    if isinstance(parsed, dict):
        err = parsed.get("error")
        if isinstance(err, dict):
            found_type, found_message = err.get("type"), err.get("message")
            error_type = found_type if isinstance(found_type, str) else ""
            message = found_message if isinstance(found_message, str) else ""
        elif isinstance(err, str):  # some compatible servers send {"error": "text"}
            message = err
    if not message:
        text = body.decode("utf-8", "replace").strip()[:500] if body else ""
        message = text or f"upstream returned HTTP {status}"
    return error_from_type(
        error_type,
        message,
        status,
        retry_after=retry_after,
        headers=relayed,
        body=parsed if parsed is not None else body.decode("utf-8", "replace"),
    )


def _type_and_status(err: InterlinguaError) -> tuple[str, int]:
    """Anthropic's ``error.type`` (from the kind) and HTTP status (the error's own)."""
    if err.upstream_type == "billing_error":
        return "billing_error", 402  # in-band billing errors carry no status of their own
    error_type, default_status = _TYPE_BY_KIND.get(err.kind, ("api_error", 500))
    if err.kind is ErrorKind.OVERLOADED or err.status == 503:
        # An overload (529, or a 503 the classifier missed): Anthropic's own word for it
        # is overloaded_error/529, which its SDK retries.
        return "overloaded_error", 529
    status = err.status
    if not 400 <= status <= 599 or (err.kind is ErrorKind.UPSTREAM_ERROR and status < 500):
        # No usable status, or an api_error that came with a 4xx: api_error is a server
        # fault, and the SDK picks its exception class from the status alone.
        status = default_status
    return error_type, status


def render_error(err: InterlinguaError, request_id: str) -> tuple[int, dict[str, Any]]:
    """(HTTP status, body) for an Anthropic client.

    >>> render_error(RateLimitError("slow down"), "req_1")[0]
    429
    """
    error_type, status = _type_and_status(err)
    body = {
        "type": "error",
        "error": {"type": error_type, "message": err.message},
        "request_id": request_id,
    }
    return status, body


def render_stream_error(err: InterlinguaError) -> bytes:
    """The in-band ``event: error`` for a failure after the stream started (docs/protocols.md,
    "Messages: stream")."""
    error_type, _ = _type_and_status(err)
    payload = orjson.dumps({"type": "error", "error": {"type": error_type, "message": err.message}})
    return encode_json_event(payload, "error")
