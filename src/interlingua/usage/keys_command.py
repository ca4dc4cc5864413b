"""``interlingua keys create|list|revoke|rotate``: client keys in the usage log's database.

``cli.py`` calls :func:`add_keys_parser`. The command writes the database the config's
``usage:`` names directly (as ``interlingua usage`` reads it), so it works whether or not
a gateway runs, with one or many replicas, and needs no admin key in the shell: whoever
can write that database can manage keys. Every gateway process serving that config
(its ``admin`` section on) reads the change within a second: at once when ``state.url``
is set (the command announces it on Redis), else by its poll of the database.

A secret is printed once, alone on stdout (``KEY=$(interlingua keys create ...)``); what
else the command says goes to stderr. Only the secret's SHA-256 is stored.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from ..config import Config, ConfigError, default_config, load_config
from ..config.team import parse_key_limits
from .db import StoreError, _safe, connect
from .keys_store import (
    KeyExists,
    KeyStore,
    announce,
    check_name,
    describe,
    expiry_of,
    new_secret,
    parse_models,
    secret_digest,
)
from .log import default_usage_url
from .schema import migrate

__all__ = ["add_keys_parser", "expires", "keys_command"]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*$")
_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}

_DESCRIPTION = """\
Manage client keys that live in the usage log's database, beside the config's keys.

This command writes that database directly (the one the config's usage: names;
default: usage.db in the user data dir), whether or not a gateway is running. Every
gateway serving the same config with an admin: section sees a change within a second:
at once through Redis when state.url is set, else by polling the database. The gateway's
admin API (POST/GET/DELETE /admin/keys, docs/admin-api.md) does the same over HTTP.

A new secret is printed once, alone on stdout, so KEY=$(interlingua keys create ...)
keeps it; only its SHA-256 is stored, and it cannot be shown again (rotate gives a new
one).
"""

_EPILOG = """\
examples:
  interlingua keys create --name team-c --models 'smart,claude-*' --budget-per-month 100
  interlingua keys list --json
  interlingua keys rotate team-c
  interlingua keys revoke team-c
"""
_EXPIRES = """--expires: a duration from now (90m, 24h, 30d, 2w) or an ISO 8601 date or time
(2026-12-31, 2026-12-31T18:00+01:00; without an offset, UTC)."""


def add_keys_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``keys`` command (and its subcommands) to the top-level subparsers."""
    keys = sub.add_parser(
        "keys",
        help="create, list, revoke and rotate client keys (live, without a restart)",
        description=_DESCRIPTION,
        epilog=_EPILOG + _EXPIRES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = keys.add_subparsers(dest="action", required=True)
    create = actions.add_parser(
        "create",
        help="create a key and print its secret once",
        description="Create a key in the database and print its secret once, alone on "
        "stdout (only its SHA-256 is stored). Limits left out are unlimited.",
        epilog=_EXPIRES,
    )
    create.add_argument("--name", required=True, help="the key's name (logs, usage, metrics)")
    create.add_argument(
        "--models", metavar="GLOBS", help="comma-separated model names it may use (globs)"
    )
    for flag, kind, what in (
        ("--rpm", int, "requests per minute"),
        ("--tpm", int, "tokens per minute"),
        ("--max-concurrency", int, "requests in flight at once"),
        ("--tokens-per-day", int, "tokens per UTC day"),
        ("--budget-per-day", str, "US dollars per UTC day"),
        ("--budget-per-month", str, "US dollars per UTC month"),
    ):
        create.add_argument(flag, type=kind, metavar="N", help=f"limit: {what}")
    create.add_argument(
        "--expires", metavar="WHEN", help="when it stops working (see below; default: never)"
    )
    listing = actions.add_parser("list", help="list the keys with their spend today and this month")
    listing.add_argument("--json", action="store_true", help="print JSON (as GET /admin/keys)")
    for action, what in (("revoke", "revoke a key at once"), ("rotate", "give a key a new secret")):
        one = actions.add_parser(action, help=what)
        one.add_argument("name", help="the key's name")
    for parser in actions.choices.values():
        parser.add_argument(
            "--config", "-c", metavar="PATH", help="YAML config (its usage:, admin:, state:)"
        )
    keys.set_defaults(func=keys_command)


def keys_command(args: argparse.Namespace) -> int:
    """Run ``interlingua keys ...``: 0; 1 when the database fails or the key is refused."""
    config = load_config(args.config) if args.config else default_config()
    where = args.config or "the default config"
    if config.admin is None:
        raise ConfigError(
            f"{where}: no admin section: the gateway uses keys from the database only with "
            "one (admin: {key_env: ...})"
        )
    if not config.usage.enabled:
        raise ConfigError(f"{where}: the usage log is off (usage: false); keys live in it")
    action: Callable[[KeyStore, Config, argparse.Namespace], Awaitable[int]] = _ACTIONS[args.action]
    url = config.usage.url or default_usage_url()
    try:
        return asyncio.run(_run(url, config, args, action))
    except StoreError as exc:
        print(f"interlingua: keys: {exc}", file=sys.stderr)
        return 1
    except ImportError as exc:  # (postgresql:// without the extra)
        raise ConfigError(str(exc)) from None


async def _run(
    url: str,
    config: Config,
    args: argparse.Namespace,
    action: Callable[[KeyStore, Config, argparse.Namespace], Awaitable[int]],
) -> int:
    db = connect(url)
    try:
        await migrate(db)
        result = await action(KeyStore(db), config, args)
    finally:
        await db.aclose()
    if result == 0 and args.action != "list" and config.state.url:
        try:
            await announce(config.state.url)
        except Exception as exc:  # (the gateways' poll finds it anyway)
            print(f"interlingua: could not announce the change on Redis: {exc}", file=sys.stderr)
    if result == 0 and args.action != "list":
        print(f"(database: {_safe(url)})", file=sys.stderr)
    return result


def _limits(args: argparse.Namespace, name: str) -> Any:
    raw = {
        field: getattr(args, field)
        for field in (
            "rpm",
            "tpm",
            "max_concurrency",
            "tokens_per_day",
            "budget_per_day",
            "budget_per_month",
        )
        if getattr(args, field) is not None
    }
    return parse_key_limits(raw or None, f"keys.{name}")


def expires(text: str | None, now: float) -> float | None:
    """``--expires``: a duration from ``now`` or an ISO 8601 time; ConfigError if past."""
    if text is None:
        return None
    match = _DURATION.match(text)
    when = now + float(match[1]) * _UNITS[match[2]] if match else expiry_of(text, "--expires")
    assert when is not None
    if when <= now:
        raise ConfigError(f"--expires: {text} has passed")
    return when


async def _create(store: KeyStore, config: Config, args: argparse.Namespace) -> int:
    name = check_name(args.name, "--name")
    if name in {key.name for key in config.keys}:
        return _refused(f"the config already has a key named '{name}'")
    models = parse_models(args.models or None, "--models")
    limits, expiry = _limits(args, name), expires(args.expires, time.time())
    secret = new_secret()
    try:
        await store.create(name, secret_digest(secret), models, limits, expiry)
    except KeyExists:
        return _refused(f"a key named '{name}' exists or existed (names are not reused)")
    print(secret)
    print(f"created key '{name}': the secret above is shown only this once", file=sys.stderr)
    return 0


async def _list(store: KeyStore, config: Config, args: argparse.Namespace) -> int:
    now = time.time()
    rows, spend = await store.all(), await store.spend_now(now)
    data = [describe(key.name, key.models, key.limits, spend) for key in config.keys]
    data += [describe(row.name, row.models, row.limits, spend, row, now) for row in rows]
    if args.json:
        sys.stdout.buffer.write(orjson.dumps(data, option=orjson.OPT_INDENT_2) + b"\n")
        return 0
    sys.stdout.write(_table(data))
    return 0


def _table(data: list[dict[str, Any]]) -> str:
    head = ["name", "source", "status", "models", "limits", "today $", "month $", "expires"]
    lines = [head]
    for key in data:
        limits = ", ".join(f"{k} {v}" for k, v in key["limits"].items())
        lines.append(
            [
                key["name"],
                key["source"],
                key["status"],
                ",".join(key["models"]) or "*",
                limits or "-",
                f"{key['spend_today_usd']:.2f}",
                f"{key['spend_month_usd']:.2f}",
                key["expires_at"] or "-",
            ]
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    return "".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() + "\n"
        for row in lines
    )


async def _revoke(store: KeyStore, config: Config, args: argparse.Namespace) -> int:
    if args.name in {key.name for key in config.keys}:
        return _refused(f"'{args.name}' is a config key: remove it from the file and reload")
    row = await store.revoke(args.name)
    if row is None:
        return _refused(f"no key named '{args.name}'")
    print(f"revoked key '{args.name}'", file=sys.stderr)
    return 0


async def _rotate(store: KeyStore, config: Config, args: argparse.Namespace) -> int:
    if args.name in {key.name for key in config.keys}:
        return _refused(f"'{args.name}' is a config key: change it in the file and reload")
    secret = new_secret()
    if await store.rotate(args.name, secret_digest(secret)) is None:
        return _refused(f"no active key named '{args.name}' (unknown or revoked)")
    print(secret)
    print(f"rotated key '{args.name}': the old secret is refused from now on", file=sys.stderr)
    return 0


def _refused(why: str) -> int:
    print(f"interlingua: keys: {why}", file=sys.stderr)
    return 1


_ACTIONS: dict[str, Callable[[KeyStore, Config, argparse.Namespace], Awaitable[int]]] = {
    "create": _create,
    "list": _list,
    "revoke": _revoke,
    "rotate": _rotate,
}
