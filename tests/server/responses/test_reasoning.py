"""Reasoning an upstream needs back, carried by a Responses client across turns.

Anthropic refuses a history whose tool-use turn lost its signed thinking block. A
Responses client keeps reasoning only as ``encrypted_content`` (stateless, as Codex
runs) or in the gateway's store (``previous_response_id``): either way the Anthropic
upstream must get the exact block back. A token the gateway did not issue is dropped
toward Anthropic, never an error. The key comes from ``responses.secret_env`` or a key
file (server/responses/sealing_key.py), so another process of the same gateway opens the token.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from interlingua.config import ConfigError, ResponsesConfig, parse_config
from interlingua.core import ReasoningPart, StopReason, ToolCallPart
from interlingua.server import create_app
from interlingua.server.responses.sealing_key import KEY_FILE, sealing_key
from interlingua.upstreams.fake import FakeUpstream

from ...conformance.cases import reply
from ...live_server import live_server

TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]
THINKING = {"type": "thinking", "thinking": "Weather needs a tool.", "signature": "EqQBsig"}


def _config(tmp: Path, **responses: Any) -> Any:
    return parse_config(
        {
            "upstreams": {"ant": {"kind": "fake"}},
            "models": [{"name": "claude", "upstream": "ant", "model": "claude-sonnet"}],
            "responses": {"url": f"sqlite://{tmp}/responses.db", **responses},
        }
    )


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[openai.OpenAI, FakeUpstream]]:
    fake = FakeUpstream("ant", wire="anthropic", chunk_size=4)
    app = create_app(_config(tmp_path), upstreams={"ant": fake})
    with live_server(app) as url, openai.OpenAI(base_url=url + "/v1", api_key="k") as gpt:
        yield gpt, fake


def _script_tool_turn(fake: FakeUpstream) -> None:
    fake.enqueue(
        reply(
            ReasoningPart(THINKING["thinking"], signature=THINKING["signature"]),
            ToolCallPart("toolu_1", "get_weather", '{"city":"Paris"}'),
            stop=StopReason.TOOL_USE,
        )
    )
    fake.enqueue(reply("18C in Paris."))


def _first(gpt: openai.OpenAI, stream: bool, **ask: Any) -> Any:
    ask = {"model": "claude", "input": "Weather in Paris?", "tools": TOOLS, **ask}
    if not stream:
        return gpt.responses.create(**ask)
    with gpt.responses.stream(**ask) as events:
        return events.get_final_response()


def _assistant_blocks(fake: FakeUpstream) -> list[dict[str, Any]]:
    """The content of the assistant turn in the last body the Anthropic upstream got."""
    body = fake.wire_requests[-1]
    (assistant,) = [m for m in body["messages"] if m["role"] == "assistant"]  # type: ignore[union-attr, index]
    return assistant["content"]  # type: ignore[no-any-return]


def _call_output(first: Any) -> dict[str, Any]:
    (call,) = [item for item in first.output if item.type == "function_call"]
    return {"type": "function_call_output", "call_id": call.call_id, "output": "18C"}


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_stateless_round_trip_keeps_the_signed_thinking(
    served: tuple[openai.OpenAI, FakeUpstream], stream: bool
) -> None:
    gpt, fake = served
    _script_tool_turn(fake)
    first = _first(gpt, stream, store=False, include=["reasoning.encrypted_content"])
    reasoning = first.output[0]
    assert reasoning.type == "reasoning" and reasoning.encrypted_content.startswith("ilg1.")
    history = [item.model_dump(exclude_none=True) for item in first.output]
    second = gpt.responses.create(
        model="claude",
        tools=TOOLS,
        store=False,
        input=[{"role": "user", "content": "Weather in Paris?"}, *history, _call_output(first)],
    )
    assert second.output_text == "18C in Paris."
    blocks = _assistant_blocks(fake)
    assert blocks[0] == THINKING and blocks[1]["type"] == "tool_use"


def test_previous_response_id_keeps_the_signed_thinking(
    served: tuple[openai.OpenAI, FakeUpstream],
) -> None:
    """Stored without ``include``: the store is the client's memory, so it keeps what
    the upstream needs back."""
    gpt, fake = served
    _script_tool_turn(fake)
    first = _first(gpt, False)
    second = gpt.responses.create(
        model="claude", tools=TOOLS, previous_response_id=first.id, input=[_call_output(first)]
    )
    assert second.output_text == "18C in Paris."
    assert _assistant_blocks(fake)[0] == THINKING


@pytest.mark.parametrize(
    "tamper",
    [lambda t: t[:-3] + "AAA", lambda t: "gAAAAABopenai-own"],
    ids=["altered", "foreign"],
)
def test_a_token_we_did_not_issue_is_dropped_not_refused(
    served: tuple[openai.OpenAI, FakeUpstream], tamper: Any
) -> None:
    gpt, fake = served
    _script_tool_turn(fake)
    first = _first(gpt, False, store=False, include=["reasoning.encrypted_content"])
    history = [item.model_dump(exclude_none=True) for item in first.output]
    history[0]["encrypted_content"] = tamper(history[0]["encrypted_content"])
    second = gpt.responses.create(
        model="claude",
        tools=TOOLS,
        store=False,
        input=[{"role": "user", "content": "Weather in Paris?"}, *history, _call_output(first)],
    )
    assert second.output_text == "18C in Paris."
    assert [b["type"] for b in _assistant_blocks(fake)] == ["tool_use"]


def test_the_key_file_is_made_once_and_shared(tmp_path: Path) -> None:
    key = sealing_key(ResponsesConfig(), tmp_path)
    assert len(key) == 32 and sealing_key(ResponsesConfig(), tmp_path) == key
    mode = stat.S_IMODE((tmp_path / KEY_FILE).stat().st_mode)
    assert mode == 0o600
    assert sealing_key(ResponsesConfig(), tmp_path / "other") != key


def test_a_damaged_key_file_falls_back_to_a_process_key(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / KEY_FILE).write_bytes(b"short")
    assert len(sealing_key(ResponsesConfig(), tmp_path)) == 32
    assert "sealing key file" in caplog.text


def test_secret_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cfg = ResponsesConfig(secret_env="GATEWAY_SEAL_SECRET")
    with pytest.raises(ConfigError, match="not set"):
        sealing_key(cfg, tmp_path)
    monkeypatch.setenv("GATEWAY_SEAL_SECRET", "too-short")
    with pytest.raises(ConfigError, match="at least 16"):
        sealing_key(cfg, tmp_path)
    monkeypatch.setenv("GATEWAY_SEAL_SECRET", "a" * 40)
    key = sealing_key(cfg, tmp_path)
    assert key == sealing_key(cfg, tmp_path / "elsewhere")  # replicas agree
    assert not os.path.exists(tmp_path / KEY_FILE)


def test_secret_env_is_checked_as_config() -> None:
    with pytest.raises(ConfigError, match="secret_env"):
        parse_config({"responses": {"secret_env": "not a name"}})
    cfg = parse_config({"responses": {"secret_env": "SEAL"}})
    assert cfg.responses.secret_env == "SEAL"
