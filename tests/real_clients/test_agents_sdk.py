"""The OpenAI Agents SDK through the gateway's Responses endpoint.

An Agent with a function tool, on ``OpenAIResponsesModel`` over ``AsyncOpenAI(base_url=
<gateway>/v1)``, runs against a scripted Chat Completions upstream that calls the tool:
the SDK runs it, sends ``function_call_output`` back, and the upstream's second answer is
final; once with ``Runner.run`` and once with ``Runner.run_streamed``.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from .harness import client_env, run_scenario

# found, not imported: the SDK takes seconds to import and only the client process needs it
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("agents") is None,
    reason="openai-agents (the dev extra) is not installed",
)

CONFIG = {
    "server": {"api_keys": ["sk-dummy"]},  # the client's key must reach the gateway
    "upstreams": {"scripted": {"kind": "openai", "base_url": "{upstream}"}},
    "models": [{"name": "gpt-5.5", "upstream": "scripted", "model": "scripted-model"}],
}
PROGRAM = Path(__file__).with_name("agents_client.py")


def _call(call_id: str, name: str) -> dict[str, object]:
    arguments = json.dumps({"name": name})
    return {"tool_calls": [{"id": call_id, "name": "lookup_marker", "arguments": arguments}]}


def test_agent_runs_a_function_tool(tmp_path: Path) -> None:
    steps = [
        _call("call_a", "alpha"),
        {"text": "The marker for alpha is marker-alpha-42."},
        _call("call_b", "beta"),
        {"text": "The marker for beta is marker-beta-42."},
    ]
    env = client_env(tmp_path / "home", OPENAI_AGENTS_DISABLE_TRACING="1")
    outcome = run_scenario(
        tmp_path,
        argv=[sys.executable, str(PROGRAM), "{gateway}"],
        env=env,
        config=CONFIG,
        steps=steps,
        timeout=60,
    )
    outcome.assert_ok()
    result = json.loads(outcome.stdout.strip().splitlines()[-1])
    assert result["tool_calls"] == ["alpha", "beta"], outcome.report()
    assert result["plain"] == "The marker for alpha is marker-alpha-42."
    assert result["streamed"] == "The marker for beta is marker-beta-42."
    assert "raw_response_event" in result["stream_event_types"]
    for step, call_id, marker in (
        (1, "call_a", "marker-alpha-42"),
        (3, "call_b", "marker-beta-42"),
    ):
        messages = outcome.scripted(step)["messages"]
        calls = [m for m in messages if m.get("tool_calls")]
        assert calls[-1]["tool_calls"][0]["id"] == call_id, outcome.report()
        results = [m for m in messages if m["role"] == "tool"]
        assert results[-1]["tool_call_id"] == call_id, outcome.report()
        assert marker in json.dumps(results[-1]["content"]), outcome.report()
    assert [b["stream"] for b in outcome.chat_bodies] == [False, False, True, True]
