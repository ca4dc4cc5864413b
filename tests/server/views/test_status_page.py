"""The status page's data (GET /ui/data) after known requests, its access check, and the
counts several workers share; the page itself (GET /ui) as served."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from interlingua.config import ServerConfig, fake_config, parse_config
from interlingua.errors import AuthenticationError
from interlingua.routing import Router
from interlingua.server.app import create_app
from interlingua.server.views import traffic as traffic_module
from interlingua.server.views.status_page import StatusPage
from interlingua.server.views.traffic import MINUTES, OTHER, RECENT_ERRORS
from interlingua.upstreams.fake import FakeUpstream
from interlingua.usage.record import Record

#: a fixed "now": 10:30:20 into some minute M (M = NOW // 60)
NOW = 1_800_000_620.0
M = int(NOW // 60)
FIRST = M - MINUTES + 1

CONFIG = {
    "upstreams": {"a": {"kind": "fake"}, "b": {"kind": "fake"}, "c": {"kind": "fake"}},
    "models": [
        {
            "name": "lb",
            "upstream": "a",
            "model": "big-a",
            "weight": 3,
            "fallbacks": ["solo"],
            "context_fallbacks": ["solo"],
            "on_stream_break": "continue",
        },
        {"name": "lb", "upstream": "b", "model": "big-b"},
        {"name": "solo", "upstream": "c"},
    ],
}


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def router(clock: Clock | None = None) -> Router:
    config = parse_config(CONFIG)
    upstreams = {name: FakeUpstream(name) for name in config.upstreams}
    return Router(config, upstreams, clock=clock or Clock(500.0))


def row(
    minute: int,
    model: str = "lb",
    *,
    key: str | None = "team-a",
    status: int = 200,
    error: str | None = None,
    upstream: str | None = "a",
    upstream_model: str = "big-a",
    tokens: tuple[int, int] = (10, 5),
    latency: float = 0.5,
    ttft: float | None = None,
    request_id: str = "req_1",
) -> Record:
    out = Record(
        at=minute * 60 + 7.0, request_id=request_id, key=key, dialect="openai", model=model
    )
    out.status, out.error, out.latency, out.ttft = status, error, latency, ttft
    out.input_tokens, out.output_tokens = tokens
    out.upstream = upstream
    out.upstream_model = upstream_model if upstream else None
    return out


def deployment(data: dict[str, Any], model: str, key: str) -> dict[str, Any]:
    [found] = [
        d for m in data["models"] if m["name"] == model for d in m["deployments"] if d["key"] == key
    ]
    return found


def test_data_after_known_requests() -> None:
    page = StatusPage(router(), clock=Clock(NOW))
    page.record(row(M, tokens=(100, 20), latency=1.0, ttft=0.25))
    page.record(row(M, tokens=(50, 10), latency=3.0))
    page.record(row(M - 1, key="team-b", tokens=(7, 3)))
    page.record(row(M - 30, "solo", key="team-b", upstream="c", upstream_model="solo"))
    page.record(
        row(
            M - 2,
            status=502,
            error="upstream_error",
            upstream="b",
            upstream_model="big-b",
            request_id="req_bad",
        )
    )
    page.record(row(M, "typo", status=404, error="not_found", upstream=None, request_id="req_404"))
    data = page.data()

    assert data["now"] == NOW and data["first_minute"] == FIRST and data["minutes"] == MINUTES
    assert data["workers"] == 1
    lb = data["traffic"]["model"]["lb"]
    assert all(len(column) == MINUTES for column in lb.values())
    assert lb["requests"][-1] == 2 and lb["requests"][-2] == 1 and lb["requests"][-3] == 1
    assert lb["errors"][-3] == 1 and sum(lb["errors"]) == 1
    assert lb["input_tokens"][-1] == 150 and lb["output_tokens"][-1] == 30
    assert lb["latency"][-1] == pytest.approx(2.0)  # the minute's average
    assert lb["ttft"][-1] == pytest.approx(0.25) and lb["ttft"][-2] is None
    assert sum(lb["requests"]) == 4
    assert data["traffic"]["model"]["solo"]["requests"][MINUTES - 1 - 30] == 1
    assert data["traffic"]["model"]["typo"]["errors"][-1] == 1  # every name asked for

    keys = data["traffic"]["key"]
    assert sum(keys["team-a"]["requests"]) == 4 and sum(keys["team-b"]["requests"]) == 2
    assert sum(keys["team-b"]["input_tokens"]) == 17

    totals = data["totals"]
    assert sum(totals["requests"]) == 6 and sum(totals["errors"]) == 2
    assert totals["requests"][-1] == 3 and totals["input_tokens"][-1] == 160

    assert [e["request_id"] for e in data["errors"]] == ["req_404", "req_bad"]  # newest first
    assert data["errors"][0] == {
        "at": M * 60 + 7.0,
        "request_id": "req_404",
        "key": "team-a",
        "model": "typo",
        "dialect": "openai",
        "stream": False,
        "status": 404,
        "error": "not_found",
        "upstream": None,
        "upstream_model": None,
    }

    assert [(m["name"], m["fallbacks"]) for m in data["models"]] == [("lb", ["solo"]), ("solo", [])]
    # what happens to a prompt too long for a model, and to its broken streams
    assert [(m["context_fallbacks"], m["continues"]) for m in data["models"]] == [
        (["solo"], True),
        ([], False),
    ]
    a = deployment(data, "lb", "a/big-a")
    assert (a["upstream"], a["upstream_model"], a["weight"]) == ("a", "big-a", 3.0)
    assert a["recent"] == {"minutes": 5, "requests": 3, "errors": 0, "latency": pytest.approx(1.5)}
    assert a["health"] == "ok" and a["cooling_for"] is None
    b = deployment(data, "lb", "b/big-b")
    assert b["recent"]["errors"] == 1 and b["health"] == "failing"
    solo = deployment(data, "solo", "c/solo")
    assert solo["health"] == "idle"  # its one request was 30 minutes ago
    assert solo["in_flight"] is None  # (the router does not count a lone deployment's)
    json.dumps(data)  # plain data all the way down


def test_router_state_cooldowns_in_flight_latency() -> None:
    clock = Clock(500.0)
    routes = router(clock)
    page = StatusPage(routes, clock=Clock(NOW))
    [a, b] = routes.configured()["lb"]
    routes.attempt_started(a)
    routes.attempt_started(a)
    routes.attempt_started(b)
    routes.attempt_ended(b)
    routes.attempt_succeeded(a, 0.8)
    routes.attempt_succeeded(a, 0.4)  # moving average: 0.8 + 0.3 * (0.4 - 0.8)
    for _ in range(3):  # the cooldown's failures (3 within the window): cooling 30 s
        routes.attempt_failed(b)
    clock.now += 12.5
    data = page.data()
    shown_a = deployment(data, "lb", "a/big-a")
    shown_b = deployment(data, "lb", "b/big-b")
    assert shown_a["in_flight"] == 2 and shown_b["in_flight"] == 0
    assert shown_a["latency"] == pytest.approx(0.68) and shown_b["latency"] is None
    assert shown_a["cooling_for"] is None and shown_a["health"] == "idle"
    assert shown_b["cooling_for"] == pytest.approx(17.5) and shown_b["health"] == "cooling"
    clock.now += 20
    assert deployment(page.data(), "lb", "b/big-b")["health"] == "idle"


def test_health_degraded_below_half_failed() -> None:
    page = StatusPage(router(), clock=Clock(NOW))
    for i in range(3):
        page.record(row(M - i))
    page.record(row(M, status=429, error="rate_limit"))
    page.record(row(M, status=400, error="invalid_request"))  # the client's mistake
    shown = deployment(page.data(), "lb", "a/big-a")
    assert shown["recent"]["requests"] == 5 and shown["recent"]["errors"] == 1
    assert shown["health"] == "degraded"


def test_the_hour_window_and_the_ring() -> None:
    clock = Clock(NOW)
    page = StatusPage(router(), clock=clock)
    page.record(row(M - MINUTES))  # an hour and more ago: outside the window
    page.record(row(M - MINUTES + 1))  # the window's first minute
    lb = page.data()["traffic"]["model"]["lb"]
    assert lb["requests"][0] == 1 and sum(lb["requests"]) == 1
    # An hour later, minute M + 60 takes the slot minute M - 60 held: counted from zero.
    clock.now += 60 * MINUTES
    page.record(row(M + MINUTES))
    assert page.data()["traffic"]["model"]["lb"]["requests"][-1] == 1
    # A row older than its slot's minute (a request that lasted over an hour) is dropped,
    # not counted over the newer minute.
    page.record(row(M))
    lb = page.data()["traffic"]["model"]["lb"]
    assert lb["requests"][-1] == 1 and sum(lb["requests"]) == 1


def test_recent_errors_are_bounded() -> None:
    page = StatusPage(router(), clock=Clock(NOW))
    for i in range(RECENT_ERRORS + 10):
        page.record(row(M, status=500, error="upstream_error", request_id=f"req_{i}"))
    errors = page.data()["errors"]
    assert len(errors) == RECENT_ERRORS
    assert errors[0]["request_id"] == f"req_{RECENT_ERRORS + 9}"
    assert errors[-1]["request_id"] == "req_10"


def test_names_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(traffic_module, "MAX_SERIES", 2)
    page = StatusPage(router(), clock=Clock(NOW))
    for name in ("x1", "x2", "x3", "x4", "x1"):
        page.record(row(M, name))
    named = page.data()["traffic"]["model"]
    assert {name: sum(s["requests"]) for name, s in named.items()} == {"x1": 2, "x2": 1, OTHER: 2}


def test_a_broken_record_is_swallowed(caplog: pytest.LogCaptureFixture) -> None:
    page = StatusPage(router(), clock=Clock(NOW))
    bad = row(M)
    bad.at = "yesterday"  # type: ignore[assignment]
    page.record(bad)
    page.record(bad)
    assert caplog.text.count("could not be counted") == 1
    page.record(row(M))
    assert sum(page.data()["totals"]["requests"]) == 1


# -- several workers --------------------------------------------------------------------


def test_workers_add_up(tmp_path: Path) -> None:
    """Another live worker's counts and router state join this one's; a gone worker's
    traffic stays in the charts but its in-flight and cooldowns do not."""
    clock = Clock(NOW)
    routes = router()
    here = StatusPage(routes, share_dir=str(tmp_path), clock=clock)
    here.record(row(M, tokens=(1, 1)))

    other_routes = router()
    [a, _] = other_routes.configured()["lb"]
    other_routes.attempt_started(a)
    for _ in range(3):
        other_routes.attempt_failed(a)
    other = StatusPage(other_routes, clock=clock)  # (not sharing: its state is written below)
    other.record(
        row(
            M, key="team-b", tokens=(10, 10), request_id="req_other", status=503, error="overloaded"
        )
    )
    gone = StatusPage(other_routes, clock=clock)
    gone.record(row(M - 1, tokens=(100, 100)))

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        for page, pid, written in ((other, sleeper.pid, NOW - 2.0), (gone, dead.pid, NOW - 300)):
            state = page._state(written)
            state["pid"] = pid
            (tmp_path / "status" / f"{pid}.json").write_text(json.dumps(state))
        (tmp_path / "status" / "999999999.json").write_text("{not json")  # half-written: skipped
        data = here.data()
    finally:
        sleeper.kill()
        sleeper.wait()
    assert data["workers"] == 2
    lb = data["traffic"]["model"]["lb"]
    assert lb["requests"][-1] == 2 and lb["requests"][-2] == 1
    assert lb["input_tokens"][-1] == 11 and lb["input_tokens"][-2] == 100
    assert sum(data["traffic"]["key"]["team-b"]["requests"]) == 1
    assert [e["request_id"] for e in data["errors"]] == ["req_other"]
    shown = deployment(data, "lb", "a/big-a")
    assert shown["in_flight"] == 1  # the live other's; the gone one's is left out
    assert shown["health"] == "cooling"
    assert shown["cooling_for"] == pytest.approx(30.0 - 2.0)  # as of its write, 2 s ago


def test_own_state_is_shared_from_the_start(tmp_path: Path) -> None:
    page = StatusPage(router(), share_dir=str(tmp_path), clock=Clock(NOW))
    [written] = (tmp_path / "status").glob("*.json")
    state = json.loads(written.read_text())
    assert set(state["deployments"]) == {"a/big-a", "b/big-b", "c/solo"}
    page.record(row(M))
    page.share()
    state = json.loads(written.read_text())
    assert state["traffic"]["series"]["model"]["lb"][str(M)][0] == 1


# -- the endpoints ----------------------------------------------------------------------


async def test_page_and_data_endpoints_with_keys() -> None:
    app = create_app(fake_config(ServerConfig(api_keys=("sk-status",))))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://gw"
    ) as client:
        for path in ("/ui", "/ui/"):
            page = await client.get(path)  # the page holds no data: no key needed
            assert page.status_code == 200
            assert page.headers["content-type"] == "text/html; charset=utf-8"
            csp = page.headers["content-security-policy"]
            assert "default-src 'none'" in csp and "connect-src 'self'" in csp
            assert "<svg" not in page.text and "http://" not in page.text.replace(
                "http://www.w3.org/2000/svg", ""
            )  # nothing loaded from elsewhere
        refused = await client.get("/ui/data")
        assert refused.status_code == 401
        assert refused.json()["error"]["type"] == "authentication"
        wrong = await client.get("/ui/data", headers={"authorization": "Bearer nope"})
        assert wrong.status_code == 401
        data = await client.get("/ui/data", headers={"authorization": "Bearer sk-status"})
        assert data.status_code == 200 and data.headers["cache-control"] == "no-store"
        assert [m["name"] for m in data.json()["models"]] == ["fake", "default"]


async def test_authorize_is_called_with_the_headers() -> None:
    seen = []

    def authorize(headers: Any) -> None:
        seen.append(headers.get("x-api-key"))
        if headers.get("x-api-key") != "k":
            raise AuthenticationError("no", status=401)

    page = StatusPage(router(), authorize, clock=Clock(NOW))
    app = Starlette(routes=page.routes())
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://gw"
    ) as client:
        assert (await client.get("/ui/data")).status_code == 401
        assert (await client.get("/ui/data", headers={"x-api-key": "k"})).status_code == 200
    assert seen == [None, "k"]


async def test_a_named_key_sees_its_own_traffic_and_failures_only() -> None:
    keys = {"ops": "sk-ops-status", "team-a": "sk-a-status", "team-b": "sk-b-status"}
    config = parse_config(
        {
            **CONFIG,
            "server": {"api_keys": [keys["ops"]]},
            "keys": [
                {"name": "team-a", "key_sha256": sha256(keys["team-a"]), "models": ["lb"]},
                {"name": "team-b", "key_sha256": sha256(keys["team-b"])},
            ],
            "usage": False,
        }
    )
    app = create_app(config)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://gw"
    ) as client:

        async def ask(who: str, model: str, content: str = "hi") -> int:
            answer = await client.post(
                "/v1/chat/completions",
                headers={"authorization": f"Bearer {keys[who]}"},
                json={"model": model, "messages": [{"role": "user", "content": content}]},
            )
            return answer.status_code

        assert await ask("team-a", "lb") == 200
        assert await ask("team-b", "lb") == 200
        assert await ask("team-b", "solo") == 200
        assert await ask("team-b", "nope") == 404  # a failure of team-b's

        async def seen(who: str) -> dict[str, Any]:
            got = await client.get("/ui/data", headers={"x-api-key": keys[who]})
            assert got.status_code == 200
            data: dict[str, Any] = got.json()
            return data

        a, b, ops = await seen("team-a"), await seen("team-b"), await seen("ops")
    assert set(a["traffic"]["key"]) == {"team-a"}
    assert [m["name"] for m in a["models"]] == ["lb"]  # its models: lb only
    assert set(a["traffic"]["model"]) == {"lb"}
    assert sum(a["traffic"]["model"]["lb"]["requests"]) == 2  # (all keys' traffic on lb)
    assert a["errors"] == []
    assert "team-b" not in json.dumps(a)
    assert set(b["traffic"]["key"]) == {"team-b"}
    assert [m["name"] for m in b["models"]] == ["lb", "solo"]
    assert [e["key"] for e in b["errors"]] == ["team-b"]
    assert set(ops["traffic"]["key"]) == {"team-a", "team-b"}  # a key with no name: all
    assert len(ops["errors"]) == 1


def sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()
