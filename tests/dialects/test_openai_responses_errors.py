"""OpenAI Responses errors and endpoint: the Chat body shape, 529 -> 503, `/responses`."""

from __future__ import annotations

import pytest

from interlingua.dialects.openai_chat import errors as chat_errors
from interlingua.dialects.openai_responses.endpoint import endpoint
from interlingua.dialects.openai_responses.errors import client_status, parse_error, render_error
from interlingua.errors import (
    AuthenticationError,
    InvalidRequestError,
    NotFoundError,
    OverloadedError,
    RateLimitError,
    UpstreamError,
)


@pytest.mark.parametrize(
    ("error", "status", "etype", "code"),
    [
        (InvalidRequestError("bad", param="input[3].call_id"), 400, "invalid_request_error", None),
        (AuthenticationError("no", status=401), 401, "authentication_error", "invalid_api_key"),
        (NotFoundError("gone", status=404), 404, "invalid_request_error", "model_not_found"),
        (RateLimitError("slow", status=429), 429, "requests", "rate_limit_exceeded"),
        (UpstreamError("boom", status=500), 500, "server_error", None),
        (OverloadedError("busy", status=529), 503, "server_error", "overloaded"),
    ],
)
def test_render_error_uses_the_chat_body_shape(
    error: Exception, status: int, etype: str, code: str | None
) -> None:
    got_status, body = render_error(error)  # type: ignore[arg-type]
    assert got_status == status
    assert body == {
        "error": {"message": str(error.args[0]), "type": etype, "param": error.param, "code": code}
    }  # type: ignore[attr-defined]


def test_the_param_names_the_clients_field() -> None:
    _, body = render_error(InvalidRequestError("x", param="input[3].call_id"))
    assert body["error"]["param"] == "input[3].call_id"


def test_client_status_turns_529_into_503() -> None:
    assert [client_status(s) for s in (400, 429, 500, 529)] == [400, 429, 500, 503]


def test_parse_error_classifies_and_keeps_retry_headers() -> None:
    err = parse_error(
        429,
        b'{"error":{"message":"Rate limit reached","type":"tokens","param":null,"code":"rate_limit_exceeded"}}',
        {"Retry-After": "3", "x-request-id": "req_1"},
    )
    assert isinstance(err, RateLimitError)
    assert (err.status, err.retry_after, err.code, err.upstream_type) == (
        429,
        3.0,
        "rate_limit_exceeded",
        "tokens",
    )
    # the upstream's request id is relayed too, renamed (every dialect's errors alike)
    assert err.headers == {"retry-after": "3", "upstream-request-id": "req_1"}
    # relayed to a Responses client, OpenAI's own type survives
    assert render_error(err)[1]["error"]["type"] == "tokens"


def test_parse_error_of_a_non_json_body() -> None:
    err = parse_error(502, b"<html>Bad gateway</html>", {})
    assert isinstance(err, UpstreamError) and err.message == "<html>Bad gateway</html>"


def test_the_functions_are_the_chat_codecs() -> None:
    assert render_error is chat_errors.render_error
    assert parse_error is chat_errors.parse_error


@pytest.mark.parametrize("base", ["https://api.openai.com/v1", "https://api.openai.com/v1/"])
def test_endpoint(base: str) -> None:
    url, headers = endpoint(base, "sk-1")
    assert url == "https://api.openai.com/v1/responses"
    assert headers == {"content-type": "application/json", "authorization": "Bearer sk-1"}


@pytest.mark.parametrize("key", [None, ""])
def test_endpoint_without_a_key_has_no_auth_header(key: str | None) -> None:
    assert endpoint("http://h/v1", key) == (
        "http://h/v1/responses",
        {"content-type": "application/json"},
    )
