"""A reload's swap in one process (server/reload.py): what carries over, what is closed when.

An unchanged upstream, key and the cooldown book are the same objects after a reload (their
counts carry over); an upstream that left is closed only once the last request that began
on the old bundle has ended; a SIGHUP-less app (no source) refuses to reload.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from interlingua.config import load_config
from interlingua.server.app import create_app
from interlingua.server.reload import ConfigSource, Live

ADMIN = {"authorization": "Bearer admin-secret"}


def _config(upstreams: tuple[str, ...], key_rpm: int = 5) -> dict[str, Any]:
    return {
        "upstreams": {name: {"kind": "fake"} for name in upstreams},
        "models": [{"name": name, "upstream": name} for name in upstreams],
        "keys": [{"name": "k1", "key_env": "RELOAD_K1", "limits": {"rpm": key_rpm}}],
        "usage": False,
        "admin": {"key_env": "RELOAD_ADMIN"},
    }


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELOAD_K1", "key-one")
    monkeypatch.setenv("RELOAD_ADMIN", "admin-secret")


def _app(path: Path, source: bool = True) -> Any:
    return create_app(load_config(path), source=ConfigSource(str(path)) if source else None)


async def _post(app: Any, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        return await client.post(path, headers=ADMIN)


async def test_unchanged_entries_are_the_same_objects_and_a_left_upstream_waits(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(_config(("a", "b"))))
    app = _app(path)
    old: Live = app.holder.live
    closed: list[str] = []
    gone = old.upstreams["b"]

    async def aclose() -> None:
        closed.append(gone.name)

    gone.aclose = aclose  # type: ignore[method-assign]
    old.users += 1  # a request in flight on the old bundle
    path.write_text(yaml.safe_dump(_config(("a", "c"))))
    answer = await _post(app, "/admin/reload")
    assert answer.status_code == 200, answer.text
    assert answer.json()["changes"] == [
        "upstreams added: c",
        "upstreams removed: b",
        "models added: c",
        "models removed: b",
    ]
    new: Live = app.holder.live
    assert new is not old
    assert new.upstreams["a"] is old.upstreams["a"]  # (its pool and limits)
    assert new.keys.keys[0] is old.keys.keys[0]  # (its rpm window)
    assert new.gateway.router.cooldowns is old.gateway.router.cooldowns
    await asyncio.sleep(0)
    assert closed == []  # the old bundle still has a user
    old.left()
    await asyncio.sleep(0.01)
    assert closed == ["b"]


async def test_a_changed_key_is_new_the_cooldown_rules_apply_and_no_source_refuses(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(_config(("a",))))
    app = _app(path)
    old: Live = app.holder.live
    changed = _config(("a",), key_rpm=9)
    changed["routing"] = {"cooldown": {"failures": 1, "window": 5, "duration": 7}}
    path.write_text(yaml.safe_dump(changed))
    answer = await _post(app, "/admin/reload")
    assert answer.json()["changes"] == ["keys changed: k1", "routing changed"]
    assert app.holder.live.keys.keys[0] is not old.keys.keys[0]
    cooldowns = app.holder.live.gateway.router.cooldowns
    assert cooldowns is old.gateway.router.cooldowns
    assert cooldowns.config.duration == 7  # (the new rules, on the deployments it holds)
    refused = await _post(_app(path, source=False), "/admin/reload")
    assert refused.status_code == 400
    assert "no config file to re-read" in refused.json()["error"]["message"]


async def test_the_lifespan_is_no_user_of_the_first_config(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(_config(("a",))))
    app = _app(path, source=False)
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await inbox.put({"type": "lifespan.startup"})
    task = asyncio.create_task(app({"type": "lifespan", "state": {}}, inbox.get, outbox.put))
    assert (await outbox.get())["type"] == "lifespan.startup.complete"
    assert app.holder.live.users == 0  # (else no reload could retire it)
    await inbox.put({"type": "lifespan.shutdown"})
    assert (await outbox.get())["type"] == "lifespan.shutdown.complete"
    await task


async def test_a_reload_gauges_the_waiting_lines_of_the_upstreams_it_serves(
    tmp_path: Path,
) -> None:
    """The queue-depth gauge follows the upstreams a reload serves: an added upstream's
    line is scraped, a removed one's is gone."""
    limited = _config(("a", "b"))
    for upstream in limited["upstreams"].values():
        upstream["limits"] = {"max_concurrency": 2}
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(limited))
    app = _app(path)
    added = _config(("a", "c"))
    for upstream in added["upstreams"].values():
        upstream["limits"] = {"max_concurrency": 2}
    path.write_text(yaml.safe_dump(added))
    assert (await _post(app, "/admin/reload")).status_code == 200
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        scraped = (await client.get("/metrics")).text
    assert 'interlingua_upstream_queue_depth{upstream="a"} 0.0' in scraped
    assert 'interlingua_upstream_queue_depth{upstream="c"} 0.0' in scraped
    assert 'upstream="b"' not in scraped.split("interlingua_upstream_queue_depth", 1)[1]
