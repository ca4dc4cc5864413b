"""A key counted in this process is admitted by its window entry (``ClientKey.admit_now``)
and ended once with what the answer cost (``ClientKey.end``); the accounting's tab ends
it however the request ends: answered, cancelled, or a stream closed."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from interlingua.config import KeyLimits
from interlingua.dialects import get_dialect
from interlingua.errors import RateLimitError
from interlingua.server.accounting import Accounting, Tab
from interlingua.server.asgi_io import BytesResponse, StreamOutcome, StreamResponse
from interlingua.server.keys import ClientKey

OPENAI = get_dialect("openai")


def limited(**limits: int) -> ClientKey:
    return ClientKey("team", b"\0" * 32, (), KeyLimits(**limits))  # type: ignore[arg-type]


def test_the_first_entry_is_zero_and_a_refusal_raises() -> None:
    key = limited(rpm=1)
    assert key.admit_now(0) == 0  # (an admission, though falsy)
    with pytest.raises(RateLimitError) as refused:
        key.admit_now(0)
    assert refused.value.retry_after == pytest.approx(60.0, abs=1.0)


def test_ending_gives_the_concurrency_back() -> None:
    key = limited(max_concurrency=1)
    entry = key.admit_now(0)
    assert entry == -1  # (no window: nothing logged)
    with pytest.raises(RateLimitError):
        key.admit_now(0)
    key.end(entry, 0)
    assert key.admit_now(0) == -1


def test_the_answer_settles_the_token_estimate() -> None:
    key = limited(tpm=100)
    entry = key.admit_now(80)
    assert entry is not None
    with pytest.raises(RateLimitError):
        key.admit_now(30)  # 80 reserved + 30 > 100
    key.end(entry, 10)  # it cost 10
    assert key.admit_now(30) == 1  # 10 + 30 fits


def test_a_shared_key_is_not_admitted_in_process() -> None:
    class Shared:  # (any state but this process's own: Redis)
        async def acquire(self, tokens: int) -> object:
            return object()

    class Counters:
        def limit_state(self, *args: object) -> Shared:
            return Shared()

    key = ClientKey("team", b"\0" * 32, (), KeyLimits(rpm=5), Counters())  # type: ignore[arg-type]
    assert key.admit_now(0) is None  # (await key.admit: the shared path)


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""


@pytest.mark.parametrize("how", ["answered", "error status", "cancelled", "stream", "stream twice"])
def test_the_accounting_ends_the_admission_once(how: str) -> None:
    accounting = Accounting([])
    key = limited(max_concurrency=1, tpm=1000)
    tab: Tab = accounting.open("req_1", "openai")
    entry = key.admit_now(100)
    assert entry is not None
    tab.key, tab.entry = key, entry
    if how == "answered":
        body = b'{"usage":{"prompt_tokens":7,"completion_tokens":3}}'
        accounting.close(tab, BytesResponse(body), OPENAI)
    elif how == "error status":
        accounting.close(tab, BytesResponse(b"{}", 500), OPENAI)
    elif how == "cancelled":
        accounting.abandon(tab)
    else:
        stream = StreamResponse(_nothing())
        accounting.close(tab, stream, OPENAI)
        assert stream.finished is not None
        stream.finished(StreamOutcome.COMPLETE)
        if how == "stream twice":
            stream.finished(
                StreamOutcome.COMPLETE
            )  # (a second end must not give back a second place)
    assert accounting.in_flight == 0
    second = key.admit_now(0)  # the one place is free again...
    assert second is not None
    with pytest.raises(RateLimitError):
        key.admit_now(0)  # ...once, not twice
    key.end(second, 0)
    if how == "answered":  # the answer's 10 tokens replaced the estimate of 100
        assert key.admit_now(990) is not None
