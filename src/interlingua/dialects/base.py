"""The contract every dialect package fulfils.

A dialect package (``interlingua.dialects.openai_chat``, ``.anthropic``) is a pure codec:
no I/O. It exposes a module-level object named ``DIALECT`` that satisfies
:class:`Dialect`. The same codec serves both sides of the gateway:

* toward a **client** that speaks the dialect: ``parse_request`` the incoming body,
  ``render_response`` / ``StreamEncoder`` the answer, ``render_error`` failures;
* toward an **upstream** that speaks it: ``endpoint`` the URL and headers,
  ``render_request`` the outgoing body, ``parse_response`` / ``StreamDecoder`` its answer,
  ``parse_error`` its failures.

Round trips through the same dialect keep everything (``Request.extra`` and ``meta``
slots); translation across dialects follows the drop policy in docs/mapping.md.
"""

from __future__ import annotations

from typing import Any, Protocol

from ..core import Request, Response, StreamEvent
from ..errors import InterlinguaError
from ..sse import SSEEvent
from .relay import RelayCheck


class StreamDecoder(Protocol):
    """Upstream SSE events of this dialect -> neutral stream events.

    Construct with the neutral request that was sent (so e.g. a plain ``stop`` finish can
    be reported as the stop sequence when it can be told). ``feed`` takes one SSE event and
    returns zero or more neutral events; ``flush`` is called at end of input and returns
    whatever is still owed (for OpenAI: the held-back ``StreamEnd``). An in-band upstream
    error becomes a :class:`~interlingua.core.StreamError`. The decoder never raises on
    unknown event types; it ignores them.
    """

    def feed(self, event: SSEEvent) -> list[StreamEvent]: ...

    def flush(self) -> list[StreamEvent]: ...


class StreamEncoder(Protocol):
    """Neutral stream events -> bytes of this dialect's SSE stream, chunk by chunk.

    Construct with the neutral request the client sent (model name to echo, whether the
    client asked for a usage chunk, ...). ``encode`` returns the bytes owed for one event
    (possibly ``b""`` when it must buffer); ``StreamEnd`` produces the dialect's closing
    events (``[DONE]`` for OpenAI); ``StreamError`` produces the in-band error event.
    ``ping`` is bytes for a keep-alive suitable for this dialect.
    """

    def encode(self, event: StreamEvent) -> bytes: ...

    def ping(self) -> bytes: ...


class Dialect(Protocol):
    """A wire dialect's codec. See the module docstring for who calls what."""

    name: str

    def parse_request(self, body: Any) -> Request:
        """Validate and convert a decoded JSON body. Raise InvalidRequestError naming the
        bad field in ``param`` (``messages[1].content[0].type``)."""
        ...

    def validate_request(self, body: dict[str, Any]) -> None:
        """Raise what ``parse_request`` would raise for ``body``, without converting it.

        For the passthrough path, which forwards the body as it is: the same 400 (message
        and ``param``) as the translated path, at a fraction of the cost. Accepts what
        only another dialect could not carry; that is checked when rendering."""
        ...

    def render_request(self, request: Request) -> dict[str, Any]:
        """The JSON body to send to an upstream of this dialect. Raise InvalidRequestError
        for content this dialect cannot carry (after the drop policy)."""
        ...

    def parse_response(self, body: Any) -> Response: ...

    def render_response(self, response: Response, request: Request) -> dict[str, Any]: ...

    def stream_decoder(self, request: Request) -> StreamDecoder: ...

    def stream_encoder(self, request: Request) -> StreamEncoder: ...

    def relay_check(self) -> RelayCheck:
        """A check on an upstream stream of this dialect relayed untranslated (passthrough):
        whole events only, each JSON, and a stream cut before its end caught."""
        ...

    def parse_error(self, status: int, body: bytes, headers: dict[str, str]) -> InterlinguaError:
        """An upstream's non-2xx answer -> the error to raise (status kept; 529/503 ->
        OverloadedError; retry-after headers parsed into ``retry_after``)."""
        ...

    def render_error(self, error: InterlinguaError, request_id: str) -> tuple[int, dict[str, Any]]:
        """(HTTP status, JSON body) to send a client of this dialect."""
        ...

    def client_status(self, status: int) -> int:
        """The HTTP status to show a client of this dialect for an error of ``status``
        (the one ``render_error`` uses; also for relayed upstream error bodies)."""
        ...

    def endpoint(self, base_url: str, api_key: str | None) -> tuple[str, dict[str, str]]:
        """The generation URL under ``base_url`` and the request headers: content type,
        authentication when ``api_key`` is set, and whatever else the API requires."""
        ...

    def render_model_list(self, names: list[str], created: int) -> dict[str, Any]:
        """The body of ``GET /v1/models`` in this dialect's shape."""
        ...
