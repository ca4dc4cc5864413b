"""uvicorn's WebSocket protocol under the connection guard and the graceful drain.

A ``GET /v1/responses`` with ``Upgrade: websocket`` arrives on a
:class:`~.guard.GuardedProtocol` (so the head timeout, the head limits and the connection
cap apply to the handshake as to any request); uvicorn then hands the transport to this
protocol, the websockets library's sans-I/O one (``ws_per_message_deflate``, as Codex
asks; pings every ``ws_ping_interval``, closed after ``ws_ping_timeout`` without a pong:
that is what watches an idle socket, not the keep-alive timeout). It takes the HTTP
connection's place in the guard's registry, in phase ``SOCKET``:

* it counts toward ``max_connections``; at the cap, when no slow sender or idle
  keep-alive connection is left to evict, the socket idle longest is closed with 1013
  (try again later), and Codex opens another;
* it is ``busy`` while the handler (server/responses/websocket.py) answers a request, which the
  drain waits for;
* on shutdown, an idle socket is closed at once with 1001 (going away); a busy one
  finishes its response and the handler closes it with 1001 (uvicorn's own protocol
  would close it at once, mid-response, with 1012). Past ``shutdown_timeout`` the guard
  cancels the handler, which ends the response with the in-band error.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.http11 import Request as HandshakeRequest

from ..responses.websocket import GOING_AWAY, SOCKET_STATE
from .guard import SOCKET, Guard

__all__ = ["GuardedWebSocket"]

TRY_AGAIN_LATER = 1013  # RFC 6455 7.4.1 (IANA registry): overloaded, reconnect later


class GuardedWebSocket(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol in the guard's registry (module docstring).

    uvicorn builds one per upgraded connection, from the same config as the HTTP
    protocol (``config.guard``, set by :class:`~.serve.GatewayServerConfig`).
    """

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.guard: Guard = config.guard
        self.phase = SOCKET
        self.busy = False
        self.since = self.last_read = self.loop.time()  # idle since

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.guard.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.guard.connections.discard(self)

    def handle_connect(self, event: HandshakeRequest) -> None:
        super().handle_connect(event)
        if self.response.status_code == 101:  # (else the library refused the handshake)
            self.scope["state"][SOCKET_STATE] = self

    def set_busy(self, busy: bool) -> None:
        """The handler began (True) or finished (False) answering a request."""
        self.busy = busy
        self.since = self.loop.time()

    def sending(self) -> bool:
        """Never a slow sender: frames are read as they come (the guard asks)."""
        return False

    def evict(self) -> None:
        """Make room at the connection cap (the guard picks only idle sockets)."""
        self.go_away(TRY_AGAIN_LATER, "too many connections; reconnect")

    def go_away(self, code: int = GOING_AWAY, reason: str = "server shutting down") -> None:
        """Close an idle socket now: the close frame, then the handshake's end (or the
        close timeout). The handler sees a disconnect and stops."""
        if self.close_sent or self.transport.is_closing():
            return
        if not self.handshake_complete:
            super().shutdown()  # (the handshake's 500, and close)
            return
        self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})
        self.conn.send_close(code, reason)
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        if self.read_paused:  # read on, for the client's closing frame
            self.read_paused = False
            self.transport.resume_reading()
        self.close_timer = self.loop.call_later(self.close_timeout, self.transport.close)

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown: the drain (see the module docstring)."""
        self.guard.begin_drain(self)
        if not self.busy:
            self.go_away()
