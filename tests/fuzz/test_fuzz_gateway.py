"""Fuzzing the gateway: generated request bodies through both paths of every dialect.

Every body (see :mod:`.strategies`: well-formed ones broken in random places, huge
numbers, lone surrogates, deep nesting, duplicate keys, truncation) goes to two apps for
its dialect: one whose upstream speaks the same dialect (the passthrough path) and one
whose upstream speaks another (the translated path). Both upstreams are fakes that
answer 200, so any status >= 500 is the gateway's own failure. Asserted for every case:

* status < 500;
* a 4xx body is JSON in the caller's dialect error shape; a 200 is JSON or an SSE stream
  that carries no internal error;
* nothing is logged at ERROR by the ``interlingua`` loggers (``unexpected failure`` and
  ``stream failed after the first byte`` are how a bug shows).

The default run is a few thousand cases; ``pytest -m slow tests/fuzz`` runs 100,000+.
The app is called as plain ASGI (no HTTP client in between), which is the cheap way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from interlingua.config import parse_config
from interlingua.server import create_app
from interlingua.upstreams.fake import FakeUpstream

from .strategies import raw_body

PATHS = {
    "openai": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "responses": "/v1/responses",
}
OTHER = {"openai": "anthropic", "anthropic": "openai", "responses": "openai"}
#: per dialect: 600 bodies, 1,200 requests (~9 s; the default run must stay under 10 min)
DEFAULT_CASES = 300
SLOW_CASES = 50_000  # per dialect: 100,000 bodies, 200,000 requests


class _Errors(logging.Handler):
    """Keeps every record at ERROR or above (and any record with a traceback)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR or record.exc_info:
            self.records.append(record)

    def describe(self) -> str:
        """The first record kept, with its traceback."""
        record = self.records[0]
        trace = logging.Formatter().formatException(record.exc_info) if record.exc_info else ""
        return f"{record.getMessage()}\n{trace}"


@pytest.fixture
def logged_errors() -> Iterator[_Errors]:
    handler = _Errors()
    logger = logging.getLogger("interlingua")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


def _app(wire: str) -> Any:
    config = parse_config(
        {"upstreams": {"up": {"kind": "fake"}}, "models": [{"name": "m", "upstream": "up"}]}
    )
    return create_app(config, upstreams={"up": FakeUpstream("up", wire=wire, chunk_size=8)})


async def call(app: Any, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
    """One POST straight through the ASGI interface: (status, headers, body)."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "client": ("127.0.0.1", 9), "server": ("gw", 80),
        "headers": [(b"host", b"gw"), (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode())],
    }  # fmt: skip
    sent_body = False
    finished = asyncio.Event()
    status = 0
    headers: dict[str, str] = {}
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal sent_body
        if not sent_body:
            sent_body = True
            return {"type": "http.request", "body": body, "more_body": False}
        await finished.wait()  # as a server does: a disconnect only once the answer is out
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
            headers.update((k.decode(), v.decode()) for k, v in message["headers"])
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                finished.set()

    await asyncio.wait_for(app(scope, receive, send), timeout=30)
    return status, headers, b"".join(chunks)


def check_answer(dialect: str, status: int, headers: dict[str, str], body: bytes) -> None:
    """The invariants of one answer (see the module docstring)."""
    assert 200 <= status < 500, (status, body[:300])
    if status == 200 and headers.get("content-type", "").startswith("text/event-stream"):
        assert b"internal gateway error" not in body, body[-300:]
        return
    assert headers["content-type"] == "application/json"
    parsed = orjson.loads(body)
    if status == 200:
        assert "internal gateway error" not in body.decode(errors="replace")
        return
    if dialect != "anthropic":  # the OpenAI error shape, Responses included
        assert set(parsed) == {"error"}, parsed
        error = parsed["error"]
        assert isinstance(error["message"], str) and error["message"]
        assert {"type", "param", "code"} <= set(error)
    else:
        assert parsed["type"] == "error" and set(parsed) == {"type", "error", "request_id"}
        assert isinstance(parsed["error"]["message"], str) and parsed["error"]["message"]
        assert isinstance(parsed["error"]["type"], str)


def _run(dialect: str, cases: int, logged_errors: _Errors) -> None:
    loop = asyncio.new_event_loop()
    apps = {"passthrough": _app(dialect), "translated": _app(OTHER[dialect])}
    seen = {"cases": 0, "4xx": 0}

    @settings(
        max_examples=cases,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(body=raw_body(dialect))
    def one_case(body: bytes) -> None:
        for path_name, app in apps.items():
            logged_errors.records.clear()
            status, headers, answer = loop.run_until_complete(call(app, PATHS[dialect], body))
            assert not logged_errors.records, (path_name, logged_errors.describe())
            check_answer(dialect, status, headers, answer)
            seen["4xx"] += status >= 400
        seen["cases"] += 1

    try:
        one_case()
    finally:
        loop.close()
    # Both outcomes happen: the generator is neither all-valid nor all-broken.
    print(
        f"\nfuzz {dialect}: {seen['cases']} bodies, {seen['4xx']} of {2 * seen['cases']} answers 4xx"
    )
    assert 0 < seen["4xx"] < 2 * seen["cases"], seen


@pytest.mark.parametrize("dialect", list(PATHS))
def test_fuzz_both_paths(dialect: str, logged_errors: _Errors) -> None:
    _run(dialect, DEFAULT_CASES, logged_errors)


@pytest.mark.slow
@pytest.mark.parametrize("dialect", list(PATHS))
def test_fuzz_both_paths_long(dialect: str, logged_errors: _Errors) -> None:
    _run(dialect, SLOW_CASES, logged_errors)
