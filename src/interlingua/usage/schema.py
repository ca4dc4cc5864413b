"""The usage log's tables, and the migrations that create and change them.

The table ``interlingua_usage`` holds one row per request (docs/usage-log.md lists its
columns). Time is ``at``: Unix seconds (UTC by definition) as a ``DOUBLE PRECISION``
on both engines. One type and one comparison (``at >= $1``) serve SQLite and
PostgreSQL alike, with microsecond resolution for the next few centuries; a person
reads it with ``datetime(at, 'unixepoch')`` (SQLite) or ``to_timestamp(at)``
(PostgreSQL). ISO text would cost three times the bytes in SQLite and a second format
in PostgreSQL, where ``timestamptz`` would make every query engine-specific.

Migrations: :data:`MIGRATIONS` lists every schema change ever made, numbered from 1 and
never edited once released (a change is a new migration appended). The table
``interlingua_usage_schema`` records which ones a database has had, one row per version.
Another store in the same database (the Files and Batch store: interlingua/batches) keeps
migrations of its own with this same mechanism, under a version table of its own
(:func:`migrate`'s ``version_table``), so each store's versions stay its own.
:func:`migrate` applies the missing ones, in order, in ONE transaction, holding a lock
that makes a second process starting at the same moment wait and then find nothing to
do: PostgreSQL takes a transaction-scoped advisory lock (``pg_advisory_xact_lock``, so
``CREATE TABLE IF NOT EXISTS`` never races in the catalog), SQLite ``BEGIN IMMEDIATE``
(the database's write lock, taken before the version is read). A failure rolls every
step back. A database a newer interlingua has migrated further is used as it is: a
migration only adds (a column with a default, an index), so older code still writes
the columns it names.
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .db import Database

__all__ = [
    "COLUMNS",
    "INSERT",
    "KEYS_TABLE",
    "KEYS_VERSION_TABLE",
    "MIGRATIONS",
    "TABLE",
    "VERSION_TABLE",
    "Migration",
    "current_version",
    "migrate",
]

logger = logging.getLogger("interlingua.usage")

TABLE = "interlingua_usage"
VERSION_TABLE = "interlingua_usage_schema"
#: the client keys an admin created (usage/keys_store.py), and their change counter
KEYS_TABLE = "interlingua_keys"
KEYS_VERSION_TABLE = "interlingua_keys_version"

#: the columns a row is written with, in the order of :data:`INSERT`'s parameters
COLUMNS: tuple[str, ...] = (
    "at",
    "request_id",
    "key_name",
    "dialect",
    "model",
    "upstream",
    "upstream_model",
    "status",
    "error_kind",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "cache_write_1h_tokens",
    "reasoning_tokens",
    "cost_usd",
    "latency",
    "ttft",
    "stream",
    "batch_id",
    "endpoint",
)
INSERT = (
    f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) "
    f"VALUES ({', '.join(f'${i}' for i in range(1, len(COLUMNS) + 1))})"
)

# The advisory lock's key: a fixed 64-bit number of our own, so that another
# application's advisory locks on the same server cannot collide with it by accident.
_LOCK_KEY = int.from_bytes(hashlib.sha256(VERSION_TABLE.encode()).digest()[:8], "big", signed=True)

_VERSION_DDL = (
    f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} ("
    "version INTEGER PRIMARY KEY, description TEXT NOT NULL, "
    "applied_at DOUBLE PRECISION NOT NULL)"
)
_CURRENT = f"SELECT COALESCE(MAX(version), 0) FROM {VERSION_TABLE}"
_MARK = f"INSERT INTO {VERSION_TABLE} (version, description, applied_at) VALUES ($1, $2, $3)"


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema change: ``statements`` (one SQL statement each, run in order);
    ``{id}`` in them becomes the engine's auto-incrementing key column type."""

    version: int
    description: str
    statements: tuple[str, ...]

    def sql(self, engine: str) -> list[str]:
        """The statements as ``engine`` ("sqlite" or "postgresql") runs them (``{blob}``:
        the engine's column type for bytes)."""
        return [
            s.replace("{id}", _ID_TYPE[engine]).replace("{blob}", _BLOB_TYPE[engine])
            for s in self.statements
        ]


# SQLite: AUTOINCREMENT never hands out an id again after rows are deleted (a reader
# that remembers the last id it saw stays right when old rows are purged).
_ID_TYPE = {
    "sqlite": "INTEGER PRIMARY KEY AUTOINCREMENT",
    "postgresql": "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
}

_BLOB_TYPE = {"sqlite": "BLOB", "postgresql": "BYTEA"}

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "the usage table, indexed by time",
        (
            f"""CREATE TABLE {TABLE} (
                id {{id}},
                at DOUBLE PRECISION NOT NULL,
                request_id TEXT NOT NULL,
                key_name TEXT,
                dialect TEXT NOT NULL,
                model TEXT NOT NULL,
                upstream TEXT,
                upstream_model TEXT,
                status INTEGER NOT NULL,
                error_kind TEXT,
                input_tokens BIGINT NOT NULL DEFAULT 0,
                output_tokens BIGINT NOT NULL DEFAULT 0,
                cached_tokens BIGINT NOT NULL DEFAULT 0,
                reasoning_tokens BIGINT NOT NULL DEFAULT 0,
                latency DOUBLE PRECISION NOT NULL,
                ttft DOUBLE PRECISION,
                stream BOOLEAN NOT NULL
            )""",
            # Only by time: every report reads a window of time (`at >= $1`) and groups
            # within it. A (key, model) index cost 2 µs a row on SQLite's writes (4.7 ->
            # 2.7 µs, 500-row batches) and served no query.
            f"CREATE INDEX {TABLE}_at ON {TABLE} (at)",
        ),
    ),
    Migration(
        2,
        "cache writes and cost in dollars",
        (
            f"ALTER TABLE {TABLE} ADD COLUMN cache_write_tokens BIGINT NOT NULL DEFAULT 0",
            f"ALTER TABLE {TABLE} ADD COLUMN cache_write_1h_tokens BIGINT NOT NULL DEFAULT 0",
            # NUMERIC: exact on PostgreSQL (SUM too); SQLite keeps a non-integer as an
            # 8-byte float, 15 significant digits (a request's cost to far below a cent)
            # and sums it as one. NULL: the deployment had no price (unknown, not 0).
            f"ALTER TABLE {TABLE} ADD COLUMN cost_usd NUMERIC",
        ),
    ),
    Migration(
        3,
        "client keys managed live (their SHA-256 only), with a change counter",
        (
            # sha256: hex of the secret's digest (the secret is never stored); models: a
            # JSON list of globs; limits: a JSON object, budgets as exact decimal text;
            # times in Unix seconds like `at`; changed: the change counter's value when
            # the row last changed (a poller reads the rows past the value it saw).
            # A revoked key keeps its row: its name stays taken (the usage log's history
            # under that name is its own).
            f"""CREATE TABLE {KEYS_TABLE} (
                name TEXT PRIMARY KEY,
                sha256 TEXT NOT NULL UNIQUE,
                models TEXT NOT NULL,
                limits TEXT NOT NULL,
                created_at DOUBLE PRECISION NOT NULL,
                expires_at DOUBLE PRECISION,
                revoked_at DOUBLE PRECISION,
                changed BIGINT NOT NULL
            )""",
            f"CREATE INDEX {KEYS_TABLE}_changed ON {KEYS_TABLE} (changed)",
            # One row: bumped in the transaction of every change, so its row lock orders
            # PostgreSQL's writers (commit order = counter order) and a poll is one read.
            f"CREATE TABLE {KEYS_VERSION_TABLE} (one INTEGER PRIMARY KEY, version BIGINT NOT NULL)",
            f"INSERT INTO {KEYS_VERSION_TABLE} (one, version) VALUES (1, 0)",
        ),
    ),
    Migration(
        4,
        "the Batch API batch a request was a line of",
        # NULL for every interactive request (and every row written before)
        (f"ALTER TABLE {TABLE} ADD COLUMN batch_id TEXT",),
    ),
    Migration(
        5,
        "the endpoint each request was made to (chat/completions, embeddings, ...)",
        # NULL for the rows written before: every one of them a generation, whose
        # endpoint its dialect says
        (f"ALTER TABLE {TABLE} ADD COLUMN endpoint TEXT",),
    ),
)


async def migrate(
    db: Database,
    migrations: Sequence[Migration] = MIGRATIONS,
    *,
    version_table: str = VERSION_TABLE,
) -> int:
    """Bring ``db`` to the last of ``migrations`` (see the module docstring), recording
    them in ``version_table``; the database's version after. Idempotent and safe when
    several processes run it at once. StoreError when the database fails (nothing is
    then changed)."""
    ordered = sorted(migrations, key=lambda m: m.version)
    sql = _VersionSQL.of(version_table)
    if db.engine == "sqlite":
        # (SQLiteDatabase.run / PostgresDatabase.connection: the engine's own hook for a
        # transaction that reads before it writes, which the Database protocol lacks)
        sqlite_db: Any = db
        version: int = await sqlite_db.run(lambda conn: _migrate_sqlite(conn, ordered, sql))
    else:
        version = await _migrate_postgres(db, ordered, sql)
    latest = ordered[-1].version if ordered else 0
    if version > latest:
        logger.info(
            "%s: the database's schema is at version %d, newer than this "
            "interlingua's %d; writing the columns this version knows",
            version_table,
            version,
            latest,
        )
    return version


@dataclass(frozen=True, slots=True)
class _VersionSQL:
    """The statements on one version table, and its advisory lock's key."""

    ddl: str
    current: str
    mark: str
    lock_key: int

    @staticmethod
    def of(table: str) -> _VersionSQL:
        if table == VERSION_TABLE:
            return _USAGE_VERSIONS
        key = int.from_bytes(hashlib.sha256(table.encode()).digest()[:8], "big", signed=True)
        return _VersionSQL(
            _VERSION_DDL.replace(VERSION_TABLE, table),
            _CURRENT.replace(VERSION_TABLE, table),
            _MARK.replace(VERSION_TABLE, table),
            key,
        )


_USAGE_VERSIONS = _VersionSQL(_VERSION_DDL, _CURRENT, _MARK, _LOCK_KEY)


def _migrate_sqlite(
    conn: sqlite3.Connection, migrations: Sequence[Migration], sql: _VersionSQL
) -> int:
    conn.execute("BEGIN IMMEDIATE")  # the write lock first: no one migrates in between
    try:
        conn.execute(sql.ddl)
        current: int = conn.execute(sql.current).fetchone()[0]
        for migration in migrations:
            if migration.version <= current:
                continue
            for statement in migration.sql("sqlite"):
                conn.execute(statement)
            mark = (migration.version, migration.description, time.time())
            conn.execute(sql.mark.replace("$", "?"), mark)
            current = migration.version
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return current


async def _migrate_postgres(db: Database, migrations: Sequence[Migration], sql: _VersionSQL) -> int:
    postgres: Any = db
    async with postgres.connection() as conn, conn.transaction():
        # Held until the transaction ends: a second replica waits here, then reads the
        # version this one wrote.
        await conn.execute("SELECT pg_advisory_xact_lock($1)", sql.lock_key)
        await conn.execute(sql.ddl)
        current: int = await conn.fetchval(sql.current)
        for migration in migrations:
            if migration.version <= current:
                continue
            for statement in migration.sql("postgresql"):
                await conn.execute(statement)
            await conn.execute(sql.mark, migration.version, migration.description, time.time())
            current = migration.version
    return current


async def current_version(db: Database) -> int:
    """The database's schema version without changing anything: 0 when it has no
    usage log (a reader must not create one)."""
    if db.engine == "sqlite":
        exists = "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = $1"
    else:
        exists = (
            "SELECT COUNT(*) FROM pg_catalog.pg_tables "
            "WHERE tablename = $1 AND schemaname = ANY (current_schemas(false))"
        )
    rows = await db.fetch(exists, VERSION_TABLE)
    if not rows or not rows[0][0]:
        return 0
    rows = await db.fetch(_CURRENT)
    return int(rows[0][0])
