"""The request head of the lean HTTP client (:mod:`._pool`): encoded once per URL.

A request is one pre-assembled buffer: the request line and header block are encoded once
per URL (:class:`Target`), only ``Content-Length`` and the body are added per request.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlsplit

from .. import __version__

__all__ = ["Target", "check_headers"]

_BAD_HEADER_CHARS = ("\r", "\n", "\0")


def _header_block(headers: Mapping[str, str]) -> bytes:
    lines = []
    for name, value in headers.items():
        if any(c in name or c in value for c in _BAD_HEADER_CHARS) or ":" in name:
            # Header injection: a value with CR/LF would start a header (or a request) of
            # its own. aiohttp refuses these too.
            raise ValueError(f"invalid character in HTTP header {name!r}")
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines).encode("latin-1")


def check_headers(headers: Mapping[str, str]) -> None:
    """Raise ``ValueError`` for a header no engine may send (CR, LF or NUL; a colon in
    a name), as :class:`Target` would when encoding it: for a caller that wants to know
    when it is configured, before its first request."""
    _header_block(headers)


class Target:
    """One URL with its encoded request head (all but ``Content-Length``).

    >>> t = Target("http://127.0.0.1:8000/v1/chat/completions", {"authorization": "Bearer k"})
    >>> t.head.split(b"\\r\\n")[:2]
    [b'POST /v1/chat/completions HTTP/1.1', b'host: 127.0.0.1:8000']
    """

    __slots__ = ("base", "head", "host", "key", "port")

    def __init__(self, url: str, headers: Mapping[str, str]) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the lean client takes http:// URLs only, not {url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.key = (self.host, self.port)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = self.host if ":" not in self.host else f"[{self.host}]"
        ours = {
            "host": host if self.port == 80 else f"{host}:{self.port}",
            "user-agent": f"interlingua/{__version__}",
            # Passthrough relays the body as is, so it must arrive decoded; local upstreams
            # gain nothing from compression. (gzip/deflate answers are decoded anyway.)
            "accept-encoding": "identity",
        }
        self.base = {**ours, **{k.lower(): v for k, v in headers.items()}}
        self.head = f"POST {path} HTTP/1.1\r\n".encode("latin-1") + _header_block(self.base)

    def request(self, body: bytes, extra: Mapping[str, str] | None = None) -> bytes:
        """The whole request: head, ``extra`` headers (replacing ours), length, body."""
        head = self.head
        if extra:
            extra = {k.lower(): v for k, v in extra.items()}
            if any(name in self.base for name in extra):
                first = head.split(b"\r\n", 1)[0] + b"\r\n"
                head = first + _header_block({**self.base, **extra})
            else:
                head += _header_block(extra)
        return b"%bcontent-length: %d\r\n\r\n%b" % (head, len(body), body)
