"""Connection limits against hostile clients, and the graceful drain, in uvicorn's protocol.

uvicorn times out nothing while a request arrives: a client that sends its head one byte
a second, declares a body longer than it sends, or connects and sends nothing holds a
connection (and a file descriptor) forever, and there is no cap on connections, so a
slowloris flood exhausts the descriptors and every request fails. :class:`GuardedProtocol`
is uvicorn's httptools protocol plus, per connection, a phase and the time it entered it:

    HEAD  accepted, or the next request begun: the head must be complete within
          ``header_timeout`` (then 408 and close; a silent connection is just closed)
    BUSY  head done, the app is answering; while the body is incomplete (uvicorn's
          ``cycle.more_body``) ``body_timeout`` of silence ends it (408, close)
    IDLE  answered, waiting for the next request: closed after ``keep_alive_timeout``
    SOCKET  upgraded to a WebSocket (server/process/socket_guard.py): no timeout (its pings
          watch the peer); it counts toward the cap and the drain, busy while it answers

An upgrade hands the connection to the WebSocket protocol, which takes this one's place
in the registry (:meth:`GuardedProtocol.handle_websocket_upgrade`).

A head larger than ``max_header_bytes`` or with more than ``max_headers`` headers gets
431. :class:`Guard` is the per-process registry: one timer sweeps the connections for the
timeouts (nothing is armed per request, so the hot path only stores a phase and a time),
and at ``max_connections`` a new connection first evicts the one that has spent longest
sending a head or a body (then the longest idle keep-alive one, then the WebSocket idle
longest), so a flood of slow
clients cannot lock out fast ones; if every connection is busy the newcomer gets a 503
with Retry-After and is closed. The default cap is derived from the descriptor limit
(:func:`derive_max_connections`).

Every refusal is a tiny JSON body that both SDKs parse (``{"type": "error", "error":
{"type", "message", "code"}}``, the Anthropic shape plus OpenAI's ``code``) with
``Connection: close``.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections.abc import Callable
from typing import Any

import httptools
import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from ...config import ServerConfig
from ..drain import RETRY_AFTER_SECONDS, Drain
from ..middleware import CLIENT_GONE, TASK

log = logging.getLogger("interlingua.server")

HEAD, BUSY, IDLE, SOCKET = range(4)

#: descriptors kept for the process itself: listening socket, stdio, logs, the usage
#: database and its WAL, a model file, the event loop's own, DNS
RESERVED_FDS = 64


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (as Go's runtime does); return it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            log.warning("could not raise the open-file limit from %d to %d", soft, target)
    return soft if soft != resource.RLIM_INFINITY else target


def derive_max_connections(nofile: int) -> int:
    """The default connection cap for a process allowed ``nofile`` descriptors.

    Each client connection may come with one upstream connection, and up to an eighth of
    the cap more may be open for a moment while being refused with 503, so
    ``cap + cap + cap/8 <= nofile - 64``: ``cap = (nofile - 64) * 8 // 17`` (451 for 1,024
    descriptors, 90 for 256), at least 8.
    """
    return max(8, (nofile - RESERVED_FDS) * 8 // 17)


class Guard:
    """The connections of one process, their limits, and the drain (see module doc)."""

    def __init__(self, server: ServerConfig, drain: Drain, max_connections: int) -> None:
        self.drain = drain
        self.header_timeout = server.header_timeout
        self.body_timeout = server.body_timeout
        self.keep_alive_timeout = server.keep_alive_timeout
        self.shutdown_timeout = server.shutdown_timeout
        self.max_header_bytes = server.max_header_bytes
        self.max_headers = server.max_headers
        self.max_connections = max_connections
        #: connections being refused (503) may briefly exceed the cap by this many
        self.refusing_slack = max(1, max_connections // 8)
        #: GuardedProtocol, and GuardedWebSocket (server/process/socket_guard.py: phase SOCKET,
        #: ``busy`` while it answers, ``go_away()`` to close it)
        self.connections: set[Any] = set()
        self.evictions = 0
        shortest = min(self.header_timeout, self.body_timeout, self.keep_alive_timeout)
        self.interval = max(0.05, min(1.0, shortest / 4))
        self._sweeping = False
        self._tasks: set[asyncio.Task[None]] | None = None
        self.busy_at_drain = False

    # -- admission ----------------------------------------------------------------------

    def admit(self, conn: GuardedProtocol) -> bool:
        """Register ``conn``; False if it must be refused (the cap is reached, all busy)."""
        conns = self.connections
        admitted = True
        if len(conns) >= self.max_connections:
            victim = self._victim()
            if victim is not None:
                self.evictions += 1
                victim.evict()
            elif len(conns) >= self.max_connections + self.refusing_slack:
                conn.transport.abort()  # even the refusals are at their bound
                return False
            else:
                admitted = False
        conns.add(conn)
        if not self._sweeping:
            self._sweeping = True
            conn.loop.call_later(self.interval, self._sweep, conn.loop)
        return admitted

    def _victim(self) -> Any:
        """The connection longest sending a head or body, else the one longest idle,
        else the WebSocket longest without a request (its client reconnects)."""
        slow = idle = socket = None
        for conn in self.connections:
            if conn.phase == SOCKET:
                if not conn.busy and (socket is None or conn.since < socket.since):
                    socket = conn
            elif conn.sending():
                if slow is None or conn.since < slow.since:
                    slow = conn
            elif conn.phase == IDLE and (idle is None or conn.since < idle.since):
                idle = conn
        return slow or idle or socket

    # -- timeouts -----------------------------------------------------------------------

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        now = loop.time()
        head_deadline = now - self.header_timeout
        body_deadline = now - self.body_timeout
        idle_deadline = now - self.keep_alive_timeout
        any_busy = False
        for conn in list(self.connections):
            phase = conn.phase
            if phase == HEAD:
                if conn.since < head_deadline:
                    conn.head_timed_out()
            elif phase == IDLE:
                if conn.since < idle_deadline:
                    # uvicorn has a keep-alive timer too, but the rest of a body sent
                    # after an early answer (413) cancels it for good
                    conn.transport.close()
            elif phase == SOCKET:
                any_busy = any_busy or conn.busy
            elif conn.sending() and conn.last_read < body_deadline:
                conn.body_timed_out()
            else:
                any_busy = True
        if self.drain.draining and not any_busy:
            self.close_waiting()  # nothing left to drain: idle connections need not wait
        if self.connections or self.drain.draining:
            loop.call_later(self.interval, self._sweep, loop)
        else:
            self._sweeping = False

    # -- drain --------------------------------------------------------------------------

    def begin_drain(self, conn: Any) -> None:
        """Start the drain (once): cancel what still runs ``shutdown_timeout`` later.

        ``conn`` is the connection uvicorn asked to shut down first (either protocol:
        both hold the server's ``tasks`` and ``loop``)."""
        if self.drain.draining:
            return
        self.drain.begin()
        self._tasks = conn.tasks
        self.busy_at_drain = self.any_busy()
        log.info(
            "draining %d connection(s): in-flight requests may run for %gs",
            len(self.connections),
            self.shutdown_timeout,
        )
        conn.loop.call_later(self.shutdown_timeout, self._expire)

    def any_busy(self) -> bool:
        """Whether some connection is still reading or answering a request."""
        return any(
            conn.phase == BUSY or (conn.phase == SOCKET and conn.busy) for conn in self.connections
        )

    def close_waiting(self) -> None:
        """Close every connection that has no request in flight."""
        for conn in list(self.connections):
            if conn.phase in (HEAD, IDLE):
                conn.transport.close()
            elif conn.phase == SOCKET and not conn.busy:
                conn.go_away()

    def _expire(self) -> None:
        self.drain.expire()
        running = list(self._tasks or ())
        if running:
            log.warning(
                "shutdown_timeout (%gs) passed: ending %d request(s) still running",
                self.shutdown_timeout,
                len(running),
            )
        for task in running:
            # The handlers see ``drain.expired`` and answer with the dialect's error
            # (in-band once a stream started) instead of dying with a traceback.
            task.cancel()
        self.close_waiting()


class _Refusal(Exception):
    """Raised inside a parser callback to stop parsing and answer ``status``."""

    def __init__(
        self,
        status: int,
        error_type: str,
        code: str,
        message: str,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_type = error_type
        self.code = code
        self.retry_after = retry_after

    def render(self) -> bytes:
        """The whole HTTP response: status line, headers, JSON body."""
        error = {"type": self.error_type, "message": str(self), "code": self.code}
        body = orjson.dumps({"type": "error", "error": error})
        head = [
            STATUS_LINE[self.status],
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n",
        ]
        if self.retry_after is not None:
            head.append(b"retry-after: %d\r\n" % round(self.retry_after))
        return b"".join([*head, b"\r\n", body])


def _refusal_for_cap() -> _Refusal:
    return _Refusal(
        503,
        "overloaded_error",
        "too_many_connections",
        "The gateway has too many open connections; retry shortly.",
        RETRY_AFTER_SECONDS,
    )


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits and drain of its :class:`Guard`.

    uvicorn builds one per connection; the guard comes from its config
    (``config.guard``, set by :class:`~interlingua.server.process.serve.GatewayServerConfig`).
    Most overrides call the parent, then note the phase; ``data_received`` and
    ``on_response_complete`` are uvicorn 0.54's, adapted (see each).
    """

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        guard: Guard = config.guard
        self.guard = guard
        self.drain = guard.drain
        self.clock: Callable[[], float] = self.loop.time
        self.max_header_bytes = guard.max_header_bytes
        self.max_headers = guard.max_headers
        self.phase = HEAD
        self.since = 0.0  # when the phase began
        self.last_read = 0.0  # last bytes received while BUSY
        self.began = False  # a request's first byte arrived (HEAD)
        self.pending = 0  # bytes of earlier chunks that arrived wholly inside this head
        self.chunk = 0  # bytes of the chunk being parsed
        self.refusal: _Refusal | None = None

    # -- connection ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.since = self.last_read = self.clock()
        if not self.guard.admit(self) and not transport.is_closing():
            # At the cap with nobody to evict: read the head, then answer 503 and close
            # (an answer written before the request arrives is lost to a reset).
            self.refusal = _refusal_for_cap()

    def connection_lost(self, exc: Exception | None) -> None:
        cycle = self.cycle
        super().connection_lost(exc)
        self.guard.connections.discard(self)
        if cycle is not None and cycle.disconnected and not cycle.response_started:
            self._cancel_abandoned(cycle.scope)

    @staticmethod
    def _cancel_abandoned(scope: Any) -> None:
        # The client hung up before its answer began: uvicorn lets the handler run on, so
        # a non-streaming request would keep its upstream generating to the end for
        # nobody. Cancelling the task closes the upstream connection (or frees the local
        # engine); the front layer (server/middleware.py) consumes the cancellation.
        # Started answers are not touched: a stream watches the disconnect itself.
        state = scope.get("state") or {}
        task = state.get(TASK)
        if task is not None and not task.done():
            state[CLIENT_GONE] = True
            task.cancel()

    def handle_websocket_upgrade(self) -> None:
        # The WebSocket protocol takes over the transport, and this connection's place in
        # the registry (it registers itself); this one would otherwise never be lost.
        self.guard.connections.discard(self)
        super().handle_websocket_upgrade()

    def data_received(self, data: bytes) -> None:
        # uvicorn's data_received, with our refusals told apart from malformed requests.
        self._unset_keepalive_if_required()
        phase = self.phase
        if phase == BUSY:
            self.last_read = self.clock()
        self.chunk = len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            refusal = exc.__context__  # a callback's exception (HttpParserCallbackError)
            if isinstance(refusal, _Refusal):
                self.refuse(refusal)
                return
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)
            return
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        if phase == HEAD and self.phase == HEAD:
            # The whole chunk was head: this catches one huge header still arriving,
            # which the parser buffers before any callback sees it.
            self.pending += len(data)
            if self.pending > self.max_header_bytes:
                self.refuse(_headers_too_large(self.max_header_bytes))

    # -- parser callbacks ---------------------------------------------------------------

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self.phase != HEAD:  # a fresh connection's first head is timed from the accept
            self.phase = HEAD
            self.since = self.clock()
        self.began = True
        self.pending = 0

    def on_headers_complete(self) -> None:
        if self.refusal is not None:
            raise self.refusal
        if (
            len(self.headers) > self.max_headers
            or self.pending + self.chunk > self.max_header_bytes
        ):
            self._check_head()
        super().on_headers_complete()
        self.phase = BUSY
        self.since = self.last_read = self.clock()
        if self.drain.draining and self.cycle is not None:
            self.cycle.keep_alive = False  # answer it (503 from the app), then close

    def _check_head(self) -> None:
        """431 for too many headers, or a head larger than ``max_header_bytes``.

        The head is no larger than the chunks it arrived in (``pending`` + ``chunk``), so
        it is measured only when those exceed the limit: no per-header work otherwise.
        """
        headers = self.headers
        if len(headers) > self.max_headers:
            raise _Refusal(
                431,
                "invalid_request_error",
                "too_many_headers",
                f"The request has more than {self.max_headers} headers.",
            )
        limit = self.max_header_bytes
        if self.pending + self.chunk > limit:
            size = len(self.url) + sum(len(name) + len(value) + 4 for name, value in headers)
            if size > limit:
                raise _headers_too_large(limit)

    def on_response_complete(self) -> None:
        # uvicorn's, without its keep-alive timer: arming and cancelling a timer per
        # request costs more than the guard's one sweep, which closes idle connections.
        self.server_state.total_requests += 1
        # IDLE also when the body is still arriving (answered early: 413, 401): the
        # rest is not waited for beyond the keep-alive timeout.
        self.phase = IDLE
        self.since = self.clock()
        if self.transport.is_closing():
            return
        self.flow.resume_reading()
        if self.pipeline:  # a pipelined request whose head was already read
            cycle, app = self.pipeline.pop()
            self.phase = BUSY
            self._start_asgi_task(cycle, app)

    def sending(self) -> bool:
        """Whether the client is still sending this request (head or body)."""
        phase = self.phase
        return phase == HEAD or (phase == BUSY and self.cycle.more_body)

    # -- guard actions ------------------------------------------------------------------

    def refuse(self, refusal: _Refusal) -> None:
        """Answer ``refusal`` (unless a response is under way) and close."""
        transport = self.transport
        if transport.is_closing():
            return
        cycle = self.cycle  # the request being answered, or the last one answered
        if cycle is None or not cycle.response_started or cycle.response_complete:
            transport.write(refusal.render())
        transport.close()

    def evict(self) -> None:
        """Make room for a new connection: this one is the slowest sender (or idle)."""
        if self.phase == IDLE or (self.phase == HEAD and not self.began):
            self.transport.close()
        else:
            self.refuse(_refusal_for_cap())

    def head_timed_out(self) -> None:
        """``header_timeout`` passed in HEAD: 408 if a request began, else just close."""
        if not self.began:
            self.transport.close()
            return
        self.refuse(
            _Refusal(
                408,
                "invalid_request_error",
                "request_timeout",
                f"The request head did not arrive within {self.guard.header_timeout:g}s.",
            )
        )

    def body_timed_out(self) -> None:
        """``body_timeout`` of silence mid-body: 408 (unless answered already) and close."""
        self.refuse(
            _Refusal(
                408,
                "invalid_request_error",
                "request_timeout",
                f"The request body stopped arriving for {self.guard.body_timeout:g}s "
                "before it was complete.",
            )
        )

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown: drain instead of closing idle connections at once.

        A connection with a request in flight finishes it and closes. Idle ones stay open
        while others are busy, so a request or health check sent on them gets a clean 503
        rather than a reset; the guard closes them once nothing is in flight.
        """
        guard = self.guard
        guard.begin_drain(self)
        if self.phase == BUSY:
            if self.cycle is not None:
                self.cycle.keep_alive = False
        elif not guard.busy_at_drain:
            self.transport.close()


def _headers_too_large(limit: int) -> _Refusal:
    return _Refusal(
        431,
        "invalid_request_error",
        "headers_too_large",
        f"The request line and headers are larger than {limit} bytes.",
    )
