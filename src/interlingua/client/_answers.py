"""Reading a 2xx body, and judging it: an answer, or an answer that is not one.

A server can answer 200 with nothing to show: no text, no tool call, no refusal (a model
that spent ``max_tokens`` thinking, a proxy that lost the body, a batch backend's glitch);
or with a body the dialect cannot read at all. With ``retry_on_empty`` these are
retryable failures (:class:`~._errors.EmptyAnswerError`,
:class:`~._errors.UnreadableAnswerError`; :mod:`._policy` says how often); without it an
empty answer is returned as it is and an unreadable body raised at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from ..core import Request, Response
from ..dialects import Dialect
from ._audio import with_audio_format
from ._errors import EmptyAnswerError, UnreadableAnswerError
from ._outputs import ChatResult, better_usage

__all__ = ["UNREAD", "RawReply", "empty_error", "read_answer"]

_QUOTE = 2000  # characters of a body kept in the error
UNREAD: Any = object()
"""A body not decoded (yet): ``None`` is a JSON value."""


@dataclass(frozen=True, slots=True)
class RawReply:
    """A 2xx answer as bytes (:meth:`AsyncClient.send_raw`), for relays and batch output.

    With ``retry_on_empty`` the answer was read to judge it: :meth:`json` returns the
    body decoded then, and ``response`` holds the neutral answer when judging needed the
    codec (None when the text was plainly where the dialect puts it).
    """

    status: int
    headers: dict[str, str]
    body: bytes
    request_id: str | None
    response: Response | None = None
    decoded: Any = field(default=UNREAD, repr=False)

    def json(self) -> Any:
        """The body decoded."""
        if self.decoded is not UNREAD:
            return self.decoded
        return orjson.loads(self.body)


def read_answer(
    codec: Dialect,
    url: str,
    data: bytes,
    request_id: str | None,
    retry: bool,
    request: Request | None = None,
    decoded: Any = UNREAD,
) -> tuple[Any, Response]:
    """(decoded body, neutral answer) of a 2xx body, or :class:`UnreadableAnswerError`
    (``retry``: whether the retry loop may repeat the call; ``decoded``: ``data``
    already decoded). With ``request``, audio parts get the format it asked for."""
    try:
        raw = orjson.loads(data) if decoded is UNREAD else decoded
        response: Response = codec.parse_response(raw, request)
    except Exception as exc:  # the codec's errors, orjson's, a malformed shape
        detail = getattr(exc, "message", None) or str(exc)
        raise UnreadableAnswerError(
            f"{url} answered 2xx with a body that could not be read: {detail}",
            retry=retry,
            body=data[:_QUOTE].decode("utf-8", "replace"),
            request_id=request_id,
            kind="invalid_response",
        ) from exc
    response = better_usage(response, raw)
    if request is not None:
        response = with_audio_format(response, request)
    return raw, response


def empty_error(url: str, result: ChatResult, data: bytes) -> EmptyAnswerError:
    """The retryable error for an empty answer (``result`` rides along)."""
    response = result.response
    thinking = ", reasoning only" if response.reasoning else ""
    return EmptyAnswerError(
        f"{url} answered 2xx with no text, no tool call and no refusal (stop reason "
        f"{response.stop_reason}{thinking}) — retried with retry_on_empty; raise "
        "max_tokens if the model spends them all thinking",
        retry=True,
        result=result,
        body=data[:_QUOTE].decode("utf-8", "replace"),
        request_id=result.request_id,
        kind="empty_response",
    )
