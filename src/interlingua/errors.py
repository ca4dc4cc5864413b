"""One exception tree for the whole package.

Every error knows its HTTP status and a neutral ``kind``; dialects only *render* it in
their own shape (``{"error": {...}}`` for OpenAI, ``{"type": "error", ...}`` for
Anthropic), and handlers never choose status codes.

    InterlinguaError                      (kind, status)
    ├── InvalidRequestError               invalid_request      400
    │   └── UnprocessableError            invalid_request      422
    ├── AuthenticationError               authentication       401
    ├── PermissionDeniedError             permission           403
    ├── NotFoundError                     not_found            404
    ├── RequestTooLargeError              request_too_large    413
    ├── RateLimitError                    rate_limit           429
    ├── UpstreamError                     upstream_error       500/502 (any other upstream 5xx)
    │   ├── UpstreamConnectionError       upstream_error       502 (could not reach it)
    │   └── MalformedToolCallError        upstream_error       502 (a call no client can use)
    ├── OverloadedError                   overloaded           529 (rendered 503 to OpenAI)
    └── UpstreamTimeoutError              timeout              504

Transport failures (``UpstreamConnectionError``, ``UpstreamTimeoutError``) are apart from
status failures. :func:`refusal` names the upstream errors that refuse the prompt itself
(too long for the context window, or a content filter's): no retry helps them;
:func:`prefill_refusal` those that refuse an assistant prefill (no continuation there). This
module imports nothing of ours, so every layer may use it.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar, Self


class ErrorKind(StrEnum):
    """The neutral vocabulary of failure."""

    INVALID_REQUEST = "invalid_request"
    AUTHENTICATION = "authentication"
    PERMISSION = "permission"
    NOT_FOUND = "not_found"
    REQUEST_TOO_LARGE = "request_too_large"
    RATE_LIMIT = "rate_limit"
    UPSTREAM_ERROR = "upstream_error"
    OVERLOADED = "overloaded"
    TIMEOUT = "timeout"


class InterlinguaError(Exception):
    """Base of every error we raise on purpose.

    ``param`` names the offending request field (``messages[2].content``); ``code`` is a
    machine-readable detail (OpenAI's ``error.code``); ``retry_after`` (seconds) is relayed
    as a ``Retry-After`` header; ``upstream_type`` keeps the upstream's own error type
    string when we re-wrap an upstream error.
    """

    kind: ClassVar[ErrorKind] = ErrorKind.UPSTREAM_ERROR
    default_status: ClassVar[int] = 500

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        param: str | None = None,
        code: str | None = None,
        retry_after: float | None = None,
        upstream_type: str | None = None,
        headers: dict[str, str] | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status if status is not None else self.default_status
        self.param = param
        self.code = code
        self.retry_after = retry_after
        self.upstream_type = upstream_type
        self.headers = headers or {}
        self.body = body

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, status={self.status})"

    def with_message(self, message: str) -> Self:
        """A copy of this error (same class, status and details) saying ``message``.

        The original is left as it is: it may be held elsewhere (inside a frozen
        ``StreamError``, say, or by the code that raised it) and must not change under
        its holder. The copy has no traceback or cause; it is for rendering.
        """
        # Built without __init__ (copy.copy would call it with ``args`` alone, which a
        # subclass taking keyword-only arguments refuses), then given every attribute.
        clone = type(self).__new__(type(self), message)
        clone.__dict__.update(self.__dict__)
        clone.message = message
        return clone

    def with_request_id(self, request_id: str) -> Self:
        """A copy whose message ends with `` (request id: <request_id>)``: the id a user
        can quote, in the one field every tool shows (Claude Code shows nothing else).

        Once: this error itself when its message names that id already (an error
        rendered a second time) or when there is no id.

        >>> UpstreamError("upstream broke").with_request_id("req_1").message
        'upstream broke (request id: req_1)'
        """
        note = request_id_note(request_id)
        if not request_id or note in self.message:
            return self
        return self.with_message(self.message + note)


def request_id_note(request_id: str) -> str:
    """What is appended to an error message to name the request: `` (request id: …)``."""
    return f" (request id: {request_id})"


class InvalidRequestError(InterlinguaError):
    kind = ErrorKind.INVALID_REQUEST
    default_status = 400


class UnprocessableError(InvalidRequestError):
    default_status = 422


class AuthenticationError(InterlinguaError):
    kind = ErrorKind.AUTHENTICATION
    default_status = 401


class PermissionDeniedError(InterlinguaError):
    kind = ErrorKind.PERMISSION
    default_status = 403


class NotFoundError(InterlinguaError):
    kind = ErrorKind.NOT_FOUND
    default_status = 404


class RequestTooLargeError(InterlinguaError):
    kind = ErrorKind.REQUEST_TOO_LARGE
    default_status = 413


class RateLimitError(InterlinguaError):
    kind = ErrorKind.RATE_LIMIT
    default_status = 429


class UpstreamError(InterlinguaError):
    kind = ErrorKind.UPSTREAM_ERROR
    default_status = 500


class UpstreamConnectionError(UpstreamError):
    default_status = 502


#: the ``code`` of a :class:`MalformedToolCallError`, kept when it crosses a wire
MALFORMED_TOOL_CALL = "malformed_tool_call"


class MalformedToolCallError(UpstreamError):
    """A tool call in an upstream's answer that no client could use: no name, arguments
    neither JSON text nor an object, a call that is not an object. The upstream broke
    its protocol (502, like any answer that cannot be read); accepted with an empty name
    or dropped it would look like a normal answer. ``where`` names the call as the
    upstream wrote it (``tool_calls[1]``, ``content[2]``, ``output[0]``), with its id
    when it has one.

    >>> MalformedToolCallError("no name", "tool_calls[1]", "call_9").message
    "upstream returned a malformed tool call (tool_calls[1], id 'call_9'): no name"
    """

    default_status = 502

    def __init__(self, problem: str, where: str, call_id: object = None) -> None:
        named = f"{where}, id {call_id!r}" if isinstance(call_id, str) and call_id else where
        message = f"upstream returned a malformed tool call ({named}): {problem}"
        super().__init__(message, code=MALFORMED_TOOL_CALL)
        self.where = where


class OverloadedError(InterlinguaError):
    kind = ErrorKind.OVERLOADED
    default_status = 529


class UpstreamTimeoutError(InterlinguaError):
    """The upstream did not answer (or finish answering) in time; named so it does not
    shadow the builtin ``TimeoutError``, which the transports catch."""

    kind = ErrorKind.TIMEOUT
    default_status = 504


_BY_STATUS: dict[int, type[InterlinguaError]] = {
    400: InvalidRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    408: UpstreamTimeoutError,
    413: RequestTooLargeError,
    422: UnprocessableError,
    429: RateLimitError,
    503: OverloadedError,
    504: UpstreamTimeoutError,
    529: OverloadedError,
}

_BY_KIND: dict[ErrorKind, type[InterlinguaError]] = {
    ErrorKind.INVALID_REQUEST: InvalidRequestError,
    ErrorKind.AUTHENTICATION: AuthenticationError,
    ErrorKind.PERMISSION: PermissionDeniedError,
    ErrorKind.NOT_FOUND: NotFoundError,
    ErrorKind.REQUEST_TOO_LARGE: RequestTooLargeError,
    ErrorKind.RATE_LIMIT: RateLimitError,
    ErrorKind.UPSTREAM_ERROR: UpstreamError,
    ErrorKind.OVERLOADED: OverloadedError,
    ErrorKind.TIMEOUT: UpstreamTimeoutError,
}


def error_class_for_status(status: int) -> type[InterlinguaError]:
    """The error class an upstream HTTP status maps to (unknown 4xx -> invalid request)."""
    cls = _BY_STATUS.get(status)
    if cls is not None:
        return cls
    if status >= 500:
        return UpstreamError
    return InvalidRequestError


def error_class_for_kind(kind: ErrorKind) -> type[InterlinguaError]:
    """The error class for a neutral kind (used when an in-band error names only a type)."""
    return _BY_KIND[kind]


#: what :func:`refusal` calls a refusal saying the prompt does not fit the model's window
CONTEXT_WINDOW = "context_window"
#: what :func:`refusal` calls a refusal by the upstream's content filter
CONTENT_FILTER = "content_filter"

# ``error.code`` / ``error.type`` values that name a context-window refusal outright:
# OpenAI (and Azure, Groq and others copying it) ``context_length_exceeded``; llama.cpp's
# server ``exceed_context_size_error`` (its ``type``; its ``code`` is the status number).
_CONTEXT_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
# Lowercase phrases of the messages that say it in words, for servers with no telling
# code (docs/reliability.md lists who sends which):
_CONTEXT_PHRASES = (
    "maximum context length",  # OpenAI, vLLM ("This model's maximum context length is")
    "prompt is too long",  # Anthropic, 400 invalid_request_error
    "exceed context limit",  # Anthropic: "input length and `max_tokens` exceed context limit"
    "exceeds the context window",  # OpenAI Responses: "Your input exceeds the context window"
    "exceeds the available context size",  # llama.cpp server
    "longer than the maximum model length",  # vLLM: "The decoder prompt ... is longer than"
)
# Codes of a content-filter refusal: Azure OpenAI's ``content_filter`` (a 400 on the
# prompt) and OpenAI's ``content_policy_violation``. Anthropic has none: its refusals are
# answers (stop_reason ``refusal``), not errors.
_FILTER_CODES = frozenset({"content_filter", "content_policy_violation"})
# Statuses a refusal of the request itself comes with (400; 413 and 422 from some servers).
_REFUSAL_STATUSES = frozenset({400, 413, 422})


def refusal(status: int | None, code: object, error_type: object, message: object) -> str | None:
    """:data:`CONTEXT_WINDOW` or :data:`CONTENT_FILTER` when an upstream's error says so
    (by its code or type first, then by its message), else None.

    Only a refusal of the request (400, 413, 422; None for an in-band error) is one: a
    5xx that happens to mention a context length is a server fault.

    >>> refusal(400, "context_length_exceeded", "invalid_request_error", "...")
    'context_window'
    >>> refusal(400, None, "invalid_request_error", "prompt is too long: 210000 tokens > 200000")
    'context_window'
    >>> refusal(400, "content_filter", None, "The response was filtered"), refusal(400, None, None, "no")
    ('content_filter', None)
    """
    if status is not None and status not in _REFUSAL_STATUSES:
        return None
    for value in (code, error_type):
        if isinstance(value, str):
            if value in _CONTEXT_CODES:
                return CONTEXT_WINDOW
            if value in _FILTER_CODES:
                return CONTENT_FILTER
    if isinstance(message, str):
        lowered = message.lower()
        if any(phrase in lowered for phrase in _CONTEXT_PHRASES):
            return CONTEXT_WINDOW
    return None


def error_refusal(error: InterlinguaError) -> str | None:
    """:func:`refusal` of an error parsed from an upstream's answer."""
    return refusal(error.status, error.code, error.upstream_type, error.message)


def body_refusal(status: int, payload: Any) -> str | None:
    """:func:`refusal` of an error body as an upstream sent it (parsed JSON): OpenAI's and
    Anthropic's ``{"error": {...}}``, vLLM's older flat ``{"object": "error", "message":
    ...}``, or ``{"error": "text"}``."""
    if not isinstance(payload, dict):
        return None
    error = payload.get("error", payload)
    if isinstance(error, str):
        return refusal(status, None, None, error)
    if not isinstance(error, dict):
        return None
    return refusal(status, error.get("code"), error.get("type"), error.get("message"))


# Lowercase phrases of the messages that refuse an assistant prefill (a request whose last
# message is the assistant's partial answer); docs/protocols.md, "Assistant prefill" says
# who sends which.
_PREFILL_PHRASES = (
    "does not support assistant message prefill",  # Anthropic, models without prefill
    "final assistant content cannot end with trailing whitespace",  # Anthropic
    "a final `assistant` message must start with a thinking block",  # Anthropic, thinking on
    "assistant response prefill is incompatible with enable_thinking",  # llama.cpp server
    "cannot have 2 or more assistant messages at the end of the list",  # llama.cpp server
    "continue_final_message",  # vLLM's refusals of it; servers refusing the unknown field
    "expected last role user or tool",  # Mistral's API, vLLM with a Mistral tokenizer
)
# A prefill is refused with a 400 (vLLM's validation errors too); 422 from strict servers.
_PREFILL_REFUSAL_STATUSES = frozenset({400, 422})


def refuses_prefill(status: int | None, message: object) -> bool:
    """True when an upstream's error says it does not take an assistant prefill (by its
    message: no server has a code for it). Only a refusal of the request (400, 422; None
    for an in-band error) is one.

    >>> refuses_prefill(400, "This model does not support assistant message prefill.")
    True
    >>> refuses_prefill(500, "does not support assistant message prefill"), refuses_prefill(400, "no")
    (False, False)
    """
    if status is not None and status not in _PREFILL_REFUSAL_STATUSES:
        return False
    if not isinstance(message, str):
        return False
    lowered = message.lower()
    return any(phrase in lowered for phrase in _PREFILL_PHRASES)


def prefill_refusal(error: InterlinguaError) -> bool:
    """:func:`refuses_prefill` of an error parsed from an upstream's answer: the upstream
    (for this model) cannot continue an answer from a prefill."""
    return refuses_prefill(error.status, error.message)


def prefill_refusal_body(status: int, payload: Any) -> bool:
    """:func:`refuses_prefill` of an error body as an upstream sent it (parsed JSON), in
    the shapes :func:`body_refusal` reads."""
    return refuses_prefill(status, _body_message(payload))


def _body_message(payload: Any) -> object:
    """The message of an error body: ``{"error": {"message"}}``, vLLM's older flat
    ``{"message"}``, or ``{"error": "text"}``; None when there is none."""
    if not isinstance(payload, dict):
        return None
    error = payload.get("error", payload)
    if isinstance(error, str):
        return error
    return error.get("message") if isinstance(error, dict) else None


def parse_retry_after(headers: dict[str, str] | Any) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (preferred) or ``retry-after`` (seconds).

    HTTP-date values of ``Retry-After`` are accepted too. Returns None when absent or
    unparseable.
    """
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    ra = headers.get("retry-after")
    if not ra:
        return None
    try:
        return max(0.0, float(ra))
    except ValueError:
        pass
    import time
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(ra)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def describe_os_error(error: OSError) -> str:
    """A short, human reason for a failed connection ("connection refused", ...)."""
    import socket

    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, socket.gaierror):
        return f"cannot resolve host ({error.strerror})"
    return error.strerror or str(error) or type(error).__name__
