"""Claude Code (``claude -p``) through the gateway's Anthropic Messages endpoint.

Claude Code reaches a scripted Chat Completions upstream through ``interlingua serve``,
so its Messages requests (system blocks, cache_control, betas, thinking settings, its
own tools) are translated to Chat and the answers back, streamed. Besides the main
model it sends side requests (titles, topic checks) under other claude-* names: the
wildcard model entry routes every name it uses. The settings are the README's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .harness import Outcome, client_env, npm_cli, run_scenario

CONFIG = {
    "server": {"api_keys": ["sk-ant-dummy"]},  # the client's key must reach the gateway
    "upstreams": {"scripted": {"kind": "openai", "base_url": "{upstream}"}},
    # every model name Claude Code sends (main, small/fast, whatever a release picks)
    "models": [{"name": "*", "upstream": "scripted", "model": "scripted-model"}],
}
# Claude Code's switches for everything besides the model calls (telemetry, error
# reports, update checks): the README lists the same.
QUIET = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}


def run_claude(
    tmp_path: Path,
    prompt: str,
    steps: list[dict[str, Any]],
    *args: str,
    config: dict[str, Any] = CONFIG,
) -> Outcome:
    """``claude -p PROMPT`` with its own HOME against a fresh gateway."""
    claude = npm_cli("@anthropic-ai/claude-code")
    env = client_env(
        tmp_path / "home",
        ANTHROPIC_BASE_URL="{gateway}",
        ANTHROPIC_API_KEY="sk-ant-dummy",
        **QUIET,
    )
    return run_scenario(
        tmp_path,
        argv=[str(claude), "-p", prompt, "--max-turns", "4", *args],
        env=env,
        config=config,
        steps=steps,
        timeout=90,
    )


def _no_failed_calls(outcome: Outcome) -> None:
    """Every request Claude Code made was answered 200 (no model name went unrouted)."""
    calls = [line for line in outcome.gateway_log.splitlines() if '"POST /v1/messages' in line]
    assert calls, outcome.report()
    assert all('" 200 ' in line for line in calls), outcome.report()


def test_plain_answer(tmp_path: Path) -> None:
    steps = [{"when_tool": "Bash", "text": "The password is swordfish-42."}]
    outcome = run_claude(tmp_path, "Say the password.", steps)
    outcome.assert_ok()
    assert "The password is swordfish-42." in outcome.stdout, outcome.report()
    body = outcome.scripted(0)
    assert body["model"] == "scripted-model"
    assert "Say the password." in json.dumps(body["messages"])
    _no_failed_calls(outcome)


def test_bash_tool_round_trip(tmp_path: Path) -> None:
    """A reasoning upstream writes a line, then calls Bash: Claude Code runs the command
    and sends its tool_result (and the thinking, text and call) back."""
    command = "echo marker-$((6*7)) > marker.txt && cat marker.txt"
    steps = [
        {
            "when_tool": "Bash",
            "reasoning": "A shell command writes the marker.",
            "text": "Running it.",
            "tool_calls": [
                {
                    "id": "call_bash1",
                    "name": "Bash",
                    "arguments": json.dumps({"command": command, "description": "Write a marker"}),
                }
            ],
        },
        {"when_tool": "Bash", "text": "The command printed marker-42. Done."},
    ]
    outcome = run_claude(tmp_path, "Run the marker command.", steps, "--allowedTools", "Bash")
    outcome.assert_ok()
    assert (tmp_path / "project" / "marker.txt").read_text().strip() == "marker-42"
    second = outcome.scripted(1)
    calls = [m for m in second["messages"] if m.get("tool_calls")]
    assert calls[-1]["tool_calls"][0]["id"] == "call_bash1", outcome.report()
    assert calls[-1]["content"] == "Running it.", outcome.report()
    results = [m for m in second["messages"] if m["role"] == "tool"]
    assert results and results[-1]["tool_call_id"] == "call_bash1", outcome.report()
    assert "marker-42" in json.dumps(results[-1]["content"]), outcome.report()
    assert "The command printed marker-42. Done." in outcome.stdout, outcome.report()
    _no_failed_calls(outcome)


def test_bash_round_trip_over_qwen3_coder_xml(tmp_path: Path) -> None:
    """An upstream with no tool parser writes Qwen3-Coder's XML call in its text
    (``text_tool_calls``): Claude Code gets a Bash ``tool_use`` whose number parameter
    is a number (its own input check refuses a string), runs it, and the result goes
    back to the upstream as text."""
    command = "echo marker-$((6*7)) > marker.txt && cat marker.txt"
    call = (
        "Running it.\n<tool_call>\n<function=Bash>\n"
        f"<parameter=command>\n{command}\n</parameter>\n"
        "<parameter=description>\nWrite a marker\n</parameter>\n"
        "<parameter=timeout>\n60000\n</parameter>\n</function>\n</tool_call>"
    )
    # The tools are described in the prompt, not offered: steps pick the main requests
    # by the Bash tool's entry there.
    listed = '\\"name\\":\\"Bash\\"'
    steps = [
        {"when_text": listed, "text": call},
        {"when_text": "<tool_response>", "text": "The command printed marker-42. Done."},
    ]
    config = {**CONFIG, "models": [{**CONFIG["models"][0], "options": {"text_tool_calls": True}}]}
    prompt = "Run the marker command."
    outcome = run_claude(tmp_path, prompt, steps, "--allowedTools", "Bash", config=config)
    outcome.assert_ok()
    assert (tmp_path / "project" / "marker.txt").read_text().strip() == "marker-42"
    first, second = outcome.scripted(0), outcome.scripted(1)
    assert "tools" not in first, outcome.report()
    history = json.dumps(second["messages"])
    assert "<tool_response>" in history and "marker-42" in history, outcome.report()
    assert "The command printed marker-42. Done." in outcome.stdout, outcome.report()
    _no_failed_calls(outcome)
