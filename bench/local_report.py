"""The markdown report of the local engine benchmark (pure: figures in, text out).

Tables: aggregate tokens/s per concurrency and server with the per-round ratios to
llama-server and to llama_cpp.server; time to first token p50/p95; start -> first
answer; then the local engine's targets (throughput and time to first token against
llama-server, and start-up) with met / not met (docs/performance.md, "Local engine").
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .local_servers import CPP, OURS, PY, SERVERS
from .local_stats import SAMPLING, Burst, percentile, round_ratios

#: goal: interlingua's aggregate tokens/s over llama-server's, at every concurrency
RATE_GOAL = 1.0
#: goal: interlingua's TTFT p95 at :data:`TTFT_AT` concurrent over its TTFT at 1
TTFT_GOAL = 2.0
TTFT_AT = 4
#: goal: ``interlingua serve`` start -> first answered request, seconds
STARTUP_GOAL = 2.0

#: concurrency -> server -> its bursts, in round order
Rates = Mapping[int, Mapping[str, Sequence[Burst]]]


@dataclass(frozen=True, slots=True)
class Setup:
    """What the report says about the run: settings, commands, machine."""

    day: str
    command: str
    commands: Mapping[str, str]  # server -> its command line
    n_threads: int
    n_ctx: int
    parallel: int
    ours_parallel: bool  # our engine took ``parallel: N``
    max_tokens: int
    seed: int
    machine: str
    load_before: str
    load_after: str
    build: str  # how llama-server was built, or why it was left out
    checks: tuple[str, ...] = ()  # what the servers' logs confirmed


def _spread(values: Sequence[float], fmt: str) -> str:
    return f"{format(min(values), fmt)}–{format(max(values), fmt)}"


def _met(ok: bool) -> str:
    return "yes" if ok else "no"


def _ratio_cell(ours: Sequence[Burst], theirs: Sequence[Burst]) -> str:
    ratios = round_ratios(ours, theirs)
    if not ratios:
        return "—"
    return f"{statistics.median(ratios):.3f} ({_spread(ratios, '.3f')})"


def render_rates(rates: Rates) -> list[str]:
    """Aggregate tokens/s: median (range) per server, and the per-round ratios."""
    out = [
        f"| concurrent | {OURS} | {CPP} | {PY} | {OURS} / {CPP}, per round: median (range) "
        f"| {OURS} / {PY}, per round: median (range) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for level, by_server in sorted(rates.items()):
        cells = []
        for name in SERVERS:
            got = by_server.get(name) or ()
            if got:
                values = [b.rate for b in got]
                cells.append(f"{statistics.median(values):.1f} ({_spread(values, '.1f')})")
            else:
                cells.append("—")
        ours = by_server.get(OURS) or ()
        cpp_ratio = _ratio_cell(ours, by_server.get(CPP) or ())
        py_ratio = _ratio_cell(ours, by_server.get(PY) or ())
        out.append(f"| {level} | {' | '.join(cells)} | {cpp_ratio} | {py_ratio} |")
    return out


def ttfts(bursts: Sequence[Burst]) -> list[float]:
    """Every request's time to first token (seconds) in ``bursts``."""
    return [s.ttft_s for b in bursts for s in b.samples]


def render_ttft(rates: Rates) -> list[str]:
    """Time to first token, p50 and p95 over every request at each concurrency (ms)."""
    head = " | ".join(f"{name} p50 | {name} p95" for name in SERVERS)
    out = [f"| concurrent | {head} | requests each |", "|---:|" + "---:|" * 7]
    for level, by_server in sorted(rates.items()):
        cells, counts = [], set()
        for name in SERVERS:
            values = ttfts(by_server.get(name) or ())
            counts.add(len(values))
            if values:
                cells += [
                    f"{percentile(values, 50) * 1000:.0f}",
                    f"{percentile(values, 95) * 1000:.0f}",
                ]
            else:
                cells += ["—", "—"]
        each = "/".join(str(n) for n in sorted(counts - {0}))
        out.append(f"| {level} | {' | '.join(cells)} | {each} |")
    return out


def short_requests(rates: Rates, max_tokens: int) -> list[str]:
    """``"<server> at <c>: <n> of <total> (<finish reasons>)"`` for requests that ended
    before ``max_tokens`` (their tokens still count; the rate is what they generated)."""
    out = []
    for level, by_server in sorted(rates.items()):
        for name in SERVERS:
            samples = [s for b in by_server.get(name) or () for s in b.samples]
            short = [s for s in samples if s.tokens != max_tokens]
            if short:
                finishes = ", ".join(sorted({f"{s.tokens} tokens/{s.finish}" for s in short}))
                out.append(f"{name} at {level}: {len(short)} of {len(samples)} ({finishes})")
    return out


def render_startup(startup: Mapping[str, Sequence[float]]) -> list[str]:
    """The start -> first answered request table."""
    out = [
        "| server | start → first answer, median s | range s | runs |",
        "|---|---:|---:|---:|",
    ]
    for name in SERVERS:
        got = startup.get(name) or ()
        if got:
            out.append(
                f"| {name} | {statistics.median(got):.2f} | {_spread(got, '.2f')} | {len(got)} |"
            )
    return out


def ttft_factor(rates: Rates, name: str) -> tuple[float, float, float] | None:
    """``(TTFT p95 at TTFT_AT, TTFT p50 at 1, their ratio)`` of one server, if measured."""
    one, many = rates.get(1, {}).get(name), rates.get(TTFT_AT, {}).get(name)
    if not one or not many:
        return None
    base, p95 = percentile(ttfts(one), 50), percentile(ttfts(many), 95)
    return p95, base, p95 / base if base > 0 else float("inf")


def _p95_at_one(rates: Rates, name: str) -> float:
    return percentile(ttfts(rates[1][name]), 95)


def render_targets(rates: Rates, startup: Mapping[str, Sequence[float]]) -> list[str]:
    """The local engine's targets (and its start-up goal) with met / not met."""
    out = ["| target | goal | this run | met |", "|---|---|---|---|"]
    for level, by_server in sorted(rates.items()):
        ours, cpp = by_server.get(OURS) or (), by_server.get(CPP) or ()
        ratios = round_ratios(ours, cpp)
        if not ratios:
            continue
        per_round = statistics.median(ratios)
        of_medians = statistics.median(b.rate for b in ours) / statistics.median(
            b.rate for b in cpp
        )
        out.append(
            f"| tokens/s vs {CPP}, {level} concurrent | ≥ {RATE_GOAL:.1f}× | {per_round:.3f}× "
            f"(per-round median; ratio of medians {of_medians:.3f}×) | {_met(per_round >= RATE_GOAL)} |"
        )
    factors = {name: ttft_factor(rates, name) for name in (OURS, CPP)}
    our_factor, cpp_factor = factors[OURS], factors[CPP]
    if our_factor is not None:
        p95, base, factor = our_factor
        reference = "" if cpp_factor is None else f"; {CPP} {cpp_factor[2]:.1f}×"
        # The goal reads the typical TTFT at 1 (p50); p95 over p95 is shown beside it.
        same = p95 / _p95_at_one(rates, OURS)
        out.append(
            f"| {OURS} TTFT p95 at {TTFT_AT} concurrent vs its TTFT (p50) at 1 "
            f"| ≤ {TTFT_GOAL:.0f}× | {p95 * 1000:.0f} ms / {base * 1000:.0f} ms = "
            f"{factor:.1f}× (over p95 at 1: {same:.1f}×{reference}) | {_met(factor <= TTFT_GOAL)} |"
        )
    if startup.get(OURS):
        median = statistics.median(startup[OURS])
        out.append(
            f"| `interlingua serve` start → first answer | ≤ {STARTUP_GOAL:.0f} s "
            f"| {median:.2f} s | {_met(median <= STARTUP_GOAL)} |"
        )
    return out


def render_setup(setup: Setup) -> list[str]:
    """The paragraph that says what ran, with which settings, on what."""
    parallel = (
        f"`parallel: {setup.parallel}` on our local upstream"
        if setup.ours_parallel
        else "our engine takes no `parallel` key yet (one request at a time)"
    )
    lines = [
        f"Machine: {setup.machine}; load average {setup.load_before} before, "
        f"{setup.load_after} after (shared machine: noisy). Every server: n_threads "
        f"{setup.n_threads}, n_threads_batch {setup.n_threads}, {setup.n_ctx} tokens of "
        f"context per request; llama-server {setup.parallel} slots; {parallel}. "
        f"Each request: max_tokens {setup.max_tokens}, seed {setup.seed}, "
        + ", ".join(f"{k} {v}" for k, v in SAMPLING.items())
        + f" (llama-server also `ignore_eos`). llama-server: {setup.build}.",
        "",
    ]
    lines += [f"- {name}: `{command}`" for name, command in setup.commands.items()]
    if setup.checks:
        lines += ["", "Checked in the servers' logs: " + "; ".join(setup.checks) + "."]
    return [*lines, ""]


def render_report(setup: Setup, rates: Rates, startup: Mapping[str, Sequence[float]]) -> str:
    """The whole markdown report."""
    lines = [
        f"# Local engine benchmark — {setup.day}",
        "",
        f"`{setup.command}`",
        "",
        *render_setup(setup),
    ]
    if rates:
        lines += [
            "## Aggregate tokens/s (c streamed requests at once; first sent → last byte)",
            "",
            *render_rates(rates),
            "",
            "## Time to first token, ms (request sent → first content)",
            "",
            *render_ttft(rates),
            "",
        ]
        short = short_requests(rates, setup.max_tokens)
        if short:
            lines += [f"Requests that ended before max_tokens: {'; '.join(short)}.", ""]
    if startup:
        lines += ["## Start → first answered request", "", *render_startup(startup), ""]
    lines += ["## Targets: local engine and start-up", "", *render_targets(rates, startup), ""]
    return "\n".join(lines)
