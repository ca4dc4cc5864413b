"""A key's budgets: ``budget_per_day`` / ``budget_per_month``, US dollars of spend.

A key's spend is what its requests cost (:class:`~interlingua.usage.cost.Pricing`: the
usage each upstream reported, at the price of the deployment that answered), the sum
of the usage log's ``cost_usd`` for its rows of the UTC day or month. A request is
admitted while every budget of its key is under its limit, and charged when its answer
has ended, so a stream that crosses the line finishes; the next request is refused with
429, ``budget_exceeded``, naming the budget and when it resets (``Retry-After``: at the
UTC midnight, or the first midnight of the next month). Requests of a model without a
price cost nothing that is known, and count toward no budget (a warning says which
models a budgeted key may use without a price).

The :class:`SpendBook` is the process's, built once and kept across config reloads: one
counter per key name and period, so a key whose limits change keeps what it spent.
Counts are integers of nanodollars (each request's cost rounded up to one: a budget is
never under-counted), in this process or in Redis (``state.url``: shared by workers and
replicas, like the other key limits), and rebuilt from the usage log when a process
starts and when a key gets a budget (:meth:`SpendBook.seed`): the counter becomes at
least what the log sums to, so a restart does not begin the month afresh, and neither
does a second replica with its own count. Without Redis, processes that share a usage
log (``--workers N``, replicas on one PostgreSQL) still learn each other's spend: each
reads the rows written since its last look every :data:`FOLLOW_SECONDS`
(:meth:`SpendBook.follow`, a range of the table's ids, not a scan of the month), so a
key's spend reaches every worker within a few seconds of its answers.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import math
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from ..config import WILDCARD, Config, KeyLimits, ModelConfig
from ..errors import RateLimitError
from ..limits import DAY, MONTH, Counters, MemoryCounters, Period, PeriodCounter
from ..usage.cost import Pricing
from ..usage.db import Database
from ..usage.schema import TABLE

__all__ = ["Budget", "SpendBook", "nanodollars", "spend_since", "warn_unpriced"]

log = logging.getLogger("interlingua.server")

_NANOS = Decimal(10**9)
#: seconds between two reads of the usage log's new rows by :meth:`SpendBook.follow`
FOLLOW_SECONDS = 2.0
#: (the limits' field, its period)
_BUDGETS = (("budget_per_day", DAY), ("budget_per_month", MONTH))


def nanodollars(cost: Decimal) -> int:
    """``cost`` in whole nanodollars, rounded up.

    >>> nanodollars(Decimal("0.0000000001")), nanodollars(Decimal("20"))
    (1, 20000000000)
    """
    return math.ceil(cost * _NANOS)  # (exact: Decimal's own ceiling)


class Budget:
    """One budget of a key: the setting's name, its limit in dollars, its counter."""

    __slots__ = ("counter", "limit", "setting")

    def __init__(self, setting: str, limit: Decimal, counter: PeriodCounter) -> None:
        self.setting = setting
        self.limit = limit
        self.counter = counter

    def refused(self, key: str | None, wait: float) -> RateLimitError:
        """The 429 of a request refused because this budget is spent (``wait``: the
        seconds until it resets)."""
        resets = self.counter.period.end(self.counter.period.index(time.time()))
        when = datetime.fromtimestamp(resets, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return RateLimitError(
            f"Budget reached for key '{key}': its {self.setting} of {self.limit} USD is "
            f"spent. It resets at {when}; try again in {max(wait, 1.0):.0f} s.",
            code="budget_exceeded",
            retry_after=max(wait, 1.0),
        )


class SpendBook:
    """Each budgeted key's spend per UTC day and month, by key name (module docstring).
    ``counters``: where the counts live (Redis: :class:`~..limits.SharedCounters`)."""

    def __init__(self, counters: Counters | None = None) -> None:
        self._counters = counters or MemoryCounters()
        #: the counters of each key name that has (or had) a budget
        self._spend: dict[str, dict[Period, PeriodCounter]] = {}
        #: (name, period) whose count the usage log has not yet been read for
        self._unseeded: set[tuple[str, Period]] = set()
        #: what the usage log sums to per (name, period): (the period's number, nanodollars)
        self._logged: dict[tuple[str, Period], tuple[int, int]] = {}
        #: the last usage-log row id read (-1: none yet)
        self._last_id = -1
        #: whether :meth:`follow` runs (then it reads the rows after ``_last_id``)
        self._following = False

    @property
    def any(self) -> bool:
        """Whether any key has (or had) a budget: then finished requests are charged."""
        return bool(self._spend)

    @property
    def pending(self) -> bool:
        """Whether a counter waits to be read from the usage log (:meth:`seed`)."""
        return bool(self._unseeded)

    def budgets(self, name: str, limits: KeyLimits) -> tuple[Budget, ...]:
        """The budgets ``limits`` set for key ``name``, on this book's counters (the same
        counter for a name and period, whatever its limit: a reloaded key keeps what it
        spent; its limit is the latest one)."""
        out = []
        for setting, period in _BUDGETS:
            limit: Decimal | None = getattr(limits, setting)
            if limit is None:
                continue
            counters = self._spend.setdefault(name, {})
            counter = counters.get(period)
            if counter is None:
                counter = self._counters.period_counter(f"spend:{name}", nanodollars(limit), period)
                counters[period] = counter
                self._unseeded.add((name, period))
            else:
                counter.limit = nanodollars(limit)
            out.append(Budget(setting, limit, counter))
        return tuple(out)

    def charge(self, name: str | None, cost: Decimal | None) -> None:
        """A finished request (or a continued stream's broken attempt) of key ``name``
        cost ``cost`` dollars (None: not priced)."""
        if name is None or not cost:
            return
        counters = self._spend.get(name)
        if counters is not None:
            amount = math.ceil(cost * _NANOS)  # (nanodollars, without its call)
            for counter in counters.values():
                counter.add(amount)

    async def seed(self, db: Database | None) -> None:
        """Make the counters not yet read from the usage log at least what it sums to
        for their key and period (on start, and when a reload gives a key a budget).
        Without a usage log, or when it cannot be read (logged), they count on from
        what they hold."""
        todo, self._unseeded = self._unseeded, set()
        if not todo or db is None:
            return
        now = time.time()
        try:
            if self._last_id < 0 or not self._following:
                # (a follower adds the rows after its last look itself)
                self._last_id = await last_row_id(db)
            for period in {period for _, period in todo}:
                index = period.index(now)
                names = [n for n, p in todo if p is period]
                spent = await spend_since(db, period.start(index), names, self._last_id)
                for name in names:
                    nanos = nanodollars(spent.get(name, Decimal(0)))
                    self._logged[(name, period)] = (index, nanos)
                    await self._spend[name][period].seed(nanos, index)
        except Exception as exc:  # (a database that is down: serve, counting from here)
            log.warning("budgets: could not read the spend so far from the usage log: %s", exc)

    async def follow(self, db: Database, every: float = FOLLOW_SECONDS) -> None:
        """Until cancelled: every ``every`` seconds, add the usage log's rows written
        since the last look to what it sums to per key and period, and make each counter
        at least that (the spend of the other processes that write the same log). A
        database that is away is logged once, and read again when it is back."""
        failing = False
        self._following = True
        while True:
            await asyncio.sleep(every)
            try:
                await self._catch_up(db)
            except Exception as exc:
                if not failing:
                    log.warning("budgets: could not read the usage log's new rows: %s", exc)
                failing = True
            else:
                failing = False

    async def _catch_up(self, db: Database) -> None:
        """One look at the rows written since the last (see :meth:`follow`)."""
        if not self._logged:
            return
        last = await last_row_id(db)
        if last <= self._last_id:
            return
        now = time.time()
        day, month = DAY.start(DAY.index(now)), MONTH.start(MONTH.index(now))
        names = sorted({name for name, _ in self._logged})
        rows = await new_spend(db, self._last_id, last, day, month, names)
        self._last_id = last
        for name, day_cost, month_cost in rows:
            for period, cost in ((DAY, day_cost), (MONTH, month_cost)):
                held = self._logged.get((name, period))
                if held is None or not cost:
                    continue
                index = period.index(now)
                nanos = (held[1] if held[0] == index else 0) + nanodollars(Decimal(str(cost)))
                self._logged[(name, period)] = (index, nanos)
                await self._spend[name][period].seed(nanos, index)


async def spend_since(
    db: Database, since: float, names: Sequence[str], up_to: int | None = None
) -> dict[str, Decimal]:
    """The usage log's ``cost_usd`` summed per key name for rows at or after ``since``
    (Unix seconds), for ``names`` (and rows whose id is at most ``up_to``, when given);
    a name without priced rows is left out."""
    if not names:
        return {}
    marks = ", ".join(f"${i}" for i in range(3, len(names) + 3))
    rows = await db.fetch(
        f"SELECT key_name, SUM(cost_usd) FROM {TABLE} WHERE at >= $1 AND id <= $2 "
        f"AND key_name IN ({marks}) AND cost_usd IS NOT NULL GROUP BY key_name",
        since,
        2**62 if up_to is None else up_to,
        *names,
    )
    return {name: Decimal(str(total)) for name, total in rows if total is not None}


async def last_row_id(db: Database) -> int:
    """The usage log's highest row id (0: no rows)."""
    rows = await db.fetch(f"SELECT COALESCE(MAX(id), 0) FROM {TABLE}")
    return int(rows[0][0])


async def new_spend(
    db: Database, after: int, up_to: int, day: float, month: float, names: Sequence[str]
) -> list[tuple[str, Any, Any]]:
    """Per key of ``names``: the ``cost_usd`` of the rows with ids in ``(after, up_to]``
    dated in the day that began at ``day`` and in the month that began at ``month``."""
    marks = ", ".join(f"${i}" for i in range(5, len(names) + 5))
    rows = await db.fetch(
        "SELECT key_name, SUM(CASE WHEN at >= $3 THEN cost_usd ELSE 0 END), "
        f"SUM(CASE WHEN at >= $4 THEN cost_usd ELSE 0 END) FROM {TABLE} "
        f"WHERE id > $1 AND id <= $2 AND key_name IN ({marks}) AND cost_usd IS NOT NULL "
        "GROUP BY key_name",
        after,
        up_to,
        day,
        month,
        *names,
    )
    return [(name, day_total, month_total) for name, day_total, month_total in rows]


def warn_unpriced(config: Config, pricing: Pricing) -> None:
    """Log, for each key with a budget, the model names it may use whose deployments
    have no price (their requests count toward no budget: an unpriced model would be a
    way around it)."""
    for key in config.keys:
        limits = key.limits
        if limits.budget_per_day is None and limits.budget_per_month is None:
            continue
        names = [
            model.name
            for model in config.models
            if _unpriced(model, config, pricing)
            and (not key.models or any(fnmatch.fnmatchcase(model.name, g) for g in key.models))
        ]
        if names:
            log.warning(
                "key %r has a budget but may use models without a price, whose requests "
                "count toward no budget: %s",
                key.name,
                ", ".join(dict.fromkeys(names)),
            )


def _unpriced(model: ModelConfig, config: Config, pricing: Pricing) -> bool:
    """Whether requests to ``model``'s deployment have no price (a wildcard entry: no
    price of its own and no ``prices:`` file to match the name against)."""
    if model.model == WILDCARD:
        return model.price is None and not config.price_table
    return pricing.price(model.upstream, model.model) is None
