"""The ``local`` upstream: a GGUF model answering in neutral events, like any upstream.

It has no wire dialect (``dialect = None``), so every client dialect reaches it through
the normal translation path. A request goes:

1. prompt -- tools described in the system prompt when present, tool history as text,
   the model's own chat template, tokenized (:mod:`.prompt`); a prompt that does not fit
   the context is the caller's 400 ``context_length_exceeded`` / "prompt is too long".
   A prefill (:mod:`..prefill`) ends the prompt with the assistant's partial answer,
   which the model carries on (:meth:`.LlamaEngine.render`);
2. the slot -- ``parallel`` generations side by side, a bounded line of waiters, 429
   when it is full (:mod:`.slot`);
3. the engine's batch worker (:mod:`.batch`) generates it beside the others while this
   async generator turns its text into ``StreamStart``, ``BlockStart(TextPart(""))``,
   ``TextDelta``..., ``BlockStop``, ``StreamEnd`` with the true token counts (prompt
   tokens found in the KV cache as ``cache_read_tokens``; and, when the request asks
   for ``logprobs``, each delta's tokens' log probabilities). With tools (or
   ``think_tags``) the events pass through the stream-safe text processors of
   :mod:`interlingua.text`, so tool calls written as text become tool-call blocks.

Closing the stream early (client gone, task cancelled) sets the job's cancel flag, which
the worker checks at every step, and waits until the worker has let go of the job.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ...config import ConfigError, UpstreamConfig
from ...core import (
    BlockStart,
    BlockStop,
    Request,
    Response,
    StreamEnd,
    StreamError,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    Usage,
    aclose_iterator,
    fold,
)
from ...dialects import random_id
from ...errors import InterlinguaError, InvalidRequestError, UpstreamError
from ...text import TextProcessing, TextProcessingStream, parsed_tool_calls
from ..base import RawResponse, Upstream
from ..prefill import take_prefill
from ..shaping import neutral_request
from .engine import Finish, Job, LlamaEngine, Piece, Sampling, Started
from .kind import bundled_model_path
from .prompt import chat_messages, check_supported, for_text_model, grammar_for, sampling_for
from .slot import Slot
from .text_completion import RAW_PROMPT, stream_answer, text_request, whole_answer

__all__ = ["DEFAULT_MAX_QUEUE", "DEFAULT_N_CTX", "LocalUpstream"]

DEFAULT_N_CTX = 8192
DEFAULT_MAX_QUEUE = 16
# How long aclose() waits for a running generation to notice its cancel flag.
_JOIN_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A request made ready for the engine."""

    tokens: list[int]
    max_tokens: int
    sampling: Sampling
    #: how to process the text: think tags (the upstream's option), and tool calls
    #: parsed out of it when tools are offered and tool_choice is not "none"
    text: TextProcessing


class LocalUpstream(Upstream):
    """A GGUF model run in process by llama.cpp. See the module docstring.

    >>> up = LocalUpstream("local", LlamaEngine(bundled_model_path("smollm2")))
    >>> await up.start()                      # doctest: +SKIP  (loads the model, ~0.3 s)
    >>> (await up.complete(request)).text     # doctest: +SKIP
    """

    dialect = None  # never the passthrough path: there is no wire
    cancel_on_disconnect = True  # a lost client frees its place in the batch at once

    def __init__(
        self,
        name: str,
        engine: LlamaEngine,
        *,
        max_queue: int = DEFAULT_MAX_QUEUE,
        think_tags: bool = False,
        text_tool_calls: bool = True,
    ) -> None:
        super().__init__(name)
        self.engine = engine
        self.slot = Slot(max_queue, capacity=engine.parallel)
        self.think_tags = think_tags
        self.text_tool_calls = text_tool_calls
        # What a request without tools to parse gets: built once, not per request.
        self._plain_text = TextProcessing(think_tags=think_tags)
        self._running: set[Job] = set()

    @classmethod
    def from_config(cls, cfg: UpstreamConfig) -> LocalUpstream:
        """Build from an upstream entry of kind ``local`` that :func:`.kind.check_options`
        accepted (the registry runs it first)."""
        where = f"upstreams.{cfg.name}"
        options = cfg.options
        try:
            path = options.get("path") or bundled_model_path(options.get("bundled") or "")
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if not os.path.isfile(path):
            raise ConfigError(f"{where}.path: no such model file: {path}")
        engine = LlamaEngine(
            path,
            n_ctx=options.get("n_ctx", DEFAULT_N_CTX),
            n_threads=options.get("n_threads"),
            parallel=options.get("parallel"),
            chat_template=options.get("chat_template"),
        )
        return cls(
            cfg.name,
            engine,
            max_queue=options.get("max_queue", DEFAULT_MAX_QUEUE),
            think_tags=options.get("think_tags", False),
            text_tool_calls=options.get("text_tool_calls", True),
        )

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Load the model off the event loop (also done lazily on first use)."""
        await self._ensure_loaded()

    async def aclose(self) -> None:
        """Stop the running generations, wait for them, and free the model."""
        jobs = list(self._running)
        for job in jobs:
            job.cancel.set()
        for job in jobs:
            await asyncio.to_thread(job.ended.wait, _JOIN_TIMEOUT)
        if all(job.ended.is_set() for job in jobs):
            await asyncio.to_thread(self.engine.close)

    async def _ensure_loaded(self) -> None:
        if not self.engine.loaded:
            await asyncio.to_thread(self.engine.load)
        if self.slot.capacity != self.engine.parallel:  # known once the model is loaded
            self.slot.resize(self.engine.parallel)

    # -- the request path ---------------------------------------------------------------

    def _prompt_tokens(self, request: Request) -> list[int]:
        raw = request.extra.get(RAW_PROMPT)
        if raw is not None:  # a text completion: the prompt as it is, no chat template
            return list(raw) if isinstance(raw, list) else self.engine.tokenize_text(raw)
        # A prefill (upstreams/prefill.py): the prompt ends with the partial answer.
        request, prefill = take_prefill(request)
        view = for_text_model(request, self.text_tool_calls)
        try:
            prompt = self.engine.render(chat_messages(view), prefill=prefill)
        except InterlinguaError:
            raise
        except Exception as exc:  # Jinja's raise_exception(): e.g. roles must alternate
            raise InvalidRequestError(
                f"the model's chat template refused these messages: {exc}", param="messages"
            ) from None
        return self.engine.tokenize(prompt)

    def _prepare(self, request: Request) -> _Prepared:
        check_supported(request)
        tokens = self._prompt_tokens(request)
        n_ctx = self.engine.n_ctx
        if len(tokens) >= n_ctx:
            raise InvalidRequestError(
                f"prompt is too long: {len(tokens)} tokens > {n_ctx - 1} maximum",
                code="context_length_exceeded",
                param="messages",
            )
        room = n_ctx - len(tokens)
        max_tokens = room if request.max_tokens is None else min(request.max_tokens, room)
        grammar = grammar_for(request.response_format)
        if grammar is not None and not self.engine.grammar_is_valid(grammar):
            raise InvalidRequestError(
                "response_format: llama.cpp could not compile a grammar for this schema",
                param="response_format",
            )
        text = self._plain_text
        if self.text_tool_calls:
            text = parsed_tool_calls(request, think_tags=self.think_tags) or text
        return _Prepared(
            tokens=tokens,
            max_tokens=max(1, max_tokens),
            sampling=sampling_for(request, grammar),
            text=text,
        )

    async def stream(self, request: Request) -> AsyncGenerator[StreamEvent, None]:
        """Generate with neutral events; refusals (too long, busy, images) raise first."""
        # aclosing: closing this generator must close the inner one now (its finally
        # stops the generation), not when the garbage collector finds it.
        async with contextlib.aclosing(self._generate(request, stream=True)) as events:
            async for event in events:
                yield event

    async def _generate(
        self, request: Request, *, stream: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        request = neutral_request(request)  # the model entry's params (upstreams/shaping.py)
        await self._ensure_loaded()
        prepared = self._prepare(request)
        await self.slot.acquire()
        loop = asyncio.get_running_loop()
        job = Job(
            tokens=prepared.tokens,
            max_tokens=prepared.max_tokens,
            sampling=prepared.sampling,
            stops=request.stop,
            loop=loop,
            done=loop.create_future(),
            logprobs=(request.top_logprobs or 0) if request.logprobs else None,
            stream=stream,
            on_release=self.slot.release,
        )
        try:
            self.engine.submit(job)
        except BaseException:
            self.slot.release()
            raise
        self._running.add(job)  # after submit: aclose() waits only for submitted jobs
        try:
            async for event in _events(job, request.model, prepared):
                yield event
        finally:
            job.cancel.set()
            assert job.done is not None
            # Shielded: a second cancellation must not stop us from noticing the
            # worker's end; the slot is released by the worker either way.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(job.done)
            self._running.discard(job)

    async def complete(self, request: Request) -> Response:
        """The folded stream (the model always generates token by token); the worker
        hands the text over in batches, nobody reads it before the end."""
        # aclosing: a cancelled caller stops the generation now, not when the abandoned
        # generator is garbage-collected.
        async with contextlib.aclosing(self._generate(request, stream=False)) as events:
            return fold([event async for event in events])

    async def complete_text(
        self, body: bytes, stream: bool, headers: Mapping[str, str]
    ) -> RawResponse:
        """A text completion of the raw prompt (:mod:`.text_completion`), written in the
        API's shape: a refusal (too long, busy, a field it cannot honour) raises."""
        request = text_request(orjson.loads(body))
        if not stream:
            return whole_answer(await self.complete(request), request.model)
        events = self.stream(request)
        try:
            first = await anext(events)
        except BaseException:
            await aclose_iterator(events)
            raise
        if isinstance(first, StreamError):
            await aclose_iterator(events)
            raise first.error
        return stream_answer(first, events, request)

    async def count_tokens(self, request: Request) -> int:
        """Prompt tokens by the model's tokenizer and chat template (tools prompt included)."""
        await self._ensure_loaded()
        return len(self._prompt_tokens(request))


async def _events(job: Job, model: str, prepared: _Prepared) -> AsyncIterator[StreamEvent]:
    """The job's items as neutral events, through the text processors when asked."""
    process = _processor(prepared.text)
    n_input = len(prepared.tokens)
    first = await job.queue.get()
    if not isinstance(first, Started):  # refused or stopped before it started
        yield StreamError(_as_error(first))
        return
    cached = first.cached_tokens
    usage = Usage(input_tokens=n_input, cache_read_tokens=cached)
    start = StreamStart(random_id("local-"), model, int(time.time()), usage)
    for event in process((start, BlockStart(0, TextPart("")))):
        yield event
    while True:
        item = await job.queue.get()
        if isinstance(item, str):
            for event in process((TextDelta(0, item),)):
                yield event
        elif isinstance(item, Piece):
            for event in process((TextDelta(0, item.text, item.logprobs),)):
                yield event
        elif isinstance(item, Finish):
            usage = Usage(
                input_tokens=n_input, output_tokens=item.output_tokens, cache_read_tokens=cached
            )
            end = StreamEnd(item.stop_reason, item.stop_sequence, usage)
            for event in process((BlockStop(0), end), final=True):
                yield event
            return
        else:
            yield StreamError(_as_error(item))
            return


def _as_error(item: object) -> InterlinguaError:
    if isinstance(item, InterlinguaError):
        return item
    if isinstance(item, BaseException):
        return _engine_error(item)
    return _engine_error(RuntimeError(f"unexpected item {item!r}"))


def _engine_error(exc: BaseException) -> UpstreamError:
    return UpstreamError(f"local model failed: {type(exc).__name__}: {exc}", status=500)


class _Passthrough:
    """No text processing: events pass as they are."""

    def __call__(self, events: tuple[StreamEvent, ...], final: bool = False) -> Any:
        return events


def _processor(text: TextProcessing) -> Any:
    """A callable ``(events, final=False) -> events`` for this request's text processing."""
    if not text.active:
        return _Passthrough()
    stream = TextProcessingStream(text)

    def process(events: tuple[StreamEvent, ...], final: bool = False) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        for event in events:
            out.extend(stream.feed(event))
        if final:
            out.extend(stream.flush())
        return out

    return process
