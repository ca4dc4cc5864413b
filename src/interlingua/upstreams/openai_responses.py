"""Any server speaking the OpenAI Responses API: OpenAI itself, vLLM, and others.

``base_url`` is the API root including its version, as the OpenAI SDK takes it
(``https://api.openai.com/v1``); requests go to ``{base_url}/responses`` with
``Authorization: Bearer <key>`` when a key is configured
(docs/protocols.md, "Responses: endpoint and headers"; the dialect's
:func:`~..dialects.openai_responses.endpoint.endpoint` says how).

A Responses client reaches this upstream on the passthrough path (its body forwarded as
parsed, the events relayed after :class:`~..dialects.relay.ResponsesRelayCheck`). Chat
and Messages clients reach it through translation, where three things differ from the
dialect's plain rendering:

* ``store: false`` is sent unless the client was itself a Responses client (whose
  ``store`` is its own business). The gateway sends the whole conversation every time
  and never asks for a stored response back, so storing it upstream would only keep a
  copy of the client's data for nobody (OpenAI keeps stored responses for 30 days);
  Chat Completions' own ``store`` defaults to false and Messages has none.
* ``max_output_tokens`` below 16 is raised to 16: OpenAI refuses smaller values (400
  ``integer_below_min_value``), which Chat and Messages allow and clients send (Claude
  clients check a model with ``max_tokens: 1``). The answer may then run up to 16 tokens;
  a Responses client's own value is sent as it is.
* The Responses API has no ``stop``
  (docs/protocols.md, "Sampling settings and output limits"): a request with stop sequences
  is answered through :class:`~..text.events.TextProcessingStream`, which cuts the text at
  the first match (across chunk boundaries) and reports ``stop_sequence`` with the matched
  string. A stream is closed as soon as a sequence matched, which cancels the generation
  upstream; the usage of such an answer is then the gateway's estimate (the upstream's count
  arrives only with its final event, which a cancelled stream never sends).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any

from ..core import (
    ArgumentsDelta,
    ReasoningDelta,
    Request,
    Response,
    StopReason,
    StreamEnd,
    StreamEvent,
    TextDelta,
    Usage,
)
from ..core.tokens import estimate_request_tokens, estimate_text
from ..dialects.openai_responses import DIALECT
from ..text.events import TextProcessing, TextProcessingStream, process_response
from .openai_compatible import OpenAICompatibleUpstream

__all__ = ["MIN_OUTPUT_TOKENS", "OpenAIResponsesUpstream", "StopCut"]

#: OpenAI refuses a smaller ``max_output_tokens`` ("integer_below_min_value"), which
#: Chat and Messages clients send (Claude clients probe a model with ``max_tokens: 1``).
MIN_OUTPUT_TOKENS = 16


class OpenAIResponsesUpstream(OpenAICompatibleUpstream):
    """An OpenAI Responses API upstream.

    >>> OpenAIResponsesUpstream("oai", "https://api.openai.com/v1/").url
    'https://api.openai.com/v1/responses'
    """

    codec = DIALECT
    kind = "responses"

    def render(self, request: Request, *, stream: bool) -> dict[str, Any]:
        """The dialect's body; for another dialect's request, with ``store: false`` and
        ``max_output_tokens`` raised to the API's minimum (module docstring)."""
        wire = super().render(request, stream=stream)
        if request.source_dialect != DIALECT.name:
            wire["store"] = False
            limit = wire.get("max_output_tokens")
            if isinstance(limit, int) and 0 < limit < MIN_OUTPUT_TOKENS:
                wire["max_output_tokens"] = MIN_OUTPUT_TOKENS
        return wire

    async def complete(self, request: Request) -> Response:
        """The answer, cut at the first of the request's stop sequences. The whole answer
        was generated (and billed) already, so its usage is the upstream's own count."""
        response = await super().complete(request)
        if not request.stop:
            return response
        return process_response(response, TextProcessing(stops=request.stop))

    async def stream_batches(self, request: Request) -> AsyncGenerator[list[StreamEvent], None]:
        """The upstream's events, cut at the first stop sequence; the upstream stream is
        closed as soon as one matched, so nothing after it is read or generated."""
        batches = super().stream_batches(request)
        if not request.stop:
            async with aclosing(batches):
                async for batch in batches:
                    yield batch
            return
        cut = StopCut(request)
        async with aclosing(batches):
            async for batch in batches:
                out = cut.feed(batch)
                if cut.matched is not None and not cut.ended:
                    # Leaving the loop closes `batches`, which releases the upstream
                    # connection: that is what stops the generation.
                    out.extend(cut.end())
                if out:
                    yield out
                if cut.ended:
                    return
            tail = cut.flush()
            if tail:
                yield tail

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        """:meth:`stream_batches`, one event at a time."""
        async with aclosing(self.stream_batches(request)) as batches:
            async for batch in batches:
                for event in batch:
                    yield event


class StopCut:
    """A stream's events with its text cut at the first stop sequence (the stream-safe
    :class:`~..text.stop.StopMatcher` inside :class:`TextProcessingStream`).

    Once :attr:`matched` is set, :meth:`end` closes the open blocks and ends the stream
    with ``stop_sequence``, with usage estimated from the request and what was emitted
    (``Usage.estimated``), since the upstream's count comes only with the end this
    stream will not read. An end that arrives in the same batch as the match keeps the
    upstream's own count.
    """

    __slots__ = ("_chars", "_request", "_stream", "ended")

    def __init__(self, request: Request) -> None:
        self._request = request
        self._stream = TextProcessingStream(TextProcessing(stops=request.stop))
        self._chars: list[str] = []  # what reached the client, for the estimate
        self.ended = False

    @property
    def matched(self) -> str | None:
        """The stop sequence that matched, if one did."""
        return self._stream.matched_stop

    def feed(self, batch: list[StreamEvent]) -> list[StreamEvent]:
        """The events to emit for one batch of upstream events."""
        out: list[StreamEvent] = []
        for event in batch:
            out.extend(self._stream.feed(event))
        self._note(out)
        return out

    def end(self) -> list[StreamEvent]:
        """Close what is open and end at the matched stop sequence."""
        usage = Usage(
            input_tokens=estimate_request_tokens(self._request),
            output_tokens=estimate_text("".join(self._chars)),
            estimated=True,
        )
        out = self._stream.feed(StreamEnd(StopReason.STOP_SEQUENCE, self.matched, usage))
        self.ended = True
        return out

    def flush(self) -> list[StreamEvent]:
        """The input ended without an end event: release held text, close blocks."""
        out = self._stream.flush()
        self._note(out)
        return out

    def _note(self, events: list[StreamEvent]) -> None:
        for event in events:
            if isinstance(event, TextDelta | ReasoningDelta):
                self._chars.append(event.text)
            elif isinstance(event, ArgumentsDelta):
                self._chars.append(event.json)
            elif isinstance(event, StreamEnd):
                self.ended = True
