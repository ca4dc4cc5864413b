"""usage/cost.py: each vendor's billing rule, worked to the cent on real-looking usage and
real list prices (the examples docs/usage-log.md shows), and the price looked up per
deployment."""

from __future__ import annotations

import dataclasses
import re
from decimal import Decimal
from pathlib import Path

import pytest
import yaml

from interlingua.config import ConfigError, Price, config_to_yaml, load_config, parse_config
from interlingua.dialects.relay_usage import body_counts
from interlingua.usage.cost import Pricing, cost_usd
from interlingua.usage.record import Record

#: Claude Sonnet 4.5's list price: $3 in, $15 out, 5-minute cache writes at 1.25x
#: input, cache reads at 0.1x
SONNET = Price(
    input=Decimal("3"),
    output=Decimal("15"),
    cache_read=Decimal("0.30"),
    cache_write=Decimal("3.75"),
)
#: a gpt-4o-class price: $2.50 in, $10 out, cached input at half
GPT = Price(input=Decimal("2.50"), output=Decimal("10"), cache_read=Decimal("1.25"))

#: an Anthropic Messages answer's usage: ``input_tokens`` excludes both cache counts
ANTHROPIC_BODY = (
    b'{"id":"msg_1","type":"message","role":"assistant","content":[],'
    b'"usage":{"input_tokens":20950,"cache_creation_input_tokens":12000,'
    b'"cache_read_input_tokens":100000,"output_tokens":5030}}'
)
#: an OpenAI answer's usage: ``prompt_tokens`` includes the cached ones,
#: ``completion_tokens`` the reasoning ones
OPENAI_BODY = (
    b'{"id":"chatcmpl-1","object":"chat.completion","choices":[],'
    b'"usage":{"prompt_tokens":200600,"completion_tokens":30000,"total_tokens":230600,'
    b'"prompt_tokens_details":{"cached_tokens":192000},'
    b'"completion_tokens_details":{"reasoning_tokens":19200}}}'
)


def _cost(price: Price, body: bytes) -> Decimal:
    counts = body_counts(body)
    assert counts is not None
    tokens_in, tokens_out, read, reasoning, write, hour = counts
    return cost_usd(price, tokens_in, tokens_out, read, write, reasoning, hour)


def test_anthropic_cache_writes_and_reads_each_at_their_own_rate() -> None:
    # 20,950 x $3 + 12,000 x $3.75 + 100,000 x $0.30 + 5,030 x $15, per million
    cost = _cost(SONNET, ANTHROPIC_BODY)
    assert cost == Decimal("0.21330")
    assert cost.quantize(Decimal("0.01")) == Decimal("0.21")
    # priced as plain input (the mistake this rule avoids), the same tokens cost 5x more
    plain = cost_usd(SONNET, 132950, 5030, 0, 0, 0)
    assert plain == Decimal("0.47430")


def test_anthropic_one_hour_writes_at_their_own_rate_when_reported_and_priced() -> None:
    """Of 12,000 writes, 8,000 to the one-hour cache (2x input, $6 at Sonnet 4.5's $3):
    billed so with a ``cache_write_1h`` price, else all at ``cache_write``."""
    body = ANTHROPIC_BODY.replace(
        b'"output_tokens":5030}',
        b'"output_tokens":5030,"cache_creation":{"ephemeral_5m_input_tokens":4000,'
        b'"ephemeral_1h_input_tokens":8000}}',
    )
    assert body_counts(body) == (132950, 5030, 100000, 0, 12000, 8000)
    hourly = dataclasses.replace(SONNET, cache_write_1h=Decimal("6.00"))
    # 20,950 x $3 + 4,000 x $3.75 + 8,000 x $6 + 100,000 x $0.30 + 5,030 x $15
    assert _cost(hourly, body) == Decimal("0.2313")
    assert _cost(SONNET, body) == Decimal("0.2133")


def test_openai_cached_input_at_the_cached_rate_and_reasoning_as_output() -> None:
    # 8,600 x $2.50 + 192,000 x $1.25 + 30,000 x $10 (19,200 of them reasoning), per million
    cost = _cost(GPT, OPENAI_BODY)
    assert cost == Decimal("0.56150")
    assert cost.quantize(Decimal("0.01")) == Decimal("0.56")


def test_a_price_that_bills_reasoning_apart() -> None:
    price = Price(input=Decimal("2.50"), output=Decimal("10"), reasoning=Decimal("20"))
    # no cache_read price: the cached tokens are billed as input
    assert cost_usd(price, 200600, 30000, 192000, 0, 19200) == Decimal("0.99350")


def test_counts_that_do_not_add_up_never_bill_below_zero() -> None:
    assert cost_usd(GPT, 10, 5, 50, 0, 9) == Decimal("0.0001525")


def _record(upstream: str | None, model: str | None, **counts: int) -> Record:
    row = Record(at=0.0, request_id="r", key=None, dialect="openai", model="x")
    row.upstream, row.upstream_model = upstream, model
    for name, value in counts.items():
        setattr(row, name, value)
    return row


def _config(tmp_path: Path, prices: str | None = None, **extra: object) -> Path:
    models = [
        {"name": "smart", "upstream": "claude", "model": "claude-sonnet-4-5",
         "price": {"input": 3.00, "output": 15.00, "cache_read": 0.30, "cache_write": 3.75}},
        {"name": "fast", "upstream": "claude", "model": "claude-haiku-4-5"},
        {"name": "gpt", "upstream": "oai", "model": "gpt-4o"},
        {"name": "*", "upstream": "oai"},
    ]  # fmt: skip
    doc: dict[str, object] = {
        "upstreams": {"claude": {"kind": "fake"}, "oai": {"kind": "fake"}},
        "models": models,
        **extra,
    }
    if prices is not None:
        (tmp_path / "prices.yaml").write_text(prices)
        doc["prices"] = "prices.yaml"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


PRICES = """\
"claude-haiku-*": {input: 1, output: 5, cache_read: 0.10, cache_write: 1.25}
"claude-*": {input: 100, output: 100}
"gpt-4o": {input: 2.50, output: 10, cache_read: 1.25}
"gpt-4o-mini*": {input: 0.15, output: 0.60}
"""


def test_the_prices_file_fills_the_entries_without_their_own(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, PRICES))
    by_name = {m.name: m.price for m in config.models}
    assert by_name["smart"] == SONNET  # its own price beats the file's claude-*
    assert by_name["fast"] == Price(Decimal(1), Decimal(5), Decimal("0.10"), Decimal("1.25"))
    assert by_name["gpt"] == GPT
    pricing = Pricing(config)
    assert pricing.price("claude", "claude-haiku-4-5") == by_name["fast"]
    # the wildcard entry's upstream model is the name asked for: matched per request
    assert pricing.price("oai", "gpt-4o-mini-2024") == Price(Decimal("0.15"), Decimal("0.60"))
    assert pricing.price("oai", "llama-3") is None
    assert pricing.price("nowhere", "gpt-4o") is None


def test_a_records_cost_at_the_deployment_that_answered(tmp_path: Path) -> None:
    pricing = Pricing(load_config(_config(tmp_path)))
    counts = {"input_tokens": 132950, "output_tokens": 5030, "cached_tokens": 100000,
              "cache_write_tokens": 12000}  # fmt: skip
    assert pricing.cost(_record("claude", "claude-sonnet-4-5", **counts)) == Decimal("0.21330")
    # unpriced: unknown, never 0
    assert pricing.cost(_record("claude", "claude-haiku-4-5", **counts)) is None
    # a failed attempt that reported no usage costs 0; no upstream reached, nothing spent
    assert pricing.cost(_record("claude", "claude-sonnet-4-5")) == 0
    assert pricing.cost(_record(None, None)) == 0


def test_price_figures_are_the_yaml_text_not_a_binary_float() -> None:
    config = parse_config(
        {
            "upstreams": {"u": {"kind": "fake"}},
            "models": [{"name": "m", "upstream": "u", "price": {"input": 0.1, "output": 0.3}}],
        }
    )
    price = config.models[0].price
    assert price is not None and price.input == Decimal("0.1") and price.output == Decimal("0.3")
    # 0.1 + 0.2 is 0.3 exactly in Decimal (as a float it is 0.30000000000000004)
    assert cost_usd(price, 1_000_000, 0, 0, 0, 0) + Decimal("0.2") == Decimal("0.3")


@pytest.mark.parametrize(
    ("price", "message"),
    [
        ({"input": 3}, "models[0].price.output: required"),
        ({"input": 3, "output": -1}, "models[0].price.output: expected a price of 0 or more"),
        ({"input": 3, "output": True}, "models[0].price.output: expected a number"),
        ({"input": 3, "output": "cheap"}, "models[0].price.output: expected a number"),
        ({"input": 3, "output": 15, "cache_reads": 1}, "did you mean 'cache_read'"),
        ([3, 15], "models[0].price: expected a mapping"),
    ],
)
def test_a_bad_price_is_refused_by_path(price: object, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config(
            {
                "upstreams": {"u": {"kind": "fake"}},
                "models": [{"name": "m", "upstream": "u", "price": price}],
            }
        )


def test_one_deployment_has_one_price() -> None:
    models = [
        {"name": "a", "upstream": "u", "model": "x", "price": {"input": 1, "output": 2}},
        {"name": "b", "upstream": "u", "model": "x", "price": {"input": 1, "output": 3}},
    ]
    with pytest.raises(ConfigError, match=r"models\[1\].price: models\[0\] sends 'x' to 'u'"):
        parse_config({"upstreams": {"u": {"kind": "fake"}}, "models": models})
    models[1]["price"] = models[0]["price"]  # (the same price twice: fine)
    parse_config({"upstreams": {"u": {"kind": "fake"}}, "models": models})


def test_a_bad_prices_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="prices: cannot read"):
        path = _config(tmp_path, "{}")
        (tmp_path / "prices.yaml").unlink()
        load_config(path)
    with pytest.raises(ConfigError, match=r"'gpt-\*'.output: required"):
        load_config(_config(tmp_path, '"gpt-*": {input: 1}\n'))


def test_print_config_keeps_the_prices(tmp_path: Path) -> None:
    """--print-config prints each entry's effective price and the file: loading the
    printout gives the same config back."""
    config = load_config(_config(tmp_path, PRICES))
    printed = tmp_path / "printed.yaml"
    printed.write_text(config_to_yaml(config))
    again = load_config(printed)
    assert again.models == config.models and again.price_table == config.price_table
    assert "cache_write: 3.75" in printed.read_text()
