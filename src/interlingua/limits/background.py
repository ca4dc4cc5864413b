"""Fire-and-forget calls, kept alive until they finish, their errors reported, not raised.

A shared state's ``release`` and ``settle`` are plain calls made from ``finally`` blocks
and stream closers: they cannot await a network round trip, so they start a task and
return. The event loop keeps only a weak reference to a task, so an unreferenced one may
be collected mid-flight; :class:`Background` holds each until it is done, hands its
exception to the caller's ``on_error`` (or logs it), and on shutdown lets the last ones
finish (a release sent is a slot the other replicas get back now, not at its expiry).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

__all__ = ["Background"]

log = logging.getLogger("interlingua.limits")


class Background:
    """Tasks started and forgotten by their callers (see the module docstring)."""

    __slots__ = ("_tasks",)

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def pending(self) -> int:
        """Calls started and not yet done."""
        return len(self._tasks)

    def spawn(
        self,
        coro: Coroutine[Any, Any, Any],
        on_error: Callable[[BaseException], None] | None = None,
    ) -> asyncio.Task[Any] | None:
        """Run ``coro`` as a task; None (and ``coro`` closed) when no loop is running, as
        at interpreter shutdown: what it would have sent is left to expire."""
        try:
            task = asyncio.get_running_loop().create_task(coro)
        except RuntimeError:
            coro.close()
            return None
        self._tasks.add(task)
        task.add_done_callback(partial(self._done, on_error))
        return task

    def _done(
        self, on_error: Callable[[BaseException], None] | None, task: asyncio.Task[Any]
    ) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is None:
            return
        if on_error is not None:
            on_error(exc)
        else:
            log.error("shared state: a background call failed: %r", exc)

    async def drain(self, timeout: float | None = None) -> bool:
        """Wait until the tasks started so far are done (at most ``timeout`` seconds);
        whether they all are."""
        pending = set(self._tasks)
        if not pending:
            return True
        _, late = await asyncio.wait(pending, timeout=timeout)
        return not late

    async def aclose(self, grace: float = 1.0) -> None:
        """Let pending tasks finish for up to ``grace`` seconds, then cancel the rest."""
        pending = set(self._tasks)
        if pending:
            _, late = await asyncio.wait(pending, timeout=grace)
            for task in late:
                task.cancel()
            if late:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait(late)
