"""The batch loop: up to ``parallel`` sequences decoded together, continuously.

One worker thread owns the llama.cpp context. Each *step* builds one ``llama_batch``:

1. the next token of every sequence that is generating (one output row each);
2. prompt tokens of sequences still reading their prompt, in arrival order, up to
   :data:`~.jobs.N_BATCH` tokens in all -- except a prompt's *last* token, which goes
   in a step of its own for that sequence (one token, one output row), like a generated
   token: the logits the first answer token is sampled from then do not depend on how
   the rest of the prompt was chunked or cached (batched and single-token evaluation
   differ in the last float bits, enough to change a seeded answer);

then ``llama_decode`` once, and samples every output row with its sequence's own native
sampler chain. A job submitted meanwhile is admitted at the start of the next step, so
a newcomer's prompt is read beside the others' next tokens instead of after them.

Each sequence id keeps the tokens its KV cache holds after its job ends. A new job takes
the free sequence whose cache shares the longest prefix with its prompt (slot affinity,
as llama.cpp's server does; the least recently used one when none shares anything),
removes the rest of that cache (``llama_memory_seq_rm``) and reads only the remainder:
a conversation that grows by a turn re-reads only the new turn. ``Started.cached_tokens``
reports how many prompt tokens came from the cache.
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Any

import llama_cpp

from ...core import StopReason, TokenLogprob
from ...text.stop import StopMatcher
from .jobs import N_BATCH, Finish, Item, Job, Piece, Started, cancelled_error
from .sampler import Candidates, SequenceSampler, token_logprob

__all__ = ["BatchWorker"]

log = logging.getLogger("interlingua.local")

#: A job that nobody streams gets its text handed over every this many tokens.
_FLUSH_TOKENS = 32

#: Seconds an idle batch waits after each arrival for the rest of a burst (_gather)...
GATHER = 0.004
#: ...and the most it waits for a burst in all.
GATHER_MAX = 0.025


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _affinity(seq: _Sequence, prompt: list[int]) -> tuple[bool, int, int]:
    """How well ``seq`` suits ``prompt`` (the highest wins): a sequence whose cache the
    prompt mostly reuses (at least half of it), the longest shared prefix first; else
    the least recently used, so that one shared system prompt does not wipe another
    conversation's cache while an idle sequence is free."""
    shared = _common_prefix(seq.tokens, prompt)
    keeps = 2 * shared >= len(seq.tokens)
    return keeps, shared if keeps else 0, -seq.last_used


class _Sequence:
    """One sequence id of the context: its cache, and the job running on it (if any)."""

    __slots__ = (
        "count",
        "decoder",
        "id",
        "job",
        "last_used",
        "matcher",
        "next_token",
        "pending",
        "pending_logprobs",
        "pending_tokens",
        "prompt_at",
        "sampler",
        "tokens",
    )

    def __init__(self, seq_id: int) -> None:
        self.id = seq_id
        #: the tokens whose keys and values the cache holds, positions 0..len-1
        self.tokens: list[int] = []
        self.last_used = 0
        self.job: Job | None = None
        self.sampler: SequenceSampler | None = None

    def start(self, job: Job, sampler: SequenceSampler, cached: int) -> None:
        self.job, self.sampler = job, sampler
        del self.tokens[cached:]
        self.prompt_at = cached  # the next prompt token to read
        self.next_token: int | None = None  # sampled, to be decoded next step
        self.count = 0
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.matcher = StopMatcher(job.stops)
        self.pending = ""  # text released but not yet handed over (non-streaming jobs)
        self.pending_tokens = 0
        self.pending_logprobs: list[TokenLogprob] = []

    @property
    def reading_prompt(self) -> bool:
        assert self.job is not None
        return self.prompt_at < len(self.job.tokens)


class _Deliveries:
    """Items for the event loops, handed over once per step and loop."""

    def __init__(self) -> None:
        self.by_loop: defaultdict[asyncio.AbstractEventLoop, list[tuple[Job, Item]]] = defaultdict(
            list
        )

    def add(self, job: Job, item: Item) -> None:
        self.by_loop[job.loop].append((job, item))

    def send(self) -> None:
        for loop, items in self.by_loop.items():
            try:
                loop.call_soon_threadsafe(_deliver, items)
            except RuntimeError:  # that loop is closed: nobody listens there
                for job, _ in items:
                    job.cancel.set()
        self.by_loop.clear()


def _deliver(items: list[tuple[Job, Item]]) -> None:
    for job, item in items:
        job.queue.put_nowait(item)


class BatchWorker:
    """The thread that decodes every running sequence of a llama.cpp context together.

    ``ctx`` holds ``parallel`` sequences; ``vocab`` and ``n_vocab`` are its model's;
    ``piece`` gives a token's bytes.
    """

    def __init__(
        self,
        ctx: Any,
        vocab: Any,
        n_vocab: int,
        parallel: int,
        piece: Callable[[int], bytes],
    ) -> None:
        self.ctx, self.vocab, self.n_vocab, self.piece = ctx, vocab, n_vocab, piece
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.sequences = [_Sequence(i) for i in range(parallel)]
        self.candidates = Candidates(n_vocab)
        self.batch = llama_cpp.llama_batch_init(N_BATCH, 0, 1)
        self._inbox: deque[Job] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._clock = 0
        self.thread = threading.Thread(
            target=self._loop, name="interlingua-local-batch", daemon=True
        )
        self.thread.start()

    # -- from any thread ----------------------------------------------------------------

    def submit(self, job: Job) -> None:
        """Queue ``job``; it joins at the next step."""
        with self._cond:
            if self._stopping:
                raise RuntimeError("the local model is shutting down")
            self._inbox.append(job)
            self._cond.notify()

    def stop(self, timeout: float = 10.0) -> bool:
        """Cancel every job, end the thread, free the batch; False if the thread is still
        inside llama.cpp after ``timeout`` seconds (then nothing is freed)."""
        with self._cond:
            self._stopping = True
            for job in self._inbox:
                job.cancel.set()
            for seq in self.sequences:
                if seq.job is not None:
                    seq.job.cancel.set()
            self._cond.notify()
        self.thread.join(timeout)
        if self.thread.is_alive():
            return False
        llama_cpp.llama_batch_free(self.batch)
        return True

    # -- the worker thread --------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._inbox and not self._running() and not self._stopping:
                    self._cond.wait()
                if not self._running():
                    self._gather()
                arrived = list(self._inbox)
                self._inbox.clear()
                stopping = self._stopping
            out = _Deliveries()
            ended: list[Job] = []
            for job in arrived:
                self._admit(job, out, ended)
            if stopping:
                for seq in self.sequences:
                    if seq.job is not None:
                        self._end(seq, cancelled_error(), out, ended)
            else:
                try:
                    self._step(out, ended)
                except Exception as exc:  # reported in-band; the thread must not die
                    log.exception("local generation failed")
                    for seq in self.sequences:
                        if seq.job is not None:
                            self._end(seq, exc, out, ended, keep_cache=False)
            for job in ended:  # free the slots first: the next request may come at once
                release, job.on_release = job.on_release, None
                if release is not None:
                    release()
            out.send()
            for job in ended:
                job.finished()
            if stopping:
                return

    def _gather(self) -> None:
        """From idle, wait for the rest of a burst (the caller holds the condition): until
        every free sequence has a job, or :data:`GATHER` seconds pass with no new arrival,
        or :data:`GATHER_MAX` seconds in all.

        Clients send their parallel calls together, and they reach this thread a
        millisecond or two apart (each is parsed, rendered and tokenized on the event loop
        first). Without the wait the first starts a step alone and the others join the
        next one, their first token a whole step (~25 ms here, ~50 ms for four) later.
        The wait slides with each arrival: a fixed window from the first one let the last
        of a burst of four miss the step now and then, and that request's first token
        (the p95 of the burst) came a whole step late. A lone request pays GATHER once,
        when the model was idle; a running batch never waits (newcomers join its next
        step).
        """
        start = time.monotonic()
        deadline = start + GATHER
        free = sum(seq.job is None for seq in self.sequences)
        seen = len(self._inbox)
        while len(self._inbox) < free and not self._stopping:
            now = time.monotonic()
            if len(self._inbox) > seen:  # another one came: wait for the next as long
                seen = len(self._inbox)
                deadline = min(now + GATHER, start + GATHER_MAX)
            left = deadline - now
            if left <= 0:
                return
            self._cond.wait(left)

    def _running(self) -> bool:
        return any(seq.job is not None for seq in self.sequences)

    def _admit(self, job: Job, out: _Deliveries, ended: list[Job]) -> None:
        """Give ``job`` the free sequence whose cache shares most of its prompt."""
        if job.cancel.is_set() or not job.tokens:
            out.add(job, cancelled_error() if job.tokens else ValueError("empty prompt"))
            ended.append(job)
            return
        free = [seq for seq in self.sequences if seq.job is None]
        if not free:  # the slot admits no more than `parallel` jobs: a caller's bug
            out.add(job, RuntimeError("no free sequence in the local model"))
            ended.append(job)
            return
        seq = max(free, key=lambda s: _affinity(s, job.tokens))
        # The last prompt token is always read again: its logits are what the first
        # answer token is sampled from.
        cached = min(_common_prefix(seq.tokens, job.tokens), len(job.tokens) - 1)
        if cached < len(seq.tokens) and not llama_cpp.llama_memory_seq_rm(
            self.memory, seq.id, cached, -1
        ):
            llama_cpp.llama_memory_seq_rm(self.memory, seq.id, -1, -1)
            cached = 0
        try:
            sampler = SequenceSampler(self.vocab, job.sampling, self.candidates)
        except Exception as exc:
            out.add(job, exc)
            ended.append(job)
            return
        seq.start(job, sampler, cached)
        self._clock += 1
        seq.last_used = self._clock
        out.add(job, Started(cached))

    def _step(self, out: _Deliveries, ended: list[Job]) -> None:
        """One decode of every running sequence, then one sample per output row."""
        batch = self.batch
        rows: list[tuple[_Sequence, int]] = []
        n = 0
        running = [seq for seq in self.sequences if seq.job is not None]
        for seq in running:
            assert seq.job is not None
            if seq.job.cancel.is_set():
                self._end(seq, cancelled_error(), out, ended)
        # Generating sequences first: their next token each, never held back.
        for seq in running:
            if seq.job is not None and seq.next_token is not None:
                n = self._add(seq, seq.next_token, n, output=True)
                seq.next_token = None
                rows.append((seq, n - 1))
        # Then prompts, oldest first, as much as the batch takes.
        for seq in sorted(running, key=lambda s: s.last_used):
            if seq.job is None or not seq.reading_prompt or n >= N_BATCH:
                continue
            prompt = seq.job.tokens
            last = len(prompt) - 1
            if seq.prompt_at < last:
                for token in prompt[
                    seq.prompt_at : seq.prompt_at + min(N_BATCH - n, last - seq.prompt_at)
                ]:
                    n = self._add(seq, token, n, output=False)
                    seq.prompt_at += 1
            else:  # the last prompt token, alone for this sequence
                n = self._add(seq, prompt[last], n, output=True)
                seq.prompt_at += 1
                rows.append((seq, n - 1))
        if n == 0:
            return
        batch.n_tokens = n
        code = llama_cpp.llama_decode(self.ctx, batch)
        if code != 0:
            raise RuntimeError(f"llama_decode failed ({code})")
        for seq, row in rows:
            self._sample(seq, row, out, ended)
        for seq in running:
            if seq.job is not None:
                self._flush(seq, out, final=False)

    def _add(self, seq: _Sequence, token: int, n: int, *, output: bool) -> int:
        batch = self.batch
        batch.token[n] = token
        batch.pos[n] = len(seq.tokens)
        batch.n_seq_id[n] = 1
        batch.seq_id[n][0] = seq.id
        batch.logits[n] = output
        seq.tokens.append(token)
        return n + 1

    def _sample(self, seq: _Sequence, row: int, out: _Deliveries, ended: list[Job]) -> None:
        job = seq.job
        assert job is not None
        assert seq.sampler is not None
        token = seq.sampler.sample(self.ctx, row)
        if llama_cpp.llama_vocab_is_eog(self.vocab, token):
            self._finish(seq, StopReason.END_TURN, out, ended)
            return
        seq.count += 1
        if job.logprobs is not None:
            seq.pending_logprobs.append(
                token_logprob(self.ctx, row, self.n_vocab, token, job.logprobs, self.piece)
            )
        seq.pending_tokens += 1
        text = seq.decoder.decode(self.piece(token))
        if text:
            released, matched = seq.matcher.feed(text)
            seq.pending += released
            if matched is not None:
                self._flush(seq, out, final=True)
                self._end(seq, Finish(StopReason.STOP_SEQUENCE, matched, seq.count), out, ended)
                return
        if seq.count >= job.max_tokens:
            self._finish(seq, StopReason.MAX_TOKENS, out, ended)
            return
        seq.next_token = token

    def _finish(
        self, seq: _Sequence, reason: StopReason, out: _Deliveries, ended: list[Job]
    ) -> None:
        """The end of a generation: release what the decoder and matcher hold back."""
        released, matched = seq.matcher.feed(seq.decoder.decode(b"", final=True))
        rest = "" if matched is not None else seq.matcher.flush()
        seq.pending += released + rest
        self._flush(seq, out, final=True)
        if seq.matcher.matched is not None:
            finish = Finish(StopReason.STOP_SEQUENCE, seq.matcher.matched, seq.count)
        else:
            finish = Finish(reason, None, seq.count)
        self._end(seq, finish, out, ended)

    def _flush(self, seq: _Sequence, out: _Deliveries, *, final: bool) -> None:
        """Hand the released text over: every step when streamed, else in batches."""
        job = seq.job
        assert job is not None
        if not seq.pending or (not final and not job.stream and seq.pending_tokens < _FLUSH_TOKENS):
            return
        if job.logprobs is None:
            out.add(job, seq.pending)
        else:
            out.add(job, Piece(seq.pending, tuple(seq.pending_logprobs)))
            seq.pending_logprobs.clear()
        seq.pending = ""
        seq.pending_tokens = 0

    def _end(
        self,
        seq: _Sequence,
        item: Item,
        out: _Deliveries,
        ended: list[Job],
        *,
        keep_cache: bool = True,
    ) -> None:
        """Take the job off its sequence. What the cache holds stays, for the next prompt
        that shares it; a sampled token not yet decoded is not in it."""
        job = seq.job
        assert job is not None
        out.add(job, item)
        ended.append(job)
        seq.job = None
        seq.next_token = None
        if seq.sampler is not None:
            seq.sampler.free()
            seq.sampler = None
        if not keep_cache:  # a failed decode: the cache may not hold seq.tokens
            llama_cpp.llama_memory_seq_rm(self.memory, seq.id, -1, -1)
            seq.tokens.clear()
