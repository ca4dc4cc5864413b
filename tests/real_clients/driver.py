"""One real-client scenario, run inside a private network namespace.

``python -m tests.real_clients.driver SPEC.json RESULT.json`` (from the repo root, under
``unshare -n`` with loopback up: see harness.py) starts, in this order,

1. the scripted Chat Completions upstream (scripted_upstream.py), when the spec has
   ``steps``;
2. ``interlingua serve`` with the spec's gateway ``config`` (none: the bundled local
   model), on a free port, waiting for ``/health``;
3. the client command (``argv`` with its own ``env`` and ``cwd``), bounded by
   ``timeout`` seconds (then its whole process group is killed);

then stops them all and writes what happened as JSON: the client's exit status and
output, every request the upstream received (bodies parsed) and the gateway's log.

In the spec, the strings ``{gateway}`` (``http://127.0.0.1:PORT``) and ``{upstream}``
(the upstream's ``.../v1``) are replaced anywhere in ``config``, ``files``, ``argv`` and
``env``; ``files`` (path -> text) are written before the client starts.

The namespace has no route off the machine, so whatever a CLI tries to reach besides the
gateway (update checks, telemetry) fails at once instead of leaving it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from .scripted_upstream import ScriptedUpstream


def _substitute(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        for key, replacement in names.items():
            value = value.replace("{" + key + "}", replacement)
        return value
    if isinstance(value, list):
        return [_substitute(v, names) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, names) for k, v in value.items()}
    return value


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(10)


@contextlib.contextmanager
def _gateway(config: dict[str, Any] | None, work: Path, timeout: float) -> Iterator[str]:
    """``interlingua serve`` on a free port until the block ends; yields its base URL."""
    port = _free_port()
    args = [sys.executable, "-m", "interlingua.cli", "serve", "--port", str(port)]
    if config is not None:
        path = work / "gateway.yaml"
        path.write_text(yaml.safe_dump(config))
        args += ["--config", str(path)]
    log = (work / "gateway.log").open("wb")
    env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper()}
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen(
        args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"interlingua serve exited early ({proc.returncode})")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(url + "/health", timeout=1) as answer,
            ):
                if answer.status == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"interlingua serve was not healthy within {timeout}s")
            time.sleep(0.05)
        yield url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
        log.close()


def _run_client(client: dict[str, Any]) -> dict[str, Any]:
    """Run the client command to its end or its timeout; its output and exit status."""
    started = time.monotonic()
    proc = subprocess.Popen(
        client["argv"],
        cwd=client.get("cwd"),
        env=client["env"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the CLI's own children (shell commands) die with it
    )
    timed_out = False
    try:
        out, err = proc.communicate(timeout=client["timeout"])
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        out, err = proc.communicate()
    _kill_group(proc)  # anything it left running in its group
    return {
        "returncode": proc.returncode,
        "stdout": out.decode(errors="replace"),
        "stderr": err.decode(errors="replace"),
        "timed_out": timed_out,
        "seconds": round(time.monotonic() - started, 2),
    }


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one scenario (see the module docstring); the result as a JSON-ready dict."""
    work = Path(spec["work"])
    result: dict[str, Any] = {"upstream": [], "client": None, "error": None}
    upstream = ScriptedUpstream(spec.get("steps") or [], spec.get("default", "ok"))
    names: dict[str, str] = {}
    try:
        if spec.get("steps") is not None:
            names["upstream"] = upstream.start()
        config = _substitute(spec.get("config"), names)
        with _gateway(config, work, spec.get("gateway_timeout", 60)) as url:
            names["gateway"] = url
            for path, text in _substitute(spec.get("files", {}), names).items():
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                Path(path).write_text(text)
            result["client"] = _run_client(_substitute(spec["client"], names))
    except Exception as exc:  # reported to the test, which shows it with the logs
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        upstream.stop()
        result["upstream"] = upstream.requests
        log = work / "gateway.log"
        result["gateway_log"] = log.read_text(errors="replace") if log.exists() else ""
    return result


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    Path(sys.argv[2]).write_text(json.dumps(run(spec)))


if __name__ == "__main__":
    main()
