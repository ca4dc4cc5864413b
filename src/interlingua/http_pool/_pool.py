"""A lean keep-alive HTTP/1.1 client for plain-``http://`` calls: the gateway's and the client's.

Why not aiohttp here: on the passthrough path aiohttp's ``ClientSession._request`` alone
was 13 % of the gateway's busy time (request object, header merging, timers, URL and
payload handling) for what is, to a local upstream, one ``write`` and one parse. This
client does only what the gateway needs:

* one :class:`Pool` for every ``http://`` upstream (the one the gateway's
  ``LeanTransport`` holds; a client holds its own), idle connections per ``(host,
  port)`` reused LIFO (the warmest socket first), at most ``max_idle`` kept per host,
  dropped after ``idle_ttl`` seconds (before a typical server's keep-alive timeout), on
  any error, on ``Connection: close`` and when a response is released before its end;
* a request is one pre-assembled buffer: the request line and header block are encoded
  once per URL (:class:`._head.Target`), only ``Content-Length`` and the body are added;
* responses are parsed by ``httptools`` (llhttp: chunked, 1xx interim answers,
  keep-alive rules); body chunks are buffered and reading pauses above
  :data:`HIGH_WATER` bytes until the consumer catches up (backpressure);
* ``connect_timeout`` bounds connecting, ``read_timeout`` the silence between two reads
  while someone waits for data, ``total_timeout`` the whole answer from the moment the
  request is sent (a drip-feeding upstream cannot hold a request forever); one timer per
  response, re-armed lazily;
* ``http`` only: TLS stays on aiohttp (the other engine of :mod:`.engines`).

Errors: the :class:`._errors.TransportError` tree, raised natively: :class:`ConnectFailed`
(carries the ``OSError``), :class:`ConnectTimeout`, :class:`ReadTimeout` and
:class:`DeadlineExceeded` (all also ``TimeoutError``), :class:`ConnectionLost` (closed,
reset, or an unreadable answer).

A request is never sent twice (RFC 9112 9.3.1: a POST is not idempotent): a reused
connection that closes before answering a byte may be one the server dropped as we sent,
or one where the server read the request and died, and the two look the same from here.
Instead idle connections are dropped after ``idle_ttl`` (1.5 s), under the keep-alive
timeout of the common upstream servers (uvicorn 5 s, Node 5 s, gunicorn 2 s), so that
race needs a server stricter than those (docs/decisions.md).
"""

from __future__ import annotations

import asyncio
import zlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import cast

import httptools

from ._errors import (
    ConnectFailed,
    ConnectionLost,
    ConnectTimeout,
    DeadlineExceeded,
    ReadTimeout,
    TransportError,
)
from ._head import Target

__all__ = ["HIGH_WATER", "Pool", "PooledResponse", "Target"]

#: buffered body bytes above which the connection stops reading until the consumer drains
HIGH_WATER = 256 * 1024
#: the most status line and header bytes taken from an upstream (aiohttp allows 8 KiB a
#: line; this is generous, and stops an endless header held up only by the deadline)
MAX_HEAD = 1024 * 1024
#: seconds an idle connection may be reused: under gunicorn's 2 s keep-alive timeout
IDLE_TTL = 1.5
#: idle connections kept per host unless the pool's owner says otherwise
MAX_IDLE = 256
#: total timeout when the caller sets none
NO_DEADLINE = float("inf")
#: ``(protocol_factory, host, port) -> (transport, protocol)``: ``loop.create_connection``
#: unless a test injects a fake network
Opener = Callable[
    [Callable[[], asyncio.Protocol], str, int],
    Awaitable[tuple[asyncio.BaseTransport, asyncio.Protocol]],
]


class PooledResponse:
    """One answer being read: ``status``, lowercase ``headers``, then the body.

    Read it with :meth:`read` (whole) or :meth:`iter_any` / :meth:`readany` (chunks as
    they arrive), then :meth:`release` it: a fully read answer returns its connection to
    the pool, anything else closes it. It is the lean engine's ``EngineAnswer`` as it
    is.
    """

    __slots__ = (
        "_chunks",
        "_conn",
        "_deadline",
        "_decoder",
        "_error",
        "_head_size",
        "_headers_done",
        "_interim",
        "_keep_alive",
        "_last_read",
        "_loop",
        "_paused",
        "_read_timeout",
        "_size",
        "_timer",
        "_waiter",
        "done",
        "got_bytes",
        "headers",
        "parser",
        "status",
    )

    def __init__(self, conn: _Connection, read_timeout: float, total_timeout: float) -> None:
        self._conn = conn
        self._loop = conn.loop
        self._read_timeout = read_timeout
        self._deadline = self._loop.time() + total_timeout
        self.parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers: dict[str, str] = {}
        self._chunks: list[bytes] = []
        self._size = 0
        self._head_size = 0
        self._decoder: zlib._Decompress | None = None
        self._error: TransportError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._last_read = self._loop.time()
        self._headers_done = self._interim = self._keep_alive = self._paused = False
        self.done = self.got_bytes = False

    # --- httptools callbacks (must not raise) ---------------------------------------

    def on_message_begin(self) -> None:
        if self.done:
            # Bytes past the end of the answer in the same read (a wrong Content-Length,
            # say): the connection's framing can no longer be trusted.
            self._keep_alive = False

    def on_header(self, name: bytes, value: bytes) -> None:
        # First value wins for repeated names, as aiohttp's headers.get() does.
        self.headers.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if status < 200:
            # 1xx interim answer (RFC 9110 15.2): llhttp completes it as a message of its
            # own; the real answer follows on the same connection.
            self._interim = True
            self.headers = {}
            return
        self.status = status
        coding = self.headers.get("content-encoding", "").lower()
        if coding in ("gzip", "x-gzip", "deflate"):
            # wbits 47: zlib or gzip framing, detected from the first bytes.
            self._decoder = zlib.decompressobj(47)
        self._headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self._decoder is not None:
            try:
                body = self._decoder.decompress(body)
            except zlib.error:
                self.fail(ConnectionLost(f"undecodable {self.headers['content-encoding']} body"))
                self._conn.abort()
                return
        if body:
            self._chunks.append(body)
            self._size += len(body)
            if self._size > HIGH_WATER and not self._paused:
                self._paused = True
                self._conn.pause_reading()
            self._wake()

    def on_message_complete(self) -> None:
        if self._interim:
            self._interim = False
            return
        if self._decoder is not None:
            tail = self._decoder.flush()
            if tail:
                self._chunks.append(tail)
                self._size += len(tail)
        self._keep_alive = self.parser.should_keep_alive()
        self.done = True
        self._stop_timer()
        self._wake()

    # --- events from the connection ------------------------------------------------

    def data(self, data: bytes) -> None:
        """Feed bytes read from the socket to the parser."""
        self.got_bytes = True
        self._last_read = self._loop.time()
        if not self._headers_done:
            self._head_size += len(data)
            if self._head_size > MAX_HEAD:
                self.fail(ConnectionLost(f"the upstream's headers passed {MAX_HEAD} bytes"))
                self._conn.abort()
                return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.fail(ConnectionLost("the upstream switched protocols"))
            self._conn.abort()
        except httptools.HttpParserError as exc:
            self.fail(ConnectionLost(f"invalid HTTP answer ({exc})"))
            self._conn.abort()
        if self.done:
            self._drop_parser()

    def _drop_parser(self) -> None:
        # The answer is whole and nothing feeds its parser again (the connection stops
        # at ``done``). The parser holds our callbacks and we hold it: a reference cycle
        # per upstream answer, which only the garbage collector would free, and whose
        # collections it brings on sooner (with the response's list and five bound
        # methods, 8 objects a request).
        del self.parser

    def lost(self, exc: Exception | None) -> None:
        """The connection closed: the end of a close-delimited body, else a failure."""
        if self.done:
            return
        if self._headers_done and self._close_delimited():
            self._keep_alive = False
            self.on_message_complete()
            self._drop_parser()
            return
        detail = f" ({exc})" if exc else ""
        self.fail(ConnectionLost(f"the upstream closed the connection mid-answer{detail}"))

    def _close_delimited(self) -> bool:
        # RFC 9112 6.3: no Content-Length and no chunked coding -> the body runs to EOF.
        return "content-length" not in self.headers and "chunked" not in self.headers.get(
            "transfer-encoding", ""
        )

    def fail(self, error: TransportError) -> None:
        """End the answer with ``error`` (the consumer sees it after the buffered bytes)."""
        if self.done:
            return
        self._error = error
        self.done = True
        self._stop_timer()
        self._wake()

    # --- waiting, with the read timeout ------------------------------------------

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    async def _wait(self) -> None:
        waiter = self._loop.create_future()
        self._waiter = waiter
        if self._timer is None:
            self._timer = self._loop.call_at(self._next_deadline(), self._on_timer)
        await waiter

    def _next_deadline(self) -> float:
        return min(self._last_read + self._read_timeout, self._deadline)

    def _on_timer(self) -> None:
        # One timer per answer, re-armed only when it fires early: resetting it on every
        # read would cost a timer handle per chunk.
        self._timer = None
        if self.done or self._waiter is None:
            return  # nobody waits (the consumer is busy): re-armed by the next _wait
        now = self._loop.time()
        if now >= self._deadline:
            self.fail(DeadlineExceeded("the answer did not end within the total timeout"))
            self._conn.abort()
        elif now >= self._last_read + self._read_timeout:
            self.fail(ReadTimeout(f"no data for {self._read_timeout}s"))
            self._conn.abort()
        else:
            self._timer = self._loop.call_at(self._next_deadline(), self._on_timer)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def wait_headers(self) -> None:
        """Return once the status and headers are in; raise the failure otherwise."""
        while not self._headers_done:
            if self._error is not None:
                raise self._error
            await self._wait()

    # --- reading -------------------------------------------------------------------

    def _take(self) -> bytes:
        data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks.clear()
        self._size = 0
        if self._paused:
            self._paused = False
            self._last_read = self._loop.time()
            self._conn.resume_reading()
        return data

    async def read(self) -> bytes:
        """The whole (rest of the) body."""
        parts: list[bytes] = []
        while not self.done:
            if self._paused:
                # Take what is buffered, or the paused connection would never deliver
                # the rest and the read would wait out the read timeout.
                parts.append(self._take())
            await self._wait()
        if self._error is not None:
            parts.clear()  # the traceback keeps this frame: it must not keep the bytes
            raise self._error
        if self._chunks:
            parts.append(self._take())
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def iter_any(self) -> AsyncIterator[bytes]:
        """Body bytes as they arrive (everything buffered since the last step, joined).
        :meth:`readany`'s loop written out: the gateway's relay reads every chunk here,
        and a coroutine call per chunk would cost it one more frame each."""
        while True:
            if self._chunks:
                yield self._take()
            elif self.done:
                if self._error is not None:
                    raise self._error
                return
            else:
                await self._wait()

    async def readany(self) -> bytes:
        """The bytes that arrived since the last read (waiting for some), ``b""`` at the
        end: :meth:`iter_any` one call at a time, without an async generator."""
        while not self._chunks:
            if self.done:
                if self._error is not None:
                    raise self._error
                return b""
            await self._wait()
        return self._take()

    def at_eof(self) -> bool:
        """Whether the whole body arrived and was read, without error."""
        return self.done and self._error is None and not self._chunks

    def release(self) -> None:
        """Hand the connection back if the answer was read to its end; else close it."""
        self._stop_timer()
        conn = self._conn
        if self.at_eof() and self._keep_alive:
            conn.pool.put(conn)
        else:
            self._drop_body()
            conn.abort()

    def close(self) -> None:
        """Close the connection (an answer abandoned halfway)."""
        self._stop_timer()
        self._drop_body()
        self._conn.abort()

    def _drop_body(self) -> None:
        # What is left of an abandoned answer must go now, by reference counting: in a
        # reference cycle it waits for a full gc pass, which a busy gateway runs rarely
        # (measured under injected faults: 1 MB error bodies, 256 KiB of each buffered, held
        # 740 MB after 3,000 requests; docs/reliability.md,
        # "Memory and file descriptors under faults"). The unread bytes; and the error
        # raised to the reader, whose traceback holds the reader's frames (and their last
        # chunk) and, through them, us.
        self._chunks.clear()
        self._size = 0
        self._error = None


class _Connection(asyncio.Protocol):
    """One TCP connection: routes socket events to the answer being read."""

    def __init__(self, pool: Pool, key: tuple[str, int], loop: asyncio.AbstractEventLoop) -> None:
        self.pool = pool
        self.key = key
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.response: PooledResponse | None = None
        self.closed = False
        self.idle_since = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (uvloop's transports are not asyncio.Transport subclasses, only alike)
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        response = self.response
        if response is None or response.done:
            # Bytes nobody asked for (after the end of an answer): the connection's
            # framing can no longer be trusted.
            self.abort()
            return
        response.data(data)

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost ends the answer

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.response is not None:
            self.response.lost(exc)

    def pause_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def abort(self) -> None:
        """Close now, dropping unsent data: the connection is not reused."""
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def send(self, data: bytes, read_timeout: float, total_timeout: float) -> PooledResponse:
        """Write one request; the answer object that will receive the reply."""
        assert self.transport is not None
        self.response = response = PooledResponse(self, read_timeout, total_timeout)
        self.transport.write(data)
        return response


class Pool:
    """Keep-alive connections per ``(host, port)``, for every upstream (see the module doc).

    ``max_idle`` bounds the idle connections kept per host (more are closed on release);
    ``idle_ttl`` is how long an idle one may be reused, kept below the keep-alive timeout
    of common servers (gunicorn 2 s, uvicorn and Node 5 s, nginx 75 s) so a reused socket
    is rarely one the server is closing (a request is never re-sent). ``opener`` replaces
    ``loop.create_connection`` (tests).
    """

    def __init__(
        self, *, max_idle: int = MAX_IDLE, idle_ttl: float = IDLE_TTL, opener: Opener | None = None
    ) -> None:
        self.max_idle = max_idle
        self.idle_ttl = idle_ttl
        self._opener = opener
        self._idle: dict[tuple[str, int], deque[_Connection]] = {}
        self._closed = False

    async def post(
        self,
        target: Target,
        body: bytes,
        *,
        connect_timeout: float,
        read_timeout: float,
        total_timeout: float = NO_DEADLINE,
        extra_headers: Mapping[str, str] | None = None,
    ) -> PooledResponse:
        """POST ``body`` to ``target``; return once status and headers are in.

        Raises a :class:`TransportError`. The caller must :meth:`~PooledResponse.release` (or
        ``close``) the answer. ``total_timeout`` counts from the send, connecting excluded.
        """
        data = target.request(body, extra_headers)
        conn = self._take_idle(target.key)
        reused = conn is not None
        if conn is None:
            conn = await self._connect(target, connect_timeout)
        response = conn.send(data, read_timeout, total_timeout)
        try:
            await response.wait_headers()
        except ConnectionLost as exc:
            response.close()
            if reused and not response.got_bytes:
                # Not re-sent: the server may have read and acted on it (module doc).
                raise ConnectionLost(
                    "the upstream closed a reused keep-alive connection without answering "
                    "(the request was not re-sent: it may have been processed)"
                ) from exc
            raise
        except BaseException:
            response.close()
            raise
        return response

    def _take_idle(self, key: tuple[str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        expired = idle[0].loop.time() - self.idle_ttl
        while idle:
            conn = idle.pop()  # LIFO: the most recently used socket is the least stale
            if not conn.closed and conn.idle_since > expired:
                return conn
            conn.abort()
        return None

    async def _connect(self, target: Target, timeout: float) -> _Connection:
        loop = asyncio.get_running_loop()
        key = target.key
        opener = self._opener or loop.create_connection
        try:
            async with asyncio.timeout(timeout):
                _, protocol = await opener(
                    lambda: _Connection(self, key, loop), target.host, target.port
                )
        except TimeoutError:
            # (before OSError: TimeoutError is one)
            raise ConnectTimeout(f"no connection within {timeout}s") from None
        except OSError as exc:
            raise ConnectFailed(exc) from exc
        return cast(_Connection, protocol)

    def put(self, conn: _Connection) -> None:
        """Take back a connection whose answer was read to its end."""
        conn.response = None
        idle = self._idle.get(conn.key)
        if idle is None:
            idle = self._idle[conn.key] = deque()
        now = conn.loop.time()
        # The oldest idle connections are at the left: drop the dead and expired ones
        # there so a quiet pool does not keep sockets the server has given up on.
        while idle and (idle[0].closed or idle[0].idle_since <= now - self.idle_ttl):
            idle.popleft().abort()
        if self._closed or conn.closed or len(idle) >= self.max_idle:
            conn.abort()
            return
        conn.idle_since = now
        idle.append(conn)

    def idle_count(self, key: tuple[str, int]) -> int:
        """Idle connections kept for ``key`` (for tests and diagnostics)."""
        return len(self._idle.get(key, ()))

    async def aclose(self) -> None:
        """Close every idle connection; connections in use close when released."""
        self._closed = True
        for idle in self._idle.values():
            for conn in idle:
                conn.abort()
            idle.clear()
