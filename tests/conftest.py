"""Session-wide test setup.

The gateway stores Responses API objects in the user's data directory by default
(``$XDG_DATA_HOME/interlingua/responses.db``): every test, and every gateway a test
starts in a subprocess, gets a throwaway data directory instead of the real one. One per
process: each pytest-xdist worker imports this module itself, so workers never share
a database or a sealing key.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

_DATA_HOME = tempfile.mkdtemp(prefix="interlingua-test-data-")


def pytest_configure(config: pytest.Config) -> None:
    os.environ["XDG_DATA_HOME"] = _DATA_HOME


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(_DATA_HOME, ignore_errors=True)


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config
) -> None:
    """After a failed run in random order, name its seed (above the short summary):
    ``-q``, the README's command, hides the header line that says it, and the order
    may be what failed."""
    if exitstatus != 0 and config.pluginmanager.hasplugin("randomly"):
        seed = config.getoption("randomly_seed")
        terminalreporter.write_line(f"random order: replay it with --randomly-seed={seed}")
