"""``POST /v1/embeddings`` answered by the embedded engine (a ``local`` upstream with
``embedding: true``), through a live gateway with the openai SDK: the vectors' shape, unit
norm and determinism; base64 and floats; token inputs; concurrent requests batched into
one decode give the vectors each gets alone; the errors.

The model is the bundled SmolLM2 (no package ships an embedding model as GGUF): a chat
model pooled by mean, which exercises the engine's whole path.

    openai SDK -> live gateway -> LocalEmbeddingUpstream -> llama.cpp
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import llama_cpp
import openai
import pytest

from interlingua.config import parse_config
from interlingua.server import create_app
from interlingua.upstreams.local import bundled_model_path

from ..live_server import live_server

#: SmolLM2-135M's hidden size
WIDTH = 576


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    config = parse_config(
        {
            "upstreams": {
                "emb": {"kind": "local", "bundled": "smollm2", "embedding": True, "n_threads": 1}
            },
            "models": [{"name": "smol-embed", "upstream": "emb"}],
        }
    )
    with live_server(create_app(config)) as served:
        yield served


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_shape_unit_norm_and_determinism(url: str) -> None:
    with client(url) as c:
        first = c.embeddings.create(model="smol-embed", input=["a cat", "a dog"])  # base64
        again = c.embeddings.create(model="smol-embed", input="a cat", encoding_format="float")
    vectors = [d.embedding for d in first.data]
    assert [len(v) for v in vectors] == [WIDTH, WIDTH]
    assert all(abs(math.fsum(x * x for x in v) - 1) < 1e-5 for v in vectors)
    assert _cosine(vectors[0], again.data[0].embedding) > 0.99999
    assert first.usage.prompt_tokens == first.usage.total_tokens > 0
    assert first.model == "smol-embed"


def test_token_inputs_match_the_text(url: str) -> None:
    tokens = llama_cpp.Llama(
        model_path=bundled_model_path("smollm2"), vocab_only=True, verbose=False
    ).tokenize(b"a cat", add_bos=True, special=False)
    with client(url) as c:
        by_text = c.embeddings.create(model="smol-embed", input="a cat").data[0].embedding
        by_ids = c.embeddings.create(model="smol-embed", input=tokens).data[0].embedding
    assert _cosine(by_text, by_ids) > 0.99999


def test_concurrent_requests_are_batched_without_changing_vectors(url: str) -> None:
    texts = [f"sentence number {i}" for i in range(12)]
    with client(url) as c:
        alone = [c.embeddings.create(model="smol-embed", input=t).data[0].embedding for t in texts]
        with ThreadPoolExecutor(6) as pool:
            together = list(
                pool.map(
                    lambda t: c.embeddings.create(model="smol-embed", input=t).data[0].embedding,
                    texts,
                )
            )
        listed = [d.embedding for d in c.embeddings.create(model="smol-embed", input=texts).data]
    for one, batched, in_list in zip(alone, together, listed, strict=True):
        assert _cosine(one, batched) > 0.9999 and _cosine(one, in_list) > 0.9999


def test_the_vectors_are_llama_cpp_s_own(url: str) -> None:
    """The engine's vectors against llama-cpp-python's ``Llama.embed`` (normalized), the
    library's reference path, on the same GGUF and pooling."""
    reference = llama_cpp.Llama(
        model_path=bundled_model_path("smollm2"),
        embedding=True,
        pooling_type=llama_cpp.LLAMA_POOLING_TYPE_MEAN,
        n_ctx=512,
        verbose=False,
    )
    texts = ["The quick brown fox", "jumps over the lazy dog"]
    expected = reference.embed(texts, normalize=True)
    reference.close()
    with client(url) as c:
        got = [d.embedding for d in c.embeddings.create(model="smol-embed", input=texts).data]
    assert all(_cosine(g, e) >= 0.99 for g, e in zip(got, expected, strict=True))


def test_errors(url: str) -> None:
    with client(url) as c:
        with pytest.raises(openai.BadRequestError) as caught:
            c.embeddings.create(model="smol-embed", input="x", dimensions=64)
        assert caught.value.body["param"] == "dimensions"  # type: ignore[index]
        with pytest.raises(openai.BadRequestError) as caught:
            c.embeddings.create(model="smol-embed", input="word " * 600)
        assert caught.value.body["param"] == "input"  # type: ignore[index]
        with pytest.raises(openai.BadRequestError) as caught:
            c.chat.completions.create(
                model="smol-embed", messages=[{"role": "user", "content": "hi"}]
            )
        assert "embedding model" in caught.value.message
    answer = httpx.post(url + "/v1/embeddings", json={"model": "smol-embed", "input": []})
    assert answer.status_code == 400
