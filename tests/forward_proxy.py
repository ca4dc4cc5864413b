"""A tiny plain-HTTP forward proxy on 127.0.0.1, for the proxy tests.

It takes absolute-form requests (``POST http://host:port/path HTTP/1.1``), the way a
client talks to an ``HTTP_PROXY``, records each target and the proxy headers, forwards
the request to the target with ``Connection: close`` and relays the answer's bytes as
they come (streams included), one request per connection. No CONNECT (https through the
proxy is aiohttp's own, tested upstream).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

_HOP = {"connection", "keep-alive", "proxy-authorization", "proxy-connection"}


@dataclass
class ForwardProxy:
    url: str = ""
    #: the absolute URL of every request that went through
    targets: list[str] = field(default_factory=list)
    #: each request's headers (lowercase names), proxy headers included
    headers: list[dict[str, str]] = field(default_factory=list)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream: asyncio.StreamWriter | None = None
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *lines = head.decode("latin-1").split("\r\n")
            method, target, version = request_line.split(" ")
            pairs = [line.split(":", 1) for line in lines if line]
            headers = {name.strip().lower(): value.strip() for name, value in pairs}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            self.targets.append(target)
            self.headers.append(headers)
            url = urlsplit(target)
            up_reader, upstream = await asyncio.open_connection(url.hostname, url.port)
            path = url.path + (f"?{url.query}" if url.query else "")
            kept = "".join(f"{n}: {v}\r\n" for n, v in headers.items() if n not in _HOP)
            upstream.write(
                f"{method} {path} {version}\r\n{kept}connection: close\r\n\r\n".encode("latin-1")
                + body
            )
            await upstream.drain()
            while chunk := await up_reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            if upstream is not None:
                upstream.close()
            writer.close()


@contextlib.asynccontextmanager
async def forward_proxy() -> AsyncIterator[ForwardProxy]:
    """Run a :class:`ForwardProxy` in the current loop; ``url`` is ``http://127.0.0.1:PORT``."""
    proxy = ForwardProxy()
    server = await asyncio.start_server(proxy.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proxy.url = f"http://127.0.0.1:{port}"
    try:
        yield proxy
    finally:
        server.close()
        await server.wait_closed()
