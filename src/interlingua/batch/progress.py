"""Progress of a batch run: counters, a live bar or periodic log lines, the final summary.

On a terminal the bar is tqdm's (done/total, rate, ETA) with failures, retries and tokens
in its postfix; tqdm is imported only then, and a missing tqdm falls back to log lines.
Anywhere else (a log file, CI, ``nohup``) a plain line every ``log_every`` seconds, since
a carriage-return bar in a log file is one unreadable line.

Latency percentiles come from a log-bucketed histogram (2 % wide buckets) rather than a
list of samples, so a million-line run keeps the same few kilobytes of statistics as a
thousand-line one; p50/p95 are within 2 % of the exact values.
"""

from __future__ import annotations

import math
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TextIO

__all__ = ["BatchStats", "LatencyHistogram", "Progress", "format_summary"]

_RATIO = 1.02
_LOG_RATIO = math.log(_RATIO)
_MIN_LATENCY = 1e-4  # seconds: the first bucket's lower edge


class LatencyHistogram:
    """Counts of latencies in geometric buckets; :meth:`quantile` reads them back.

    >>> h = LatencyHistogram()
    >>> for ms in range(1, 101): h.add(ms / 1000)
    >>> round(h.quantile(0.5) * 1000)
    50
    """

    __slots__ = ("buckets", "count")

    def __init__(self) -> None:
        self.buckets: Counter[int] = Counter()
        self.count = 0

    def add(self, seconds: float) -> None:
        """Count one latency."""
        index = int(math.log(max(seconds, _MIN_LATENCY) / _MIN_LATENCY) / _LOG_RATIO)
        self.buckets[index] += 1
        self.count += 1

    def quantile(self, q: float) -> float | None:
        """The ``q`` quantile (0..1) in seconds, or None with no samples."""
        if not self.count:
            return None
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for index in sorted(self.buckets):
            seen += self.buckets[index]
            if seen >= rank:
                # The bucket's geometric middle: within half a bucket (1 %) of any sample.
                return float(_MIN_LATENCY * _RATIO ** (index + 0.5))
        return None  # pragma: no cover - rank <= count always lands in a bucket


@dataclass(slots=True)
class BatchStats:
    """Counters of one run. ``done_before``: result lines already in the output."""

    total: int | None = None
    done_before: int = 0
    ok: int = 0
    failed: int = 0
    skipped: int = 0
    failures: Counter[str] = field(default_factory=Counter)
    tokens_in: int = 0
    tokens_out: int = 0
    retries: int = 0
    empty_retries: int = 0  # of the retries: 2xx answers with nothing in them
    unreadable_retries: int = 0  # ... and 2xx bodies that could not be read
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None

    @property
    def done(self) -> int:
        """Lines finished in this run (ok + failed)."""
        return self.ok + self.failed

    @property
    def wall(self) -> float:
        """Seconds since the start (until the end, once finished)."""
        return (self.finished or time.monotonic()) - self.started

    def record(
        self,
        failure: str | None,
        latency: float | None = None,
        tokens_in: int = 0,
        tokens_out: int = 0,
    ) -> None:
        """Count one finished line; ``failure`` is its failure kind, None if it succeeded."""
        if failure is None:
            self.ok += 1
        else:
            self.failed += 1
            self.failures[failure] += 1
        if latency is not None:
            self.latency.add(latency)
        self.tokens_in += tokens_in
        self.tokens_out += tokens_out


def _count(n: float) -> str:
    if n >= 1_000_000:
        return f"{n / 1_000_000:.1f}M"
    if n >= 10_000:
        return f"{n / 1000:.0f}k"
    return f"{n:.0f}"


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.0f} ms"


class Progress:
    """Shows a run's progress on ``stream`` (stderr by default).

    ``mode``: ``"auto"`` (bar on a terminal, log lines otherwise), ``"bar"``, ``"log"`` or
    ``"off"``. Call :meth:`update` once per finished line and :meth:`tick` every fraction
    of a second (it refreshes the bar's counters and writes log lines when due).
    """

    def __init__(
        self,
        stats: BatchStats,
        *,
        mode: str = "auto",
        stream: TextIO | None = None,
        log_every: float = 10.0,
    ) -> None:
        self.stats = stats
        self.stream = stream if stream is not None else sys.stderr
        self.log_every = log_every
        if mode == "auto":
            isatty = getattr(self.stream, "isatty", None)
            mode = "bar" if isatty is not None and isatty() else "log"
        self._bar: Any = None
        if mode == "bar":
            try:
                from tqdm import tqdm
            except ImportError:  # tqdm is only for terminals; log lines work everywhere
                mode = "log"
            else:
                self._bar = tqdm(
                    total=stats.total,
                    initial=stats.done_before,
                    unit="req",
                    file=self.stream,
                    dynamic_ncols=True,
                    smoothing=0.05,
                    mininterval=0.2,
                    desc="batch",
                )
        self.mode = mode
        self._next_log = time.monotonic() + log_every

    def message(self, text: str) -> None:
        """Print ``text`` on its own line (above the bar when there is one)."""
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def update(self) -> None:
        """One more line finished."""
        if self._bar is not None:
            self._bar.update(1)

    def tick(self) -> None:
        """Refresh counters (bar) or write a log line if one is due."""
        if self._bar is not None:
            self._bar.set_postfix_str(self._counters(), refresh=False)
        elif self.mode == "log" and time.monotonic() >= self._next_log:
            self._next_log = time.monotonic() + self.log_every
            self.log_line()

    def _counters(self) -> str:
        s = self.stats
        return (
            f"failed {s.failed}, retries {s.retries}, "
            f"tokens in {_count(s.tokens_in)} out {_count(s.tokens_out)}"
        )

    def log_line(self) -> None:
        """Write one plain progress line."""
        s = self.stats
        done = s.done_before + s.done
        rate = s.done / s.wall if s.wall > 0 else 0.0
        where = f"{done}/{s.total}" if s.total is not None else f"{done}"
        if s.total:
            where += f" ({100 * done / s.total:.1f}%)"
        eta = ""
        if s.total is not None and rate > 0:
            eta = f", ETA {_duration(max(0, s.total - done) / rate)}"
        print(
            f"batch: {where}, {rate:.1f} req/s{eta}, {self._counters()}",
            file=self.stream,
            flush=True,
        )

    def close(self) -> None:
        """Remove the bar (the summary follows it)."""
        if self._bar is not None:
            self._bar.set_postfix_str(self._counters(), refresh=True)
            self._bar.close()
            self._bar = None


def format_summary(stats: BatchStats, output: str | None = None) -> str:
    """The end-of-run report: counts, failures by kind, tokens, wall time, latency."""
    s = stats
    rate = s.done / s.wall if s.wall > 0 else 0.0
    lines = [
        f"batch: {s.done} lines in {s.wall:.2f} s ({rate:.1f}/s): {s.ok} ok, {s.failed} failed"
        + (f", {s.skipped} skipped (already in the output)" if s.skipped else "")
    ]
    if s.failures:
        kinds = ", ".join(f"{kind} {n}" for kind, n in s.failures.most_common())
        lines.append(f"  failures: {kinds}")
    lines.append(
        f"  retries: {s.retries} (empty answers {s.empty_retries}, unreadable bodies "
        f"{s.unreadable_retries}); tokens: in {s.tokens_in}, out {s.tokens_out}; "
        f"latency: p50 {_ms(s.latency.quantile(0.5))}, p95 {_ms(s.latency.quantile(0.95))}"
    )
    if output:
        lines.append(f"  output: {output}")
    return "\n".join(lines)
