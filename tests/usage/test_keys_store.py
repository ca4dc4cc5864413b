"""Keys in the usage log's database (usage/keys_store.py), on SQLite and a real PostgreSQL:
migration 3 in place on a v2 log, only the secret's SHA-256 stored, the change counter a
poller reads, names never reused, spend per key from the log."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncIterator
from decimal import Decimal
from pathlib import Path

import pytest

from interlingua.config import ConfigError, KeyLimits
from interlingua.usage import UsageLog, connect
from interlingua.usage.keys_store import (
    SECRET_PREFIX,
    KeyExists,
    KeyStore,
    new_secret,
    secret_digest,
)
from interlingua.usage.schema import KEYS_TABLE, MIGRATIONS, VERSION_TABLE, migrate

from .helpers import fresh_database, make_record


@pytest.fixture(params=["sqlite", "postgresql"])
async def url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    async with fresh_database(request, request.param, tmp_path) as database_url:
        yield database_url


async def test_a_v2_usage_log_gets_the_keys_table_in_place(url: str) -> None:
    """A log the release before keys wrote (version 2, with rows) gains the keys tables
    when this version migrates it; its rows stay, and keys can be stored."""
    db = connect(url)
    try:
        assert await migrate(db, MIGRATIONS[:2]) == 2
        await db.execute_rows(
            "INSERT INTO interlingua_usage (at, request_id, dialect, model, status, latency, "
            "stream, cost_usd) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            [(1.0, "req_old", "openai", "m", 200, 0.5, False, Decimal("0.25"))],
        )
        assert await migrate(db, MIGRATIONS[:3]) == 3
        versions = await db.fetch(f"SELECT version FROM {VERSION_TABLE} ORDER BY version")
        assert [v[0] for v in versions] == [1, 2, 3]
        assert (await db.fetch("SELECT request_id FROM interlingua_usage"))[0][0] == "req_old"
        store = KeyStore(db)
        assert await store.version() == 0 and await store.all() == []
        await store.create("team-c", secret_digest("s"), ("m",), KeyLimits(rpm=3))
        assert [k.name for k in await store.all()] == ["team-c"]
        assert await migrate(db, MIGRATIONS[:3]) == 3  # (idempotent)
    finally:
        await db.aclose()


async def test_only_the_digest_is_stored_and_changes_are_counted(url: str) -> None:
    db = connect(url)
    try:
        await migrate(db)
        store = KeyStore(db)
        secret = new_secret()
        assert secret.startswith(SECRET_PREFIX) and len(secret) >= len(SECRET_PREFIX) + 43
        limits = KeyLimits(rpm=60, budget_per_day=Decimal("0.1"), budget_per_month=Decimal("100"))
        created = await store.create("team-c", secret_digest(secret), ("smart", "claude-*"), limits)
        assert created.limits == limits  # (budgets exact: 0.1 is Decimal("0.1"))
        assert created.models == ("smart", "claude-*") and created.revoked_at is None
        rows = await db.fetch(f"SELECT * FROM {KEYS_TABLE}")
        text = repr(rows)
        assert secret not in text and secret[len(SECRET_PREFIX) :] not in text
        assert hashlib.sha256(secret.encode()).hexdigest() in text
        assert '"budget_per_day":"0.1"' in text  # (decimal text, not a float)

        v1 = await store.version()
        assert v1 == 1 and [k.name for k in await store.changed_since(0)] == ["team-c"]
        assert await store.changed_since(v1) == []
        await store.create("team-d", secret_digest("d"))
        rotated = await store.rotate("team-c", secret_digest("new"))
        assert rotated is not None and rotated.sha256 == secret_digest("new")
        assert await store.version() == 3
        assert [k.name for k in await store.changed_since(v1)] == ["team-d", "team-c"]

        revoked = await store.revoke("team-c")
        assert revoked is not None and revoked.revoked_at is not None
        assert await store.revoke("team-c") == revoked  # (again: unchanged)
        assert await store.version() == 4
        assert await store.rotate("team-c", secret_digest("x")) is None
        assert await store.revoke("nobody") is None
        with pytest.raises(KeyExists):  # (a revoked key's name is not reused)
            await store.create("team-c", secret_digest("again"))
        with pytest.raises(KeyExists):
            await store.create("team-d", secret_digest("again"))
    finally:
        await db.aclose()


async def test_spend_per_key_today_and_this_month(url: str) -> None:
    db = connect(url)
    try:
        log = UsageLog(db)
        await log.start()
        now = time.time()
        for i, (key, cost) in enumerate((("a", "0.5"), ("a", "0.25"), ("b", None))):
            price = None if cost is None else Decimal(cost)
            log.record(make_record(i, key=key, cost_usd=price, at=now))
        log.record(make_record(3, key="a", cost_usd=Decimal(7), at=now - 40 * 86400))
        await log.flush()
        today, month = await KeyStore(db).spend_now(now)
        assert today == month == {"a": Decimal("0.75")}  # (b: unpriced, no spend known)
        await log.aclose()
    finally:
        await db.aclose()


def test_the_limits_a_database_key_accepts_are_the_config_s() -> None:
    from interlingua.usage.keys_store import _row

    row = ("k", "00", "[]", '{"rpm": 0}', 1.0, None, None, 1)
    with pytest.raises(ConfigError, match="rpm"):
        _row(row)
