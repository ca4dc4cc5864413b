"""Small HTTP helpers for the handlers: bounded body reads, JSON and SSE responses.

These are plain ASGI response objects rather than Starlette's general-purpose ones: the
gateway's responses are always JSON bytes we already encoded or an SSE byte stream we
produce, so the helpers precompute headers and skip work Starlette would do per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import Any, Protocol, TypeVar

import orjson
from starlette.requests import Request as HTTPRequest
from starlette.types import Receive, Scope, Send

from ..core import Usage, aclose_iterator
from ..errors import InterlinguaError, InvalidRequestError, RequestTooLargeError
from ..upstreams.base import ANSWER_ID
from .drain import Drain, shutting_down_error
from .pings import Ticker

T = TypeVar("T")

log = logging.getLogger("interlingua.server")

JSON_CT = (b"content-type", b"application/json")
SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def plain_headers(request: HTTPRequest) -> dict[str, str]:
    """The request headers as a plain dict (lowercase names; a repeated header keeps its
    last value). Built once per request: Starlette's ``Headers.get`` scans the raw list
    on every call, which showed up in profiles of the hot path."""
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in request.scope["headers"]}


async def read_body(request: HTTPRequest, limit: int, headers: Mapping[str, str]) -> bytes:
    """The request body, refusing more than ``limit`` bytes with a 413.

    Content-Length is checked first so an honest oversized upload is refused before it is
    read; a chunked or lying one is cut off as soon as it passes the limit. Reads the ASGI
    messages directly: the common case is one message holding the whole body.
    """
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    receive = request.receive
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise InvalidRequestError("The client disconnected before sending the whole body.")
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        if not message.get("more_body", False):
            if not chunks:
                return chunk
            chunks.append(chunk)
            return b"".join(chunks)
        chunks.append(chunk)


def _too_large(limit: int) -> RequestTooLargeError:
    # In bytes below 1 MiB: a fractional max_body_mb would otherwise print as "0 MB".
    size = f"{limit / (1024 * 1024):g} MB" if limit >= 1024 * 1024 else f"{limit} bytes"
    return RequestTooLargeError(
        f"Request body is larger than the limit of {size}.", code="request_too_large"
    )


def decode_json_object(body: bytes) -> dict[str, Any]:
    """Parse a JSON object body, with a 400 that says what is wrong with it."""
    if not body:
        raise InvalidRequestError("Request body is empty; expected a JSON object.")
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        # orjson rejects invalid UTF-8 with its own message; name it plainly for the caller.
        msg = str(exc)
        if "utf-8" in msg.lower() or "surrogate" in msg.lower():
            raise InvalidRequestError("Request body is not valid UTF-8.") from None
        raise InvalidRequestError(f"Request body is not valid JSON: {msg}") from None
    if not isinstance(value, dict):
        raise InvalidRequestError("Request body must be a JSON object.")
    return value


def header_list(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    """Starlette/ASGI raw header list from a str dict (values latin-1, as HTTP requires)."""
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


class BytesResponse:
    """A complete response whose body is already bytes."""

    __slots__ = ("body", "headers", "status")

    def __init__(
        self, body: bytes, status: int = 200, headers: list[tuple[bytes, bytes]] | None = None
    ) -> None:
        self.body = body
        self.status = status
        self.headers = headers if headers is not None else [JSON_CT]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [*self.headers, (b"content-length", str(len(self.body)).encode())]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": self.body})


class CountedResponse(BytesResponse):
    """A whole answer the gateway rendered itself, whose usage it put into the request's
    record as it rendered it (server/accounting.py): its body is not decoded again for
    the count, as a translated stream's is not (``StreamResponse.counted``)."""

    __slots__ = ()


class StreamOutcome:
    """How a stream ended: decided once, by the response that sent it
    (:class:`StreamResponse`, or the WebSocket that relays one), for everyone who counts
    it: the request's record (and so the usage log, the metrics and the status page) and
    the router (only a break counts against the deployment).

    Plain string constants, not an ``Enum``: reading an Enum member costs Python 3.11
    about five function calls' time, and every stream reads a few."""

    #: its last event (the dialect's end, or an in-band error) was handed to the
    #: transport; a client that hangs up after it changes nothing
    COMPLETE = "complete"
    #: the client hung up before the last event: its own doing, not a failure
    CLIENT_GONE = "client_gone"
    #: the upstream failed after the first byte: a cut, a timeout, bytes that are not the
    #: dialect's, or an in-band error event it sent
    BROKEN = "broken"
    #: the server's shutdown timeout ended it (with the in-band error)
    SHUTDOWN = "shutdown"
    #: its task was cancelled by something other than its client or the shutdown
    CANCELLED = "cancelled"


class FailedInBand(Protocol):
    """What says whether an upstream ended a relayed stream with an error event (the
    passthrough path's :class:`~interlingua.dialects.relay.RelayCheck`)."""

    failed: bool


class StreamResponse:
    """An SSE response relaying ``chunks`` as they come.

    ``on_error`` turns an exception raised mid-stream into in-band bytes (the dialect's
    error event), because after the first byte the status line is gone. ``aclose`` is
    awaited in ``finally`` whatever happens -- normal end, error, or the client hanging up
    (which surfaces here as an OSError from ``send`` or a cancellation) -- so the upstream
    connection is always released.

    ``drain`` (set by the handler) tells a cancellation by the drain's
    ``shutdown_timeout`` from any other: that one ends the stream with the in-band
    error and a proper end of the response (server/drain.py). ``ping``, when set, is
    written after every :data:`~.pings.KEEPALIVE_SECONDS` of silence
    (:class:`~.pings.Ticker`); ``chunks`` must then be whole events.

    When it is over it knows its :class:`StreamOutcome` (``outcome``) before it says so to
    ``finished``, ``on_complete`` and ``on_broken``. A client that hangs up is told apart
    from one that hangs up right after the last byte (the openai SDK closes as soon as it
    has read ``[DONE]``, often before the upstream's own end has reached the gateway) by
    the last chunk sent: ``ends`` (the client dialect's ``RelayCheck.ends``) says whether
    it held the stream's last event. Only a hang-up pays for that look.
    """

    __slots__ = (
        "aclose",
        "broken",
        "check",
        "chunks",
        "completed",
        "continued",
        "counted",
        "drain",
        "ends",
        "finished",
        "headers",
        "on_broken",
        "on_complete",
        "on_error",
        "outcome",
        "ping",
        "sent",
        "status",
        "watch",
    )

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        *,
        status: int = 200,
        headers: list[tuple[bytes, bytes]] | None = None,
        on_error: Callable[[BaseException], bytes] | None = None,
        aclose: Callable[[], Awaitable[None]] | None = None,
        ping: bytes | None = None,
        counted: bool = False,
    ) -> None:
        self.chunks = chunks
        self.ping = ping
        self.status = status
        self.headers = headers if headers is not None else SSE_HEADERS
        self.on_error = on_error
        self.aclose = aclose
        self.drain: Drain | None = None
        #: shown every chunk before it is sent (the request's record: server/accounting.py),
        #: until it returns True (it needs no more); a plain call, not another generator
        #: layer around ``chunks``
        self.watch: Callable[[bytes], bool] | None = None
        #: whether whoever makes ``chunks`` puts their usage and an in-band error into
        #: the request's record itself (a translated stream), so that its bytes need not
        #: be read back for them (only the first byte's time is taken from them)
        self.counted = counted
        #: True once ``chunks`` ran to its end (not cut by an error or a hang-up)
        self.completed = False
        #: the upstream failed after the first byte (set by whoever makes ``chunks`` when
        #: it renders an upstream's in-band error itself, and here when ``chunks`` raises)
        self.broken = False
        #: a relayed stream's check, whose ``failed`` is the upstream's own error event
        self.check: FailedInBand | None = None
        #: whether a chunk ends the stream (its last event is the dialect's end)
        self.ends: Callable[[bytes], bool] | None = None
        #: the last chunk handed to the transport
        self.sent = b""
        #: how it ended, once it has (None until then)
        self.outcome: str | None = None
        #: told once, after ``aclose``, that the response is over and how: a plain call
        #: where wrapping ``aclose`` cost each stream a coroutine
        self.finished: Callable[[str], None] | None = None
        #: told once more when the outcome is BROKEN (the router: the deployment failed)
        self.on_broken: Callable[[], None] | None = None
        #: told once more when the outcome is COMPLETE (the router: the deployment served)
        self.on_complete: Callable[[], None] | None = None
        #: told, by whoever continues this stream on another attempt after it broke, the
        #: usage of the attempts before (the request's record: server/accounting.py, so
        #: that its own row carries only the finishing attempt's tokens)
        self.continued: Callable[[Usage], None] | None = None

    def ended(self) -> str:
        """The outcome of a stream whose last event went out: BROKEN when the upstream
        failed in-band, else COMPLETE."""
        if self.broken or (self.check is not None and self.check.failed):
            return StreamOutcome.BROKEN
        return StreamOutcome.COMPLETE

    def hung_up(self) -> str:
        """The outcome of a stream whose client left: BROKEN when the upstream had failed
        already; as if it ended when the last chunk handed over held the stream's last
        event; else CLIENT_GONE."""
        ends = self.ends
        if self.broken or (ends is not None and self.sent and ends(self.sent)):
            return self.ended()
        log.info("client disconnected mid-stream")
        return StreamOutcome.CLIENT_GONE

    async def release(self, outcome: str | None = None) -> None:
        """Close the chunks and the upstream behind them, then say it is over (with
        ``outcome``, when given: else the one already set, or CANCELLED)."""
        if outcome is not None:
            self.outcome = outcome
        try:
            await aclose_iterator(self.chunks)
            if self.aclose is not None:
                await self.aclose()
        finally:
            outcome = self.outcome
            if outcome is None:
                outcome = self.outcome = StreamOutcome.CANCELLED
            if self.finished is not None:
                self.finished(outcome)
            if outcome == StreamOutcome.COMPLETE:
                if self.on_complete is not None:
                    self.on_complete()
            elif outcome == StreamOutcome.BROKEN and self.on_broken is not None:
                self.on_broken()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # uvicorn (ASGI spec 2.3) makes ``send`` a silent no-op once the client is gone,
        # so a hang-up is only seen on ``receive``: watch it, and cancel the relay then,
        # or the upstream would be read to its end for nobody.
        task = asyncio.current_task()
        state = {"done": False, "gone": False, "started": False}

        async def watch() -> None:
            try:
                while (await receive())["type"] != "http.disconnect":
                    pass
            except Exception:  # stop watching; a send to a closed client still raises
                log.debug("receive failed while watching for a disconnect", exc_info=True)
                return
            if not state["done"] and task is not None:
                state["gone"] = True
                task.cancel()

        watcher = asyncio.create_task(watch())
        outcome: str | None = None  # (an exception that propagates: _relay's, or CANCELLED)
        try:
            outcome = await self._relay(send, state)
        except asyncio.CancelledError:
            shutdown = self.drain is not None and self.drain.expired
            if not (state["gone"] or shutdown) or task is None:
                raise
            task.uncancel()  # our own cancel or the drain's, consumed here; others propagate
            if state["gone"]:
                outcome = self.hung_up()
            else:
                outcome = StreamOutcome.SHUTDOWN
                await self._end_for_shutdown(send, state)
        except OSError:
            outcome = self.hung_up()
        finally:
            state["done"] = True
            watcher.cancel()
            await self.release(outcome)

    async def _end_for_shutdown(self, send: Send, state: dict[str, bool]) -> None:
        state["done"] = True
        log.info("stream ended by the shutdown timeout")
        try:
            if not state["started"]:
                start = {"type": "http.response.start", "status": self.status}
                await send({**start, "headers": self.headers})
            if self.on_error is not None:
                body = self.on_error(shutting_down_error())
                await send({"type": "http.response.body", "body": body, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            log.info("client disconnected mid-stream")

    async def _relay(self, send: Send, state: dict[str, bool]) -> str:
        await send({"type": "http.response.start", "status": self.status, "headers": self.headers})
        state["started"] = True
        ticker = Ticker(send, self.ping) if self.ping is not None else None
        sent = b""
        try:
            watch = self.watch
            async for chunk in self.chunks:
                if chunk:
                    if watch is not None and watch(chunk):
                        watch = None
                    if ticker is not None:
                        ticker.wrote()
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    sent = chunk
            self.completed = True
            outcome = self.ended()
        except OSError:
            raise  # the client hung up (uvicorn's ClientDisconnected is an OSError)
        except Exception as exc:
            self.broken = True
            outcome = self.outcome = StreamOutcome.BROKEN
            if self.on_error is None:
                raise
            body = self.on_error(exc)  # (renders a scrubbed copy: ``exc`` is left as it is)
            if isinstance(exc, InterlinguaError):  # an upstream fault, not a bug of ours
                # What the client was sent, not ``exc.message``: only the rendered copy
                # is scrubbed of upstream keys.
                log.warning("stream ended by an error after the first byte: %r", body)
            else:
                log.exception("stream failed after the first byte")
            await send({"type": "http.response.body", "body": body, "more_body": True})
        finally:
            self.sent = sent  # (a local until now: one store a stream, not one a chunk)
            if ticker is not None:
                await ticker.stop()
        # Done before the last send: the server may report the finished response as a
        # disconnect on ``receive``, which must not cancel the cleanup that follows.
        state["done"] = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return outcome


async def unless_disconnected(work: Coroutine[Any, Any, T], receive: Receive) -> T:
    """``work``'s result, or cancel it as soon as the client hangs up.

    uvicorn does not cancel a handler whose client left; for an upstream that does one
    thing at a time (the local engine) finishing anyway would hold it for nobody. The id
    of the answer ``work`` got (:data:`~..upstreams.base.ANSWER_ID`, left in the task's
    own copy of the context) is brought back, as awaiting it directly would have.
    """
    context = contextvars.copy_context()
    task = asyncio.get_running_loop().create_task(work, context=context)
    watcher = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            answer_id = context.get(ANSWER_ID)
            if answer_id is not ANSWER_ID.get():
                ANSWER_ID.set(answer_id)
            return task.result()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        log.info("client disconnected before the answer; generation cancelled")
        raise InvalidRequestError("The client disconnected before the answer.", status=499)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
