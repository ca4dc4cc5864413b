"""The benchmark run: mock upstream up, each server under load in turn, report out.

Order: translation microbenchmarks (nothing else of ours running), nginx alone (the
direct baselines), then interlingua, then each peer, one server at a time so they never
compete for the two cores. Each (server, scenario) pair is probed once first -- one
request whose answer is checked -- then warmed up, then measured at each connection count.

Any failed request or failed probe of interlingua fails the run (exit 1) after the report
is written; a peer that cannot do a scenario gets a note in the table instead.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path

import interlingua

from . import ab, micro, profile, wrk
from .nginx import Nginx
from .peers import LITELLM_SPEC, LiteLLM, ensure_litellm
from .procs import BenchError, ensure_tools, rss_kb, say
from .report import OURS, Row, RunInfo, TeamFigure, find_row, render
from .scenarios import ALL, BY_NAME, Scenario, check_answer, request_body
from .servers import Direct, Interlingua, Target, cli_supports_workers

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Options:
    """What to run (from the command line; see ``bench/__main__.py``)."""

    duration: float = 7.0
    warmup: float = 1.0
    connections: tuple[int, ...] = (1, 10, 50)
    scenarios: tuple[str, ...] = tuple(s.name for s in ALL)
    peers: tuple[str, ...] = ()
    #: also run the gateway with keys, usage log and metrics on, and with them off
    team: bool = False
    workers: int = 1
    profile: tuple[str, ...] = ()
    repeat: int = 1
    #: floor on a peer's run length: at 50 connections LiteLLM takes ~1-2 s a request, and
    #: a 2 s run (--quick) would then count almost nothing but the requests still in flight
    peer_min_duration: float = 6.0
    micro: bool = True
    results: Path = RESULTS
    command: str = "python -m bench"
    litellm_spec: str = ""


@dataclass
class Context:
    """What the load runs share."""

    options: Options
    wrk: str
    bodies: dict[str, Path]
    rows: list[Row] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    profiles: list[str] = field(default_factory=list)


def probe(target: Target, scenario: Scenario, body: bytes) -> str:
    """Why one request of ``scenario`` to ``target`` is not answered right ("" if it is)."""
    headers = dict(h.split(": ", 1) for h in scenario.headers)
    headers["Content-Type"] = "application/json"
    request = urllib.request.Request(target.base + scenario.path, body, headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            return check_answer(
                scenario, resp.status, resp.headers.get("content-type", ""), resp.read()
            )
    except urllib.error.HTTPError as exc:
        return check_answer(scenario, exc.code, "", exc.read())
    except OSError as exc:
        return f"request failed: {exc}"


def measure(ctx: Context, target: Target, scenario: Scenario) -> None:
    """Probe, warm up and load ``scenario`` on ``target`` at every connection count."""
    opts = ctx.options
    body_file = ctx.bodies[scenario.name]
    url = target.base + scenario.path
    problem = probe(target, scenario, body_file.read_bytes())
    if problem:
        say(f"{target.label}: {scenario.name}: probe FAILED: {problem}")
        _record_failure(ctx, target, scenario, f"probe failed: {problem[:120]}")
        return
    try:
        if opts.warmup > 0:
            wrk.run(ctx.wrk, url, body_file, max(opts.connections), opts.warmup, scenario.headers)
        for conns in opts.connections:
            result = _load(ctx, target, scenario, conns)
            rss = rss_kb(target.pid) / 1024
            if result.requests == 0:
                say(f"{target.label}: {scenario.name} c={conns}: no request completed")
                _record_failure(
                    ctx, target, scenario, f"no request completed at {conns} conns", conns
                )
                continue
            row = Row(
                target.label,
                scenario.name,
                conns,
                result.rps,
                result.p50_ms,
                result.p99_ms,
                rss,
                result.errors,
            )
            ctx.rows.append(row)
            flag = "" if result.errors == 0 else f"  ERRORS {result.errors}"
            say(
                f"{target.label:16} {scenario.name:24} c={conns:<3} {result.rps:9,.0f} req/s  "
                f"p50 {result.p50_ms:7.2f} ms  p99 {result.p99_ms:7.2f} ms  rss {rss:5.0f} MB{flag}"
            )
            if result.errors and target.label.startswith(OURS):
                ctx.failures.append(
                    f"{target.label}: {scenario.name} at {conns} connections: "
                    f"{result.errors} failed requests"
                )
    except RuntimeError as exc:
        say(f"{target.label}: {scenario.name}: wrk failed: {exc}")
        _record_failure(ctx, target, scenario, "wrk failed")


def _load(ctx: Context, target: Target, scenario: Scenario, conns: int) -> wrk.WrkResult:
    """``repeat`` wrk runs; the median by requests/s, with every run's errors counted."""
    opts = ctx.options
    duration = opts.duration
    if not target.label.startswith(OURS) and not scenario.direct:
        duration = max(duration, opts.peer_min_duration)
    url = target.base + scenario.path
    body = ctx.bodies[scenario.name]
    runs = [
        wrk.run(ctx.wrk, url, body, conns, duration, scenario.headers) for _ in range(opts.repeat)
    ]
    runs.sort(key=lambda r: r.rps)
    median = runs[len(runs) // 2]
    errors = sum(r.errors for r in runs)
    return replace(median, status_errors=errors - median.socket_errors)


def _record_failure(
    ctx: Context, target: Target, scenario: Scenario, note: str, only: int | None = None
) -> None:
    done = {
        row.connections
        for row in ctx.rows
        if (row.server, row.scenario) == (target.label, scenario.name)
    }
    for conns in ctx.options.connections:
        if conns not in done and only in (None, conns):
            ctx.rows.append(Row(target.label, scenario.name, conns, 0, 0, 0, 0, note=note))
    if target.label.startswith(OURS):
        ctx.failures.append(f"{target.label}: {scenario.name}: {note}")


def profile_scenario(ctx: Context, target: Target, scenario: Scenario, tmp: Path) -> None:
    """One extra, unreported load run with py-spy attached; its hot spots go in the report."""
    if profile.pyspy() is None:
        say("--profile needs py-spy: pip install py-spy")
        return
    seconds = max(3.0, ctx.options.duration)
    out = tmp / f"profile-{scenario.name}.txt"
    conns = max(ctx.options.connections)
    sampler = profile.record(target.pid, seconds, out)
    time.sleep(0.5)  # let py-spy attach before the load starts
    url = target.base + scenario.path
    wrk.run(ctx.wrk, url, ctx.bodies[scenario.name], conns, seconds, scenario.headers)
    _, err = sampler.communicate(timeout=seconds + 60)
    if sampler.returncode != 0 or not out.exists():
        say(f"py-spy failed: {err.decode(errors='replace')[-500:]}")
        return
    # Keep the raw stacks (collapsed format: flamegraph.pl / speedscope read it) past the
    # run's temp dir, for a closer look than the summary.
    keep = Path(tempfile.gettempdir()) / "interlingua-bench-profiles"
    keep.mkdir(exist_ok=True)
    kept = keep / f"{scenario.name}.collapsed"
    kept.write_text(out.read_text())
    spots = profile.summarise(out.read_text())
    title = f"{target.label}, {scenario.title}, {conns} connections, {seconds:.0f} s"
    ctx.profiles.append(profile.render(spots, title))
    say(f"profile of {scenario.name}: {spots.samples} samples, raw stacks in {kept}")


def run_target(ctx: Context, target: Target, tmp: Path) -> None:
    """Every selected scenario the target supports."""
    for scenario in ALL:
        if scenario.name in ctx.options.scenarios and target.supports(scenario):
            measure(ctx, target, scenario)
            if scenario.name in ctx.options.profile and target.label == OURS:
                profile_scenario(ctx, target, scenario, tmp)


#: the scenarios ``--team`` prices the team layer on (report.py: "team on vs off")
TEAM_SCENARIOS = ("passthrough", "passthrough-stream", "a2o", "a2o-stream")


def _team(ctx: Context, tools: dict[str, str], nginx_base: str, tmp: Path) -> dict[str, TeamFigure]:
    """Keys + usage log + metrics on against all off, both gateways loaded at the same
    time on one shared CPU (bench/ab.py ``team_together``): run one after the other, the
    two figures of a pair saw different hosts here (the same configuration measured
    4,634 and 5,407 req/s in one run), and 15 % could not be told from noise."""
    opts = ctx.options
    rounds = max(3, 2 * opts.repeat + 3)
    duration = max(2.0, min(opts.duration, 4.0))
    say(f"team on vs off, together: {rounds} rounds of {duration:g} s per scenario")
    src = str(Path(interlingua.__file__).resolve().parents[1])
    wanted = [name for name in TEAM_SCENARIOS if name in opts.scenarios]
    results = ab.team_together(tools, nginx_base, tmp, src, wanted, rounds, duration)
    figures = {}
    for name, result in results.items():
        say(result.summary())
        cpu_ratio = result.cpu_median("new") / result.cpu_median("base")
        figures[name] = TeamFigure(result.ratio, rounds, cpu_ratio)
    return figures


def _scaling(ctx: Context, nginx_base: str, tmp: Path) -> str:
    """Passthrough at the most connections with N workers, against the one-worker run."""
    opts = ctx.options
    conns = max(opts.connections)
    passthrough = BY_NAME["passthrough"]
    with Interlingua(nginx_base, tmp, opts.workers) as gateway:
        measure(ctx, gateway, passthrough)
        label = gateway.label
    one = find_row(ctx.rows, OURS, "passthrough", conns)
    many = find_row(ctx.rows, label, "passthrough", conns)
    if one is None or many is None or one.rps <= 0 or not many.ok:
        return "not measured (passthrough run missing or failed)"
    return f"{many.rps / one.rps:.2f}× with {opts.workers} workers (passthrough, {conns} conns)"


def main(opts: Options) -> int:
    """Run everything; write and print the report. The exit code is 1 if anything failed."""
    started = time.monotonic()
    tools = ensure_tools()
    info = RunInfo(date=time.strftime("%Y-%m-%d %H:%M"), command=opts.command, machine=_machine())
    info.versions = _versions(tools)
    info.notes.append(f"load average at start: {_loadavg()}")
    scale_workers = opts.workers > 1 and cli_supports_workers()
    if opts.workers > 1 and not scale_workers:
        info.notes.append(
            f"--workers {opts.workers} ignored: `interlingua serve` has no --workers yet"
        )
    if not scale_workers:
        info.workers = "not measured in this run (`python -m bench --workers 2`)"
    spec = opts.litellm_spec or LITELLM_SPEC
    peer_exes = {"litellm": ensure_litellm(spec)} if "litellm" in opts.peers else {}
    micro_results = []
    if opts.micro:
        say("translation microbenchmarks")
        micro_results = micro.run_all()
    with tempfile.TemporaryDirectory(prefix="interlingua-bench-") as tmp_name:
        tmp = Path(tmp_name)
        bodies = {}
        for scenario in ALL:
            bodies[scenario.name] = tmp / f"body-{scenario.name}.json"
            bodies[scenario.name].write_bytes(request_body(scenario))
        ctx = Context(opts, tools["wrk"], bodies)
        with Nginx(tools["nginx"], tmp) as nginx:
            run_target(ctx, Direct(nginx), tmp)
            with Interlingua(nginx.base, tmp) as gateway:
                run_target(ctx, gateway, tmp)
            if opts.team:
                info.team = _team(ctx, tools, nginx.base, tmp)
            if scale_workers:
                info.workers = _scaling(ctx, nginx.base, tmp)
            for name, exe in peer_exes.items():
                try:
                    with LiteLLM(exe, nginx.base, tmp) as peer:
                        info.versions[name] = peer.version
                        run_target(ctx, peer, tmp)
                except BenchError as exc:
                    # A peer that cannot run must not cost us the gateway's figures.
                    say(f"{name}: {exc}")
                    info.notes.append(f"{name} did not run: {str(exc).splitlines()[0]}")
    info.notes.append(f"load average at end: {_loadavg()}")
    info.duration_s = time.monotonic() - started
    text = render(info, ctx.rows, micro_results, "\n\n".join(ctx.profiles))
    path = _write(opts.results, text)
    print(text)
    say(f"report written to {path}")
    if ctx.failures:
        say("FAILED: interlingua must answer every request; these did not:")
        for failure in ctx.failures:
            say(f"  - {failure}")
        return 1
    return 0


def _write(folder: Path, text: str) -> Path:
    """``folder/<date>.md`` (``-2``, ``-3``... if taken), written via a ``.tmp`` rename."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = time.strftime("%Y-%m-%d")
    path = folder / f"{stem}.md"
    n = 2
    while path.exists():
        path = folder / f"{stem}-{n}.md"
        n += 1
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def _machine() -> str:
    model = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} cores ({model}), {platform.system()} {platform.release()}"


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def _versions(tools: dict[str, str]) -> dict[str, str]:
    versions = {"python": platform.python_version(), "interlingua": _git_revision()}
    for package in ("uvicorn", "uvloop", "httptools", "starlette", "aiohttp", "orjson"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[package] = importlib.metadata.version(package)
    nginx = subprocess.run([tools["nginx"], "-v"], capture_output=True, text=True, timeout=30)
    versions["nginx"] = nginx.stderr.strip().rsplit("/", 1)[-1]
    out = subprocess.run([tools["wrk"], "--version"], capture_output=True, text=True, timeout=30)
    words = (out.stdout or out.stderr).split()
    versions["wrk"] = words[1] if len(words) > 1 else "unknown"
    return versions


def _git_revision() -> str:
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except OSError:
        return "unknown"
    return f"{rev}{' (modified tree)' if dirty else ''}" if rev else "unknown"


def run_cli(opts: Options) -> int:
    """``main`` with a BenchError shown as a one-line message, not a traceback."""
    try:
        return main(opts)
    except BenchError as exc:
        say(f"error: {exc}")
        return 2
    except KeyboardInterrupt:
        say("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(run_cli(Options()))
