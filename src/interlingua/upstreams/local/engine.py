"""llama.cpp in process: load a GGUF, render its chat template, generate in a thread.

:class:`LlamaEngine` owns one ``llama_cpp.Llama``. Everything that touches the model's
context runs in a worker thread (:meth:`LlamaEngine.run`), one job at a time (the
caller holds a :class:`~.slot.Slot`), and hands its output to the event loop through an
``asyncio.Queue`` with ``loop.call_soon_threadsafe``: the loop never waits on llama.cpp,
so the server answers ``/health`` and streams other bytes during a generation.

A job's output is a sequence of *items*: ``str`` (text released so far) -- or, when the
request asked for log probabilities, :class:`Piece` (the text with its tokens' logprobs,
computed as llama.cpp's server does: the softmax of the raw logits each token was
sampled from) -- then exactly one :class:`Finish` or one exception. Token bytes are decoded incrementally (a UTF-8
character may span tokens), stop sequences are matched across token boundaries with
:class:`~interlingua.text.stop.StopMatcher`, and ``job.cancel`` is checked after every
token (and between prompt batches), so a client that goes away stops the model within
one token.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import ctypes
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import llama_cpp
import numpy as np
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from ...config import ConfigError
from ...core import StopReason, TokenLogprob
from ...errors import UpstreamError
from ...text.stop import StopMatcher

__all__ = [
    "CHATML_TEMPLATE",
    "Finish",
    "Item",
    "Job",
    "LlamaEngine",
    "Piece",
    "Sampling",
]

log = logging.getLogger("interlingua.local")

#: Used when a GGUF carries no ``tokenizer.chat_template`` and none is configured:
#: ChatML is what most small instruct models were tuned on.
CHATML_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_PIECE_SIZE = 64


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


@dataclass(frozen=True, slots=True)
class Finish:
    """The last item of a job: why it stopped and how many tokens it generated."""

    stop_reason: StopReason
    stop_sequence: str | None
    output_tokens: int


@dataclass(frozen=True, slots=True)
class Piece:
    """Released text and the logprobs of the tokens generated since the last piece (a
    token whose text is still held back, by the UTF-8 decoder or the stop matcher, goes
    with a later piece; when a stop sequence matches, the tokens that spelled it go with
    the text released just before it, or are not sent when there is none)."""

    text: str
    logprobs: tuple[TokenLogprob, ...]


Item: TypeAlias = str | Piece | Finish | BaseException


@dataclass(slots=True)
class Job:
    """One generation: the prompt, its limits, and the channel back to the event loop."""

    tokens: list[int]
    max_tokens: int
    sampling: Sampling
    stops: tuple[str, ...]
    loop: asyncio.AbstractEventLoop
    #: None: no logprobs; k: each token's logprob and its k most likely alternatives
    logprobs: int | None = None
    queue: asyncio.Queue[Item] = field(default_factory=asyncio.Queue)
    cancel: threading.Event = field(default_factory=threading.Event)
    #: completed (on ``loop``) when the worker thread has let go of the model
    done: asyncio.Future[None] | None = None

    def emit(self, item: Item) -> None:
        """Hand ``item`` to the consumer (from the worker thread)."""
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the consumer's loop is closed: nobody is listening
            self.cancel.set()

    def finished(self) -> None:
        """Mark the job done (from the worker thread)."""
        done = self.done
        if done is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            self.loop.call_soon_threadsafe(_set_done, done)


class _Output:
    """Released text to the job: plain strings, or pieces with the logprobs of the
    tokens generated since the last piece when the job asked for them."""

    __slots__ = ("job", "pending")

    def __init__(self, job: Job) -> None:
        self.job = job
        self.pending: list[TokenLogprob] = []

    def emit(self, text: str) -> None:
        if self.job.logprobs is None:
            self.job.emit(text)
            return
        self.job.emit(Piece(text, tuple(self.pending)))
        self.pending.clear()


def _cancelled() -> UpstreamError:
    return UpstreamError("the local model stopped this generation (shutting down)", status=503)


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class LlamaEngine:
    """One GGUF model loaded with llama-cpp-python. Load with :meth:`load` (blocking).

    ``chat_template`` overrides the GGUF's own ``tokenizer.chat_template``.
    """

    def __init__(
        self,
        model_path: str,
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        chat_template: str | None = None,
    ) -> None:
        self.model_path = model_path
        self.n_ctx = n_ctx
        # Default: half the cores (llama-cpp-python's default for generation). Measured
        # on 2 cores shared with other work: 1 thread steady at ~78 tokens/s, 2 threads
        # anywhere from 9 to 130; a 40-token prompt 0.5-0.7 s with 1 thread, 1-4.7 s with
        # 2. llama.cpp's threads meet at a barrier on every step and stall whenever
        # another process holds a core, so one spare core is worth more than its speed.
        self.n_threads = n_threads or max(1, (os.cpu_count() or 1) // 2)
        self._template_override = chat_template
        self._load_lock = threading.Lock()
        self._llm: llama_cpp.Llama | None = None
        self._formatter: Jinja2ChatFormatter | None = None
        self._vocab: Any = None
        self._pieces: dict[int, bytes] = {}
        self._piece_buf = ctypes.create_string_buffer(_PIECE_SIZE)

    # -- loading --------------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        """True once the model is in memory."""
        return self._llm is not None

    def load(self) -> None:
        """Load the model (blocking; idempotent and thread-safe)."""
        with self._load_lock:
            if self._llm is not None:
                return
            if not os.path.isfile(self.model_path):
                raise ConfigError(f"local model file not found: {self.model_path}")
            started = time.perf_counter()
            llm = llama_cpp.Llama(
                model_path=self.model_path,
                n_ctx=self.n_ctx,
                n_threads=self.n_threads,
                n_threads_batch=self.n_threads,
                verbose=False,
            )
            model = llm._model
            template = self._template_override or llm.metadata.get("tokenizer.chat_template")
            self._formatter = Jinja2ChatFormatter(
                template=template or CHATML_TEMPLATE,
                eos_token=model.token_get_text(llm.token_eos()),
                bos_token=model.token_get_text(llm.token_bos()),
                add_generation_prompt=True,
            )
            self._vocab = model.vocab
            self._llm = llm
            log.info(
                "loaded %s (n_ctx %d, %d threads) in %.2f s",
                os.path.basename(self.model_path),
                self.n_ctx,
                self.n_threads,
                time.perf_counter() - started,
            )

    def close(self) -> None:
        """Free the model. Only call when no job runs."""
        with self._load_lock:
            llm, self._llm = self._llm, None
            if llm is not None:
                llm.close()

    @property
    def llm(self) -> llama_cpp.Llama:
        """The loaded ``Llama`` (raises if :meth:`load` was not called)."""
        if self._llm is None:
            raise RuntimeError("the local model is not loaded")
        return self._llm

    # -- prompt -------------------------------------------------------------------------

    def render(self, messages: Sequence[dict[str, str]]) -> str:
        """The prompt text for chat ``messages`` by the model's chat template."""
        assert self._formatter is not None, "load() first"
        return self._formatter(messages=list(messages)).prompt  # type: ignore[arg-type]

    def tokenize(self, prompt: str) -> list[int]:
        """Token ids of a rendered prompt (special tokens such as ``<|im_start|>`` parsed).

        No BOS is added: the chat template writes it when the model wants one (as
        llama-cpp-python's own chat path does for Jinja templates).
        """
        tokens: list[int] = self.llm.tokenize(prompt.encode("utf-8"), add_bos=False, special=True)
        return tokens

    def grammar_is_valid(self, grammar: Any) -> bool:
        """Whether llama.cpp accepts ``grammar`` (an invalid one would crash the sampler)."""
        self.llm  # noqa: B018 - raises if not loaded
        sampler = llama_cpp.llama_sampler_init_grammar(
            self._vocab, grammar._grammar.encode("utf-8"), grammar._root.encode("utf-8")
        )
        if not sampler:
            return False
        llama_cpp.llama_sampler_free(sampler)
        return True

    # -- generation (worker thread) -------------------------------------------------------

    def _piece(self, token: int) -> bytes:
        """The bytes of one token (special tokens render as nothing)."""
        piece = self._pieces.get(token)
        if piece is None:
            buf = self._piece_buf
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, _PIECE_SIZE, 0, False)
            if n < 0:  # longer than the buffer: -n is the size needed
                buf = ctypes.create_string_buffer(-n)
                n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, -n, 0, False)
            piece = buf.raw[: max(n, 0)]
            self._pieces[token] = piece
        return piece

    def _logprob(self, token: int, top: int) -> TokenLogprob:
        """``token``'s log probability under the logits it was just sampled from (the
        context's last row: the next evaluation has not run yet), with the ``top`` most
        likely tokens there. Raw logits, before temperature and the samplers, as
        llama.cpp's server reports them by default."""
        n_vocab = self.llm.n_vocab()
        row = llama_cpp.llama_get_logits_ith(self.llm._ctx.ctx, -1)
        logits = np.ctypeslib.as_array(row, shape=(n_vocab,)).astype(np.float64)
        peak = logits.max()
        norm = peak + np.log(np.exp(logits - peak).sum())
        alternatives: tuple[TokenLogprob, ...] = ()
        if top > 0:
            best = np.argpartition(-logits, min(top, n_vocab) - 1)[:top]
            best = best[np.argsort(-logits[best], kind="stable")]
            alternatives = tuple(self._token_logprob(int(t), logits[t] - norm) for t in best)
        return self._token_logprob(token, logits[token] - norm, alternatives)

    def _token_logprob(
        self, token: int, logprob: float, top: tuple[TokenLogprob, ...] = ()
    ) -> TokenLogprob:
        piece = self._piece(token)
        return TokenLogprob(piece.decode("utf-8", "replace"), float(logprob), tuple(piece), top)

    def _prefill(self, tokens: list[int], cancel: threading.Event) -> bool:
        """Evaluate the prompt batch by batch, reusing the cached common prefix.

        ``Llama.generate`` would evaluate the whole prompt in one call that cannot be
        interrupted; doing it here checks ``cancel`` between batches. Afterwards the
        prompt is exactly cached, so ``generate`` starts sampling at once. Returns False
        when cancelled.
        """
        llm = self.llm
        n_past = llm.n_tokens
        limit = min(n_past, len(tokens))
        cached = llm.input_ids[:limit].tolist()
        common = next((i for i in range(limit) if cached[i] != tokens[i]), limit)
        # The last prompt token is always re-evaluated: sampling needs its fresh logits.
        common = min(common, len(tokens) - 1)
        if common < n_past:
            if common > 0 and llm._ctx.kv_cache_seq_rm(-1, common, -1):
                llm.n_tokens = common
            else:
                llm.reset()  # type: ignore[no-untyped-call]
                common = 0
        batch = llm.n_batch
        last = len(tokens) - 1
        for start in range(common, last, batch):
            if cancel.is_set():
                return False
            llm.eval(tokens[start : min(start + batch, last)])
        # The last prompt token alone, always: its logits (what the first answer token is
        # sampled from) then do not depend on what happened to be cached. Batched and
        # single-token evaluation differ in the last float bits, enough to make a seeded
        # request answer differently on a fresh and on a warm cache.
        llm.eval(tokens[last:])
        return not cancel.is_set()

    def run(self, job: Job) -> None:
        """Generate ``job`` token by token; emit text, then a Finish or an exception.

        Runs in a worker thread; the caller must hold the slot (and release it, then call
        ``job.finished()``, afterwards). Never raises.
        """
        try:
            finish = self._generate(job)
            # None = cancelled: usually nobody listens any more, but when the upstream
            # is shutting down under a live stream the consumer must not wait forever.
            job.emit(finish if finish is not None else _cancelled())
        except Exception as exc:  # reported in-band; the thread must not die silently
            log.exception("local generation failed")
            job.emit(exc)

    def _generate(self, job: Job) -> Finish | None:
        llm = self.llm
        s = job.sampling
        # LLAMA_DEFAULT_SEED asks llama.cpp for a random seed.
        llm.set_seed(s.seed & 0xFFFFFFFF if s.seed is not None else llama_cpp.LLAMA_DEFAULT_SEED)
        if not self._prefill(job.tokens, job.cancel):
            return None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        matcher = StopMatcher(job.stops)
        reason = StopReason.END_TURN
        count = 0
        tokens = llm.generate(
            job.tokens,
            temp=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            min_p=s.min_p,
            repeat_penalty=s.repeat_penalty,
            frequency_penalty=s.frequency_penalty,
            presence_penalty=s.presence_penalty,
            grammar=s.grammar,
        )
        out = _Output(job)
        try:
            for token in tokens:
                if job.cancel.is_set():
                    return None
                if llama_cpp.llama_vocab_is_eog(self._vocab, token):
                    break
                count += 1
                if job.logprobs is not None:
                    out.pending.append(self._logprob(token, job.logprobs))
                text = decoder.decode(self._piece(token))
                if text:
                    released, matched = matcher.feed(text)
                    if released:
                        out.emit(released)
                    if matched is not None:
                        return Finish(StopReason.STOP_SEQUENCE, matched, count)
                if count >= job.max_tokens:
                    reason = StopReason.MAX_TOKENS
                    break
        finally:
            tokens.close()
        released, matched = matcher.feed(decoder.decode(b"", final=True))
        rest = "" if matched is not None else matcher.flush()
        if released or rest:
            out.emit(released + rest)
        if matcher.matched is not None:
            return Finish(StopReason.STOP_SEQUENCE, matcher.matched, count)
        return Finish(reason, None, count)
