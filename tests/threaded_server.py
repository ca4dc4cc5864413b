"""An aiohttp app served on its own event-loop thread, on a free 127.0.0.1 port.

Fake upstreams for the sync and async client and the batch runner subclass this: the
server must keep answering while a test's own loop (or a blocking sync call) waits on
it, so it gets a loop and thread of its own. Subclasses add their routes in
:meth:`routes`; ``start()``/``stop()`` (or a ``with`` block) manage the lifetime.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from aiohttp import web


class ThreadedAiohttpServer:
    """Serve :meth:`routes` on ``self.url`` from a private loop thread."""

    def __init__(self) -> None:
        self.url = ""
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def routes(self, app: web.Application) -> None:
        """Add the app's routes (subclasses)."""
        raise NotImplementedError

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    async def _start(self) -> None:
        app = web.Application()
        self.routes(app)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> ThreadedAiohttpServer:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
