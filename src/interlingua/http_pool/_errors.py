"""The transport failures of the lean pool, which the aiohttp engine raises too.

A failure to talk HTTP to the server at all, with no status to show for it. The lean
pool (:mod:`._pool`) raises these natively; the aiohttp engine maps aiohttp's errors
onto them once (:mod:`.engines`), so the gateway's ``HttpUpstream`` catches one family
and turns it into :mod:`interlingua.errors` (502/504) in one place, and the client maps
them onto its ``APIConnectionError`` tree in one function (``client/_transport.py``)::

    TransportError
    ├── InvalidTarget        the request cannot be sent as given (a header with CR/LF)
    ├── ConnectFailed        the TCP connection could not be opened (``os_error`` says why)
    ├── ConnectTimeout       no connection within the connect timeout  (also TimeoutError)
    ├── ReadTimeout          no bytes for the read timeout             (also TimeoutError)
    ├── DeadlineExceeded     the answer not done within the total timeout (also TimeoutError)
    └── ConnectionLost       closed, reset, or an answer that is not HTTP

Kept apart from the engines so that the pool, which one of them wraps, can raise them
without importing aiohttp.
"""

from __future__ import annotations

__all__ = [
    "ConnectFailed",
    "ConnectTimeout",
    "ConnectionLost",
    "DeadlineExceeded",
    "InvalidTarget",
    "ReadTimeout",
    "TransportError",
]


class TransportError(Exception):
    """A failure to talk HTTP to the upstream at all (no status to show for it)."""


class InvalidTarget(TransportError):
    """The request cannot be sent as given: a URL with no host, a header with CR/LF."""


class ConnectFailed(TransportError):
    """The TCP connection could not be opened; ``os_error`` says why."""

    def __init__(self, os_error: OSError) -> None:
        super().__init__(str(os_error))
        self.os_error = os_error


class ConnectTimeout(TransportError, TimeoutError):
    """No TCP connection within the connect timeout."""


class ReadTimeout(TransportError, TimeoutError):
    """No bytes from the upstream for the read timeout while we waited for some."""


class DeadlineExceeded(TransportError, TimeoutError):
    """The answer did not end within the total timeout (slow, drip-fed or endless)."""


class ConnectionLost(TransportError):
    """The connection closed or broke before the answer ended, or the answer was not HTTP."""
