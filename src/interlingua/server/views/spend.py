"""The status page's money: dollars spent per key and per model over the last hour and
today (the UTC day), and each key's budgets with what is left of them.

The spend comes from the usage log, whose ``cost_usd`` is every priced request's exact
cost: one query groups the rows since the earlier of the hour's and the day's start by
key and model, so every worker and replica that writes the log is counted, and a
restart forgets nothing. The page polls every few seconds; the answer is kept for
:data:`CACHE_SECONDS`, or :data:`FRESH_SECONDS` once this process has written new rows
since, so a busy log is read at most that often whoever looks. Rows reach the log
within about a second of their request's end. A budget's spent and left are
its counter's (server/budgets.py: the count admission reads, shared through Redis
when ``state.url`` is set), asked afresh on each poll.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, Protocol

from ...limits import PeriodCounter
from ...usage.db import Database
from ...usage.log import UsageLog
from ...usage.schema import TABLE

__all__ = ["CACHE_SECONDS", "FRESH_SECONDS", "SpendView", "seen_by"]

log = logging.getLogger("interlingua.server")

#: seconds a read of the usage log serves the page before the next one
CACHE_SECONDS = 10.0
#: ... or before the next one once this process has written rows since
FRESH_SECONDS = 1.0
_NANOS = 10**9
_HOUR = 3600


class Budget(Protocol):
    """What the page reads of a key's budget (server/budgets.py's ``Budget``: views
    import nothing else of the server)."""

    @property
    def setting(self) -> str: ...
    @property
    def limit(self) -> Decimal: ...
    @property
    def counter(self) -> PeriodCounter: ...


class SpendView:
    """The spend part of ``/ui/data`` (module docstring). ``usage_log``: where the
    spend is read (None: ``usage: false``, so no spend to show); ``budgets()``: each named key serving
    now with its budgets; ``clock``: Unix seconds (tests)."""

    def __init__(
        self,
        usage_log: UsageLog | None,
        budgets: Callable[[], Iterable[tuple[str, tuple[Budget, ...]]]],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.usage_log = usage_log
        self.db: Database | None = usage_log.db if usage_log is not None else None
        self.budgets = budgets
        self.clock = clock
        #: (when, the log's rows written then, the spend read)
        self._cached: tuple[float, int, dict[str, Any]] | None = None

    async def snapshot(self) -> dict[str, Any]:
        """``{"logged": bool, "keys": {name: {"hour": $, "today": $}}, "models": {...},
        "budgets": {name: [{"budget", "limit", "spent", "left", "resets_at"}]}}``
        (dollars as floats, to the hundredth of a cent; requests without a named key
        count in their model's spend only)."""
        now = self.clock()
        spend = await self._spend(now)
        budgets: dict[str, list[dict[str, Any]]] = {}
        for name, held in self.budgets():
            if held:
                budgets[name] = [await _budget(budget, now) for budget in held]
        return {**spend, "budgets": budgets}

    async def _spend(self, now: float) -> dict[str, Any]:
        cached = self._cached
        written = self.usage_log.written if self.usage_log is not None else 0
        if cached is not None:
            age = now - cached[0]
            if age < FRESH_SECONDS or (age < CACHE_SECONDS and written == cached[1]):
                return cached[2]
        spend: dict[str, Any] = {"logged": self.db is not None, "keys": {}, "models": {}}
        if self.db is not None:
            try:
                await self._read(self.db, now, spend)
            except Exception as exc:  # (a database that is down: the page shows the rest)
                log.warning("status page: could not read the spend from the usage log: %s", exc)
                spend["logged"] = False
        self._cached = (now, written, spend)
        return spend

    async def _read(self, db: Database, now: float, spend: dict[str, Any]) -> None:
        midnight = now - now % 86400
        hour = now - _HOUR
        rows = await db.fetch(
            "SELECT key_name, model, SUM(CASE WHEN at >= $2 THEN cost_usd ELSE 0 END), "
            f"SUM(CASE WHEN at >= $3 THEN cost_usd ELSE 0 END) FROM {TABLE} "
            "WHERE at >= $1 AND cost_usd IS NOT NULL GROUP BY key_name, model",
            min(midnight, hour),
            hour,
            midnight,
        )
        for key, model, last_hour, today in rows:
            for kind, name in (("keys", key), ("models", model)):
                if name is None:  # (no named key: only the models' totals)
                    continue
                totals = spend[kind].setdefault(name, [Decimal(0), Decimal(0)])
                totals[0] += Decimal(str(last_hour or 0))
                totals[1] += Decimal(str(today or 0))
        for kind in ("keys", "models"):
            spend[kind] = {
                name: {"hour": _dollars(hour_total), "today": _dollars(day_total)}
                for name, (hour_total, day_total) in spend[kind].items()
            }


async def _budget(budget: Budget, now: float) -> dict[str, Any]:
    """One budget as the page shows it (its counter asked now)."""
    counter = budget.counter
    try:
        spent: float | None = await counter.spent() / _NANOS
    except Exception:  # (the counter's Redis away and no count seen yet)
        spent = None
    limit = float(budget.limit)
    ends = counter.period.end(counter.period.index(now))
    return {
        "budget": budget.setting,
        "limit": limit,
        "spent": None if spent is None else round(spent, 4),
        "left": None if spent is None else round(max(0.0, limit - spent), 4),
        "resets_at": datetime.fromtimestamp(ends, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _dollars(total: Decimal) -> float:
    return float(round(total, 4))


def seen_by(spend: dict[str, Any], name: str, allows: Callable[[str], bool]) -> dict[str, Any]:
    """``spend`` as the named key ``name`` may see it: its own key's spend and budgets,
    and the models it may use."""
    return {
        "logged": spend["logged"],
        "keys": {k: v for k, v in spend["keys"].items() if k == name},
        "models": {m: v for m, v in spend["models"].items() if allows(m)},
        "budgets": {k: v for k, v in spend["budgets"].items() if k == name},
    }
