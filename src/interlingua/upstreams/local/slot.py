"""One generation at a time, a bounded line of waiters, and 429 when the line is full.

A llama.cpp context holds one sequence, so one model instance serves one request at a
time. Others wait in a FIFO line of at most ``max_queue`` requests; one more is refused at
once with :class:`~interlingua.errors.OverloadedError` (HTTP 429 with ``Retry-After`` for
OpenAI clients, ``overloaded_error`` for Anthropic ones) rather than piling up behind a
model that answers a few requests per second.

The slot is released by the *generation thread* when it finishes, not by the request
handler: a client that goes away cannot leave the model marked busy, and the next waiter
starts as soon as the model is actually free. So the slot is thread-safe and bound to no
event loop; a waiter's future is completed on its own loop via ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque

from ...errors import OverloadedError

__all__ = ["Slot"]

#: seconds a refused client is told to wait (a short answer takes about a second)
RETRY_AFTER = 1.0


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Slot:
    """A FIFO mutex with a bounded wait line, usable from any thread and any loop.

    >>> slot = Slot(max_queue=16)
    >>> await slot.acquire()   # doctest: +SKIP  (raises OverloadedError when the line is full)
    >>> slot.release()         # from any thread: hands the slot to the next waiter
    """

    def __init__(self, max_queue: int) -> None:
        self.max_queue = max_queue
        self._lock = threading.Lock()
        self._busy = False
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def busy(self) -> bool:
        """True while a generation holds the slot."""
        return self._busy

    @property
    def waiting(self) -> int:
        """How many requests wait in line."""
        return len(self._waiters)

    async def acquire(self) -> None:
        """Take the slot, waiting in line if needed; raise OverloadedError if the line is full."""
        with self._lock:
            if not self._busy:
                self._busy = True
                return
            if len(self._waiters) >= self.max_queue:
                raise OverloadedError(
                    f"local model is busy: {len(self._waiters)} requests waiting",
                    status=429,
                    retry_after=RETRY_AFTER,
                )
            future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(future)
        try:
            await future
        except BaseException:
            with self._lock:
                if future in self._waiters:
                    # Still in line: just leave it.
                    self._waiters.remove(future)
                    raise
            # The slot was handed to us as we were cancelled: pass it on, or it is lost.
            self.release()
            raise

    def release(self) -> None:
        """Give the slot to the next waiter (or free it). Safe from any thread."""
        with self._lock:
            while self._waiters:
                future = self._waiters.popleft()
                try:
                    future.get_loop().call_soon_threadsafe(_wake, future)
                except RuntimeError:
                    continue  # that waiter's loop is closed: nobody is waiting there
                return  # ownership passes on; _busy stays True
            self._busy = False
