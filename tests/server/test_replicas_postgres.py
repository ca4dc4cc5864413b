"""Two ``interlingua serve`` processes writing one usage log in a real PostgreSQL.

    httpx -> gateway A (serve, usage.url) --+
                                           +--> PostgreSQL (a throwaway cluster)
    httpx -> gateway B (serve, usage.url) --+        ^
                                                     +-- interlingua usage --json

Every request either replica answered is one row, under its key, with the tokens the
client was told; the rows reach the database while the replicas run (the writer flushes
every second), and ``interlingua usage`` reads them back, summed across both.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from ..usage.postgres import postgres_url
from .gateway_process import Gateway, env, serve

pytest.importorskip("asyncpg")

KEYS = {"team-a": "sk-pg-team-a", "team-b": "sk-pg-team-b"}


def env_name(key_name: str) -> str:
    return "PG_" + key_name.upper().replace("-", "_")


def config(url: str) -> dict[str, Any]:
    return {
        "upstreams": {"echo": {"kind": "fake"}},
        "models": [{"name": "m", "upstream": "echo"}],
        "keys": [{"name": name, "key_env": env_name(name)} for name in KEYS],
        "usage": {"url": url},
    }


def ask(gateway: Gateway, key: str, i: int) -> tuple[int, int]:
    """One Chat or Messages request (every other one); the (input, output) tokens the
    client was told."""
    if i % 2:
        answer = httpx.post(
            gateway.url + "/v1/messages",
            headers={"x-api-key": key, "anthropic-version": "2023-06-01"},
            json={
                "model": "m",
                "max_tokens": 16,
                "messages": [{"role": "user", "content": f"q{i}"}],
            },
            timeout=10,
        )
        assert answer.status_code == 200, answer.text
        usage = answer.json()["usage"]
        return usage["input_tokens"], usage["output_tokens"]
    answer = httpx.post(
        gateway.url + "/v1/chat/completions",
        headers={"authorization": f"Bearer {key}"},
        json={"model": "m", "messages": [{"role": "user", "content": f"question {i}"}]},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text
    usage = answer.json()["usage"]
    return usage["prompt_tokens"], usage["completion_tokens"]


def usage_json(path: Path) -> list[dict[str, Any]]:
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "interlingua.cli",
            "usage",
            "-c",
            str(path),
            "--by",
            "key",
            "--json",
        ],
        capture_output=True,
        text=True,
        env=env(),
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    return sorted(json.loads(run.stdout), key=lambda row: row["key"])


def test_two_replicas_write_one_usage_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, key in KEYS.items():
        monkeypatch.setenv(env_name(name), key)
    with postgres_url() as url:
        cfg = config(url)
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(cfg))
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        with serve(tmp_path / "a", cfg) as a, serve(tmp_path / "b", cfg) as b:
            expected: dict[str, list[int]] = {name: [0, 0, 0] for name in KEYS}
            for i in range(24):
                name = "team-a" if i % 3 else "team-b"
                tokens = ask((a, b)[i % 2], KEYS[name], i)
                totals = expected[name]
                totals[0] += 1
                totals[1] += tokens[0]
                totals[2] += tokens[1]
            want = [
                {"key": name, "requests": n, "errors": 0, "input_tokens": i, "output_tokens": o}
                for name, (n, i, o) in sorted(expected.items())
            ]
            # Written while both run: the writers flush at least every second.
            deadline = time.monotonic() + 10
            while True:
                got = [{k: row[k] for k in want[0]} for row in usage_json(path)]
                if got == want or time.monotonic() > deadline:
                    break
                time.sleep(0.3)
            assert got == want
            logs = a.stderr() + b.stderr()
        assert not any(key in logs for key in KEYS.values())
