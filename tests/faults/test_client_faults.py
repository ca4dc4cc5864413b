"""interlingua's own client against the fault upstream, with each of its HTTP engines.

An invalid chunk-size line after the first chunk of a body: aiohttp 3.14 hands that
parse error to the connection, not the body, drops the read timeout and closes the
socket, so a reader of the body waited for a total timeout the client does not set:
forever. The aiohttp engine fails such a body (http_pool/engines.py), for the gateway and
the client alike; the lean pool always did. The line arrives with the chunk, or in a
read of its own (``bad-chunk-size:0.2``: the case that hung).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest

from interlingua.client import APIConnectionError, AsyncClient
from interlingua.http_pool.engines import ENGINE_ENV

from .fault_upstream import FaultUpstream


@pytest.fixture(scope="module")
def up() -> Iterator[FaultUpstream]:
    with FaultUpstream(hold=10.0) as server:
        yield server


@pytest.mark.parametrize("engine", ["lean", "aiohttp"])
@pytest.mark.parametrize("stream", [False, True], ids=["nonstream", "stream"])
@pytest.mark.parametrize("fault", ["bad-chunk-size", "bad-chunk-size:0.2"])
async def test_a_broken_chunk_is_a_lost_connection_not_a_hang(
    up: FaultUpstream, monkeypatch: pytest.MonkeyPatch, engine: str, stream: bool, fault: str
) -> None:
    monkeypatch.setenv(ENGINE_ENV, engine)
    nonce = uuid.uuid4().hex
    client = AsyncClient(
        up.openai_base_url, "k", model=fault, max_retries=0, timeout=(5, 30)
    )  # (a read timeout far past the test's deadline: only the fix can end it in time)
    async with asyncio.timeout(5), client:
        with pytest.raises(APIConnectionError, match=r"connection to .* failed: ") as info:
            if stream:
                async with client.stream(nonce) as answer:
                    await answer.final()
            else:
                await client.chat(nonce)
    assert "read timeout" not in str(info.value)
    assert up.received(nonce) == 1
