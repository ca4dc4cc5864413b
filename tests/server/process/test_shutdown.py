"""SIGTERM drains a real ``interlingua serve`` process (server/drain.py, server/process/guard.py).

With the official SDKs as clients of streams in flight: a stream shorter than
``shutdown_timeout`` finishes normally; a longer one ends with the dialect's in-band
error, which each SDK raises as its typed API error (not a transport error). Meanwhile
``/health`` answers 503 ``draining`` and new generation requests a 503 in the caller's
dialect on the connections still open; the process exits 0 with no traceback. The same
with ``--workers 2``, whose supervisor passes SIGTERM on to its workers.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from aiohttp import web

from ..gateway_process import Gateway, serve
from ..mock_upstream import MockOpenAI, endless, mock_openai, stream_events

SHUTDOWN_TIMEOUT = 2.5


def _short_stream(pause: float) -> Any:
    """The usual tool-call stream, ``pause`` seconds between events (about 2 s in all)."""

    async def behaviour(
        mock: MockOpenAI, request: web.Request, body: dict[str, Any]
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)
        for event in stream_events(str(body.get("model"))):
            await resp.write(event)
            await asyncio.sleep(pause)
        await resp.write_eof()
        return resp

    return behaviour


async def _hang(mock: MockOpenAI, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
    """Answer nothing for 10 s (a non-stream request the drain has to end)."""
    await asyncio.sleep(10)
    return web.Response(status=500)


def _config(base_url: str) -> dict[str, Any]:
    return {
        # A long keep-alive so the idle connections the test holds stay open to the drain.
        "server": {"shutdown_timeout": SHUTDOWN_TIMEOUT, "keep_alive_timeout": 30},
        "upstreams": {"mock": {"kind": "openai", "base_url": base_url}},
        "models": [{"name": "*", "upstream": "mock"}],
    }


class _Run:
    """Consume a stream on a thread; keeps what arrived and how it ended."""

    def __init__(self, consume: Callable[[_Run], None]) -> None:
        self.first = threading.Event()
        self.text = ""
        self.finished: str | None = None
        self.error: BaseException | None = None
        self._consume = consume
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self._consume(self)
        except BaseException as exc:  # examined by the test
            self.error = exc
        finally:
            self.first.set()

    def result(self, timeout: float = 20) -> _Run:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the stream did not end"
        return self


def _openai_stream(gw: Gateway) -> _Run:
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0, timeout=30)

    def consume(run: _Run) -> None:
        with client:  # (closed when done: a client left to the GC warns in a later test)
            stream = client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            for chunk in stream:
                run.first.set()
                if chunk.choices:
                    run.text += chunk.choices[0].delta.content or ""
                    run.finished = chunk.choices[0].finish_reason or run.finished

    return _Run(consume)


def _openai_call(gw: Gateway) -> _Run:
    client = openai.OpenAI(base_url=gw.url + "/v1", api_key="k", max_retries=0, timeout=30)

    def consume(run: _Run) -> None:
        run.first.set()
        with client:
            answer = client.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}]
            )
        run.text = answer.choices[0].message.content or ""

    return _Run(consume)


def _anthropic_stream(gw: Gateway) -> _Run:
    client = anthropic.Anthropic(base_url=gw.url, api_key="k", max_retries=0, timeout=30)

    def consume(run: _Run) -> None:
        with (
            client,
            client.messages.stream(
                model="gateway-model", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
            ) as stream,
        ):
            for text in stream.text_stream:
                run.first.set()
                run.text += text
            run.finished = stream.get_final_message().stop_reason

    return _Run(consume)


@pytest.fixture
def mock() -> Iterator[MockOpenAI]:
    with mock_openai() as upstream:
        yield upstream


def _assert_typed_api_error(run: _Run, kind: type[BaseException]) -> None:
    assert isinstance(run.error, kind), repr(run.error)
    transport_errors = (openai.APIConnectionError, anthropic.APIConnectionError, httpx.HTTPError)
    assert not isinstance(run.error, transport_errors), repr(run.error)
    assert "shutting down" in str(run.error)


def test_sigterm_drains_streams_then_ends_the_rest_in_band(
    tmp_path: Path, mock: MockOpenAI
) -> None:
    # In order of arrival: a short stream, two longer than shutdown_timeout, and a
    # non-stream request whose upstream answers nothing in time.
    mock.enqueue(_short_stream(0.15), endless(interval=0.1), endless(interval=0.1), _hang)
    with serve(tmp_path, _config(mock.base_url)) as gw:
        health = httpx.Client(base_url=gw.url, timeout=10)
        late = httpx.Client(base_url=gw.url, timeout=10)
        try:
            # Two idle keep-alive connections, open before the signal.
            assert health.get("/health").status_code == 200
            assert late.get("/v1/models").status_code == 200
            short = _openai_stream(gw)
            assert short.first.wait(10)
            long_openai = _openai_stream(gw)
            assert long_openai.first.wait(10)
            long_anthropic = _anthropic_stream(gw)
            assert long_anthropic.first.wait(10)
            waiting = _openai_call(gw)
            deadline = time.monotonic() + 10
            while len(mock.received) < 4 and time.monotonic() < deadline:
                time.sleep(0.02)  # until the non-stream request reached the upstream
            signalled = time.monotonic()
            gw.proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            resp = health.get("/health")
            assert (resp.status_code, resp.json()) == (503, {"status": "draining"})
            resp = late.post(
                "/v1/messages",
                headers={"anthropic-version": "2023-06-01"},
                json={
                    "model": "m",
                    "max_tokens": 5,
                    "messages": [{"role": "user", "content": "x"}],
                },
            )
            assert resp.status_code == 529  # Anthropic's overloaded, which its SDK retries
            assert resp.json()["error"]["type"] == "overloaded_error"
            assert resp.headers["connection"] == "close" and "retry-after" in resp.headers
            # The short stream ends normally, the long ones with the typed API error.
            assert short.result().error is None, repr(short.error)
            assert short.finished == "tool_calls" and short.text == "Let me check the weather."
            _assert_typed_api_error(long_openai.result(), openai.APIError)
            _assert_typed_api_error(long_anthropic.result(), anthropic.APIError)
            _assert_typed_api_error(waiting.result(), openai.InternalServerError)
            assert waiting.error.status_code == 503  # type: ignore[union-attr]
            assert long_openai.text.startswith("Let me")
            code = gw.proc.wait(timeout=SHUTDOWN_TIMEOUT + 10)
            elapsed = time.monotonic() - signalled
        finally:
            health.close()
            late.close()
        log = gw.stderr()
        assert code == 0, log[-3000:]
        assert SHUTDOWN_TIMEOUT - 0.5 < elapsed < SHUTDOWN_TIMEOUT + 6, elapsed
        assert "Traceback" not in log and "CancelledError" not in log, log[-3000:]
        assert "ending 3 request(s) still running" in log


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_with_nothing_in_flight_exits_at_once(
    tmp_path: Path, mock: MockOpenAI, sig: int
) -> None:
    with serve(tmp_path, _config(mock.base_url)) as gw, httpx.Client(timeout=10) as client:
        assert client.get(gw.url + "/health").status_code == 200  # an idle keep-alive
        started = time.monotonic()
        code, log = gw.stop(sig=sig)
        assert code == 0, log[-3000:]
        assert "Traceback" not in log, log[-3000:]
        assert time.monotonic() - started < SHUTDOWN_TIMEOUT, "waited for an idle connection"


def test_sigterm_with_workers_ends_a_long_stream_in_band(tmp_path: Path, mock: MockOpenAI) -> None:
    mock.enqueue(endless(interval=0.1))
    with serve(tmp_path, _config(mock.base_url), workers=2) as gw:
        run = _openai_stream(gw)
        assert run.first.wait(10)
        code, log = gw.stop(timeout=SHUTDOWN_TIMEOUT + 15)
        _assert_typed_api_error(run.result(), openai.APIError)
        assert code == 0, log[-3000:]
        assert "Traceback" not in log and "CancelledError" not in log, log[-3000:]
