"""The client's transport for plain ``http://`` servers: :mod:`interlingua.http_pool`.

A data pipeline points the client at a server on its own network (vLLM, llama.cpp, the
gateway) and sends thousands of small requests; aiohttp's request machinery then costs
about as much CPU as everything else the client does per call (``python -m
bench.batch_bench``: about half of ``generate()``'s busy time). The gateway posts to its
``http://`` upstreams through the same pool for the same reason (docs/decisions.md).

:func:`default_transport` picks the engine: this one for an ``http://`` URL that no
proxy variable applies to, aiohttp (:class:`~._transport.AiohttpTransport`) for
``https://`` (TLS), for a URL behind a proxy, for an injected aiohttp session, and for
everything with ``INTERLINGUA_HTTP_CLIENT=aiohttp`` (the gateway reads the same
variable). Images fetched by URL (:meth:`LeanTransport.get`, rare) go through aiohttp
too, created on first use.

What it keeps of the aiohttp transport's behaviour: at most ``connections`` requests hold
a connection at once (more wait for one, as aiohttp's connector limit makes them), the
(connect, read) timeouts, the same typed errors with the same advice, and a request is
never sent twice on a reused connection (the pool's rule: a POST is not idempotent; the
client's retry policy decides what to retry, as it does for aiohttp's errors).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import ClassVar
from urllib.parse import urlsplit

import aiohttp

from ..dialects import Dialect
from ..http_pool import (
    ConnectFailed,
    ConnectTimeout,
    Pool,
    PooledResponse,
    ReadTimeout,
    Target,
    TransportError,
)
from ..proxies import Proxies
from ._errors import APIConnectionError
from ._transport import (
    DEFAULT_CONNECTIONS,
    DEFAULT_TIMEOUT,
    AiohttpTransport,
    Answer,
    Transport,
    connect_timeout,
    dropped,
    endpoint,
    read_timeout,
    status_error,
    timeouts,
    unreachable,
)

__all__ = ["ENGINE_ENV", "LeanTransport", "default_transport"]

#: ``aiohttp`` sends every request through aiohttp (the escape hatch; any other value,
#: or none, picks by URL)
ENGINE_ENV = "INTERLINGUA_HTTP_CLIENT"

_NONE = float("inf")  # (a timeout of None: wait as long as it takes)


def default_transport(
    codec: Dialect,
    base_url: str,
    api_key: str | None = None,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float | tuple[float, float] | None = DEFAULT_TIMEOUT,
    connections: int = DEFAULT_CONNECTIONS,
    session: aiohttp.ClientSession | None = None,
) -> Transport:
    """The transport a client builds when given none (the module docstring says which)."""
    lean = (
        session is None
        and os.environ.get(ENGINE_ENV, "").strip().lower() != "aiohttp"
        and urlsplit(base_url).scheme == "http"
        and not Proxies().for_url(base_url)  # (by scheme and host: the endpoint's too)
    )
    if lean:
        return LeanTransport(
            codec, base_url, api_key, headers=headers, timeout=timeout, connections=connections
        )
    return AiohttpTransport(
        codec, base_url, api_key, headers=headers, timeout=timeout,
        connections=connections, session=session,
    )  # fmt: skip


class _LeanAnswer:
    """A pooled answer seen as an :class:`~._transport.Answer`; finishing it gives its
    connection back (read to the end) or closes it, and frees its place."""

    __slots__ = ("_done", "_free", "_response", "headers", "readany")

    def __init__(self, response: PooledResponse, free: asyncio.Semaphore) -> None:
        self._response = response
        self._free = free
        self._done = False
        self.headers: Mapping[str, str] = response.headers
        self.readany = response.readany

    def finish(self) -> None:
        if not self._done:
            self._done = True
            self._response.release()
            self._free.release()


class LeanTransport:
    """POSTs to one ``http://`` endpoint through the lean pool (see the module doc).

    ``connections`` bounds the requests that hold a connection at once; ``headers`` are
    added to (and override) the dialect's own.
    """

    errors: ClassVar[tuple[type[BaseException], ...]] = (TransportError,)

    def __init__(
        self,
        codec: Dialect,
        base_url: str,
        api_key: str | None = None,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float | tuple[float, float] | None = DEFAULT_TIMEOUT,
        connections: int = DEFAULT_CONNECTIONS,
    ) -> None:
        self._codec = codec
        self.base_url, self.url, sent = endpoint(codec, base_url, api_key, headers)
        self._target = Target(self.url, sent)  # (ValueError: a header with CR/LF)
        self._connect, self._read = timeouts(timeout)
        self._pool = Pool(max_idle=connections)
        self._free = asyncio.Semaphore(connections)
        # What else aiohttp does for this client: images by URL (made on first use).
        self._aiohttp = AiohttpTransport(
            codec, base_url, api_key, headers=headers, timeout=timeout, connections=connections
        )

    async def aclose(self) -> None:
        """Close the idle connections (those in use close when their answer is done)."""
        await self._pool.aclose()
        await self._aiohttp.aclose()

    # --- sending -----------------------------------------------------------------------

    async def open(self, body: bytes) -> Answer:
        response = await self._send(body)
        return _LeanAnswer(response, self._free)

    async def post(self, body: bytes) -> tuple[bytes, dict[str, str]]:
        response = await self._send(body)
        try:
            data = await response.read()
        except TransportError as exc:
            raise self.transport_error(exc) from exc
        finally:
            response.release()
            self._free.release()
        return data, response.headers

    async def _send(self, body: bytes) -> PooledResponse:
        """POST; a 2xx answer holding a place (the caller reads it, then releases the
        answer and the place) or raise the typed error, the place given back."""
        await self._free.acquire()
        try:
            response = await self._pool.post(
                self._target,
                body,
                connect_timeout=_seconds(self._connect),
                read_timeout=_seconds(self._read),
            )
        except TransportError as exc:
            self._free.release()
            raise self.transport_error(exc) from exc
        except BaseException:
            self._free.release()
            raise
        if 200 <= response.status < 300:
            return response
        try:
            data = await response.read()
        except TransportError:
            data = b""
        finally:
            response.release()
            self._free.release()
        raise status_error(self._codec, self.url, response.status, data, response.headers)

    async def get(self, url: str) -> bytes:
        return await self._aiohttp.get(url)

    # --- failures ----------------------------------------------------------------------

    def transport_error(self, exc: BaseException) -> APIConnectionError:
        """A failure with no HTTP answer -> the typed error, saying what to do (the
        aiohttp transport's words, for the same failures)."""
        if isinstance(exc, ConnectTimeout):
            return connect_timeout(self.base_url, self._connect)
        if isinstance(exc, ReadTimeout | TimeoutError):
            return read_timeout(self.base_url, self._read)
        if isinstance(exc, ConnectFailed):
            return unreachable(self.base_url, exc.os_error)
        return dropped(self.base_url, exc)


def _seconds(value: float | None) -> float:
    return _NONE if value is None else value
