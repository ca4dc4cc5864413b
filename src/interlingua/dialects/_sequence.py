"""Blocks one at a time, for encoders whose dialect allows one open block (or item).

Neutral block events are keyed by index and may interleave (an OpenAI upstream streams
parallel tool calls side by side); Anthropic content blocks and Responses output items
are sequential. :class:`OneAtATime` keeps the open block's index in ``_current``, buffers
every block that starts while another is open, and replays the buffered ones in order
once the open one has closed. The encoder says what opening, feeding and closing a block
writes (:meth:`_open`, :meth:`_in_block`, :meth:`_close`).
"""

from __future__ import annotations

from ..core import BlockStart, StreamEvent

__all__ = ["OneAtATime"]


class OneAtATime:
    """The block sequencing both one-block-at-a-time encoders share."""

    __slots__ = ("_buffer", "_current", "_queue")

    def __init__(self) -> None:
        self._current: int | None = None  # neutral index of the open, emitted block
        self._queue: list[int] = []  # neutral indices started while another was open
        self._buffer: dict[int, list[StreamEvent]] = {}

    def _open(self, event: BlockStart, out: list[bytes]) -> None:
        """Write a block's start and set ``_current`` (left None: no form in the dialect)."""
        raise NotImplementedError

    def _in_block(self, event: StreamEvent, out: list[bytes]) -> None:
        """Write an event of the open block (``BlockStop`` closes it)."""
        raise NotImplementedError

    def _close(self, out: list[bytes]) -> None:
        """Write the open block's end and set ``_current`` to None."""
        raise NotImplementedError

    def _start_block(self, event: BlockStart, out: list[bytes]) -> None:
        """Open ``event``'s block now, or buffer it behind the open ones."""
        if self._current is None and not self._queue:
            self._open(event, out)
        else:
            self._queue.append(event.index)
            self._buffer[event.index] = [event]

    def _block_event(self, event: StreamEvent, index: int, out: list[bytes]) -> None:
        """An event of block ``index``: written if it is open, else buffered with it."""
        if index == self._current:
            self._in_block(event, out)
            if self._current is None:
                self._drain(out, close_all=False)
        elif index in self._buffer:
            self._buffer[index].append(event)

    def _drain(self, out: list[bytes], *, close_all: bool) -> None:
        """Replay buffered blocks in order while none is open (all of them at the end)."""
        while self._queue and self._current is None:
            events = self._buffer.pop(self._queue.pop(0))
            start = events[0]
            assert isinstance(start, BlockStart)
            self._open(start, out)
            if self._current is None:
                continue  # a block with no form in the dialect: its events go with it
            for event in events[1:]:
                self._in_block(event, out)
            if close_all and self._current is not None:
                self._close(out)
