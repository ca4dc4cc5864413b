"""Process plumbing shared by the harness: tools, free ports, readiness, RSS, shutdown.

Every server the harness starts is its own child in its own session (process group), so
stopping it ends exactly what we started -- a server that forks workers included -- and
nothing else on the machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

#: binary -> Debian package that provides it
DEBIAN_TOOLS = {"nginx": "nginx-light", "wrk": "wrk"}


class BenchError(RuntimeError):
    """A failure that ends the run with a message (no traceback needed)."""


def say(message: str) -> None:
    """Progress on stderr, so stdout stays the report."""
    print(f"bench: {message}", file=sys.stderr, flush=True)


def find_tool(name: str) -> str | None:
    """The path of ``name`` on PATH or in the sbin directories Debian installs nginx to."""
    found = shutil.which(name)
    if found:
        return found
    for folder in ("/usr/sbin", "/usr/local/sbin", "/sbin"):
        candidate = Path(folder) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def ensure_tools(tools: dict[str, str] = DEBIAN_TOOLS) -> dict[str, str]:
    """Paths of the needed binaries, installing the missing ones from Debian first.

    Runs ``apt-get install`` (and ``apt-get update`` once if the first try fails, e.g.
    on a machine whose package lists were never fetched). Needs root; otherwise says
    which command to run.
    """
    missing = {name: pkg for name, pkg in tools.items() if find_tool(name) is None}
    if missing:
        packages = sorted(set(missing.values()))
        command = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            raise BenchError(
                f"missing {', '.join(missing)}; install them with: sudo {' '.join(command)}"
            )
        say(f"installing {' '.join(packages)} from Debian ({' '.join(command)})")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        if _quiet_run(command, env) != 0:
            say("apt-get install failed; running apt-get update once and retrying")
            _quiet_run(["apt-get", "update"], env)
            if _quiet_run(command, env) != 0:
                raise BenchError(f"could not install {' '.join(packages)}: {' '.join(command)}")
    paths = {name: find_tool(name) for name in tools}
    absent = [name for name, path in paths.items() if path is None]
    if absent:
        raise BenchError(f"{', '.join(absent)} still not found after installing")
    return {name: path for name, path in paths.items() if path is not None}


def _quiet_run(command: list[str], env: dict[str, str]) -> int:
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip().splitlines()[-5:]
        say("  " + "\n  ".join(tail))
    return result.returncode


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float, what: str) -> None:
    """Poll ``url`` until it answers 2xx; fail if ``proc`` exits or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"{what} exited with code {proc.returncode} while starting")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if 200 <= resp.status < 300:
                    return
                last = f"HTTP {resp.status}"
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
        except OSError as exc:
            last = str(exc)
        time.sleep(0.1)
    raise BenchError(f"{what} not ready at {url} after {timeout:.0f}s ({last})")


def start(command: list[str], log_path: Path, env: dict[str, str] | None = None) -> Process:
    """Start ``command`` in its own session with stdout and stderr going to ``log_path``."""
    log = log_path.open("wb")
    try:
        proc = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    finally:
        log.close()
    return Process(proc, log_path)


class Process:
    """A server we started: its ``Popen``, its log, and a clean way to stop it."""

    def __init__(self, proc: subprocess.Popen[bytes], log_path: Path) -> None:
        self.proc = proc
        self.log_path = log_path

    @property
    def pid(self) -> int:
        """The process id."""
        return self.proc.pid

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the server's output (for error messages)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM our process group, then SIGKILL it if it has not exited in ``grace``."""
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(grace)


def parse_vmrss_kb(status_text: str) -> int:
    """``VmRSS`` in kB from the text of ``/proc/<pid>/status`` (0 when absent)."""
    for line in status_text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def rss_kb(pid: int) -> int:
    """Resident memory of ``pid`` plus all its descendants, in kB (0 if it is gone).

    Summed over the tree because a peer may run its server in a child process.
    """
    total = 0
    for member in [pid, *_descendants(pid)]:
        try:
            total += parse_vmrss_kb(Path(f"/proc/{member}/status").read_text())
        except OSError:
            continue
    return total


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # The command name may hold spaces and parentheses: the fields after the last ')'.
        fields = stat[stat.rfind(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    out: list[int] = []
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        out.append(child)
        todo.extend(children.get(child, []))
    return out
