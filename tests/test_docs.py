"""docs/architecture.md names only paths that exist, so the map cannot drift from the code.

The rule: a backticked token (up to a ``:``, as in ``server/app.py:GENERATION_ROUTES``)
is a path when it has no space or placeholder (``<name>``, ``*``) and ends in ``/`` or a
file suffix below. It is resolved against ``src/interlingua/`` first, then the repository
root (``tests/``, ``bench/``, ``docs/``).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "interlingua"
SUFFIXES = (".py", ".md", ".html", ".toml", ".sse")


def named_paths(text: str) -> list[str]:
    """The paths a document names, by the rule of the module docstring."""
    tokens = (token.split(":")[0] for token in re.findall(r"`([^`\n]+)`", text))
    return [
        token
        for token in tokens
        if not re.search(r"[\s<>*]", token) and token.endswith(("/", *SUFFIXES))
    ]


def test_architecture_names_only_existing_paths() -> None:
    named = named_paths((ROOT / "docs" / "architecture.md").read_text())
    missing = [p for p in named if not (PACKAGE / p).exists() and not (ROOT / p).exists()]
    assert len(named) > 100  # the rule still finds the map's paths
    assert missing == []
