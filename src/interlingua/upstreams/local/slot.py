"""``capacity`` generations at a time, a bounded line of waiters, and 429 when the line is full.

The model's context holds ``parallel`` sequences, so that many requests generate side by
side (:mod:`.batch`). Others wait in a FIFO line of at most ``max_queue`` requests; one
more is refused at once with :class:`~interlingua.errors.OverloadedError` (HTTP 429 with
``Retry-After`` for OpenAI clients, ``overloaded_error`` for Anthropic ones) rather than
piling up behind a model that answers a few requests per second.

A place is released by the *generation thread* when its job leaves the model, not by the
request handler: a client that goes away cannot leave a place taken, and the next waiter
starts as soon as one is actually free. So the slot is thread-safe and bound to no event
loop; a waiter's future is completed on its own loop via ``call_soon_threadsafe``.
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
    """A FIFO semaphore of ``capacity`` places with a bounded wait line, usable from any
    thread and any loop.

    >>> slot = Slot(max_queue=16, capacity=4)
    >>> await slot.acquire()   # doctest: +SKIP  (raises OverloadedError when the line is full)
    >>> slot.release()         # from any thread: hands the place to the next waiter
    """

    def __init__(self, max_queue: int, capacity: int = 1) -> None:
        self.max_queue = max_queue
        self.capacity = capacity
        self._lock = threading.Lock()
        self._held = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def busy(self) -> bool:
        """True while at least one generation holds a place."""
        return self._held > 0

    @property
    def held(self) -> int:
        """How many places generations hold."""
        return self._held

    @property
    def waiting(self) -> int:
        """How many requests wait in line."""
        return len(self._waiters)

    def resize(self, capacity: int) -> None:
        """Set the number of places (the engine knows it once the model is loaded);
        waiters that now fit are let in."""
        with self._lock:
            self.capacity = capacity
            while self._held < self.capacity and self._hand_over():
                self._held += 1

    async def acquire(self) -> None:
        """Take a place, waiting in line if needed; raise OverloadedError if the line is full."""
        with self._lock:
            if self._held < self.capacity and not self._waiters:
                self._held += 1
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
            # A place was handed to us as we were cancelled: pass it on, or it is lost.
            self.release()
            raise

    def release(self) -> None:
        """Give a place to the next waiter (or free it). Safe from any thread."""
        with self._lock:
            if not self._hand_over():
                self._held -= 1  # nobody waits: the place is free

    def _hand_over(self) -> bool:
        """Wake the first waiter whose loop still runs (the place passes to it)."""
        while self._waiters:
            future = self._waiters.popleft()
            try:
                future.get_loop().call_soon_threadsafe(_wake, future)
            except RuntimeError:
                continue  # that waiter's loop is closed: nobody is waiting there
            return True
        return False
