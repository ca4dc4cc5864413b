"""The stream meter reads usage from a stream's first and last events and finds an in-band
error at its end, however the stream's bytes were split into reads."""

from __future__ import annotations

import time

import pytest

from bench import mock
from interlingua.server.accounting import Meter
from interlingua.server.app import ANTHROPIC, OPENAI, RESPONSES
from interlingua.server.asgi_io import StreamOutcome
from interlingua.usage.record import Record

STREAMS = {
    "openai": (OPENAI, mock.openai_stream()),
    "anthropic": (ANTHROPIC, mock.anthropic_stream()),
    "responses": (RESPONSES, mock.responses_stream()),
}
#: every mock stream reports 58 input and 17 output tokens
TOKENS = (58, 17)


def metered(
    dialect: object, reads: list[bytes], outcome: StreamOutcome = StreamOutcome.COMPLETE
) -> Record:
    record = Record(at=0.0, request_id="r", key=None, dialect="x", model="m")
    record.latency = time.perf_counter()
    meter = Meter(record, dialect)  # type: ignore[arg-type]
    for read in reads:
        meter.see(read)
    meter.done(outcome)
    return record


def pieces(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


@pytest.mark.parametrize("name", STREAMS)
@pytest.mark.parametrize("size", [1, 2, 7, 64, 333, 4096, 1 << 20])
def test_usage_whatever_the_reads(name: str, size: int) -> None:
    dialect, stream = STREAMS[name]
    record = metered(dialect, pieces(stream, size))
    assert (record.input_tokens, record.output_tokens) == TOKENS
    assert record.error is None and record.ttft is not None


@pytest.mark.parametrize("size", [1, 5, 64, 1 << 20])
@pytest.mark.parametrize(
    ("name", "error", "kind"),
    [
        ("openai", b'data: {"error":{"message":"x","type":"server_error"}}\n\ndata: [DONE]\n\n',
         "upstream_error"),
        ("anthropic", b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
         b'"message":"x"}}\n\n', "overloaded"),
        ("responses", b'event: response.failed\ndata: {"type":"response.failed","response":'
         b'{"status":"failed","error":{"code":"server_error","message":"x"}}}\n\n',
         "upstream_error"),
    ],
)  # fmt: skip
def test_an_error_event_at_the_end(name: str, error: bytes, kind: str, size: int) -> None:
    dialect, stream = STREAMS[name]
    start = stream[: stream.index(b"\n\n") + 2]  # the first event, then the error
    record = metered(dialect, pieces(start + error, size))
    assert record.error == kind


def test_a_stream_the_client_left_is_a_client_disconnect() -> None:
    dialect, stream = STREAMS["openai"]
    record = metered(dialect, pieces(stream[:300], 50), StreamOutcome.CLIENT_GONE)
    assert record.error == "client_disconnect"


@pytest.mark.parametrize(
    ("outcome", "kind"),
    [(StreamOutcome.BROKEN, "upstream_error"), (StreamOutcome.CANCELLED, "cancelled")],
)
def test_an_outcome_names_its_kind_when_nothing_else_did(outcome: StreamOutcome, kind: str) -> None:
    dialect, stream = STREAMS["anthropic"]
    assert metered(dialect, pieces(stream[:300], 50), outcome).error == kind


def test_no_read_at_all() -> None:
    record = metered(OPENAI, [])
    assert record.error is None and record.ttft is None and record.input_tokens == 0


@pytest.mark.parametrize("size", [1, 2, 3, 64])
def test_the_reads_kept_stay_few_on_a_long_stream(size: int) -> None:
    # A long answer in small reads: only the reads that hold the last events are kept.
    dialect, stream = STREAMS["openai"]
    first, rest = stream.split(b"\n\n", 1)
    delta = rest.split(b"\n\n", 1)[0] + b"\n\n"
    long = first + b"\n\n" + delta * 300 + rest
    record = Record(at=0.0, request_id="r", key=None, dialect="x", model="m")
    record.latency = time.perf_counter()
    meter = Meter(record, dialect)  # type: ignore[arg-type]
    most = 0
    for i, read in enumerate(pieces(long, size)):
        meter.see(read)
        if i % 100 == 0:
            most = max(most, sum(map(len, meter._tail)))
    assert most <= 16 * len(delta)
    meter.done(StreamOutcome.COMPLETE)
    assert (record.input_tokens, record.output_tokens) == TOKENS
