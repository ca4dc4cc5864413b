"""What ``interlingua usage`` prints: the usage log summed per key and model (or per any
of key, model, upstream, dialect) since a time.

Per group: ``requests``, ``errors`` (a row with an error kind, or a status of 400 or
more: a stream that failed after its 200 counts; a client that hung up does not),
``client_disconnects`` (those, in the JSON), ``continued`` (the rows of attempts whose
broken stream another attempt continued: their tokens count in the group's, but they
are neither requests, whose row is the finishing attempt's, nor errors, nor latencies),
``input_tokens``, ``output_tokens``, ``cached_tokens``, ``cache_write_tokens``,
``reasoning_tokens``, ``cost_usd`` (the dollars of the priced rows, to the millionth;
None when none was priced) and ``unpriced`` (requests whose cost is unknown: no price
for their deployment, or logged before prices were), and the 50th and 95th percentiles of latency in seconds (to the microsecond). Counts and sums
are SQL aggregates. The percentiles are linear
interpolations between the two nearest ranks (as PostgreSQL's ``percentile_cont`` and
numpy's default): one window query ranks each group's latencies (``ROW_NUMBER() OVER
(PARTITION BY ... ORDER BY latency)``, SQLite 3.25+ and PostgreSQL alike) and returns
only the rows at the ranks needed, so both engines give the same numbers and the data
never leaves the database.

>>> parse_since("30m", now=1_000_000.0)
998200.0
>>> parse_since("2026-05-01", now=0.0)
1777593600.0
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

from .db import Database, connect, sqlite_path
from .record import CLIENT_CLOSED_STATUS, CLIENT_DISCONNECT, CONTINUED
from .schema import TABLE, current_version

__all__ = [
    "GROUPS",
    "format_table",
    "parse_by",
    "parse_since",
    "read_summary",
    "summarize",
]

#: what ``by`` may name -> the column
GROUPS: dict[str, str] = {
    "key": "key_name",
    "model": "model",
    "upstream": "upstream",
    "dialect": "dialect",
}
_PERCENTILES = (50, 95)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")


def parse_since(text: str, *, now: float) -> float:
    """The Unix time ``text`` names: a duration back from ``now`` (``90s``, ``30m``,
    ``24h``, ``7d``, ``2w``) or an ISO 8601 date or time (``2026-05-01``,
    ``2026-05-01T12:00``, ``...+02:00``; without an offset, UTC). ValueError otherwise."""
    match = _DURATION.match(text)
    if match:
        return now - float(match[1]) * _UNITS[match[2]]
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a duration (30m, 24h, 7d) nor an ISO date (2026-05-01)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def parse_by(text: str) -> tuple[str, ...]:
    """``"key,model"`` -> ``("key", "model")``; ValueError for a name not in
    :data:`GROUPS`, a repeat, or none."""
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if not names:
        raise ValueError("name at least one of " + ", ".join(GROUPS))
    for name in names:
        if name not in GROUPS:
            raise ValueError(f"{name!r} is not one of " + ", ".join(GROUPS))
    if len(set(names)) != len(names):
        raise ValueError(f"{text!r} names a column twice")
    return names


#: a failed row in SQL, as ``record.failed`` says it: an error kind, or a status of 400
#: or more, but not a client that left nor a continued attempt (constants of ours, not
#: input: safe to inline)
_LEFT = f"error_kind = '{CLIENT_DISCONNECT}'"
_FAILED = (
    f"(error_kind IS NOT NULL AND error_kind NOT IN ('{CLIENT_DISCONNECT}', '{CONTINUED}')) OR "
    f"(error_kind IS NULL AND status >= 400 AND status <> {CLIENT_CLOSED_STATUS})"
)
#: the row of an attempt whose broken stream another attempt continued: its tokens count,
#: but the request is its finishing attempt's row (the requests, the latencies)
_CONTINUED = f"error_kind = '{CONTINUED}'"
_A_REQUEST = f"(error_kind IS NULL OR error_kind <> '{CONTINUED}')"


async def summarize(db: Database, since: float, by: Sequence[str]) -> list[dict[str, Any]]:
    """One dict per group of rows at or after ``since`` (Unix seconds), sorted by the
    ``by`` columns (None first); ``by=()`` gives the one total. Keys: the ``by`` names,
    then ``requests``, ``errors``, ``client_disconnects``, ``continued``, ``input_tokens``,
    ``output_tokens``, ``cached_tokens``, ``cache_write_tokens``, ``reasoning_tokens``,
    ``cost_usd``, ``unpriced``, ``p50_latency_s``, ``p95_latency_s``."""
    for name in by:
        if name not in GROUPS:  # (the names become SQL: only ours)
            raise ValueError(f"cannot group by {name!r}: one of " + ", ".join(GROUPS))
    columns = [GROUPS[name] for name in by]
    select = "".join(f"{column}, " for column in columns)
    group_by = f" GROUP BY {', '.join(columns)}" if columns else ""
    totals = await db.fetch(
        f"SELECT {select}COUNT(*), CAST(SUM(CASE WHEN {_CONTINUED} THEN 1 ELSE 0 END) AS BIGINT), "
        f"CAST(SUM(CASE WHEN {_FAILED} THEN 1 ELSE 0 END) AS BIGINT), "
        f"CAST(SUM(CASE WHEN {_LEFT} THEN 1 ELSE 0 END) AS BIGINT), "
        "CAST(SUM(input_tokens) AS BIGINT), CAST(SUM(output_tokens) AS BIGINT), "
        "CAST(SUM(cached_tokens) AS BIGINT), CAST(SUM(reasoning_tokens) AS BIGINT), "
        "CAST(SUM(cache_write_tokens) AS BIGINT), SUM(cost_usd), "
        f"CAST(SUM(CASE WHEN cost_usd IS NULL AND {_A_REQUEST} THEN 1 ELSE 0 END) AS BIGINT) "
        f"FROM {TABLE} WHERE at >= $1{group_by}",
        since,
    )
    latencies = await _percentile_rows(db, since, columns)
    width = len(columns)
    summary = []
    for row in totals:
        group = tuple(row[:width])
        rows, continued, errors, left, input_tokens, output_tokens, cached, reasoning = row[
            width : width + 8
        ]
        written, cost, unpriced = row[width + 8 :]
        if not rows:
            continue  # (no GROUP BY: the total of no rows is one row of zeros and NULLs)
        requests = int(rows) - int(continued or 0)
        entry: dict[str, Any] = dict(zip(by, group, strict=True))
        entry.update(
            requests=requests,
            errors=int(errors or 0),
            client_disconnects=int(left or 0),
            continued=int(continued or 0),
            input_tokens=int(input_tokens or 0),
            output_tokens=int(output_tokens or 0),
            cached_tokens=int(cached or 0),
            cache_write_tokens=int(written or 0),
            reasoning_tokens=int(reasoning or 0),
            cost_usd=_dollars(cost),
            unpriced=int(unpriced or 0),
        )
        ranked = latencies.get(group, {})
        for p in _PERCENTILES:
            entry[f"p{p}_latency_s"] = _interpolate(ranked, requests, p)
        summary.append(entry)
    summary.sort(key=lambda entry: [(entry[n] is not None, entry[n] or "") for n in by])
    return summary


def _dollars(total: Any) -> float | None:
    """A SUM of ``cost_usd`` (PostgreSQL: an exact Decimal; SQLite: a float) to the
    millionth of a dollar, for JSON; None when no row of the group was priced."""
    if total is None:
        return None
    return float(Decimal(str(total)).quantize(_MICRO, rounding=ROUND_HALF_EVEN))


_MICRO = Decimal("0.000001")


async def _percentile_rows(
    db: Database, since: float, columns: list[str]
) -> dict[tuple[Any, ...], dict[int, float]]:
    """Per group, the latencies at the 0-based ranks the percentiles fall between."""
    select = "".join(f"{column}, " for column in columns)
    partition = f"PARTITION BY {', '.join(columns)} " if columns else ""
    # floor((n - 1) * p / 100) and the rank after it, in integer arithmetic (the same on
    # both engines: no floor() in older SQLite)
    wanted = " OR ".join(
        f"i = (n - 1) * {p} / 100 OR i = (n - 1) * {p} / 100 + 1" for p in _PERCENTILES
    )
    rows = await db.fetch(
        f"SELECT {select}i, latency FROM ("
        f"SELECT {select}latency, "
        f"ROW_NUMBER() OVER ({partition}ORDER BY latency) - 1 AS i, "
        f"COUNT(*) OVER ({partition.rstrip()}) AS n "
        f"FROM {TABLE} WHERE at >= $1 AND {_A_REQUEST}) ranked WHERE {wanted}",
        since,
    )
    width = len(columns)
    found: dict[tuple[Any, ...], dict[int, float]] = {}
    for row in rows:
        found.setdefault(tuple(row[:width]), {})[int(row[width])] = float(row[width + 1])
    return found


def _interpolate(ranked: dict[int, float], n: int, p: int) -> float | None:
    """The ``p``-th percentile of ``n`` sorted values of which ``ranked`` holds those
    at the ranks it needs: value[lo] + fraction * (value[lo + 1] - value[lo])."""
    lo, rest = divmod((n - 1) * p, 100)
    low = ranked.get(lo)
    if low is None:
        return None
    high = ranked.get(lo + 1, low) if rest else low
    return round(low + (high - low) * rest / 100, 6)  # (to the microsecond: no 0.9499999)


async def read_summary(url: str, since: float, by: Sequence[str]) -> list[dict[str, Any]] | None:
    """:func:`summarize` on the database at ``url``, opened only to read; None when it
    holds no usage log (a SQLite file that does not exist is not created)."""
    if url.startswith("sqlite://"):
        path = sqlite_path(url)
        if path != ":memory:" and not os.path.exists(path):
            return None
    db = connect(url)
    try:
        if await current_version(db) == 0:
            return None
        return await summarize(db, since, by)
    finally:
        await db.aclose()


def format_table(
    summary: list[dict[str, Any]],
    by: Sequence[str],
    total: dict[str, Any] | None,
    *,
    cost: bool = False,
) -> str:
    """``summary`` as an aligned text table (one line per group, then ``total`` when
    given); latencies in milliseconds; with ``cost``, the dollars and the unpriced
    requests of each group too."""
    headers = [name.upper() for name in by] + [
        "REQUESTS",
        "ERRORS",
        "DISCONNECTS",
        "INPUT TOKENS",
        "OUTPUT TOKENS",
        "P50 LATENCY",
        "P95 LATENCY",
        *(("COST (USD)", "UNPRICED") if cost else ()),
    ]
    lines = [_cells(entry, by, cost) for entry in summary]
    if total is not None and by:
        lines.append(["TOTAL"] + [""] * (len(by) - 1) + _cells(total, (), cost))
    widths = [max(len(h), *(len(line[i]) for line in lines)) for i, h in enumerate(headers)]
    text_columns = len(by)

    def render(cells: list[str]) -> str:
        return "  ".join(
            cell.ljust(widths[i]) if i < text_columns else cell.rjust(widths[i])
            for i, cell in enumerate(cells)
        ).rstrip()

    return "\n".join([render(headers), *(render(line) for line in lines)]) + "\n"


def _cells(entry: dict[str, Any], by: Sequence[str], cost: bool = False) -> list[str]:
    money: tuple[str, ...] = ()
    if cost:
        dollars = entry["cost_usd"]
        money = ("-" if dollars is None else f"{dollars:,.4f}", f"{entry['unpriced']:,}")
    return [
        *("-" if entry[name] is None else str(entry[name]) for name in by),
        f"{entry['requests']:,}",
        f"{entry['errors']:,}",
        f"{entry['client_disconnects']:,}",
        f"{entry['input_tokens']:,}",
        f"{entry['output_tokens']:,}",
        _duration(entry["p50_latency_s"]),
        _duration(entry["p95_latency_s"]),
        *money,
    ]


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds * 1000:,.0f} ms"
    return f"{seconds:,.1f} s"
