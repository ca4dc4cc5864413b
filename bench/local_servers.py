"""The three servers of the local engine benchmark, and the requests sent to them.

- **interlingua**: ``python -m interlingua.cli serve`` -- with no config (the bundled
  SmolLM2) when the engine takes no ``parallel`` key, else with the effective no-config
  config (``serve --print-config``) plus ``parallel: N`` on its local upstream;
- **llama-server**: llama.cpp's C++ server (``bench.local_build``) with ``--parallel N``;
- **llama_cpp.server**: llama-cpp-python's Python server, one request at a time.

Every process is ours, in its own process group, stopped in ``finally``.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from .local_stats import Burst, Sample, burst_of, chat_body, parse_stream, split_lines
from .procs import BenchError, Process, start

OURS = "interlingua"
CPP = "llama-server"
PY = "llama_cpp.server"
SERVERS = (OURS, CPP, PY)

STARTUP_TIMEOUT = 60.0
REQUEST_TIMEOUT = 300.0
POLL_INTERVAL = 0.02


@dataclass(frozen=True, slots=True)
class Engine:
    """The model file and the settings every server gets."""

    model: str
    n_threads: int
    n_ctx: int  # the context one request may use (llama-server: per slot)
    parallel: int  # llama-server's slots; ours too when its engine takes ``parallel``
    #: llama-server's -fa: "auto" (llama.cpp's default, what our engine's context gets:
    #: on for the CPU), "on" or "off" (llama_cpp.Llama's default, the engine before parallel)
    flash_attn: str = "auto"
    extra_cpp_args: tuple[str, ...] = ()


def engine_defaults() -> tuple[str, int, int]:
    """``(gguf path, n_threads, n_ctx)`` our default config's engine uses."""
    from interlingua.upstreams.local import LlamaEngine, bundled_model_path
    from interlingua.upstreams.local.upstream import DEFAULT_N_CTX

    path = bundled_model_path("smollm2")
    return path, LlamaEngine(path, n_ctx=DEFAULT_N_CTX).n_threads, DEFAULT_N_CTX


def our_config(parallel: int) -> dict[str, object] | None:
    """The effective no-config config plus ``parallel`` on every local upstream, or None
    when our engine refuses the key (checked by ``serve --print-config`` on it, so what
    decides is the code the server will run)."""
    printed = _print_config(None)
    if printed.returncode != 0:
        raise BenchError(f"interlingua serve --print-config failed: {printed.stderr.strip()}")
    config: dict[str, Any] = yaml.safe_load(printed.stdout)
    for upstream in config["upstreams"].values():
        if upstream.get("kind") == "local":
            upstream["parallel"] = parallel
    with _temp_yaml(config) as path:
        checked = _print_config(path)
    if checked.returncode == 0:
        return config
    if "parallel" in checked.stderr:
        return None
    raise BenchError(f"interlingua refused the generated config: {checked.stderr.strip()}")


def _print_config(path: Path | None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "interlingua.cli", "serve", "--print-config"]
    if path is not None:
        command += ["--config", str(path)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


@contextmanager
def _temp_yaml(config: dict[str, object]) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="interlingua-local-bench-") as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        yield path


def ours_command(port: int | str, config: Path | str | None = None) -> list[str]:
    """``interlingua serve`` on ``port``: the bundled model (with ``config`` when given)."""
    command = [sys.executable, "-m", "interlingua.cli", "serve", "--port", str(port)]
    return command if config is None else [*command, "--config", str(config)]


def cpp_command(binary: Path | str, port: int | str, engine: Engine) -> list[str]:
    """llama-server on the same GGUF: same threads (decode and batch), ``parallel`` slots,
    and ``-c`` = per-request context × slots, because llama-server splits ``-c`` evenly
    across its slots (non-unified KV cache, the default with an explicit ``--parallel``)."""
    threads = str(engine.n_threads)
    return [
        *(str(binary), "-m", engine.model, "--host", "127.0.0.1", "--port", str(port)),
        *("-t", threads, "-tb", threads, "-c", str(engine.n_ctx * engine.parallel)),
        *("--parallel", str(engine.parallel), "-fa", engine.flash_attn),
        *engine.extra_cpp_args,
    ]


def py_command(port: int | str, engine: Engine) -> list[str]:
    """llama-cpp-python's own server on the same GGUF with the same threads and context.

    ``--interrupt_requests False``: by default it ends a running stream (``[DONE]`` early)
    as soon as another request arrives; it should queue them, as ours does.
    ``--flash_attn``: True unless ``engine.flash_attn`` is "off" (it has no "auto"; auto
    means on for the CPU).
    """
    threads = str(engine.n_threads)
    return [
        *(sys.executable, "-m", "llama_cpp.server", "--model", engine.model),
        *("--host", "127.0.0.1", "--port", str(port)),
        *("--n_threads", threads, "--n_threads_batch", threads, "--n_ctx", str(engine.n_ctx)),
        *("--flash_attn", str(engine.flash_attn != "off")),
        *("--interrupt_requests", "False"),
    ]


def display(command: list[str]) -> str:
    """A command as a reader would type it (``python`` for this interpreter)."""
    head = "python" if command[0] == sys.executable else command[0]
    return " ".join([head, *command[1:]])


@dataclass(slots=True)
class Target:
    """A running server: its name, URL, client and how long it took to answer first."""

    name: str
    proc: Process
    url: str
    client: httpx.Client
    startup_s: float
    ignore_eos: bool = False  # only llama-server has it
    bodies: dict[tuple[int, int], bytes] = field(default_factory=dict)

    def body(self, max_tokens: int, seed: int) -> bytes:
        """The streamed request body for this server (cached)."""
        key = (max_tokens, seed)
        if key not in self.bodies:
            self.bodies[key] = chat_body(max_tokens, seed, True, ignore_eos=self.ignore_eos)
        return self.bodies[key]


def wait_answer(client: httpx.Client, url: str, proc: Process, timeout: float) -> float:
    """Poll ``url`` with a 1-token request until it answers 200; the time that took."""
    body = chat_body(1, 0, stream=False)
    started = time.perf_counter()
    deadline = started + timeout
    last = "no answer"
    while time.perf_counter() < deadline:
        if proc.proc.poll() is not None:
            raise BenchError(f"server exited with {proc.proc.returncode}:\n{proc.log_tail()}")
        try:
            resp = client.post(url, content=body, headers={"content-type": "application/json"})
            if resp.status_code == 200:
                return time.perf_counter() - started
            last = f"HTTP {resp.status_code}: {resp.text[:200]}"
        except httpx.TransportError as exc:
            last = repr(exc)
        time.sleep(POLL_INTERVAL)
    raise BenchError(f"no answer from {url} after {timeout:.0f}s ({last})\n{proc.log_tail()}")


@contextmanager
def running(name: str, command: list[str], log: Path) -> Iterator[Target]:
    """Start ``command`` (its port is its ``--port``), wait for a first answer, yield it."""
    port = command[command.index("--port") + 1]
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    # Enough connections for every request of a burst at once (httpx allows 100).
    timeout = httpx.Timeout(REQUEST_TIMEOUT, connect=5.0)
    with httpx.Client(timeout=timeout) as client:
        started = time.perf_counter()
        proc = start(command, log)
        try:
            spawn = time.perf_counter() - started
            seconds = spawn + wait_answer(client, url, proc, STARTUP_TIMEOUT)
            yield Target(name, proc, url, client, seconds, ignore_eos=name == CPP)
        finally:
            proc.stop()


def stream_once(
    client: httpx.Client, url: str, body: bytes, max_tokens: int, go: threading.Barrier | None
) -> tuple[float, float, Sample]:
    """One streamed request, each network read stamped on arrival: ``(sent, end, sample)``.

    With ``go``, waits at that barrier first, so the requests of a burst leave together.
    """
    reads: list[tuple[float, bytes]] = []
    headers = {"content-type": "application/json"}
    if go is not None:
        go.wait(timeout=30)
    sent = time.perf_counter()
    with client.stream("POST", url, content=body, headers=headers) as resp:
        if resp.status_code != 200:
            raise BenchError(f"{url}: HTTP {resp.status_code}: {resp.read()[:300]!r}")
        for chunk in resp.iter_raw():
            reads.append((time.perf_counter(), chunk))
    end = time.perf_counter()
    return sent, end, parse_stream(split_lines(reads), sent, end, max_tokens)


def burst(target: Target, concurrency: int, max_tokens: int, seed: int) -> Burst:
    """``concurrency`` identical streamed requests to ``target`` at once, one thread each."""
    body = target.body(max_tokens, seed)
    go = threading.Barrier(concurrency) if concurrency > 1 else None
    with ThreadPoolExecutor(concurrency, thread_name_prefix=f"bench-{target.name}") as pool:
        futures = [
            pool.submit(stream_once, target.client, target.url, body, max_tokens, go)
            for _ in range(concurrency)
        ]
        return burst_of([f.result() for f in futures])
