"""Embeddings from a GGUF model in process: llama.cpp's pooling, batched, normalized.

:class:`LlamaEmbedder` loads a model with llama.cpp's embedding mode and the pooling the
model's metadata names (``<arch>.pooling_type``: mean for MiniLM and nomic-embed, CLS for
bge); a model whose metadata names none (a chat model) is pooled by mean. Every vector is
L2-normalized, as the sentence-transformers models' own ``Normalize`` module does and as
OpenAI's vectors are: a dot product is then the cosine.

Batching: one worker thread owns the llama.cpp context. A request's inputs wait in a queue;
the worker takes every waiting request's inputs at once and decodes them together, as many
sequences per ``llama_decode`` as fit (``n_seq_max`` sequences, ``n_batch`` tokens), so
concurrent requests of one input each cost one decode, not one each. Results go back to
each request's event loop with ``call_soon_threadsafe``: the loop never waits on llama.cpp.

An input longer than the context (``n_ctx`` tokens, which is also the batch size: an
encoder sees a whole sequence in one pass) is refused with a 400 before any work.
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import llama_cpp

from ...errors import InvalidRequestError
from .resources import default_threads

__all__ = ["DEFAULT_EMBED_CTX", "LlamaEmbedder"]

log = logging.getLogger("interlingua.local")

#: an input's token limit when the config sets no ``n_ctx`` (BERT-family models: 512)
DEFAULT_EMBED_CTX = 512
#: sequences one decode holds at most
_MAX_SEQUENCES = 64


@dataclass
class _Job:
    """One request's token lists, and where its vectors go."""

    inputs: list[list[int]]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[list[list[float]]]
    vectors: list[list[float]] = field(default_factory=list)


class LlamaEmbedder:
    """One GGUF model in llama.cpp's embedding mode (see the module docstring)."""

    def __init__(self, model_path: str, *, n_ctx: int | None = None, n_threads: int | None = None):
        self.model_path = model_path
        self.n_ctx = n_ctx or DEFAULT_EMBED_CTX
        self.n_threads = n_threads or default_threads()
        self._llm: Any = None
        self._load_lock = threading.Lock()
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        #: the vectors' length (known once loaded)
        self.n_embd = 0

    @property
    def loaded(self) -> bool:
        return self._llm is not None

    def load(self) -> None:
        """Load the model and start the worker (blocking; idempotent)."""
        with self._load_lock:
            if self._llm is not None:
                return
            # The model's own pooling (its metadata's); one that names none (a chat
            # model) is loaded again, pooled by mean.
            self._llm = self._open(llama_cpp.LLAMA_POOLING_TYPE_UNSPECIFIED)
            if self._llm.pooling_type() <= llama_cpp.LLAMA_POOLING_TYPE_NONE:
                self._llm.close()
                self._llm = self._open(llama_cpp.LLAMA_POOLING_TYPE_MEAN)
            self.n_embd = int(self._llm.n_embd())
            self._thread = threading.Thread(target=self._work, name="embedder", daemon=True)
            self._thread.start()

    def _open(self, pooling: int) -> Any:
        return llama_cpp.Llama(
            model_path=self.model_path,
            embedding=True,
            n_ctx=self.n_ctx,
            n_batch=self.n_ctx,
            n_ubatch=self.n_ctx,
            n_seq_max=_MAX_SEQUENCES,
            n_threads=self.n_threads,
            n_threads_batch=self.n_threads,
            pooling_type=pooling,
            verbose=False,
        )

    def tokenize(self, text: str) -> list[int]:
        """``text``'s tokens with the model's special ones (BERT's [CLS] ... [SEP])."""
        tokens: list[int] = self._llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)
        return tokens

    async def embed(self, inputs: list[list[int]]) -> list[list[float]]:
        """The normalized vectors of ``inputs`` (token lists), in order."""
        limit = self.n_ctx
        for i, tokens in enumerate(inputs):
            if len(tokens) > limit:
                raise InvalidRequestError(
                    f"'input[{i}]' has {len(tokens)} tokens; this model takes at most {limit}.",
                    param="input",
                    code="context_length_exceeded",
                )
        loop = asyncio.get_running_loop()
        job = _Job(inputs, loop, loop.create_future())
        self._jobs.put(job)
        return await job.future

    # -- the worker thread ----------------------------------------------------------------

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            jobs = [job]
            while True:  # every request waiting now joins this round
                try:
                    more = self._jobs.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._jobs.put(None)
                    break
                jobs.append(more)
            try:
                vectors = self._embed_all([tokens for j in jobs for tokens in j.inputs])
            except Exception as exc:  # (a llama.cpp failure: every request of the round)
                log.exception("embedding failed")
                for j in jobs:
                    j.loop.call_soon_threadsafe(_fail, j.future, exc)
                continue
            at = 0
            for j in jobs:
                done = vectors[at : at + len(j.inputs)]
                at += len(j.inputs)
                j.loop.call_soon_threadsafe(_succeed, j.future, done)

    def _embed_all(self, inputs: Sequence[list[int]]) -> list[list[float]]:
        """Decode ``inputs`` in as few batches as fit; their vectors, normalized."""
        llm = self._llm
        batch, n_embd = llm._batch, self.n_embd
        out: list[list[float]] = []
        size = tokens_in = 0

        def decode() -> None:
            llm._ctx.kv_cache_clear()
            llm._ctx.decode(batch)
            batch.reset()
            for seq in range(size):
                pointer = llama_cpp.llama_get_embeddings_seq(llm._ctx.ctx, seq)
                out.append(_normalized(pointer[:n_embd]))

        batch.reset()
        for tokens in inputs:
            if size and (tokens_in + len(tokens) > self.n_ctx or size >= _MAX_SEQUENCES):
                decode()
                size = tokens_in = 0
            batch.add_sequence(tokens, size, True)
            size += 1
            tokens_in += len(tokens)
        if size:
            decode()
        return out

    def close(self) -> None:
        """Stop the worker and free the model."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join(timeout=10)
            self._thread = None
        if self._llm is not None:
            self._llm.close()
            self._llm = None


def _normalized(vector: list[float]) -> list[float]:
    norm = math.sqrt(math.fsum(x * x for x in vector))
    return [x / norm for x in vector] if norm > 0 else vector


def _succeed(future: asyncio.Future[list[list[float]]], vectors: list[list[float]]) -> None:
    if not future.done():
        future.set_result(vectors)


def _fail(future: asyncio.Future[list[list[float]]], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
