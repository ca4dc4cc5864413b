"""A throwaway ``redis-server`` (the Debian package) for tests, on a free 127.0.0.1 port.

Nothing is persisted (``--save ''``, no append-only file) and the server runs in its own
temporary directory; it is stopped when the context exits. Tests that use it are marked
:data:`needs_redis_server`, skipped with a reason where the binary is missing. A test can
:meth:`RedisServer.kill` the server mid-run and :meth:`RedisServer.start` it again on the
same port, to watch the gateway lose Redis and find it again.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live_server import free_port

BINARY = shutil.which("redis-server") or "/usr/bin/redis-server"

needs_redis_server = pytest.mark.skipif(
    not Path(BINARY).exists(),
    reason="redis-server is not installed (Debian: apt-get install redis-server)",
)


class RedisServer:
    """One ``redis-server`` process on ``port`` (see the module docstring)."""

    def __init__(self, directory: Path, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, within: float = 10.0) -> None:
        """Start the server and wait until it answers PING."""
        self.process = subprocess.Popen(
            [
                BINARY,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + within
        while not self.answers():
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.process.returncode}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"redis-server did not answer within {within} s")
            time.sleep(0.01)

    def answers(self) -> bool:
        """Whether something on the port answers PING with PONG."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): connections stay open, nothing answers -- a
        Redis behind a dead network link."""
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Thaw a paused server (SIGCONT)."""
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        """Kill the server at once (SIGKILL: no goodbye to its clients) and reap it."""
        self._end(signal.SIGKILL)

    def stop(self) -> None:
        """Stop the server (SIGTERM) and reap it."""
        self._end(signal.SIGTERM)

    def _end(self, sig: int) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGCONT)  # (a paused server cannot act on SIGTERM)
        process.send_signal(sig)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@contextlib.contextmanager
def redis_server() -> Iterator[RedisServer]:
    """A running :class:`RedisServer` in a temporary directory, stopped on exit."""
    with tempfile.TemporaryDirectory(prefix="interlingua-redis-") as directory:
        server = RedisServer(Path(directory))
        server.start()
        try:
            yield server
        finally:
            server.stop()
