"""Progress counters, log lines and the summary (no terminal, no sockets)."""

from __future__ import annotations

import io
import re

from interlingua.batch.progress import BatchStats, LatencyHistogram, Progress, format_summary


def test_histogram_quantiles_are_within_two_percent() -> None:
    hist = LatencyHistogram()
    samples = [i / 1000 for i in range(1, 1001)]  # 1 ms .. 1 s
    for s in samples:
        hist.add(s)
    assert abs(hist.quantile(0.5) - 0.5) / 0.5 < 0.02  # type: ignore[operator]
    assert abs(hist.quantile(0.95) - 0.95) / 0.95 < 0.02  # type: ignore[operator]
    assert LatencyHistogram().quantile(0.5) is None
    assert len(hist.buckets) < 400  # bounded however many samples


def test_log_mode_when_not_a_terminal() -> None:
    stats = BatchStats(total=100, done_before=10)
    stream = io.StringIO()
    progress = Progress(stats, stream=stream, log_every=0.0)
    assert progress.mode == "log"
    for _ in range(30):
        stats.record(None, 0.1, 5, 2)
    stats.record("timeout", 2.0)
    stats.retries = 4
    progress.tick()
    line = stream.getvalue()
    assert line.startswith("batch: 41/100 (41.0%), ")
    assert "req/s, ETA " in line
    assert "failed 1, retries 4, tokens in 150 out 60" in line
    progress.close()


def test_off_mode_writes_nothing() -> None:
    stream = io.StringIO()
    progress = Progress(BatchStats(), mode="off", stream=stream, log_every=0.0)
    progress.update()
    progress.tick()
    progress.close()
    assert stream.getvalue() == ""


def test_bar_mode_draws_a_bar_with_the_counters() -> None:
    stream = io.StringIO()
    stats = BatchStats(total=10)
    progress = Progress(stats, mode="bar", stream=stream)
    stats.record("bad (HTTP 400)")
    progress.update()
    progress.tick()
    progress.close()
    out = stream.getvalue()
    assert "1/10" in out and "failed 1" in out


def test_summary() -> None:
    stats = BatchStats(skipped=3)
    for _ in range(9):
        stats.record(None, 0.1, 10, 4)
    stats.record("upstream_error (HTTP 500)", 0.3)
    stats.retries, stats.empty_retries, stats.unreadable_retries = 4, 1, 1
    stats.finished = stats.started + 2.0
    text = format_summary(stats, "out.jsonl")
    assert text.splitlines()[0] == (
        "batch: 10 lines in 2.00 s (5.0/s): 9 ok, 1 failed, 3 skipped (already in the output)"
    )
    assert "failures: upstream_error (HTTP 500) 1" in text
    assert "retries: 4 (empty answers 1, unreadable bodies 1); tokens: in 90, out 36" in text
    p50, p95 = (int(x) for x in re.findall(r"p\d\d (\d+) ms", text))
    assert 98 <= p50 <= 102 and 294 <= p95 <= 306  # the histogram is 2 % wide
    assert "output: out.jsonl" in text
