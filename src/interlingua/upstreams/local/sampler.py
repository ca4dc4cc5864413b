"""Sampler settings, llama.cpp's native sampler chain for them, and llama.cpp-style logprobs.

Each sequence of the batch samples with its own chain (``llama_sampler_chain_init`` and
the ``llama_sampler_init_*`` stages), seeded per request: ``llama_sampler_sample(chain,
ctx, i)`` reads row ``i`` of the logits inside llama.cpp, applies the stages, accepts
the token (penalties state) and returns it. No logits cross into Python unless the
request asked for logprobs (:func:`token_logprob`) or a grammar refused the token the
chain picked (:class:`SequenceSampler`).

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

__all__ = ["Candidates", "Sampling", "SequenceSampler", "grammar_sampler", "token_logprob"]

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


def grammar_sampler(vocab: Any, grammar: Any) -> Any:
    """A grammar stage for a ``LlamaGrammar`` (NULL when llama.cpp refuses the grammar)."""
    return llama_cpp.llama_sampler_init_grammar(
        vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8")
    )


def _chain(s: Sampling) -> Any:
    """The native chain for ``s`` without its grammar."""
    params = llama_cpp.llama_sampler_chain_default_params()
    params.no_perf = True
    chain = llama_cpp.llama_sampler_chain_init(params)

    def add(stage: Any) -> None:
        llama_cpp.llama_sampler_chain_add(chain, stage)

    if (s.repeat_penalty, s.frequency_penalty, s.presence_penalty) != (1.0, 0.0, 0.0):
        add(
            llama_cpp.llama_sampler_init_penalties(
                _PENALTY_LAST_N, s.repeat_penalty, s.frequency_penalty, s.presence_penalty
            )
        )
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


class Candidates:
    """A reusable ``llama_token_data_array`` of the whole vocabulary, filled from a logits
    row with numpy (what a grammar-constrained sequence samples from)."""

    def __init__(self, n_vocab: int) -> None:
        self.n_vocab = n_vocab
        self.data = (llama_cpp.llama_token_data * n_vocab)()
        self.view = np.ctypeslib.as_array(self.data).view(
            np.dtype([("id", np.intc), ("logit", np.single), ("p", np.single)], align=True)
        )
        self.ids = np.arange(n_vocab, dtype=np.intc)
        self.array = llama_cpp.llama_token_data_array(
            data=self.data, size=n_vocab, selected=-1, sorted=False
        )
        self.one = (llama_cpp.llama_token_data * 1)()
        self.one_array = llama_cpp.llama_token_data_array(
            data=self.one, size=1, selected=-1, sorted=False
        )

    def fill(self, ctx: Any, row: int) -> Any:
        """The array holding every token with its logit from row ``row``."""
        pointer = llama_cpp.llama_get_logits_ith(ctx, row)
        logits = np.ctypeslib.as_array(
            ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)), shape=(self.n_vocab,)
        )
        view = self.view.reshape(-1)
        view["id"] = self.ids
        view["logit"] = logits
        view["p"] = 0.0
        self.array.size = self.n_vocab
        self.array.selected = -1
        self.array.sorted = False
        return ctypes.byref(self.array)

    def allows(self, grammar: Any, token: int) -> bool:
        """Whether ``grammar`` (in its current state) accepts ``token`` next."""
        one = self.one[0]
        one.id, one.logit, one.p = token, 1.0, 0.0  # type: ignore[assignment]
        self.one_array.size, self.one_array.selected = 1, -1
        llama_cpp.llama_sampler_apply(grammar, ctypes.byref(self.one_array))
        return bool(np.isfinite(self.one[0].logit))


class SequenceSampler:
    """One sequence's sampler: the native chain for its settings, and its grammar.

    Without a grammar, :meth:`sample` is ``llama_sampler_sample``: all in llama.cpp. A
    grammar applied to the whole vocabulary costs 5-10 ms a token here (more than the
    decode of SmolLM2), so it is applied as llama.cpp's server does: sample without it,
    check that one token against the grammar, and only when the grammar refuses it
    sample again with the grammar first. Same tokens, rarely the full cost.
    """

    __slots__ = ("candidates", "chain", "grammar")

    def __init__(self, vocab: Any, s: Sampling, candidates: Candidates) -> None:
        self.candidates = candidates
        self.grammar: Any = None
        if s.grammar is not None:
            self.grammar = grammar_sampler(vocab, s.grammar)
            if not self.grammar:
                raise ValueError("llama.cpp could not compile the grammar")
        self.chain = _chain(s)

    def sample(self, ctx: Any, row: int) -> int:
        """The next token from logits row ``row`` of the last decode (and accept it)."""
        if self.grammar is None:
            return int(llama_cpp.llama_sampler_sample(self.chain, ctx, row))
        cands = self.candidates
        array = cands.fill(ctx, row)
        llama_cpp.llama_sampler_apply(self.chain, array)
        token = int(cands.data[cands.array.selected].id)
        if not cands.allows(self.grammar, token):
            array = cands.fill(ctx, row)
            llama_cpp.llama_sampler_apply(self.grammar, array)
            llama_cpp.llama_sampler_apply(self.chain, array)
            token = int(cands.data[cands.array.selected].id)
        llama_cpp.llama_sampler_accept(self.grammar, token)
        llama_cpp.llama_sampler_accept(self.chain, token)
        return token

    def free(self) -> None:
        """Free the native samplers."""
        for sampler in (self.chain, self.grammar):
            if sampler:
                llama_cpp.llama_sampler_free(sampler)
        self.chain = self.grammar = None


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
