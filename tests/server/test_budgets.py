"""A key's budgets in dollars behind a running gateway: admitted while under, the stream
that crosses the line finishes, then 429 naming the budget and when it resets (both
client dialects, Retry-After to the UTC midnight or the month's end); the spend
rebuilt from the usage log when the gateway starts again; two gateway processes
sharing one key's spend through a real Redis.

    httpx -> live gateway (prices, a key with budgets) -> mock Chat upstream

Each request costs $0.5615 (test_cost_served.py's worked example at a gpt-4o-class price).
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from interlingua.config import KeyLimits, load_config, parse_config
from interlingua.limits import DAY, MONTH
from interlingua.server import create_app
from interlingua.server.budgets import SpendBook, nanodollars, spend_since, warn_unpriced
from interlingua.usage.cost import Pricing
from interlingua.usage.db import connect
from interlingua.usage.log import UsageLog
from interlingua.usage.record import Record

from ..live_server import live_server
from ..redis_server import needs_redis_server, redis_server
from .gateway_process import serve
from .mock_upstream import mock_openai
from .test_cost_served import GPT, chat_answer

KEY = "sk-budget-team-key"
HEADERS = {"authorization": f"Bearer {KEY}"}
HELLO: Any = [{"role": "user", "content": "hello"}]


@pytest.fixture
def chat() -> Iterator[str]:
    with mock_openai(default=chat_answer) as mock:
        yield mock.base_url


def _config(chat: str, tmp: Path, limits: dict[str, Any], **more: Any) -> Path:
    config = {
        "upstreams": {"chat": {"kind": "openai", "base_url": chat}},
        "models": [
            {"name": "gpt", "upstream": "chat", "model": "gpt-4o", "price": GPT},
            {"name": "free", "upstream": "chat", "model": "gpt-free"},
        ],
        "keys": [{"name": "team", "key_env": "BUDGET_KEY", "limits": limits}],
        "usage": {"url": f"sqlite:///{tmp / 'usage.db'}"},
        **more,
    }
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _ask(base: str, dialect: str, *, stream: bool = False, model: str = "gpt") -> httpx.Response:
    body: dict[str, Any] = {"model": model, "messages": HELLO, "stream": stream}
    url = base + "/v1/chat/completions"
    if dialect == "anthropic":
        body["max_tokens"] = 64
        url = base + "/v1/messages"
    with httpx.stream("POST", url, json=body, headers=HEADERS, timeout=30) as response:
        response.read()
    return response


def _charged(book_wait: float = 0.0) -> None:
    """Let the last answer's charge land (the accounting hands records over in batches
    every 0.1 s; Redis's count is sent without waiting)."""
    time.sleep(0.25 + book_wait)


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_the_daily_budget_refuses_once_spent_and_the_crossing_stream_finishes(
    chat: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dialect: str
) -> None:
    monkeypatch.setenv("BUDGET_KEY", KEY)
    path = _config(chat, tmp_path, {"budget_per_day": 1})
    with live_server(create_app(load_config(path))) as base:
        assert _ask(base, dialect).status_code == 200  # $0.56 of $1
        _charged()
        crossing = _ask(base, dialect, stream=True)  # admitted under; ends at $1.12
        assert crossing.status_code == 200
        assert crossing.text.rstrip().endswith(
            "[DONE]" if dialect == "openai" else '{"type":"message_stop"}'
        ), crossing.text[-200:]
        _charged()
        refused = _ask(base, dialect)
        assert refused.status_code == 429, refused.text
        error = refused.json()["error"]
        assert "budget_per_day of 1 USD" in error["message"]
        midnight = (int(time.time()) // 86400 + 1) * 86400
        when = datetime.fromtimestamp(midnight, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert when in error["message"]
        if dialect == "openai":
            assert error["code"] == "budget_exceeded"
        else:
            assert refused.json()["type"] == "error" and error["type"] == "rate_limit_error"
        retry_after = float(refused.headers["retry-after"])
        assert abs(time.time() + retry_after - midnight) < 5
        # an unpriced model counts toward no budget, but the key's budget is spent:
        # every request of the key is refused until it resets
        assert _ask(base, dialect, model="free").status_code == 429


def test_the_monthly_budget_resets_at_the_month_s_end(
    chat: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUDGET_KEY", KEY)
    path = _config(chat, tmp_path, {"budget_per_month": "0.50", "budget_per_day": 100})
    with live_server(create_app(load_config(path))) as base:
        assert _ask(base, "openai").status_code == 200
        _charged()
        refused = _ask(base, "openai")
        assert refused.status_code == 429
        assert "budget_per_month of 0.50 USD" in refused.json()["error"]["message"]
        end = MONTH.end(MONTH.index(time.time()))
        assert abs(time.time() + float(refused.headers["retry-after"]) - end) < 5


def test_the_spend_is_rebuilt_from_the_usage_log_on_start(
    chat: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUDGET_KEY", KEY)
    path = _config(chat, tmp_path, {"budget_per_day": 1})
    with live_server(create_app(load_config(path))) as base:
        assert _ask(base, "openai").status_code == 200
        assert _ask(base, "openai").status_code == 200  # $1.123: over, once it ends
    # (stopped: the usage log flushed its rows)
    with live_server(create_app(load_config(path))) as base:
        refused = _ask(base, "openai")
        assert refused.status_code == 429, refused.text
        assert "budget_per_day" in refused.json()["error"]["message"]


async def test_spend_since_sums_the_priced_rows_of_each_key(tmp_path: Path) -> None:
    db = connect(f"sqlite:///{tmp_path / 'usage.db'}")
    log = UsageLog(db)
    await log.start()
    now = time.time()
    for key, cost, at in [
        ("a", Decimal("0.25"), now),
        ("a", Decimal("0.125"), now),
        ("a", None, now),  # unpriced: nothing known
        ("a", Decimal("9"), now - 3 * 86400),  # before the period
        ("b", Decimal("1"), now),
    ]:
        row = Record(at=at, request_id="r", key=key, dialect="openai", model="m")
        row.cost_usd = cost
        log.record(row)
    await log.aclose()
    db = connect(f"sqlite:///{tmp_path / 'usage.db'}")
    await db.open()
    try:
        spent = await spend_since(db, DAY.start(DAY.index(now)), ["a", "c"])
        assert spent == {"a": Decimal("0.375")}
        book = SpendBook()
        (budget,) = book.budgets("a", KeyLimits(budget_per_day=Decimal("0.375")))
        await book.seed(db)
        assert await budget.counter.check() > 0  # spent: 0.375 of 0.375
        assert not book.pending
    finally:
        await db.aclose()


def test_nanodollars_round_up() -> None:
    assert nanodollars(Decimal("0.5615")) == 561_500_000
    assert nanodollars(Decimal("0.0000000000001")) == 1


@needs_redis_server
def test_two_gateway_processes_share_one_key_s_spend_through_redis(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUDGET_KEY", KEY)
    with redis_server() as redis, mock_openai(default=chat_answer) as chat:
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        configs = []
        for name in ("a", "b"):  # each its own usage log: only Redis is shared
            path = _config(chat.base_url, tmp_path / name, {"budget_per_day": 1},
                           state={"url": redis.url})  # fmt: skip
            configs.append(yaml.safe_load(path.read_text()))
        with serve(tmp_path / "a", configs[0]) as a, serve(tmp_path / "b", configs[1]) as b:
            assert _ask(a.url, "openai").status_code == 200  # $0.56
            _charged()
            assert _ask(b.url, "anthropic").status_code == 200  # $1.12, counted in Redis
            _charged()
            for gateway in (a, b):
                refused = _ask(gateway.url, "openai")
                assert refused.status_code == 429, refused.text
                assert "budget_per_day" in refused.json()["error"]["message"]


def test_a_budget_given_by_a_reload_counts_what_the_key_spent_before(
    chat: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGHUP to a real ``interlingua serve`` gives the key a budget it has spent already
    (read from the usage log before the new config serves), then a higher one."""
    monkeypatch.setenv("BUDGET_KEY", KEY)
    config = yaml.safe_load(_config(chat, tmp_path, {"rpm": 100}).read_text())
    with serve(tmp_path, config) as gateway:
        assert _ask(gateway.url, "openai").status_code == 200
        assert _ask(gateway.url, "openai").status_code == 200  # $1.123, no budget yet
        for budget, expected in ((1, 429), (2, 200)):
            config["keys"][0]["limits"]["budget_per_day"] = budget
            (tmp_path / f"gateway-{gateway.port}.yaml").write_text(yaml.safe_dump(config))
            reloads = gateway.stderr().count("config reloaded")
            gateway.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 15
            while gateway.stderr().count("config reloaded") == reloads:
                assert time.monotonic() < deadline, gateway.stderr()
                time.sleep(0.05)
            answer = _ask(gateway.url, "openai")
            assert answer.status_code == expected, answer.text
            if expected == 429:
                assert "budget_per_day of 1 USD" in answer.json()["error"]["message"]


def test_a_budgeted_key_that_may_use_an_unpriced_model_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = parse_config(
        {
            "upstreams": {"u": {"kind": "fake"}},
            "models": [
                {"name": "priced", "upstream": "u", "model": "a", "price": GPT},
                {"name": "free", "upstream": "u", "model": "b"},
                {"name": "any", "upstream": "u", "model": "*"},
            ],
            "keys": [
                {"name": "capped", "key_sha256": "0" * 64, "limits": {"budget_per_day": 5}},
                {"name": "narrow", "key_sha256": "1" * 64, "models": ["priced"],
                 "limits": {"budget_per_month": 5}},
                {"name": "open", "key_sha256": "2" * 64},
            ],
        }
    )  # fmt: skip
    with caplog.at_level(logging.WARNING, logger="interlingua.server"):
        warn_unpriced(config, Pricing(config))
    (warning,) = [r.getMessage() for r in caplog.records]
    assert "'capped'" in warning and warning.endswith(": free, any")


def test_the_status_page_shows_spend_per_key_and_model_and_budget_left(
    chat: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BUDGET_KEY", KEY)
    path = _config(
        chat,
        tmp_path,
        {"budget_per_day": 10, "budget_per_month": 100},
        server={"api_keys": ["sk-ops-status"]},
    )
    config = yaml.safe_load(path.read_text())
    config["keys"].append({"name": "other", "key_sha256": "0" * 64})
    path.write_text(yaml.safe_dump(config))
    with live_server(create_app(load_config(path))) as base:
        assert _ask(base, "openai").status_code == 200
        assert _ask(base, "anthropic").status_code == 200
        assert _ask(base, "openai", model="free").status_code == 200  # unpriced: no spend
        deadline = time.monotonic() + 10
        while True:  # (the usage log writes its rows about every second)
            seen = httpx.get(base + "/ui/data", headers=HEADERS).json()["spend"]
            if seen["keys"] or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        ops = httpx.get(base + "/ui/data", headers={"x-api-key": "sk-ops-status"}).json()
    assert seen["logged"] is True
    assert seen["keys"] == {"team": {"hour": 1.123, "today": 1.123}}
    assert seen["models"] == {"gpt": {"hour": 1.123, "today": 1.123}}
    day, month = seen["budgets"]["team"]
    assert (day["budget"], day["limit"], day["spent"], day["left"]) == (
        "budget_per_day",
        10.0,
        1.123,
        8.877,
    )
    assert (month["budget"], month["spent"], month["left"]) == ("budget_per_month", 1.123, 98.877)
    midnight = (int(time.time()) // 86400 + 1) * 86400
    assert day["resets_at"] == datetime.fromtimestamp(midnight, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert set(ops["spend"]["budgets"]) == {"team"}  # (the shared key sees every key)


def test_processes_sharing_a_usage_log_learn_each_other_s_spend_without_redis(
    chat: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two gateways on one SQLite usage log and no Redis (as ``--workers`` are): each
    reads the rows the other writes, so the key's budget holds across both."""
    monkeypatch.setenv("BUDGET_KEY", KEY)
    config = yaml.safe_load(_config(chat, tmp_path, {"budget_per_day": 1}).read_text())
    (tmp_path / "b").mkdir()
    with serve(tmp_path, config) as a, serve(tmp_path / "b", config) as b:
        assert _ask(a.url, "openai").status_code == 200  # $0.56, on a
        assert _ask(b.url, "openai").status_code == 200  # $1.12 in all, on b
        deadline = time.monotonic() + 10  # (written within ~1 s, read every 2 s)
        while _spent_today(a.url) < 1.123:  # (a's own count, asked without spending)
            assert time.monotonic() < deadline, "a never learnt b's spend"
            time.sleep(0.2)
        answer = _ask(a.url, "openai")
        assert answer.status_code == 429
        assert "budget_per_day of 1 USD" in answer.json()["error"]["message"]


def _spent_today(base: str) -> float:
    """The key's daily budget's spend as the gateway at ``base`` counts it (its status
    page's data)."""
    data = httpx.get(base + "/ui/data", headers=HEADERS, timeout=10).json()
    (day,) = [b for b in data["spend"]["budgets"]["team"] if b["budget"] == "budget_per_day"]
    return float(day["spent"])
