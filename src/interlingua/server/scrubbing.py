"""Upstream secrets kept from clients: every configured key scrubbed to ``***``.

Upstreams have echoed their key back, in error bodies, in-band stream errors and even
answers. The gateway alone scrubs (the upstreams do not): every byte and every error a
client gets leaves through it, it knows every configured key, and it covers every
upstream kind, outside ones too. It scrubs the decoded message, so a key the upstream
wrote JSON-escaped is caught; an upstream's error may hold the key until it is rendered,
so the mid-stream warning (server/asgi_io.py) logs the rendered copy.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

from ..core import aclose_iterator
from ..errors import InterlinguaError

__all__ = ["Scrubber"]


class Scrubber:
    """Scrubs ``secrets`` from text, bytes, errors and relayed streams."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        # Longest first so a key that contains another is scrubbed whole.
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        """``text`` with every upstream secret replaced by ``***``."""
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, "***")
        return text

    def scrubbed(self, error: InterlinguaError) -> InterlinguaError:
        """``error`` with every secret scrubbed from its message: a copy when there was
        one to scrub, else ``error`` itself; the error passed in is never changed."""
        message = self.scrub(error.message)
        return error if message == error.message else error.with_message(message)

    def scrub_bytes(self, body: bytes) -> bytes:
        """``body`` with every upstream secret replaced by ``***``."""
        for secret in self.secrets:
            raw = secret.encode()
            if raw in body:
                body = body.replace(raw, b"***")
        return body

    async def _scrub_stream(self, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """Relayed bytes with every secret scrubbed, even one split across two reads.

        Upstreams have echoed the key inside a mid-stream error event. A chunk whose tail
        could be the start of a secret keeps that tail back until the next chunk; SSE
        chunks end in a newline, so on the hot path nothing is ever held.
        """
        secrets = [secret.encode() for secret in self.secrets]
        held = b""
        try:
            async for chunk in chunks:
                data = self.scrub_bytes(held + chunk) if held else self.scrub_bytes(chunk)
                cut = _secret_prefix_start(data, secrets)
                held = data[cut:]
                if cut:
                    yield data[:cut]
            if held:
                yield held
        finally:
            await aclose_iterator(chunks)


def _secret_prefix_start(data: bytes, secrets: list[bytes]) -> int:
    """Where the longest tail of ``data`` that begins some secret starts (len if none)."""
    start = len(data)
    for secret in secrets:
        i = data.find(secret[:1], max(0, len(data) - len(secret) + 1))
        while i != -1 and i < start:
            if secret.startswith(data[i:]):
                start = i
                break
            i = data.find(secret[:1], i + 1)
    return start
