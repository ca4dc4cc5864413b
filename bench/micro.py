"""In-process microbenchmarks of the translation code, without HTTP around it.

What a translated request costs in pure Python, per piece of work, using exactly the
calls the gateway makes (``server/gateway.py``, ``upstreams/http_upstream.py``):

* stream, per chunk: upstream SSE bytes -> ``EventDecoder`` (``SSEDecoder``, then the
  upstream dialect's stream decoder) -> the client dialect's stream encoder -> bytes
  (both directions);
* request: body bytes -> ``orjson.loads`` -> ``parse_request`` -> ``render_request``
  (+ ``ask_stream``) -> ``orjson.dumps``, for the small and the 80 KB body;
* response: upstream body -> ``parse_response`` -> client ``render_response`` -> bytes;
* passthrough request: body bytes -> ``orjson.loads`` -> ``validate_request`` ->
  ``encode_body`` (what the passthrough path does to a body before forwarding it);
* route plan: ``Router.plan`` for a name with one deployment (the hot path) and with two
  weighted ones.

Each figure is the best of several repeats (the least disturbed by other load on the
machine), in microseconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import orjson

from interlingua.config import parse_config
from interlingua.dialects import EventDecoder, encode_body, get_dialect
from interlingua.routing import Router
from interlingua.upstreams.base import Upstream

from . import mock
from .scenarios import BY_NAME, request_body


@dataclass(frozen=True, slots=True)
class MicroResult:
    """One microbenchmark: ``value`` microseconds per ``unit``."""

    name: str
    value: float
    unit: str


def best_of(fn: Callable[[], None], *, repeats: int = 5, budget_s: float = 0.2) -> float:
    """Seconds per call of ``fn``: the best mean over ``repeats`` batches of ~``budget_s``."""
    fn()  # warm caches and lazy imports
    start = time.perf_counter()
    calls = 0
    while time.perf_counter() - start < budget_s / 4:
        fn()
        calls += 1
    per_batch = max(1, int(calls * 4))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(per_batch):
            fn()
        best = min(best, (time.perf_counter() - t0) / per_batch)
    return best


def _stream_translation(
    upstream: str, client: str, scenario: str, wire: list[bytes]
) -> Callable[[], None]:
    """One whole streamed answer pushed through decode -> neutral -> encode."""
    up, down = get_dialect(upstream), get_dialect(client)
    client_request = down.parse_request(orjson.loads(request_body(BY_NAME[scenario])))
    upstream_request = replace(client_request, model="upstream-model", stream=True)

    def run() -> None:
        events = EventDecoder(up, upstream_request)
        encoder = down.stream_encoder(client_request)
        for chunk in wire:
            for neutral in events.decode(chunk):
                encoder.encode(neutral)
        for neutral in events.flush():
            encoder.encode(neutral)

    return run


def _sse_events(stream: bytes) -> list[bytes]:
    """A stream split into its events, one network read each (the worst case for us)."""
    return [part + b"\n\n" for part in stream.split(b"\n\n") if part]


def _request_translation(scenario: str) -> Callable[[], None]:
    source = get_dialect(BY_NAME[scenario].client)
    target = get_dialect("openai" if source.name == "anthropic" else "anthropic")
    raw = request_body(BY_NAME[scenario])

    def run() -> None:
        request = source.parse_request(orjson.loads(raw))
        wire = target.render_request(request)
        target.ask_stream(wire, False)
        orjson.dumps(wire)

    return run


def _passthrough_request(scenario: str) -> Callable[[], None]:
    dialect = get_dialect(BY_NAME[scenario].client)
    raw = request_body(BY_NAME[scenario])

    def run() -> None:
        body = orjson.loads(raw)
        dialect.validate_request(body)
        encode_body(body)

    return run


def _response_translation() -> Callable[[], None]:
    client, upstream = get_dialect("anthropic"), get_dialect("openai")
    request = client.parse_request(orjson.loads(request_body(BY_NAME["a2o"])))
    raw = mock.openai_completion()

    def run() -> None:
        response = upstream.parse_response(orjson.loads(raw))
        orjson.dumps(client.render_response(response, request))

    return run


def _route_plan(weights: tuple[float, ...]) -> Callable[[], None]:
    """A request's routing plan (routing.py): one deployment is the hot path's one lookup;
    several are ordered by the weighted draw on every request."""
    models = [
        {"name": "m", "upstream": "u", "model": f"m{i}", "weight": w} for i, w in enumerate(weights)
    ]
    config = parse_config({"upstreams": {"u": {"kind": "fake"}}, "models": models})
    plan = Router(config, {"u": Upstream("u")}).plan

    def run() -> None:
        plan("m")

    return run


def run_all(*, repeats: int = 5, budget_s: float = 0.2) -> list[MicroResult]:
    """Every microbenchmark, in the order the report lists them."""
    openai_wire = [*mock.openai_stream_chunks(), b"data: [DONE]\n\n"]
    anthropic_wire = _sse_events(mock.anthropic_stream())
    chunks = mock.OPENAI_STREAM_CHUNKS
    o2a_stream = _stream_translation("openai", "anthropic", "a2o-stream", openai_wire)
    a2o_stream = _stream_translation("anthropic", "openai", "o2a-stream", anthropic_wire)
    cases: list[tuple[str, Callable[[], None], float, str]] = [
        ("stream OpenAI chunk → Anthropic events", o2a_stream, chunks, "chunk"),
        ("stream Anthropic event → OpenAI chunk", a2o_stream, len(anthropic_wire), "event"),
        ("request Anthropic→OpenAI, small body", _request_translation("a2o"), 1, "request"),
        ("request Anthropic→OpenAI, 80 KB body", _request_translation("a2o-80k"), 1, "request"),
        ("response OpenAI→Anthropic, non-stream", _response_translation(), 1, "response"),
        (
            "request passthrough OpenAI, small body",
            _passthrough_request("passthrough"),
            1,
            "request",
        ),
        (
            "request passthrough Anthropic, 80 KB body",
            _passthrough_request("a2o-80k"),
            1,
            "request",
        ),
        (
            "request passthrough Responses, small body",
            _passthrough_request("r2o"),
            1,
            "request",
        ),
        ("route plan, one deployment", _route_plan((1,)), 1, "request"),
        ("route plan, 2 weighted deployments", _route_plan((3, 1)), 1, "request"),
    ]
    out = []
    for name, fn, per, unit in cases:
        seconds = best_of(fn, repeats=repeats, budget_s=budget_s)
        out.append(MicroResult(name, seconds * 1e6 / per, unit))
    return out
