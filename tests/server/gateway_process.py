"""A real ``interlingua serve`` subprocess on a free port, with a YAML config, for the
server-limit and shutdown tests (uvicorn's protocol, signals and exit status are only
real in a process of their own)."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from .mock_upstream import free_port


@dataclass
class Gateway:
    """A running gateway: its base URL, process, and the file its stderr goes to
    (a file, not a pipe: a pipe nobody reads would block a chatty server)."""

    url: str
    port: int
    proc: subprocess.Popen[str]
    log: Path

    def stderr(self) -> str:
        """Everything the gateway logged so far."""
        return self.log.read_text(errors="replace")

    def stop(self, timeout: float = 20, sig: int = signal.SIGTERM) -> tuple[int, str]:
        """``sig`` to the main process (with --workers, its supervisor passes it on),
        then wait; (exit status, stderr)."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(timeout=timeout)
        return self.proc.returncode, self.stderr()


def env() -> dict[str, str]:
    """This environment (PYTHONPATH included) without proxies; unbuffered output."""
    out = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper()}
    out["PYTHONUNBUFFERED"] = "1"
    return out


def limit_fds(n: int) -> Callable[[], None]:
    """A preexec_fn that caps the child's open files at ``n`` (soft and hard)."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))

    return apply


@contextlib.contextmanager
def serve(
    tmp_path: Path,
    config: dict[str, Any],
    *,
    workers: int = 1,
    preexec: Callable[[], None] | None = None,
    log_level: str = "info",
) -> Iterator[Gateway]:
    """Run ``serve -c <config>`` until the block ends (then SIGTERM, else SIGKILL)."""
    port = free_port()
    path = tmp_path / f"gateway-{port}.yaml"
    path.write_text(yaml.safe_dump(config))
    args = [sys.executable, "-m", "interlingua.cli", "serve", "-c", str(path), "--port", str(port)]
    args += ["--workers", str(workers), "--log-level", log_level]
    log = tmp_path / f"gateway-{port}.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=err,
            text=True,
            env=env(),
            preexec_fn=preexec,
            start_new_session=True,  # so the cleanup below reaches --workers children too
        )
    gateway = Gateway(f"http://127.0.0.1:{port}", port, proc, log)
    try:
        wait_healthy(gateway, 30)
        yield gateway
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def wait_healthy(gateway: Gateway, timeout: float) -> None:
    """Poll ``/health`` until 200, failing fast if the process died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if gateway.proc.poll() is not None:
            code = gateway.proc.returncode
            raise AssertionError(f"serve exited early ({code}): {gateway.stderr()}")
        try:
            if httpx.get(gateway.url + "/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise AssertionError(f"serve was not healthy within {timeout}s")
