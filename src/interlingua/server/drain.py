"""The graceful-shutdown state one gateway process shares between its connections and app.

On SIGTERM (or SIGINT) uvicorn stops accepting connections and asks each open one to
shut down; the connection protocol (:mod:`.guard`) then calls :meth:`Drain.begin`, and
``shutdown_timeout`` seconds later :meth:`Drain.expire`. The app reads the two flags:

* ``draining`` -- ``/health`` answers 503 ``{"status":"draining"}`` and new generation
  requests get a 503 in the caller's dialect with ``Connection: close``, so load
  balancers and clients move on while the requests already running finish;
* ``expired`` -- the requests still running are cancelled; a generation handler that
  sees its cancellation with ``expired`` set answers with :func:`shutting_down_error`
  instead (before the first byte: a 503 in the dialect; after it: the dialect's in-band
  error event and a proper end of the stream), so SDKs raise their typed API error rather
  than a transport error.

A ``Drain`` that nobody begins (tests building the app alone) never changes anything.
"""

from __future__ import annotations

from ..errors import OverloadedError

__all__ = ["Drain", "shutting_down_error"]

#: seconds clients are told to wait before retrying elsewhere (Retry-After)
RETRY_AFTER_SECONDS = 1.0


class Drain:
    """Two flags that only ever go from False to True, in this order."""

    __slots__ = ("draining", "expired")

    def __init__(self) -> None:
        self.draining = False
        self.expired = False

    def begin(self) -> None:
        """Shutdown started: refuse new work, let running requests finish."""
        self.draining = True

    def expire(self) -> None:
        """``shutdown_timeout`` passed: requests still running are being cancelled."""
        self.draining = True
        self.expired = True


def shutting_down_error() -> OverloadedError:
    """The error a client gets for a request the shutting-down gateway will not finish.

    A 503 for OpenAI clients (Anthropic's dialect renders every overload as 529
    ``overloaded_error``); both SDKs retry it, on a new connection.
    """
    return OverloadedError(
        "The gateway is shutting down; retry the request.",
        status=503,
        code="shutting_down",
        retry_after=RETRY_AFTER_SECONDS,
    )
