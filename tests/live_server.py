"""Run the gateway on a real uvicorn server on a free 127.0.0.1 port, in a thread.

Used where real sockets matter: the official SDKs as clients, chunk timing, disconnects.
The server is stopped (and its port released) when the context exits.
"""

from __future__ import annotations

import contextlib
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
