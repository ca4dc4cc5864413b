"""Run a real client against ``interlingua serve`` inside a private network namespace.

:func:`run_scenario` writes a spec, then runs ``unshare -n sh -c 'ip link set lo up &&
exec python -m tests.real_clients.driver SPEC RESULT'``: the scripted upstream, the gateway
and the client all live in a namespace whose only interface is loopback, so a CLI's
update checks and telemetry cannot leave the machine, and nothing outside can reach
them. Each run has its own HOME under the test's tmp_path. The whole run is bounded in
time (the client by its own timeout inside the driver, the driver by this module).

The tests skip, saying why, when ``unshare -n`` is not permitted here or a pinned CLI is
not installed (``python -m tests.real_clients.install`` installs them).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .pins import NPM_CLIENTS, clients_dir, installed_version

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def _netns_problem() -> str | None:
    """Why a private network namespace cannot be made here, or None when it can."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip (util-linux, iproute2) not installed"
    try:
        done = subprocess.run(
            ["unshare", "-n", "sh", "-c", "ip link set lo up"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare -n failed: {exc}"
    if done.returncode != 0:
        return f"unshare -n is not permitted here: {done.stderr.strip()}"
    return None


def require_netns() -> None:
    """Skip the calling test when the scenario cannot be isolated."""
    problem = _netns_problem()
    if problem:
        pytest.skip(problem)


def npm_cli(package: str) -> Path:
    """The pinned npm CLI's executable, or skip the test saying how to install it."""
    version, command = NPM_CLIENTS[package]
    found = installed_version(package)
    if found != version:
        what = "not installed" if found is None else f"version {found} installed"
        pytest.skip(
            f"{package}@{version} {what} in {clients_dir()} "
            "(python -m tests.real_clients.install installs it; needs npm)"
        )
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    return clients_dir() / "node_modules" / ".bin" / command


def client_env(home: Path, **extra: str) -> dict[str, str]:
    """A small, explicit environment for a CLI: its own HOME, node on PATH, no proxies
    and nothing of the developer's (keys, configs) leaking in."""
    node = shutil.which("node")
    path = [str(clients_dir() / "node_modules" / ".bin")]
    if node:
        path.append(str(Path(node).parent))
    path += ["/usr/local/bin", "/usr/bin", "/bin"]
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "HOME": str(home),
        "PATH": os.pathsep.join(dict.fromkeys(path)),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "TMPDIR": str(home),
    }
    env.update(extra)
    return env


@dataclass
class Outcome:
    """What one scenario did: the client's run, the upstream's requests, the gateway log."""

    client: dict[str, Any]
    upstream: list[dict[str, Any]]
    gateway_log: str
    error: str | None

    @property
    def stdout(self) -> str:
        return str(self.client.get("stdout", ""))

    @property
    def stderr(self) -> str:
        return str(self.client.get("stderr", ""))

    @property
    def chat_bodies(self) -> list[dict[str, Any]]:
        """The Chat Completions bodies the upstream received, in order."""
        return [r["body"] for r in self.upstream if "body" in r]

    def scripted(self, step: int) -> dict[str, Any]:
        """The body of the request that ``step`` of the script answered."""
        for r in self.upstream:
            if r.get("step") == step:
                return dict(r["body"])
        raise AssertionError(f"no request took step {step}\n{self.report()}")

    def report(self) -> str:
        """Everything worth reading when an assertion fails."""
        upstream = [
            f"{r['method']} {r['path']} step={r.get('step')} model={r.get('body', {}).get('model')}"
            for r in self.upstream
        ]
        return (
            f"error: {self.error}\nclient: rc={self.client.get('returncode')} "
            f"timed_out={self.client.get('timed_out')} {self.client.get('seconds')}s\n"
            f"--- stdout\n{self.stdout[-4000:]}\n--- stderr\n{self.stderr[-6000:]}\n"
            f"--- upstream\n"
            + "\n".join(upstream)
            + f"\n--- gateway log\n{self.gateway_log[-6000:]}"
        )

    def assert_ok(self) -> None:
        """The run finished by itself with exit status 0."""
        assert self.error is None and self.client.get("returncode") == 0, self.report()


def run_scenario(
    tmp_path: Path,
    *,
    argv: list[str],
    env: dict[str, str],
    config: dict[str, Any] | None,
    steps: list[dict[str, Any]] | None = None,
    files: dict[str, str] | None = None,
    timeout: float = 60,
    gateway_timeout: float = 60,
) -> Outcome:
    """Run the client command against a fresh gateway (and upstream, when ``steps``) in a
    private network namespace; see driver.py for the spec's fields."""
    require_netns()
    work = tmp_path / "scenario"
    work.mkdir(parents=True, exist_ok=True)
    cwd = tmp_path / "project"
    cwd.mkdir(exist_ok=True)
    spec = {
        "work": str(work),
        "steps": steps,
        "config": config,
        "files": files or {},
        "gateway_timeout": gateway_timeout,
        "client": {"argv": argv, "env": env, "cwd": str(cwd), "timeout": timeout},
    }
    spec_path, result_path = work / "spec.json", work / "result.json"
    spec_path.write_text(json.dumps(spec))
    driver_env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper()}
    script = 'ip link set lo up && exec "$0" -m tests.real_clients.driver "$1" "$2"'
    proc = subprocess.Popen(
        ["unshare", "-n", "sh", "-c", script, sys.executable, str(spec_path), str(result_path)],
        cwd=ROOT,
        env=driver_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout + gateway_timeout + 30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        text = out.decode(errors="replace")
        raise AssertionError(f"the scenario overran its time: {text}") from None
    if not result_path.exists():
        raise AssertionError(f"the driver wrote no result: {out.decode(errors='replace')}")
    result = json.loads(result_path.read_text())
    return Outcome(
        result["client"] or {}, result["upstream"], result["gateway_log"], result["error"]
    )
