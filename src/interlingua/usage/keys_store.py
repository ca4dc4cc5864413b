"""Client keys kept in the usage log's database: what ``/admin/keys`` and ``interlingua
keys`` create, list, revoke and rotate, and what every gateway process loads.

A row (table ``interlingua_keys``, migration 3 of usage/schema.py) holds a key's name
(unique, never reused: a revoked key keeps its row, so the usage log's history under a
name stays one key's), the SHA-256 of its secret as hex (the secret itself is shown once
to whoever created it and never stored), its model globs, its limits (JSON; budgets as
exact decimal text, read back through the config's own parser so that a database key
accepts exactly what a config key does), and when it was created, expires and was
revoked (Unix seconds, as the usage log's ``at``).

What changed since: every change bumps the one-row counter ``interlingua_keys_version``
in its own transaction and stamps the row with the new value (``changed``). A process
that saw version ``v`` polls one row; when it moved, it reads the rows with ``changed >
v`` and nothing else. On PostgreSQL the counter's row lock orders the writers, so the
counter's order is the commits' order and a reader never skips a change.

Secrets: :func:`new_secret` is 32 random bytes (``secrets``), URL-safe base64 behind
the prefix ``sk-il-``, so a leaked one is recognisable (secret scanners, logs).
"""

from __future__ import annotations

import hashlib
import math
import re
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

import orjson

from ..config import ConfigError, KeyLimits
from ..config.team import parse_key_limits
from .db import Database
from .schema import KEYS_TABLE, KEYS_VERSION_TABLE, TABLE

__all__ = [
    "CHANNEL",
    "SECRET_PREFIX",
    "KeyExists",
    "KeyStore",
    "Spend",
    "StoredKey",
    "announce",
    "check_name",
    "describe",
    "expiry_of",
    "iso",
    "limits_doc",
    "month_start",
    "new_secret",
    "parse_models",
    "secret_digest",
    "today_start",
]

#: what every secret this module makes begins with
SECRET_PREFIX = "sk-il-"
#: the Redis channel (``state.url``) on which a writer tells every gateway process to
#: read the keys again (server/stored_keys.py listens)
CHANNEL = "interlingua:keys"
#: spend per key name: (today, this month), UTC
Spend = tuple[dict[str, Decimal], dict[str, Decimal]]
_MICRO = Decimal("0.000001")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_COLUMNS = "name, sha256, models, limits, created_at, expires_at, revoked_at, changed"
_BUMP = (f"UPDATE {KEYS_VERSION_TABLE} SET version = version + 1 WHERE one = 1", ())
_NOW_VERSION = f"(SELECT version FROM {KEYS_VERSION_TABLE} WHERE one = 1)"


def new_secret() -> str:
    """A fresh key: ``sk-il-`` and 256 random bits (43 URL-safe characters)."""
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def secret_digest(secret: str) -> str:
    """The SHA-256 of ``secret`` as hex (what is stored, and what the gateway compares)."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


class KeyExists(Exception):
    """A key of that name exists (or existed: names of revoked keys are not reused)."""


@dataclass(frozen=True, slots=True)
class StoredKey:
    """One row: a key as the database keeps it (no secret: its digest only)."""

    name: str
    sha256: str
    models: tuple[str, ...]
    limits: KeyLimits
    created_at: float
    expires_at: float | None = None
    revoked_at: float | None = None
    changed: int = 0

    def expired(self, now: float) -> bool:
        """Whether its expiry has passed at ``now``."""
        return self.expires_at is not None and now >= self.expires_at


def check_name(name: Any, where: str = "name") -> str:
    """``name`` if it can name a key (it shows in logs, metrics labels and Redis keys:
    1 to 64 letters, digits, '.', '_', '-', a letter or digit first), else ConfigError."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigError(
            f"{where}: 1 to 64 letters, digits, '.', '_' or '-' (a letter or digit "
            f"first), got {name!r}"
        )
    return name


def parse_models(value: Any, where: str = "models") -> tuple[str, ...]:
    """Model globs from a list of names or one comma-separated string ("" or None:
    every model), else ConfigError naming ``where``."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list) or not all(isinstance(m, str) for m in value):
        raise ConfigError(f"{where}: expected a list of model names (globs)")
    return tuple(m.strip() for m in value if m.strip())


def limits_doc(limits: KeyLimits) -> dict[str, Any]:
    """``limits`` as JSON: the set ones only, budgets as decimal text (exact)."""
    out: dict[str, Any] = {}
    for field in ("rpm", "tpm", "max_concurrency", "tokens_per_day"):
        if (value := getattr(limits, field)) is not None:
            out[field] = value
    for field in ("budget_per_day", "budget_per_month"):
        if (amount := getattr(limits, field)) is not None:
            out[field] = str(amount)
    return out


def _row(row: Sequence[Any]) -> StoredKey:
    name, sha256, models, limits, created, expires, revoked, changed = row
    return StoredKey(
        name,
        sha256,
        tuple(orjson.loads(models)),
        parse_key_limits(orjson.loads(limits) or None, f"key {name!r}"),
        float(created),
        None if expires is None else float(expires),
        None if revoked is None else float(revoked),
        int(changed),
    )


class KeyStore:
    """The keys of one database (its schema migrated: usage/schema.py ``migrate``)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def version(self) -> int:
        """The change counter (a poll: one row)."""
        rows = await self.db.fetch(f"SELECT version FROM {KEYS_VERSION_TABLE} WHERE one = 1")
        return int(rows[0][0]) if rows else 0

    async def changed_since(self, version: int) -> list[StoredKey]:
        """The keys whose row changed after ``version``, revoked ones included."""
        rows = await self.db.fetch(
            f"SELECT {_COLUMNS} FROM {KEYS_TABLE} WHERE changed > $1 ORDER BY changed", version
        )
        return [_row(row) for row in rows]

    async def all(self) -> list[StoredKey]:
        """Every key, revoked ones included, by name."""
        rows = await self.db.fetch(f"SELECT {_COLUMNS} FROM {KEYS_TABLE} ORDER BY name")
        return [_row(row) for row in rows]

    async def get(self, name: str) -> StoredKey | None:
        """The key named ``name``, or None."""
        rows = await self.db.fetch(f"SELECT {_COLUMNS} FROM {KEYS_TABLE} WHERE name = $1", name)
        return _row(rows[0]) if rows else None

    async def create(
        self,
        name: str,
        sha256: str,
        models: tuple[str, ...] = (),
        limits: KeyLimits | None = None,
        expires_at: float | None = None,
    ) -> StoredKey:
        """Store a new key; KeyExists when the name is taken (revoked keys' too)."""
        if await self.get(name) is not None:
            raise KeyExists(name)
        now = time.time()
        insert = (
            f"INSERT INTO {KEYS_TABLE} ({_COLUMNS}) "
            f"VALUES ($1, $2, $3, $4, $5, $6, NULL, {_NOW_VERSION})"
        )
        doc = limits_doc(limits or KeyLimits())
        args = (name, sha256, orjson.dumps(list(models)).decode(), orjson.dumps(doc).decode())
        try:
            await self.db.execute_many([_BUMP, (insert, (*args, now, expires_at))])
        except Exception:
            if await self.get(name) is not None:  # (another writer took it meanwhile)
                raise KeyExists(name) from None
            raise
        created = await self.get(name)
        assert created is not None
        return created

    async def revoke(self, name: str) -> StoredKey | None:
        """Revoke ``name`` (already revoked: unchanged); the key after, None if unknown."""
        update = (
            f"UPDATE {KEYS_TABLE} SET revoked_at = $2, changed = {_NOW_VERSION} "
            "WHERE name = $1 AND revoked_at IS NULL"
        )
        key = await self.get(name)
        if key is None or key.revoked_at is not None:
            return key
        await self.db.execute_many([_BUMP, (update, (name, time.time()))])
        return await self.get(name)

    async def rotate(self, name: str, sha256: str) -> StoredKey | None:
        """Give ``name`` a new digest (the old secret is refused from now on); None
        when it is unknown or revoked."""
        update = (
            f"UPDATE {KEYS_TABLE} SET sha256 = $2, changed = {_NOW_VERSION} "
            "WHERE name = $1 AND revoked_at IS NULL"
        )
        key = await self.get(name)
        if key is None or key.revoked_at is not None:
            return None
        await self.db.execute_many([_BUMP, (update, (name, sha256))])
        return await self.get(name)

    async def spend_now(self, now: float) -> Spend:
        """Spend per key name today and this month (UTC calendar, as the budgets)."""
        return await self.spend(today_start(now)), await self.spend(month_start(now))

    async def spend(self, since: float) -> dict[str, Decimal]:
        """US dollars of the usage log's priced rows at or after ``since``, per key name."""
        rows = await self.db.fetch(
            f"SELECT key_name, SUM(cost_usd) FROM {TABLE} "
            "WHERE at >= $1 AND key_name IS NOT NULL GROUP BY key_name",
            since,
        )
        return {name: Decimal(str(total)) for name, total in rows if total is not None}


def expiry_of(value: Any, where: str = "expires_at") -> float | None:
    """An expiry given as Unix seconds (a number) or ISO 8601 text, else ConfigError."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if isinstance(value, str):
        try:
            when = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    raise ConfigError(f"{where}: expected an ISO 8601 time or Unix seconds, got {value!r}")


def today_start(now: float) -> float:
    """The UTC day's first second (the daily budget's window)."""
    day = datetime.fromtimestamp(now, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day.timestamp()


def month_start(now: float) -> float:
    """The UTC month's first second (the monthly budget's window)."""
    return datetime.fromtimestamp(today_start(now), UTC).replace(day=1).timestamp()


def iso(when: float | None) -> str | None:
    """Unix seconds as ``2026-05-01T12:00:00Z`` (None stays None)."""
    if when is None:
        return None
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def describe(
    name: str,
    models: tuple[str, ...],
    limits: KeyLimits,
    spend: Spend,
    row: StoredKey | None = None,
    now: float = 0.0,
) -> dict[str, Any]:
    """A key as ``GET /admin/keys`` and ``interlingua keys list --json`` show it: a
    config key (``row`` None) or a database one; never its secret nor its digest."""
    status = "active"
    if row is not None and row.revoked_at is not None:
        status = "revoked"
    elif row is not None and row.expired(now):
        status = "expired"
    return {
        "name": name,
        "source": "config" if row is None else "database",
        "status": status,
        "models": list(models),
        "limits": limits_doc(limits),
        "spend_today_usd": _usd(spend[0].get(name)),
        "spend_month_usd": _usd(spend[1].get(name)),
        "created_at": iso(row.created_at) if row else None,
        "expires_at": iso(row.expires_at) if row else None,
        "revoked_at": iso(row.revoked_at) if row else None,
    }


def _usd(amount: Decimal | None) -> float:
    """Dollars to the millionth, for JSON (as ``interlingua usage --json``)."""
    return float((amount or Decimal(0)).quantize(_MICRO, rounding=ROUND_HALF_EVEN))


async def announce(state_url: str) -> None:
    """Tell every gateway process following the keys on ``state_url``'s Redis to read
    them now (their poll finds the change anyway, later). Needs the ``redis`` extra."""
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(state_url, socket_timeout=2, socket_connect_timeout=2)
    try:
        await client.publish(CHANNEL, "changed")
    finally:
        await client.aclose()
