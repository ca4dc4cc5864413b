"""What every upstream offers the gateway.

An upstream takes a neutral :class:`~interlingua.core.Request` (its ``model`` already
rewritten to the name the upstream expects) and answers with a neutral
:class:`~interlingua.core.Response` or a stream of neutral events. How it gets there --
an HTTP call in some wire dialect, a local model, a script -- is its own business.

Upstreams that speak a client dialect natively also offer :meth:`Upstream.passthrough`:
the gateway's fast path for same-dialect traffic, which forwards the client's body with
only ``model`` replaced and relays the upstream's bytes as they arrive.

Errors: before the first event an upstream *raises* an
:class:`~interlingua.errors.InterlinguaError`; after it, failures arrive as a
``StreamError`` event. Streams close their upstream connection in ``finally``.

The request id a provider gave its answer is relayed to the client (``upstream-request-id``,
:func:`~interlingua.dialects.relay.relayed_headers`): on the passthrough path with the
answer's headers (:class:`RawResponse`), with an error in its ``headers``; a neutral answer
has no headers, so an upstream that has one leaves it where the gateway looks
(:data:`ANSWER_ID`, :func:`note_answer_id`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from ..core import Request, Response, StreamEvent, aclose_iterator
from ..dialects.relay import RelayCheck, upstream_request_id
from ..errors import InvalidRequestError

#: The request id of the latest upstream answer that had one, in a 1-tuple made for that
#: answer (:func:`note_answer_id`). The gateway reads it before and after an attempt on
#: the translated path: a new tuple is this attempt's answer's id; the same one is an
#: earlier answer's (an upstream without ids, a failed attempt, a WebSocket's previous
#: frame), not relayed. Nothing is set for an answer without an id: the common case of
#: servers that send none costs two reads.
ANSWER_ID: ContextVar[tuple[str] | None] = ContextVar("answer_id", default=None)


def note_answer_id(headers: Mapping[str, str]) -> None:
    """Leave the request id of an answer with ``headers`` for the gateway (the
    translated path: a neutral answer has no headers to carry it)."""
    request_id = upstream_request_id(headers)
    if request_id:
        ANSWER_ID.set((request_id,))


@dataclass(slots=True)
class RawResponse:
    """An upstream answer relayed as bytes (passthrough path).

    ``body`` is the whole body for a non-stream answer; for a stream, ``chunks`` yields the
    upstream's bytes as they arrive and :meth:`aclose` (call it in ``finally``) releases
    the connection through ``closer``, a function or coroutine function the upstream
    gives, called once.
    """

    status: int
    headers: dict[str, str]
    body: bytes = b""
    chunks: AsyncIterator[bytes] | None = None
    closer: Callable[[], object] | None = None
    #: the check a stream's chunks passed (:class:`~..dialects.relay.RelayCheck`), when
    #: the upstream relays one: its ``failed`` says the upstream ended the stream with an
    #: in-band error event, which reached the client as it came
    check: RelayCheck | None = None

    async def aclose(self) -> None:
        if self.closer is not None:
            closer, self.closer = self.closer, None
            result = closer()
            if result is not None and isinstance(result, Awaitable):
                await result


class Upstream:
    """Base class. Subclasses set ``dialect`` when they can take the passthrough path."""

    #: the wire dialect this upstream speaks natively ("openai", "anthropic"), or None
    dialect: str | None = None
    #: True when a request holds a scarce resource (the local engine generates one at a
    #: time): the gateway then cancels a non-streaming request whose client hung up,
    #: instead of finishing work nobody will read. Streams are always cancelled.
    cancel_on_disconnect: bool = False
    #: how this upstream carries on an answer another broke off: ``prefill``,
    #: ``instruct`` or ``none`` (:mod:`.prefill`); the registry sets it from the config's
    #: ``continue_with``, and a wrapper around an upstream copies its inner one's
    continue_with: str = "none"
    #: what its models are, as ``GET /v1/models`` lists them when their entry does not
    #: say: ``chat``, or ``embedding`` for an upstream that only embeds; a wrapper around
    #: an upstream copies its inner one's
    model_kind: str = "chat"

    def __init__(self, name: str) -> None:
        self.name = name

    async def complete(self, request: Request) -> Response:
        """Answer a non-streaming request."""
        raise NotImplementedError

    def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        """Answer a streaming request with neutral events (an async generator).

        Raises before yielding anything when the upstream refuses the request, so the
        gateway can still answer with a proper HTTP error status.
        """
        raise NotImplementedError

    async def stream_batches(self, request: Request) -> AsyncIterator[list[StreamEvent]]:
        """:meth:`stream`, grouped: each list is what one upstream read produced.

        The gateway writes one batch to the client in one send, which matters when an
        upstream packs many events into one network read. The default wraps each event
        in its own list; HTTP upstreams override it with their real read boundaries.
        """
        events = self.stream(request)
        try:
            async for event in events:
                yield [event]
        finally:
            await aclose_iterator(events)

    async def passthrough(
        self, body: bytes, stream: bool, headers: Mapping[str, str]
    ) -> RawResponse:
        """Forward a client body of this upstream's own dialect untouched but for ``model``.

        ``body`` already has the upstream model name. Only upstreams with ``dialect`` set
        implement this.
        """
        raise NotImplementedError

    async def embed(self, body: bytes, headers: Mapping[str, str]) -> RawResponse:
        """Answer an Embeddings request (``POST /v1/embeddings``): ``body`` is the
        client's, as the gateway checked and shaped it, with the upstream's model name; the
        answer is the API's JSON (its vectors in the encoding the body asks for, or the
        other one: the gateway converts), or an error status with an OpenAI error body,
        relayed. An upstream whose API has no embeddings refuses with a 400 (the default).
        """
        raise InvalidRequestError(
            f"upstream '{self.name}' has no embeddings endpoint: map this model to an "
            "upstream of kind openai, responses or local (with embedding: true)",
            param="model",
            code="model_not_supported",
        )

    async def complete_text(
        self, body: bytes, stream: bool, headers: Mapping[str, str]
    ) -> RawResponse:
        """Answer a text Completions request (``POST /v1/completions``) as
        :meth:`passthrough` answers a Chat one: ``body`` is the client's, checked and
        shaped, with the upstream's model name; the answer (a whole body or a stream of
        ``text_completion`` chunks) is relayed. An upstream whose API has no text
        completions refuses with a 400 (the default)."""
        raise InvalidRequestError(
            f"upstream '{self.name}' has no text completions endpoint (/v1/completions): "
            "map this model to an upstream of kind openai, responses or local, or set "
            "`completions: as_chat` on its model entry to send the prompt as a chat message",
            param="model",
            code="model_not_supported",
        )

    def adjust_body(self, body: dict[str, Any]) -> None:
        """Fix up, in place, a body of this upstream's own dialect before it is sent:
        one rendered from a neutral request, or a client's parsed passthrough body.

        What the upstream itself requires of every body (an OpenAI Chat upstream moves the
        output limit to its ``max_tokens_field``); the default changes nothing, so a
        passthrough body stays byte-exact. A wrapper around an upstream must forward it.
        """

    async def count_tokens(self, request: Request) -> int | None:
        """Input tokens of ``request`` by the upstream's own tokenizer, or None if unknown."""
        return None

    async def start(self) -> None:
        """Open pooled resources (called from the app lifespan)."""

    async def aclose(self) -> None:
        """Release pooled resources (called from the app lifespan)."""
