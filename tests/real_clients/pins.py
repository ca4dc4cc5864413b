"""The real clients the tests in this directory drive, pinned, and where they are installed.

One place for the pins: ``python -m tests.real_clients.install`` (run by ``.ci/run``) installs
exactly these, and the harness skips a test whose client is missing or another version.
"""

from __future__ import annotations

import os
from pathlib import Path

#: npm package -> (pinned version, the command it installs)
NPM_CLIENTS = {
    "@openai/codex": ("0.169.0", "codex"),
    "@anthropic-ai/claude-code": ("2.1.328", "claude"),
}


def clients_dir() -> Path:
    """Where the npm clients live: ``$INTERLINGUA_CLIENTS_DIR``, else a per-user cache
    (outside the work tree, so a fresh clone in CI reuses an earlier install)."""
    env = os.environ.get("INTERLINGUA_CLIENTS_DIR")
    if env:
        return Path(env)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "interlingua" / "clients"


def installed_version(package: str) -> str | None:
    """The version of ``package`` installed in :func:`clients_dir`, or None."""
    import json

    manifest = clients_dir() / "node_modules" / package / "package.json"
    try:
        version = json.loads(manifest.read_text()).get("version")
    except (OSError, ValueError):
        return None
    return version if isinstance(version, str) else None
