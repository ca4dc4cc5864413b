"""The pure parts of the local engine benchmark: request body, stream parsing, statistics.

No processes, no sockets: everything here is tested in ``tests/bench/test_local_bench.py``.

- :func:`chat_body` -- the one OpenAI Chat request every server gets;
- :func:`split_lines` / :func:`parse_stream` -- timestamped network reads of one streamed
  answer -> a :class:`Sample` (tokens, time to first token, time to last byte);
- :class:`Burst` -- ``c`` requests sent together: aggregate tokens/s over the burst's wall
  time (first request sent -> last byte of the last answer);
- :func:`alternate` (ABBA order), :func:`percentile`, :func:`round_ratios`;
- :func:`parse_engine_log` / :func:`parse_llama_server_log` -- the settings each server says
  it loaded the model with, to check that they match.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import orjson

from .procs import BenchError

#: A prompt SmolLM2 answers at length: with :data:`SEED` and :data:`SAMPLING` every
#: request ran the full 64 and 128 tokens (servers without ``ignore_eos`` may still stop
#: early on another CPU or build: such requests are flagged in the report).
PROMPT = "Write a long story about a dragon who learns to bake bread."
MAX_TOKENS = 64
SEED = 42
#: Sampler settings sent to every server, so none falls back to its own default (our
#: engine defaults to temperature 0.2, llama_cpp.server to 0.8 and repeat_penalty 1.1,
#: llama-server to 0.8 and top_k 40). repeat_penalty 1.0 = off.
SAMPLING: dict[str, float] = {
    "temperature": 0.8,
    "top_p": 0.95,
    "top_k": 40,
    "min_p": 0.05,
    "repeat_penalty": 1.0,
}


def chat_body(
    max_tokens: int, seed: int, stream: bool, prompt: str = PROMPT, ignore_eos: bool = False
) -> bytes:
    """The OpenAI Chat request the servers get (``ignore_eos``: llama-server's extension
    that keeps generating past the end-of-generation token)."""
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
    if ignore_eos:
        body["ignore_eos"] = True
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

    ``sent`` is when the request went out, ``end`` when the last byte arrived. Tokens:
    the usage chunk's ``completion_tokens``; without one (llama_cpp.server sends none when
    streaming) ``max_tokens`` on a ``length`` finish, else the count of content chunks.
    Raises ``BenchError`` on an ``error`` payload or a stream with no content.
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


@dataclass(frozen=True, slots=True)
class Burst:
    """``len(samples)`` requests sent together to one server."""

    samples: tuple[Sample, ...]
    wall_s: float  # first request sent -> last byte of the last answer

    @property
    def concurrency(self) -> int:
        """How many requests the burst sent at once."""
        return len(self.samples)

    @property
    def tokens(self) -> int:
        """Tokens generated by all its requests."""
        return sum(s.tokens for s in self.samples)

    @property
    def rate(self) -> float:
        """Aggregate tokens/s: every request's tokens over the burst's wall time."""
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0


def burst_of(timed: Sequence[tuple[float, float, Sample]]) -> Burst:
    """A :class:`Burst` from ``(sent, end, sample)`` of requests sent together."""
    if not timed:
        raise BenchError("a burst of no requests")
    wall = max(end for _, end, _ in timed) - min(sent for sent, _, _ in timed)
    return Burst(tuple(sample for _, _, sample in timed), wall)


def alternate(rounds: int, names: Sequence[str]) -> list[list[str]]:
    """The order of the servers in each round: ABC, CBA, ABC... so that every server
    gets every position equally and the machine's drift falls on all of them."""
    return [list(names) if i % 2 == 0 else list(reversed(names)) for i in range(rounds)]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), linear between the closest ranks (NumPy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} outside 0..100")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def round_ratios(ours: Sequence[Burst], theirs: Sequence[Burst]) -> list[float]:
    """ours / theirs aggregate tokens/s, round by round (both lists in round order: the
    bursts of one round run back to back, so a busy spell tends to slow both)."""
    return [a.rate / b.rate for a, b in zip(ours, theirs, strict=False) if b.rate > 0]


@dataclass(frozen=True, slots=True)
class EngineLog:
    """What our engine says it loaded the model with."""

    n_ctx: int  # per request
    n_threads: int
    sequences: int | None  # decoded side by side; None: an engine from before ``parallel``


def parse_engine_log(text: str) -> EngineLog | None:
    """Our engine's "loaded ... (n_ctx N x S sequences, T threads)" log line (before
    ``parallel``: "(n_ctx N, T threads)")."""
    match = re.search(
        r"interlingua\.local.*\(n_ctx (\d+)(?: x (\d+) sequences)?, (\d+) threads", text
    )
    if match is None:
        return None
    sequences = int(match.group(2)) if match.group(2) else None
    return EngineLog(int(match.group(1)), int(match.group(3)), sequences)


@dataclass(frozen=True, slots=True)
class ServerLog:
    """What llama-server says it runs with."""

    n_slots: int
    n_ctx_slot: int
    n_threads: int | None  # None: its system_info line was not found
    n_threads_batch: int | None


def parse_llama_server_log(text: str) -> ServerLog | None:
    """Slots, per-slot context and threads from llama-server's start-up log:
    ``initializing, n_slots = 4, n_ctx_slot = 8192``, and the threads from
    ``system_info: n_threads = 1 (n_threads_batch = 1) / 2`` (logged at trace level in
    recent builds) or else ``llama threadpool init, n_threads = 1`` (no batch count)."""
    slots = re.search(r"n_slots = (\d+), n_ctx_slot = (\d+)", text)
    if slots is None:
        return None
    n_threads = n_batch = None
    info = re.search(r"system_info: n_threads = (\d+) \(n_threads_batch = (\d+)\)", text)
    pool = re.search(r"threadpool init, n_threads = (\d+)", text)
    if info is not None:
        n_threads, n_batch = int(info.group(1)), int(info.group(2))
    elif pool is not None:
        n_threads = int(pool.group(1))
    return ServerLog(int(slots.group(1)), int(slots.group(2)), n_threads, n_batch)
