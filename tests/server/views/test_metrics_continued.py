"""/metrics and a stream continued after a break: the broken attempt's row counts its
tokens (they were spent) but neither as a request nor as an error, and each continuation
is counted by model and by the kind of the fault that broke the stream."""

from __future__ import annotations

import httpx
import pytest

from interlingua.config import fake_config, parse_config
from interlingua.routing import Router
from interlingua.server import reload as reload_module
from interlingua.server.app import create_app
from interlingua.server.views.metrics import Metrics
from interlingua.upstreams.fake import FakeUpstream
from interlingua.usage.record import CONTINUED

from .test_metrics import row, samples, scrape, value

CONTINUATIONS = "interlingua_stream_continuations_total"


def test_a_continued_attempt_counts_its_tokens_not_a_request() -> None:
    metrics = Metrics()
    metrics.record(row(stream=True, error=CONTINUED, tokens=(40, 10, 4, 2), latency=1.0, ttft=0.1))
    metrics.record(row(stream=True, tokens=(60, 20, 0, 3), latency=2.0, ttft=0.1))
    metrics.continued("m", "upstream_error")
    found = scrape(metrics)

    requests = "interlingua_requests_total"
    assert value(found, requests, model="m", key="team-a", dialect="openai", status="200") == 1
    assert not [k for k in found if k[0] == "interlingua_request_errors_total"]
    tokens = "interlingua_tokens_total"
    assert value(found, tokens, model="m", key="team-a", direction="input") == 100
    assert value(found, tokens, model="m", key="team-a", direction="output") == 30
    assert value(found, tokens, model="m", key="team-a", direction="cached") == 4
    assert value(found, tokens, model="m", key="team-a", direction="reasoning") == 5
    duration = "interlingua_request_duration_seconds"
    assert value(found, duration + "_count", model="m", stream="true") == 1
    assert value(found, duration + "_sum", model="m", stream="true") == pytest.approx(2.0)
    assert value(found, "interlingua_time_to_first_token_seconds_count", model="m") == 1
    assert value(found, CONTINUATIONS, model="m", fault="upstream_error") == 1


def test_continuations_by_model_and_fault() -> None:
    metrics = Metrics()
    for model, fault in [("m", "timeout"), ("m", "timeout"), ("m", "upstream_error"),
                         ("n", "timeout")]:  # fmt: skip
        metrics.continued(model, fault)
    found = scrape(metrics)
    assert value(found, CONTINUATIONS, model="m", fault="timeout") == 2
    assert value(found, CONTINUATIONS, model="m", fault="upstream_error") == 1
    assert value(found, CONTINUATIONS, model="n", fault="timeout") == 1


def test_the_router_has_no_continued_hook_unless_given_one() -> None:
    config = parse_config({"upstreams": {"a": {"kind": "fake"}},
                           "models": [{"name": "m", "upstream": "a"}]})  # fmt: skip
    upstreams = {"a": FakeUpstream("a")}
    assert Router(config, upstreams).continued is None
    told: list[tuple[str, str]] = []
    router = Router(config, upstreams, continued=lambda *seen: told.append(seen))
    assert router.continued is not None
    router.continued("m", "timeout")
    assert told == [("m", "timeout")]


async def test_the_gateway_wires_the_routers_hook_to_the_metrics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    routers: list[Router] = []

    class Kept(Router):
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)  # type: ignore[arg-type]
            routers.append(self)

    monkeypatch.setattr(reload_module, "Router", Kept)  # (where the app builds its router)
    app = create_app(fake_config())
    [router] = routers
    assert router.continued is not None
    router.continued("fake-model", "timeout")
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app), base_url="http://gw"
    ) as client:
        found = samples((await client.get("/metrics")).text)
    assert value(found, CONTINUATIONS, model="fake-model", fault="timeout") == 1
