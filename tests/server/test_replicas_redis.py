"""Two gateway processes sharing one key's limits through a real redis-server.

    httpx -> gateway A (serve, state.url) --+
                                           +--> redis-server (started here)
    httpx -> gateway B (serve, state.url) --+

``rpm: 10`` admits 10 requests a minute across both, not 20. With Redis killed, both keep
serving (per-process limits, one warning each); once it is back, they share again.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from ..redis_server import redis_server
from .gateway_process import Gateway, serve

pytest.importorskip("redis")

KEY = "sk-replica-team-key"
HELLO: Any = [{"role": "user", "content": "hi"}]


def config(url: str) -> dict[str, Any]:
    return {
        "upstreams": {"echo": {"kind": "fake"}},
        "models": [{"name": "m", "upstream": "echo"}],
        "keys": [{"name": "team", "key_env": "REPLICA_KEY", "limits": {"rpm": 10}}],
        "state": {"url": url},
        "usage": False,
    }


def statuses(gateways: list[Gateway], n: int) -> list[int]:
    """``n`` requests, alternating between the gateways: their statuses."""
    out = []
    for i in range(n):
        answer = httpx.post(
            gateways[i % len(gateways)].url + "/v1/chat/completions",
            headers={"authorization": f"Bearer {KEY}"},
            json={"model": "m", "messages": HELLO},
            timeout=10,
        )
        out.append(answer.status_code)
    return out


def test_one_key_s_rpm_is_shared_by_two_replicas_and_survives_redis_going_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPLICA_KEY", KEY)
    with redis_server() as redis:
        cfg = config(redis.url)
        with serve(tmp_path / "a", cfg) as a, serve(tmp_path / "b", cfg) as b:
            seen = statuses([a, b], 24)
            assert seen.count(200) == 10 and seen.count(429) == 14, seen

            redis.kill()
            during = statuses([a, b], 8)  # per process now: a fresh window in each
            assert during == [200] * 8, during
            for gateway in (a, b):
                assert gateway.stderr().count("shared state unavailable") == 1

            redis.start()  # the same port; an empty Redis (its counts were lost)
            deadline = time.monotonic() + 15
            while not all("shared state is back" in g.stderr() for g in (a, b)):
                assert time.monotonic() < deadline, a.stderr() + b.stderr()
                time.sleep(0.1)  # (each finds it by itself: a probe every second)
            # shared again: an empty Redis counts anew, for both together
            after = statuses([a, b], 24)
            assert after.count(200) == 10 and after.count(429) == 14, after
            assert "sk-replica" not in a.stderr() + b.stderr()


@pytest.fixture(autouse=True)
def _dirs(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
