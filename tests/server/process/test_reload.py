"""Live config on a real ``interlingua serve`` (server/reload.py).

SIGHUP to the supervisor of ``--workers 2`` reloads every worker: a model and a key added
while a stream is in flight serve afterwards, and the stream completes on the config it
began with. An invalid file is refused (the reason logged, and returned 400 by ``POST
/admin/reload``) and the old config serves on. A key at its rpm stays refused after a
reload that changed something else (its counts carried over). ``/admin/reload`` needs the
admin key: none is a 401, another a 403; without an ``admin`` section it is a 404.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml
from aiohttp import web

from interlingua.config import parse_config
from interlingua.server.app import create_app

from ..gateway_process import Gateway, serve
from ..mock_upstream import MockOpenAI, mock_openai, ok, stream_events

ADMIN = "admin-secret"
KEYS = {"GW_TEST_ADMIN": ADMIN, "GW_TEST_K1": "key-one", "GW_TEST_K2": "key-two"}


async def _slow(mock: MockOpenAI, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
    """A stream of about 1.5 s (a non-stream request: answered at once)."""
    if not body.get("stream"):
        return await ok(mock, request, body)
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    for event in stream_events(str(body.get("model"))):
        await resp.write(event)
        await asyncio.sleep(0.1)
    await resp.write_eof()
    return resp


@pytest.fixture
def mock() -> Iterator[MockOpenAI]:
    with mock_openai(default=_slow) as upstream:
        yield upstream


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in KEYS.items():  # (the gateway process inherits them)
        monkeypatch.setenv(name, value)


def _config(base_url: str, *, models: tuple[str, ...] = ("a",), more_keys: bool = False) -> Any:
    keys: list[dict[str, Any]] = [
        {"name": "k1", "key_env": "GW_TEST_K1", "limits": {"rpm": 2}},
    ]
    if more_keys:
        keys.append({"name": "k2", "key_env": "GW_TEST_K2"})
    return {
        "upstreams": {"mock": {"kind": "openai", "base_url": base_url}},
        "models": [{"name": name, "upstream": "mock", "model": "m"} for name in models],
        "keys": keys,
        "usage": False,
        "admin": {"key_env": "GW_TEST_ADMIN"},
    }


def _rewrite(tmp_path: Path, gw: Gateway, config: Any) -> None:
    (tmp_path / f"gateway-{gw.port}.yaml").write_text(yaml.safe_dump(config))


def _chat(gw: Gateway, key: str, model: str) -> httpx.Response:
    """One request on a connection of its own (so the workers share them out)."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"authorization": f"Bearer {key}"}
    return httpx.post(gw.url + "/v1/chat/completions", json=body, headers=headers, timeout=10)


def _reload(gw: Gateway, key: str | None = ADMIN) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    return httpx.post(gw.url + "/admin/reload", headers=headers, timeout=10)


def _wait_for(gw: Gateway, text: str, count: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while gw.stderr().count(text) < count:
        assert time.monotonic() < deadline, f"{count}x {text!r} not logged:\n{gw.stderr()}"
        time.sleep(0.05)


def test_sighup_reloads_every_worker_while_a_stream_is_in_flight(
    tmp_path: Path, mock: MockOpenAI
) -> None:
    with serve(tmp_path, _config(mock.base_url), workers=2) as gw:
        assert _chat(gw, "key-two", "a").status_code == 401  # (not a key yet)
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="key-one", max_retries=0)
        first = threading.Event()
        got: dict[str, Any] = {"text": "", "finish": None}

        def consume() -> None:
            with client:
                stream = client.chat.completions.create(
                    model="a", messages=[{"role": "user", "content": "hi"}], stream=True
                )
                for chunk in stream:
                    first.set()
                    if chunk.choices:
                        got["text"] += chunk.choices[0].delta.content or ""
                        got["finish"] = chunk.choices[0].finish_reason or got["finish"]

        thread = threading.Thread(target=consume, daemon=True)
        thread.start()
        assert first.wait(10)
        _rewrite(tmp_path, gw, _config(mock.base_url, models=("a", "b"), more_keys=True))
        gw.proc.send_signal(signal.SIGHUP)
        _wait_for(gw, "config reloaded: models added: b; keys added: k2", 2)  # each worker
        assert thread.is_alive()  # (the reload did not wait for the stream)
        thread.join(15)
        assert not thread.is_alive()
        assert got == {"text": "Let me check the weather.", "finish": "tool_calls"}
        for _ in range(8):  # new connections: both workers answer them
            assert _chat(gw, "key-two", "b").status_code == 200
        assert gw.proc.poll() is None


def test_an_invalid_file_is_refused_and_the_old_config_serves_on(
    tmp_path: Path, mock: MockOpenAI
) -> None:
    with serve(tmp_path, _config(mock.base_url)) as gw:
        broken = _config(mock.base_url)
        broken["models"].append({"name": "c", "upstream": "nowhere"})
        _rewrite(tmp_path, gw, broken)
        answer = _reload(gw)
        assert answer.status_code == 400
        error = answer.json()["error"]
        assert error["code"] == "config_invalid"
        assert "unknown upstream 'nowhere'" in error["message"]
        gw.proc.send_signal(signal.SIGHUP)
        _wait_for(gw, "config reload refused", 2)
        assert "unknown upstream 'nowhere'" in gw.stderr()
        assert _chat(gw, "key-one", "a").status_code == 200


def test_counts_carry_over_and_the_admin_key_is_needed(tmp_path: Path, mock: MockOpenAI) -> None:
    with serve(tmp_path, _config(mock.base_url)) as gw:
        assert _reload(gw, None).status_code == 401
        refused = _reload(gw, "key-one")
        assert refused.status_code == 403
        assert refused.json()["error"]["type"] == "permission_error"
        assert [_chat(gw, "key-one", "a").status_code for _ in range(3)] == [200, 200, 429]
        changed = _config(mock.base_url, models=("a", "b"))
        changed["server"] = {"max_body_mb": 1}  # restart-only: named, kept as it was
        _rewrite(tmp_path, gw, changed)
        answer = _reload(gw)
        assert answer.status_code == 200, answer.text
        assert answer.json()["changes"] == ["models added: b"]
        assert answer.json()["warnings"] == [
            "server.max_body_mb changed: it takes a restart (kept as it was)"
        ]
        assert _chat(gw, "key-one", "b").status_code == 429  # k1 is still at its rpm


async def test_no_admin_section_no_admin_route() -> None:
    app = create_app(
        parse_config(
            {"upstreams": {"f": {"kind": "fake"}}, "models": [{"name": "*", "upstream": "f"}]}
        )
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        answer = await client.post("/admin/reload", headers={"authorization": "Bearer x"})
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "unknown_url"
