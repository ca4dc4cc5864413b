"""A blocking raw-socket HTTP/1.1 client that shows exactly which bytes arrived.

For testing the fault upstream itself: an HTTP library would hide (or refuse) the very
framing faults under test, so this one reads the head, then the body by whichever framing
the test asks for, and reports EOF and silence as facts rather than errors.
"""

from __future__ import annotations

import socket
import time
from typing import Any
from urllib.parse import urlsplit

import orjson


class RawClient:
    """One TCP connection to ``url``; use as a context manager."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        parts = urlsplit(url)
        assert parts.hostname is not None and parts.port is not None
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        self.timeout = timeout
        self.buffer = b""

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def post(self, path: str, body: dict[str, Any], *headers: tuple[str, str]) -> None:
        """Send a POST with a JSON body and Content-Length (keep-alive)."""
        data = orjson.dumps(body)
        lines = [f"POST {path} HTTP/1.1", "host: 127.0.0.1", "content-type: application/json"]
        lines += [f"{k}: {v}" for k, v in headers]
        lines.append(f"content-length: {len(data)}")
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + data)

    def _fill(self) -> bool:
        """Read more bytes into the buffer; False at EOF."""
        data = self.sock.recv(65536)
        self.buffer += data
        return bool(data)

    def read_head(self) -> tuple[int, dict[str, str]]:
        """Status and lowercase headers (a repeated header would fail the test)."""
        while b"\r\n\r\n" not in self.buffer:
            if not self._fill():
                raise EOFError(f"EOF inside the head: {self.buffer!r}")
        raw, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        lines = raw.decode("latin-1").split("\r\n")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            assert name.lower() not in headers, f"header {name} sent twice"
            headers[name.lower()] = value.strip()
        return int(lines[0].split(" ")[1]), headers

    def read_exactly(self, size: int) -> bytes:
        """``size`` bytes, or EOFError carrying what came."""
        while len(self.buffer) < size:
            if not self._fill():
                raise EOFError(self.buffer)
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def read_line(self) -> bytes:
        """One CRLF-terminated line, without the CRLF."""
        while b"\r\n" not in self.buffer:
            if not self._fill():
                raise EOFError(self.buffer)
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def read_chunks(self) -> list[bytes]:
        """Chunk payloads up to the last chunk; ValueError on a size line that is not hex."""
        chunks: list[bytes] = []
        while True:
            line = self.read_line()
            size = int(line.split(b";")[0], 16)
            if size == 0:
                assert self.read_line() == b""
                return chunks
            chunks.append(self.read_exactly(size))
            assert self.read_exactly(2) == b"\r\n"

    def read_to_eof(self) -> bytes:
        """Everything until the server closes."""
        while self._fill():
            pass
        data, self.buffer = self.buffer, b""
        return data

    def open_after(self, seconds: float) -> bool:
        """True when the server has not closed within ``seconds``; whatever arrives
        meanwhile is kept in :attr:`buffer` (bytes in flight are not a verdict)."""
        deadline = time.monotonic() + seconds
        try:
            while (left := deadline - time.monotonic()) > 0:
                self.sock.settimeout(left)
                data = self.sock.recv(65536)
                if not data:
                    return False
                self.buffer += data
        except TimeoutError:
            pass
        finally:
            self.sock.settimeout(self.timeout)
        return True

    def response(self) -> tuple[int, dict[str, str], bytes]:
        """A whole response framed by Content-Length, chunks, or EOF."""
        status, headers = self.read_head()
        if "content-length" in headers:
            return status, headers, self.read_exactly(int(headers["content-length"]))
        if headers.get("transfer-encoding") == "chunked":
            return status, headers, b"".join(self.read_chunks())
        return status, headers, self.read_to_eof()


def sse_data(stream: bytes) -> list[bytes]:
    """The ``data:`` payloads of an SSE byte stream, in order (one data line per event)."""
    out = []
    for block in stream.split(b"\n\n"):
        for line in block.split(b"\n"):
            if line.startswith(b"data: "):
                out.append(line[6:])
    return out
