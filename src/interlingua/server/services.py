"""What the app starts before it serves and stops after it has served (its lifespan).

Each service is stopped only if it was started, the last started first (an
``AsyncExitStack``): the HTTP engines, the telemetry's exporter, the shared counters
(Redis), the usage log (and the spend toward budgets it holds, followed there when no
Redis shares it), the keys stored in the
database, the stored responses, the Files and Batch APIs' store (with the files' expiry
sweep and the batch executor), the upstreams, the last records' drain and the SIGHUP
handler.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette

from ..limits import SharedCounters
from ..upstreams import Transports
from ..usage import ResponseStore, StoreError, UsageLog
from .batches.api import BatchApis
from .reload import Reloader
from .telemetry import Telemetry

__all__ = ["Services"]

log = logging.getLogger("interlingua.server")


class Services:
    """What the app starts before serving and stops after (see the module docstring)."""

    def __init__(
        self,
        reloader: Reloader,
        counters: SharedCounters | None,
        usage_log: UsageLog | None,
        store: ResponseStore | None,
        transports: Transports | None,
    ) -> None:
        self.reloader = reloader
        self.counters = counters
        self.usage_log = usage_log
        self.store = store
        #: the app's own HTTP engines (None: the caller's, which the caller closes)
        self.transports = transports
        self.telemetry: Telemetry | None = None
        self.files: (
            BatchApis  # (the Files and Batch APIs: store, sweep, executor; set by create_app)
        )

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        reloader = self.reloader
        live = reloader.holder.live
        async with contextlib.AsyncExitStack() as stack:
            if self.transports is not None:
                stack.push_async_callback(self.transports.aclose)
            if self.telemetry is not None:  # (closed after the last records' drain)
                stack.push_async_callback(self.telemetry.aclose)
            if self.counters is not None:
                await self.counters.start()  # (Redis away: logged once; limits per process)
                stack.push_async_callback(self.counters.aclose)
            if self.usage_log is not None:
                await self.usage_log.start()  # (a database that is down is logged, retried)
                stack.push_async_callback(self.usage_log.aclose)
                # (the keys' spend so far toward their budgets, from the log; without
                # Redis, the other processes' spend from the rows they write)
                spend = reloader.process.spend
                await spend.seed(self.usage_log.db)
                if self.counters is None:
                    following = asyncio.get_running_loop().create_task(
                        spend.follow(self.usage_log.db)
                    )
                    stack.push_async_callback(_stop, following)
            if (stored := reloader.process.stored) is not None:  # (read before serving)
                await stored.start(reloader.holder, reloader.process.spend)
                stack.push_async_callback(stored.aclose)
            if self.store is not None:
                await _open_store(self.store)
                stack.push_async_callback(self.store.aclose)
            await stack.enter_async_context(self.files.serving())
            # (the upstreams serving at shutdown: those a reload added too, and those it
            # retired whose last requests have not ended)
            stack.push_async_callback(reloader.aclose)
            for upstream in live.upstreams.values():
                await upstream.start()
            if live.accounting is not None:
                # (the last tenth of a second's records; one accounting across reloads)
                stack.callback(live.accounting.drain)
            if reloader.source is not None:
                stack.callback(reloader.listen())
            yield


async def _stop(task: asyncio.Task[None]) -> None:
    """Cancel ``task`` and wait for it to end."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _open_store(store: ResponseStore) -> None:
    try:
        await store.open()
    except StoreError as exc:
        # Chat and Messages need no store: serve them; stored-response requests retry the
        # connection and answer 503 while it fails.
        log.error("stored responses unavailable (retried on use): %s", exc)
