"""Local engine benchmark (issue 3): interlingua's bundled model vs llama-cpp-python's server.

    python -m bench.local_bench                  # 10 rounds each + 5 cold starts each (~1 min)
    python -m bench.local_bench --rounds 9 --startup-runs 3
    python -m bench.local_bench --help

Two measurements, both servers on 127.0.0.1, every process ours and stopped in ``finally``:

1. **Tokens/s.** ``python -m interlingua.cli serve --port P`` (no config: the bundled
   SmolLM2 as ``smollm2``) and ``python -m llama_cpp.server --model <the same GGUF>`` run
   at the same time, with the same ``n_threads`` (and ``n_threads_batch``) as our engine
   uses by default -- half the cores -- and the same ``n_ctx``. One warm-up request each,
   then ``--rounds`` rounds of one streamed OpenAI Chat request to each, alternating the
   order every round (ABBA...) so that the machine's noise falls on both. Same body for
   both: a story prompt, ``max_tokens`` 128, temperature 0.8 and a fixed seed (the two
   produce the same text: same sampler chain), so every request generates exactly
   ``max_tokens`` tokens -- there is no ``ignore_eos``; a sample that ends early is
   flagged. Tokens: our ``usage.completion_tokens`` (``stream_options.include_usage``);
   llama_cpp.server sends no usage when streaming, so ``max_tokens`` when it finishes with
   ``length``, else its content chunks (it sends one per token). Time: request sent ->
   last byte. Decode rate: (tokens - 1) / (first content chunk -> last content chunk).
   Reported: each server's median, the ratio of the medians, and the median of the
   per-round ratios (the two requests of a round run back to back, so a busy spell on the
   shared machine tends to slow both: the steadier figure).
2. **Start -> first answer.** Spawn each server (interpreter start, imports and model
   load included), POST ``max_tokens: 1`` every 20 ms until one answers 200, stop it;
   ``--startup-runs`` times each, alternating. Page cache warm (not a first run after
   install).

The markdown report goes to stdout (progress to stderr); ``docs/performance.md`` keeps the
latest figures. The exit code is 1 when a request failed.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import httpx
import orjson

from .procs import BenchError, Process, free_port, say, start

PROMPT = "Write a long story about a dragon who learns to bake bread."
MAX_TOKENS = 128
SEED = 42
#: Sampler settings sent to both, so neither falls back to its own default (our engine
#: defaults to temperature 0.2, llama_cpp.server to 0.8 and repeat_penalty 1.1).
SAMPLING = {"temperature": 0.8, "top_p": 0.95, "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.0}
STARTUP_TIMEOUT = 60.0
REQUEST_TIMEOUT = 120.0
POLL_INTERVAL = 0.02

OURS = "interlingua"
THEIRS = "llama_cpp.server"


# -- pure parts ---------------------------------------------------------------------------


def chat_body(max_tokens: int, seed: int, stream: bool, prompt: str = PROMPT) -> bytes:
    """The OpenAI Chat request both servers get."""
    body: dict[str, object] = {
        "model": "smollm2",
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "seed": seed,
        **SAMPLING,
    }
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)


@dataclass(frozen=True, slots=True)
class Sample:
    """One streamed request: tokens generated and where the time went (seconds)."""

    tokens: int
    total_s: float  # request sent -> last byte
    ttft_s: float  # request sent -> first non-empty content
    decode_s: float  # first -> last non-empty content
    finish: str | None
    source: str  # where ``tokens`` came from: "usage", "length" or "chunks"

    @property
    def rate(self) -> float:
        """Tokens per second, end to end."""
        return self.tokens / self.total_s if self.total_s > 0 else 0.0

    @property
    def decode_rate(self) -> float:
        """Tokens per second after the first one (0 when not measurable)."""
        if self.tokens < 2 or self.decode_s <= 0:
            return 0.0
        return (self.tokens - 1) / self.decode_s


def parse_stream(
    lines: Iterable[tuple[float, bytes]], sent: float, end: float, max_tokens: int
) -> Sample:
    """A :class:`Sample` from timestamped SSE lines of a Chat Completions stream.

    ``sent`` is when the request went out, ``end`` when the last byte arrived. Raises
    ``BenchError`` on an ``error`` payload or a stream with no content.
    """
    first = last = None
    chunks = 0
    usage_tokens = None
    finish = None
    for stamp, raw in lines:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            break
        event = orjson.loads(data)
        if "error" in event:
            raise BenchError(f"stream error: {event['error']}")
        if event.get("usage"):
            usage_tokens = int(event["usage"]["completion_tokens"])
        for choice in event.get("choices") or ():
            finish = choice.get("finish_reason") or finish
            if (choice.get("delta") or {}).get("content"):
                chunks += 1
                first = stamp if first is None else first
                last = stamp
    if first is None or last is None:
        raise BenchError("the stream carried no content")
    if usage_tokens is not None:
        tokens, source = usage_tokens, "usage"
    elif finish == "length":
        tokens, source = max_tokens, "length"
    else:
        tokens, source = chunks, "chunks"
    return Sample(tokens, end - sent, first - sent, last - first, finish, source)


def parse_engine_log(text: str) -> tuple[int, int] | None:
    """``(n_ctx, n_threads)`` from our engine's "loaded ... (n_ctx N, T threads)" log line."""
    marker = "(n_ctx "
    for line in text.splitlines():
        at = line.find(marker)
        if "interlingua.local" not in line or at < 0:
            continue
        inside = line[at + len(marker) : line.find(")", at)]
        n_ctx, _, threads = inside.partition(",")
        return int(n_ctx), int(threads.split()[0])
    return None


def split_lines(reads: Iterable[tuple[float, bytes]]) -> list[tuple[float, bytes]]:
    """Lines from timestamped network reads; a line gets the stamp of the read ending it.

    A read may end mid-line (or mid-``data:``): the rest waits for the next read.
    """
    out: list[tuple[float, bytes]] = []
    pending = b""
    stamp = 0.0
    for stamp, chunk in reads:
        *complete, pending = (pending + chunk).split(b"\n")
        out.extend((stamp, line) for line in complete if line.strip())
    if pending.strip():
        out.append((stamp, pending))
    return out


def alternate(rounds: int, names: Sequence[str]) -> list[str]:
    """The order of the timed requests: ABBA... so both get each slot position equally."""
    order: list[str] = []
    for i in range(rounds):
        order += list(names) if i % 2 == 0 else list(reversed(names))
    return order


def _spread(values: Sequence[float], fmt: str) -> str:
    return f"{format(min(values), fmt)}–{format(max(values), fmt)}"


def _met(ok: bool) -> str:
    return "yes" if ok else "no"


@dataclass(frozen=True, slots=True)
class Setup:
    """What the report says about the run: settings, commands, machine."""

    day: str
    command: str
    ours_command: str
    theirs_command: str
    n_threads: int
    n_ctx: int
    max_tokens: int
    machine: str
    load_before: str
    load_after: str


def render_rates(samples: dict[str, list[Sample]]) -> list[str]:
    """The tokens/s table (medians, spreads) and the ratio ours / theirs."""
    out = [
        "| server | tokens/s (median) | range | decode tokens/s | TTFT ms | tokens | runs |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    medians: dict[str, tuple[float, float, float]] = {}
    for name in (OURS, THEIRS):
        got = samples.get(name) or []
        if not got:
            continue
        rates = [s.rate for s in got]
        decodes = [s.decode_rate for s in got]
        ttft = statistics.median(s.ttft_s for s in got) * 1000
        medians[name] = (statistics.median(rates), statistics.median(decodes), ttft)
        tokens = sorted({s.tokens for s in got})
        out.append(
            f"| {name} | {medians[name][0]:.1f} | {_spread(rates, '.1f')} "
            f"| {medians[name][1]:.1f} | {ttft:.0f} | {'/'.join(map(str, tokens))} "
            f"| {len(got)} |"
        )
    if OURS in medians and THEIRS in medians:
        ours, theirs = medians[OURS], medians[THEIRS]
        out.append(
            f"| **ours / theirs** | **{ours[0] / theirs[0]:.3f}** | | "
            f"**{ours[1] / theirs[1]:.3f}** | | | |"
        )
        paired = paired_ratios(samples)
        decode = paired_ratios(samples, decode=True)
        out.append(
            f"| ours / theirs, same round (median) | {statistics.median(paired):.3f} "
            f"| {_spread(paired, '.3f')} | {statistics.median(decode):.3f} | | | |"
        )
    return out


def paired_ratios(samples: dict[str, list[Sample]], decode: bool = False) -> list[float]:
    """ours / theirs for each round (samples are in round order; the two ran back to back,
    so a busy spell on the shared machine tends to hit both and cancel out)."""
    pairs = zip(samples.get(OURS) or [], samples.get(THEIRS) or [], strict=False)
    if decode:
        return [a.decode_rate / b.decode_rate for a, b in pairs if b.decode_rate > 0]
    return [a.rate / b.rate for a, b in pairs if b.rate > 0]


def render_startup(startup: dict[str, list[float]]) -> list[str]:
    """The start -> first answered request table."""
    out = [
        "| server | start → first answer, median s | range s | runs |",
        "|---|---:|---:|---:|",
    ]
    for name in (OURS, THEIRS):
        got = startup.get(name) or []
        if got:
            out.append(
                f"| {name} | {statistics.median(got):.2f} | {_spread(got, '.2f')} | {len(got)} |"
            )
    return out


def render_targets(samples: dict[str, list[Sample]], startup: dict[str, list[float]]) -> list[str]:
    """Issue 3's two goals with met / not met."""
    out = ["| target | goal | this run | met |", "|---|---|---|---|"]
    if samples.get(OURS) and samples.get(THEIRS):
        ratio = statistics.median(s.rate for s in samples[OURS]) / statistics.median(
            s.rate for s in samples[THEIRS]
        )
        paired = statistics.median(paired_ratios(samples))
        out.append(
            f"| tokens/s vs llama_cpp.server | ≥ 0.95× | {ratio:.3f}× "
            f"(same-round median {paired:.3f}×) | {_met(ratio >= 0.95)} |"
        )
    if startup.get(OURS):
        median = statistics.median(startup[OURS])
        out.append(
            f"| `interlingua serve` start → first answer | ≤ 2 s | {median:.2f} s | {_met(median <= 2)} |"
        )
    return out


def render_report(
    setup: Setup, samples: dict[str, list[Sample]], startup: dict[str, list[float]]
) -> str:
    """The whole markdown report."""
    lines = [
        f"# Local engine benchmark — {setup.day}",
        "",
        f"`{setup.command}`",
        "",
        f"Machine: {setup.machine}; load average {setup.load_before} before, "
        f"{setup.load_after} after (shared machine: noisy). Both servers: n_threads "
        f"{setup.n_threads}, n_threads_batch {setup.n_threads}, n_ctx {setup.n_ctx}; "
        f"max_tokens {setup.max_tokens}, seed {SEED}, "
        + ", ".join(f"{k} {v}" for k, v in SAMPLING.items())
        + ".",
        "",
        f"- ours: `{setup.ours_command}`",
        f"- theirs: `{setup.theirs_command}`",
        "",
    ]
    if samples:
        lines += ["## Tokens/s (streamed OpenAI Chat, request → last byte)", ""]
        lines += [*render_rates(samples), ""]
        short = [
            f"{name} {s.tokens} ({s.finish})"
            for name, got in samples.items()
            for s in got
            if s.tokens != setup.max_tokens
        ]
        if short:
            lines += [f"Samples that ended before max_tokens: {', '.join(short)}.", ""]
    if startup:
        lines += ["## Start → first answered request", ""]
        lines += [*render_startup(startup), ""]
    lines += ["## Targets (issue 3)", "", *render_targets(samples, startup), ""]
    return "\n".join(lines)


# -- servers and requests -----------------------------------------------------------------


def engine_defaults() -> tuple[str, int, int]:
    """``(gguf path, n_threads, n_ctx)`` our default config's engine uses."""
    from interlingua.upstreams.local import LlamaEngine, bundled_model_path
    from interlingua.upstreams.local.upstream import DEFAULT_N_CTX

    path = bundled_model_path("smollm2")
    return path, LlamaEngine(path, n_ctx=DEFAULT_N_CTX).n_threads, DEFAULT_N_CTX


def ours_command(port: int | str) -> list[str]:
    """``interlingua serve`` with no config: the bundled model."""
    return [sys.executable, "-m", "interlingua.cli", "serve", "--port", str(port)]


def theirs_command(port: int | str, model: str, n_threads: int, n_ctx: int) -> list[str]:
    """llama-cpp-python's own server on the same GGUF with the same threads and context."""
    threads = str(n_threads)
    return [
        *(sys.executable, "-m", "llama_cpp.server", "--model", model),
        *("--host", "127.0.0.1", "--port", str(port)),
        *("--n_threads", threads, "--n_threads_batch", threads, "--n_ctx", str(n_ctx)),
    ]


def wait_answer(client: httpx.Client, url: str, proc: Process, timeout: float) -> float:
    """Poll ``url`` with a 1-token request until it answers 200; the time that took."""
    body = chat_body(1, SEED, stream=False)
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
def running(command: list[str], log: Path) -> Iterator[tuple[Process, float, str]]:
    """Start ``command`` (its port is its ``--port``); yield it, its startup time, its URL."""
    port = command[command.index("--port") + 1]
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    with httpx.Client(timeout=httpx.Timeout(REQUEST_TIMEOUT, connect=1.0)) as client:
        started = time.perf_counter()
        proc = start(command, log)
        try:
            spawn = time.perf_counter() - started
            yield proc, spawn + wait_answer(client, url, proc, STARTUP_TIMEOUT), url
        finally:
            proc.stop()


def stream_once(client: httpx.Client, url: str, body: bytes, max_tokens: int) -> Sample:
    """One streamed request, each network read stamped on arrival."""
    reads: list[tuple[float, bytes]] = []
    headers = {"content-type": "application/json"}
    sent = time.perf_counter()
    with client.stream("POST", url, content=body, headers=headers) as resp:
        if resp.status_code != 200:
            raise BenchError(f"{url}: HTTP {resp.status_code}: {resp.read()[:300]!r}")
        for chunk in resp.iter_raw():
            reads.append((time.perf_counter(), chunk))
    end = time.perf_counter()
    return parse_stream(split_lines(reads), sent, end, max_tokens)


# -- the run ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Engine:
    """The model file and the settings both servers get."""

    model: str
    n_threads: int
    n_ctx: int


def check_engine_log(proc: Process, engine: Engine) -> None:
    """Fail unless our server logged loading the model with the settings we gave theirs."""
    found = parse_engine_log(proc.log_path.read_text(errors="replace"))
    if found != (engine.n_ctx, engine.n_threads):
        raise BenchError(
            f"interlingua loaded the model with (n_ctx, n_threads) {found}, "
            f"expected {(engine.n_ctx, engine.n_threads)}"
        )


def measure_rates(
    engine: Engine, rounds: int, max_tokens: int, seed: int, tmp: Path
) -> dict[str, list[Sample]]:
    """Both servers up at once; one warm-up each, then ``rounds`` alternating rounds."""
    body = chat_body(max_tokens, seed, stream=True)
    ours = ours_command(free_port())
    theirs = theirs_command(free_port(), engine.model, engine.n_threads, engine.n_ctx)
    samples: dict[str, list[Sample]] = {OURS: [], THEIRS: []}
    timeout = httpx.Timeout(REQUEST_TIMEOUT, connect=5.0)
    with (
        running(ours, tmp / "rates-ours.log") as (our_proc, _, our_url),
        running(theirs, tmp / "rates-theirs.log") as (_, _, their_url),
        httpx.Client(timeout=timeout) as our_client,
        httpx.Client(timeout=timeout) as their_client,
    ):
        check_engine_log(our_proc, engine)
        targets = {OURS: (our_client, our_url), THEIRS: (their_client, their_url)}
        for name, (client, url) in targets.items():
            warm = stream_once(client, url, body, max_tokens)
            say(f"warm-up {name}: {warm.tokens} tokens, {warm.rate:.1f} tokens/s")
        for i, name in enumerate(alternate(rounds, (OURS, THEIRS))):
            client, url = targets[name]
            sample = stream_once(client, url, body, max_tokens)
            samples[name].append(sample)
            say(
                f"round {i // 2 + 1} {name}: {sample.tokens} tokens ({sample.source}), "
                f"{sample.rate:.1f} tokens/s, decode {sample.decode_rate:.1f}, "
                f"TTFT {sample.ttft_s * 1000:.0f} ms"
            )
    return samples


def measure_startup(engine: Engine, runs: int, tmp: Path) -> dict[str, list[float]]:
    """Process start -> first 200 to a 1-token chat request, ``runs`` times each."""
    times: dict[str, list[float]] = {OURS: [], THEIRS: []}
    for i, name in enumerate(alternate(runs, (OURS, THEIRS))):
        port = free_port()
        if name == OURS:
            command = ours_command(port)
        else:
            command = theirs_command(port, engine.model, engine.n_threads, engine.n_ctx)
        with running(command, tmp / f"startup-{i}.log") as (_, seconds, _):
            times[name].append(seconds)
        say(f"startup {name}: {seconds:.2f} s")
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


def display(command: list[str]) -> str:
    """A command as a reader would type it (``python`` for this interpreter)."""
    return " ".join(["python", *command[1:]])


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def options(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.local_bench",
        description="tokens/s and start-up time: interlingua's local engine vs llama_cpp.server",
    )
    parser.add_argument("--rounds", type=int, default=10, help="timed requests per server")
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS)
    parser.add_argument("--seed", type=int, default=SEED)
    parser.add_argument("--startup-runs", type=int, default=5, help="cold starts per server")
    parser.add_argument("--no-rates", action="store_true", help="skip the tokens/s part")
    parser.add_argument("--no-startup", action="store_true", help="skip the start-up part")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.startup_runs < 1 or args.max_tokens < 2:
        parser.error("--rounds and --startup-runs must be >= 1, --max-tokens >= 2")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run both measurements and print the report; 1 on any failure."""
    args = options(argv)
    argv = sys.argv[1:] if argv is None else list(argv)
    model, n_threads, n_ctx = engine_defaults()
    engine = Engine(model, n_threads, n_ctx)
    load_before = _load()
    samples: dict[str, list[Sample]] = {}
    startup: dict[str, list[float]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="interlingua-local-bench-") as tmp:
            if not args.no_rates:
                samples = measure_rates(engine, args.rounds, args.max_tokens, args.seed, Path(tmp))
            if not args.no_startup:
                startup = measure_startup(engine, args.startup_runs, Path(tmp))
    except (BenchError, httpx.HTTPError, subprocess.SubprocessError) as exc:
        print(f"bench.local_bench: {exc}", file=sys.stderr)
        return 1
    setup = Setup(
        day=date.today().isoformat(),
        command=shlex.join(["python", "-m", "bench.local_bench", *argv]),
        ours_command=display(ours_command("<free>")),
        theirs_command=display(theirs_command("<free>", "<bundled gguf>", n_threads, n_ctx)),
        n_threads=n_threads,
        n_ctx=n_ctx,
        max_tokens=args.max_tokens,
        machine=machine(),
        load_before=load_before,
        load_after=_load(),
    )
    print(render_report(setup, samples, startup))
    return 0


if __name__ == "__main__":
    sys.exit(main())
