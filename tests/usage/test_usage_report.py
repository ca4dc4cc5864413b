"""The usage summary: its numbers on known rows, the same on SQLite and PostgreSQL, and
the parsing and table of ``interlingua usage``."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from interlingua.usage import Database, summarize
from interlingua.usage.report import format_table, parse_by, parse_since, read_summary

from .helpers import logged_database, make_record

SINCE = 1_700_000_000.0


def _reference_percentile(values: list[float], p: int) -> float:
    """Linear interpolation between closest ranks (numpy's default), written plainly."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * p / 100
    lo = int(position)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (position - lo)


def _known_rows() -> list[Any]:
    """team-a/model-x: 20 requests, latencies 0.1 .. 2.0 s, three failures (a 500, a
    stream broken after its 200, a 404) and two clients that left (a stream's, before its
    end; a body's, 499), which are not failures; team-a/model-y: one; no key/model-x:
    three; and one row before SINCE."""
    rows = []
    for k in range(1, 21):
        row = make_record(k, key="team-a", model="model-x", latency=k / 10,
                          input_tokens=10 * k, output_tokens=k, cached_tokens=1,
                          reasoning_tokens=0, upstream="vllm", dialect="openai")  # fmt: skip
        if k == 3:
            row.status, row.error = 500, "upstream_error"
        if k == 7:
            row.error = "stream_interrupted"  # (its status stays 200)
        if k == 11:
            row.status = 404
        if k == 13:
            row.error = "client_disconnect"  # (its status stays 200)
        if k == 15:
            row.status, row.error = 499, "client_disconnect"
        rows.append(row)
    rows.append(make_record(30, key="team-a", model="model-y", latency=0.3, upstream="anthropic",
                            dialect="anthropic", input_tokens=5, output_tokens=6))  # fmt: skip
    for k, latency in ((40, 3.0), (41, 1.0), (42, 2.0)):
        rows.append(make_record(k, key=None, model="model-x", latency=latency, upstream="vllm",
                                dialect="anthropic", input_tokens=1, output_tokens=2))  # fmt: skip
    rows.append(make_record(-10, key="team-b", model="model-x", latency=9.0))  # before SINCE
    random.Random(12).shuffle(rows)  # (insertion order must not matter)
    return rows


@pytest.fixture(params=["sqlite", "postgresql"])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    async with logged_database(request, request.param, tmp_path, _known_rows()) as database:
        yield database


async def test_per_key_and_model(db: Database) -> None:
    summary = await summarize(db, SINCE, ("key", "model"))
    x_latencies = [k / 10 for k in range(1, 21)]
    assert summary == [
        {"key": None, "model": "model-x", "requests": 3, "errors": 0, "client_disconnects": 0,
         "continued": 0,
         "input_tokens": 3, "output_tokens": 6, "cached_tokens": 123, "cache_write_tokens": 0,
         "reasoning_tokens": 61, "cost_usd": None, "unpriced": 3,
         "p50_latency_s": 2.0, "p95_latency_s": 2.9},
        {"key": "team-a", "model": "model-x", "requests": 20, "errors": 3,
         "client_disconnects": 2, "continued": 0, "input_tokens": 2100,
         "output_tokens": 210, "cached_tokens": 20, "cache_write_tokens": 0,
         "reasoning_tokens": 0, "cost_usd": None, "unpriced": 20, "p50_latency_s": 1.05,
         "p95_latency_s": 1.905},
        {"key": "team-a", "model": "model-y", "requests": 1, "errors": 0,
         "client_disconnects": 0, "continued": 0,
         "input_tokens": 5, "output_tokens": 6, "cached_tokens": 30, "cache_write_tokens": 0,
         "reasoning_tokens": 15, "cost_usd": None, "unpriced": 1,
         "p50_latency_s": 0.3, "p95_latency_s": 0.3},
    ]  # fmt: skip
    assert summary[1]["p50_latency_s"] == pytest.approx(_reference_percentile(x_latencies, 50))
    assert summary[1]["p95_latency_s"] == pytest.approx(_reference_percentile(x_latencies, 95))
    assert summary[0]["p95_latency_s"] == pytest.approx(_reference_percentile([3, 1, 2], 95))


async def test_other_groupings(db: Database) -> None:
    by_upstream = await summarize(db, SINCE, ("upstream",))
    assert [(e["upstream"], e["requests"], e["errors"]) for e in by_upstream] == [
        ("anthropic", 1, 0),
        ("vllm", 23, 3),
    ]
    by_dialect = await summarize(db, SINCE, ("dialect", "model"))
    assert [(e["dialect"], e["model"], e["requests"]) for e in by_dialect] == [
        ("anthropic", "model-x", 3),
        ("anthropic", "model-y", 1),
        ("openai", "model-x", 20),
    ]
    (total,) = await summarize(db, SINCE, ())
    everything = [k / 10 for k in range(1, 21)] + [0.3, 3.0, 1.0, 2.0]
    assert (total["requests"], total["errors"], total["client_disconnects"]) == (24, 3, 2)
    assert total["input_tokens"] == 2100 + 5 + 3 and total["output_tokens"] == 210 + 6 + 6
    assert total["p50_latency_s"] == pytest.approx(_reference_percentile(everything, 50))
    assert total["p95_latency_s"] == pytest.approx(_reference_percentile(everything, 95))
    assert set(total) == {"requests", "errors", "client_disconnects", "continued",
                          "input_tokens",
                          "output_tokens", "cached_tokens", "cache_write_tokens",
                          "reasoning_tokens", "cost_usd", "unpriced",
                          "p50_latency_s", "p95_latency_s"}  # fmt: skip


async def test_since_filters_and_an_empty_window_is_empty(db: Database) -> None:
    everything = await summarize(db, 0.0, ("key",))
    assert [(e["key"], e["requests"]) for e in everything] == [
        (None, 3),
        ("team-a", 21),
        ("team-b", 1),
    ]
    assert await summarize(db, SINCE + 10_000, ("key", "model")) == []
    assert await summarize(db, SINCE + 10_000, ()) == []


async def test_grouping_names_are_checked(db: Database) -> None:
    with pytest.raises(ValueError, match="cannot group by 'status; DROP TABLE x'"):
        await summarize(db, SINCE, ("status; DROP TABLE x",))


async def test_read_summary_creates_no_database(tmp_path: Path) -> None:
    missing = tmp_path / "nothing" / "usage.db"
    assert await read_summary(f"sqlite://{missing}", 0.0, ("key",)) is None
    assert not missing.parent.exists()
    empty = tmp_path / "empty.db"
    empty.touch()
    assert await read_summary(f"sqlite://{empty}", 0.0, ("key",)) is None


def test_parse_since() -> None:
    now = 1_800_000_000.0
    assert parse_since("30m", now=now) == now - 1800
    assert parse_since("24h", now=now) == now - 86400
    assert parse_since("7d", now=now) == now - 7 * 86400
    assert parse_since("1.5h", now=now) == now - 5400
    assert parse_since("90s", now=now) == now - 90
    assert parse_since("2w", now=now) == now - 14 * 86400
    assert parse_since("2026-05-01", now=now) == 1_777_593_600.0  # midnight UTC
    assert parse_since("2026-05-01T12:30:00Z", now=now) == 1_777_638_600.0
    assert parse_since("2026-05-01T14:30+02:00", now=now) == 1_777_638_600.0
    for bad in ("", "yesterday", "-5m", "5 minutes", "2026-13-01"):
        with pytest.raises(ValueError, match="neither a duration"):
            parse_since(bad, now=now)


def test_parse_by() -> None:
    assert parse_by("key,model") == ("key", "model")
    assert parse_by(" upstream , dialect ") == ("upstream", "dialect")
    assert parse_by("model") == ("model",)
    with pytest.raises(ValueError, match="'region' is not one of key, model, upstream, dialect"):
        parse_by("key,region")
    with pytest.raises(ValueError, match="twice"):
        parse_by("key,key")
    with pytest.raises(ValueError, match="at least one"):
        parse_by(",")


def test_format_table_aligns_columns() -> None:
    summary = [
        {"key": None, "model": "m", "requests": 3, "errors": 0, "client_disconnects": 0,
         "input_tokens": 3, "output_tokens": 6, "p50_latency_s": 2.0, "p95_latency_s": 12.5},
        {"key": "team-a", "model": "model-long", "requests": 1200, "errors": 3,
         "client_disconnects": 1, "input_tokens": 1_234_567, "output_tokens": 210,
         "p50_latency_s": 0.0425, "p95_latency_s": None},
    ]  # fmt: skip
    total = {"requests": 1203, "errors": 3, "client_disconnects": 1, "input_tokens": 1_234_570,
             "output_tokens": 216, "p50_latency_s": 0.05, "p95_latency_s": 12.0}  # fmt: skip
    assert format_table(summary, ("key", "model"), total).splitlines() == [
        "KEY     MODEL       REQUESTS  ERRORS  DISCONNECTS  INPUT TOKENS  OUTPUT TOKENS  P50 LATENCY  P95 LATENCY",
        "-       m                  3       0            0             3              6     2,000 ms       12.5 s",
        "team-a  model-long     1,200       3            1     1,234,567            210        42 ms            -",
        "TOTAL                  1,203       3            1     1,234,570            216        50 ms       12.0 s",
    ]


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_cost_is_summed_per_group_and_unpriced_requests_counted(
    request: pytest.FixtureRequest, tmp_path: Path, engine: str
) -> None:
    """Ten requests at $0.1 sum to $1 exactly (a float sum would say 0.9999999999999999),
    a request that cost nothing is priced, and one without a price is counted apart."""
    rows = [make_record(i, key="team-a", cost_usd=Decimal("0.1")) for i in range(1, 11)]
    rows.append(make_record(11, key="team-a", cost_usd=Decimal(0)))
    rows.append(make_record(12, key="team-a", cost_usd=None))
    rows.append(make_record(13, key="team-b", cost_usd=None))
    async with logged_database(request, engine, tmp_path, rows) as db:
        summary = await summarize(db, SINCE, ("key",))
    got = [(e["key"], e["requests"], e["cost_usd"], e["unpriced"]) for e in summary]
    assert got == [("team-a", 12, 1.0, 1), ("team-b", 1, None, 1)]
