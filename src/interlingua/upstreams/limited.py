"""Upstream ``limits:`` -- rpm, tpm, max_concurrency, a bounded FIFO line -- around any upstream.

A provider's free tier allows a few dozen requests a minute; an agent such as Claude Code
bursts well past that and dies on the 429s. :class:`LimitedUpstream` paces the gateway
itself: every call of the wrapped upstream (:meth:`complete`, :meth:`stream` /
:meth:`stream_batches`, :meth:`passthrough`, :meth:`embed`, :meth:`complete_text`) first takes a ticket from a
:class:`~interlingua.limits.Limiter` built from the upstream's ``limits``:

* **rpm / tpm** -- sliding one-minute windows. A request's tokens are *estimated on
  admission* as its input estimate (:func:`~interlingua.core.tokens.estimate_request_tokens`)
  plus its ``max_tokens`` (the output it may use: what OpenAI and Anthropic reserve
  against their own token limits too), and *settled* with the answer's actual usage --
  ``Response.usage``, the stream's final ``StreamEnd`` usage, or on the passthrough path
  the ``usage`` the relayed answer carries (:mod:`..dialects.relay_usage`); there the estimate is
  the body's bytes / 4 plus its max output field. An answer reporting no usage (or a
  stream cut by an error) keeps its estimate; a request the upstream refuses before
  answering counts for its input estimate only.
* **max_concurrency** -- requests in flight. A stream holds its slot until it ends, fails
  or its client leaves (the gateway closes it); a passthrough stream until the gateway
  closes the relayed answer.
* **the line** -- a request over a limit waits, strictly first come first served, for at
  most ``queue_timeout`` seconds, among at most ``max_queue`` waiting; beyond either it
  gets :class:`~interlingua.limits.QueueRefused`: 429 for OpenAI clients, 529
  ``overloaded_error`` for Anthropic ones, with Retry-After. A waiting request whose
  client hangs up (its task is cancelled) leaves the line.
* **background work yields** -- a call made while
  :data:`~interlingua.limits.BACKGROUND` is set (a batch's line) takes its ticket with
  :meth:`~interlingua.limits.Limiter.acquire_background`: at most ``share``
  (``batches.share``) of max_concurrency, rpm and tpm, never while an interactive request
  waits in the line, and without the line's bounds (it waits its turn however long).

``count_tokens`` is not limited (providers count it apart, and it generates nothing).
:func:`~interlingua.upstreams.build_upstream` wraps an upstream only when its ``limits``
set something: an unlimited upstream pays nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from functools import partial
from typing import Any

from ..config import LimitsConfig
from ..config.batches import DEFAULT_SHARE
from ..core import Request, Response, StreamEnd, StreamError, StreamEvent, aclose_iterator
from ..core.tokens import estimate_request_tokens
from ..dialects.relay_usage import StreamUsage, body_tokens, estimate_body_tokens
from ..errors import InterlinguaError
from ..limits import BACKGROUND, Limiter, LimitState, Ticket
from .base import RawResponse, Upstream

__all__ = ["LimitedUpstream"]


class LimitedUpstream(Upstream):
    """``inner`` behind its ``limits`` (see the module docstring).

    It keeps ``inner``'s dialect (passthrough stays available) and name. Non-streaming
    requests are cancelled when their client hangs up (``cancel_on_disconnect``): a place
    in the line and a slot are scarce, and nobody will read the answer. ``share`` is the
    part of the limits background work may use (``batches.share``).
    """

    cancel_on_disconnect = True

    def __init__(
        self,
        inner: Upstream,
        limits: LimitsConfig,
        *,
        state: LimitState | None = None,
        share: float = DEFAULT_SHARE,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[object]] | None = None,
    ) -> None:
        super().__init__(inner.name)
        self.inner = inner
        self.dialect = inner.dialect
        self.continue_with = inner.continue_with
        self.model_kind = inner.model_kind
        self.limits = limits
        # ``state``: counters shared with other replicas through Redis; else this process's.
        seams: dict[str, Any] = {"state": state}
        if clock is not None:
            seams["clock"] = clock
        if sleep is not None:
            seams["sleep"] = sleep
        self.limiter = Limiter(
            limits.rpm,
            limits.tpm,
            limits.max_concurrency,
            max_queue=limits.max_queue,
            queue_timeout=limits.queue_timeout,
            what=f"upstream '{inner.name}'",
            background_share=share,
            **seams,
        )
        #: tokens are estimated and settled only when a token limit is set
        self.counts_tokens = limits.tpm is not None

    def _ticket(self, tokens: int) -> Awaitable[Ticket]:
        """The limiter's ticket for a request of ``tokens``: as background work when the
        caller marked it so (a batch's line), else as an interactive request."""
        if BACKGROUND.get():
            return self.limiter.acquire_background(tokens)
        return self.limiter.acquire(tokens)

    def adjust_body(self, body: dict[str, Any]) -> None:
        """The inner upstream's own fix-ups (a passthrough body's max_tokens field)."""
        self.inner.adjust_body(body)

    def _estimate(self, request: Request) -> tuple[int, int]:
        """(input estimate, input + max output): what a request is admitted at, and what
        it is settled at if the upstream refuses it. Zeros without ``tpm``."""
        if not self.counts_tokens:
            return 0, 0
        tokens_in = estimate_request_tokens(request)
        return tokens_in, tokens_in + (request.max_tokens or 0)

    def _unanswered(self, ticket: Ticket, tokens_in: int) -> None:
        """The upstream refused before answering: no output was made, so the request
        counts for its input only (a burst of refusals, retried, would otherwise hold
        the token window full of output that never was)."""
        if self.counts_tokens:
            ticket.settle(tokens_in)

    async def complete(self, request: Request) -> Response:
        tokens_in, reserve = self._estimate(request)
        ticket = await self._ticket(reserve)
        try:
            try:
                response = await self.inner.complete(request)
            except InterlinguaError:
                self._unanswered(ticket, tokens_in)
                raise
            if self.counts_tokens:
                _settle(ticket, response.usage.total_tokens)
            return response
        finally:
            ticket.release()

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        """:meth:`stream_batches` one event at a time (one place holds the ticket)."""
        batches = self.stream_batches(request)
        try:
            async for batch in batches:
                for event in batch:
                    yield event
        finally:
            await aclose_iterator(batches)

    async def stream_batches(self, request: Request) -> AsyncIterator[list[StreamEvent]]:
        tokens_in, reserve = self._estimate(request)
        ticket = await self._ticket(reserve)
        batches = self.inner.stream_batches(request)
        started = False
        try:
            async for batch in batches:
                if not started and batch:
                    started = True
                    if isinstance(batch[0], StreamError):
                        self._unanswered(ticket, tokens_in)
                # StreamEnd ends a stream: the last event of its batch.
                if self.counts_tokens and batch and isinstance(batch[-1], StreamEnd):
                    _settle(ticket, batch[-1].usage.total_tokens)
                yield batch
        except InterlinguaError:
            if not started:
                self._unanswered(ticket, tokens_in)
            raise
        finally:
            try:
                await aclose_iterator(batches)
            finally:
                ticket.release()

    async def passthrough(
        self, body: bytes, stream: bool, headers: Mapping[str, str]
    ) -> RawResponse:
        return await self._admitted(body, partial(self.inner.passthrough, body, stream, headers))

    async def complete_text(
        self, body: bytes, stream: bool, headers: Mapping[str, str]
    ) -> RawResponse:
        """A text Completions request, admitted and settled as a passthrough one."""
        return await self._admitted(body, partial(self.inner.complete_text, body, stream, headers))

    async def _admitted(
        self, body: bytes, call: Callable[[], Awaitable[RawResponse]]
    ) -> RawResponse:
        """``call``'s relayed answer, under a ticket for ``body`` (its bytes / 4 as its
        input) settled with the answer's usage: a whole body's at once, a stream's as it
        closes."""
        tokens_in, reserve = self._estimate_body(body)
        ticket = await self._ticket(reserve)
        try:
            answer = await call()
        except BaseException as exc:
            if isinstance(exc, InterlinguaError):
                self._unanswered(ticket, tokens_in)
            ticket.release()
            raise
        if answer.chunks is None:
            # A whole body (an answer or an error): read, so the slot is free now.
            if answer.status >= 300:
                self._unanswered(ticket, tokens_in)
            elif self.counts_tokens:
                _settle(ticket, body_tokens(answer.body))
            ticket.release()
            return answer
        if self.counts_tokens:
            usage = StreamUsage()
            answer.chunks = _watched(answer.chunks, usage)
            answer.closer = _closer(answer.closer, ticket, usage)
        else:
            answer.closer = _closer(answer.closer, ticket, None)
        return answer

    async def embed(self, body: bytes, headers: Mapping[str, str]) -> RawResponse:
        """An Embeddings request, admitted like a passthrough one (its bytes / 4 as its
        tokens; no output) and settled with the ``usage`` of its answer."""
        tokens_in, reserve = self._estimate_body(body)
        ticket = await self.limiter.acquire(reserve)
        try:
            try:
                answer = await self.inner.embed(body, headers)
            except InterlinguaError:
                self._unanswered(ticket, tokens_in)
                raise
            if answer.status >= 300:
                self._unanswered(ticket, tokens_in)
            elif self.counts_tokens:
                _settle(ticket, body_tokens(answer.body))
            return answer
        finally:
            ticket.release()

    def _estimate_body(self, body: bytes) -> tuple[int, int]:
        """:meth:`_estimate` for a passthrough body: its bytes / 4 as the input."""
        return estimate_body_tokens(body) if self.counts_tokens else (0, 0)

    async def count_tokens(self, request: Request) -> int | None:
        return await self.inner.count_tokens(request)

    async def start(self) -> None:
        await self.inner.start()

    async def aclose(self) -> None:
        await self.inner.aclose()


def _settle(ticket: Ticket, tokens: int) -> None:
    """Settle with a count the answer reported (0: it reported none; keep the estimate)."""
    if tokens > 0:
        ticket.settle(tokens)


async def _watched(chunks: AsyncIterator[bytes], usage: StreamUsage) -> AsyncIterator[bytes]:
    """``chunks``, each shown to ``usage`` on its way."""
    try:
        async for chunk in chunks:
            usage.feed(chunk)
            yield chunk
    finally:
        await aclose_iterator(chunks)


def _closer(
    inner: Callable[[], object] | None, ticket: Ticket, usage: StreamUsage | None
) -> Callable[[], Awaitable[None]]:
    """A relayed stream's closer: the upstream's own, then settle and free the slot."""

    async def close() -> None:
        try:
            result = inner() if inner is not None else None
            if isinstance(result, Awaitable):
                await result
        finally:
            if usage is not None:
                _settle(ticket, usage.tokens)
            ticket.release()

    return close
