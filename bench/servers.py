"""The servers under test, behind one small interface the runner drives.

A :class:`Target` has a ``label`` (the report's "server" column), a ``base`` URL, a ``pid``
whose memory is read after each run, and says which scenarios it ``supports``. Three kinds:

* :class:`Direct` -- nginx itself, for the direct-to-upstream floor;
* :class:`Interlingua` -- ``python -m interlingua.cli serve`` with a generated config;
* ``bench.peers.LiteLLM`` -- the LiteLLM proxy, same routes (see that module).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Protocol

from .nginx import Nginx
from .procs import BenchError, Process, free_port, start, wait_ready
from .scenarios import Scenario, gateway_config_yaml


class Target(Protocol):
    """What the runner needs from a server under test."""

    label: str
    base: str

    @property
    def pid(self) -> int:
        """The process whose (tree) RSS is reported."""
        ...

    def supports(self, scenario: Scenario) -> bool:
        """Whether this server runs ``scenario`` (direct ones only go to nginx)."""
        ...


class Direct:
    """nginx as a target: the direct baseline."""

    def __init__(self, nginx: Nginx) -> None:
        self.label = "nginx (direct)"
        self.base = nginx.base
        self._nginx = nginx

    @property
    def pid(self) -> int:
        """nginx's pid (one process: master_process off)."""
        assert self._nginx.process is not None
        return self._nginx.process.pid

    def supports(self, scenario: Scenario) -> bool:
        """Only the direct scenarios."""
        return scenario.direct


def cli_supports_workers() -> bool:
    """Whether ``interlingua serve`` has a ``--workers`` option yet."""
    help_text = subprocess.run(
        [sys.executable, "-m", "interlingua.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return "--workers" in help_text


def serve_command(config: Path, port: int, workers: int, with_workers_flag: bool) -> list[str]:
    """The command line that starts the gateway (one worker unless asked and supported)."""
    command = [sys.executable, "-m", "interlingua.cli", "serve", "--config", str(config)]
    command += ["--port", str(port), "--log-level", "warning"]
    if with_workers_flag:
        command += ["--workers", str(workers)]
    return command


class GatewayProcess:
    """What the gateways under test share: one process we started, every gateway scenario."""

    process: Process | None = None

    @property
    def pid(self) -> int:
        """The server's pid (its workers or children, if any, count in the tree RSS)."""
        assert self.process is not None
        return self.process.pid

    def supports(self, scenario: Scenario) -> bool:
        """Every gateway scenario."""
        return not scenario.direct


class Interlingua(GatewayProcess):
    """The gateway under test, started from the working tree; a context manager."""

    def __init__(self, nginx_base: str, tmp: Path, workers: int = 1) -> None:
        self.label = "interlingua" if workers == 1 else f"interlingua ×{workers} workers"
        self.tmp = tmp / f"interlingua-{workers}"
        self.nginx_base = nginx_base
        self.workers = workers
        self.port = 0
        self.base = ""
        self.process = None

    def __enter__(self) -> Interlingua:
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        config = self.tmp / "config.yaml"
        config.write_text(gateway_config_yaml(self.nginx_base, self.port))
        command = serve_command(config, self.port, self.workers, self.workers > 1)
        self.process = start(command, self.tmp / "log", env=dict(os.environ))
        try:
            wait_ready(f"{self.base}/health", self.process.proc, 60, "interlingua")
        except BenchError as exc:
            tail = self.process.log_tail()
            self.process.stop()
            raise BenchError(f"{exc}\n{tail}") from None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.stop()
