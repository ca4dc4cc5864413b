"""The strict gates run with the tests: ruff (lint and format) and mypy.

They run here, not only in an editor, so a submission whose code is not clean fails CI.
mypy is strict on core, dialects, sse and errors (see pyproject.toml).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is in the dev extra")
def test_ruff_lint() -> None:
    result = _run("ruff", "check", "src", "tests", "bench")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is in the dev extra")
def test_ruff_format() -> None:
    result = _run("ruff", "format", "--check", "src", "tests", "bench")
    assert result.returncode == 0, result.stdout + result.stderr


def _mypy_cache() -> Path:
    """mypy's cache, kept per user outside the work tree: a fresh clone (CI's) then
    checks only what changed since the last run on this machine (~1 s) instead of the
    whole tree and its stubs (~25 s). mypy checks each cached module against its source,
    so a cache written by another tree is redone where it differs, never trusted."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "interlingua" / "mypy"


def test_mypy() -> None:
    result = _run(sys.executable, "-m", "mypy", "--cache-dir", str(_mypy_cache()))
    assert result.returncode == 0, result.stdout + result.stderr
