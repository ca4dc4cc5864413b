"""The config's small validators: each checks one value and names its path on failure.

Public for the upstream kinds (they check their own options with them) and the config's
own sections.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

__all__ = [
    "ENV_NAME",
    "ConfigError",
    "database_url",
    "describe",
    "expect_bool",
    "expect_choice",
    "expect_int",
    "expect_positive_int",
    "expect_str",
    "expect_usd",
    "mapping",
    "opt_str",
    "positive",
    "reject_unknown",
]


#: what the name of an environment variable may look like (``api_key_env``, ``key_env``)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ConfigError(ValueError):
    """The configuration is invalid; the message names the path of the bad value."""


def describe(value: Any) -> str:
    """What ``value`` is, for a message: "a string", "a list", "null"."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {describe(value)}")
    return value


def reject_unknown(
    raw: Mapping[str, Any], known: tuple[str, ...], where: str, also: tuple[str, ...] = ()
) -> None:
    """ConfigError for the first key of ``raw`` in neither ``known`` nor ``also``, with the
    closest known key as a suggestion (a typo is the usual cause)."""
    candidates = [*known, *also]
    for key in raw:
        if key in candidates:
            continue
        close = difflib.get_close_matches(str(key), candidates, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(candidates)}"
        raise ConfigError(f"{where}: unknown key {key!r} ({hint})")


def expect_str(value: Any, where: str) -> str:
    """``value`` if it is a non-empty string, else ConfigError naming ``where``."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: expected a non-empty string, got {describe(value)}")
    return value


def opt_str(value: Any, where: str) -> str | None:
    return None if value is None else expect_str(value, where)


def expect_int(value: Any, where: str) -> int:
    """``value`` if it is an integer (not a boolean), else ConfigError naming ``where``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{where}: expected an integer, got {describe(value)}")
    return value


def positive(value: Any, where: str) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ConfigError(f"{where}: expected a positive number, got {describe(value)}")
    if value <= 0:
        raise ConfigError(f"{where}: expected a positive number, got {value!r}")
    return value


def expect_positive_int(value: Any, where: str) -> int:
    """``value`` if it is an integer above 0, else ConfigError naming ``where``."""
    number = expect_int(value, where)
    if number <= 0:
        raise ConfigError(f"{where}: expected a positive integer, got {number!r}")
    return number


def expect_usd(value: Any, where: str) -> Decimal:
    """``value`` as an exact amount of US dollars above 0 (from the number's text, never
    its binary float: ``0.1`` is ``Decimal('0.1')``), else ConfigError naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"{where}: expected an amount in USD, got {describe(value)}")
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        raise ConfigError(f"{where}: expected an amount in USD, got {value!r}") from None
    if not amount.is_finite() or amount <= 0:
        raise ConfigError(f"{where}: expected an amount in USD above 0, got {value!r}")
    return amount


def expect_bool(value: Any, where: str) -> bool:
    """``value`` if it is true or false, else ConfigError naming ``where``."""
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true or false, got {describe(value)}")
    return value


def expect_choice(value: Any, choices: tuple[str, ...], where: str) -> str:
    """``value`` if it is one of ``choices``, else ConfigError naming ``where`` and every
    choice (YAML reads a bare ``yes``/``no``/``on``/``off`` as a boolean: said so)."""
    if isinstance(value, str) and value in choices:
        return value
    got = repr(value) if isinstance(value, str) else describe(value)
    raise ConfigError(f"{where}: expected one of {', '.join(choices)}, got {got}")


DATABASE_SCHEMES = ("sqlite://", "postgresql://", "postgres://")


def database_url(value: Any, where: str) -> str | None:
    """A SQLite or PostgreSQL URL (or None), else ConfigError naming ``where``."""
    url = opt_str(value, where)
    if url is not None and not url.startswith(DATABASE_SCHEMES):
        raise ConfigError(
            f"{where}: expected sqlite:///path/to/file.db or "
            f"postgresql://user@host:port/db, got {url!r}"
        )
    if url is not None and url.startswith("sqlite://") and len(url) == len("sqlite://"):
        raise ConfigError(f"{where}: sqlite:// needs a path, e.g. sqlite:///var/lib/r.db")
    return url
