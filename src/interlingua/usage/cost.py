"""What a request cost, in exact US dollars, from the usage its upstream reported.

A record's counts are the neutral ones (usage/record.py): ``input_tokens`` counts all
input, the cache's reads and writes included, ``output_tokens`` all output, reasoning
included. The vendors bill each part apart (docs/usage-log.md, "Cost", works an example
of each to the cent)::

    (input - cache_read - cache_write) x input
    + cache_read x cache_read price     (else the input price)
    + cache_write x cache_write price   (else the input price)
    + (output - reasoning) x output
    + reasoning x reasoning price       (else the output price)

all per million tokens, in :class:`~decimal.Decimal` (no float ever touches money). A
request is priced at the deployment that answered it (its ``upstream`` and
``upstream_model``: a fallback at its own price); a deployment without a price gives
None (unknown, never 0); a request that reached no upstream cost nothing.

>>> from interlingua.config import Price
>>> price = Price(input=Decimal("2.50"), output=Decimal("10"), cache_read=Decimal("1.25"))
>>> cost_usd(price, 2000, 500, 1024, 0, 0)
Decimal('0.00872000')
"""

from __future__ import annotations

import fnmatch
from decimal import Decimal

from ..config import WILDCARD, Config, Price
from .record import Record

__all__ = ["Pricing", "cost_usd"]

_ZERO = Decimal(0)


def cost_usd(
    price: Price,
    input_tokens: int,
    output_tokens: int,
    cache_read: int,
    cache_write: int,
    reasoning: int,
) -> Decimal:
    """The exact cost of these counts at ``price`` (the module docstring's rule). Parts
    that do not add up (more cached than input, as a loose upstream may report) bill
    what they say and the plain part as 0."""
    plain_in = max(0, input_tokens - cache_read - cache_write)
    plain_out = max(0, output_tokens - reasoning)
    per_million = (
        plain_in * price.input
        + cache_read * (price.input if price.cache_read is None else price.cache_read)
        + cache_write * (price.input if price.cache_write is None else price.cache_write)
        + plain_out * price.output
        + reasoning * (price.output if price.reasoning is None else price.reasoning)
    )
    return per_million.scaleb(-6)  # (a shift of the exponent: exact, however many digits)


class Pricing:
    """The price of each deployment of a config, looked up per request by (upstream,
    upstream model): built once, when the app starts.

    A wildcard entry's upstream model is whatever name the client asked for: its own
    price serves every name, else the ``prices:`` file is matched against the name at
    the first request for it (then remembered, up to :data:`MAX_REMEMBERED` names).
    """

    MAX_REMEMBERED = 4096

    def __init__(self, config: Config) -> None:
        self._prices: dict[tuple[str, str], Price | None] = {}
        #: per upstream: the wildcard entry's own price, or None to match the file
        self._wildcards: dict[str, Price | None] = {}
        self._table = config.price_table
        for model in config.models:
            if model.model == WILDCARD:
                self._wildcards.setdefault(model.upstream, model.price)
            else:
                self._prices.setdefault((model.upstream, model.model), model.price)

    @property
    def any(self) -> bool:
        """Whether anything is priced at all (else every cost is None: unpriced)."""
        return bool(self._table) or any(
            p is not None for p in (*self._prices.values(), *self._wildcards.values())
        )

    def price(self, upstream: str, upstream_model: str) -> Price | None:
        """The price of the deployment (None: unpriced)."""
        key = (upstream, upstream_model)
        try:
            return self._prices[key]
        except KeyError:
            pass
        if upstream not in self._wildcards:
            return None
        price = self._wildcards[upstream]
        if price is None:
            price = next(
                (p for glob, p in self._table if fnmatch.fnmatchcase(upstream_model, glob)), None
            )
        if len(self._prices) < self.MAX_REMEMBERED:
            self._prices[key] = price
        return price

    def cost(self, record: Record) -> Decimal | None:
        """``record``'s cost: exact dollars, 0 when it reached no upstream, None when
        its deployment has no price."""
        upstream = record.upstream
        if upstream is None:
            return _ZERO
        price = self.price(upstream, record.upstream_model or "")
        if price is None:
            return None
        return cost_usd(
            price,
            record.input_tokens,
            record.output_tokens,
            record.cached_tokens,
            record.cache_write_tokens,
            record.reasoning_tokens,
        )
