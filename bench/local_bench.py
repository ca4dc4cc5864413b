"""Local engine benchmark: interlingua's embedded engine vs llama.cpp's servers.

    python -m bench.local_bench              # 6 rounds at 1, 4, 8 concurrent + 3 cold starts each
    python -m bench.local_bench --rounds 10 --concurrency 1,4,8 --parallel 4
    python -m bench.local_bench --help

Three servers up at once on 127.0.0.1, on the same GGUF (the bundled SmolLM2), with the
same threads, context per request and sampling (seeded):

- ``interlingua serve`` -- no config, or the no-config config plus ``parallel: N`` when
  our engine takes that key (``bench.local_servers.our_config``);
- llama.cpp's C++ ``llama-server --parallel N``, built once from the llama.cpp sources
  vendored in the pinned llama-cpp-python sdist (``bench.local_build``; left out, with the
  reason in the report, when cmake or a compiler is missing);
- llama-cpp-python's Python server (``python -m llama_cpp.server``), one request at a time.

Two measurements:

1. **Aggregate tokens/s and time to first token.** After one warm-up burst each, every
   round sends, at each concurrency c, c identical streamed OpenAI Chat requests at once
   to each server in turn, the server order alternating every round (ABC, CBA...: the
   shared machine's noise falls on all). Every request asks for ``--max-tokens`` (64)
   tokens; llama-server gets ``ignore_eos``, the others a prompt and seed that run the
   full length (an early stop is flagged in the report). Aggregate tokens/s of a burst:
   its requests' tokens over first request sent -> last byte of the last answer. Reported
   per concurrency: each server's median (range) over the rounds, the median (range) of
   the per-round ratios ours / theirs, and TTFT (request sent -> first content) p50 / p95
   over every request.
2. **Start -> first answer.** Spawn each server (interpreter start, imports and model
   load included), POST ``max_tokens: 1`` every 20 ms until one answers 200, stop it;
   ``--startup-runs`` times each, alternating. Page cache warm.

The markdown report goes to stdout (progress to stderr); ``docs/performance.md`` keeps
the latest figures. The exit code is 1 when a request failed.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import httpx
import yaml

from .local_build import BuildSkipped, Built, ensure_llama_server
from .local_report import Setup, render_report
from .local_servers import (
    CPP,
    OURS,
    PY,
    SERVERS,
    Engine,
    Target,
    burst,
    cpp_command,
    display,
    engine_defaults,
    our_config,
    ours_command,
    py_command,
    running,
)
from .local_stats import (
    MAX_TOKENS,
    SEED,
    Burst,
    alternate,
    parse_engine_log,
    parse_llama_server_log,
)
from .procs import BenchError, free_port, say


def check_logs(targets: dict[str, Target], engine: Engine, ours_parallel: bool) -> list[str]:
    """Fail unless the servers' logs show the settings we gave them; what was confirmed."""
    checks = [_check_our_log(targets[OURS], engine, ours_parallel)]
    if CPP in targets:
        checks.append(_check_cpp_log(targets[CPP], engine))
    return checks


def _check_our_log(target: Target, engine: Engine, ours_parallel: bool) -> str:
    log = parse_engine_log(target.proc.log_path.read_text(errors="replace"))
    if log is None:
        return f"{OURS}: no 'loaded … (n_ctx …, … threads)' line (not confirmed)"
    sequences = engine.parallel if ours_parallel else log.sequences
    if (log.n_ctx, log.n_threads, log.sequences) != (engine.n_ctx, engine.n_threads, sequences):
        raise BenchError(
            f"{OURS} loaded the model with n_ctx {log.n_ctx}, {log.n_threads} threads, "
            f"{log.sequences} sequences; expected n_ctx {engine.n_ctx}, {engine.n_threads} "
            f"threads{f', {sequences} sequences' if ours_parallel else ''}"
        )
    shown = "" if log.sequences is None else f" × {log.sequences} sequences"
    return f"{OURS} n_ctx {log.n_ctx}{shown}, {log.n_threads} threads"


def _check_cpp_log(target: Target, engine: Engine) -> str:
    log = parse_llama_server_log(target.proc.log_path.read_text(errors="replace"))
    expected = (engine.parallel, engine.n_ctx, engine.n_threads)
    got = None if log is None else (log.n_slots, log.n_ctx_slot, log.n_threads)
    batch_ok = log is None or log.n_threads_batch in (None, engine.n_threads)
    if got != expected or not batch_ok:
        raise BenchError(
            f"{CPP} runs with (slots, n_ctx per slot, threads) {got}, expected {expected}"
            f"{'' if batch_ok else f' and batch threads {engine.n_threads}'}\n"
            f"{target.proc.log_tail()}"
        )
    batch = "" if log is None or log.n_threads_batch is None else f", batch {log.n_threads_batch}"
    return f"{CPP} {engine.parallel} slots, n_ctx_slot {engine.n_ctx}, n_threads {engine.n_threads}{batch}"


def commands(
    engine: Engine, config: Path | None, binary: Path | None, names: Sequence[str]
) -> dict[str, list[str]]:
    """Each server's command line on a free port."""
    out = {OURS: ours_command(free_port(), config)}
    if CPP in names and binary is not None:
        out[CPP] = cpp_command(binary, free_port(), engine)
    if PY in names:
        out[PY] = py_command(free_port(), engine)
    return out


@dataclass(frozen=True, slots=True)
class Plan:
    """What the tokens/s part sends."""

    levels: Sequence[int]  # concurrency levels
    rounds: int
    max_tokens: int
    seed: int
    ours_parallel: bool  # our config sets ``parallel``: its log must say so


def measure_rates(
    engine: Engine, plan: Plan, lines: dict[str, list[str]], tmp: Path
) -> tuple[dict[int, dict[str, list[Burst]]], list[str]]:
    """Every server up at once; one warm-up burst each, then ``plan.rounds`` alternating
    rounds; the bursts per concurrency and server, and what the logs confirmed."""
    rates: dict[int, dict[str, list[Burst]]] = {c: {n: [] for n in lines} for c in plan.levels}
    with ExitStack() as stack:
        targets = {
            name: stack.enter_context(running(name, command, tmp / f"rates-{name}.log"))
            for name, command in lines.items()
        }
        checks = check_logs(targets, engine, plan.ours_parallel)
        for name, target in targets.items():
            warm = burst(target, max(plan.levels), plan.max_tokens, plan.seed)
            say(f"warm-up {name}: {warm.concurrency} requests, {warm.rate:.1f} tokens/s")
        for i, order in enumerate(alternate(plan.rounds, list(targets))):
            for level in plan.levels:
                for name in order:
                    got = burst(targets[name], level, plan.max_tokens, plan.seed)
                    rates[level][name].append(got)
                    ttft = max(s.ttft_s for s in got.samples) * 1000
                    say(
                        f"round {i + 1}/{plan.rounds}, {level} concurrent, {name}: "
                        f"{got.tokens} tokens, {got.rate:.1f} tokens/s, slowest TTFT {ttft:.0f} ms"
                    )
    return rates, checks


def measure_startup(lines: dict[str, list[str]], runs: int, tmp: Path) -> dict[str, list[float]]:
    """Process start -> first 200 to a 1-token chat request, ``runs`` times each."""
    times: dict[str, list[float]] = {name: [] for name in lines}
    for i, order in enumerate(alternate(runs, list(lines))):
        for name in order:
            command = list(lines[name])
            command[command.index("--port") + 1] = str(free_port())
            with running(name, command, tmp / f"startup-{i}-{name}.log") as target:
                times[name].append(target.startup_s)
            say(f"startup {name}: {target.startup_s:.2f} s")
    return times


def machine() -> str:
    """CPU model, core count and Python/llama-cpp-python versions, for the report."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from importlib.metadata import version

    return (
        f"{os.cpu_count()} cores ({model}), Python {platform.python_version()}, "
        f"llama-cpp-python {version('llama-cpp-python')}"
    )


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _levels(text: str) -> list[int]:
    try:
        levels = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text!r}") from None
    if not levels or levels[0] < 1:
        raise argparse.ArgumentTypeError("concurrency levels must be integers >= 1")
    return levels


def options(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.local_bench",
        description="aggregate tokens/s, time to first token and start-up time: "
        "interlingua's local engine vs llama.cpp's llama-server and llama_cpp.server",
    )
    add = parser.add_argument
    add("--rounds", type=int, default=6, help="alternating rounds (default 6)")
    add("--concurrency", type=_levels, default=[1, 4, 8], help="levels, e.g. 1,4,8 (default)")
    add("--parallel", type=int, default=4, help="llama-server --parallel, ours parallel: (4)")
    add("--max-tokens", type=int, default=MAX_TOKENS, help="tokens per request (64)")
    add("--seed", type=int, default=SEED)
    add("--startup-runs", type=int, default=3, help="cold starts per server (3)")
    add("--no-rates", action="store_true", help="skip the tokens/s part")
    add("--no-startup", action="store_true", help="skip the start-up part")
    add("--without", action="append", choices=(CPP, PY), default=[], help="leave a peer out")
    add(
        "--flash-attn",
        choices=("auto", "on", "off"),
        default="auto",
        help="flash attention for the peers: llama-server -fa, llama_cpp.server --flash_attn "
        "(on unless off). Default auto, llama.cpp's default, which our engine's context "
        "uses (on for the CPU); off for an engine built on llama_cpp.Llama (before parallel)",
    )
    add("--llama-server-args", default="", help="more llama-server flags, one shell string")
    args = parser.parse_args(argv)
    if min(args.rounds, args.startup_runs, args.parallel) < 1 or args.max_tokens < 2:
        parser.error("--rounds, --startup-runs and --parallel must be >= 1, --max-tokens >= 2")
    return args


def _llama_server(names: Sequence[str]) -> tuple[Path | None, str]:
    """The llama-server binary (None when left out) and what the report says about it."""
    if CPP not in names:
        return None, "left out (--without)"
    try:
        built: Built = ensure_llama_server()
    except BuildSkipped as exc:
        say(f"{exc}; running without the llama-server peer")
        return None, f"left out: {exc}"
    state = "cached" if built.cached else "built now"
    return built.path, (
        f"built from llama-cpp-python {built.version}'s vendored llama.cpp, Release, "
        f"`{built.flags}`, static, curl/OpenSSL/web UI off ({state}; the build took "
        f"{built.build_seconds / 60:.1f} min)"
    )


def shown_commands(
    engine: Engine, binary: Path | None, configured: bool, names: Sequence[str]
) -> dict[str, str]:
    """The command lines for the report: placeholders for ports, paths and the config."""
    shown = dataclasses.replace(engine, model="<bundled gguf>")
    config = "<the no-config config + parallel>" if configured else None
    out = {OURS: display(ours_command("<free>", config))}
    if binary is not None and CPP in names:
        where = os.path.relpath(binary) if binary.is_relative_to(Path.cwd()) else str(binary)
        out[CPP] = display(cpp_command(where, "<free>", shown))
    if PY in names:
        out[PY] = display(py_command("<free>", shown))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run both measurements and print the report; 1 on any failure."""
    args = options(argv)
    argv = sys.argv[1:] if argv is None else list(argv)
    names = [name for name in SERVERS if name not in args.without]
    model, n_threads, n_ctx = engine_defaults()
    engine = Engine(
        model,
        n_threads,
        n_ctx,
        args.parallel,
        args.flash_attn,
        tuple(shlex.split(args.llama_server_args)),
    )
    load_before = _load()
    rates: dict[int, dict[str, list[Burst]]] = {}
    startup: dict[str, list[float]] = {}
    checks: list[str] = []
    try:
        binary, build = _llama_server(names)
        config = our_config(args.parallel)
        state = f"parallel: {args.parallel}" if config else "no parallel key yet: no config"
        say(f"interlingua: {state}")
        with tempfile.TemporaryDirectory(prefix="interlingua-local-bench-") as tmp:
            config_path = None
            if config is not None:
                config_path = Path(tmp) / "interlingua.yaml"
                config_path.write_text(yaml.safe_dump(config, sort_keys=False))
            lines = commands(engine, config_path, binary, names)
            if not args.no_rates:
                plan = Plan(
                    args.concurrency, args.rounds, args.max_tokens, args.seed, config is not None
                )
                rates, checks = measure_rates(engine, plan, lines, Path(tmp))
            if not args.no_startup:
                startup = measure_startup(lines, args.startup_runs, Path(tmp))
    except (BenchError, httpx.HTTPError, subprocess.SubprocessError) as exc:
        print(f"bench.local_bench: {exc}", file=sys.stderr)
        return 1
    setup = Setup(
        day=date.today().isoformat(),
        command=shlex.join(["python", "-m", "bench.local_bench", *argv]),
        commands=shown_commands(engine, binary, config is not None, names),
        n_threads=n_threads,
        n_ctx=n_ctx,
        parallel=args.parallel,
        ours_parallel=config is not None,
        max_tokens=args.max_tokens,
        seed=args.seed,
        machine=machine(),
        load_before=load_before,
        load_after=_load(),
        build=build,
        checks=tuple(checks),
    )
    print(render_report(setup, rates, startup))
    return 0


if __name__ == "__main__":
    sys.exit(main())
