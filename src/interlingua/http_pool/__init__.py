"""A lean keep-alive HTTP/1.1 client for plain ``http://`` calls: the gateway's upstream
calls (``upstreams/_transport.py``) and the client's (``client/_lean.py``).

Why not aiohttp for those: to a local server (vLLM, llama.cpp, a mock, another gateway)
a call is one ``write`` and one parse, and aiohttp's request machinery (request object,
header merging, timers, URL and payload handling) cost more than both: 13 % of the
gateway's busy time on its passthrough path, and about half of a client batch's. What
it does and does not do: :mod:`._pool`'s docstring. TLS, proxies and anything but a POST
stay on aiohttp in both users.

Errors are the :class:`TransportError` tree (:mod:`._errors`), raised natively.
"""

from ._errors import (
    ConnectFailed,
    ConnectionLost,
    ConnectTimeout,
    DeadlineExceeded,
    InvalidTarget,
    ReadTimeout,
    TransportError,
)
from ._head import Target
from ._pool import HIGH_WATER, IDLE_TTL, MAX_HEAD, NO_DEADLINE, Opener, Pool, PooledResponse

__all__ = [
    "HIGH_WATER",
    "IDLE_TTL",
    "MAX_HEAD",
    "NO_DEADLINE",
    "ConnectFailed",
    "ConnectTimeout",
    "ConnectionLost",
    "DeadlineExceeded",
    "InvalidTarget",
    "Opener",
    "Pool",
    "PooledResponse",
    "ReadTimeout",
    "Target",
    "TransportError",
]
