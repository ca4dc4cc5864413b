"""Anthropic error bodies both ways.

The wire: docs/protocols.md, "Messages: errors" and "Errors and statuses".
"""

from __future__ import annotations

import anthropic.types
import orjson
import pytest

from interlingua.dialects.anthropic import DIALECT
from interlingua.errors import (
    AuthenticationError,
    InterlinguaError,
    InvalidRequestError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
    RateLimitError,
    RequestTooLargeError,
    UnprocessableError,
    UpstreamConnectionError,
    UpstreamError,
    UpstreamTimeoutError,
)
from interlingua.sse import SSEDecoder


def wire(error_type: str, message: str = "boom") -> bytes:
    return orjson.dumps(
        {"type": "error", "error": {"type": error_type, "message": message}, "request_id": "req_1"}
    )


@pytest.mark.parametrize(
    ("status", "error_type", "cls"),
    [
        (400, "invalid_request_error", InvalidRequestError),
        (401, "authentication_error", AuthenticationError),
        (402, "billing_error", PermissionDeniedError),
        (403, "permission_error", PermissionDeniedError),
        (404, "not_found_error", NotFoundError),
        (413, "request_too_large", RequestTooLargeError),
        (429, "rate_limit_error", RateLimitError),
        (500, "api_error", UpstreamError),
        (504, "timeout_error", UpstreamTimeoutError),
        (529, "overloaded_error", OverloadedError),
        (503, "overloaded_error", OverloadedError),
        (418, "teapot_error", InvalidRequestError),
        (502, "weird_error", UpstreamError),
    ],
)
def test_parse_error_by_type_then_status(status: int, error_type: str, cls: type) -> None:
    err = DIALECT.parse_error(status, wire(error_type), {})
    assert type(err) is cls
    assert err.status == status
    assert err.message == "boom"
    assert err.upstream_type == error_type
    assert err.body["request_id"] == "req_1"


def test_parse_error_retry_after_and_relayed_headers() -> None:
    err = DIALECT.parse_error(
        429,
        wire("rate_limit_error"),
        {"Retry-After": "7", "x-should-retry": "true", "request-id": "req_9", "other": "x"},
    )
    assert err.retry_after == 7.0
    assert err.headers == {
        "retry-after": "7",
        "x-should-retry": "true",
        "upstream-request-id": "req_9",  # (relayed under that name, as every dialect's)
    }
    ms = DIALECT.parse_error(529, wire("overloaded_error"), {"retry-after-ms": "1500"})
    assert ms.retry_after == 1.5


@pytest.mark.parametrize(
    ("status", "body", "cls", "message"),
    [
        (502, b"<html>Bad Gateway</html>", UpstreamError, "<html>Bad Gateway</html>"),
        (503, b"", OverloadedError, "upstream returned HTTP 503"),
        (401, b'{"error": "bad key"}', AuthenticationError, "bad key"),
        (400, b'{"unexpected": true}', InvalidRequestError, '{"unexpected": true}'),
    ],
)
def test_parse_error_tolerates_other_bodies(
    status: int, body: bytes, cls: type, message: str
) -> None:
    err = DIALECT.parse_error(status, body, {})
    assert type(err) is cls
    assert err.message == message
    assert err.status == status


@pytest.mark.parametrize(
    ("error", "status", "error_type"),
    [
        (InvalidRequestError("bad"), 400, "invalid_request_error"),
        (UnprocessableError("bad"), 422, "invalid_request_error"),
        (AuthenticationError("no"), 401, "authentication_error"),
        (PermissionDeniedError("no"), 403, "permission_error"),
        (NotFoundError("none"), 404, "not_found_error"),
        (RequestTooLargeError("big"), 413, "request_too_large"),
        (RateLimitError("slow"), 429, "rate_limit_error"),
        (UpstreamError("x"), 500, "api_error"),
        (UpstreamConnectionError("down"), 502, "api_error"),
        (UpstreamError("x", status=400), 500, "api_error"),
        (UpstreamError("x", status=503), 529, "overloaded_error"),
        (OverloadedError("busy"), 529, "overloaded_error"),
        (OverloadedError("busy", status=503), 529, "overloaded_error"),
        (UpstreamTimeoutError("slow"), 504, "timeout_error"),
        (
            PermissionDeniedError("pay", status=402, upstream_type="billing_error"),
            402,
            "billing_error",
        ),
    ],
)
def test_render_error(error: InterlinguaError, status: int, error_type: str) -> None:
    got_status, body = DIALECT.render_error(error, "req_abc")
    assert got_status == status
    assert body == {
        "type": "error",
        "error": {"type": error_type, "message": error.message},
        "request_id": "req_abc",
    }
    if error_type != "request_too_large":  # the SDK's error union lacks this documented type
        anthropic.types.ErrorResponse.model_validate(body)


def test_parse_render_round_trip() -> None:
    for error_type in ("rate_limit_error", "overloaded_error", "not_found_error", "billing_error"):
        status = {"rate_limit_error": 429, "overloaded_error": 529, "not_found_error": 404}.get(
            error_type, 402
        )
        err = DIALECT.parse_error(status, wire(error_type, "msg"), {})
        assert DIALECT.render_error(err, "r") == (
            status,
            {"type": "error", "error": {"type": error_type, "message": "msg"}, "request_id": "r"},
        )


def test_render_stream_error() -> None:
    raw = DIALECT.render_stream_error(OverloadedError("Overloaded"))
    events = SSEDecoder().decode(raw)
    assert [e.event for e in events] == ["error"]
    assert orjson.loads(events[0].data) == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }


@pytest.mark.parametrize(
    ("status", "body", "error_type"),
    [
        # The upstream HTTP status is kept when re-wrapping; the type follows the kind
        # (docs/protocols.md, "Errors and statuses").
        (
            409,
            b'{"error":{"message":"conflict","type":"invalid_request_error"}}',
            "invalid_request_error",
        ),
        (
            422,
            b'{"error":{"message":"bad","type":"invalid_request_error"}}',
            "invalid_request_error",
        ),
        (408, b'{"error":{"message":"slow","type":"server_error"}}', "timeout_error"),
        (
            402,
            b'{"error":{"message":"pay up","type":"invalid_request_error"}}',
            "invalid_request_error",
        ),
        (418, b"teapot", "invalid_request_error"),
        (504, b"gateway timeout", "timeout_error"),
        (502, b"bad gateway", "api_error"),
        (503, b"busy", "overloaded_error"),  # 503 -> 529 toward Anthropic clients
    ],
)
def test_openai_upstream_status_is_kept_for_anthropic_clients(
    status: int, body: bytes, error_type: str
) -> None:
    from interlingua.dialects.openai_chat import DIALECT as OPENAI

    err = OPENAI.parse_error(status, body, {})
    got_status, rendered = DIALECT.render_error(err, "req_1")
    assert got_status == (529 if status == 503 else status)
    assert rendered["error"]["type"] == error_type


@pytest.mark.parametrize(
    ("error", "status", "error_type"),
    [
        (InvalidRequestError("conflict", status=409), 409, "invalid_request_error"),
        (UpstreamTimeoutError("slow", status=408), 408, "timeout_error"),
        (InvalidRequestError("ours"), 400, "invalid_request_error"),  # our own validation
        (RequestTooLargeError("ours"), 413, "request_too_large"),
        (NotFoundError("ours"), 404, "not_found_error"),
        (InvalidRequestError("odd", status=200), 400, "invalid_request_error"),  # no usable status
    ],
)
def test_render_error_keeps_the_error_status(
    error: InterlinguaError, status: int, error_type: str
) -> None:
    got_status, body = DIALECT.render_error(error, "r")
    assert (got_status, body["error"]["type"]) == (status, error_type)
    assert (
        orjson.loads(DIALECT.render_stream_error(error).split(b"data: ")[1])["error"]["type"]
        == error_type
    )
