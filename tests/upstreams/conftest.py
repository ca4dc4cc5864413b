"""Fixtures for the HTTP upstream tests: the scripted ``stub`` server (tests/stub_upstream.py),
both HTTP engines, a closed port, and the key that must never leak."""

from __future__ import annotations

import traceback
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import pytest

from interlingua.config import TimeoutConfig
from interlingua.errors import InterlinguaError
from interlingua.http_pool.engines import ENGINE_ENV, Transports
from interlingua.upstreams.http_upstream import HttpUpstream

from ..live_server import free_port
from ..stub_upstream import Handler, Seen, Stub, json_response, sse_response, stub

# Re-exported: the tests here import them from this conftest; ``stub`` is the fixture.
__all__ = ["Handler", "Seen", "Stub", "json_response", "sse_response", "stub"]

U = TypeVar("U", bound=HttpUpstream)

SECRET = "sk-test-S3CR3T-key-0123456789"


def build_upstream(
    cls: Callable[..., U],
    name: str,
    base_url: str,
    transports: Transports | None,
    *,
    api_key: str | None = SECRET,
    read: float = 5.0,
) -> U:
    """An HTTP upstream of kind ``cls`` as the tests configure it: our key, a header of
    our own, and a read timeout a test may shorten to wait out a silence."""
    return cls(
        name,
        base_url,
        api_key=api_key,
        headers={"X-Team": "research"},
        timeout=TimeoutConfig(connect=2, read=read),
        transports=transports,
    )


def assert_secret_free(err: BaseException) -> None:
    """``SECRET`` is nowhere in the error: not its traceback, repr, body or headers."""
    text = "".join(traceback.format_exception(err)) + repr(err)
    assert SECRET not in text
    if isinstance(err, InterlinguaError):
        assert SECRET not in str(err.body) and SECRET not in str(err.headers)


@pytest.fixture(params=["lean", "aiohttp"])
async def transports(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Transports]:
    """The HTTP engines, shared as the app shares them: each test runs on both engines
    for ``http://`` (the lean pool, and aiohttp as ``INTERLINGUA_HTTP_CLIENT`` picks it)."""
    monkeypatch.setenv(ENGINE_ENV, request.param)
    engines = Transports()
    try:
        yield engines
    finally:
        await engines.aclose()


@pytest.fixture
def closed_port() -> int:
    """A port nothing listens on (bound, read, released)."""
    return free_port()
