"""The status page and a stream continued after a break: the broken attempt's row (error
``continued``) adds its tokens but is neither a request nor a failure, on the model's,
the key's and the deployment's charts alike, with or without a ring per combination."""

from __future__ import annotations

import pytest

from interlingua.server.views import traffic as traffic_module
from interlingua.server.views.status_page import StatusPage
from interlingua.server.views.traffic import Traffic
from interlingua.usage.record import CONTINUED

from .test_status_page import NOW, Clock, M, deployment, router, row


@pytest.mark.parametrize("combos", [traffic_module.MAX_COMBOS, 0])
def test_a_continued_attempt_is_tokens_not_a_request_nor_a_failure(
    monkeypatch: pytest.MonkeyPatch, combos: int
) -> None:
    monkeypatch.setattr(traffic_module, "MAX_COMBOS", combos)  # (0: every row alone)
    page = StatusPage(router(), clock=Clock(NOW))
    # the stream broke on b after 40 tokens in, 12 out; a continued it to the end
    page.record(row(M, error=CONTINUED, upstream="b", upstream_model="big-b", tokens=(40, 12),
                    latency=9.0, ttft=4.0))  # fmt: skip
    page.record(row(M, tokens=(52, 30), latency=2.0, ttft=0.5))
    data = page.data()

    for kind, name in (("model", "lb"), ("key", "team-a")):
        series = data["traffic"][kind][name]
        assert series["requests"][-1] == 1 and series["errors"][-1] == 0, kind
        assert series["input_tokens"][-1] == 92 and series["output_tokens"][-1] == 42, kind
        assert series["latency"][-1] == pytest.approx(2.0), kind  # the request's own
        assert series["ttft"][-1] == pytest.approx(0.5), kind
    assert data["totals"]["requests"][-1] == 1 and data["totals"]["errors"][-1] == 0
    assert data["errors"] == []
    broken = deployment(data, "lb", "b/big-b")
    assert broken["recent"]["requests"] == 0 and broken["recent"]["errors"] == 0
    assert deployment(data, "lb", "a/big-a")["recent"]["requests"] == 1


def test_a_continued_row_alone_in_its_minute() -> None:
    traffic = Traffic()
    lone = row(M, error=CONTINUED, tokens=(40, 12), latency=9.0, ttft=4.0)
    traffic.record(lone)
    minutes = traffic.snapshot(NOW)["series"]["model"]["lb"]
    assert minutes == {str(M): [0, 0, 40, 12, 0.0, 0.0, 0]}
