"""A stream that breaks after its first byte, carried on by the next candidate.

For a model with ``on_stream_break: continue``, the gateway hands the streams of its
requests to a :class:`Continuer` (server/gateway.py), on either path:

* translated (:meth:`Continuer.translated`): the upstream's neutral events go through a
  :class:`~.splice.Splice` to the client's encoder;
* passthrough (:meth:`Continuer.relayed`): the upstream's bytes are relayed as they come
  (nothing is parsed while the stream is healthy); the relay check holds back an
  in-band error event instead of relaying it. At a break the bytes the client got are
  decoded once, and a fresh encoder of the client's dialect is brought to the state of
  having written them (same ids, same indices, the next Responses ``sequence_number``),
  so the continuation reads as the rest of the same stream.

At a break (a cut, a stall past ``timeout.idle``, a malformed event, an in-band error, a
``total`` timeout) the candidates are asked in turn: the broken deployment again (up to
its ``retries.max``), then the deployments and fallbacks after it in the request's plan,
each with the continuation request its upstream takes (:mod:`.requests`); a candidate
whose upstream does not continue (``continue_with: none``) or whose model refused a
prefill before (remembered for the process's life) is skipped. The first whose stream
starts carries on; if it breaks too, the next one carries on after it. No more than
``retries.max + len(plan)`` are asked, none after the broken upstream's ``timeout.total``
since the request began; a client that hangs up cancels the whole thing. When none can,
the client gets the in-band error of the **original** fault, never a candidate's refusal.

Accounting: the broken deployment is told it broke (cooldown), the finishing one that it
completed; the broken attempt gets a usage row of its own (marked ``continued``, with
its announced or estimated tokens), the request's row names the finishing deployment and
carries its usage (:meth:`~..accounting.Meter.continued`), and the client's usage is the
sum of the attempts'.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

import msgspec

from ...core import Request, StreamError, StreamEvent, Usage, aclose_iterator
from ...core.tokens import estimate_request_tokens
from ...dialects import Dialect, EventDecoder, StreamEncoder
from ...errors import InterlinguaError, UpstreamError, prefill_refusal
from ...retry import should_retry
from ...routing import Deployment, Route, Router
from ...upstreams.shaping import for_upstream
from ...usage.record import CONTINUED, Record
from ..asgi_io import StreamResponse
from .requests import continuation_request
from .splice import Splice

__all__ = ["Continuer", "Encode"]

log = logging.getLogger("interlingua.routing")

#: the translated path's encoding of a batch of events (server/gateway.py): its bytes,
#: and whether it ended with an error
Encode = Callable[[list[StreamEvent]], tuple[bytes, bool]]
_SEQUENCE = re.compile(rb'"sequence_number":\s*(\d+)')


class Gateway(Protocol):
    """What a continuation needs of the gateway (server/gateway.py)."""

    #: the router whose plan the request follows, told how each attempt went
    router: Router
    #: the deployments (keys) that refused an assistant prefill
    prefill_refused: set[str]
    #: hands a broken attempt's usage row to the accounting (None: no accounting)
    note_row: Callable[[Record], None] | None


class Continuer:
    """One request's way on after a break (module docstring). ``route`` is set by each
    attempt (the last one set answered); ``response`` once the stream is answered."""

    __slots__ = (
        "_body",
        "_broken",
        "_dialect",
        "_gateway",
        "_name",
        "_parsed",
        "_plan",
        "_record",
        "_started",
        "response",
        "route",
    )

    def __init__(
        self,
        gateway: Gateway,
        dialect: Dialect,
        name: str,
        plan: Sequence[Deployment],
        body: dict[str, Any],
        parsed: list[Request],
        record: Record | None,
    ) -> None:
        self._gateway = gateway
        self._dialect = dialect
        self._name = name
        self._plan = plan
        self._body = body
        self._parsed = parsed
        self._record = record
        self._started = time.monotonic()
        #: the broken attempts not yet carried on: their route and usage
        self._broken: list[tuple[Route, Usage]] = []
        self.route: Route | None = None
        self.response: StreamResponse | None = None

    # -- the two paths ------------------------------------------------------------------

    async def translated(
        self,
        first: list[StreamEvent],
        batches: AsyncIterator[list[StreamEvent]],
        encode: Encode,
        finish: Callable[[], Awaitable[None]],
    ) -> AsyncIterator[bytes]:
        """A translated stream's bytes: ``first`` and ``batches`` through a splice into
        ``encode``, continued at a break; ``finish`` is awaited at the end."""
        splice = Splice()
        fault: InterlinguaError | None = None
        try:
            batch = first
            while True:
                events, fault = splice.take(batch)
                if events:
                    yield encode(events)[0]
                if fault is not None:
                    break
                try:
                    batch = await anext(batches)
                except StopAsyncIteration:
                    break
                except InterlinguaError as exc:
                    fault = exc
                    break
        finally:
            await aclose_iterator(batches)
        if fault is not None:
            async for data in self._rescue(fault, splice, encode, None):
                yield data
        await finish()

    async def relayed(
        self,
        chunks: AsyncIterator[bytes],
        check: Any,
        make_encode: Callable[[StreamEncoder], Encode],
    ) -> AsyncIterator[bytes]:
        """A passthrough stream's bytes, as they come; at a break (``chunks`` raises
        after the first byte, or ``check`` held an in-band error event back), the
        continuation, written by an encoder of the client's dialect made by
        ``make_encode`` and brought to where the relayed bytes left the client."""
        sent: list[bytes] = []
        fault: InterlinguaError | None = None
        try:
            async for chunk in chunks:
                sent.append(chunk)
                yield chunk
        except InterlinguaError as exc:
            if not sent:
                raise  # before the first byte: the attempt loop's to judge
            fault = exc
        finally:
            await aclose_iterator(chunks)
        held: bytes | None = getattr(check, "held_error", None)
        if fault is None:
            if not held:
                return
            fault = self._held_fault(held)
        request = self.request()
        encoder = self._dialect.stream_encoder(request)
        splice = Splice()
        seen, _ = splice.take(EventDecoder(self._dialect, request).decode(b"".join(sent)))
        for event in seen:
            encoder.encode(event)  # (written already, by the upstream: only the state counts)
        numbering = getattr(encoder, "continue_numbering", None)
        if numbering is not None:
            numbering(_next_sequence(sent))
        encode = make_encode(encoder)
        if splice.answer().open_tool_call():
            # Relayed as it came, half a tool call already reached the client (an upstream
            # that called a tool the request did not offer: a request with tools takes the
            # translated path): nothing can be spliced onto it honestly.
            log.info("stream broke inside a relayed tool call: not continued")
            if held is None and self.response is not None:
                self.response.broken = True  # (an upstream's own event marks it itself)
            yield held if held is not None else encode([StreamError(fault)])[0]
            return
        async for data in self._rescue(fault, splice, encode, held):
            yield data

    def request(self) -> Request:
        """The client's request, neutral (parsed once, when first needed)."""
        if not self._parsed:
            self._parsed.append(self._dialect.parse_request(self._body))
        return self._parsed[0]

    def _held_fault(self, held: bytes) -> InterlinguaError:
        """The error an in-band error event the relay held back says."""
        decoder = EventDecoder(self._dialect, Request(model="", messages=()))
        for event in decoder.decode(held + b"\n\n"):
            if isinstance(event, StreamError):
                return event.error
        return UpstreamError("upstream stream failed", status=502)

    # -- the break ----------------------------------------------------------------------

    async def _rescue(
        self, fault: InterlinguaError, splice: Splice, encode: Encode, held: bytes | None
    ) -> AsyncIterator[bytes]:
        """After ``fault`` broke the stream: the candidates' continuation, or the
        original fault in-band (``held``: as the upstream sent it, when nothing was
        written after it)."""
        request = self.request()
        request_tokens = estimate_request_tokens(request)
        broken, candidates = self._candidates()
        closing = self._broke(broken, fault, splice, request_tokens)
        if closing:
            yield encode(closing)[0]
        wrote = bool(closing)
        response = self.response
        if response is not None:
            response.on_broken = None  # (told above; the finishing deployment is told later)
        deadline = self._deadline(broken)
        for deployment in candidates:
            if deadline is not None and time.monotonic() >= deadline:
                break
            upstream = deployment.route.upstream
            mode = getattr(upstream, "continue_with", "none")
            if mode == "none" or (mode == "prefill" and deployment.key in self._refused):
                continue
            ask, trimmed = continuation_request(request, splice.answer(), mode, upstream.dialect)
            route = deployment.route
            ask = for_upstream(ask, route.upstream_model, route.entry)
            opened = await self._open(deployment, ask)
            if opened is None:
                continue
            first, batches = opened
            self._carried_on(deployment)
            splice.resume(trimmed)
            again: InterlinguaError | None = None
            try:
                batch = first
                while True:
                    events, again = splice.take(batch)
                    if events:
                        wrote = True
                        yield encode(events)[0]
                    if again is not None:
                        break
                    try:
                        batch = await anext(batches)
                    except StopAsyncIteration:
                        break
                    except InterlinguaError as exc:
                        again = exc
                        break
            finally:
                await aclose_iterator(batches)
                self._gateway.router.attempt_ended(deployment)
            if again is None:
                self._finished(deployment, fault)
                return
            closing = self._broke(deployment, again, splice, request_tokens)
            if closing:
                wrote = True
                yield encode(closing)[0]
        log.info("stream broke (%s); no candidate continued it", fault.kind.value)
        if held is not None and not wrote:
            yield held
            return
        data, _ = encode([StreamError(fault)])
        if response is not None:
            response.broken = True
            response.check = None
        yield data

    @property
    def _refused(self) -> set[str]:
        return self._gateway.prefill_refused

    def _candidates(self) -> tuple[Deployment, list[Deployment]]:
        """The deployment whose stream broke, and who may continue it, in order."""
        route = self.route
        plan = list(self._plan)
        for index, deployment in enumerate(plan):
            if deployment.route is route:
                retries = [deployment] * deployment.retries.max
                return deployment, retries + plan[index + 1 :]
        for deployment in self._gateway.router.context_plan(self._name):
            if deployment.route is route:  # (answered from the context fallbacks)
                return deployment, [deployment] * deployment.retries.max
        raise AssertionError("a stream answered by no deployment of its plan")

    def _deadline(self, broken: Deployment) -> float | None:
        timeout = getattr(broken.route.upstream, "timeout", None)
        total = getattr(timeout, "total", None)
        return self._started + total if isinstance(total, int | float) else None

    async def _open(
        self, deployment: Deployment, request: Request
    ) -> tuple[list[StreamEvent], AsyncIterator[list[StreamEvent]]] | None:
        """``deployment``'s stream of ``request`` once its first events came, or None
        when it failed before (judged for its cooldown, a prefill refusal remembered)."""
        router = self._gateway.router
        route = deployment.route
        router.attempt_started(deployment)
        started = time.perf_counter()
        batches = route.upstream.stream_batches(request)
        try:
            first = await anext(batches)
            if first and type(first[0]) is StreamError:
                raise first[0].error
        except (InterlinguaError, StopAsyncIteration) as exc:
            await aclose_iterator(batches)
            router.attempt_ended(deployment)
            error = exc if isinstance(exc, InterlinguaError) else _SAID_NOTHING
            if router.observe is not None:
                router.observe(route.upstream.name, error.kind.value)
            if prefill_refusal(error):
                self._refused.add(deployment.key)
                log.info("%s refuses an assistant prefill: not asked again", deployment.key)
            elif should_retry(error):
                router.attempt_failed(deployment, error.retry_after)
            return None
        router.attempt_succeeded(deployment, time.perf_counter() - started, whole=False)
        if router.observe is not None:
            router.observe(route.upstream.name, "ok")
        return first, batches

    def _broke(
        self, deployment: Deployment, fault: InterlinguaError, splice: Splice, tokens: int
    ) -> list[StreamEvent]:
        """``deployment``'s stream broke with ``fault``: its cooldown and metrics told,
        its usage kept for a row of its own once another attempt carries on
        (:meth:`_carried_on`); the events that close what it left open."""
        deployment.broke()
        router = self._gateway.router
        if router.observe is not None:
            router.observe(deployment.route.upstream.name, fault.kind.value)
        closing, usage = splice.broke(tokens)
        self._broken.append((deployment.route, usage))
        log.info("stream of %s broke after its first byte (%s)", deployment.key, fault.kind.value)
        return closing

    def _carried_on(self, deployment: Deployment) -> None:
        """``deployment``'s stream started after a break: each broken attempt before it
        gets its usage row (marked continued), and the request's row is this one's."""
        record = self._record
        broken, self._broken = self._broken, []
        if record is None:
            return
        note_row = self._gateway.note_row
        response = self.response
        for route, usage in broken:
            if note_row is not None:
                note_row(_attempt_row(record, route, usage))
            if response is not None and response.continued is not None:
                response.continued(usage)
        record.upstream = deployment.route.upstream.name
        record.upstream_model = deployment.route.upstream_model

    def _finished(self, deployment: Deployment, fault: InterlinguaError) -> None:
        """``deployment`` finished the answer."""
        router = self._gateway.router
        if router.continued is not None:
            router.continued(self._name, fault.kind.value)
        response = self.response
        if response is not None:
            response.on_complete = deployment.completed
            response.broken = False
            response.check = None
        log.info("stream continued by %s", deployment.key)


_SAID_NOTHING = UpstreamError("upstream closed the stream without sending anything")


def _attempt_row(record: Record, route: Route, usage: Usage) -> Record:
    """The usage row of a broken attempt of ``record``'s request."""
    return msgspec.structs.replace(
        record,
        upstream=route.upstream.name,
        upstream_model=route.upstream_model,
        error=CONTINUED,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cached_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        latency=time.perf_counter() - record.latency,  # (the start, until it is finished)
    )


def _next_sequence(sent: list[bytes]) -> int:
    """The ``sequence_number`` after the last one in ``sent`` (0 when there is none)."""
    for chunk in reversed(sent):
        numbers = _SEQUENCE.findall(chunk)
        if numbers:
            return int(numbers[-1]) + 1
    return 0
