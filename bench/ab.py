"""Paired A/B of two source trees of interlingua on the same scenarios, in one sitting.

    python -m bench.ab BASE_SRC NEW_SRC [--rounds 10] [--duration 3] [--scenarios passthrough]
    python -m bench.ab src src --base-team off --new-team usage   # what one feature costs
    python -m bench.ab src src --base-break error --new-break continue   # continuing streams

One nginx, both gateways up at once (``PYTHONPATH=BASE_SRC`` and ``NEW_SRC``, one worker
each), and wrk alternating between them round by round, the order flipped every round, at
50 connections. On a shared 2-core machine single runs swing by 20-30 %; pairs taken
seconds apart see the same background load, so the median of the per-round ratios is the
figure to quote. The gateway's CPU time per request (``/proc/<pid>/stat``) is reported
beside it. The scheduler tends to keep each process on one core: when something else
busies one core, ``--cpu N`` pins both gateways to the same one, or the comparison
measures the placement rather than the code.

``--together`` (needs two CPUs or more) loads both gateways at the same time instead,
both pinned to one CPU (``--cpu``, default the last) and wrk kept off it: the scheduler
shares that CPU between them, so each serves in proportion to how little CPU a request
costs it, and a swing of the host's speed hits both in the same second. Each round's
ratio is then a ratio of simultaneous figures; an A/A run (the same tree and team on
both sides) reads 1.00 within ~3 %, where alternating runs read 0.8-1.2 on a noisy day.
The figures are per gateway while sharing a core (each about half its own speed, with
the cost of the switches between them), so quote the ratios, not the req/s.

Make BASE_SRC with e.g. ``git archive <commit> | tar -x -C /tmp/base`` (then
``/tmp/base/src``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from . import wrk
from .nginx import Nginx
from .procs import Process, ensure_tools, free_port, start, wait_ready
from .scenarios import (
    BY_NAME,
    CLIENT_KEY,
    TEAM_KEY_ENV,
    TEAMS,
    Scenario,
    gateway_config_yaml,
    request_body,
    team_sections,
)
from .servers import serve_command

CONNECTIONS = 50


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` and its waited-for children, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def _start(
    name: str,
    src: str,
    nginx_base: str,
    tmp: Path,
    cpu: int | None,
    scenarios: list[Scenario],
    team: str = "",
    on_break: str = "",
) -> tuple[str, Process]:
    port = free_port()
    config = tmp / f"{name}.yaml"
    # only what the scenarios use: the base tree may not know a newer upstream kind
    sections = team_sections(team, tmp / name) if team else None
    (tmp / name).mkdir(exist_ok=True)
    config.write_text(gateway_config_yaml(nginx_base, port, scenarios, sections, on_break))
    env = {**os.environ, "PYTHONPATH": src, TEAM_KEY_ENV: CLIENT_KEY}
    command = serve_command(config, port, 1, False)
    if cpu is not None:  # taskset execs the server: same pid, every thread pinned
        command = ["taskset", "-c", str(cpu), *command]
    proc = start(command, tmp / f"{name}.log", env=env)
    base = f"http://127.0.0.1:{port}"
    wait_ready(f"{base}/health", proc.proc, 60, name)
    return base, proc


def _load(
    tools: dict[str, str],
    server: tuple[str, Process],
    scenario: Scenario,
    body: Path,
    duration: float,
) -> tuple[float, float]:
    """One wrk run at ``server``: (requests/s, gateway CPU µs per request)."""
    base, proc = server
    before = cpu_seconds(proc.proc.pid)
    result = wrk.run(
        tools["wrk"], base + scenario.path, body, CONNECTIONS, duration, scenario.headers
    )
    if result.errors or not result.requests:
        raise RuntimeError(f"{base}: {result}")
    return result.rps, (cpu_seconds(proc.proc.pid) - before) / result.requests * 1e6


def _load_together(
    tools: dict[str, str],
    servers: dict[str, tuple[str, Process]],
    scenario: Scenario,
    body: Path,
    duration: float,
) -> dict[str, tuple[float, float]]:
    """:func:`_load` at every server at the same time."""
    results: dict[str, tuple[float, float]] = {}
    failures: list[BaseException] = []

    def run(name: str) -> None:
        try:
            results[name] = _load(tools, servers[name], scenario, body, duration)
        except BaseException as exc:  # (raised below, in the caller's thread)
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(name,)) for name in servers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
    return results


@dataclass
class Comparison:
    """Two gateways on one scenario, round by round: requests/s and gateway CPU µs per
    request of each."""

    scenario: str
    rps: dict[str, list[float]]
    cpu: dict[str, list[float]]

    @property
    def ratio(self) -> float:
        """The median of the rounds' new/base requests/s: the figure to quote."""
        return statistics.median(
            n / b for n, b in zip(self.rps["new"], self.rps["base"], strict=True)
        )

    def median(self, side: str) -> float:
        return statistics.median(self.rps[side])

    def cpu_median(self, side: str) -> float:
        return statistics.median(self.cpu[side])

    def summary(self) -> str:
        base, new = self.median("base"), self.median("new")
        cpu_base, cpu_new = self.cpu_median("base"), self.cpu_median("new")
        return "\n".join(
            [
                f"{self.scenario}: base {base:,.0f} req/s, new {new:,.0f} req/s, "
                f"median paired ratio {self.ratio:.3f} (ratio of medians {new / base:.3f})",
                f"  gateway CPU per request: base {cpu_base:.1f} µs, "
                f"new {cpu_new:.1f} µs ({cpu_new / cpu_base:.3f})",
                f"  base req/s: {[round(x) for x in self.rps['base']]}",
                f"  new req/s:  {[round(x) for x in self.rps['new']]}",
            ]
        )


def compare(
    tools: dict[str, str],
    servers: dict[str, tuple[str, Process]],
    scenario_name: str,
    rounds: int,
    duration: float,
    tmp: Path,
    together: bool = False,
) -> Comparison:
    """``rounds`` measurements of the ``base`` and ``new`` servers on one scenario, at
    the same time (``together``) or one after the other, the order flipped each round."""
    scenario = BY_NAME[scenario_name]
    body = tmp / f"{scenario_name}.json"
    body.write_bytes(request_body(scenario))
    if together:
        _load_together(tools, servers, scenario, body, 1)  # warm-up
    else:
        for server in servers.values():
            _load(tools, server, scenario, body, 1)
    result = Comparison(scenario_name, {"base": [], "new": []}, {"base": [], "new": []})
    for r in range(rounds):
        if together:
            results = _load_together(tools, servers, scenario, body, duration)
        else:
            order = ("base", "new") if r % 2 == 0 else ("new", "base")
            results = {
                name: _load(tools, servers[name], scenario, body, duration) for name in order
            }
        for name, (speed, micros) in results.items():
            result.rps[name].append(speed)
            result.cpu[name].append(micros)
    return result


def shared_cpu() -> int | None:
    """The CPU ``--together`` puts both gateways on (the last this process may use),
    or None when there is only one."""
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[-1] if len(cpus) >= 2 else None


@contextlib.contextmanager
def off_cpu(cpu: int) -> Iterator[None]:
    """This process and the children it starts meanwhile (wrk) kept off ``cpu``."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, [c for c in before if c != cpu])
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def compare_trees(
    tools: dict[str, str],
    nginx_base: str,
    tmp: Path,
    sides: tuple[tuple[str, str, str], tuple[str, str, str]],
    scenarios: list[str],
    rounds: int,
    duration: float,
    cpu: int | None,
    together: bool,
) -> Iterator[Comparison]:
    """Both gateways up (``sides``: the base's and the new one's (src, team,
    on_stream_break)), each scenario compared in turn (:func:`compare`), the gateways
    stopped at the end."""
    chosen = [BY_NAME[name] for name in scenarios]
    servers: dict[str, tuple[str, Process]] = {}
    try:
        for name, (src, team, on_break) in zip(("base", "new"), sides, strict=True):
            servers[name] = _start(name, src, nginx_base, tmp, cpu, chosen, team, on_break)
        for scenario in scenarios:
            yield compare(tools, servers, scenario, rounds, duration, tmp, together)
    finally:
        for _, proc in servers.values():
            proc.stop()


def team_together(
    tools: dict[str, str],
    nginx_base: str,
    tmp: Path,
    src: str,
    scenarios: list[str],
    rounds: int,
    duration: float,
) -> dict[str, Comparison]:
    """The team layer's price, ``--together``: the same tree's gateways with team
    ``off`` (base) and ``on`` (new) loaded at the same time on one shared CPU, per
    scenario (``python -m bench --team``: the report's "team on vs off" targets)."""
    cpu = shared_cpu()
    if cpu is None:
        raise ValueError("the together method needs two CPUs: one for both gateways, one for wrk")
    sides = ((src, "off", ""), (src, "on", ""))
    with off_cpu(cpu):
        compared = compare_trees(
            tools, nginx_base, tmp, sides, scenarios, rounds, duration, cpu, together=True
        )
        return {result.scenario: result for result in compared}


def main(argv: list[str] | None = None) -> None:
    """Parse the command line, run every pair, print one summary per scenario."""
    parser = argparse.ArgumentParser(prog="python -m bench.ab", description=__doc__.split("\n")[0])
    parser.add_argument("base_src", help="the src/ folder of the tree to compare against")
    parser.add_argument("new_src", help="the src/ folder of the tree under test")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--duration", type=float, default=3, help="seconds per wrk run")
    parser.add_argument("--scenarios", default="passthrough,passthrough-stream")
    parser.add_argument(
        "--base-team",
        default="",
        choices=("", *TEAMS),
        help="run the base with these operational sections (scenarios.team_sections)",
    )
    parser.add_argument("--new-team", default="", choices=("", *TEAMS), help="the same, new")
    parser.add_argument(
        "--base-break",
        default="",
        choices=("", "error", "continue"),
        help="run the base with every model's on_stream_break set so, and a fallback each",
    )
    parser.add_argument(
        "--new-break", default="", choices=("", "error", "continue"), help="the same, new"
    )
    parser.add_argument(
        "--cpu",
        type=int,
        help="pin both gateways to this CPU, so neither sits on a busier core than the other",
    )
    parser.add_argument(
        "--together",
        action="store_true",
        help="load both gateways at once, sharing one CPU (--cpu, default the last): "
        "the least noisy ratio on a shared machine (see the module docstring)",
    )
    args = parser.parse_args(argv)
    # wrk and nginx (started below, our children) stay off the gateways' shared CPU
    apart: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
    if args.together:
        cpu = shared_cpu()
        if cpu is None:
            parser.error("--together needs two CPUs: one for both gateways, one for wrk")
        if args.cpu is None:
            args.cpu = cpu
        apart = off_cpu(args.cpu)
    tools = ensure_tools()
    tmp = Path(tempfile.mkdtemp(prefix="bench-ab-"))
    sides = (
        (args.base_src, args.base_team, args.base_break),
        (args.new_src, args.new_team, args.new_break),
    )
    with apart, Nginx(tools["nginx"], tmp) as nginx:
        for result in compare_trees(
            tools,
            nginx.base,
            tmp,
            sides,
            args.scenarios.split(","),
            args.rounds,
            args.duration,
            args.cpu,
            args.together,
        ):
            print(result.summary())


if __name__ == "__main__":
    main()
