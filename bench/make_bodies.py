"""Generate the request bodies in ``bench/bodies/`` (run: ``python -m bench.make_bodies``).

* ``openai_chat.json`` -- a small, ordinary Chat Completions request (system + user).
* ``anthropic_messages.json`` -- the same conversation as an Anthropic Messages request.
* ``claude_code_80k.json`` -- a Claude-Code-sized Anthropic request, ~80 KB: the two
  cached system blocks, 24 tools with JSON schemas (the built-in tools plus IDE and
  GitHub MCP tools), and a multi-turn conversation of text, ``tool_use`` and
  ``tool_result`` blocks carrying file contents and command output.

The text is generated from a fixed seed, so the files are reproducible byte for byte and
a change to them shows in review. The harness rewrites ``model`` and ``stream`` per
scenario (``bench.scenarios``); what is here is the shape and the size.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson

BODIES = Path(__file__).resolve().parent / "bodies"
TARGET_BYTES = 80 * 1024
_WORDS = tuple(
    " ".join(
        (
            "the a an to of in for on with when if then else return value file path line test",
            "function module class method call result error output input string list dict key",
            "config server request response stream chunk token model tool user assistant system",
            "read write edit search pattern directory command shell process exit code status",
            "always never only before after must should may use avoid prefer instead because",
            "change update fix add remove keep check run build import export type async await",
        )
    ).split(" ")
)

SYSTEM_SHORT = "You are a helpful assistant. Answer concisely and accurately."
USER_SHORT = (
    "Summarize in two sentences why HTTP keep-alive matters for an API gateway that "
    "forwards thousands of small JSON requests per second to an upstream server."
)


def _prose(rng: random.Random, words: int) -> str:
    """Sentences of plausible-looking technical words (deterministic for a seeded rng)."""
    out: list[str] = []
    while words > 0:
        n = min(words, rng.randint(8, 18))
        sentence = " ".join(rng.choice(_WORDS) for _ in range(n))
        out.append(sentence[0].upper() + sentence[1:] + ".")
        words -= n
    return " ".join(out)


def _code(rng: random.Random, lines: int) -> str:
    """A numbered source listing, as the Read tool returns it."""
    body = []
    for i in range(1, lines + 1):
        indent = "    " * rng.randint(0, 3)
        a, b, c = rng.choice(_WORDS), rng.choice(_WORDS), rng.choice(_WORDS)
        body.append(f"{i:>6}\u2192{indent}{a}_{b} = {c}({a}, {b!r})")
    return "\n".join(body)


def openai_chat() -> dict[str, Any]:
    """The small OpenAI Chat request."""
    return {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": SYSTEM_SHORT},
            {"role": "user", "content": USER_SHORT},
        ],
        "max_tokens": 256,
        "temperature": 0.2,
        "stream": False,
    }


def anthropic_messages() -> dict[str, Any]:
    """The small Anthropic Messages request."""
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": SYSTEM_SHORT,
        "messages": [{"role": "user", "content": USER_SHORT}],
        "temperature": 0.2,
        "stream": False,
    }


_TOOLS: tuple[tuple[str, dict[str, str], tuple[str, ...]], ...] = (
    ("Task", {"description": "string", "prompt": "string", "subagent_type": "string"}, ()),
    ("Bash", {"command": "string", "timeout": "number", "description": "string"}, ()),
    ("Glob", {"pattern": "string", "path": "string"}, ()),
    ("Grep", {"pattern": "string", "path": "string", "glob": "string", "-n": "boolean"}, ()),
    ("ExitPlanMode", {"plan": "string"}, ()),
    ("Read", {"file_path": "string", "offset": "number", "limit": "number"}, ()),
    ("Edit", {"file_path": "string", "old_string": "string", "new_string": "string"}, ()),
    ("MultiEdit", {"file_path": "string", "edits": "array"}, ()),
    ("Write", {"file_path": "string", "content": "string"}, ()),
    ("NotebookEdit", {"notebook_path": "string", "cell_id": "string", "new_source": "string"}, ()),
    ("WebFetch", {"url": "string", "prompt": "string"}, ()),
    ("TodoWrite", {"todos": "array"}, ()),
    ("WebSearch", {"query": "string", "allowed_domains": "array"}, ()),
    ("BashOutput", {"bash_id": "string", "filter": "string"}, ()),
    ("KillShell", {"shell_id": "string"}, ()),
    ("SlashCommand", {"command": "string"}, ()),
    ("Skill", {"command": "string"}, ()),
    ("AskUserQuestion", {"questions": "array"}, ()),
    ("LS", {"path": "string", "ignore": "array"}, ()),
    ("mcp__ide__getDiagnostics", {"uri": "string"}, ("uri",)),
    ("mcp__ide__executeCode", {"code": "string"}, ()),
    ("mcp__github__get_issue", {"owner": "string", "repo": "string", "issue_number": "number"}, ()),
    ("mcp__github__search_code", {"q": "string", "per_page": "number"}, ()),
    (
        "mcp__github__create_pull_request",
        {"owner": "string", "repo": "string", "title": "string"},
        (),
    ),
)


def _tool(rng: random.Random, name: str, props: dict[str, str], optional: tuple[str, ...]) -> Any:
    properties: dict[str, Any] = {}
    for prop, kind in props.items():
        spec: dict[str, Any] = {"type": kind, "description": _prose(rng, rng.randint(8, 30))}
        if kind == "array":
            spec["items"] = {"type": "object", "additionalProperties": True}
        properties[prop] = spec
    first = next(iter(props))
    return {
        "name": name,
        "description": _prose(rng, rng.randint(90, 260)),
        "input_schema": {
            "type": "object",
            "properties": properties,
            "required": [p for p in (first,) if p not in optional] or [first],
            "additionalProperties": False,
            "$schema": "http://json-schema.org/draft-07/schema#",
        },
    }


def _conversation(rng: random.Random, result_lines: int) -> list[dict[str, Any]]:
    """A user task, then rounds of assistant tool calls and the user's tool results."""
    reminder = f"<system-reminder>\n{_prose(rng, 120)}\n</system-reminder>"
    messages: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": reminder},
                {"type": "text", "text": "The streaming test in tests/server fails; fix it."},
            ],
        }
    ]
    calls = [
        ("Grep", {"pattern": "def test_stream", "path": "tests", "-n": True}),
        ("Read", {"file_path": "/work/src/interlingua/server/http.py"}),
        ("Bash", {"command": "python -m pytest tests/server -q", "description": "Run tests"}),
        ("Read", {"file_path": "/work/src/interlingua/server/gateway.py"}),
    ]
    for round_, (name, arguments) in enumerate(calls):
        tool_id = f"toolu_01{round_:02d}" + "".join(
            rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(20)
        )
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": _prose(rng, rng.randint(15, 40))},
                    {"type": "tool_use", "id": tool_id, "name": name, "input": arguments},
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": tool_id,
                        "content": _code(rng, result_lines),
                    }
                ],
            }
        )
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return messages


def claude_code(target: int = TARGET_BYTES) -> dict[str, Any]:
    """The Claude-Code-sized request, grown (tool results) until it is about ``target`` bytes."""
    lines = 10
    while True:
        body = _claude_code(lines)
        if len(orjson.dumps(body)) >= target or lines > 2000:
            return body
        lines += 5


def _claude_code(result_lines: int) -> dict[str, Any]:
    rng = random.Random(80)
    system = [
        {
            "type": "text",
            "text": "You are Claude Code, Anthropic's official CLI for Claude.",
            "cache_control": {"type": "ephemeral"},
        },
        {"type": "text", "text": _prose(rng, 1800), "cache_control": {"type": "ephemeral"}},
    ]
    tools = [_tool(rng, name, props, optional) for name, props, optional in _TOOLS]
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "system": system,
        "messages": _conversation(rng, result_lines),
        "tools": tools,
        "metadata": {"user_id": "user_bench_account__session_00000000-0000-0000-0000-000000000000"},
        "temperature": 1,
        "stream": False,
    }


def build() -> dict[str, dict[str, Any]]:
    """File name -> body, for every file in ``bench/bodies``."""
    return {
        "openai_chat.json": openai_chat(),
        "anthropic_messages.json": anthropic_messages(),
        "claude_code_80k.json": claude_code(),
    }


def main() -> None:
    """Write the bodies (indented, for review; the harness sends them compact)."""
    BODIES.mkdir(exist_ok=True)
    for name, body in build().items():
        data = orjson.dumps(body, option=orjson.OPT_INDENT_2) + b"\n"
        (BODIES / name).write_bytes(data)
        print(f"{BODIES / name}: {len(orjson.dumps(body))} bytes compact")


if __name__ == "__main__":
    main()
