"""The client's transport: where requests go, how they are sent, and how sending fails.

:class:`Transport` is the seam between the client and the network: an
:class:`~interlingua.client.AsyncClient` hands it rendered bytes and gets back bytes, a
2xx :class:`Answer` to read, or a typed error. ``AsyncClient(transport=...)`` replaces
it, so a test can answer calls from memory instead of a socket (like httpx's
``MockTransport``).

:class:`HttpTransport` is the default. The URL and the auth headers come from the
dialect's ``endpoint()``; the bytes travel through the HTTP engines the gateway's
upstreams use too (:mod:`interlingua.http_pool.engines`, whose ``Transports`` picks one
once, when the client is built): interlingua's lean HTTP/1.1 pool for a plain ``http://``
server that no proxy variable applies to (a data pipeline sending thousands of small
requests to vLLM, llama.cpp or the gateway on its own network: aiohttp's request
machinery cost about half of ``generate()``'s busy time, docs/decisions.md), aiohttp for
``https://`` (TLS), for a URL behind a proxy, for an injected aiohttp session, for
images fetched by URL, and for everything with ``INTERLINGUA_HTTP_CLIENT=aiohttp``. At
most ``connections`` requests hold a connection at once (more wait for one), and a
request is never sent twice on a reused connection (a POST is not idempotent: the
client's retry policy decides what to retry). It maps failures once:

- a non-2xx answer -> the :class:`~interlingua.client.APIStatusError` subclass for its
  status (:func:`status_error`, the body parsed by the dialect);
- no answer at all (cannot connect, timeout, dropped connection): the engines' one
  ``TransportError`` tree -> an :class:`~interlingua.client.APIConnectionError` saying
  what to do (:func:`connection_error`, the same words whichever engine posted).

A stream reads its :class:`Answer` chunk by chunk with ``answer.readany`` and catches
``transport.errors`` itself: mapping inside the transport would wrap every chunk read in
one more coroutine, and the stream needs its own wording once part of the answer is out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar, Protocol

import aiohttp

from ..dialects import Dialect
from ..errors import describe_os_error
from ..http_pool import (
    NO_DEADLINE,
    ConnectFailed,
    ConnectTimeout,
    TransportError,
    check_headers,
)
from ..http_pool.engines import AiohttpTransport, EngineAnswer, Transports
from ..proxies import Proxies
from ._errors import APIConnectionError, APIError, APITimeoutError, error_for_status
from ._inputs import InputError

__all__ = [
    "DEFAULT_CONNECTIONS",
    "DEFAULT_TIMEOUT",
    "Answer",
    "HttpTransport",
    "Transport",
    "connection_error",
    "endpoint",
    "request_id",
    "status_error",
    "timeouts",
]

DEFAULT_TIMEOUT = (10.0, 600.0)
"""(connect, read) seconds; read bounds the silence between two reads, not the whole call."""
DEFAULT_CONNECTIONS = 256


class Answer(Protocol):
    """A 2xx answer being read: its headers, the next bytes (``b""`` at the end), finish."""

    @property
    def headers(self) -> Mapping[str, str]:
        """The answer's headers."""
        ...

    @property
    def readany(self) -> Callable[[], Awaitable[bytes]]:
        """Read the next bytes that arrived (``b""`` at the end)."""
        ...

    def finish(self) -> None:
        """Give the connection back (read to the end) or drop it (abandoned); idempotent."""


class Transport(Protocol):
    """Sends a client's rendered requests. See the module doc; :class:`HttpTransport`."""

    @property
    def url(self) -> str:
        """Where requests go (named in messages)."""
        ...

    @property
    def base_url(self) -> str:
        """The base URL the client was given (named in messages)."""
        ...

    @property
    def errors(self) -> tuple[type[BaseException], ...]:
        """What ``Answer.readany`` may raise when the connection fails mid-answer."""
        ...

    async def open(self, body: bytes) -> Answer:
        """POST ``body``; a 2xx answer to read (the caller finishes it) or a typed error."""
        ...

    async def post(self, body: bytes) -> tuple[bytes, dict[str, str]]:
        """POST ``body``; the whole 2xx body and its headers (lower-cased) or a typed error."""
        ...

    async def post_to(self, url: str, body: bytes) -> tuple[bytes, dict[str, str]]:
        """:meth:`post` to another endpoint of the same server (the embeddings)."""
        ...

    async def get(self, url: str) -> bytes:
        """GET an image to inline (one attempt); raise ``InputError`` naming the URL."""
        ...

    def transport_error(self, exc: BaseException) -> APIConnectionError:
        """The typed error for one of :attr:`errors` (no HTTP answer)."""
        ...

    async def aclose(self) -> None:
        """Release the connections."""
        ...


class _Limits:
    """A client's (connect, read) timeouts as the engines take them (no total)."""

    __slots__ = ("connect", "read", "total")

    def __init__(self, connect: float | None, read: float | None) -> None:
        self.connect = NO_DEADLINE if connect is None else connect
        self.read = NO_DEADLINE if read is None else read
        self.total = NO_DEADLINE


class _EngineAnswer:
    """An engine's 2xx answer seen as an :class:`Answer`; finishing it gives its
    connection back (read to the end) or closes it, and frees its place."""

    __slots__ = ("_answer", "_done", "_free", "headers", "readany")

    def __init__(self, answer: EngineAnswer, free: asyncio.Semaphore) -> None:
        self._answer = answer
        self._free = free
        self._done = False
        self.headers: Mapping[str, str] = answer.headers
        self.readany: Callable[[], Awaitable[bytes]] = answer.readany

    def finish(self) -> None:
        if not self._done:
            self._done = True
            self._answer.release()
            self._free.release()


class HttpTransport:
    """POSTs to one endpoint through the engine its URL gets (see the module doc).

    ``connections`` bounds the requests that hold a connection at once; ``headers`` are
    added to (and override) the dialect's own (``ValueError`` for one that cannot be
    sent); ``session`` injects an aiohttp session, then used for every request and not
    closed by :meth:`aclose`.
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
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self._codec = codec
        self.base_url, self.url, self._headers = endpoint(codec, base_url, api_key, headers)
        self._connect, self._read = timeouts(timeout)
        self._limits = _Limits(self._connect, self._read)
        # HTTPS_PROXY / HTTP_PROXY / NO_PROXY, read now (interlingua.proxies says why
        # not aiohttp's trust_env). aiohttp also fetches images, and follows a redirect
        # as it always has for a client's own requests.
        proxies = Proxies()
        self._aiohttp = AiohttpTransport(session, proxies, follow_redirects=True)
        injected = None if session is None else self._aiohttp
        self._engines = Transports(
            http=injected, https=self._aiohttp, proxies=proxies, max_idle=connections
        )
        self._engine = self._engines.for_url(self.url)
        self._post = self._engine.bind(self.url, self._headers, timeout=self._limits)
        self._others: dict[str, Callable[[bytes], Awaitable[EngineAnswer]]] = {}
        self._free = asyncio.Semaphore(connections)
        self._closed = False

    async def aclose(self) -> None:
        """Close the idle connections (those in use close when their answer is done; an
        injected session is left open)."""
        self._closed = True
        await self._engines.aclose()

    # --- sending -----------------------------------------------------------------------

    async def open(self, body: bytes) -> Answer:
        """:meth:`Transport.open`."""
        return _EngineAnswer(await self._send(body, self._post, self.url), self._free)

    async def post(self, body: bytes, url: str | None = None) -> tuple[bytes, dict[str, str]]:
        """:meth:`Transport.post` (``url``: :meth:`post_to`'s, read in the same frame:
        this is every call's path, and a coroutine more per call shows in a batch)."""
        if url is None:
            answer = await self._send(body, self._post, self.url)
        else:
            post = self._others.get(url)
            if post is None:  # bound once per URL, as the generation URL is
                engine = self._engines.for_url(url)
                post = self._others[url] = engine.bind(url, self._headers, timeout=self._limits)
            answer = await self._send(body, post, url)
        try:
            data = await answer.read()
        except TransportError as exc:
            raise self.transport_error(exc) from exc
        finally:
            answer.release()
            self._free.release()
        headers = answer.headers
        if type(headers) is dict:  # the lean pool's: lowercase already
            return data, headers
        return data, {k.lower(): v for k, v in headers.items()}  # aiohttp's, as they came

    async def post_to(self, url: str, body: bytes) -> tuple[bytes, dict[str, str]]:
        """:meth:`Transport.post_to`: the same headers, connections and typed errors."""
        return await self.post(body, url)

    async def _send(
        self, body: bytes, post: Callable[[bytes], Awaitable[EngineAnswer]], url: str
    ) -> EngineAnswer:
        """POST with ``post`` (bound to ``url``); a 2xx answer holding a place (the caller
        reads it, then releases the answer and the place) or raise the typed error, the
        place given back."""
        if self._closed:
            raise RuntimeError("this client is closed; create a new one")
        await self._free.acquire()
        try:
            answer = await post(body)
        except TransportError as exc:
            self._free.release()
            raise self.transport_error(exc) from exc
        except BaseException:
            self._free.release()
            raise
        if 200 <= answer.status < 300:
            return answer
        try:
            data = await answer.read()
        except TransportError:
            data = b""
        finally:
            answer.release()
            self._free.release()
        raise status_error(self._codec, url, answer.status, data, answer.headers)

    async def get(self, url: str) -> bytes:
        """:meth:`Transport.get`, through aiohttp (redirects followed)."""
        if self._closed:  # (aiohttp would open a session nobody closes)
            raise RuntimeError("this client is closed; create a new one")
        try:
            answer = await self._aiohttp.get(url, timeout=self._limits)
            try:
                if answer.status != 200:
                    raise InputError(f"cannot fetch image {url}: HTTP {answer.status}")
                return await answer.read()
            finally:
                answer.release()
        except TransportError as exc:
            raise InputError(f"cannot fetch image {url}: {exc or type(exc).__name__}") from exc

    def transport_error(self, exc: BaseException) -> APIConnectionError:
        """A failure with no HTTP answer -> the typed error, saying what to do."""
        return connection_error(exc, self.base_url, self._connect, self._read)


def connection_error(
    exc: BaseException, where: str, connect: float | None, read: float | None
) -> APIConnectionError:
    """The typed error for a call to ``where`` that got no HTTP answer: one of the
    engines' ``TransportError`` tree (or any other exception: a dropped connection),
    with what to do about it. ``connect`` and ``read`` are the client's timeouts."""
    if isinstance(exc, ConnectTimeout):
        return APITimeoutError(
            f"timed out connecting to {where} after {connect}s — is the host "
            "reachable? raise timeout=(connect, read) if it is slow to accept"
        )
    if isinstance(exc, TimeoutError):  # ReadTimeout, DeadlineExceeded
        return APITimeoutError(
            f"no data from {where} for {read}s (read timeout) — the server may be "
            "overloaded; raise timeout=(connect, read) for long generations"
        )
    if isinstance(exc, ConnectFailed):
        return APIConnectionError(
            f"cannot reach {where}: {describe_os_error(exc.os_error)} — is the server running?"
        )
    detail = str(exc) or type(exc).__name__
    return APIConnectionError(
        f"connection to {where} failed: {detail} — the server closed the connection "
        "(crashed, restarted, or a proxy cut it)"
    )


def endpoint(
    codec: Dialect, base_url: str, api_key: str | None, headers: Mapping[str, str] | None
) -> tuple[str, str, dict[str, str]]:
    """(base URL, generation URL, request headers) of a client: the dialect knows its URL
    and auth headers (Anthropic: with or without /v1); ``headers`` add to (and override)
    them (``ValueError`` for one no engine may send: CR, LF, NUL)."""
    base_url = base_url.rstrip("/")
    url, sent = codec.endpoint(base_url, api_key)
    sent["accept"] = "application/json"
    for key, value in (headers or {}).items():
        sent[key.lower()] = value
    check_headers(sent)
    return base_url, url, sent


def status_error(
    codec: Dialect, url: str, status: int, data: bytes, raw_headers: Mapping[str, str]
) -> APIError:
    """The typed error for a non-2xx answer from ``url``, its body read by ``codec``."""
    headers = {k.lower(): v for k, v in raw_headers.items()}
    parsed = codec.parse_error(status, data, headers)
    rid = request_id(headers)
    if rid is None and isinstance(parsed.body, dict):
        body_id = parsed.body.get("request_id")  # Anthropic puts it in the body too
        rid = body_id if isinstance(body_id, str) else None
    return error_for_status(status, parsed, url=url, request_id=rid, headers=headers)


def request_id(headers: Mapping[str, Any]) -> str | None:
    """The server's request id (``x-request-id``, or Anthropic's ``request-id``)."""
    value = headers.get("x-request-id") or headers.get("request-id")
    return str(value) if value else None


def timeouts(timeout: float | tuple[float, float] | None) -> tuple[float | None, float | None]:
    """(connect, read) seconds of a client's ``timeout`` (None: no limit)."""
    if timeout is None:
        return None, None
    if isinstance(timeout, int | float):
        return float(timeout), float(timeout)
    connect, read = timeout
    return connect, read
