"""The HTTP floor under the gateway's upstreams and the client: a lean keep-alive HTTP/1.1
client for plain ``http://`` calls, and the engines both post through.

Why not aiohttp for those calls: to a local server (vLLM, llama.cpp, a mock, another
gateway) a call is one ``write`` and one parse, and aiohttp's request machinery (request
object, header merging, timers, URL and payload handling) cost more than both: 13 % of
the gateway's busy time on its passthrough path, and about half of a client batch's.
What it does and does not do: :mod:`._pool`'s docstring.

:mod:`.engines` (imported on its own: it loads aiohttp) holds the two engines behind one
seam, this pool for ``http://`` and aiohttp for TLS, proxies and GETs, and
``Transports``, which picks one by URL; the gateway's upstreams (``upstreams/http_upstream.py``)
and the client (``client/_transport.py``) both post through it.

Errors are the :class:`TransportError` tree (:mod:`._errors`): raised natively by the
pool, mapped once from aiohttp's by its engine.
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
from ._head import Target, check_headers
from ._pool import (
    HIGH_WATER,
    IDLE_TTL,
    MAX_HEAD,
    MAX_IDLE,
    NO_DEADLINE,
    Opener,
    Pool,
    PooledResponse,
)

__all__ = [
    "HIGH_WATER",
    "IDLE_TTL",
    "MAX_HEAD",
    "MAX_IDLE",
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
    "check_headers",
]
