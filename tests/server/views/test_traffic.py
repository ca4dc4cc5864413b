"""server/views/traffic.py: a request added once to its combination's ring shows in its model's,
key's and deployment's series exactly as if added to each."""

from __future__ import annotations

import random

import pytest

from interlingua.server.views import traffic as traffic_module
from interlingua.server.views.traffic import MINUTES, Traffic
from interlingua.usage.record import Record


def _records(n: int, seed: int = 7) -> list[Record]:
    pick = random.Random(seed)
    rows = []
    for i in range(n):
        row = Record(
            at=60.0 * pick.randrange(1000, 1000 + MINUTES + 5) + pick.random(),
            request_id=f"r{i}",
            key=pick.choice([None, "team-a", "team-b"]),
            dialect="openai",
            model=pick.choice(["lb", "solo", "typo"]),
        )
        if pick.random() < 0.9:
            row.upstream = pick.choice(["a", "b"])
            row.upstream_model = pick.choice(["m1", "m2", None])
        row.status = pick.choice([200, 200, 200, 400, 429, 502])
        row.error = {400: "invalid_request", 429: "rate_limit", 502: "upstream_error"}.get(
            row.status
        )
        row.input_tokens, row.output_tokens = pick.randrange(100), pick.randrange(50)
        row.latency = pick.random()
        row.ttft = pick.random() if pick.random() < 0.5 else None
        rows.append(row)
    # (in the order they end, near enough the order they arrived: a ring keeps a minute
    # until a later one takes its slot)
    return sorted(rows, key=lambda row: row.at)


@pytest.mark.parametrize("combos", [0, 3])
def test_rings_per_combination_add_up_as_series_per_name(
    monkeypatch: pytest.MonkeyPatch, combos: int
) -> None:
    rows = _records(400)
    now = max(row.at for row in rows)
    whole = Traffic()
    for row in rows:
        whole.record(row)
    monkeypatch.setattr(traffic_module, "MAX_COMBOS", combos)  # (0: every row alone)
    alone = Traffic()
    for row in rows:
        alone.record(row)
    got, want = whole.snapshot(now), alone.snapshot(now)
    assert got["errors"] == want["errors"]
    assert got["series"].keys() == want["series"].keys()
    for kind, named in want["series"].items():
        assert got["series"][kind].keys() == named.keys(), kind
        for name, minutes in named.items():
            assert _rounded(got["series"][kind][name]) == _rounded(minutes), (kind, name)
    deployment = got["series"]["deployment"]
    assert sum(c[1] for m in deployment.values() for c in m.values()) > 0  # upstream failures


def _rounded(minutes: dict[str, list[float]]) -> dict[str, list[float]]:
    """(sums of floats added in another order differ in their last bits)"""
    return {minute: [round(v, 9) for v in counts] for minute, counts in minutes.items()}
