"""The Retry-After the gateway writes for an error it renders: whole seconds, never
sooner than the upstream asked."""

from __future__ import annotations

import pytest

from interlingua.config import parse_config
from interlingua.dialects import get_dialect
from interlingua.errors import RateLimitError
from interlingua.routing import Router
from interlingua.server.gateway import Gateway
from interlingua.upstreams.fake import FakeUpstream


@pytest.mark.parametrize(
    ("asked", "header", "ms"), [(0.2, b"1", b"200"), (2.0, b"2", b"2000"), (0, b"0", b"0")]
)
def test_a_fractional_wait_is_rounded_up(asked: float, header: bytes, ms: bytes) -> None:
    config = parse_config(
        {"upstreams": {"u": {"kind": "fake"}}, "models": [{"name": "m", "upstream": "u"}]}
    )
    gateway = Gateway(config, Router(config, {"u": FakeUpstream("u")}))
    response = gateway.error_response(
        get_dialect("openai"), RateLimitError("slow", retry_after=asked), "req_1"
    )
    headers = dict(response.headers)
    assert (headers[b"retry-after"], headers[b"retry-after-ms"]) == (header, ms)
