"""The results as markdown: the run's context, the main table, the targets, the micro figures.

Pure functions over plain values, so the rendering is tested without any load. Overheads
are the server's latency minus the direct nginx run's at the same connection count (the
scenario's ``baseline``); ``× LiteLLM`` is our requests/s over LiteLLM's in the same run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from .micro import MicroResult
from .scenarios import BY_NAME

OURS = "interlingua"


@dataclass(frozen=True, slots=True)
class Row:
    """One wrk run of one scenario against one server."""

    server: str
    scenario: str
    connections: int
    rps: float
    p50_ms: float
    p99_ms: float
    rss_mb: float
    errors: int = 0
    note: str = ""  # why there is no measurement (e.g. the peer failed the probe)

    @property
    def ok(self) -> bool:
        """Measured, with no failed request."""
        return not self.note and self.errors == 0


@dataclass
class RunInfo:
    """What the report says about the run itself."""

    date: str
    command: str
    machine: str
    versions: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    duration_s: float = 0.0
    #: what the report says about ``--workers`` scaling (the runner does not measure it yet)
    workers: str = "not measured"
    #: ``--team``: the team layer's price per scenario
    team: dict[str, TeamFigure] = field(default_factory=dict)


@dataclass
class TeamFigure:
    """One scenario's gateway with keys + usage log + metrics on against the same with
    them off, both loaded at the same time on one shared CPU (bench/ab.py
    ``team_together``): the host's swings hit both in the same second."""

    #: the median of the rounds' on/off requests/s
    ratio: float
    rounds: int
    #: gateway CPU per request, on/off (medians)
    cpu_ratio: float


#: ``--team`` figures by scenario
Teams = Mapping[str, TeamFigure]
#: what a target measured (text, met?: None when the run cannot tell), or None: not run
Measured = tuple[str, bool | None] | None


def find_row(rows: Iterable[Row], server: str, scenario: str, conns: int) -> Row | None:
    """The measured row of ``server`` x ``scenario`` x ``conns``, if there is one."""
    for row in rows:
        if (row.server, row.scenario, row.connections) == (
            server,
            scenario,
            conns,
        ) and not row.note:
            return row
    return None


def _peer_label(rows: list[Row]) -> str | None:
    for row in rows:
        if row.server.startswith("litellm"):
            return row.server
    return None


def _overheads(row: Row, rows: list[Row]) -> tuple[str, str]:
    scenario = BY_NAME.get(row.scenario)
    if scenario is None or scenario.direct or row.note:
        return "—", "—"
    base = next(
        (
            r
            for r in rows
            if r.scenario == scenario.baseline and r.connections == row.connections and not r.note
        ),
        None,
    )
    if base is None:
        return "—", "—"
    return f"{row.p50_ms - base.p50_ms:+.2f}", f"{row.p99_ms - base.p99_ms:+.2f}"


def _ratio(row: Row, rows: list[Row], peer: str | None) -> str:
    if peer is None or row.server != OURS or row.note:
        return "—"
    theirs = find_row(rows, peer, row.scenario, row.connections)
    if theirs is None or theirs.rps <= 0:
        return "n/a"
    return f"{row.rps / theirs.rps:.1f}×"


def render_table(rows: list[Row]) -> str:
    """The main table: one line per scenario, connection count and server."""
    peer = _peer_label(rows)
    head = (
        "| scenario | conns | server | req/s | p50 ms | p99 ms | +p50 ms | +p99 ms "
        "| × LiteLLM | RSS MB | errors |"
    )
    lines = [head, "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        title = BY_NAME[row.scenario].title if row.scenario in BY_NAME else row.scenario
        if row.note:
            lines.append(
                f"| {title} | {row.connections} | {row.server} | — | — | — | — | — | — | — "
                f"| {row.note} |"
            )
            continue
        plus50, plus99 = _overheads(row, rows)
        errors = str(row.errors) if row.errors == 0 else f"**{row.errors}**"
        lines.append(
            f"| {title} | {row.connections} | {row.server} | {row.rps:,.0f} | {row.p50_ms:.2f} "
            f"| {row.p99_ms:.2f} | {plus50} | {plus99} | {_ratio(row, rows, peer)} "
            f"| {row.rss_mb:.0f} | {errors} |"
        )
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Target:
    """One of the gateway's performance goals: ``measure`` returns (measured text, met?) or
    None if not run (docs/performance.md, "Against the gateway's performance targets").

    ``met`` is None when the run cannot tell (e.g. a negative overhead: noise).
    """

    name: str
    goal: str
    measure: Callable[[list[Row], list[MicroResult], Teams], Measured]


def _rps_at(scenario: str, conns: int, minimum: float) -> Callable[..., Measured]:
    def measure(rows: list[Row], micro: list[MicroResult], team: Teams) -> Measured:
        row = find_row(rows, OURS, scenario, conns)
        return None if row is None else (f"{row.rps:,.0f} req/s", row.rps >= minimum and row.ok)

    return measure


def _passthrough_vs_peer(rows: list[Row], micro: list[MicroResult], team: Teams) -> Measured:
    peer = _peer_label(rows)
    ours = find_row(rows, OURS, "passthrough", 50)
    theirs = find_row(rows, peer, "passthrough", 50) if peer else None
    if ours is None or theirs is None or theirs.rps <= 0:
        return None
    ratio = ours.rps / theirs.rps
    return f"{ratio:.1f}× {peer}", ratio >= 45


def _overhead(which: str, limit: float) -> Callable[..., Measured]:
    def measure(rows: list[Row], micro: list[MicroResult], team: Teams) -> Measured:
        ours = find_row(rows, OURS, "passthrough", 1)
        base = find_row(rows, "nginx (direct)", "direct-json", 1)
        if ours is None or base is None:
            return None
        extra = ours.p50_ms - base.p50_ms if which == "p50" else ours.p99_ms - base.p99_ms
        if extra < 0:
            # Faster than nginx alone is impossible: the direct run was disturbed.
            return f"{extra:+.2f} ms (direct run noisier)", None
        return f"{extra:+.2f} ms", extra <= limit

    return measure


def _per_chunk(rows: list[Row], micro: list[MicroResult], team: Teams) -> Measured:
    found = next((m for m in micro if m.unit == "chunk"), None)
    return None if found is None else (f"{found.value:.1f} µs/chunk", found.value <= 15)


def _same_run_ratio(
    server: str, scenario: str, base_server: str, base_scenario: str, conns: int, floor: float
) -> Callable[..., Measured]:
    """``server``'s req/s on ``scenario`` as a ratio of ``base_server``'s on
    ``base_scenario``, in the same run (met at ≥ ``floor``)."""

    def measure(rows: list[Row], micro: list[MicroResult], team: Teams) -> Measured:
        ours = find_row(rows, server, scenario, conns)
        base = find_row(rows, base_server, base_scenario, conns)
        if ours is None or base is None or base.rps <= 0:
            return None
        ratio = ours.rps / base.rps
        return f"{ratio:.2f}× ({ours.rps:,.0f} vs {base.rps:,.0f} req/s)", ratio >= floor

    return measure


def _beside(scenario: str, other: str, conns: int, floor: float) -> Callable[..., Measured]:
    """``scenario``'s req/s as a ratio of ``other``'s in the same run (≥ ``floor``)."""
    return _same_run_ratio(OURS, scenario, OURS, other, conns, floor)


def _team(scenario: str, floor: float) -> Callable[..., Measured]:
    """``scenario``'s req/s with keys + usage log + metrics on, as a ratio of the same
    with them off, both loaded at once on one shared CPU (``--team``; ≥ ``floor``)."""

    def measure(rows: list[Row], micro: list[MicroResult], team: Teams) -> Measured:
        found = team.get(scenario)
        if found is None:
            return None
        text = (
            f"{found.ratio:.2f}× (median of {found.rounds} rounds together; "
            f"CPU per request {found.cpu_ratio:.2f}×)"
        )
        return text, found.ratio >= floor

    return measure


def _memory(rows: list[Row], micro: list[MicroResult], team: Teams) -> Measured:
    ours = [r.rss_mb for r in rows if r.server == OURS and not r.note]
    return None if not ours else (f"{max(ours):.0f} MB (max)", max(ours) <= 80)


TARGETS = (
    Target("passthrough, 50 conns", "≥ 3,000 req/s", _rps_at("passthrough", 50, 3000)),
    Target("passthrough vs LiteLLM, 50 conns", "≥ 45×", _passthrough_vs_peer),
    Target("passthrough overhead p50, 1 conn", "≤ 0.3 ms", _overhead("p50", 0.3)),
    Target("passthrough overhead p99, 1 conn", "≤ 1 ms", _overhead("p99", 1.0)),
    Target("Anthropic→OpenAI non-stream, 50 conns", "≥ 2,000 req/s", _rps_at("a2o", 50, 2000)),
    Target("Anthropic→OpenAI stream, 50 conns", "≥ 800 streams/s", _rps_at("a2o-stream", 50, 800)),
    Target("translation cost per chunk", "≤ 15 µs", _per_chunk),
    Target("80 KB Anthropic→OpenAI, 50 conns", "≥ 500 req/s", _rps_at("a2o-80k", 50, 500)),
    Target("gateway RSS after the run", "≤ 80 MB", _memory),
    Target("Responses→OpenAI vs Anthropic→OpenAI, 50 conns", "≥ 0.75×",
           _beside("r2o", "a2o", 50, 0.75)),
    Target("Responses→OpenAI stream vs Anthropic→OpenAI stream, 50 conns", "≥ 0.75×",
           _beside("r2o-stream", "a2o-stream", 50, 0.75)),
    # Weighted routing: a name with two weighted deployments costs a plan per request.
    Target("2 weighted deployments vs one (passthrough), 50 conns", "≥ 0.9×",
           _beside("weighted", "passthrough", 50, 0.9)),
    # No goal: the price of the API's default store (one SQLite row per answer).
    Target("Responses→OpenAI stored vs stateless, 50 conns", "reported",
           _beside("r2o-stored", "r2o", 50, 0.0)),
    # The team layer: keys + usage log + metrics cost at most 15% (`--team`).
    Target("team on vs off: passthrough, 50 conns", "≥ 0.85×", _team("passthrough", 0.85)),
    Target("team on vs off: passthrough stream, 50 conns", "≥ 0.85×",
           _team("passthrough-stream", 0.85)),
    Target("team on vs off: Anthropic→OpenAI, 50 conns", "≥ 0.85×", _team("a2o", 0.85)),
    Target("team on vs off: Anthropic→OpenAI stream, 50 conns", "≥ 0.85×",
           _team("a2o-stream", 0.85)),
)  # fmt: skip


def render_targets(
    rows: list[Row], micro: list[MicroResult], workers_note: str, team: Teams | None = None
) -> str:
    """The gateway's performance targets, what this run measured and whether each is met."""
    lines = ["| target | goal | measured | met |", "|---|---|---|---|"]
    for target in TARGETS:
        result = target.measure(rows, micro, team or {})
        if result is None:
            measured, met = "not measured", "—"
        else:
            measured, met = result[0], {True: "yes", False: "**no**", None: "unclear"}[result[1]]
        lines.append(f"| {target.name} | {target.goal} | {measured} | {met} |")
    lines.append(f"| `--workers` 1 → 2 scaling | ≥ 1.8× | {workers_note} | — |")
    return "\n".join(lines)


def render_micro(micro: list[MicroResult]) -> str:
    """The microbenchmark figures."""
    lines = ["| translation (in process, best of 5) | µs | per |", "|---|---:|---|"]
    lines += [f"| {m.name} | {m.value:.1f} | {m.unit} |" for m in micro]
    return "\n".join(lines)


def render(info: RunInfo, rows: list[Row], micro: list[MicroResult], extra: str = "") -> str:
    """The whole report (what ``bench/results/<date>.md`` holds)."""
    versions = ", ".join(f"{k} {v}" for k, v in info.versions.items())
    parts = [
        f"# Benchmark {info.date}",
        "",
        f"Command: `{info.command}`  ",
        f"Machine: {info.machine}  ",
        f"Versions: {versions}  ",
        f"Run time: {info.duration_s:.0f} s",
        "",
        *[f"- {note}" for note in info.notes],
        "",
        "## Results",
        "",
        "Latencies in ms; `+p50`/`+p99` are over the direct nginx run at the same "
        "connection count; RSS is the server process tree's after the run.",
        "",
        render_table(rows),
        "",
        "## Targets: the gateway's performance goals",
        "",
        render_targets(rows, micro, info.workers, info.team),
        "",
        "## Translation microbenchmarks",
        "",
        render_micro(micro) if micro else "not run",
        "",
    ]
    if extra:
        parts += [extra, ""]
    return "\n".join(parts)
