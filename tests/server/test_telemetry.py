"""OpenTelemetry traces: one span per request and one per upstream attempt, with the GenAI
semantic conventions, joined to the client's trace and sent on to the upstream.

    httpx (traceparent) -> live gateway (telemetry on) -> mock Chat upstream
                                     \\-> OTLP/HTTP receiver (protobuf decoded here)
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from interlingua.config import ConfigError, parse_config
from interlingua.server import create_app

from ..live_server import free_port, live_server
from .mock_upstream import mock_openai, status
from .responses.mock_responses import mock_responses
from .test_cost_served import messages_answer

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
PARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
HELLO = [{"role": "user", "content": "hello"}]


class Receiver:
    """An OTLP/HTTP collector on 127.0.0.1: every span it was sent, decoded."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                data = self.rfile.read(int(self.headers["content-length"]))
                request = ExportTraceServiceRequest.FromString(data)
                for resource in request.resource_spans:
                    service = {a.key: a.value.string_value for a in resource.resource.attributes}
                    for scope in resource.scope_spans:
                        receiver.spans.extend((service, span) for span in scope.spans)
                body = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, count: int, timeout: float = 10.0) -> list[Any]:
        deadline = time.monotonic() + timeout
        while len(self.spans) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(self.spans)} spans, not {count}")
            time.sleep(0.02)
        return [span for _, span in self.spans]


def attributes(span: Any) -> dict[str, Any]:
    """A span's attributes as plain values."""
    out: dict[str, Any] = {}
    for item in span.attributes:
        value = item.value
        kind = value.WhichOneof("value")
        if kind == "array_value":
            out[item.key] = [v.string_value for v in value.array_value.values]
        else:
            out[item.key] = getattr(value, kind)
    return out


def gateway_config(chat_url: str, endpoint: str, content: bool = False) -> Any:
    return parse_config(
        {
            "upstreams": {
                "flaky": {"kind": "openai", "base_url": chat_url, "retries": {"max": 1}},
            },
            "models": [
                {
                    "name": "gpt-x",
                    "upstream": "flaky",
                    "model": "up-gpt",
                    "price": {"input": 3, "output": 15},
                },
            ],
            "keys": [{"name": "team-a", "key_env": "OTEL_TEST_KEY"}],
            "usage": False,
            "telemetry": {"otlp_endpoint": endpoint, "service_name": "gw", "content": content},
        }
    )


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_TEST_KEY", "sk-team-a")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # (the SDK's batch delay, ms)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.server.shutdown()
    found.server.server_close()


def ask(url: str, stream: bool, headers: dict[str, str] | None = None) -> httpx.Response:
    body = {"model": "gpt-x", "messages": HELLO, "max_tokens": 9, "stream": stream}
    sent = {"authorization": "Bearer sk-team-a", **(headers or {})}
    return httpx.post(f"{url}/v1/chat/completions", json=body, headers=sent, timeout=10)


def by_kind(spans: list[Any], kind: int) -> list[Any]:
    return [s for s in spans if s.kind == kind]


SERVER, CLIENT = 2, 3  # (the OTLP proto's SpanKind values)


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_is_a_span_in_its_clients_trace_with_one_child_per_attempt(
    env: None, receiver: Receiver, stream: bool
) -> None:
    with mock_openai() as chat:
        chat.enqueue(status(503, {"error": {"message": "busy", "type": "server_error"}}))
        with live_server(create_app(gateway_config(chat.base_url, receiver.url))) as url:
            answer = ask(url, stream, {"traceparent": PARENT, "tracestate": "vendor=1"})
            assert answer.status_code == 200
            spans = receiver.wait(3)
    (request,) = by_kind(spans, SERVER)
    attempts = sorted(by_kind(spans, CLIENT), key=lambda s: s.start_time_unix_nano)
    assert request.trace_id.hex() == TRACE_ID and request.parent_span_id.hex() == CLIENT_SPAN
    assert request.name == "chat gpt-x" and receiver.spans[0][0]["service.name"] == "gw"
    got = attributes(request)
    assert got["gen_ai.operation.name"] == "chat"
    assert got["gen_ai.provider.name"] == "openai"
    assert got["gen_ai.request.model"] == "gpt-x"
    assert got["gen_ai.response.model"] == "up-gpt"
    assert got["gen_ai.request.max_tokens"] == 9
    assert (got["gen_ai.usage.input_tokens"], got["gen_ai.usage.output_tokens"]) == (42, 17)
    assert got["interlingua.cost_usd"] == pytest.approx((42 * 3 + 17 * 15) / 1e6)
    assert got["interlingua.key"] == "team-a" and got["interlingua.request_id"]
    assert "error.type" not in got and "gen_ai.input.messages" not in got
    assert got["gen_ai.response.finish_reasons"] == ["tool_calls"]
    # the failed attempt, then its retry; both children of the request's span
    assert [attributes(a)["interlingua.retry"] for a in attempts] == [0, 1]
    first, second = (attributes(a) for a in attempts)
    assert first["error.type"] == "overloaded" or first["error.type"].startswith("upstream")
    assert (first["http.response.status_code"], second["http.response.status_code"]) == (503, 200)
    assert "error.type" not in second and second["interlingua.time_to_first_byte"] > 0
    assert {a.parent_span_id for a in attempts} == {request.span_id}
    assert all(a.trace_id == request.trace_id for a in attempts)
    assert request.start_time_unix_nano <= attempts[0].start_time_unix_nano
    assert attempts[1].end_time_unix_nano <= request.end_time_unix_nano
    # each upstream request named its own attempt as the parent, and kept the tracestate
    sent = [r.headers for r in chat.received]
    assert [h["traceparent"] for h in sent] == [
        f"00-{TRACE_ID}-{a.span_id.hex()}-01" for a in attempts
    ]
    assert all(h["tracestate"] == "vendor=1" for h in sent)


@pytest.fixture(scope="module")
def dialects_gateway() -> Iterator[tuple[str, Receiver]]:
    """A gateway with a Chat, a Messages and a Responses upstream, and its receiver."""
    found = Receiver()
    with (
        pytest.MonkeyPatch.context() as patch,
        mock_openai() as chat,
        mock_openai("/v1/messages", default=messages_answer) as anth,
        mock_responses() as resp,
    ):
        patch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        config = parse_config(
            {
                "upstreams": {
                    "chat": {"kind": "openai", "base_url": chat.base_url},
                    "anth": {"kind": "anthropic", "base_url": anth.base_url},
                    "resp": {"kind": "responses", "base_url": resp.base_url},
                },
                "models": [
                    {"name": "openai-m", "upstream": "chat", "model": "up-gpt"},
                    {"name": "anthropic-m", "upstream": "anth", "model": "claude-x"},
                    {"name": "responses-m", "upstream": "resp", "model": "gpt-r"},
                ],
                "usage": False,
                "telemetry": {"otlp_endpoint": found.url, "service_name": "gw"},
            }
        )
        with live_server(create_app(config)) as url:
            yield url, found
    found.server.shutdown()
    found.server.server_close()


#: each client dialect's endpoint and the finish reasons it shows for each upstream's
#: answer (the Chat mock calls a tool; the Messages and Responses mocks end their turn)
ENDPOINTS = {
    "openai": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    "responses": "/v1/responses",
}
REASONS = {
    ("openai", "openai"): "tool_calls",
    ("openai", "anthropic"): "stop",
    ("anthropic", "openai"): "tool_use",
    ("anthropic", "anthropic"): "end_turn",
    ("responses", "openai"): "completed",
    ("responses", "responses"): "completed",
}


@pytest.mark.parametrize("stream", [False, True], ids=["body", "stream"])
@pytest.mark.parametrize(("client", "upstream"), list(REASONS), ids="-from-".join)
def test_the_request_span_has_the_finish_reasons_its_client_was_shown(
    dialects_gateway: tuple[str, Receiver], client: str, upstream: str, stream: bool
) -> None:
    """Stream or not, relayed (same dialect) or translated: the reason in the client's
    words (a stream's read from its last events, once, when it ends)."""
    url, receiver = dialects_gateway
    trace_id = os.urandom(16).hex()
    body: dict[str, Any] = {"model": f"{upstream}-m", "stream": stream, "max_tokens": 64}
    if client == "responses":
        body["input"] = "hello"
    else:
        body["messages"] = HELLO
    parent = {"traceparent": f"00-{trace_id}-{CLIENT_SPAN}-01"}
    with httpx.stream(
        "POST", url + ENDPOINTS[client], json=body, headers=parent, timeout=10
    ) as answer:
        answer.read()
        assert answer.status_code == 200, answer.text
    deadline = time.monotonic() + 10
    while not (found := [s for _, s in receiver.spans if s.trace_id.hex() == trace_id]):
        assert time.monotonic() < deadline, "no span for the request"
        time.sleep(0.02)
    (request,) = by_kind(found, SERVER)
    got = attributes(request)
    assert got["interlingua.stream"] is stream
    assert got["gen_ai.response.finish_reasons"] == [REASONS[client, upstream]]


def test_a_request_without_a_traceparent_starts_a_trace_and_content_is_opt_in(
    env: None, receiver: Receiver
) -> None:
    with mock_openai() as chat:
        config = gateway_config(chat.base_url, receiver.url, content=True)
        with live_server(create_app(config)) as url:
            assert ask(url, False).status_code == 200
            spans = receiver.wait(2)
    (request,) = by_kind(spans, SERVER)
    assert not request.parent_span_id and len(request.trace_id) == 16
    got = attributes(request)
    assert '"hello"' in got["gen_ai.input.messages"]
    assert "message" in got["gen_ai.output.messages"]
    sent = chat.received[0].headers["traceparent"]
    assert sent.startswith(f"00-{request.trace_id.hex()}-") and "tracestate" not in (
        chat.received[0].headers
    )


def test_a_failed_request_has_its_error_type(env: None, receiver: Receiver) -> None:
    with mock_openai() as chat:
        chat.enqueue(*[status(400, {"error": {"message": "no", "type": "invalid_request"}})])
        with live_server(create_app(gateway_config(chat.base_url, receiver.url))) as url:
            assert ask(url, False).status_code == 400
            spans = receiver.wait(2)
    (request,) = by_kind(spans, SERVER)
    assert attributes(request)["error.type"] == "invalid_request"
    assert request.status.code == 2  # (STATUS_CODE_ERROR)


def test_a_collector_that_is_down_neither_slows_nor_fails_requests(env: None) -> None:
    dead = f"http://127.0.0.1:{free_port()}"  # (nothing listens: connections are refused)
    with (
        mock_openai() as chat,
        live_server(create_app(gateway_config(chat.base_url, dead))) as url,
    ):
        ask(url, False)  # (the connection pools warm)
        started = time.perf_counter()
        for i in range(20):
            assert ask(url, i % 2 == 1).status_code == 200
            time.sleep(0.01)  # (batches are exported, and fail, meanwhile)
        took = time.perf_counter() - started
        stopping = time.perf_counter()
    assert took < 3.0, f"20 requests took {took:.2f}s with the collector down"
    # and its exit waits a bounded time for the spans it could not send
    assert time.perf_counter() - stopping < 4.0


def test_telemetry_off_imports_nothing_of_opentelemetry() -> None:
    script = (
        "import sys, httpx, asyncio\n"
        "from interlingua.config import parse_config\n"
        "from interlingua.server import create_app\n"
        "app = create_app(parse_config({'usage': False, 'upstreams': {'f': {'kind': 'fake'}},"
        " 'models': [{'name': 'm', 'upstream': 'f'}]}))\n"
        "async def main():\n"
        "    transport = httpx.ASGITransport(app=app)\n"
        "    async with httpx.AsyncClient(transport=transport, base_url='http://t') as c:\n"
        "        r = await c.post('/v1/chat/completions', json={'model': 'm',"
        " 'messages': [{'role': 'user', 'content': 'hi'}]})\n"
        "        assert r.status_code == 200, r.text\n"
        "asyncio.run(main())\n"
        "loaded = [m for m in sys.modules if m.startswith('opentelemetry')]\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=dict(os.environ)
    )
    assert done.returncode == 0, done.stderr


def test_the_config_names_the_extra_when_it_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name.startswith("opentelemetry") else real(name, *a),
    )
    with pytest.raises(ConfigError, match=r"interlingua\[otel\]"):
        parse_config({"telemetry": {"otlp_endpoint": "http://collector:4318"}})


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"otlp_endpoint": "collector:4318"}, "OTLP/HTTP URL"),
        ({"otlp_endpoint": "http://c:4318", "sample": 1}, "sample"),
        ({"otlp_endpoint": "http://c:4318", "content": "yes"}, "telemetry.content"),
    ],
)
def test_a_bad_telemetry_section_is_refused(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config({"telemetry": section})
