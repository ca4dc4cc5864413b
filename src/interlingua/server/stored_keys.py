"""The database's client keys in this process's key ring, kept current.

With an ``admin`` section and the usage log on, keys can live in the usage log's
database (usage/keys_store.py). Each serving process (each ``--workers`` worker, each
replica) loads them when it starts and then follows their changes, so that a key
created, rotated or revoked anywhere (``/admin/keys`` on any process, or ``interlingua
keys`` writing the database directly) is honoured everywhere within a second:

* Without ``state.url``: a poll of the database every half second, of one row (the
  change counter); only when it moved are the changed rows read.
* With ``state.url``: each process also subscribes to the Redis channel
  ``interlingua:keys``, on which every writer announces a change; a message makes the
  process read the changes at once. The poll goes on every 5 s as a safety net (a
  message lost while Redis was away); while the subscription is down it is back to every
  half second.

A change swaps the serving bundle's key ring (``holder.live.keys``: one assignment, as a
reload's swap): a request that began keeps the key it authenticated with; a database key
whose digest, models and limits did not change stays the same object, its counts carried
over. A database that is down is logged once and retried by the poll; the keys last read
keep serving meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol

from ..usage import StoreError
from ..usage.db import Database
from ..usage.keys_store import CHANNEL, KeyStore, StoredKey, announce
from ..usage.schema import migrate

__all__ = ["StoredKeys", "stored_keys_for"]

log = logging.getLogger("interlingua.server")

#: seconds between polls: alone, and as the safety net beside the Redis subscription
POLL = 0.5
SAFETY_POLL = 5.0


class _Holder(Protocol):
    live: Any


class StoredKeys:
    """The database's keys as this process knows them (see the module docstring)."""

    def __init__(
        self,
        db: Database,
        holder: _Holder,
        counters: Any = None,
        *,
        state_url: str | None = None,
        poll: float = POLL,
    ) -> None:
        self.store = KeyStore(db)
        self.holder = holder
        #: the limits' counters the ring's keys are built with (None: this process's)
        self.counters = counters
        self.state_url = state_url
        self.poll = poll
        self._rows: dict[str, StoredKey] = {}
        self._version = -1
        self._lock = asyncio.Lock()
        self._tasks: list[asyncio.Task[None]] = []
        self._listening = False
        self._down = False
        self._migrated = False
        #: the budgets' spend (given to :meth:`start`; None: no budgets counted)
        self.book: Any = None

    def rows(self) -> tuple[StoredKey, ...]:
        """Every key row read so far (revoked ones included), for a ring."""
        return tuple(self._rows.values())

    async def start(self, holder: _Holder | None = None, book: Any = None) -> None:
        """Migrate the schema, read every key into ``holder``'s bundle (the handlers;
        default: the one given at creation), and follow the changes from now on.
        ``book``: the process's budgets' spend (server/budgets.py), which a database
        key with a budget counts toward, seeded from the usage log as it appears."""
        if holder is not None:
            self.holder = holder
        self.book = book
        await self._safe_refresh()
        self._tasks.append(asyncio.create_task(self._polling()))
        if self.state_url:
            self._tasks.append(asyncio.create_task(self._subscribed()))

    async def aclose(self) -> None:
        """Stop following (the database is the usage log's, closed by it)."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with _quiet():
                await task
        self._tasks.clear()

    async def refresh(self) -> bool:
        """Read what changed since the last read and swap the ring when anything did;
        whether it did. StoreError when the database fails."""
        async with self._lock:
            version = await self.store.version()
            if version == self._version:
                return False
            changed = await self.store.changed_since(max(self._version, -1))
            for row in changed:
                self._rows[row.name] = row
            self._version = max([version, *(row.changed for row in changed)])
            await self._swap()
            if self._down:
                self._down = False
                log.info("database keys: the database is back")
            return bool(changed)

    async def _swap(self) -> None:
        """The serving bundle's ring with the rows read; a key that got a budget has
        its spend so far read from the usage log first (as a reload does)."""
        book, rows = self.book, self.rows()
        live = self.holder.live
        ring = live.keys.with_stored(rows, self.counters, book)
        if book is not None and book.pending:
            await book.seed(self.store.db)
        if self.holder.live is not live:  # (a reload swapped meanwhile: its ring)
            live = self.holder.live
            ring = live.keys.with_stored(rows, self.counters, book)
        live.keys = ring
        if book is not None and book.any and live.accounting is not None:
            live.accounting.spend = book  # (charged from now on: a first budget)

    async def changed(self) -> None:
        """This process just changed a key: read it now, and tell the others."""
        await self.refresh()
        if self.state_url:
            try:
                await announce(self.state_url)
            except Exception as exc:  # (Redis away: the others' poll finds it)
                log.warning("database keys: could not announce a change on Redis: %s", exc)

    def _failed(self, exc: Exception) -> None:
        if not self._down:
            self._down = True
            log.error("database keys: cannot read the keys (retried; last keys serve): %s", exc)

    async def _polling(self) -> None:
        while True:
            await asyncio.sleep(SAFETY_POLL if self._listening else self.poll)
            try:
                await self._safe_refresh()
            except Exception:
                log.exception("database keys: refresh failed")

    async def _subscribed(self) -> None:
        """Follow the Redis channel; down: retried every second (the poll is quick then)."""
        import redis.asyncio

        warned = False
        while True:
            client = redis.asyncio.Redis.from_url(self.state_url or "")
            try:
                async with client.pubsub() as pubsub:
                    await pubsub.subscribe(CHANNEL)
                    self._listening, warned = True, False
                    await self._safe_refresh()  # (what changed while not subscribed)
                    async for message in pubsub.listen():
                        if message.get("type") == "message":
                            await self._safe_refresh()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._listening = False
                if not warned:
                    warned = True
                    log.warning("database keys: Redis subscription down (polling): %s", exc)
            finally:
                self._listening = False
                with _quiet():
                    await client.aclose()
            await asyncio.sleep(1.0)

    async def _safe_refresh(self) -> None:
        """:meth:`refresh`, migrating first until a migration succeeded (a database
        down at startup is migrated once it is back); a failure is logged once."""
        try:
            if not self._migrated:
                await migrate(self.store.db)
                self._migrated = True
            await self.refresh()
        except StoreError as exc:
            self._failed(exc)


def _quiet() -> contextlib.suppress:
    """Swallow what a task being stopped (or a client being closed) raises."""
    return contextlib.suppress(Exception, asyncio.CancelledError)


def stored_keys_for(config: Any, usage_log: Any, counters: Any) -> StoredKeys | None:
    """The process's database keys when ``config`` lets keys live there (an ``admin``
    section and the usage log on), else None; its holder is given to ``start``."""
    if config.admin is None or usage_log is None:
        return None
    return StoredKeys(usage_log.db, _NoHolder(), counters, state_url=config.state.url)


class _NoHolder:
    """Until the handlers exist (nothing is read before the lifespan starts)."""

    live: Any = None
