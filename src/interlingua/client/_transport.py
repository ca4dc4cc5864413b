"""The client's transport: where requests go, how they are sent, and how sending fails.

:class:`Transport` is the seam between the client and the network: an
:class:`~interlingua.client.AsyncClient` hands it rendered bytes and gets back bytes, a
2xx :class:`Answer` to read, or a typed error. ``AsyncClient(transport=...)`` replaces
it, so a test can answer calls from memory instead of a socket (like httpx's
``MockTransport``).

:class:`AiohttpTransport` is the default: one pooled aiohttp ``ClientSession``, created
lazily and sized to the client's concurrency (aiohttp rather than httpx for throughput:
measured in a prototype, see DESIGN.md). The URL and the auth headers come from the
dialect's ``endpoint()``. It maps failures once:

- a non-2xx answer -> the :class:`~interlingua.client.APIStatusError` subclass for its
  status (:func:`status_error`, the body parsed by the dialect);
- no answer at all (cannot connect, timeout, dropped connection) -> an
  :class:`~interlingua.client.APIConnectionError` saying what to do
  (:meth:`AiohttpTransport.transport_error`).

A stream reads its :class:`Answer` chunk by chunk with ``answer.readany`` and catches
``transport.errors`` itself: mapping inside the transport would wrap every chunk read in
one more coroutine, and the stream needs its own wording once part of the answer is out.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar, Protocol

import aiohttp

from ..dialects import Dialect
from ..errors import describe_os_error
from ..proxies import Proxies
from ._errors import APIConnectionError, APIError, APITimeoutError, error_for_status
from ._inputs import InputError

__all__ = [
    "DEFAULT_CONNECTIONS",
    "DEFAULT_TIMEOUT",
    "AiohttpTransport",
    "Answer",
    "Transport",
    "connect_timeout",
    "dropped",
    "endpoint",
    "finish",
    "read_timeout",
    "request_id",
    "status_error",
    "timeouts",
    "unreachable",
]

DEFAULT_TIMEOUT = (10.0, 600.0)
"""(connect, read) seconds; read bounds the silence between two reads, not the whole call."""
DEFAULT_CONNECTIONS = 256

# What aiohttp raises when there is no (more) answer: the one list for the whole client.
_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (aiohttp.ClientError, TimeoutError)


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
    """Sends a client's rendered requests. See the module doc; :class:`AiohttpTransport`."""

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

    async def get(self, url: str) -> bytes:
        """GET an image to inline (one attempt); raise ``InputError`` naming the URL."""
        ...

    def transport_error(self, exc: BaseException) -> APIConnectionError:
        """The typed error for one of :attr:`errors` (no HTTP answer)."""
        ...

    async def aclose(self) -> None:
        """Release the connections."""
        ...


class _AiohttpAnswer:
    """An aiohttp response seen as an :class:`Answer` (one per stream, not per chunk)."""

    __slots__ = ("_resp", "headers", "readany")

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.headers: Mapping[str, str] = resp.headers
        self.readany: Callable[[], Awaitable[bytes]] = resp.content.readany

    def finish(self) -> None:
        finish(self._resp)


class AiohttpTransport:
    """The default transport: one pooled aiohttp session to the dialect's endpoint.

    ``session`` injects an aiohttp session (then not closed by :meth:`aclose`); without
    one, a session with ``connections`` pooled connections is created on first use.
    ``headers`` are added to (and override) the dialect's own.
    """

    errors: ClassVar[tuple[type[BaseException], ...]] = _TRANSPORT_ERRORS

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
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self._connect, sock_read=self._read
        )
        self._connections = connections
        self._session = session
        self._owns_session = session is None
        self._closed = False
        # HTTPS_PROXY / HTTP_PROXY / NO_PROXY, read now (interlingua.proxies says why
        # not aiohttp's trust_env): the endpoint's proxy is resolved once.
        self._proxies = Proxies()
        self._proxy = self._proxies.for_url(self.url) if self._proxies else None

    # --- lifecycle ---------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the pooled connections (an injected session is left open)."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None and self._owns_session:
            await session.close()

    def _get_session(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None or session.closed:
            if self._closed:
                raise RuntimeError("this client is closed; create a new one")
            connector = aiohttp.TCPConnector(
                limit=self._connections, limit_per_host=0, ttl_dns_cache=300
            )
            session = self._session = aiohttp.ClientSession(connector=connector)
            self._owns_session = True
        return session

    # --- sending -----------------------------------------------------------------------

    async def open(self, body: bytes) -> Answer:
        return _AiohttpAnswer(await self._send(body))

    async def post(self, body: bytes) -> tuple[bytes, dict[str, str]]:
        resp = await self._send(body)
        try:
            data = await resp.read()
        except _TRANSPORT_ERRORS as exc:
            raise self.transport_error(exc) from exc
        finally:
            finish(resp)
        return data, {k.lower(): v for k, v in resp.headers.items()}

    async def _send(self, body: bytes) -> aiohttp.ClientResponse:
        """POST; a 2xx response (caller reads and finishes it) or raise the typed error."""
        session = self._get_session()
        try:
            resp = await session.post(
                self.url,
                data=body,
                headers=self._headers,
                timeout=self._timeout,
                proxy=self._proxy,
            )
        except _TRANSPORT_ERRORS as exc:
            raise self.transport_error(exc) from exc
        if 200 <= resp.status < 300:
            return resp
        try:
            data = await resp.read()
        except _TRANSPORT_ERRORS:
            data = b""
        finally:
            finish(resp)
        raise status_error(self._codec, self.url, resp.status, data, resp.headers)

    async def get(self, url: str) -> bytes:
        session = self._get_session()
        try:
            proxy = self._proxies.for_url(url) if self._proxies else None
            async with session.get(url, timeout=self._timeout, proxy=proxy) as resp:
                if resp.status != 200:
                    raise InputError(f"cannot fetch image {url}: HTTP {resp.status}")
                return await resp.read()
        except _TRANSPORT_ERRORS as exc:
            raise InputError(f"cannot fetch image {url}: {exc or type(exc).__name__}") from exc

    # --- failures ----------------------------------------------------------------------

    def transport_error(self, exc: BaseException) -> APIConnectionError:
        """A failure with no HTTP answer -> the typed error, saying what to do."""
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return connect_timeout(self.base_url, self._connect)
        if isinstance(exc, TimeoutError):
            return read_timeout(self.base_url, self._read)
        if isinstance(exc, aiohttp.ClientConnectorError):
            return unreachable(self.base_url, exc.os_error)
        return dropped(self.base_url, exc)


def endpoint(
    codec: Dialect, base_url: str, api_key: str | None, headers: Mapping[str, str] | None
) -> tuple[str, str, dict[str, str]]:
    """(base URL, generation URL, request headers) of a client: the dialect knows its URL
    and auth headers (Anthropic: with or without /v1); ``headers`` add to (and override)
    them."""
    base_url = base_url.rstrip("/")
    url, sent = codec.endpoint(base_url, api_key)
    sent["accept"] = "application/json"
    for key, value in (headers or {}).items():
        sent[key.lower()] = value
    return base_url, url, sent


# The typed errors of a call that got no HTTP answer, worded alike by every transport.


def connect_timeout(where: str, seconds: float | None) -> APITimeoutError:
    return APITimeoutError(
        f"timed out connecting to {where} after {seconds}s — is the host "
        "reachable? raise timeout=(connect, read) if it is slow to accept"
    )


def read_timeout(where: str, seconds: float | None) -> APITimeoutError:
    return APITimeoutError(
        f"no data from {where} for {seconds}s (read timeout) — the server may be "
        "overloaded; raise timeout=(connect, read) for long generations"
    )


def unreachable(where: str, os_error: OSError) -> APIConnectionError:
    return APIConnectionError(
        f"cannot reach {where}: {describe_os_error(os_error)} — is the server running?"
    )


def dropped(where: str, exc: BaseException) -> APIConnectionError:
    detail = str(exc) or type(exc).__name__
    return APIConnectionError(
        f"connection to {where} failed: {detail} — the server closed the connection "
        "(crashed, restarted, or a proxy cut it)"
    )


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


def finish(resp: aiohttp.ClientResponse) -> None:
    """Release a read response's connection, or close one abandoned halfway."""
    # A fully read answer hands its connection back to the pool; one abandoned halfway
    # must not, or the next request on that connection would read the leftovers.
    if resp.content.at_eof():
        resp.release()
    else:
        resp.close()


def timeouts(timeout: float | tuple[float, float] | None) -> tuple[float | None, float | None]:
    """(connect, read) seconds of a client's ``timeout`` (None: no limit)."""
    if timeout is None:
        return None, None
    if isinstance(timeout, int | float):
        return float(timeout), float(timeout)
    connect, read = timeout
    return connect, read
