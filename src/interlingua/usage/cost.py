"""What a request cost, in exact US dollars, from the usage its upstream reported.

A record's counts are the neutral ones (usage/record.py): ``input_tokens`` counts all
input, the cache's reads and writes included, ``output_tokens`` all output, reasoning
included. The vendors bill each part apart (docs/usage-log.md, "Cost", works an example
of each to the cent)::

    (input - cache_read - cache_write) x input
    + cache_read x cache_read price     (else the input price)
    + cache_write x cache_write price   (else the input price; the one-hour writes
                                         at cache_write_1h when reported and priced)
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

__all__ = ["Pricing", "Rates", "cost_usd"]

_ZERO = Decimal(0)


def cost_usd(
    price: Price,
    input_tokens: int,
    output_tokens: int,
    cache_read: int,
    cache_write: int,
    reasoning: int,
    cache_write_1h: int = 0,
) -> Decimal:
    """The exact cost of these counts at ``price`` (the module docstring's rule);
    ``cache_write_1h``: the one-hour writes among ``cache_write``. Parts that do not add
    up (more cached than input, as a loose upstream may report) bill what they say and
    the plain part as 0."""
    return Rates(price).cost(
        input_tokens, output_tokens, cache_read, cache_write, reasoning, cache_write_1h
    )


class Rates:
    """A :class:`~interlingua.config.Price` as whole numbers of its smallest unit, so a
    request's cost is a few integer products and one Decimal made at the end: exact, and
    less work than the same sum in Decimal operations (each of which looks up the
    decimal context and allocates a number)."""

    __slots__ = (
        "cache_read",
        "cache_write",
        "cache_write_1h",
        "exponent",
        "input",
        "output",
        "reasoning",
    )

    def __init__(self, price: Price) -> None:
        write = price.input if price.cache_write is None else price.cache_write
        figures = (
            price.input,
            price.output,
            price.input if price.cache_read is None else price.cache_read,
            write,
            write if price.cache_write_1h is None else price.cache_write_1h,
            price.output if price.reasoning is None else price.reasoning,
        )
        # the figures' most decimal places: each figure times 10**places is an integer
        exponents = [f.as_tuple().exponent for f in figures]
        places = max(0, *(-e for e in exponents if isinstance(e, int)))
        units = [int(f.scaleb(places)) for f in figures]
        (
            self.input,
            self.output,
            self.cache_read,
            self.cache_write,
            self.cache_write_1h,
            self.reasoning,
        ) = units
        #: per million tokens, in units of 10**-places dollars
        self.exponent = -(6 + places)

    def cost(
        self,
        input_tokens: int,
        output_tokens: int,
        cache_read: int,
        cache_write: int,
        reasoning: int,
        cache_write_1h: int = 0,
    ) -> Decimal:
        """The exact cost of these counts (see :func:`cost_usd`)."""
        plain_in = input_tokens - cache_read - cache_write
        plain_out = output_tokens - reasoning
        units = (
            (plain_in * self.input if plain_in > 0 else 0)
            + cache_read * self.cache_read
            + (cache_write - cache_write_1h) * self.cache_write
            + cache_write_1h * self.cache_write_1h
            + (plain_out * self.output if plain_out > 0 else 0)
            + reasoning * self.reasoning
        )
        # (exact: a count of units far below the context's 28 digits, shifted)
        return Decimal(units).scaleb(self.exponent)


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
        #: each deployment's price as :class:`Rates` (None: unpriced), made at its first
        #: request
        self._rates: dict[tuple[str, str], Rates | None] = {}

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
        key = (upstream, record.upstream_model or "")
        try:
            rates = self._rates[key]
        except KeyError:
            price = self.price(*key)
            rates = None if price is None else Rates(price)
            if len(self._rates) < self.MAX_REMEMBERED:
                self._rates[key] = rates
        if rates is None:
            return None
        return rates.cost(
            record.input_tokens,
            record.output_tokens,
            record.cached_tokens,
            record.cache_write_tokens,
            record.reasoning_tokens,
            record.cache_write_1h_tokens,
        )
