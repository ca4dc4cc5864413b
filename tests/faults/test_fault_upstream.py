"""The fault upstream sends exactly the bytes each fault claims.

A raw-socket client reads them, so that when a fault-matrix cell fails the blame lands on
the gateway, not on the instrument.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from .fault_upstream import HTML_PAGE, PLAIN_TEXT, FaultUpstream, expected_text, parse_fault
from .fault_wire import ANSWER_TEXT, ANTHROPIC, OPENAI, huge_text
from .raw_client import RawClient, sse_data

PATHS = {OPENAI: "/v1/chat/completions", ANTHROPIC: "/v1/messages"}
DIALECTS = [OPENAI, ANTHROPIC]


@pytest.fixture(scope="module")
def up() -> Iterator[FaultUpstream]:
    with FaultUpstream(hold=5.0) as server:
        yield server
    assert server.errors == []


def body(model: str, stream: bool = False, **extra: Any) -> dict[str, Any]:
    """A minimal chat request for ``model``."""
    return {
        "model": model,
        "max_tokens": 50,
        "stream": stream,
        "messages": [{"role": "user", "content": "Hi"}],
        **extra,
    }


def stream_text(dialect: str, datas: list[bytes]) -> str:
    """The text carried by a stream's data payloads (all must be valid JSON but [DONE])."""
    text = []
    for data in datas:
        if data == b"[DONE]":
            continue
        event = orjson.loads(data)
        if dialect == OPENAI:
            text += [c["delta"].get("content") or "" for c in event["choices"]]
        elif event["type"] == "content_block_delta":
            text.append(event["delta"]["text"])
    return "".join(text)


def json_text(dialect: str, payload: bytes) -> str:
    answer = orjson.loads(payload)
    if dialect == OPENAI:
        return str(answer["choices"][0]["message"]["content"])
    return str(answer["content"][0]["text"])


def end_marker(dialect: str) -> bytes:
    return b"data: [DONE]\n\n" if dialect == OPENAI else b'data: {"type":"message_stop"}\n\n'


def test_parse_fault() -> None:
    assert parse_fault("ok") == ("ok", None)
    assert parse_fault("fault/huge:1000") == ("huge", "1000")
    assert parse_fault("drip:0.5") == ("drip", "0.5")
    assert expected_text("huge", "100") == huge_text(100)
    assert len(huge_text(1_000_000).encode()) == 1_000_000


@pytest.mark.parametrize("dialect", DIALECTS)
def test_ok_answers_and_keeps_the_connection(up: FaultUpstream, dialect: str) -> None:
    with RawClient(up.url) as raw:
        raw.post(PATHS[dialect], body("ok"), ("authorization", "Bearer k"))
        status, headers, payload = raw.response()
        assert status == 200 and headers["content-type"] == "application/json"
        assert int(headers["content-length"]) == len(payload)
        assert json_text(dialect, payload) == ANSWER_TEXT
        raw.post(PATHS[dialect], body("ok", marker=f"2-{dialect}"))  # same socket: keep-alive
        assert raw.response()[0] == 200
    first, second = up.requests[-2:]
    assert first.path == PATHS[dialect] and first.headers["authorization"] == "Bearer k"
    assert second.connection == first.connection and (first.index, second.index) == (0, 1)
    assert up.received(f'"marker":"2-{dialect}"') == 1


@pytest.mark.parametrize("dialect", DIALECTS)
def test_ok_stream_is_chunked_and_complete(up: FaultUpstream, dialect: str) -> None:
    with RawClient(up.url) as raw:
        raw.post(PATHS[dialect], body("ok", stream=True))
        status, headers = raw.read_head()
        assert status == 200 and headers["transfer-encoding"] == "chunked"
        assert headers["content-type"] == "text/event-stream"
        chunks = raw.read_chunks()
    whole = b"".join(chunks)
    assert not chunks[1].endswith(b"\n\n")  # one event split across two chunks
    assert whole.endswith(end_marker(dialect))
    assert stream_text(dialect, sse_data(whole)) == ANSWER_TEXT


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("fault", "ctype", "page"),
    [("html-200", "text/html", HTML_PAGE), ("text-200", "text/plain", PLAIN_TEXT)],
)
def test_non_json_200(
    up: FaultUpstream, dialect: str, stream: bool, fault: str, ctype: str, page: bytes
) -> None:
    with RawClient(up.url) as raw:
        raw.post(PATHS[dialect], body(fault, stream))
        status, headers, payload = raw.response()
    assert status == 200 and headers["content-type"].startswith(ctype)
    assert payload == page


@pytest.mark.parametrize("dialect", DIALECTS)
def test_truncate_stream_is_close_delimited_and_cut(up: FaultUpstream, dialect: str) -> None:
    with RawClient(up.url) as raw:
        raw.post(PATHS[dialect], body("truncate", stream=True))
        status, headers = raw.read_head()
        assert "content-length" not in headers and "transfer-encoding" not in headers
        rest = raw.read_to_eof()
    assert status == 200 and rest.endswith(b"\n\n")  # cut at an event boundary
    assert end_marker(dialect) not in rest
    text = stream_text(dialect, sse_data(rest))
    assert text and ANSWER_TEXT.startswith(text) and text != ANSWER_TEXT


@pytest.mark.parametrize("dialect", DIALECTS)
def test_truncate_json_is_cut_halfway(up: FaultUpstream, dialect: str) -> None:
    with RawClient(up.url) as raw:
        raw.post(PATHS[dialect], body("truncate"))
        status, headers = raw.read_head()
        assert "content-length" not in headers and "transfer-encoding" not in headers
        rest = raw.read_to_eof()
    assert status == 200 and rest.startswith(b'{"')
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(rest)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_bad_json_event_then_the_rest(up: FaultUpstream, dialect: str) -> None:
    with RawClient(up.url) as raw:
        raw.post(PATHS[dialect], body("bad-json-event", stream=True))
        assert raw.read_head()[0] == 200
        whole = b"".join(raw.read_chunks())
    datas = [data for data in sse_data(whole) if data != b"[DONE]"]
    bad = []
    for i, data in enumerate(datas):
        try:
            orjson.loads(data)
        except orjson.JSONDecodeError:
            bad.append(i)
    assert len(bad) == 1 and 1 < bad[0] < len(datas) - 2  # mid-stream, one event
    assert whole.endswith(end_marker(dialect))
    with RawClient(up.url) as raw:
        raw.post(PATHS[dialect], body("bad-json-event"))
        status, _, payload = raw.response()
    assert status == 200
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(payload)


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("stream", [False, True])
def test_bad_chunk_size(up: FaultUpstream, dialect: str, stream: bool) -> None:
    with RawClient(up.url) as raw:
        raw.post(PATHS[dialect], body("bad-chunk-size", stream))
        status, headers = raw.read_head()
        assert status == 200 and headers["transfer-encoding"] == "chunked"
        first = raw.read_exactly(int(raw.read_line(), 16))
        assert raw.read_exactly(2) == b"\r\n"
        with pytest.raises(ValueError, match="invalid literal"):
            int(raw.read_line().split(b";")[0], 16)
        assert raw.open_after(0.3)  # held open: only the framing tells it is broken
    assert not first.endswith(b"\n\n") and not first.endswith(b"}")  # cut mid-event


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("stream", [False, True])
def test_short_content_length(up: FaultUpstream, dialect: str, stream: bool) -> None:
    with RawClient(up.url) as raw:
        raw.post(PATHS[dialect], body("short-content-length", stream))
        status, headers = raw.read_head()
        rest = raw.read_to_eof()
    assert status == 200 and int(headers["content-length"]) > len(rest) > 0
    if stream:
        assert not rest.endswith(b"\n\n")  # cut mid-event
    else:
        assert json_text(dialect, rest) == ANSWER_TEXT


def test_hang_headers_reads_and_never_answers(up: FaultUpstream) -> None:
    with RawClient(up.url) as raw:
        raw.post(PATHS[OPENAI], body("hang-headers", marker="hh"))
        assert raw.open_after(0.5) and raw.buffer == b""
    assert up.received(b'"marker":"hh"') == 1


@pytest.mark.parametrize("stream", [False, True])
def test_hang_body_sends_part_then_silence(up: FaultUpstream, stream: bool) -> None:
    with RawClient(up.url) as raw:
        raw.post(PATHS[ANTHROPIC], body("hang-body", stream))
        status, headers = raw.read_head()
        assert raw.open_after(0.5)
    assert status == 200
    if stream:
        assert b"message_start" in raw.buffer and b"message_stop" not in raw.buffer
    else:
        assert 0 < len(raw.buffer) < int(headers["content-length"])


def test_drip_sends_a_byte_at_a_time(up: FaultUpstream) -> None:
    interval = 0.002
    started = time.monotonic()
    reads = 0
    with RawClient(up.url) as raw:
        raw.post(PATHS[OPENAI], body(f"drip:{interval}"))
        while b"\r\n\r\n" not in raw.buffer:
            assert raw._fill()
            reads += 1
        status, headers = raw.read_head()
        payload = raw.read_exactly(int(headers["content-length"]))
    total = len(payload) + 100
    assert status == 200 and json_text(OPENAI, payload) == ANSWER_TEXT
    assert reads > 20  # the head alone came in many pieces
    assert time.monotonic() - started >= total * interval * 0.5  # sleep never returns early


@pytest.mark.parametrize("dialect", DIALECTS)
def test_huge_answers(up: FaultUpstream, dialect: str) -> None:
    with RawClient(up.url) as raw:
        raw.post(PATHS[dialect], body("huge:1000000"))
        status, _, payload = raw.response()
        assert status == 200 and json_text(dialect, payload) == huge_text(1_000_000)
        raw.post(PATHS[dialect], body("huge:100000", stream=True))
        status, _, streamed = raw.response()
    assert status == 200 and stream_text(dialect, sse_data(streamed)) == huge_text(100_000)
    assert streamed.endswith(end_marker(dialect))


@pytest.mark.parametrize("dialect", DIALECTS)
def test_huge_error(up: FaultUpstream, dialect: str) -> None:
    with RawClient(up.url) as raw:
        raw.post(PATHS[dialect], body("huge-error", stream=True))
        status, _, payload = raw.response()
    assert status == 500 and 1_000_000 <= len(payload) < 1_000_100
    error = orjson.loads(payload)["error"]
    assert len(error["message"]) > 999_000


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("code", [429, 500, 503, 529])
def test_error_statuses(up: FaultUpstream, dialect: str, code: int) -> None:
    with RawClient(up.url) as raw:
        raw.post(PATHS[dialect], body(str(code), stream=True))
        status, headers, payload = raw.response()
    assert status == code
    assert (headers.get("retry-after") == "7") == (code == 429)
    error = orjson.loads(payload)
    if dialect == ANTHROPIC or code == 529:
        assert error["type"] == "error"
        kinds = {429: "rate_limit_error", 500: "api_error", 503: "api_error"}
        assert error["error"]["type"] == kinds.get(code, "overloaded_error")
    else:
        assert error["error"]["message"] == f"fault upstream says {code}"


def test_close_reused_answers_first_then_closes(up: FaultUpstream) -> None:
    before = len(up.unanswered)
    with RawClient(up.url) as raw:
        raw.post(PATHS[OPENAI], body("close-reused", marker="cr-1"))
        assert raw.response()[0] == 200
        raw.post(PATHS[OPENAI], body("close-reused", marker="cr-2"))
        assert raw.read_to_eof() == b""  # read, then closed without a byte
    assert up.received(b'"marker":"cr-1"') == up.received(b'"marker":"cr-2"') == 1
    assert [r.index for r in up.unanswered[before:]] == [1]


@pytest.mark.parametrize("dialect", DIALECTS)
def test_echo_key(up: FaultUpstream, dialect: str) -> None:
    with RawClient(up.url) as raw:
        raw.post(PATHS[dialect], body("echo-key"), ("x-api-key", "sk-echo-me"))
        status, _, payload = raw.response()
    assert status == 200 and "x-api-key=sk-echo-me" in json_text(dialect, payload)


def test_unknown_fault_and_path(up: FaultUpstream) -> None:
    with RawClient(up.url) as raw:
        raw.post(PATHS[OPENAI], body("no-such-fault"))
        assert raw.response()[0] == 400
        raw.post("/v1/other", body("ok"))
        assert raw.response()[0] == 404


def test_usage_chunk_only_when_asked(up: FaultUpstream) -> None:
    options = {"stream_options": {"include_usage": True}}
    with RawClient(up.url) as raw:
        raw.post(PATHS[OPENAI], body("ok", stream=True))
        plain = raw.response()[2]
        raw.post(PATHS[OPENAI], body("ok", stream=True, **options))
        with_usage = raw.response()[2]
    assert b'"usage"' not in plain and b'"usage"' in with_usage
