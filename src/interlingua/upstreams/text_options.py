"""Per-model output options (``think_tags``, ``text_tool_calls``, Claude Code's) around any upstream.

Some models write their reasoning as ``<think>…</think>`` in the text, or call tools by
writing JSON in the text because the server has no native tool support. A model entry's
``options`` turn on rewriting for that model only: :class:`TextOptionsUpstream` wraps the
route's upstream, describes tools in the prompt instead of sending them (for
``text_tool_calls``), and rewrites the answer through :mod:`interlingua.text` -- stream
by stream, or whole for non-streaming requests, with the same result by construction.

The Claude Code options (``force_background_tasks_off``, ``fill_empty_answer``,
``estimate_input_tokens``: :mod:`.claude_code`) are applied here too, after the text
processing (a tool call parsed from text is a call like any other), reading the tools as
the client offered them rather than the request whose tools were moved into the prompt.

A wrapped upstream has no native dialect, so such routes never take the passthrough path
(the bytes must be rewritten).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from ..config import ModelOptions
from ..core import Request, Response, StreamEvent, aclose_iterator
from ..text.events import TextProcessing, TextProcessingStream, process_response
from ..text.tool_prompt import apply_text_tools, parsed_tool_calls
from .base import RawResponse, Upstream
from .claude_code import ClaudeCodeQuirks, ClaudeCodeStream, claude_code_response


class TextOptionsUpstream(Upstream):
    """``inner`` with the model's text options applied to requests and answers."""

    dialect = None

    def __init__(self, inner: Upstream, options: ModelOptions) -> None:
        super().__init__(inner.name)
        self.inner = inner
        self.options = options
        self.cancel_on_disconnect = inner.cancel_on_disconnect
        self.continue_with = inner.continue_with
        self.model_kind = inner.model_kind
        # Built once: a request without text tool calls needs nothing request-specific.
        self._plain = TextProcessing(think_tags=options.think_tags)
        self._quirks = _claude_code(options)

    def _prepare(self, request: Request) -> tuple[Request, TextProcessing]:
        """The request to send on, and how to process its answer."""
        if not (self.options.text_tool_calls and request.tools):
            return request, self._plain
        processing = parsed_tool_calls(request, think_tags=self.options.think_tags)
        return apply_text_tools(request), processing or self._plain

    def _claude_code(self, request: Request, sent: Request) -> ClaudeCodeQuirks | None:
        """The Claude Code quirks for ``request``: its agent tools as the client offered
        them (``sent`` may carry them in the prompt instead), the estimate of ``sent``."""
        return ClaudeCodeQuirks.of(self.options, request, sent) if self._quirks else None

    async def complete(self, request: Request) -> Response:
        sent, processing = self._prepare(request)
        response = await self.inner.complete(sent)
        if processing.active:
            response = process_response(response, processing)
        quirks = self._claude_code(request, sent)
        return response if quirks is None else claude_code_response(response, quirks)

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        sent, processing = self._prepare(request)
        processor = TextProcessingStream(processing)
        quirks = self._claude_code(request, sent)
        fixer = None if quirks is None else ClaudeCodeStream(quirks)
        events = self.inner.stream(sent)
        try:
            async for event in events:
                for out in processor.feed(event):
                    if fixer is None:
                        yield out
                    else:
                        for fixed in fixer.feed(out):
                            yield fixed
            for out in processor.flush():
                for fixed in [out] if fixer is None else fixer.feed(out):
                    yield fixed
        finally:
            await aclose_iterator(events)

    def adjust_body(self, body: dict[str, Any]) -> None:
        """The inner upstream's own fix-ups (the base contract: wrappers forward it)."""
        self.inner.adjust_body(body)

    async def embed(self, body: bytes, headers: Mapping[str, str]) -> RawResponse:
        """The inner upstream's embeddings: the text options concern generated text."""
        return await self.inner.embed(body, headers)

    async def complete_text(
        self, body: bytes, stream: bool, headers: Mapping[str, str]
    ) -> RawResponse:
        """The inner upstream's text completions, relayed as they came (as a passthrough
        is: the text options rewrite only what the gateway translates)."""
        return await self.inner.complete_text(body, stream, headers)

    async def count_tokens(self, request: Request) -> int | None:
        sent, _ = self._prepare(request)
        return await self.inner.count_tokens(sent)


def _claude_code(options: ModelOptions) -> bool:
    return (
        options.force_background_tasks_off
        or options.fill_empty_answer
        or options.estimate_input_tokens
    )


def with_options(upstream: Upstream, options: ModelOptions) -> Upstream:
    """``upstream`` wrapped when ``options`` turn anything on, else itself."""
    if options.think_tags or options.text_tool_calls or _claude_code(options):
        return TextOptionsUpstream(upstream, options)
    return upstream
