"""Keys managed live across real processes: ``interlingua keys`` and ``/admin/keys`` change
the keys of the usage log's database, and every gateway process sharing it honours the
change within a second.

    interlingua keys (CLI) --writes--> SQLite file <--polls-- gateway A, gateway B (2 workers)

    POST /admin/keys -> gateway A --writes--> SQLite file
                                  --announces--> redis-server --pub/sub--> gateway B

With Redis the poll is only a 5 s safety net, so a change seen within 1 s there came by
the announcement.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import yaml

from ..redis_server import redis_server
from .gateway_process import Gateway, env, serve

ADMIN = "admin-live-secret"
HELLO: Any = [{"role": "user", "content": "hi"}]


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYS_LIVE_ADMIN", ADMIN)


def _config(tmp_path: Path, state_url: str | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "upstreams": {"echo": {"kind": "fake"}},
        "models": [{"name": "m", "upstream": "echo"}],
        "usage": {"url": f"sqlite://{tmp_path}/usage.db"},
        "admin": {"key_env": "KEYS_LIVE_ADMIN"},
        "metrics": False,
    }
    if state_url:
        config["state"] = {"url": state_url}
    return config


def _cli(path: Path, *args: str) -> str:
    """``interlingua keys ARGS -c path``: its stdout (it must succeed)."""
    done = subprocess.run(
        [sys.executable, "-m", "interlingua.cli", "keys", *args, "-c", str(path)],
        capture_output=True,
        text=True,
        env=env(),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _status(gateway: Gateway, secret: str) -> int:
    return httpx.post(
        gateway.url + "/v1/chat/completions",
        headers={"authorization": f"Bearer {secret}"},
        json={"model": "m", "messages": HELLO},
        timeout=10,
    ).status_code


def _within(seconds: float, gateways: list[Gateway], secret: str, status: int) -> float:
    """Seconds until every gateway answers ``secret`` with ``status`` five times in a row
    (so that every worker behind a port has it: the kernel spreads the connections over
    them), failing past ``seconds``."""
    started = time.monotonic()
    while not all(all(_status(g, secret) == status for _ in range(5)) for g in gateways):
        assert time.monotonic() - started < seconds, f"not {status} within {seconds} s"
        time.sleep(0.02)
    return time.monotonic() - started


def test_the_cli_s_changes_reach_a_second_process_and_its_workers_within_a_second(
    tmp_path: Path,
) -> None:
    config = _config(tmp_path)
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config))
    with serve(tmp_path, config) as a, serve(tmp_path, config, workers=2) as b:
        secret = _cli(path, "create", "--name", "team-c", "--models", "m,claude-*", "--rpm", "100",
                      "--budget-per-month", "100").strip()  # fmt: skip
        assert secret.startswith("sk-il-") and "\n" not in secret  # (stdout: the secret alone)
        _within(1.0, [a, b], secret, 200)

        listed = orjson.loads(_cli(path, "list", "--json"))
        assert [(k["name"], k["source"], k["status"]) for k in listed] == [
            ("team-c", "database", "active")
        ]
        assert listed[0]["limits"] == {"rpm": 100, "budget_per_month": "100"}
        assert secret not in str(listed)

        new = _cli(path, "rotate", "team-c").strip()
        _within(1.0, [a, b], secret, 401)
        _within(1.0, [a, b], new, 200)

        _cli(path, "revoke", "team-c")
        _within(1.0, [a, b], new, 401)
        for gateway in (a, b):
            assert "database keys" not in gateway.stderr()  # (no failure logged)
            assert secret not in gateway.stderr() and new not in gateway.stderr()


def test_the_admin_api_s_changes_reach_another_replica_through_redis(tmp_path: Path) -> None:
    pytest.importorskip("redis")
    with redis_server() as redis:
        config = _config(tmp_path, redis.url)
        path = tmp_path / "gw.yaml"
        path.write_text(yaml.safe_dump(config))
        with serve(tmp_path, config) as a, serve(tmp_path, config) as b:
            time.sleep(0.5)  # (each subscribes as it starts; the first poll is then 5 s off)
            admin = {"authorization": f"Bearer {ADMIN}"}
            made = httpx.post(a.url + "/admin/keys", headers=admin, json={"name": "r"}, timeout=10)
            assert made.status_code == 201, made.text
            secret = made.json()["key"]
            _within(1.0, [b], secret, 200)

            client = httpx.post(a.url + "/admin/keys", headers={"authorization": f"Bearer {secret}"},
                                json={"name": "x"}, timeout=10)  # fmt: skip
            assert client.status_code == 403  # (a client key is not the admin key)

            gone = httpx.delete(b.url + "/admin/keys/r", headers=admin, timeout=10)
            assert gone.status_code == 200
            took = _within(1.0, [a], secret, 401)
            assert took < 1.0

            second = _cli(path, "create", "--name", "via-cli").strip()  # (the CLI announces)
            _within(1.0, [a, b], second, 200)
