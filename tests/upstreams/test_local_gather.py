"""upstreams/local/batch.py ``_gather``: how long an idle batch waits for the rest of a
burst, on a scripted clock (no model, no threads, no sleeping)."""

from __future__ import annotations

import math
from collections import deque
from types import SimpleNamespace

import pytest

from interlingua.upstreams.local import batch
from interlingua.upstreams.local.batch import GATHER, GATHER_MAX, BatchWorker


def gathered(
    monkeypatch: pytest.MonkeyPatch, arrivals: list[float], free: int = 4
) -> tuple[int, float]:
    """(jobs in the inbox, seconds waited) when ``_gather`` returns, one job in at 0 and
    one more at each time of ``arrivals``."""
    clock = [0.0]
    monkeypatch.setattr(batch, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    worker = object.__new__(BatchWorker)
    worker.sequences = [SimpleNamespace(job=None) for _ in range(free)]  # type: ignore[misc]
    worker._inbox = deque(["job"])  # type: ignore[arg-type]
    worker._stopping = False
    due = deque(arrivals)

    class Condition:
        def wait(self, timeout: float) -> None:
            """Until the next arrival (that one then in the inbox) or ``timeout``."""
            if due and due[0] <= clock[0] + timeout:
                clock[0] = due.popleft()
                worker._inbox.append("job")  # type: ignore[arg-type]
            else:
                clock[0] += timeout

    worker._cond = Condition()  # type: ignore[assignment]
    worker._gather()
    return len(worker._inbox), clock[0]


def test_a_lone_request_waits_the_window_once(monkeypatch: pytest.MonkeyPatch) -> None:
    assert gathered(monkeypatch, []) == (1, pytest.approx(GATHER))


def test_a_burst_arriving_one_by_one_is_waited_for_until_every_place_is_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # (3 ms apart: a window from the first arrival alone would have closed at 4 ms)
    assert gathered(monkeypatch, [0.003, 0.006, 0.009]) == (4, pytest.approx(0.009))


def test_the_wait_ends_a_window_after_the_last_arrival(monkeypatch: pytest.MonkeyPatch) -> None:
    assert gathered(monkeypatch, [0.003]) == (2, pytest.approx(0.003 + GATHER))
    assert gathered(monkeypatch, [0.003, 0.003 + 1.5 * GATHER]) == (2, pytest.approx(0.007))


def test_a_steady_trickle_is_waited_for_at_most_gather_max(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    every = GATHER / 2
    arrivals = [every * (i + 1) for i in range(100)]
    jobs, waited = gathered(monkeypatch, arrivals, free=100)
    assert waited == pytest.approx(GATHER_MAX)
    assert jobs == 1 + math.floor(GATHER_MAX / every + 1e-9)
