"""Sampler settings, llama.cpp's native sampler chain for them, and llama.cpp-style logprobs.

Each sequence of the batch samples with its own chain (``llama_sampler_chain_init`` and
the ``llama_sampler_init_*`` stages), seeded per request: ``llama_sampler_sample(chain,
ctx, i)`` reads row ``i`` of the logits inside llama.cpp, applies the stages, accepts
the token (penalties, grammar state) and returns it. No logits cross into Python unless
the request asked for logprobs (:func:`token_logprob`).

The stage order is llama-cpp-python's ``Llama._init_sampler`` (what the engine used
before), less the stages that are no-ops at their defaults (typical_p 1, penalties 1/0/0).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import llama_cpp
import numpy as np

from ...core import TokenLogprob

__all__ = ["Chain", "Sampling", "build_chain", "token_logprob"]

#: llama-cpp-python's ``last_n_tokens_size``: the window the penalties look back on
_PENALTY_LAST_N = 64


@dataclass(frozen=True, slots=True)
class Sampling:
    """Sampler settings. Defaults are llama-cpp-python's chat-completion defaults.

    Measured on SmolLM2-135M: greedy decoding (temperature 0) loops on nonsense, these
    defaults answer "The capital of France is Paris."; so they apply whenever the caller
    leaves a setting out. ``grammar`` is a ``llama_cpp.LlamaGrammar`` or None.
    """

    temperature: float = 0.2
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    seed: int | None = None
    grammar: Any = None


#: A ``llama_sampler *`` owned by the caller (free it with ``llama_sampler_free``).
Chain = Any


def grammar_sampler(vocab: Any, grammar: Any) -> Any:
    """A grammar stage for a ``LlamaGrammar`` (NULL when llama.cpp refuses the grammar)."""
    return llama_cpp.llama_sampler_init_grammar(
        vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8")
    )


def build_chain(vocab: Any, s: Sampling) -> Chain:
    """A native sampler chain for ``s``; raises ValueError if the grammar does not compile."""
    params = llama_cpp.llama_sampler_chain_default_params()
    params.no_perf = True
    chain = llama_cpp.llama_sampler_chain_init(params)
    add: Callable[[Any], None] = lambda stage: llama_cpp.llama_sampler_chain_add(chain, stage)  # noqa: E731
    if (s.repeat_penalty, s.frequency_penalty, s.presence_penalty) != (1.0, 0.0, 0.0):
        add(
            llama_cpp.llama_sampler_init_penalties(
                _PENALTY_LAST_N, s.repeat_penalty, s.frequency_penalty, s.presence_penalty
            )
        )
    if s.grammar is not None:
        stage = grammar_sampler(vocab, s.grammar)
        if not stage:
            llama_cpp.llama_sampler_free(chain)
            raise ValueError("llama.cpp could not compile the grammar")
        add(stage)
    # LLAMA_DEFAULT_SEED asks llama.cpp for a random seed.
    seed = s.seed & 0xFFFFFFFF if s.seed is not None else llama_cpp.LLAMA_DEFAULT_SEED
    if s.temperature < 0.0:
        add(llama_cpp.llama_sampler_init_dist(seed))
    elif s.temperature == 0.0:
        add(llama_cpp.llama_sampler_init_greedy())
    else:
        add(llama_cpp.llama_sampler_init_top_k(s.top_k))
        add(llama_cpp.llama_sampler_init_top_p(s.top_p, 1))
        add(llama_cpp.llama_sampler_init_min_p(s.min_p, 1))
        add(llama_cpp.llama_sampler_init_temp(s.temperature))
        add(llama_cpp.llama_sampler_init_dist(seed))
    return chain


def token_logprob(
    ctx: Any,
    row: int,
    n_vocab: int,
    token: int,
    top: int,
    piece: Callable[[int], bytes],
) -> TokenLogprob:
    """``token``'s log probability under logits row ``row`` of the last decode (the one it
    was sampled from), with the ``top`` most likely tokens there. Raw logits, before
    temperature and the samplers, as llama.cpp's server reports them by default."""
    pointer = llama_cpp.llama_get_logits_ith(ctx, row)
    logits = np.ctypeslib.as_array(
        ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)), shape=(n_vocab,)
    ).astype(np.float64)
    peak = logits.max()
    norm = peak + np.log(np.exp(logits - peak).sum())

    def one(t: int, top_: tuple[TokenLogprob, ...] = ()) -> TokenLogprob:
        raw = piece(t)
        return TokenLogprob(
            raw.decode("utf-8", "replace"), float(logits[t] - norm), tuple(raw), top_
        )

    alternatives: tuple[TokenLogprob, ...] = ()
    if top > 0:
        best = np.argpartition(-logits, min(top, n_vocab) - 1)[:top]
        best = best[np.argsort(-logits[best], kind="stable")]
        alternatives = tuple(one(int(t)) for t in best)
    return one(token, alternatives)
