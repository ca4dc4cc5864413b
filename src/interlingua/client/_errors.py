"""The client's exceptions: one class per HTTP status, plus transport failures.

    APIError                         status, body, request_id, headers
    ├── APIStatusError               the server answered with a non-2xx status
    │   ├── BadRequestError          400
    │   ├── AuthenticationError      401
    │   ├── PermissionDeniedError    403
    │   ├── NotFoundError            404
    │   ├── ConflictError            409
    │   ├── UnprocessableEntityError 422
    │   ├── RateLimitError           429
    │   └── InternalServerError      >= 500
    │       └── OverloadedError      503, 529
    ├── AnswerError                  a 2xx answer that is not an answer (status 200)
    │   ├── EmptyAnswerError         no text, no tool call, no refusal
    │   └── UnreadableAnswerError    a body (or stream) the dialect cannot read
    └── APIConnectionError           no answer: cannot connect, connection dropped
        └── APITimeoutError          no answer in time

Every error that ends a call carries ``attempts``: the attempts made, retries included.

Messages say what happened *and* what to do about it ("cannot reach
http://127.0.0.1:9/v1: connection refused — is the server running?"), because these are
read by a person staring at a failed batch. The names match the official SDKs', so code
written against those catches the same things here.

Other client errors live next to what raises them: ``ImageInputError`` in ``_inputs``,
``JSONExtractionError`` / ``ToolArgumentsError`` / ``StructuredOutputError`` in
``_outputs``, ``MaxTurnsError`` in ``_tools``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..errors import MALFORMED_TOOL_CALL, InterlinguaError

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIStatusError",
    "APITimeoutError",
    "AnswerError",
    "AuthenticationError",
    "BadRequestError",
    "ConflictError",
    "EmptyAnswerError",
    "InternalServerError",
    "NotFoundError",
    "OverloadedError",
    "PermissionDeniedError",
    "RateLimitError",
    "UnprocessableEntityError",
    "UnreadableAnswerError",
    "error_for_status",
]


class APIError(Exception):
    """Base of every error from a call. ``status`` is None when no answer came at all.

    ``body`` is the decoded JSON error body (or its text); ``request_id`` the server's
    ``x-request-id`` / ``request-id``; ``kind`` the neutral error kind when known;
    ``attempts`` the attempts the call made before giving up (set by the retry loop).
    """

    retryable: ClassVar[bool] = False
    hint: ClassVar[str] = ""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        body: Any = None,
        request_id: str | None = None,
        headers: dict[str, str] | None = None,
        code: str | None = None,
        kind: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.body = body
        self.request_id = request_id
        self.headers = headers or {}
        self.code = code
        self.kind = kind
        self.attempts = 1

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, status={self.status})"


class APIStatusError(APIError):
    """The server answered with an error status."""


class BadRequestError(APIStatusError):
    """400: the server rejected the request as malformed."""

    hint = "the request was rejected; check the parameters named in the message"


class AuthenticationError(APIStatusError):
    """401: missing or wrong API key."""

    hint = "check the api_key passed to the client"


class PermissionDeniedError(APIStatusError):
    """403: the key may not use this model or endpoint."""

    hint = "the API key is not allowed to use this model or endpoint"


class NotFoundError(APIStatusError):
    """404: unknown model or URL."""

    hint = (
        "check the model name and the base_url (OpenAI-style base URLs end in /v1; "
        "Anthropic-style ones do not)"
    )


class ConflictError(APIStatusError):
    """409: a conflicting concurrent operation; retried automatically."""

    hint = "a conflicting operation was in progress (retried up to max_retries times)"


class UnprocessableEntityError(APIStatusError):
    """422: well-formed but semantically invalid request."""

    hint = "the request was understood but invalid; check the parameters"


class RateLimitError(APIStatusError):
    """429: too many requests or tokens; retried automatically, honouring Retry-After."""

    hint = (
        "rate limited (retried up to max_retries times, honouring Retry-After); lower the "
        "concurrency or set rate_limit=RateLimit(...) on the client"
    )


class InternalServerError(APIStatusError):
    """>= 500: the server failed; retried automatically."""

    hint = (
        "the server failed (retried up to max_retries times); check the server's logs "
        "if it persists"
    )


class OverloadedError(InternalServerError):
    """503 / 529: the server is overloaded; retried automatically."""

    hint = (
        "the server is overloaded (retried up to max_retries times); lower the "
        "concurrency or try again later"
    )


class AnswerError(APIError):
    """A 2xx answer that is not an answer. ``retry`` says whether the retry loop may
    repeat the call (``retry_on_empty``); ``result`` is the :class:`ChatResult` when the
    body could be read."""

    def __init__(self, message: str, *, retry: bool = False, result: Any = None, **kw: Any):
        super().__init__(message, status=kw.pop("status", 200), **kw)
        self.retry = retry
        self.result = result


class EmptyAnswerError(AnswerError):
    """A 2xx answer with no text, no tool call and no refusal (reasoning alone is not an
    answer); retried within ``max_retries`` when ``retry_on_empty`` is on."""


class UnreadableAnswerError(AnswerError):
    """A 2xx body the dialect cannot read (not JSON, not a chat answer, a tool call with
    no name); retried once when ``retry_on_empty`` is on. Also a stream whose tool call
    cannot be read (never retried: part of it was delivered)."""


class APIConnectionError(APIError):
    """No answer: could not connect, or the connection dropped mid-answer."""

    retryable = True


class APITimeoutError(APIConnectionError):
    """No answer in time (connect or read timeout)."""


_BY_STATUS: dict[int, type[APIStatusError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    409: ConflictError,
    422: UnprocessableEntityError,
    429: RateLimitError,
    503: OverloadedError,
    529: OverloadedError,
}


def error_class(status: int) -> type[APIStatusError]:
    """The class for an HTTP status (other 4xx -> APIStatusError, 5xx -> InternalServerError)."""
    cls = _BY_STATUS.get(status)
    if cls is not None:
        return cls
    return InternalServerError if status >= 500 else APIStatusError


def error_for_status(
    status: int,
    parsed: InterlinguaError,
    *,
    url: str,
    request_id: str | None,
    headers: dict[str, str],
) -> APIStatusError:
    """The typed error for a non-2xx answer, from what the dialect codec parsed of it.

    The message reads ``HTTP 429 from <url>: <server message> — <what to do>``.
    """
    cls = error_class(status)
    text = f"HTTP {status} from {url}: {parsed.message}"
    if cls.hint:
        text += f" — {cls.hint}"
    if request_id:
        text += f" (request id {request_id})"
    return cls(
        text,
        status=status,
        body=parsed.body,
        request_id=request_id,
        headers=headers,
        code=parsed.code,
        kind=str(parsed.kind),
    )


def error_from_stream(parsed: InterlinguaError, *, url: str, request_id: str | None) -> APIError:
    """The typed error for an error the server sent in-band, after the stream began.

    A malformed tool call (found in the stream by the dialect's decoder, or by a gateway
    between, which names it by its code) is what a whole answer's is: an
    :class:`UnreadableAnswerError`, not a server failure to retry."""
    if parsed.code == MALFORMED_TOOL_CALL:
        return UnreadableAnswerError(
            f"{url} streamed an answer that could not be read: {parsed.message}",
            body=parsed.body,
            request_id=request_id,
            code=parsed.code,
            kind="invalid_response",
        )
    status = parsed.status
    cls: type[APIError] = error_class(status) if status >= 400 else APIStatusError
    text = f"error in the stream from {url}: {parsed.message}"
    if cls.hint:
        text += f" — {cls.hint}"
    return cls(
        text,
        status=status,
        body=parsed.body,
        request_id=request_id,
        code=parsed.code,
        kind=str(parsed.kind),
    )
