"""The usage log behind a running gateway (docs/usage-log.md): SDK traffic in, rows with the
upstream's exact token counts out, and ``interlingua usage --json`` summing them.

    openai / anthropic SDK -> live gateway (keys:, usage: sqlite) -> mock upstreams
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from interlingua.cli import main
from interlingua.config import load_config
from interlingua.server import create_app
from interlingua.usage import connect

from ..live_server import live_server
from .mock_upstream import mock_openai
from .test_shaping import anthropic_answer

HELLO: Any = [{"role": "user", "content": "hello"}]


def test_rows_and_the_usage_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("USAGE_TEAM_A", "sk-usage-team-a")
    monkeypatch.setenv("USAGE_TEAM_B", "sk-usage-team-b")
    url = f"sqlite:///{tmp_path / 'usage.db'}"
    with mock_openai() as chat, mock_openai("/v1/messages", default=anthropic_answer) as anth:
        path = tmp_path / "config.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "upstreams": {
                        "chat": {"kind": "openai", "base_url": chat.base_url},
                        "anth": {"kind": "anthropic", "base_url": anth.base_url},
                    },
                    "models": [
                        {"name": "gpt-x", "upstream": "chat"},
                        {"name": "claude-x", "upstream": "anth"},
                    ],
                    "keys": [
                        {"name": "team-a", "key_env": "USAGE_TEAM_A"},
                        {"name": "team-b", "key_env": "USAGE_TEAM_B"},
                    ],
                    "usage": {"url": url},
                }
            )
        )
        with live_server(create_app(load_config(path))) as base:
            scraped = []
            with openai.OpenAI(
                base_url=base + "/v1", api_key="sk-usage-team-a", max_retries=0
            ) as gpt:
                gpt.chat.completions.create(model="gpt-x", messages=HELLO)  # passthrough
                list(gpt.chat.completions.create(model="gpt-x", messages=HELLO, stream=True))
                list(  # translated: Chat client, Messages upstream
                    gpt.chat.completions.create(model="claude-x", messages=HELLO, stream=True)
                )
            with anthropic.Anthropic(base_url=base, api_key="sk-usage-team-b", max_retries=0) as c:
                c.messages.create(model="claude-x", max_tokens=8, messages=HELLO)
                with pytest.raises(anthropic.NotFoundError):
                    c.messages.create(model="nope", max_tokens=8, messages=HELLO)
            scraped.append(httpx.get(base + "/metrics").text)
        # the server has stopped: the writer flushed every row on its way out

    rows = asyncio.run(_rows(url))
    assert len(rows) == 5
    assert {r["request_id"] for r in rows} and all(r["request_id"] for r in rows)
    by = {(r["key_name"], r["model"], bool(r["stream"])): r for r in rows}
    chat_rows = [by[("team-a", "gpt-x", False)], by[("team-a", "gpt-x", True)]]
    for row in chat_rows:
        assert (row["input_tokens"], row["output_tokens"], row["status"]) == (42, 17, 200)
        assert row["upstream"] == "chat" and row["dialect"] == "openai"
    assert by[("team-a", "gpt-x", True)]["ttft"] is not None
    translated = by[("team-a", "claude-x", True)]
    assert (translated["input_tokens"], translated["output_tokens"]) == (5, 1)
    assert by[("team-b", "claude-x", False)]["dialect"] == "anthropic"
    missing = by[("team-b", "nope", False)]
    assert (missing["status"], missing["error_kind"]) == (404, "not_found")
    text = repr(rows)
    assert "sk-usage-team" not in text

    # /metrics after the same traffic: the same counts, by the key's name only
    samples = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(scraped[0])
        for sample in family.samples
    }

    def value(name: str, **labels: str) -> float:
        return samples[(name, frozenset(labels.items()))]

    requests = "interlingua_requests_total"
    assert value(requests, model="gpt-x", key="team-a", dialect="openai", status="200") == 2
    assert value(requests, model="nope", key="team-b", dialect="anthropic", status="404") == 1
    tokens = "interlingua_tokens_total"
    assert value(tokens, model="gpt-x", key="team-a", direction="input") == 84
    assert value(tokens, model="gpt-x", key="team-a", direction="output") == 34
    attempts = "interlingua_upstream_attempts_total"
    assert value(attempts, upstream="chat", outcome="ok") == 2
    assert value(attempts, upstream="anth", outcome="ok") == 2
    assert "sk-usage-team" not in scraped[0]

    assert main(["usage", "--config", str(path), "--json", "--by", "key,model"]) == 0
    summary = {(s["key"], s["model"]): s for s in json.loads(capsys.readouterr().out)}
    a = summary[("team-a", "gpt-x")]
    assert (a["requests"], a["errors"], a["input_tokens"], a["output_tokens"]) == (2, 0, 84, 34)
    assert summary[("team-b", "nope")]["errors"] == 1


async def _rows(url: str) -> list[dict[str, Any]]:
    db = connect(url)
    await db.open()
    try:
        names = (
            "request_id, key_name, dialect, model, upstream, status, error_kind, input_tokens,"
            " output_tokens, ttft, stream"
        )
        rows = await db.fetch(f"SELECT {names} FROM interlingua_usage ORDER BY id")
        return [dict(zip(names.replace(" ", "").split(","), row, strict=True)) for row in rows]
    finally:
        await db.aclose()
