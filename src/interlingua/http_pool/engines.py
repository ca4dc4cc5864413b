"""The HTTP engines the gateway's upstreams and the client post through, and which one a URL gets.

An HTTP upstream (``upstreams/http_upstream.py``) or a client (``client/_transport.py``) knows its
URL, headers and wire dialect; how the bytes travel is an :class:`Engine`'s business
(httpx's pattern: ``Client`` -> ``transport.handle_request``). An engine posts and
returns an :class:`EngineAnswer` once status and headers are in; both raise only the
:class:`~._errors.TransportError` tree of this package (each engine maps its own errors
once), so each user turns one family of failures into its own errors in one place
(``HttpUpstream.transport_error``: :mod:`interlingua.errors`; the client's
``connection_error``: its ``APIConnectionError`` tree). Two engines:

* :class:`LeanTransport` -- the lean keep-alive HTTP/1.1 :class:`~._pool.Pool`, for
  ``http://`` (the hot path: local servers; measured ~30 % more passthrough requests/s
  than aiohttp, and half the client's CPU per call, docs/decisions.md). Its answers are
  the pool's own, unwrapped.
* :class:`AiohttpTransport` -- an ``aiohttp.ClientSession``, for ``https://`` (TLS,
  certificates), for a URL behind a proxy, and for ``http://`` too with
  ``INTERLINGUA_HTTP_CLIENT=aiohttp``. It also works around an aiohttp 3.14 fault that
  left a broken body unfinished (:class:`_AiohttpAnswer`).

:class:`Transports` picks one by URL scheme; it reads that variable once, when built (the
one place it is read), and the proxy variables (``HTTPS_PROXY``, ``HTTP_PROXY``,
``NO_PROXY``: :mod:`interlingua.proxies`) too: aiohttp posts through the proxy that applies
to a URL, and a plain-http URL that a proxy applies to goes to aiohttp (the lean pool
connects to hosts directly). ``create_app`` builds one for every upstream and its lifespan
closes it (server/app.py); an upstream built without one makes its own and closes it in
``aclose()``; a client makes one of its own. Tests inject a fake :class:`Engine` (no
sockets) or the pool's fake network.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Protocol

import aiohttp
from aiohttp.streams import EofStream

from ..proxies import Proxies
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
from ._pool import MAX_IDLE, NO_DEADLINE, Pool, PooledResponse

__all__ = [
    "ENGINE_ENV",
    "AiohttpTransport",
    "Engine",
    "EngineAnswer",
    "LeanTransport",
    "Timeouts",
    "Transports",
    "aiohttp_error",
]

#: which engine posts to plain-http URLs: "lean" (the default) or "aiohttp"
ENGINE_ENV = "INTERLINGUA_HTTP_CLIENT"


class Timeouts(Protocol):
    """Seconds an engine waits (``inf``: no limit): for a connection, between two reads,
    for the whole answer. The gateway's ``TimeoutConfig`` is one; hashable, since the
    aiohttp engine keeps what it builds from each."""

    @property
    def connect(self) -> float:
        """For the TCP connection (and the TLS handshake)."""
        ...

    @property
    def read(self) -> float:
        """The silence between two reads of the answer."""
        ...

    @property
    def total(self) -> float:
        """The whole answer, from the moment the request is sent."""
        ...


class EngineAnswer(Protocol):
    """An answer, status and headers in, the body still to read.

    Read the body with :meth:`read` (whole), :meth:`iter_any` or :meth:`readany` (chunks
    as they arrive), then :meth:`release` it, always: a fully read answer hands its
    connection back for reuse; one abandoned halfway (client gone, error) closes it, or
    the next request would read its leftovers. Reading raises :class:`TransportError`
    only.
    """

    @property
    def status(self) -> int:
        """The HTTP status (never 1xx: interim answers are skipped)."""
        ...

    @property
    def headers(self) -> Mapping[str, str]:
        """The response headers, looked up by lowercase name."""
        ...

    async def read(self) -> bytes:
        """The whole (rest of the) body."""
        ...

    def iter_any(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive."""
        ...

    async def readany(self) -> bytes:
        """The bytes that arrived since the last read (waiting for some), ``b""`` at the end."""
        ...

    def release(self) -> None:
        """Done with the answer: reuse its connection if read to its end, else close it."""
        ...


class Engine(Protocol):
    """Posts one request body to a URL."""

    def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        timeout: Timeouts,
        extra: Mapping[str, str] | None = None,
    ) -> Awaitable[EngineAnswer]:
        """POST ``body``; the :class:`EngineAnswer` once status and headers are in.

        ``headers`` are the caller's own for this URL, the same mapping on every call
        (the lean engine encodes them once and keeps them); ``extra`` are this request's
        (forwarded client headers), replacing any of the same name. ``timeout.connect``
        bounds connecting, ``timeout.read`` the silence between two reads, and
        ``timeout.total`` the whole answer. Raises :class:`TransportError`; redirects
        are not followed (unless the engine was built to).
        """
        ...

    def bind(
        self, url: str, headers: Mapping[str, str], *, timeout: Timeouts
    ) -> Callable[[bytes], Awaitable[EngineAnswer]]:
        """:meth:`post` to one URL with these headers and timeouts, as a function of the
        body: the per-URL work done now, not per call (a client posts to one endpoint)."""
        ...

    async def aclose(self) -> None:
        """Close what this engine opened (it may be used again: it reopens)."""
        ...


class LeanTransport:
    """The :mod:`interlingua.http_pool` engine (``http://`` only). ``pool`` replaces the
    one it makes, which keeps at most ``max_idle`` idle connections per host."""

    __slots__ = ("_kept", "_owns_pool", "_pool", "_targets")

    #: distinct header mappings kept encoded before the cache is emptied (a bound: each
    #: upstream passes one, so only a caller that builds a new mapping per call reaches it)
    MAX_HEADER_SETS = 1024

    def __init__(self, pool: Pool | None = None, *, max_idle: int = MAX_IDLE) -> None:
        self._owns_pool = pool is None
        self._pool = Pool(max_idle=max_idle) if pool is None else pool
        # Encoded request heads by the identity of the caller's headers, then by URL: one
        # transport serves every upstream, and two may post to one URL with different
        # keys. ``_kept`` holds each mapping so its id cannot be reused while cached.
        self._targets: dict[int, dict[str, Target]] = {}
        self._kept: dict[int, Mapping[str, str]] = {}

    def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        timeout: Timeouts,
        extra: Mapping[str, str] | None = None,
    ) -> Awaitable[PooledResponse]:
        """:meth:`Engine.post` (not itself a coroutine: the pool's is returned as it
        is, one frame less per request; the pool raises the ``TransportError`` tree natively)."""
        by_url = self._targets.get(id(headers))
        target = None if by_url is None else by_url.get(url)
        if target is None:
            target = self._target(url, headers)
        return self._pool.post(
            target,
            body,
            connect_timeout=timeout.connect,
            read_timeout=timeout.read,
            total_timeout=timeout.total,
            extra_headers=extra,
        )

    def bind(
        self, url: str, headers: Mapping[str, str], *, timeout: Timeouts
    ) -> Callable[[bytes], Awaitable[PooledResponse]]:
        """:meth:`Engine.bind`: the request head encoded now (``InvalidTarget`` now, for
        a header that cannot be sent), the pool's ``post`` called straight per body."""
        target = self._target(url, headers)
        connect, read, total = timeout.connect, timeout.read, timeout.total

        def post(body: bytes) -> Awaitable[PooledResponse]:
            return self._pool.post(
                target, body, connect_timeout=connect, read_timeout=read, total_timeout=total
            )

        return post

    def _target(self, url: str, headers: Mapping[str, str]) -> Target:
        try:
            target = Target(url, headers)
        except ValueError as exc:  # a configured header with CR/LF, a URL with no host
            raise InvalidTarget(str(exc)) from None
        key = id(headers)
        by_url = self._targets.get(key)
        if by_url is None:
            if len(self._targets) >= self.MAX_HEADER_SETS:
                self._targets.clear()
                self._kept.clear()
            by_url = self._targets[key] = {}
            self._kept[key] = headers
        by_url[url] = target
        return target

    async def aclose(self) -> None:
        """Close the idle connections; connections in use close when released."""
        pool = self._pool
        if self._owns_pool:
            # A closed pool keeps nothing alive: start a fresh one.
            self._pool = Pool(max_idle=pool.max_idle)
        await pool.aclose()


# aiohttp's failures: its own, plus timeouts (its timeout errors subclass the builtin
# TimeoutError, which asyncio.TimeoutError is since Python 3.11).
_AIOHTTP_ERRORS = (aiohttp.ClientError, TimeoutError)


def aiohttp_error(exc: BaseException) -> TransportError:
    """``exc``, one of :data:`_AIOHTTP_ERRORS`, as the ``TransportError`` tree has it."""
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return ConnectTimeout(str(exc) or "no connection within the connect timeout")
    if type(exc) is TimeoutError:  # the total timeout is a bare one; sock_read's is not
        return DeadlineExceeded("the answer did not end within the total timeout")
    if isinstance(exc, TimeoutError):
        return ReadTimeout(str(exc) or "no data within the read timeout")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return ConnectFailed(exc.os_error)
    return ConnectionLost(str(exc) or type(exc).__name__)


class AiohttpTransport:
    """An ``aiohttp.ClientSession`` engine (TLS). With ``session=None`` it opens its own
    on first use (inside the running loop, as aiohttp requires) and closes it in
    :meth:`aclose`; an injected session is the caller's to close.

    ``follow_redirects`` lets aiohttp follow a redirect (a client's choice for its own
    requests; the gateway never re-sends a POST it relays). :meth:`get` fetches a
    resource (the client's images by URL).
    """

    __slots__ = ("_follow", "_owns_session", "_proxies", "_session", "_timeouts")

    def __init__(
        self,
        session: aiohttp.ClientSession | None = None,
        proxies: Proxies | None = None,
        *,
        follow_redirects: bool = False,
    ) -> None:
        self._session = session
        self._owns_session = session is None
        self._follow = follow_redirects
        self._timeouts: dict[Timeouts, aiohttp.ClientTimeout] = {}
        # The environment's proxies (read now, once): each URL's is looked up once;
        # None when no proxy is set (the usual case: no lookup at all).
        proxies = Proxies() if proxies is None else proxies
        self._proxies = proxies if proxies else None

    def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        *,
        timeout: Timeouts,
        extra: Mapping[str, str] | None = None,
    ) -> Awaitable[EngineAnswer]:
        """:meth:`Engine.post` (the request's coroutine returned as it is: one frame
        less per request)."""
        sent = {**headers, **extra} if extra else headers
        return self._request("POST", url, body, sent, timeout, self._follow)

    def bind(
        self, url: str, headers: Mapping[str, str], *, timeout: Timeouts
    ) -> Callable[[bytes], Awaitable[EngineAnswer]]:
        """:meth:`Engine.bind`."""

        def post(body: bytes) -> Awaitable[EngineAnswer]:
            return self._request("POST", url, body, headers, timeout, self._follow)

        return post

    def get(self, url: str, *, timeout: Timeouts) -> Awaitable[EngineAnswer]:
        """GET ``url`` (redirects followed): the answer, as :meth:`post` gives it."""
        return self._request("GET", url, None, None, timeout, True)

    async def _request(
        self,
        method: str,
        url: str,
        body: bytes | None,
        headers: Mapping[str, str] | None,
        timeout: Timeouts,
        follow: bool,
    ) -> EngineAnswer:
        session = self._session
        if session is None or (session.closed and self._owns_session):
            session = self._session = _new_session()
            self._owns_session = True
        limits = self._timeouts.get(timeout)
        if limits is None:
            limits = self._timeouts[timeout] = _client_timeout(timeout)
        proxy = None if self._proxies is None else self._proxies.for_url(url)
        try:
            resp = await session.request(
                method,
                url,
                data=body,
                headers=headers,
                timeout=limits,
                allow_redirects=follow,  # a POST must not be re-sent blindly
                proxy=proxy,
            )
        except _AIOHTTP_ERRORS as exc:
            raise aiohttp_error(exc) from exc
        return _AiohttpAnswer(resp)

    async def aclose(self) -> None:
        """Close the session if this transport opened it."""
        if self._owns_session and self._session is not None:
            session, self._session = self._session, None
            await session.close()


def _client_timeout(timeout: Timeouts) -> aiohttp.ClientTimeout:
    # sock_read bounds the silence between two reads, total the whole answer; aiohttp
    # takes None, not inf, for "no limit".
    def seconds(value: float) -> float | None:
        return None if value == NO_DEADLINE else value

    return aiohttp.ClientTimeout(
        total=seconds(timeout.total),
        sock_connect=seconds(timeout.connect),
        sock_read=seconds(timeout.read),
    )


def _new_session() -> aiohttp.ClientSession:
    # No connection limit (the callers bound their own load: the gateway's limits, a
    # client's connections); DNS cached, since every request goes to one of a few hosts.
    # No session-wide timeout: each request sets its own.
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300)
    return aiohttp.ClientSession(connector=connector)


class _AiohttpAnswer:
    """An ``aiohttp.ClientResponse`` as an :class:`EngineAnswer`, its errors mapped.

    It also watches the connection: aiohttp 3.14 hands a body parse error that arrives
    after the first chunk (an invalid chunk-size line) to the connection, not to the
    body, drops the read timeout and closes the socket, so a reader of the body waited
    until ``timeout.total`` (an hour by default; forever for a client, which sets none).
    When the connection closes with the body unfinished, the body is failed here, which
    the reader sees as a lost connection. One callback per answer, removed on release (a
    keep-alive connection serves many answers).
    """

    __slots__ = ("_closed", "_resp", "headers", "status")

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.status = resp.status
        self.headers: Mapping[str, str] = resp.headers
        connection = resp.connection
        # (`is not None`: the protocol is a queue, false while empty)
        protocol = connection.protocol if connection is not None else None
        closed = protocol.closed if protocol is not None else None
        if closed is not None and not closed.done():
            closed.add_done_callback(self._connection_closed)
        self._closed = closed

    def _connection_closed(self, _: object) -> None:
        content = self._resp.content
        if not content.is_eof() and content.exception() is None:
            content.set_exception(
                aiohttp.ClientPayloadError("the connection closed before the body ended")
            )

    async def read(self) -> bytes:
        try:
            return await self._resp.read()
        except _AIOHTTP_ERRORS as exc:
            raise aiohttp_error(exc) from exc

    def iter_any(self) -> AsyncIterator[bytes]:
        return _Chunks(self._resp.content)

    async def readany(self) -> bytes:
        try:
            return await self._resp.content.readany()
        except _AIOHTTP_ERRORS as exc:
            raise aiohttp_error(exc) from exc

    def release(self) -> None:
        if self._closed is not None:
            self._closed.remove_done_callback(self._connection_closed)
            self._closed = None
        resp = self._resp
        if resp.content.at_eof():
            resp.release()
        else:
            resp.close()


class _Chunks:
    """aiohttp's ``content.iter_any()`` with errors mapped: the same one ``readany`` per
    chunk, not a generator wrapped around theirs."""

    __slots__ = ("_content",)

    def __init__(self, content: aiohttp.StreamReader) -> None:
        self._content = content

    def __aiter__(self) -> _Chunks:
        return self

    async def __anext__(self) -> bytes:
        try:
            chunk = await self._content.readany()
        except EofStream:
            raise StopAsyncIteration from None
        except _AIOHTTP_ERRORS as exc:
            raise aiohttp_error(exc) from exc
        if not chunk:
            raise StopAsyncIteration
        return chunk


class Transports:
    """The engine for each URL scheme, chosen once (see the module docstring).

    ``http://`` goes to ``http`` (default: a :class:`LeanTransport` keeping ``max_idle``
    idle connections per host, or the ``https`` engine when
    ``INTERLINGUA_HTTP_CLIENT=aiohttp``, read here); anything else to ``https`` (default:
    an :class:`AiohttpTransport` over ``session``, or its own).

    >>> t = Transports()
    >>> type(t.for_url("https://api.anthropic.com/v1/messages")).__name__
    'AiohttpTransport'
    """

    __slots__ = ("http", "https", "proxies")

    def __init__(
        self,
        session: aiohttp.ClientSession | None = None,
        *,
        http: Engine | None = None,
        https: Engine | None = None,
        proxies: Proxies | None = None,
        max_idle: int = MAX_IDLE,
    ) -> None:
        #: ``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``NO_PROXY``, read once, now
        self.proxies = Proxies() if proxies is None else proxies
        self.https: Engine = AiohttpTransport(session, self.proxies) if https is None else https
        if http is None:
            engine = os.environ.get(ENGINE_ENV, "lean").strip().lower()
            http = self.https if engine == "aiohttp" else LeanTransport(max_idle=max_idle)
        self.http: Engine = http

    def for_url(self, url: str) -> Engine:
        """The engine that posts to ``url``: a plain-http URL that a proxy applies to goes
        to the ``https`` engine (aiohttp), since the lean pool speaks to hosts directly."""
        if url.startswith("http://") and not (self.proxies and self.proxies.for_url(url)):
            return self.http
        return self.https

    async def aclose(self) -> None:
        """Close both engines (each closes only what it opened)."""
        await self.http.aclose()
        if self.https is not self.http:
            await self.https.aclose()
