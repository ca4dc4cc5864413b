"""The soak: mixed traffic with injected faults for minutes; errors, fds and RSS watched.

``python -m bench.soak [--minutes 10] [--rate R]`` starts the fault upstream
(:mod:`bench.fault_upstream`) and ``interlingua serve`` in front of it, measures the
highest rate the machine sustains with normal answers (a closed loop of
``--probe-concurrency`` clients for ``--probe-seconds``) unless ``--rate`` is given, then
sends requests at half that rate, open loop (on a clock, not when the last one ended, so a
slow gateway cannot slow the offered load), for ``--minutes``. The mix:

* both client dialects, each to an OpenAI and to an Anthropic upstream: passthrough and
  translated, stream and not, all equally likely;
* ``--fault-rate`` (5%) of requests name a failing model (500, 429, a cut, an invalid JSON
  event or body, a hang before headers, a stall mid-stream, a refused connection): the
  soak decides, by model name, so it knows which errors were injected;
* ``--hangup-rate`` (2%) of streams are closed by the client after their first chunk.

Every answer is checked (:mod:`bench.soak_check`): the echoed text whole, or an error
the client's SDK would raise as an API error. Every ``--sample-every`` seconds it reads
the gateway's RSS (``VmRSS``) and open fds (``/proc/<pid>/fd``). The report says whether
there were 0 unexpected outcomes, whether fds stayed flat and whether RSS grew under 5%
after the warm-up (the first minute), shows the curve, and is written to
``bench/results/soak-<date>.md``. Exit code 1 if any of the three fails.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from .fault_upstream import FAULTS
from .procs import BenchError, Process, free_port, rss_kb, say, start, wait_ready
from .run import _git_revision, _loadavg, _machine
from .scenarios import CLIENT_KEY
from .servers import serve_command
from .soak_check import Call, Seen, classify, parse_sse

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
DIALECTS = ("openai", "anthropic")
ALL_FAULTS = (*FAULTS, "refused")
#: How long the gateway waits on the mock upstream (its ``timeout.read``), so that hangs
#: and stalls end in a few seconds.
UPSTREAM_READ_TIMEOUT = 2.0
PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
HEADERS = {
    "openai": {"authorization": f"Bearer {CLIENT_KEY}", "content-type": "application/json"},
    "anthropic": {
        "x-api-key": CLIENT_KEY,
        "anthropic-version": "2023-06-01",
        "content-type": "application/json",
    },
}


@dataclass
class Options:
    """The command line, as values."""

    minutes: float = 10.0
    rate: float | None = None
    fault_rate: float = 0.05
    hangup_rate: float = 0.02
    sample_every: float = 10.0
    warmup: float | None = None  # seconds; default: the first minute (a third of short runs)
    probe_seconds: float = 10.0
    probe_concurrency: int = 16
    requests: int | None = None  # stop after this many, whatever the time
    deadline: float = 20.0  # a request not finished by then is a hang
    idle_wait: float = 20.0  # seconds idle after the load before the last fd/RSS reading
    seed: int = 1
    faults: tuple[str, ...] = ALL_FAULTS  # the faults drawn from (all of them by default)
    gateway_env: dict[str, str] = field(default_factory=dict)
    results: Path = RESULTS
    command: str = "python -m bench.soak"

    @property
    def warmup_seconds(self) -> float:
        """The warm-up: the first minute, or a third of a run shorter than three."""
        if self.warmup is not None:
            return self.warmup
        return min(60.0, self.minutes * 60 / 3)


# --- the mix -----------------------------------------------------------------------------


def model_name(upstream: str, fault: str) -> str:
    """The model a client asks for to reach ``upstream`` with ``fault`` injected."""
    return f"{upstream[:3]}-{fault}"


def draw(
    rng: random.Random, fault_rate: float, hangup_rate: float, faults: tuple[str, ...] = ALL_FAULTS
) -> Call:
    """One request of the mix."""
    stream = rng.random() < 0.5
    fault = rng.choice(faults) if rng.random() < fault_rate else "ok"
    return Call(
        client=rng.choice(DIALECTS),
        upstream=rng.choice(DIALECTS),
        stream=stream,
        fault=fault,
        hangup=stream and rng.random() < hangup_rate,
    )


def request_body(call: Call, nonce: str) -> bytes:
    """The body for ``call``; the mock upstream answers ``echo:<nonce>``."""
    body: dict[str, Any] = {
        "model": model_name(call.upstream, call.fault),
        "max_tokens": 64,
        "messages": [{"role": "user", "content": nonce}],
    }
    if call.stream:
        body["stream"] = True
    return orjson.dumps(body)


def gateway_config(upstream_port: int, refused_port: int) -> dict[str, Any]:
    """The gateway routes: ``<upstream>-<fault>`` -> that upstream, upstream model <fault>."""
    timeout = {"connect": UPSTREAM_READ_TIMEOUT, "read": UPSTREAM_READ_TIMEOUT}
    mock = f"http://127.0.0.1:{upstream_port}"
    closed = f"http://127.0.0.1:{refused_port}"
    upstreams = {
        "openai": {"kind": "openai", "base_url": mock + "/v1", "timeout": timeout},
        "anthropic": {"kind": "anthropic", "base_url": mock, "timeout": timeout},
        "openai-refused": {"kind": "openai", "base_url": closed + "/v1", "timeout": timeout},
        "anthropic-refused": {"kind": "anthropic", "base_url": closed, "timeout": timeout},
    }
    models = []
    for upstream in DIALECTS:
        for fault in ("ok", *FAULTS):
            models.append(
                {"name": model_name(upstream, fault), "upstream": upstream, "model": fault}
            )
        models.append(
            {
                "name": model_name(upstream, "refused"),
                "upstream": f"{upstream}-refused",
                "model": "ok",
            }
        )
    return {
        "server": {"host": "127.0.0.1", "api_keys": [CLIENT_KEY]},
        "upstreams": upstreams,
        "models": models,
    }


# --- one request ---------------------------------------------------------------------------


async def send(
    session: aiohttp.ClientSession, base: str, call: Call, nonce: str, deadline: float
) -> tuple[str, str]:
    """Send one request of the mix and classify what came back."""
    seen = Seen()
    try:
        async with asyncio.timeout(deadline):
            await _exchange(session, base, call, nonce, seen)
    except TimeoutError:
        seen.timed_out = True
    except (aiohttp.ClientError, OSError) as exc:
        seen.transport_error = type(exc).__name__
    return classify(call, "echo:" + nonce, seen)


async def _exchange(
    session: aiohttp.ClientSession, base: str, call: Call, nonce: str, seen: Seen
) -> None:
    url = base + PATHS[call.client]
    body = request_body(call, nonce)
    async with session.post(url, data=body, headers=HEADERS[call.client]) as resp:
        seen.status = resp.status
        seen.content_type = resp.headers.get("content-type", "")
        if not (call.stream and resp.status == 200):
            seen.body = await resp.read()
            return
        buffer = b""
        async for data in resp.content.iter_any():
            if call.hangup:
                resp.close()  # the client goes away mid-stream
                return
            events, buffer = parse_sse(buffer + data)
            seen.events.extend(events)


# --- load ----------------------------------------------------------------------------------


@dataclass
class Sample:
    """One reading of the gateway: seconds since the load began, requests done, RSS, fds."""

    t: float
    done: int
    rss_kb: int
    fds: int


@dataclass
class Tally:
    """Outcomes so far."""

    outcomes: Counter[str] = field(default_factory=Counter)
    by_class: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    sent: int = 0

    @property
    def done(self) -> int:
        """Requests finished (whatever their outcome)."""
        return sum(self.outcomes.values())

    def add(self, call: Call, outcome: str, reason: str) -> None:
        self.outcomes[outcome] += 1
        self.by_class[(call.label, call.fault, outcome)] += 1
        if reason:
            key = f"{call.label}, {call.fault}: {reason}"
            self.reasons[key] += 1
            if len(self.examples) < 20 and self.reasons[key] == 1:
                self.examples.append(key)


def fd_count(pid: int) -> int:
    """Open file descriptors of ``pid`` (0 if it is gone)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def sample(pid: int, started: float, done: int) -> Sample:
    return Sample(time.monotonic() - started, done, rss_kb(pid), fd_count(pid))


def _session(limit: int) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=limit, force_close=False)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))


async def probe_rate(base: str, opts: Options) -> tuple[float, Tally]:
    """Requests/s of a closed loop of normal requests (no faults, no hang-ups)."""
    rng = random.Random(opts.seed + 1)
    tally = Tally()
    end = time.monotonic() + opts.probe_seconds
    async with _session(opts.probe_concurrency) as session:

        async def worker(w: int) -> None:
            n = 0
            while time.monotonic() < end:
                call = draw(rng, 0.0, 0.0)
                outcome, reason = await send(session, base, call, f"probe-{w}-{n}", opts.deadline)
                tally.add(call, outcome, reason)
                n += 1

        started = time.monotonic()
        await asyncio.gather(*(worker(w) for w in range(opts.probe_concurrency)))
        elapsed = time.monotonic() - started
    return tally.done / elapsed, tally


async def soak(
    base: str, pid: int, rate: float, opts: Options
) -> tuple[Tally, list[Sample], Sample]:
    """Offer ``rate`` requests/s for ``opts.minutes`` (or ``opts.requests``); sample along.

    Returns the outcomes, the samples taken under load (the first one idle, before it),
    and one taken ``opts.idle_wait`` seconds after the load ended.
    """
    rng = random.Random(opts.seed)
    tally = Tally()
    samples: list[Sample] = []
    tasks: set[asyncio.Task[None]] = set()
    started = time.monotonic()
    end = started + opts.minutes * 60
    limit = opts.requests if opts.requests is not None else sys.maxsize
    samples.append(sample(pid, started, 0))
    next_sample = started + opts.sample_every

    async def one(session: aiohttp.ClientSession, call: Call, nonce: str) -> None:
        outcome, reason = await send(session, base, call, nonce, opts.deadline)
        tally.add(call, outcome, reason)

    async with _session(256) as session:
        while tally.sent < limit:
            now = time.monotonic()
            if now >= end:
                break
            if now >= next_sample:
                samples.append(sample(pid, started, tally.done))
                next_sample += opts.sample_every
            due = min(int((now - started) * rate) + 1, limit) - tally.sent
            for _ in range(max(0, due)):
                call = draw(rng, opts.fault_rate, opts.hangup_rate, opts.faults)
                task = asyncio.create_task(one(session, call, f"soak-{tally.sent}"))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                tally.sent += 1
            await asyncio.sleep(0.005)
        if tasks:  # each is bounded by opts.deadline
            await asyncio.wait(set(tasks), timeout=opts.deadline + 5)
        samples.append(sample(pid, started, tally.done))
    # Idle: client connections closed, the pool's idle ones expired (idle_ttl): what is
    # still open now was left behind.
    await asyncio.sleep(opts.idle_wait)
    return tally, samples, sample(pid, started, tally.done)


# --- verdicts and report -------------------------------------------------------------------


@dataclass
class Verdict:
    """The three targets of the soak."""

    unexpected: int
    fds_idle: tuple[int, int]  # before the load, and idle after it
    fd_growth: float  # median fds of the last third minus the first third, after warm-up
    rss_growth: float  # fraction: last RSS over the first RSS after warm-up, minus 1
    rss_base_kb: int

    @property
    def fds_flat(self) -> bool:
        """Flat: once the load is gone, the fds are back to (within 10 of) their count
        before it. Under load the count follows the requests in flight, which hung and
        stalled faults hold for their timeouts, so its drift there is reported, not
        judged (a leak climbs and never comes back: this catches it)."""
        before, after = self.fds_idle
        return after <= before + 10

    @property
    def rss_ok(self) -> bool:
        """RSS growth after warm-up under 5%."""
        return self.rss_growth < 0.05

    @property
    def passed(self) -> bool:
        return self.unexpected == 0 and self.fds_flat and self.rss_ok


def verdict(tally: Tally, samples: list[Sample], idle: Sample, warmup: float) -> Verdict:
    """Judge the run. Samples in the warm-up count for nothing but the curve."""
    after = [s for s in samples if s.t >= warmup] or samples[-1:]
    third = max(1, len(after) // 3)
    fd_growth = statistics.median(s.fds for s in after[-third:]) - statistics.median(
        s.fds for s in after[:third]
    )
    base = after[0].rss_kb or 1
    return Verdict(
        unexpected=tally.outcomes["unexpected"],
        fds_idle=(samples[0].fds, idle.fds),
        fd_growth=float(fd_growth),
        rss_growth=after[-1].rss_kb / base - 1,
        rss_base_kb=after[0].rss_kb,
    )


def _yes(ok: bool) -> str:
    return "yes" if ok else "**NO**"


def render(
    opts: Options,
    info: dict[str, str],
    rates: dict[str, float],
    tally: Tally,
    samples: list[Sample],
    idle: Sample,
    verdict: Verdict,
) -> str:
    """The markdown report."""
    out = [f"# Soak {info.get('date', '')}", ""]
    out += [f"`{opts.command}`", ""]
    out += [f"- {key}: {value}" for key, value in info.items() if key != "date"]
    out += [
        f"- rate: max measured {rates['max']:.0f} req/s (closed loop, "
        f"{opts.probe_concurrency} clients, normal answers), offered {rates['offered']:.0f} "
        f"req/s, achieved {rates['achieved']:.0f} req/s",
        f"- mix: {opts.fault_rate:.0%} faults ({', '.join(opts.faults)}), "
        f"{opts.hangup_rate:.0%} of streams hung up; warm-up {opts.warmup_seconds:.0f} s",
        "",
        "## Targets",
        "",
        "| target | measured | met |",
        "|---|---|---|",
        f"| 0 unexpected outcomes | {verdict.unexpected} | {_yes(verdict.unexpected == 0)} |",
        f"| fds flat: idle {opts.idle_wait:g} s after the load within 10 of idle before it "
        f"(in-load median drift "
        f"{verdict.fd_growth:+.0f}) | {verdict.fds_idle[0]} → {verdict.fds_idle[1]} "
        f"| {_yes(verdict.fds_flat)} |",
        f"| RSS growth after warm-up < 5% | {verdict.rss_growth:+.1%} "
        f"(from {verdict.rss_base_kb / 1024:.1f} MB) | {_yes(verdict.rss_ok)} |",
        "",
        "## Outcomes",
        "",
        f"{tally.sent} sent, {tally.done} finished: "
        + ", ".join(f"{name} {tally.outcomes[name]}" for name in OUTCOME_ORDER),
        "",
        "| request class | fault | answer | typed_error | hangup | unexpected |",
        "|---|---|---|---|---|---|",
    ]
    classes = sorted({(label, fault) for label, fault, _ in tally.by_class})
    for label, fault in classes:
        cells = [str(tally.by_class[(label, fault, o)]) for o in OUTCOME_ORDER]
        out.append(f"| {label} | {fault} | {' | '.join(cells)} |")
    if tally.reasons:
        out += ["", "## Unexpected, by reason", ""]
        out += [f"- {count} × {reason}" for reason, count in tally.reasons.most_common()]
    out += [
        "",
        "## RSS and fds",
        "",
        "| t (s) | requests done | RSS (MB) | fds |",
        "|---|---|---|---|",
    ]
    out += [f"| {s.t:.0f} | {s.done} | {s.rss_kb / 1024:.1f} | {s.fds} |" for s in samples]
    out.append(f"| {idle.t:.0f} (idle) | {idle.done} | {idle.rss_kb / 1024:.1f} | {idle.fds} |")
    return "\n".join(out) + "\n"


OUTCOME_ORDER = ("answer", "typed_error", "hangup", "unexpected")


def write_report(folder: Path, text: str) -> Path:
    """``folder/soak-<date>.md`` (``-2``, ``-3``... if taken)."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = "soak-" + time.strftime("%Y-%m-%d")
    path = folder / f"{stem}.md"
    n = 2
    while path.exists():
        path = folder / f"{stem}-{n}.md"
        n += 1
    path.write_text(text)
    return path


# --- processes -----------------------------------------------------------------------------


def start_servers(tmp: Path, opts: Options) -> tuple[Process, Process, str]:
    """The fault upstream and the gateway (in that order), both ready."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    up_port, refused_port, port = free_port(), free_port(), free_port()
    upstream = start(
        [sys.executable, "-m", "bench.fault_upstream", "--port", str(up_port)],
        tmp / "upstream.log",
        env,
    )
    wait_ready(f"http://127.0.0.1:{up_port}/health", upstream.proc, 30, "fault upstream")
    config = tmp / "config.yaml"
    config.write_text(yaml.safe_dump(gateway_config(up_port, refused_port), sort_keys=False))
    gateway = start(
        serve_command(config, port, 1, False), tmp / "gateway.log", {**env, **opts.gateway_env}
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(f"{base}/health", gateway.proc, 60, "interlingua")
    except BenchError as exc:
        tail = gateway.log_tail()
        gateway.stop()
        upstream.stop()
        raise BenchError(f"{exc}\n{tail}") from None
    return upstream, gateway, base


async def run(opts: Options) -> tuple[str, bool]:
    """The whole soak; returns the report and whether every target was met."""
    info = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": _machine(),
        "load average at start": _loadavg(),
        "interlingua": _git_revision(),
    }
    if opts.gateway_env:
        info["gateway environment"] = " ".join(f"{k}={v}" for k, v in opts.gateway_env.items())
    with tempfile.TemporaryDirectory(prefix="soak-") as tmpdir:
        upstream, gateway, base = start_servers(Path(tmpdir), opts)
        try:
            if opts.rate is None:
                say(f"measuring the maximum rate for {opts.probe_seconds:g} s")
                max_rate, probe = await probe_rate(base, opts)
                if probe.outcomes["unexpected"]:
                    say(f"probe: {probe.outcomes['unexpected']} unexpected: {probe.examples[:3]}")
                rate = max(1.0, max_rate / 2)
            else:
                max_rate, rate = float("nan"), opts.rate
            say(f"soaking at {rate:.0f} req/s for {opts.minutes:g} min")
            tally, samples, idle = await soak(base, gateway.pid, rate, opts)
            elapsed = samples[-1].t
            log_tail = gateway.log_tail(20)
        finally:
            gateway.stop()
            upstream.stop()
    rates = {"max": max_rate, "offered": rate, "achieved": tally.done / max(elapsed, 1e-9)}
    judged = verdict(tally, samples, idle, opts.warmup_seconds)
    text = render(opts, info, rates, tally, samples, idle, judged)
    if "Traceback" in log_tail:
        text += "\n## Gateway log (tail)\n\n```\n" + log_tail + "\n```\n"
    return text, judged.passed


def parse_args(argv: list[str]) -> Options:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, help="requests/s (default: half the measured max)")
    parser.add_argument("--fault-rate", type=float, default=0.05)
    parser.add_argument("--hangup-rate", type=float, default=0.02)
    parser.add_argument("--sample-every", type=float, default=10.0, help="seconds")
    parser.add_argument("--warmup", type=float, help="seconds (default: the first minute)")
    parser.add_argument("--probe-seconds", type=float, default=10.0)
    parser.add_argument("--probe-concurrency", type=int, default=16)
    parser.add_argument("--requests", type=int, help="stop after this many requests")
    parser.add_argument(
        "--idle-wait", type=float, default=20.0, help="seconds idle before the last reading"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--faults", default=",".join(ALL_FAULTS), help="comma-separated subset of the faults"
    )
    parser.add_argument(
        "--gateway-env", action="append", default=[], metavar="KEY=VALUE",
        help="an environment variable for the gateway (e.g. MALLOC_ARENA_MAX=2); repeatable",
    )  # fmt: skip
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    env = dict(item.split("=", 1) for item in args.gateway_env)
    return Options(
        minutes=args.minutes,
        rate=args.rate,
        fault_rate=args.fault_rate,
        hangup_rate=args.hangup_rate,
        sample_every=args.sample_every,
        warmup=args.warmup,
        probe_seconds=args.probe_seconds,
        probe_concurrency=args.probe_concurrency,
        requests=args.requests,
        idle_wait=args.idle_wait,
        seed=args.seed,
        faults=tuple(args.faults.split(",")),
        gateway_env=env,
        results=args.results,
        command=" ".join(["python -m bench.soak", *argv]),
    )


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        text, passed = asyncio.run(run(opts))
    except BenchError as exc:
        say(str(exc))
        return 2
    path = write_report(opts.results, text)
    print(text)
    say(f"report written to {path}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
