"""Per-model text options (``think_tags``, ``text_tool_calls``) around any upstream.

Some models write their reasoning as ``<think>…</think>`` in the text, or call tools by
writing JSON in the text because the server has no native tool support. A model entry's
``options`` turn on rewriting for that model only: :class:`TextOptionsUpstream` wraps the
route's upstream, describes tools in the prompt instead of sending them (for
``text_tool_calls``), and rewrites the answer through :mod:`interlingua.text` -- stream
by stream, or whole for non-streaming requests, with the same result by construction.

A wrapped upstream has no native dialect, so such routes never take the passthrough path
(the bytes must be rewritten).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from ..config import ModelOptions
from ..core import Request, Response, StreamEvent, aclose_iterator
from ..text.events import TextProcessing, TextProcessingStream, process_response
from ..text.tool_prompt import apply_text_tools, parsed_tool_calls
from .base import Upstream


class TextOptionsUpstream(Upstream):
    """``inner`` with the model's text options applied to requests and answers."""

    dialect = None

    def __init__(self, inner: Upstream, options: ModelOptions) -> None:
        super().__init__(inner.name)
        self.inner = inner
        self.options = options
        self.cancel_on_disconnect = inner.cancel_on_disconnect
        # Built once: a request without text tool calls needs nothing request-specific.
        self._plain = TextProcessing(think_tags=options.think_tags)

    def _prepare(self, request: Request) -> tuple[Request, TextProcessing]:
        """The request to send on, and how to process its answer."""
        if not (self.options.text_tool_calls and request.tools):
            return request, self._plain
        processing = parsed_tool_calls(request, think_tags=self.options.think_tags)
        return apply_text_tools(request), processing or self._plain

    async def complete(self, request: Request) -> Response:
        sent, processing = self._prepare(request)
        response = await self.inner.complete(sent)
        return process_response(response, processing)

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        sent, processing = self._prepare(request)
        processor = TextProcessingStream(processing)
        events = self.inner.stream(sent)
        try:
            async for event in events:
                for out in processor.feed(event):
                    yield out
            for out in processor.flush():
                yield out
        finally:
            await aclose_iterator(events)

    async def count_tokens(self, request: Request) -> int | None:
        sent, _ = self._prepare(request)
        return await self.inner.count_tokens(sent)


def with_options(upstream: Upstream, options: ModelOptions) -> Upstream:
    """``upstream`` wrapped when ``options`` turn anything on, else itself."""
    if options.think_tags or options.text_tool_calls:
        return TextOptionsUpstream(upstream, options)
    return upstream
