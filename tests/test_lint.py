"""The strict gates run with the tests: ruff (lint and format) and mypy.

They run here, not only in an editor, so a submission whose code is not clean fails CI.
mypy is strict on core, dialects, sse and errors (see pyproject.toml).
"""

from __future__ import annotations

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


def test_mypy() -> None:
    result = _run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout + result.stderr
