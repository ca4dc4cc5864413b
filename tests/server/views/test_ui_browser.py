"""The status page in a real headless browser (Debian's ``chromium``): it renders, and its
charts, tables and error list show the traffic the gateway saw.

The gateway runs on uvicorn in a thread on a free 127.0.0.1 port; its status page is fed
known records (what the request path hands it for each finished request). Chromium
loads ``/ui``, runs its script (which fetches ``/ui/data`` and draws the SVG charts),
and prints the resulting DOM (``--dump-dom``) or a PNG (``--screenshot``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections import Counter
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from interlingua.config import ServerConfig, parse_config
from interlingua.server.app import create_app
from interlingua.server.views.status_page import StatusPage
from interlingua.usage.record import Record

from ...live_server import live_server

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="needs Debian's chromium (apt-get install chromium)"
)

CONFIG = {
    "upstreams": {"nim": {"kind": "fake"}, "vllm": {"kind": "fake"}, "local": {"kind": "fake"}},
    "models": [
        {
            "name": "smart",
            "upstream": "nim",
            "model": "deepseek-r1",
            "fallbacks": ["small"],
            "context_fallbacks": ["small"],
            "on_stream_break": "continue",
        },
        {"name": "smart", "upstream": "vllm", "model": "qwen3-8b", "weight": 2},
        {"name": "small", "upstream": "local", "model": "smollm2"},
    ],
}


def status_page(app: Any) -> StatusPage:
    [page] = [r.endpoint.__self__ for r in app.app.routes if getattr(r, "path", "") == "/ui/data"]
    assert isinstance(page, StatusPage)
    return page


def feed(page: StatusPage) -> Counter[str]:
    """An hour of known traffic, two models, two keys, one failure; requests per name."""
    counts: Counter[str] = Counter()
    now = time.time()
    for ago in range(0, 60, 3):
        for i in range(1 + ago % 7):
            model, upstream, target = (
                ("smart", "vllm", "qwen3-8b") if i % 3 else ("small", "local", "smollm2")
            )
            row = Record(
                at=now - ago * 60,
                request_id=f"req_{ago}_{i}",
                key="team-a" if i % 2 else "team-b",
                dialect="openai" if i % 2 else "anthropic",
                model=model,
                stream=bool(i % 2),
            )
            row.upstream, row.upstream_model = upstream, target
            row.status, row.latency = 200, 0.4 + i / 10
            row.input_tokens, row.output_tokens = 300 + 40 * i, 80 + 25 * i
            page.record(row)
            counts.update((row.model, row.key))
    failed = Record(
        at=now - 30, request_id="req_failed_1", key="team-a", dialect="openai", model="smart"
    )
    failed.upstream, failed.upstream_model = "nim", "deepseek-r1"
    failed.status, failed.error, failed.latency = 429, "rate_limit", 0.05
    page.record(failed)
    counts.update(("smart", "team-a"))
    return counts


def chromium(url: str, tmp_path: Path, *args: str) -> str:
    """Run headless chromium on ``url``; its stdout. Bounded in time; its whole process
    group is killed afterwards (it starts helper processes)."""
    assert CHROMIUM is not None
    command = [
        CHROMIUM,
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--virtual-time-budget=5000",
        *args,
        url,
    ]
    environment = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper()}
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        out, err = "", "timed out"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.returncode in (0, -signal.SIGKILL) and err != "timed out", err[-2000:]
    return out


class Dom(HTMLParser):
    """The dumped DOM as a flat list of (tag, attributes) and the text of each element id."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.text: list[str] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def having(self, tag: str, **attrs: str) -> list[dict[str, str]]:
        return [
            a
            for t, a in self.elements
            if t == tag and all(a.get(k.rstrip("_")) == v for k, v in attrs.items())
        ]


class Spend:
    """What the status page's SpendView would read from a usage log with priced rows."""

    async def snapshot(self) -> dict[str, Any]:
        day = {"budget": "budget_per_day", "limit": 10.0, "spent": 1.123, "left": 8.877,
               "resets_at": "2026-11-29T00:00:00Z"}  # fmt: skip
        month = {**day, "budget": "budget_per_month", "limit": 5.0, "spent": 5.2, "left": 0.0}
        return {
            "logged": True,
            "keys": {
                "team-a": {"hour": 1.123, "today": 4.5},
                "team-b": {"hour": 0, "today": 0.004},
            },
            "models": {"smart": {"hour": 1.123, "today": 4.504}},
            "budgets": {"team-a": [day, month]},
        }


def test_page_renders_the_traffic(tmp_path: Path) -> None:
    app = create_app(parse_config(CONFIG))
    counts = feed(status_page(app))
    status_page(app).spend = Spend()  # type: ignore[assignment]
    with live_server(app) as url:
        html = chromium(url + "/ui", tmp_path, "--dump-dom")
        shot = tmp_path / "status.png"
        chromium(url + "/ui", tmp_path, f"--screenshot={shot}", "--window-size=1280,1800")
    dom = Dom(html)
    text = " ".join(dom.text)

    assert dom.having("main") and "hidden" not in dom.having("main")[0]
    assert "hidden" in dom.having("form", id="auth")[0]  # no keys configured: no prompt
    assert "updated" in text

    # Charts: the overall pair, then a pair per model and per key.
    requests_charts = dom.having("svg", class_="chart", **{"data-kind": "requests"})
    tokens_charts = dom.having("svg", class_="chart", **{"data-kind": "tokens"})
    assert len(requests_charts) == len(tokens_charts) == 1 + 2 + 2
    bars = dom.having("rect", class_="bar-ok")
    heights = [float(b["height"]) for b in bars]
    assert len(bars) >= 40 and all(h > 0 for h in heights) and max(heights) > 30
    assert dom.having("rect", class_="bar-err")  # the failed request, in red
    areas = dom.having("path", class_="area-in") + dom.having("path", class_="area-out")
    assert len(areas) == 2 * 5
    for area in areas:
        points = re.findall(r"[ML]([\d.]+),([\d.]+)", area["d"])
        assert len(points) == 2 * 60
        assert len({y for _, y in points}) > 2  # not a flat line

    # Cards per model and per key, the busiest first.
    cards = [c["data-name"] for c in dom.having("div", class_="card") if "data-name" in c]
    busiest = sorted(counts, key=lambda name: (-counts[name], name))
    models = [name for name in busiest if not name.startswith("team-")]
    keys = [name for name in busiest if name.startswith("team-")]
    assert cards == models + keys
    assert f"{counts['smart']} requests · 1 failed" in text

    # The models table: every deployment, with its health.
    model_rows = [r["data-model"] for r in dom.having("tr") if "data-model" in r]
    assert model_rows == ["smart", "smart", "small"]
    for word in (
        "deepseek-r1",
        "qwen3-8b",
        "smollm2",
        "fallbacks: small",
        "context fallbacks: small",
        "continues broken streams",
    ):
        assert word in text
    badges = [b["class"] for b in dom.having("span") if b.get("class", "").startswith("badge")]
    assert badges == ["badge failing", "badge ok", "badge ok"]  # nim: its one request failed

    # Spend per key with what is left of its budgets (one spent: marked), per model.
    assert [r["data-spend-key"] for r in dom.having("tr") if "data-spend-key" in r] == [
        "team-a",
        "team-b",
    ]
    assert [r["data-spend-model"] for r in dom.having("tr") if "data-spend-model" in r] == ["smart"]
    for shown in ("$1.12", "$4.50", "$8.88 left of $10.00", "$0.00 left of $5.00", "$0.0040"):
        assert shown in text, shown
    assert dom.having("td", class_="status-4", title="resets at 2026-11-29T00:00:00Z")

    # The recent error.
    assert "req_failed_1" in text and "rate_limit" in text and "429" in text

    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 30_000
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (1280, 1800)
    if os.environ.get("INTERLINGUA_KEEP_SCREENSHOT"):  # to look at it: a path to copy it to
        shutil.copy(shot, os.environ["INTERLINGUA_KEEP_SCREENSHOT"])


def test_page_asks_for_a_key_when_keys_are_configured(tmp_path: Path) -> None:
    config = parse_config(CONFIG)
    app = create_app(replace(config, server=ServerConfig(api_keys=("sk-browser",))))
    feed(status_page(app))
    with live_server(app) as url:
        dom = Dom(chromium(url + "/ui", tmp_path, "--dump-dom"))
    assert "hidden" not in dom.having("form", id="auth")[0]
    assert "hidden" in dom.having("main")[0]
    assert dom.having("input", id="key", type="password")
    assert not dom.having("svg")  # no data without the key
    assert "req_failed_1" not in " ".join(dom.text)
