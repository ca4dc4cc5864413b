"""The accounting of a stream that broke after its first byte and was continued by another
attempt: the broken attempt's row (error ``continued``, its own tokens) joins the others
without counting as a request in flight, and the request's own row carries only the
tokens of the attempt that finished it, so the rows of one request add up to what its
client was shown."""

from __future__ import annotations

import time
from collections.abc import Sequence

from bench import mock
from interlingua.core import Usage
from interlingua.server.accounting import Accounting, Meter, count_usage
from interlingua.server.app import OPENAI
from interlingua.server.asgi_io import StreamOutcome, StreamResponse
from interlingua.usage import record as record_module
from interlingua.usage.record import CONTINUED, NOT_FAILURES, Record, failed


class Rows:
    def __init__(self) -> None:
        self.rows: list[Record] = []

    def records(self, rows: Sequence[Record]) -> None:
        self.rows.extend(rows)


def fresh() -> Record:
    record = Record(at=0.0, request_id="r", key=None, dialect="openai", model="m")
    record.latency = time.perf_counter()
    return record


def test_continued_is_not_a_failure() -> None:
    assert CONTINUED == "continued" and CONTINUED in NOT_FAILURES
    assert "CONTINUED" in record_module.__all__
    row = fresh()
    row.status, row.error = 200, CONTINUED
    assert not failed(row)


def test_a_row_added_reaches_the_sinks_without_touching_the_in_flight_count() -> None:
    sink = Rows()
    accounting = Accounting([sink])
    tab = accounting.open("r", "openai")  # (no loop: drained at once)
    broken = Record(at=1.0, request_id="r", key=None, dialect="openai", model="m")
    broken.status, broken.error, broken.latency = 200, CONTINUED, 0.5
    broken.input_tokens, broken.output_tokens = 12, 7
    accounting.add_row(broken)
    assert accounting.in_flight == 1
    accounting.drain()
    assert sink.rows == [broken] and broken.latency == 0.5  # (handed over as it was)
    assert tab.record not in sink.rows


def test_a_metered_stream_keeps_only_the_finishing_attempts_tokens() -> None:
    # the mock stream reports 58 input and 17 output tokens: the sum the client was shown
    record = fresh()
    meter = Meter(record, OPENAI)
    meter.continued(Usage(input_tokens=50, output_tokens=5))
    meter.continued(Usage(input_tokens=5, output_tokens=2, cache_read_tokens=3))
    for chunk in mock.openai_stream().split(b"\n\n"):
        meter.see(chunk + b"\n\n")
    meter.done(StreamOutcome.COMPLETE)
    assert (record.input_tokens, record.output_tokens) == (3, 10)
    assert record.cached_tokens == 0 and record.error is None  # (never below 0)


def test_a_counted_stream_keeps_only_the_finishing_attempts_tokens() -> None:
    record = fresh()
    meter = Meter(record, OPENAI)
    meter.first_byte(b"data: {}\n\n")
    meter.continued(Usage(input_tokens=100, output_tokens=40, reasoning_tokens=10))
    count_usage(record, Usage(input_tokens=210, output_tokens=90, reasoning_tokens=25))
    meter.done(StreamOutcome.COMPLETE)
    assert (record.input_tokens, record.output_tokens, record.reasoning_tokens) == (110, 50, 15)


def test_a_stream_never_continued_keeps_its_counts() -> None:
    record = fresh()
    meter = Meter(record, OPENAI)
    count_usage(record, Usage(input_tokens=21, output_tokens=9))
    meter.done(StreamOutcome.COMPLETE)
    assert (record.input_tokens, record.output_tokens) == (21, 9)


def test_close_gives_a_stream_the_meters_continued() -> None:
    async def chunks():  # type: ignore[no-untyped-def]
        yield b""

    accounting = Accounting([Rows()])
    tab = accounting.open("r", "openai")
    response = StreamResponse(chunks(), counted=True)
    assert response.continued is None
    accounting.close(tab, response, OPENAI)
    assert response.continued is not None
    response.continued(Usage(input_tokens=4, output_tokens=4))
    count_usage(tab.record, Usage(input_tokens=10, output_tokens=6))
    assert response.finished is not None
    response.finished(StreamOutcome.COMPLETE)
    assert (tab.record.input_tokens, tab.record.output_tokens) == (6, 2)
    assert accounting.in_flight == 0


class Key:
    """A key's admission as the accounting settles it: the tokens it is charged."""

    def __init__(self) -> None:
        self.charged: list[int] = []

    def end(self, entry: int, tokens: int) -> None:
        self.charged.append(tokens)


def test_the_key_is_charged_every_attempts_tokens() -> None:
    """The key's token limits count what the request spent, as its client was shown it:
    the broken attempts' tokens too (their rows reach no key)."""

    async def chunks():  # type: ignore[no-untyped-def]
        yield b""

    accounting = Accounting([Rows()])
    tab = accounting.open("r", "openai")
    key = Key()
    tab.key, tab.entry = key, 0  # type: ignore[assignment]
    response = StreamResponse(chunks(), counted=True)
    accounting.close(tab, response, OPENAI)
    assert response.continued is not None and response.finished is not None
    response.continued(Usage(input_tokens=4, output_tokens=4))
    count_usage(tab.record, Usage(input_tokens=10, output_tokens=6))
    response.finished(StreamOutcome.COMPLETE)
    assert (tab.record.input_tokens, tab.record.output_tokens) == (6, 2)
    assert key.charged == [16]
