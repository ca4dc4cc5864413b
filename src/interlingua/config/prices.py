"""What a model's tokens cost: ``price`` on a model entry, and a ``prices:`` file.

The shape is a contract (docs/config.md, "Prices")::

    models:
      - name: smart
        upstream: claude
        model: claude-sonnet-4-5
        price: {input: 3.00, output: 15.00, cache_read: 0.30, cache_write: 3.75}
    prices: prices.yaml          # model-name glob -> price, for entries without their own

Every figure is US dollars per million tokens: ``input`` and ``output`` are required,
``cache_read``, ``cache_write``, ``cache_write_1h`` and ``reasoning`` optional (the
usage log's docs say what each bills and what a missing one falls back to). Figures
become :class:`~decimal.Decimal` from the YAML text of the number (``Decimal(str(v))``:
``0.30`` is 0.30, not the binary float nearest to it), so a cost is exact.

The file is a mapping of glob to price, matched in its order (the first match wins)
against an entry's upstream ``model`` name and then its ``name``; an entry's own
``price`` beats the file. A relative path is read from the config file's directory.

>>> parse_price({"input": 3, "output": 15, "cache_read": 0.3}, "p").cache_read
Decimal('0.3')
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import yaml

from ._values import ConfigError, describe, expect_str, mapping, reject_unknown

__all__ = [
    "PRICE_KEYS",
    "Price",
    "PriceTable",
    "check_one_price",
    "match_price",
    "parse_price",
    "parse_prices",
]

#: the keys of a ``price`` mapping, in the order they are printed
PRICE_KEYS = ("input", "output", "cache_read", "cache_write", "cache_write_1h", "reasoning")


@dataclass(frozen=True, slots=True)
class Price:
    """US dollars per million tokens of each kind (None: not billed apart; the usage
    log's cost rules say what it is billed at then)."""

    input: Decimal
    output: Decimal
    cache_read: Decimal | None = None
    cache_write: Decimal | None = None
    #: Anthropic's one-hour cache writes, when the usage reports them apart (else they
    #: are billed as ``cache_write``)
    cache_write_1h: Decimal | None = None
    reasoning: Decimal | None = None

    def as_doc(self) -> dict[str, float | int]:
        """The mapping a config file writes (numbers as YAML prints them)."""
        doc: dict[str, float | int] = {}
        for key in PRICE_KEYS:
            value = getattr(self, key)
            if value is not None:
                doc[key] = int(value) if value == value.to_integral_value() else float(value)
        return doc


#: a ``prices:`` file: (glob, price) pairs, in the file's order
PriceTable = tuple[tuple[str, Price], ...]


def _figure(value: Any, where: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(
            f"{where}: expected a number of USD per million tokens, got {describe(value)}"
        )
    try:
        figure = Decimal(str(value).strip())  # (the number's text: never its binary float)
    except InvalidOperation:
        raise ConfigError(f"{where}: expected a number, got {value!r}") from None
    if not figure.is_finite() or figure < 0:
        raise ConfigError(f"{where}: expected a price of 0 or more, got {value!r}")
    return figure


def parse_price(data: Any, where: str) -> Price:
    """A ``price`` mapping (see the module docstring), else ConfigError naming ``where``."""
    raw = mapping(data, where)
    reject_unknown(raw, PRICE_KEYS, where)
    for key in ("input", "output"):
        if key not in raw:
            raise ConfigError(f"{where}.{key}: required (USD per million tokens)")
    figures = {key: _figure(raw[key], f"{where}.{key}") for key in PRICE_KEYS if key in raw}
    return Price(**figures)


def parse_prices(value: Any, base: Path | None) -> tuple[str | None, PriceTable]:
    """The ``prices:`` key: (the file's path as written, its table); (None, ()) when
    absent. ``base``: the config file's directory (a relative path is read from it)."""
    if value is None:
        return None, ()
    written = expect_str(value, "prices")
    path = Path(written).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"prices: cannot read {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"prices: {path}: invalid YAML: {exc}") from None
    where = f"prices ({path})"
    table = mapping(data if data is not None else {}, where)
    return written, tuple(
        (str(glob), parse_price(price, f"{where}: {glob!r}")) for glob, price in table.items()
    )


def check_one_price(models: Sequence[Any]) -> None:
    """ConfigError when two model entries send the same upstream model to the same
    upstream at different prices: a request's cost is looked up by the deployment that
    answered it (upstream, upstream model), which must have one price."""
    seen: dict[tuple[str, str], tuple[int, Price | None]] = {}
    for i, model in enumerate(models):
        key = (model.upstream, model.model)
        first = seen.setdefault(key, (i, model.price))
        if first[1] != model.price:
            raise ConfigError(
                f"models[{i}].price: models[{first[0]}] sends {model.model!r} to "
                f"{model.upstream!r} too, at another price (a deployment has one price)"
            )


def match_price(table: PriceTable, *names: str) -> Price | None:
    """The price of the first glob of ``table`` that matches the first of ``names`` it
    can (then the next name), case-sensitive; None when none does."""
    for name in names:
        for glob, price in table:
            if fnmatch.fnmatchcase(name, glob):
                return price
    return None
