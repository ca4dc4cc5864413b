"""``/admin/keys`` on a served gateway (server/admin_keys.py): create, list, show, rotate,
revoke; the admin key only; config keys and database keys side by side; expiry; a
reload keeps the database's keys (the same objects: their counts carry over)."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from interlingua.config import load_config
from interlingua.server.app import create_app
from interlingua.server.reload import ConfigSource, Reloader

from ..live_server import live_server

ADMIN = {"authorization": "Bearer admin-secret"}
TEAM_A = {"authorization": "Bearer team-a-secret"}
HELLO: Any = [{"role": "user", "content": "hi"}]


def _config(tmp_path: Path, keys: bool = True, admin: bool = True) -> dict[str, Any]:
    config: dict[str, Any] = {
        "upstreams": {"echo": {"kind": "fake"}},
        "models": [
            {"name": "m", "upstream": "echo"},
            {"name": "other", "upstream": "echo"},
            # (the fake answers 7 tokens: $0.007 a request)
            {"name": "priced", "upstream": "echo", "price": {"input": 1000, "output": 1000}},
        ],
        "usage": {"url": f"sqlite://{tmp_path}/usage.db"},
        "metrics": False,
    }
    if keys:
        config["keys"] = [{"name": "team-a", "key_env": "ADMIN_KEYS_TEAM_A"}]
    if admin:
        config["admin"] = {"key_env": "ADMIN_KEYS_ADMIN"}
    return config


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADMIN_KEYS_TEAM_A", "team-a-secret")
    monkeypatch.setenv("ADMIN_KEYS_ADMIN", "admin-secret")


@pytest.fixture
def gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Any]]:
    path = _write(tmp_path, _config(tmp_path))
    # (SIGHUP is listened for in a main thread; this server runs in another: the admin
    # route reloads alone)
    monkeypatch.setattr(Reloader, "listen", lambda self: lambda: None)
    app = create_app(load_config(path), source=ConfigSource(str(path)))
    with live_server(app) as url:
        yield url, app


def _chat(url: str, secret: str, model: str = "m") -> httpx.Response:
    return httpx.post(
        url + "/v1/chat/completions",
        headers={"authorization": f"Bearer {secret}"},
        json={"model": model, "messages": HELLO},
        timeout=10,
    )


def _create(url: str, **body: Any) -> httpx.Response:
    return httpx.post(url + "/admin/keys", headers=ADMIN, json=body, timeout=10)


def test_create_list_show_rotate_revoke(gateway: tuple[str, Any], tmp_path: Path) -> None:
    url, _ = gateway
    made = _create(url, name="team-c", models=["m"], limits={"rpm": 50, "budget_per_month": 100})
    assert made.status_code == 201, made.text
    secret = made.json()["key"]
    assert secret.startswith("sk-il-")
    assert made.json()["limits"] == {"rpm": 50, "budget_per_month": "100"}
    assert _chat(url, secret).status_code == 200  # (at once on the process that made it)
    assert _chat(url, secret, "other").status_code == 403  # (its models)
    assert _chat(url, "team-a-secret").status_code == 200  # (the config's, beside it)

    listed = httpx.get(url + "/admin/keys", headers=ADMIN, timeout=10)
    assert listed.status_code == 200
    by_name = {key["name"]: key for key in listed.json()["data"]}
    assert by_name["team-a"]["source"] == "config"
    assert by_name["team-c"]["source"] == "database"
    assert by_name["team-c"]["status"] == "active" and by_name["team-c"]["created_at"]
    assert {"spend_today_usd", "spend_month_usd"} <= set(by_name["team-c"])
    digest = hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in listed.text and digest not in listed.text
    shown = httpx.get(url + "/admin/keys/team-c", headers=ADMIN, timeout=10)
    assert shown.json()["models"] == ["m"] and "key" not in shown.json()
    # only the digest is in the database
    with sqlite3.connect(tmp_path / "usage.db") as conn:
        assert conn.execute("SELECT sha256 FROM interlingua_keys").fetchall() == [(digest,)]

    rotated = httpx.post(url + "/admin/keys/team-c/rotate", headers=ADMIN, timeout=10)
    assert rotated.status_code == 200
    new = rotated.json()["key"]
    assert new != secret
    assert _chat(url, secret).status_code == 401
    assert _chat(url, new).status_code == 200

    revoked = httpx.delete(url + "/admin/keys/team-c", headers=ADMIN, timeout=10)
    assert revoked.status_code == 200 and revoked.json()["status"] == "revoked"
    refused = _chat(url, new)
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]
    again = _create(url, name="team-c")
    assert again.status_code == 409 and again.json()["error"]["code"] == "key_exists"
    gone = httpx.post(url + "/admin/keys/team-c/rotate", headers=ADMIN, timeout=10)
    assert gone.status_code == 409
    missing = httpx.get(url + "/admin/keys/nobody", headers=ADMIN, timeout=10)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "key_not_found"


def test_only_the_admin_key_and_config_keys_stay_the_config_s(gateway: tuple[str, Any]) -> None:
    url, _ = gateway
    assert httpx.get(url + "/admin/keys", timeout=10).status_code == 401
    for call in (
        httpx.get(url + "/admin/keys", headers=TEAM_A, timeout=10),
        httpx.post(url + "/admin/keys", headers=TEAM_A, json={"name": "x"}, timeout=10),
        httpx.delete(url + "/admin/keys/team-a", headers=TEAM_A, timeout=10),
    ):
        assert call.status_code == 403 and call.json()["error"]["code"] == "not_admin"
    taken = _create(url, name="team-a")
    assert taken.status_code == 409 and "config file" in taken.json()["error"]["message"]
    delete = httpx.delete(url + "/admin/keys/team-a", headers=ADMIN, timeout=10)
    assert delete.status_code == 409 and "reload" in delete.json()["error"]["message"]
    for bad, what in (
        ({"name": "x", "limits": {"rpm": 0}}, "rpm"),
        ({"name": "x", "limits": {"budget_per_day": "ten"}}, "budget_per_day"),
        ({"name": "x y"}, "name"),
        ({"name": "x", "colour": "red"}, "colour"),
        ({"name": "x", "expires_at": "2001-01-01"}, "has passed"),
    ):
        answer = _create(url, **bad)
        assert answer.status_code == 400, bad
        assert what in answer.json()["error"]["message"]


def test_a_key_past_its_expiry_is_refused_naming_it(gateway: tuple[str, Any]) -> None:
    url, _ = gateway
    made = _create(url, name="brief", expires_at=time.time() + 1.0)
    secret = made.json()["key"]
    assert _chat(url, secret).status_code == 200
    time.sleep(1.1)
    refused = _chat(url, secret)
    assert refused.status_code == 401 and "expired at" in refused.json()["error"]["message"]
    assert httpx.get(url + "/admin/keys/brief", headers=ADMIN).json()["status"] == "expired"


def test_a_reload_keeps_database_keys_the_same_objects(gateway: tuple[str, Any]) -> None:
    url, app = gateway
    secret = _create(url, name="kept", limits={"rpm": 2}).json()["key"]
    assert [_chat(url, secret).status_code for _ in range(2)] == [200, 200]
    before = {key.name: key for key in app.holder.live.keys.keys}["kept"]
    reloaded = httpx.post(url + "/admin/reload", headers=ADMIN, timeout=10)
    assert reloaded.status_code == 200, reloaded.text
    after = {key.name: key for key in app.holder.live.keys.keys}["kept"]
    assert after is before
    assert _chat(url, secret).status_code == 429  # (its minute's count carried over)
    rotated = httpx.post(url + "/admin/keys/kept/rotate", headers=ADMIN, timeout=10)
    assert _chat(url, rotated.json()["key"]).status_code == 429  # (and over a rotation)
    assert _chat(url, secret).status_code == 401


def test_a_database_key_s_budget_is_enforced_and_its_spend_listed(
    gateway: tuple[str, Any],
) -> None:
    url, _ = gateway
    made = _create(url, name="frugal", limits={"budget_per_day": "0.01"})
    secret = made.json()["key"]
    seen = [_chat(url, secret, "priced") for _ in range(3)]
    assert [answer.status_code for answer in seen] == [200, 200, 429]
    assert seen[2].json()["error"]["code"] == "budget_exceeded"
    deadline = time.monotonic() + 10
    while True:  # (the usage log is written once a second)
        shown = httpx.get(url + "/admin/keys/frugal", headers=ADMIN, timeout=10).json()
        if shown["spend_today_usd"] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert shown["spend_today_usd"] == shown["spend_month_usd"] == 0.014


def test_with_only_database_keys_the_gateway_still_needs_one(tmp_path: Path) -> None:
    app = create_app(load_config(_write(tmp_path, _config(tmp_path, keys=False))))
    with live_server(app) as url:
        assert _chat(url, "any").status_code == 401  # (no key at all yet: closed)
        bare = httpx.post(url + "/v1/chat/completions", json={"model": "m", "messages": HELLO})
        assert bare.status_code == 401
        secret = _create(url, name="only").json()["key"]
        assert _chat(url, secret).status_code == 200
        httpx.delete(url + "/admin/keys/only", headers=ADMIN, timeout=10)
        assert _chat(url, secret).status_code == 401  # (the last one revoked: still closed)


def test_no_admin_section_no_admin_keys_route(tmp_path: Path) -> None:
    app = create_app(load_config(_write(tmp_path, _config(tmp_path, admin=False))))
    with live_server(app) as url:
        answer = httpx.get(url + "/admin/keys", headers=ADMIN, timeout=10)
        assert answer.status_code == 404 and "GET /admin/keys" in answer.text
        assert _chat(url, "team-a-secret").status_code == 200


def _write(tmp_path: Path, config: dict[str, Any]) -> Path:
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config))
    return path
