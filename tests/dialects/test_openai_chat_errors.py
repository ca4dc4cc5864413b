"""OpenAI Chat error codec: upstream bodies -> error tree, error tree -> client bodies."""

from __future__ import annotations

import json

import openai
import pytest

from interlingua.dialects.openai_chat import DIALECT, parse_error, render_error, render_stream_error
from interlingua.dialects.openai_chat.errors import error_from_payload
from interlingua.errors import (
    AuthenticationError,
    ErrorKind,
    InterlinguaError,
    InvalidRequestError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
    RateLimitError,
    RequestTooLargeError,
    UnprocessableError,
    UpstreamError,
    UpstreamTimeoutError,
)
from interlingua.sse import SSEDecoder


def test_parse_openai_body() -> None:
    body = b'{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}'
    err = parse_error(401, body, {"x-request-id": "req_1"})
    assert isinstance(err, AuthenticationError)
    assert (err.status, err.message, err.code, err.upstream_type, err.param) == (
        401,
        "Incorrect API key provided",
        "invalid_api_key",
        "invalid_request_error",
        None,
    )
    assert err.body == json.loads(body)


def test_parse_keeps_param_and_class_by_status() -> None:
    body = b'{"error":{"message":"bad","type":"invalid_request_error","param":"messages[0]","code":null}}'
    err = DIALECT.parse_error(400, body, {})
    assert type(err) is InvalidRequestError
    assert (err.param, err.code) == ("messages[0]", None)


@pytest.mark.parametrize(
    ("status", "cls"),
    [
        (403, PermissionDeniedError),
        (404, NotFoundError),
        (413, RequestTooLargeError),
        (422, UnprocessableError),
        (429, RateLimitError),
        (500, UpstreamError),
        (502, UpstreamError),
        (503, OverloadedError),
        (504, UpstreamTimeoutError),
        (529, OverloadedError),
        (418, InvalidRequestError),
    ],
)
def test_parse_status_to_class(status: int, cls: type[InterlinguaError]) -> None:
    err = parse_error(status, b'{"error":{"message":"m","type":"x"}}', {})
    assert type(err) is cls
    assert err.status == status  # 503 stays 503 (an OverloadedError with its own status)


def test_retry_after_headers() -> None:
    err = parse_error(429, b"{}", {"retry-after": "7", "content-length": "2"})
    assert err.retry_after == 7.0
    assert err.headers == {"retry-after": "7"}
    err = parse_error(429, b"{}", {"Retry-After-Ms": "1500", "x-should-retry": "true"})
    assert err.retry_after == 1.5
    assert err.headers == {"retry-after-ms": "1500", "x-should-retry": "true"}
    assert parse_error(429, b"{}", {}).retry_after is None


def test_non_json_body_is_truncated_text() -> None:
    html = b"<html>" + b"x" * 2000 + b"</html>"
    err = parse_error(502, html, {})
    assert isinstance(err, UpstreamError)
    assert len(err.message) == 500 and err.message.startswith("<html>")
    assert parse_error(500, b"", {}).message == "upstream returned HTTP 500"
    assert parse_error(500, "d\u00e9j\u00e0 vu".encode(), {}).message == "d\u00e9j\u00e0 vu"


@pytest.mark.parametrize(
    ("body", "message", "code"),
    [
        (b'{"detail":"Not Found"}', "Not Found", None),
        (b'{"message":"model is loading","code":503}', "model is loading", "503"),
        (b'{"error":"plain string error"}', "plain string error", None),
        (b'{"error":{"type":"server_error"}}', '{"error":{"type":"server_error"}}', None),
        (b"[1,2]", "[1,2]", None),
    ],
)
def test_parse_other_shapes(body: bytes, message: str, code: str | None) -> None:
    err = parse_error(503, body, {})
    assert (err.message, err.code) == (message, code)


@pytest.mark.parametrize(
    ("error", "status", "etype", "code"),
    [
        (InvalidRequestError("m", param="messages[1].content"), 400, "invalid_request_error", None),
        (UnprocessableError("m"), 422, "invalid_request_error", None),
        (RequestTooLargeError("m"), 413, "invalid_request_error", "request_too_large"),
        (NotFoundError("m"), 404, "invalid_request_error", "model_not_found"),
        (AuthenticationError("m"), 401, "authentication_error", "invalid_api_key"),
        (PermissionDeniedError("m"), 403, "permission_error", None),
        (RateLimitError("m"), 429, "requests", "rate_limit_exceeded"),
        (UpstreamError("m"), 500, "server_error", None),
        (UpstreamError("m", status=502), 502, "server_error", None),
        (OverloadedError("m"), 503, "server_error", "overloaded"),
        (OverloadedError("m", status=503), 503, "server_error", "overloaded"),
        (UpstreamTimeoutError("m"), 504, "server_error", "timeout"),
        # An upstream's status is kept when re-wrapping, only 529 -> 503
        # (docs/protocols.md, "Errors and statuses").
        (InvalidRequestError("m", status=409), 409, "invalid_request_error", None),
        (InvalidRequestError("m", status=402), 402, "invalid_request_error", None),
        (UpstreamTimeoutError("m", status=408), 408, "server_error", "timeout"),
    ],
)
def test_render_error(error: InterlinguaError, status: int, etype: str, code: str | None) -> None:
    got_status, body = render_error(error, "req_1")
    assert got_status == status
    assert body == {"error": {"message": "m", "type": etype, "param": error.param, "code": code}}


def test_render_keeps_explicit_code_and_openai_upstream_type() -> None:
    err = RateLimitError("quota", code="insufficient_quota", upstream_type="insufficient_quota")
    assert DIALECT.render_error(err, "r")[1]["error"] == {
        "message": "quota",
        "type": "insufficient_quota",
        "param": None,
        "code": "insufficient_quota",
    }
    # An Anthropic type name is not an OpenAI one: re-derived from the kind.
    busy = OverloadedError("busy", upstream_type="overloaded_error")
    assert render_error(busy)[1]["error"]["type"] == "server_error"


def test_parse_render_round_trip_through_openai_shape() -> None:
    body = b'{"error":{"message":"Rate limit reached","type":"tokens","param":null,"code":"rate_limit_exceeded"}}'
    status, rendered = render_error(parse_error(429, body, {}))
    assert status == 429 and rendered == json.loads(body)


def test_render_stream_error_event() -> None:
    raw = render_stream_error(OverloadedError("Overloaded"))
    assert raw == (
        b'data: {"error":{"message":"Overloaded","type":"server_error","param":null,"code":"overloaded"}}\n\n'
    )
    (event,) = SSEDecoder().decode(raw)
    # no event: line, as OpenAI does (docs/protocols.md, "Chat Completions: errors")
    assert event.event == "message"
    error = json.loads(event.data)["error"]
    sdk_error = openai.APIError(error["message"], request=None, body=error)  # type: ignore[arg-type]
    assert sdk_error.code == "overloaded" and sdk_error.type == "server_error"


@pytest.mark.parametrize(
    ("payload", "kind"),
    [
        ({"message": "m", "type": "server_error", "code": "overloaded"}, ErrorKind.OVERLOADED),
        (
            {"message": "m", "type": "invalid_request_error", "code": "invalid_api_key"},
            ErrorKind.AUTHENTICATION,
        ),
        ({"message": "m", "type": "tokens", "code": "rate_limit_exceeded"}, ErrorKind.RATE_LIMIT),
        ({"message": "m", "type": "invalid_request_error"}, ErrorKind.INVALID_REQUEST),
        ({"message": "m", "type": "overloaded_error"}, ErrorKind.OVERLOADED),
        ({"message": "m", "code": 429}, ErrorKind.RATE_LIMIT),
        ({"message": "m", "code": 502}, ErrorKind.UPSTREAM_ERROR),
        ({"message": "m", "type": "mystery"}, ErrorKind.UPSTREAM_ERROR),
        ("just text", ErrorKind.UPSTREAM_ERROR),
    ],
)
def test_error_from_in_band_payload(payload: object, kind: ErrorKind) -> None:
    err = error_from_payload(payload)
    assert err.kind is kind
    assert err.message in ("m", "just text")


def test_in_band_status_code_is_kept() -> None:
    assert error_from_payload({"message": "m", "code": 502}).status == 502
