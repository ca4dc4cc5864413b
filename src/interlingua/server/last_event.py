"""Catching the final response object of a relayed Responses stream, for the store.

On the passthrough path the gateway relays an upstream's SSE bytes untouched and parses none
of them; to store the answer it needs only the stream's **last** event, the terminal
``response.completed`` / ``response.incomplete`` / ``response.failed`` that holds the whole
response (docs/protocols.md, "Responses: stream events"). :class:`LastEvent` keeps just
enough of the stream to give that event back at the end: references to the chunks since the
next-to-last event began (a backwards ``rfind`` or two per chunk, no copy), whatever way the
bytes were split. :func:`keep_last_response` wraps a relayed stream with it and hands the
response to the store's callback once the stream has ended.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson

from ..core import aclose_iterator

__all__ = ["Keep", "LastEvent", "keep_last_response", "terminal_response"]

log = logging.getLogger("interlingua.server")

#: awaited with the final response object's JSON; must not raise
Keep = Callable[[bytes], Awaitable[None]]

#: the events that end a Responses stream holding the whole response
#: (docs/protocols.md, "Responses: stream events")
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


class LastEvent:
    """The last events of an LF-delimited SSE stream fed chunk by chunk.

    It holds references to the chunks since the start of the next-to-last event (two
    events' worth: the last may be a bare comment or blank line after the terminal one).
    """

    __slots__ = ("_at_boundary", "_base", "_cur", "_pieces")

    def __init__(self) -> None:
        self._pieces: list[bytes] = []
        self._base = (0, 0)  # (chunk index, offset): where the next-to-last event starts
        self._cur = (0, 0)  # where the last event starts
        self._at_boundary = True  # the bytes so far end exactly where an event ends

    def feed(self, chunk: bytes) -> None:
        """Note one chunk of the stream."""
        if not chunk:
            return
        pieces = self._pieces
        idx = len(pieces)
        starts: list[int] = []
        if self._at_boundary:
            starts.append(0)
        elif chunk[:1] == b"\n" and pieces and pieces[-1][-1:] == b"\n":
            starts.append(1)  # the blank line straddles the two chunks
        inner: list[int] = []
        end = len(chunk)
        pos = end
        while len(inner) < 2:  # the last two event starts inside this chunk
            cut = chunk.rfind(b"\n\n", 0, pos)
            if cut < 0:
                break
            if cut + 2 < end:
                inner.append(cut + 2)
            pos = cut + 1
        starts.extend(sorted(inner))
        pieces.append(chunk)
        for offset in starts[-2:]:
            if offset < end:
                self._base, self._cur = self._cur, (idx, offset)
        self._at_boundary = chunk[-2:] == b"\n\n" or (starts[-1:] == [end])
        first = self._base[0]
        if first:
            del pieces[:first]
            self._base = (0, self._base[1])
            self._cur = (self._cur[0] - first, self._cur[1])

    def events(self) -> list[bytes]:
        """The (at most two) last events' bytes, oldest first, blank ones left out."""
        if not self._pieces:
            return []
        data = b"".join(self._pieces)[self._base[1] :]
        return [event for event in data.split(b"\n\n") if event.strip()][-2:]


def terminal_response(event: bytes) -> dict[str, Any] | None:
    """The ``response`` of a terminal Responses event (its SSE bytes), else None."""
    data = [line[5:].lstrip(b" ") for line in event.split(b"\n") if line[:5] == b"data:"]
    if not data:
        return None
    try:
        payload = orjson.loads(b"\n".join(data))
    except orjson.JSONDecodeError:
        return None
    if not isinstance(payload, dict) or payload.get("type") not in _TERMINAL:
        return None
    response = payload.get("response")
    return response if isinstance(response, dict) else None


async def keep_last_response(chunks: AsyncIterator[bytes], keep: Keep) -> AsyncIterator[bytes]:
    """``chunks`` unchanged; once they have all been relayed, ``keep`` gets the terminal
    event's response (nothing when the stream ended otherwise)."""
    last = LastEvent()
    try:
        async for chunk in chunks:
            last.feed(chunk)
            yield chunk
    finally:
        await aclose_iterator(chunks)
    response = next(
        (r for event in reversed(last.events()) if (r := terminal_response(event)) is not None),
        None,
    )
    if response is None:
        log.info("relayed Responses stream ended without a terminal event: nothing stored")
        return
    await keep(orjson.dumps(response))
