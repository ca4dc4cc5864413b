"""``client.embed``: batching, order, failures in place, base64, dimensions, limits."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from interlingua.client import (
    AsyncClient,
    BadRequestError,
    Client,
    Failure,
    InternalServerError,
    RateLimiter,
    UnreadableAnswerError,
)
from interlingua.client._embed import decode_vector, read_vectors

from ..embeddings_server import DIMS, EmbeddingsServer, b64, vector_for


@pytest.fixture
def embedder() -> Iterator[EmbeddingsServer]:
    srv = EmbeddingsServer()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


async def _no_sleep(seconds: float) -> None:
    return None


def test_ten_thousand_texts_in_order_and_in_batches() -> None:
    """10,000 texts against a 100 ms server: every vector in its text's place, 100 texts
    a request, 20 requests in flight (so 5 rounds of latency, not 100)."""
    texts = [f"text number {i}" for i in range(10_000)]
    with EmbeddingsServer(latency=0.1) as srv, Client(srv.v1, model="emb") as client:
        started = time.perf_counter()
        vectors = client.embed(texts, batch_size=100, concurrency=20)
        took = time.perf_counter() - started
    assert vectors == [vector_for(t) for t in texts]
    assert len(srv.bodies) == 100
    assert all(len(b["input"]) == 100 for b in srv.bodies)
    assert sorted(t for b in srv.bodies for t in b["input"]) == sorted(texts)
    assert set(srv.paths) == {"/v1/embeddings"}
    assert srv.max_in_flight == 20
    assert took < 5, took  # 5 rounds of 100 ms, with room for a loaded machine


async def test_async_embed_base64_exact_and_dimensions(embedder: EmbeddingsServer) -> None:
    """Base64 decodes to exactly the floats the server would have sent; ``dimensions``
    and the model are passed on; the last batch is the remainder."""
    texts = [f"t{i}" for i in range(7)]
    async with AsyncClient(embedder.v1, model="emb") as client:
        got = await client.embed(texts, dimensions=5, batch_size=3)
        embedder.ignore_base64 = True  # a server that only speaks floats
        floats = await client.embed(texts, dimensions=5, batch_size=3)
        asked = await client.embed(texts, model="other", encoding_format="float")
    assert got == floats == [vector_for(t, 5) for t in texts]
    assert asked == [vector_for(t) for t in texts]
    assert [len(b["input"]) for b in embedder.bodies[:3]] == [3, 3, 1]
    assert {b["encoding_format"] for b in embedder.bodies[:6]} == {"base64"}
    assert {b["dimensions"] for b in embedder.bodies[:6]} == {5}
    last = embedder.bodies[-1]
    assert (last["model"], last["encoding_format"], "dimensions" in last) == (
        "other",
        "float",
        False,
    )


@pytest.mark.parametrize("sync", [False, True])
async def test_a_failing_batch_fails_its_own_texts_in_place(
    embedder: EmbeddingsServer, sync: bool
) -> None:
    """As ``generate`` returns a Failure for an item, a batch that fails for good puts
    its Failure in each of its texts' places; the other vectors stay aligned."""
    texts = [f"t{i}" for i in range(10)]
    texts[4] = "boom"  # the second batch (3..5) fails with a 500, retried then given up
    texts[8] = "bad"  # the third batch (6..8) with a 400, not retried
    if sync:
        with Client(embedder.v1, model="emb", max_retries=1) as client:
            client.async_client._sleep = _no_sleep
            got = client.embed(texts, batch_size=3)
    else:
        async with AsyncClient(embedder.v1, model="emb", max_retries=1) as client:
            client._sleep = _no_sleep
            got = await client.embed(texts, batch_size=3)
    assert len(got) == 10
    for i in (0, 1, 2, 9):
        assert got[i] == vector_for(texts[i])
    boom, bad = got[3], got[6]
    assert isinstance(boom, Failure) and isinstance(boom.error, InternalServerError)
    assert (boom.attempts, boom.request_id) == (2, "req-boom")
    assert isinstance(bad, Failure) and isinstance(bad.error, BadRequestError)
    assert bad.attempts == 1
    assert got[3:6] == [boom] * 3 and got[6:9] == [bad] * 3


async def test_on_error_raise_and_bad_inputs(embedder: EmbeddingsServer) -> None:
    async with AsyncClient(embedder.v1, model="emb", max_retries=0) as client:
        with pytest.raises(BadRequestError):
            await client.embed(["a", "bad", "c"], batch_size=1, on_error="raise")
        # An input that cannot be sent fails its batch before any request (0 attempts).
        got = await client.embed(["a", "", [1, 2], "d"], batch_size=2)
        with pytest.raises(TypeError, match="list of texts"):
            await client.embed("one text")
        with pytest.raises(ValueError, match="2048"):
            await client.embed(["a"], batch_size=5000)
        with pytest.raises(ValueError, match="model is required"):
            await AsyncClient(embedder.v1).embed(["a"])
        assert await client.embed([]) == []
    assert isinstance(got[0], Failure) and got[0].attempts == 0 and got[1] is got[0]
    assert got[2:] == [vector_for([1, 2]), vector_for("d")]


async def test_generator_input_and_shared_limiter(embedder: EmbeddingsServer) -> None:
    """A generator is read as requests free up; the client's limiter counts one request
    per batch and the tokens the server reports for it, capping requests in flight."""
    limiter = RateLimiter(requests_per_minute=10**6, tokens_per_minute=10**9, max_concurrency=2)
    embedder.latency = 0.02
    async with AsyncClient(embedder.v1, model="emb", rate_limit=limiter) as client:
        texts = (f"two words{i}" for i in range(50))
        got = await client.embed(texts, batch_size=5, progress=True)  # (a bar of batches)
    assert got == [vector_for(f"two words{i}") for i in range(50)]
    assert limiter.window_usage() == (10, 100)
    assert embedder.max_in_flight == 2


def test_anthropic_dialect_is_refused() -> None:
    with (
        Client("http://127.0.0.1:1", dialect="anthropic", model="m") as client,
        pytest.raises(ValueError, match="Anthropic API has no embeddings"),
    ):
        client.embed(["a"])


def test_reading_answers() -> None:
    """Out-of-order indices are put back in place; a count or index that does not match
    the inputs is an unreadable answer (never a shifted list)."""
    v0, v1 = vector_for("a"), vector_for("b")
    raw: Any = b'{"data":[{"index":1,"embedding":"%s"},{"index":0,"embedding":%s}]}' % (
        b64(v1).encode(),
        str(v0).encode(),
    )
    assert read_vectors(raw, 2, "u", None) == ([v0, v1], None)
    for bad in (
        b'{"data":[{"index":0,"embedding":[1.0]}]}',  # one vector for two inputs
        b'{"data":[{"index":0,"embedding":[1.0]},{"index":0,"embedding":[2.0]}]}',
        b'{"data":[{"index":0,"embedding":"AAA"},{"index":1,"embedding":[2.0]}]}',
        b"<html>",
    ):
        with pytest.raises(UnreadableAnswerError):
            read_vectors(bad, 2, "u", "req")
    assert decode_vector(b64([0.5, -2.0])) == [0.5, -2.0]
    assert len(vector_for("x")) == DIMS
