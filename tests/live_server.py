"""Run the gateway on a real uvicorn server on a free 127.0.0.1 port, in a thread.

Used where real sockets matter: the official SDKs as clients, chunk timing, disconnects.
The server is stopped (and its port released) when the context exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn


def free_port() -> int:
    """A port nothing listens on right now, and one no other pytest-xdist worker of this
    run is handed: worker N of W takes only ports whose ``port >> 1`` is N modulo W.

    The port is released before the server binds it; without the split, a server that
    another worker starts in that gap could be handed the same port. (``>> 1``: Linux
    hands out odd ports first on ``bind(0)``, so the low bit cannot split them.)
    """
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if (port >> 1) % workers == worker:
            return port


class QuickServer(uvicorn.Server):
    """uvicorn's server without its fixed pauses: it looks for ``should_exit`` every
    0.1 s, and its shutdown sleeps 0.1 s before it starts waiting, then polls every 0.1 s.
    A suite that starts hundreds of servers paid about 0.2 s for each stop; these poll
    every few milliseconds instead. The steps and their order are uvicorn's: stop
    listening, ask every connection to shut down, wait for connections and tasks (at most
    ``timeout_graceful_shutdown``, then cancel the tasks), then the lifespan shutdown."""

    async def main_loop(self) -> None:
        """uvicorn's loop, ticking every 10 ms (``on_tick`` dates the responses)."""
        ticks = 0
        while not await self.on_tick(ticks):
            ticks = (ticks + 1) % 864000
            await asyncio.sleep(0.01)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's shutdown (see the class docstring), polling every 5 ms."""
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        limit = self.config.timeout_graceful_shutdown
        deadline = time.monotonic() + (math.inf if limit is None else limit)
        state = self.server_state
        while (state.connections or state.tasks) and not self.force_exit:
            if time.monotonic() > deadline:
                for task in state.tasks:
                    task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
                break
            await asyncio.sleep(0.005)
        for server in self.servers:
            await server.wait_closed()
        if not self.force_exit:
            await self.lifespan.shutdown()


@contextlib.contextmanager
def running(config: uvicorn.Config, stop_within: float = 10) -> Iterator[uvicorn.Server]:
    """A uvicorn server of ``config`` running in a thread until the context exits."""
    server = QuickServer(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.01)
    try:
        yield server
    finally:
        server.should_exit = True
        thread.join(timeout=stop_within)


@contextlib.contextmanager
def live_server(app: Any) -> Iterator[str]:
    """Serve ``app`` and yield its base URL (``http://127.0.0.1:PORT``)."""
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan="on", access_log=False
    )
    with running(config):
        yield f"http://127.0.0.1:{port}"
