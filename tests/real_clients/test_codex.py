"""Codex CLI (``codex exec``) through the gateway's Responses endpoint.

Codex speaks only the Responses API (``wire_api = "responses"``). Here it reaches a
scripted Chat Completions upstream, or the bundled local model, through
``interlingua serve``: plain answers, a round trip through its shell tool
(``exec_command``, the tool Codex 0.169 offers for commands), and its WebSocket
transport. Its config is the one the README shows, in a CODEX_HOME of its own, with
everything that phones home switched off.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .harness import Outcome, client_env, npm_cli, run_scenario

MODEL = "gpt-5.5"  # what Codex asks for; the gateway routes it
UPSTREAM_CONFIG = {
    "server": {"api_keys": ["sk-dummy"]},  # the client's key must reach the gateway
    "upstreams": {"scripted": {"kind": "openai", "base_url": "{upstream}"}},
    "models": [{"name": MODEL, "upstream": "scripted", "model": "scripted-model"}],
}
# The bundled model, its answer bounded: Codex sends no output limit, and a sampled 135M
# model sometimes never stops (it once ran the whole 150 s timeout). `params`
# (docs/config.md, "Request shaping") gives the model a stop at its first paragraph's end
# and a generous limit behind it: a limit alone is not enough, since Codex exits 1 on an
# honest `response.incomplete`.
LOCAL_CONFIG = {
    "upstreams": {"local": {"kind": "local", "bundled": "smollm2"}},
    "models": [
        {
            "name": "smollm2",
            "upstream": "local",
            "params": {"max_tokens": 400, "stop": ["\n\n"]},
        }
    ],
}
# Codex's own prompt (instructions, sub-agent and goal tools: ~8,700 tokens) does not fit
# SmolLM2's 8,192-token context; these are the settings a user of a small local model sets.
SMALL_MODEL = """\
model_instructions_file = "{instructions}"
web_search = "disabled"
agents.enabled = false
features.goals = false
"""
FALLBACK_WARNING = "Falling back from WebSockets"


def codex_config(*, websockets: bool = False, model: str = MODEL, top: str = "") -> str:
    """The README's Codex config (config.toml), with the gateway's URL left to fill in;
    ``top`` adds root keys."""
    return f"""\
{top}model = "{model}"
model_provider = "interlingua"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[model_providers.interlingua]
name = "interlingua"
base_url = "{{gateway}}/v1"
wire_api = "responses"
env_key = "INTERLINGUA_API_KEY"
supports_websockets = {str(websockets).lower()}
"""


def run_codex(
    tmp_path: Path,
    prompt: str,
    *,
    config: dict[str, Any] | None,
    steps: list[dict[str, Any]] | None = None,
    websockets: bool = False,
    model: str = MODEL,
    top: str = "",
    sandbox: str | None = None,
    timeout: float = 60,
) -> Outcome:
    """``codex exec PROMPT`` with its own CODEX_HOME against a fresh gateway; commands
    run without a sandbox (the container has none to offer) unless ``sandbox`` names a
    Codex sandbox mode."""
    codex = npm_cli("@openai/codex")
    home = tmp_path / "home"
    codex_home = home / ".codex"
    env = client_env(home, CODEX_HOME=str(codex_home), INTERLINGUA_API_KEY="sk-dummy")
    argv = [str(codex), "exec", "--skip-git-repo-check", "--ephemeral"]
    if sandbox is None:
        argv.append("--dangerously-bypass-approvals-and-sandbox")
    else:
        argv += ["--sandbox", sandbox]
    argv += ["--color", "never", prompt]
    return run_scenario(
        tmp_path,
        argv=argv,
        env=env,
        config=config,
        steps=steps,
        files={
            str(codex_home / "config.toml"): codex_config(
                websockets=websockets, model=model, top=top
            )
        },
        timeout=timeout,
    )


def test_plain_answer(tmp_path: Path) -> None:
    outcome = run_codex(
        tmp_path,
        "Say the password.",
        config=UPSTREAM_CONFIG,
        steps=[{"text": "The password is swordfish-42."}],
    )
    outcome.assert_ok()
    assert "The password is swordfish-42." in outcome.stdout, outcome.report()
    body = outcome.scripted(0)
    assert body["model"] == "scripted-model"
    assert body["stream"] is True
    user = [m for m in body["messages"] if m["role"] == "user"]
    assert "Say the password." in json.dumps(user)
    # Codex's shell tool reached the upstream as a Chat function tool
    names = {t[t["type"]]["name"] for t in body["tools"]}
    assert "exec_command" in names, sorted(names)
    assert '"POST /v1/responses" 200' in outcome.gateway_log


@pytest.mark.parametrize("websockets", [False, True], ids=["http", "websocket"])
def test_shell_tool_round_trip(tmp_path: Path, websockets: bool) -> None:
    """Over the socket the second turn continues the first by previous_response_id with
    store false: the upstream must still get the whole conversation."""
    command = "echo marker-$((6*7)) > marker.txt && cat marker.txt"
    steps = [
        {
            "when_tool": "exec_command",
            "tool_calls": [
                {
                    "id": "call_sh1",
                    "name": "exec_command",
                    "arguments": json.dumps({"cmd": command}),
                }
            ],
        },
        {"when_tool": "exec_command", "text": "The command printed marker-42. Done."},
    ]
    outcome = run_codex(
        tmp_path,
        "Run the marker command.",
        config=UPSTREAM_CONFIG,
        steps=steps,
        websockets=websockets,
    )
    outcome.assert_ok()
    assert (tmp_path / "project" / "marker.txt").read_text().strip() == "marker-42"
    if websockets:
        assert FALLBACK_WARNING not in outcome.stderr, outcome.report()
        assert '"POST /v1/responses"' not in outcome.gateway_log, outcome.report()
    second = outcome.scripted(1)
    users = [m for m in second["messages"] if m["role"] == "user"]
    assert "Run the marker command." in json.dumps(users), outcome.report()
    calls = [m for m in second["messages"] if m.get("tool_calls")]
    assert calls and calls[-1]["tool_calls"][0]["id"] == "call_sh1", outcome.report()
    results = [m for m in second["messages"] if m["role"] == "tool"]
    assert results and results[-1]["tool_call_id"] == "call_sh1", outcome.report()
    assert "marker-42" in json.dumps(results[-1]["content"]), outcome.report()
    assert "The command printed marker-42. Done." in outcome.stdout, outcome.report()


# ~50 s (Codex's instructions are a few thousand tokens of prompt for the embedded model on
# one thread): in the slow run, which .ci/run runs after the default one.
@pytest.mark.slow
def test_local_model_answers(tmp_path: Path) -> None:
    """The bundled SmolLM2 answers Codex (its output bounded by the model's params): Codex
    prints the answer, or reports the honest `response.incomplete`; the text is not
    asserted."""
    pytest.importorskip("llama_cpp")
    instructions = tmp_path / "instructions.md"
    instructions.write_text("You are a helpful assistant. Answer briefly.\n")
    small = SMALL_MODEL.format(instructions=instructions)
    # read-only: should the small model write a tool call as text, nothing it runs writes
    outcome = run_codex(
        tmp_path,
        "Say hello.",
        config=LOCAL_CONFIG,
        model="smollm2",
        top=small,
        sandbox="read-only",
        timeout=150,
    )
    assert outcome.error is None and not outcome.client.get("timed_out"), outcome.report()
    assert '"POST /v1/responses" 200' in outcome.gateway_log, outcome.report()
    if outcome.client.get("returncode") == 0:
        assert outcome.stdout.strip(), outcome.report()
    else:
        # The sampled model sometimes spends its whole limit (inside a tool call it began,
        # past the stop): the gateway ends with `response.incomplete`, and Codex reads it
        # and reports it (exit 1); anything else is a failure of the gateway.
        incomplete = "Incomplete response returned, reason: max_output_tokens"
        assert incomplete in outcome.stderr, outcome.report()


def test_websocket_transport(tmp_path: Path) -> None:
    """With ``supports_websockets`` Codex opens ``GET /v1/responses`` as a socket, warm-up
    included, and never falls back to HTTP."""
    outcome = run_codex(
        tmp_path,
        "Say the password.",
        config=UPSTREAM_CONFIG,
        steps=[{"text": "The password is swordfish-42."}],
        websockets=True,
    )
    outcome.assert_ok()
    assert "The password is swordfish-42." in outcome.stdout, outcome.report()
    assert FALLBACK_WARNING not in outcome.stderr, outcome.report()
    assert '"POST /v1/responses"' not in outcome.gateway_log, outcome.report()


def test_apply_patch_custom_tool_after_reasoning(tmp_path: Path) -> None:
    """A reasoning upstream (``reasoning_content``) calls Codex's freeform ``apply_patch``
    tool (a custom tool: raw text input, no JSON): Codex applies the patch, and the next
    request carries the call and its output back."""
    patch = "*** Begin Patch\n*** Add File: hello.txt\n+hello from apply_patch\n*** End Patch\n"
    steps = [
        {
            "when_tool": "apply_patch",
            "reasoning": "The user wants a file; apply_patch can add it.",
            "text": "Adding the file.",
            "tool_calls": [{"id": "call_patch1", "name": "apply_patch", "input": patch}],
        },
        {"when_tool": "apply_patch", "text": "Created hello.txt."},
    ]
    outcome = run_codex(tmp_path, "Create hello.txt.", config=UPSTREAM_CONFIG, steps=steps)
    outcome.assert_ok()
    created = tmp_path / "project" / "hello.txt"
    assert created.read_text() == "hello from apply_patch\n", outcome.report()
    second = outcome.scripted(1)
    calls = [m for m in second["messages"] if m.get("tool_calls")]
    assert calls[-1]["tool_calls"][0] == {
        "id": "call_patch1",
        "type": "custom",
        "custom": {"name": "apply_patch", "input": patch},
    }, outcome.report()
    # the reasoning went to Codex as a reasoning item and came back with the call
    assert calls[-1]["reasoning_content"] == steps[0]["reasoning"], outcome.report()
    results = [m for m in second["messages"] if m["role"] == "tool"]
    assert results[-1]["tool_call_id"] == "call_patch1", outcome.report()
    assert "hello.txt" in json.dumps(results[-1]["content"]), outcome.report()
    assert "Created hello.txt." in outcome.stdout, outcome.report()
