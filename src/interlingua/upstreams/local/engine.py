"""llama.cpp in process: load a GGUF, render its chat template, generate side by side.

:class:`LlamaEngine` owns one model and one llama.cpp context holding up to ``parallel``
sequences. Everything that touches the context runs in one worker thread, the batch
loop of :mod:`.batch`: each step decodes one ``llama_batch`` with the next token of
every running sequence (and a chunk of a newcomer's prompt), then samples each sequence
with its own native sampler chain (:mod:`.sampler`). A job submitted while others run
joins at the next step. The worker hands output to the event loop with
``loop.call_soon_threadsafe`` (once per step and loop, not once per token and job): the
loop never waits on llama.cpp, so the server answers ``/health`` and streams other bytes
during a generation.

A job's output (:mod:`.jobs`) is a sequence of *items*: one :class:`Started` (how much of the prompt
came from the cache), then ``str`` (text released so far) -- or, when the request
asked for log probabilities, :class:`Piece` (the text with its tokens' logprobs,
computed as llama.cpp's server does: the softmax of the raw logits each token was
sampled from) -- then exactly one :class:`Finish` or one exception. A job cancelled
before it starts gets the exception only. Token bytes are decoded incrementally (a UTF-8
character may span tokens), stop sequences are matched across token boundaries with
:class:`~interlingua.text.stop.StopMatcher`, and ``job.cancel`` is checked at every
step, so a client that goes away stops its sequence within one token; the others go on.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import llama_cpp
from llama_cpp import _internals
from llama_cpp._logger import set_verbose
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from ...config import ConfigError
from .batch import BatchWorker
from .jobs import N_BATCH, Finish, Item, Job, Piece, Started
from .resources import default_threads, fit_parallel, kv_budget
from .sampler import Sampling, grammar_sampler

__all__ = [
    "CHATML_TEMPLATE",
    "Finish",
    "Item",
    "Job",
    "LlamaEngine",
    "Piece",
    "Sampling",
    "Started",
    "continued_prompt",
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
_backend_lock = threading.Lock()
_backend_ready = False


def _init_backend() -> None:
    global _backend_ready
    with _backend_lock:
        if not _backend_ready:
            set_verbose(False)  # llama.cpp's log lines only on errors
            llama_cpp.llama_backend_init()
            _backend_ready = True


class LlamaEngine:
    """One GGUF model loaded with llama.cpp. Load with :meth:`load` (blocking).

    ``n_ctx`` is the context of one request (prompt + answer): the llama.cpp context
    holds ``parallel`` sequences of ``n_ctx`` tokens each. ``parallel=None`` takes
    :data:`.resources.DEFAULT_PARALLEL` when those caches fit in memory
    (:func:`.resources.fit_parallel`). ``chat_template`` overrides the GGUF's own
    ``tokenizer.chat_template``.
    """

    def __init__(
        self,
        model_path: str,
        *,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        parallel: int | None = None,
        chat_template: str | None = None,
    ) -> None:
        self.model_path = model_path
        self.n_ctx = n_ctx
        self.n_threads = n_threads or default_threads()
        self.requested_parallel = parallel
        #: sequences decoded side by side (resolved by load() when not configured)
        self.parallel = parallel or 1
        self._template_override = chat_template
        self._load_lock = threading.Lock()
        self._model: _internals.LlamaModel | None = None
        self._ctx: Any = None
        self._formatter: Jinja2ChatFormatter | None = None
        #: the same template without the generation prompt: a prefill's (:meth:`render`)
        self._continuing: Jinja2ChatFormatter | None = None
        self._vocab: Any = None
        self.n_vocab = 0
        self._pieces: dict[int, bytes] = {}
        self._piece_buf = ctypes.create_string_buffer(_PIECE_SIZE)
        self._worker: BatchWorker | None = None

    # -- loading --------------------------------------------------------------------------

    @property
    def loaded(self) -> bool:
        """True once the model is in memory."""
        return self._ctx is not None

    def load(self) -> None:
        """Load the model and create its context (blocking; idempotent and thread-safe)."""
        with self._load_lock:
            if self._ctx is not None:
                return
            if not os.path.isfile(self.model_path):
                raise ConfigError(f"local model file not found: {self.model_path}")
            _init_backend()
            started = time.perf_counter()
            params = llama_cpp.llama_model_default_params()
            params.n_gpu_layers = 0
            model = _internals.LlamaModel(path_model=self.model_path, params=params, verbose=False)
            try:
                self.parallel = fit_parallel(
                    self.requested_parallel, self.n_ctx, _kv_bytes_per_token(model), kv_budget()
                )
                ctx = llama_cpp.llama_init_from_model(model.model, self._context_params())
                if not ctx:
                    raise RuntimeError("llama.cpp could not create a context")
            except BaseException:
                model.close()  # type: ignore[no-untyped-call]
                raise
            template = self._template_override or model.metadata().get("tokenizer.chat_template")
            self._formatter, self._continuing = (
                Jinja2ChatFormatter(
                    template=template or CHATML_TEMPLATE,
                    eos_token=model.token_get_text(model.token_eos()),
                    bos_token=model.token_get_text(model.token_bos()),
                    add_generation_prompt=generation_prompt,
                )
                for generation_prompt in (True, False)
            )
            self._vocab = model.vocab
            self.n_vocab = model.n_vocab()
            self._model, self._ctx = model, ctx
            log.info(
                "loaded %s (n_ctx %d x %d sequences, %d threads) in %.2f s",
                os.path.basename(self.model_path),
                self.n_ctx,
                self.parallel,
                self.n_threads,
                time.perf_counter() - started,
            )

    def _context_params(self) -> Any:
        params = llama_cpp.llama_context_default_params()
        # One KV stream of n_ctx cells per sequence (kv_unified off): a request never
        # runs out of room because others are long, and attention reads only its own
        # cells. llama.cpp pads each stream to its own minimum.
        params.n_ctx = self.n_ctx * self.parallel
        params.n_seq_max = self.parallel
        params.kv_unified = False
        params.n_batch = params.n_ubatch = N_BATCH
        params.n_threads = params.n_threads_batch = self.n_threads
        params.no_perf = True
        return params

    def close(self) -> None:
        """Stop the worker (cancelling what runs) and free the model."""
        with self._load_lock:
            worker, self._worker = self._worker, None
            if worker is not None and not worker.stop():
                log.error("the local model's worker did not stop; its memory is not freed")
                return  # freeing a context a thread still uses would crash the process
            ctx, self._ctx = self._ctx, None
            if ctx is not None:
                llama_cpp.llama_free(ctx)
            model, self._model = self._model, None
            if model is not None:
                model.close()  # type: ignore[no-untyped-call]

    @property
    def ctx(self) -> Any:
        """The ``llama_context *`` (raises if :meth:`load` was not called)."""
        if self._ctx is None:
            raise RuntimeError("the local model is not loaded")
        return self._ctx

    # -- prompt -------------------------------------------------------------------------

    def render(self, messages: Sequence[dict[str, str]], *, prefill: bool = False) -> str:
        """The prompt text for chat ``messages`` by the model's chat template.

        With ``prefill`` the last message is the assistant's partial answer, to be carried
        on: the template is rendered without the generation prompt and cut right after
        that text (:func:`continued_prompt`, as Hugging Face's
        ``continue_final_message`` does), so no end of turn follows it. A template that
        rewrites the text beyond its outer whitespace gets the turns before it with the
        generation prompt, then the text as it is.
        """
        assert self._formatter is not None and self._continuing is not None, "load() first"
        if not prefill:
            return self._formatter(messages=list(messages)).prompt  # type: ignore[arg-type]
        partial = messages[-1]["content"]
        whole = self._continuing(messages=list(messages)).prompt  # type: ignore[arg-type]
        cut = continued_prompt(whole, partial)
        return self.render(messages[:-1]) + partial if cut is None else cut

    def tokenize(self, prompt: str) -> list[int]:
        """Token ids of a rendered prompt (special tokens such as ``<|im_start|>`` parsed).

        No BOS is added: the chat template writes it when the model wants one (as
        llama-cpp-python's own chat path does for Jinja templates).
        """
        self.ctx  # noqa: B018 - raises if not loaded
        assert self._model is not None
        tokens: list[int] = self._model.tokenize(prompt.encode("utf-8"), False, True)
        return tokens

    def tokenize_text(self, text: str) -> list[int]:
        """Token ids of a raw text completion prompt: BOS first when the model's
        vocabulary asks for one (no chat template writes it), special tokens parsed (as
        llama.cpp's server tokenizes a ``/completion`` prompt)."""
        self.ctx  # noqa: B018 - raises if not loaded
        assert self._model is not None
        tokens: list[int] = self._model.tokenize(text.encode("utf-8"), True, True)
        return tokens

    def grammar_is_valid(self, grammar: Any) -> bool:
        """Whether llama.cpp accepts ``grammar`` (an invalid one would crash the sampler)."""
        self.ctx  # noqa: B018 - raises if not loaded
        sampler = grammar_sampler(self._vocab, grammar)
        if not sampler:
            return False
        llama_cpp.llama_sampler_free(sampler)
        return True

    def piece(self, token: int) -> bytes:
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

    _piece = piece  # the name the tests knew

    # -- generation ---------------------------------------------------------------------

    def submit(self, job: Job) -> None:
        """Queue ``job`` for the batch worker and return at once; it joins the running
        batch at the next step. The worker calls ``job.finished()`` when the job leaves."""
        self.ctx  # noqa: B018 - raises if not loaded
        worker = self._worker
        if worker is None:
            with self._load_lock:
                if self._worker is None:
                    self._worker = BatchWorker(
                        self.ctx, self._vocab, self.n_vocab, self.parallel, self.piece
                    )
                worker = self._worker
        worker.submit(job)

    def run(self, job: Job) -> None:
        """Submit ``job`` and block until it has left the model (tests, simple callers)."""
        self.submit(job)
        job.ended.wait()


def _kv_bytes_per_token(model: _internals.LlamaModel) -> int:
    """Bytes of f16 K and V per token over all layers (what one cell of context costs)."""
    m = model.model
    n_layer = llama_cpp.llama_model_n_layer(m)
    n_head = max(1, llama_cpp.llama_model_n_head(m))
    n_head_kv = llama_cpp.llama_model_n_head_kv(m) or n_head
    head_dim = llama_cpp.llama_model_n_embd(m) // n_head
    return int(n_layer * n_head_kv * head_dim * 2 * 2)


def continued_prompt(rendered: str, partial: str) -> str | None:
    r"""``rendered`` -- a chat template's text for turns ending with the assistant's
    ``partial`` answer, without the generation prompt -- cut right after that answer, so
    the model carries on from its last character; None when the text is not there (a
    template that rewrites it) or blank.

    Templates may trim a message: the text is found without its outer whitespace, and
    its trailing whitespace kept only where the template kept it (Hugging Face's rule
    for ``continue_final_message``).

    >>> continued_prompt("<s>user\nHi</s>\n<s>assistant\nHello, wor</s>\n", "Hello, wor")
    '<s>user\nHi</s>\n<s>assistant\nHello, wor'
    >>> continued_prompt("<s>assistant\nHello</s>", "Hello  "), continued_prompt("x", "y")
    ('<s>assistant\nHello', None)
    """
    stripped = partial.strip()
    at = rendered.rfind(stripped) if stripped else -1
    if at < 0:
        return None
    whole = partial.lstrip()
    end = at + (len(whole) if rendered.startswith(whole, at) else len(stripped))
    return rendered[:end]
