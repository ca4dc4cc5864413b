"""The accounting hands finished records to the sinks in batches: within DRAIN_SECONDS,
at once when DRAIN_MAX wait, and whenever a sink that reads its counts asks first
(``catch_up``): a scrape, the status page's data, the usage log's flush, shutdown."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import pytest

from interlingua.dialects import get_dialect
from interlingua.server.accounting import DRAIN_MAX, DRAIN_SECONDS, Accounting
from interlingua.server.asgi_io import BytesResponse
from interlingua.server.views.metrics import Metrics
from interlingua.usage import UsageLog, connect
from interlingua.usage.record import Record

from .views.test_metrics import samples, value

OPENAI = get_dialect("openai")
ANSWER = b'{"id":"x","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}'


class Batches:
    """A sink that keeps each batch it is handed."""

    def __init__(self) -> None:
        self.batches: list[list[Record]] = []

    def records(self, rows: Sequence[Record]) -> None:
        self.batches.append(list(rows))

    @property
    def rows(self) -> list[Record]:
        return [row for batch in self.batches for row in batch]


def answer(accounting: Accounting, request_id: str) -> None:
    tab = accounting.open(request_id, "openai")
    tab.record.model = "m"
    accounting.close(tab, BytesResponse(ANSWER), OPENAI)


def test_records_reach_the_sinks_together_within_the_interval() -> None:
    async def main() -> tuple[int, list[list[Record]]]:
        sink = Batches()
        accounting = Accounting([sink])
        for i in range(3):
            answer(accounting, f"req_{i}")
        at_once = len(sink.rows)
        await asyncio.sleep(DRAIN_SECONDS * 3)
        return at_once, sink.batches

    at_once, batches = asyncio.run(main())
    assert at_once == 0  # not one by one...
    assert [[r.request_id for r in b] for b in batches if b] == [["req_0", "req_1", "req_2"]]
    assert batches[-1][0].input_tokens == 7 and batches[-1][0].output_tokens == 3


def test_a_full_batch_is_handed_over_at_once() -> None:
    async def main() -> list[int]:
        sink = Batches()
        accounting = Accounting([sink])
        for i in range(DRAIN_MAX + 1):
            answer(accounting, f"req_{i}")
        return [len(batch) for batch in sink.batches]

    assert asyncio.run(main()) == [DRAIN_MAX]  # (the one more waits for the next)


def test_a_scrape_sees_every_finished_request_and_the_in_flight_count() -> None:
    async def main() -> tuple[float, float, float, float]:
        metrics = Metrics()
        accounting = Accounting([metrics])
        metrics.live = lambda: accounting.in_flight
        answer(accounting, "req_1")
        waiting = accounting.open("req_2", "openai")
        found = samples(metrics.render()[0].decode())  # no sleep: the scrape catches up
        requests = value(
            found, "interlingua_requests_total", model="m", key="", dialect="openai", status="200"
        )
        tokens = value(found, "interlingua_tokens_total", model="m", key="", direction="input")
        in_flight = value(found, "interlingua_in_flight")
        waiting.record.model = "m"
        accounting.abandon(waiting)
        after = value(samples(metrics.render()[0].decode()), "interlingua_in_flight")
        return requests, tokens, in_flight, after

    assert asyncio.run(main()) == (1.0, 7.0, 1.0, 0.0)


def test_the_usage_log_flush_catches_up() -> None:
    async def main() -> list[tuple[object, ...]]:
        log = UsageLog(connect("sqlite://:memory:"))
        accounting = Accounting([log])
        answer(accounting, "req_1")
        await log.flush()  # (before any drain came due)
        rows = await log.db.fetch("SELECT request_id, input_tokens FROM interlingua_usage")
        await log.aclose()
        return [tuple(r) for r in rows]

    assert asyncio.run(main()) == [("req_1", 7)]


def test_a_failing_sink_does_not_keep_records_from_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken:
        def records(self, rows: Sequence[Record]) -> None:
            raise RuntimeError("a bug in a sink")

    sink = Batches()
    accounting = Accounting([Broken(), sink])
    with caplog.at_level(logging.ERROR, "interlingua.server"):
        answer(accounting, "req_1")  # (no running loop: handed over at once)
    assert [r.request_id for r in sink.rows] == ["req_1"]
    assert "a bug in a sink" in caplog.text


def test_a_drain_asked_for_while_draining_waits_for_the_next(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A sink whose catch_up runs while it is being handed records (a flush inside
    # records()) must not hand over the same records twice, nor recurse.
    class Reader(Batches):
        catch_up = staticmethod(lambda: None)

        def records(self, rows: Sequence[Record]) -> None:
            super().records(rows)
            self.catch_up()

    reader = Reader()
    accounting = Accounting([reader])
    with caplog.at_level(logging.ERROR):
        answer(accounting, "req_1")  # (no running loop: handed over at once)
        accounting.drain()
    # (no loop: open, finish and the explicit drain each hand over what waits, once)
    assert [[r.request_id for r in batch] for batch in reader.batches] == [[], ["req_1"], []]
    assert not caplog.records
