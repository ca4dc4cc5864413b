"""Run the gateway on a real uvicorn server on a free 127.0.0.1 port, in a thread.

Used where real sockets matter: the official SDKs as clients, chunk timing, disconnects.
The server is stopped (and its port released) when the context exits.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextlib.contextmanager
def running(config: uvicorn.Config, stop_within: float = 10) -> Iterator[uvicorn.Server]:
    """A uvicorn server of ``config`` running in a thread until the context exits."""
    server = uvicorn.Server(config)
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
