"""How the usage log should write a flush of rows, measured: the figures behind
usage/log.py's choice of the driver's ``executemany`` in one transaction.

    python -m bench.usage_writes                 # SQLite, and PostgreSQL if installed
    python -m bench.usage_writes --postgres URL  # an existing PostgreSQL database

Per flush size (1, 20, 500 rows), per strategy, the best of 7 repeats of wall time per
row, and of this process's CPU time per row (what the gateway pays: the database may
be another machine). Strategies:

* ``statements``: ``Database.execute_many`` of one single-row INSERT per row;
* ``values xN``: multi-row ``INSERT ... VALUES (...), (...)`` of up to N rows, split in
  powers of two so that few distinct statements are prepared;
* ``executemany``: ``Database.execute_rows`` (sqlite3 / asyncpg ``executemany``);
* ``unnest`` (PostgreSQL): one INSERT of ``unnest`` over one array per column.

Also ``record()``: what :meth:`UsageLog.record` costs on the request path.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from interlingua.usage import Record, UsageLog, connect
from interlingua.usage.db import Database
from interlingua.usage.schema import COLUMNS, INSERT, TABLE, migrate

_UNNEST_TYPES = (
    "float8", "text", "text", "text", "text", "text", "text", "int", "text",
    "int8", "int8", "int8", "int8", "float8", "float8", "bool",
)  # fmt: skip
_UNNEST = (
    f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) SELECT * FROM unnest("
    + ", ".join(f"${i + 1}::{t}[]" for i, t in enumerate(_UNNEST_TYPES))
    + ")"
)


def _rows(n: int) -> list[tuple[Any, ...]]:
    now = time.time()
    return [
        (now + i, f"req_{i:020}", "team-a", "openai", "gpt-x", "vllm", "Qwen/Qwen3-8B", 200,
         None, 1234, 56, 0, 0, 0.123 + i * 1e-6, 0.01, True)
        for i in range(n)
    ]  # fmt: skip


def _values_insert(k: int) -> str:
    width = len(COLUMNS)
    values = ", ".join(
        "(" + ", ".join(f"${r * width + c + 1}" for c in range(width)) + ")" for r in range(k)
    )
    return f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES {values}"


def _values_chunks(rows: list[tuple[Any, ...]], cap: int) -> list[tuple[str, list[Any]]]:
    out, i = [], 0
    while i < len(rows):
        k = cap
        while k > len(rows) - i:
            k //= 2
        out.append((_values_insert(k), [v for row in rows[i : i + k] for v in row]))
        i += k
    return out


def _strategies(db: Database) -> dict[str, Callable[[list[tuple[Any, ...]]], Awaitable[None]]]:
    strategies: dict[str, Callable[[list[tuple[Any, ...]]], Awaitable[None]]] = {
        "statements": lambda rows: db.execute_many([(INSERT, row) for row in rows]),
        "values x32": lambda rows: db.execute_many(_values_chunks(rows, 32)),
        "values x512": lambda rows: db.execute_many(_values_chunks(rows, 512)),
        "executemany": lambda rows: db.execute_rows(INSERT, rows),
    }
    if db.engine == "postgresql":
        strategies["unnest"] = lambda rows: db.execute_many(
            [(_UNNEST, [list(column) for column in zip(*rows, strict=True)])]
        )
    return strategies


async def _measure(url: str, label: str) -> None:
    db = connect(url)
    await migrate(db)
    print(f"\n{label}: µs per row, wall / this process's CPU (best of 7)")
    print(f"{'rows':>5}  " + "  ".join(f"{name:>17}" for name in _strategies(db)))
    for n in (1, 20, 500):
        rows = _rows(n)
        cells = []
        for write in _strategies(db).values():
            repeats = max(1, 2000 // n)
            best_wall = best_cpu = float("inf")
            for _ in range(7):
                wall, cpu = time.perf_counter(), time.process_time()
                for _ in range(repeats):
                    await write(rows)
                best_wall = min(best_wall, (time.perf_counter() - wall) / repeats / n)
                best_cpu = min(best_cpu, (time.process_time() - cpu) / repeats / n)
            cells.append(f"{best_wall * 1e6:7.1f} / {best_cpu * 1e6:6.1f}")
        print(f"{n:>5}  " + "  ".join(f"{cell:>17}" for cell in cells))
    await db.aclose()


def _record_cost() -> float:
    log = UsageLog(connect("sqlite://:memory:"), capacity=1_000_000, batch=1_000_000)
    row = Record(at=time.time(), request_id="req_1", key="team-a", dialect="openai", model="m")
    row.upstream, row.upstream_model, row.status, row.latency = "vllm", "q", 200, 0.1
    best = float("inf")
    for _ in range(5):
        log._queue.clear()
        start = time.perf_counter()
        for _ in range(100_000):
            log.record(row)
        best = min(best, (time.perf_counter() - start) / 100_000)
    return best


@contextlib.contextmanager
def _throwaway_postgres() -> Iterator[str | None]:
    try:
        from tests.usage.postgres import postgres_url

        with postgres_url() as url:
            yield url
    except BaseException as exc:  # (pytest.skip outside pytest: no PostgreSQL here)
        if type(exc).__name__ != "Skipped":
            raise
        print(f"\nPostgreSQL: skipped ({exc})")
        yield None


async def _main(postgres: str | None) -> None:
    print(f"UsageLog.record(): {_record_cost() * 1e6:.2f} µs a row")
    with tempfile.TemporaryDirectory() as tmp:
        await _measure(f"sqlite://{tmp}/usage.db", "SQLite (WAL, synchronous=NORMAL)")
    if postgres:
        await _measure(postgres, "PostgreSQL")
        return
    with _throwaway_postgres() as url:
        if url:
            await _measure(url, "PostgreSQL (a throwaway local cluster, fsync off)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--postgres", metavar="URL", help="an existing PostgreSQL database")
    asyncio.run(_main(parser.parse_args().postgres))


if __name__ == "__main__":
    main()
