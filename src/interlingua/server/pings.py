"""Keep-alive writes on streams whose upstream goes quiet.

A reasoning model may think for minutes before its next event, and proxies, load
balancers and some clients drop an HTTP stream that stays silent for long. The Anthropic
API itself sends ``event: ping`` during such silences; every stream the gateway sends
does the same in the client's dialect (Anthropic ``ping``, an SSE comment for OpenAI),
on both paths: :class:`Ticker` writes it after ``interval`` seconds without a write.

It is one timer per stream, re-armed only when it fires (a write just records the time,
so a busy stream pays a float store per chunk), and the ping is written by a task of its
own only when due. That task may send while the relay waits on its upstream: uvicorn
writes each body message in one go, and the relay only ever sends whole events (the
translating encoders, and the passthrough check of ``dialects/relay.py``), so a ping can
never land inside an event. (It replaces a pump task that read the upstream for the
relay: two tasks and a queue hand-off per chunk, ~30 µs per streamed request.)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from starlette.types import Send

log = logging.getLogger("interlingua.server")

#: seconds of silence before a keep-alive is sent
KEEPALIVE_SECONDS = 15.0


class Ticker:
    """Send ``ping`` on ``send`` whenever ``interval`` seconds pass without :meth:`wrote`."""

    __slots__ = ("_handle", "_interval", "_loop", "_ping", "_send", "_task", "last")

    def __init__(self, send: Send, ping: bytes, interval: float | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        self._send = send
        self._ping = ping
        self._interval = KEEPALIVE_SECONDS if interval is None else interval
        self._task: asyncio.Task[None] | None = None
        #: when something was last written (loop time)
        self.last = self._loop.time()
        self._handle: asyncio.TimerHandle | None = self._loop.call_at(
            self.last + self._interval, self._fire
        )

    def wrote(self) -> None:
        """Something was just written: the silence starts again."""
        self.last = self._loop.time()

    def _fire(self) -> None:
        due = self.last + self._interval
        now = self._loop.time()
        if now >= due:
            if self._task is None or self._task.done():
                self._task = self._loop.create_task(self._write())
            self.last = now
            due = now + self._interval
        self._handle = self._loop.call_at(due, self._fire)

    async def _write(self) -> None:
        try:
            await self._send({"type": "http.response.body", "body": self._ping, "more_body": True})
        except OSError:
            log.debug("keep-alive not sent: the client is gone")

    async def stop(self) -> None:
        """No more pings (call before the response's last message, and in ``finally``)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
