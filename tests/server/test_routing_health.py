"""A deployment's health is what its clients got, and a cooled one comes back by a probe.

Through a live gateway over scripted fakes (the helpers of test_routing_gateway.py): a
deployment whose streams always break after their first byte is cooled down like one
that refuses outright, and a primary that is down for a while is served around, then
gets the traffic back within one cooldown of its recovery, at the cost of one failed
probe per cooldown meanwhile.
"""

from __future__ import annotations

import math
import time

import anthropic
import httpx
import openai
import pytest

from interlingua.core import Request, Response
from interlingua.errors import UpstreamError

from ..conformance.cases import reply
from .test_routing_gateway import CLIENTS, WIRE, _half_a_stream, ask, counts, gateway

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

MAIN_THEN_BACKUP = [
    {"name": "main", "upstream": "a", "fallbacks": ["backup"]},
    {"name": "backup", "upstream": "b"},
]


def _cooling(url: str, name: str) -> bool:
    """Whether the status page shows ``name``'s first deployment cooling down."""
    for model in httpx.get(url + "/ui/data").json()["models"]:
        if model["name"] == name:
            return model["deployments"][0]["cooling_for"] is not None
    raise AssertionError(f"{name} is not on the status page")


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("path", ["translated", "passthrough"])
def test_a_deployment_that_always_cuts_its_streams_cools_down(client: str, path: str) -> None:
    # Every stream of a answers at once and then breaks. Its first byte used to count as a
    # success that forgot the failure before it, so a never reached three and kept all
    # the traffic.
    routing = {"cooldown": {"failures": 3, "window": 60, "duration": 60}}
    with gateway(MAIN_THEN_BACKUP, WIRE[client, path], routing=routing) as (url, fakes):
        for _ in range(10):
            fakes["a"].enqueue(_half_a_stream(UpstreamError("cut", status=502)))
        base = anthropic.APIError if client == "anthropic" else openai.APIError
        for _ in range(3):
            with pytest.raises(base):
                ask(url, client, "main", stream=True)
        # (a break is counted when the stream's response is over, just after its last byte)
        deadline = time.monotonic() + 5
        while not _cooling(url, "main"):
            assert time.monotonic() < deadline, "three broken streams did not cool a"
            time.sleep(0.02)
        for _ in range(4):
            assert ask(url, client, "main", stream=True) == "echo: hi"
        assert counts(fakes) == {"a": 3, "b": 4}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_a_primary_down_for_a_while_gets_the_traffic_back_within_one_cooldown(
    stream: bool,
) -> None:
    down_for, duration, failures = 2.0, 0.5, 3
    routing = {"cooldown": {"failures": failures, "window": 60, "duration": duration}}
    with gateway(MAIN_THEN_BACKUP, WIRE["openai", "translated"], routing=routing) as (url, fakes):
        start = time.monotonic()
        recovered_at = start + down_for
        failed: list[float] = []

        def primary(request: Request) -> Response | UpstreamError:
            now = time.monotonic()
            if now < recovered_at:
                failed.append(now)
                return UpstreamError("a is down", status=503)
            return reply("from a")

        for _ in range(1000):
            fakes["a"].enqueue(primary)
        served: list[tuple[float, str]] = []  # (when asked, by whom), steady traffic
        while time.monotonic() < recovered_at + 3 * duration:
            asked = time.monotonic()
            answer = ask(url, "openai", "main", stream)  # never an error: b is there
            served.append((asked, "a" if answer == "from a" else "b"))
            time.sleep(0.02)
        while_down = [by for asked, by in served if asked < recovered_at]
        assert set(while_down) == {"b"}
        # While down, a cost the first requests `failures` failed attempts, then one
        # failed probe per cooldown, not `failures` of them per cooldown.
        assert len(failed) <= failures + math.ceil(down_for / duration) + 1
        # Back within one cooldown of its recovery (plus a request's time), and staying.
        first = next(i for i, (_, by) in enumerate(served) if by == "a")
        assert served[first][0] < recovered_at + duration + 0.3
        assert {by for _, by in served[first:]} == {"a"}
        assert counts(fakes)["a"] == len(failed) + len(served) - first
