"""What the metrics and the status page cost per request, in process (µs).

``python -m bench.metrics_record`` prints, for one request as the gateway reports it --
``request_started()``, one ``attempt()``, ``record(row)``, ``request_ended()`` -- the
microseconds it takes in single-process mode and in prometheus-client's multiprocess mode
(``serve --workers N``: every increment is written to a memory-mapped file; measured in a
child process, since the mode is chosen when prometheus-client is first imported), and
what ``StatusPage.record`` adds; and, apart, what a flush of the counts into
prometheus-client costs (at each scrape; in multiprocess mode also once a second while
traffic comes: server/views/metrics.py). Rows cycle through a few models, keys and statuses, as
traffic does, so label lookups are not all one dict hit.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time

import orjson

from interlingua.config import fake_config
from interlingua.routing import Router
from interlingua.server.views.metrics import Metrics
from interlingua.server.views.multiproc import MULTIPROC_ENV, multiprocess_dir
from interlingua.server.views.status_page import StatusPage
from interlingua.upstreams.fake import FakeUpstream
from interlingua.usage.record import Record

from .micro import best_of


def _rows() -> list[Record]:
    rows = []
    for i in range(64):
        row = Record(
            at=time.time(),
            request_id=f"req_{i}",
            key=("team-a", "team-b", "team-c")[i % 3],
            dialect=("openai", "anthropic")[i % 2],
            model=("smart", "small", "fast", "big")[i % 4],
            stream=bool(i % 2),
        )
        row.upstream, row.upstream_model = "up", row.model
        row.status = 429 if i % 16 == 0 else 200
        row.error = "rate_limit" if row.status == 429 else None
        row.input_tokens, row.output_tokens = 500 + i, 120 + i
        row.cached_tokens = 256 if i % 4 == 0 else 0
        row.latency, row.ttft = 0.2 + i / 100, (0.05 if row.stream else None)
        rows.append(row)
    return rows


def measure() -> dict[str, float]:
    """µs per request (the metrics' four calls; the status page's record) and µs per
    flush of a second's worth of traffic, run inside an event loop as the gateway runs."""
    return asyncio.run(_measure())


async def _measure() -> dict[str, float]:
    rows = _rows()
    metrics = Metrics()
    config = fake_config()
    page = StatusPage(Router(config, {"fake": FakeUpstream()}))
    state = {"i": 0}

    def one_request() -> None:
        i = state["i"] = (state["i"] + 1) & 63
        metrics.request_started()
        metrics.attempt("up", "ok")
        metrics.record(rows[i])
        metrics.request_ended()

    def one_page_record() -> None:
        i = state["i"] = (state["i"] + 1) & 63
        page.record(rows[i])

    def all_rows() -> None:
        for row in rows:
            metrics.record(row)

    def all_rows_and_flush() -> None:  # every label set of _rows() changed: all flushed
        all_rows()
        metrics.flush()

    per_flush = best_of(all_rows_and_flush, budget_s=0.5) - best_of(all_rows, budget_s=0.5)
    return {
        "metrics": best_of(one_request, budget_s=0.5) * 1e6,
        "flush": per_flush * 1e6,
        "label sets": len({(r.model, r.key, r.dialect, r.status, r.stream) for r in rows}),
        "status page": best_of(one_page_record, budget_s=0.5) * 1e6,
    }


def main() -> None:
    if "--child" in sys.argv:
        assert multiprocess_dir() is not None
        print(orjson.dumps(measure()).decode())
        return
    single = measure()
    with tempfile.TemporaryDirectory(prefix="interlingua-bench-metrics-") as directory:
        environment = {**os.environ, MULTIPROC_ENV: directory}
        out = subprocess.run(
            [sys.executable, "-m", "bench.metrics_record", "--child"],
            env=environment,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    multi = orjson.loads(out)
    print("µs per request (request_started + attempt + record + request_ended):")
    print(f"  metrics, one process:        {single['metrics']:.2f}")
    print(f"  metrics, multiprocess mode:  {multi['metrics']:.2f}")
    print(f"  status page record:          {single['status page']:.2f}")
    sets = single["label sets"]
    print(
        f"µs per flush of {sets} changed label sets (at a scrape; each second in multiprocess mode):"
    )
    print(f"  one process:                 {single['flush']:.1f}")
    print(f"  multiprocess mode:           {multi['flush']:.1f}")


if __name__ == "__main__":
    main()
