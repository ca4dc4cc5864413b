"""Peers measured side by side with the gateway (``--peers litellm``).

LiteLLM's proxy is installed into its own venv, ``bench/.venvs/litellm`` (kept out of
git), so none of its dependencies touch the project's environment. The version is pinned:
the issue's reference figures are LiteLLM 1.106, and the 1.107.0 upload was a compromised
release (withdrawn from PyPI), so "latest 1.x" is not something to install blindly.
1.106.2 is the newest 1.106 whose dependencies resolve here (1.106.10 asks for a certifi
newer than the registry has). ``--litellm-spec`` overrides the pin.

The config is the gateway's routes, expressed as LiteLLM ``model_list`` entries pointing
at the same nginx paths; one worker, no database, no callbacks, the bundled model cost
map (no fetch at start), and the same client key as the gateway checks (LiteLLM 1.106
refuses to start without a master key). The proxy gets a minimal environment: only what it needs to run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from .procs import BenchError, free_port, say, start, wait_ready
from .scenarios import CLIENT_KEY, DEPLOYMENTS, ROUTES, UPSTREAMS
from .servers import GatewayProcess

VENVS = Path(__file__).resolve().parent / ".venvs"
LITELLM_SPEC = "litellm[proxy]==1.106.2"
_MARKER = ".bench-installed"


def litellm_config(nginx_base: str) -> dict[str, Any]:
    """The LiteLLM proxy config equivalent to :func:`bench.scenarios.gateway_config`."""
    entries = []
    deployments = [(alias, upstream, model, None) for alias, (upstream, model) in ROUTES.items()]
    deployments += [
        (alias, upstream, model, weight)
        for alias, entries_of in DEPLOYMENTS.items()
        for upstream, model, weight in entries_of
    ]
    for alias, upstream, model, weight in deployments:
        kind, path = UPSTREAMS[upstream]
        # LiteLLM appends /chat/completions to an openai api_base and /v1/messages to
        # an anthropic one, as interlingua does with base_url; its openai provider
        # answers a /v1/responses request with the upstream's /responses (our kind
        # responses).
        kind = "openai" if kind == "responses" else kind
        params = {"model": f"{kind}/{model}", "api_base": nginx_base + path, "api_key": "sk-bench"}
        if alias.startswith("bench-r2o"):
            # A Responses client to an openai/ model over a Chat upstream: LiteLLM calls
            # the upstream's own /responses unless told to bridge to Chat Completions,
            # which the scenario (and interlingua) does.
            params["use_chat_completions_api"] = True
        if weight is not None:  # LiteLLM's router: the same model_name = deployments
            params["weight"] = weight
        entries.append({"model_name": alias, "litellm_params": params})
    return {
        "model_list": entries,
        "litellm_settings": {
            "drop_params": True,
            "telemetry": False,
            # Anthropic clients to an openai/ model: LiteLLM 1.106 calls the upstream's
            # Responses API (/v1/responses) unless told to use Chat Completions, which is
            # what the gateway (and every OpenAI-compatible server) speaks.
            "use_chat_completions_url_for_anthropic_messages": True,
        },
        "general_settings": {"master_key": CLIENT_KEY},
    }


def ensure_litellm(spec: str = LITELLM_SPEC, venvs: Path = VENVS) -> Path:
    """The ``litellm`` executable in its venv, creating the venv and installing if needed."""
    venv = venvs / "litellm"
    exe = venv / "bin" / "litellm"
    marker = venv / _MARKER
    if exe.exists() and marker.exists() and marker.read_text().strip() == spec:
        return exe
    venvs.mkdir(parents=True, exist_ok=True)
    if not (venv / "bin" / "python").exists():
        say(f"creating {venv}")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    say(f"installing {spec} into {venv} (this can take a few minutes)")
    log = venvs / "litellm-install.log"
    with log.open("wb") as out:
        code = subprocess.run(
            [str(venv / "bin" / "pip"), "install", "--disable-pip-version-check", spec],
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=1800,
        ).returncode
    if code != 0 or not exe.exists():
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        raise BenchError(f"installing {spec} failed (log: {log}):\n{tail}")
    marker.write_text(spec + "\n")
    return exe


def installed_version(exe: Path) -> str:
    """The installed LiteLLM version (from its venv's metadata)."""
    python = exe.parent / "python"
    code = "import importlib.metadata as m; print(m.version('litellm'))"
    result = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=60)
    return result.stdout.strip() or "unknown"


def _environment(venv_bin: Path) -> dict[str, str]:
    env = {
        "PATH": f"{venv_bin}:/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
        # Offline and quiet: the cost map shipped in the package, no telemetry, errors
        # only in the log (the "no database, no callbacks" setting).
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        "LITELLM_TELEMETRY": "False",
        "DISABLE_ADMIN_UI": "True",
    }
    return env


class LiteLLM(GatewayProcess):
    """The LiteLLM proxy as a :class:`bench.servers.Target`; a context manager."""

    def __init__(self, exe: Path, nginx_base: str, tmp: Path) -> None:
        self.exe = exe
        self.tmp = tmp / "litellm"
        self.nginx_base = nginx_base
        self.version = installed_version(exe)
        self.label = f"litellm {self.version}"
        self.base = ""
        self.process = None

    def __enter__(self) -> LiteLLM:
        self.tmp.mkdir(parents=True, exist_ok=True)
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        config = self.tmp / "config.yaml"
        config.write_text(yaml.safe_dump(litellm_config(self.nginx_base), sort_keys=False))
        command = [str(self.exe), "--config", str(config), "--host", "127.0.0.1"]
        command += ["--port", str(port), "--num_workers", "1"]
        env = _environment(self.exe.parent)
        self.process = start(command, self.tmp / "log", env=env)
        try:
            wait_ready(f"{self.base}/health/liveliness", self.process.proc, 180, "litellm")
        except BenchError as exc:
            tail = self.process.log_tail()
            self.process.stop()
            raise BenchError(f"{exc}\n{tail}") from None
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.stop()
