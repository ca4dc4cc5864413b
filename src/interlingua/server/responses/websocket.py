"""The Responses API over a WebSocket: ``GET /v1/responses`` with ``Upgrade: websocket``.

Codex CLI (and the openai SDK's ``client.responses.connect()``) open one socket to
``/v1/responses`` and drive every turn through it; without it Codex retries for seconds
and then falls back to HTTP. The protocol (OpenAI's WebSocket mode, Codex's
``responses_websockets=2026-02-06``):

* the client sends ``{"type": "response.create", ...}``, the body of ``POST
  /v1/responses`` (``stream`` is implied; ``background`` is refused); the server sends
  back, one text frame each, the events the SSE stream's ``data:`` lines carry, from
  ``response.created`` to ``response.completed`` / ``incomplete`` / ``failed``;
* ``"generate": false`` is a warm-up: the request is checked and remembered, and answered
  with a response that has no output (``created``, ``in_progress``, ``completed``) --
  Codex sends one and waits for its ``response.completed`` before the first turn;
* a later turn continues a response of the same connection by ``previous_response_id``
  with only its new input, **even with** ``store: false``: the connection remembers its
  responses (server/responses/socket_chain.py) and expands such a turn into a whole request
  before the gateway sees it. An id it does not hold goes to the ordinary path as is;
* a request that fails before its first event (the status an HTTP client would get:
  400, 401, 404, 429, 5xx) is one ``{"type": "error", "status": 429, "error": {...},
  "headers": {"retry-after": "2"}}`` frame -- Codex reads ``status`` and ``headers`` as
  it would an HTTP error; a frame that is not JSON, not an object, or of an unknown
  ``type`` gets the same with status 400. The connection stays open for the next one;
* one response at a time: frames that arrive meanwhile wait their turn (first in, first
  out, as the API does for one stream); Codex's ``response.processed`` acknowledgement
  is accepted silently, ``response.steer`` answered ``response.steer.failed``
  (``steering_not_supported``), the older ``response.append`` continues the last
  response with the last request's settings.

Each turn takes the HTTP handler's own path (``Handlers.responses_from_body`` in
server/app.py, hence ``Gateway.generate``) with ``stream: true``, and the SSE bytes of its
:class:`~.http.StreamResponse` are cut into events here: no second translation path.
Auth is the HTTP one, on the upgrade request's headers, refused (401) before the
handshake completes. A client that hangs up mid-response cancels its upstream. On
shutdown a socket finishes the response in flight, then closes with 1001 (going away);
past ``shutdown_timeout`` the response ends with the in-band error. The transport side
(the connection cap, the drain, pings) is server/process/socket_guard.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Mapping
from typing import Any, Protocol

import orjson
from starlette.types import Receive, Scope, Send

from ...core import Request, StopReason, StreamEnd, StreamStart, Usage
from ...dialects import get_dialect, random_id
from ...dialects.relay import RELAYED_HEADERS
from ...errors import InterlinguaError, InvalidRequestError, request_id_note
from ...sse import SSEDecoder
from ..asgi_io import BytesResponse, StreamOutcome, StreamResponse
from ..drain import Drain, shutting_down_error
from ..gateway import Gateway, internal_error
from ..middleware import REQUEST_ID, access_log, new_request_id
from .socket_chain import ChainMemory, input_items

__all__ = ["SOCKET_STATE", "ResponsesSocket", "SocketHost"]

log = logging.getLogger("interlingua.server")
RESPONSES = get_dialect("responses")

#: ``scope["state"]`` key under which the guarded WebSocket protocol (server/process/socket_guard.py)
#: puts itself, so the handler can say when it is busy
SOCKET_STATE = "socket"
#: frames read ahead while a response runs; past it the socket stops reading (backpressure)
MAX_QUEUED = 16
GOING_AWAY = 1001  # RFC 6455 7.4.1: the server is going down
_TERMINAL = ("response.completed", "response.incomplete", "response.failed")
_KEPT = ("response.completed", "response.incomplete")  # what a continuation may follow
# An error answer's relayed headers (the one list, dialects/relay.py); Codex reads them
# from the error frame's ``headers``.
_ERROR_HEADERS = tuple(name.encode() for name in RELAYED_HEADERS)


class SocketHost(Protocol):
    """What the handler needs of the HTTP handlers (server/app.py:Handlers)."""

    drain: Drain

    @property
    def gateway(self) -> Gateway: ...

    def _check_auth(self, headers: Mapping[str, str]) -> object: ...

    def responses_from_body(
        self, body: dict[str, Any], headers: Mapping[str, str], receive: Receive | None = None
    ) -> Awaitable[BytesResponse | StreamResponse]: ...


class _ClientGone(Exception):
    """The socket can take no more frames (the client left, or it is closing)."""


class ResponsesSocket:
    """The ASGI endpoint of the WebSocket route (see the module docstring)."""

    def __init__(self, host: SocketHost) -> None:
        self.host = host

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        conn_id = new_request_id()
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        if (await receive())["type"] != "websocket.connect":
            return
        try:
            if self.host.drain.draining:
                raise shutting_down_error()
            self.host._check_auth(headers)
        except InterlinguaError as err:
            await self._deny(scope, send, err, conn_id)
            return
        await send({"type": "websocket.accept", "headers": _id_headers(conn_id)})
        control = scope.get("state", {}).get(SOCKET_STATE)
        await _Session(self.host, headers, receive, send, conn_id, control).run()

    async def _deny(self, scope: Scope, send: Send, err: InterlinguaError, conn_id: str) -> None:
        """Refuse the handshake with the HTTP status and body a POST would have got."""
        response = self.host.gateway.error_response(RESPONSES, err, conn_id)
        log.info("WebSocket refused (%d): %s", response.status, err.message)
        if "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1008})  # the server makes it a 403
            return
        start = {"type": "websocket.http.response.start", "status": response.status}
        headers = [*response.headers, *_id_headers(conn_id)]  # the id its message names
        await send({**start, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": response.body})


class _Session:
    """One accepted socket: its reader, its queue of frames, its chain memory."""

    def __init__(
        self,
        host: SocketHost,
        headers: dict[str, str],
        receive: Receive,
        send: Send,
        conn_id: str,
        control: Any,
    ) -> None:
        self.host = host
        self.gateway = host.gateway
        self.headers = headers
        self.receive = receive
        self._send = send
        self.conn_id = conn_id
        self.control = control  # server/process/socket_guard.py's protocol, when serving under it
        self.frames: asyncio.Queue[str | bytes | None] = asyncio.Queue(MAX_QUEUED)
        self.memory = ChainMemory()
        self.gone = False  # the client left (or the server closed the socket)
        self.busy = False
        self.started = False  # the response in flight has sent its first event
        self.last_create: dict[str, Any] | None = None  # for response.append
        self.last_id = ""
        #: the id of the turn being answered (each is a request of its own), which its
        #: errors name; the connection's until the first turn
        self.turn_id = conn_id
        self.task = asyncio.current_task()

    # -- the loop -----------------------------------------------------------------------

    async def run(self) -> None:
        reader = asyncio.create_task(self._read())
        try:
            await self._serve()
        except asyncio.CancelledError:
            task = self.task
            if task is None or not (self.gone or self.host.drain.expired):
                raise
            task.uncancel()  # the reader's cancel (client gone) or the drain's: consumed
            if self.gone:
                log.info("WebSocket client disconnected mid-response; its upstream was closed")
            else:
                await self._end_for_shutdown()
        finally:
            self._set_busy(False)
            reader.cancel()

    async def _serve(self) -> None:
        drain = self.host.drain
        while True:
            frame = await self.frames.get()
            if frame is None or self.gone:
                return
            self._set_busy(True)  # (left set by a cancellation: run() reads it)
            try:
                await self._handle(frame)
            except _ClientGone:
                return
            self._set_busy(False)
            if drain.draining:
                await self._close(GOING_AWAY, "server shutting down")
                return

    async def _read(self) -> None:
        """Read frames into the queue, and notice a hang-up at once, even mid-response:
        it cancels the response (and with it the upstream)."""
        try:
            while True:
                message = await self.receive()
                if message["type"] == "websocket.receive":
                    text = message.get("text")
                    await self.frames.put(text if text is not None else message.get("bytes", b""))
                elif message["type"] == "websocket.disconnect":
                    break
        finally:
            self.gone = True
            if self.busy and self.task is not None:
                self.task.cancel()
            elif self.frames.empty():
                self.frames.put_nowait(None)

    def _set_busy(self, busy: bool) -> None:
        self.busy = busy
        if busy:
            self.started = False
        if self.control is not None:
            self.control.set_busy(busy)

    async def _send_text(self, text: str) -> None:
        if self.gone or (self.control is not None and self.control.close_sent):
            raise _ClientGone
        try:
            await self._send({"type": "websocket.send", "text": text})
        except OSError:  # uvicorn's ClientDisconnected
            raise _ClientGone from None

    async def _close(self, code: int, reason: str) -> None:
        if self.gone or (self.control is not None and self.control.close_sent):
            return
        with contextlib.suppress(OSError):  # (gone already: nothing left to close)
            await self._send({"type": "websocket.close", "code": code, "reason": reason})

    async def _end_for_shutdown(self) -> None:
        """``shutdown_timeout`` passed: a response in flight ends as its HTTP stream would
        (the in-band error once it started, else a 503 frame), then the socket closes."""
        if self.busy:
            log.info("WebSocket response ended by the shutdown timeout")
            error = shutting_down_error()
            try:
                if self.started:
                    bare = Request(model="", messages=())  # the error needs only the dialect
                    failed = self.gateway.stream_error_bytes(
                        RESPONSES, bare, error, request_id=self.turn_id
                    )
                    await self._send_sse(failed)
                else:
                    await self._send_error(error)
            except _ClientGone:
                return
        await self._close(GOING_AWAY, "server shutting down")

    # -- one frame ------------------------------------------------------------------------

    async def _handle(self, frame: str | bytes) -> None:
        began = time.perf_counter()
        kind = "?"
        status = 200
        # each turn is a request of its own: its id for the attempts' log lines and its
        # usage record (the connection keeps its own id)
        self.turn_id = new_request_id()
        token = REQUEST_ID.set(self.turn_id)
        try:
            event = _parse_frame(frame)
            kind = str(event.get("type"))
            if kind == "response.processed":
                return  # Codex's acknowledgement of a response it read; nothing to do
            if kind == "response.steer":
                await self._steer_failed(event)
                return
            body = self._body(event)
            status = await self._create(body, len(frame))
        except InterlinguaError as err:
            status = await self._send_error(err)
        except Exception as exc:  # a bug: logged, and answered as the HTTP path would
            log.exception("unexpected failure on a WebSocket frame")
            status = await self._send_error(internal_error(exc))
        finally:
            REQUEST_ID.reset(token)
            if access_log.isEnabledFor(logging.INFO):
                access_log.info(
                    '%s "WS /v1/responses %s" %d %.1fms',
                    self.conn_id,
                    kind,
                    status,
                    (time.perf_counter() - began) * 1000,
                )

    def _body(self, event: dict[str, Any]) -> dict[str, Any]:
        kind = event.pop("type", None)
        if kind is None:
            raise InvalidRequestError(
                'The frame has no \'type\': send {"type": "response.create", ...}.',
                param="type",
                code="unknown_event_type",
            )
        if kind == "response.create":
            self.last_create = {k: v for k, v in event.items() if k != "input"}
            return event
        if kind == "response.append":  # the first protocol (2026-02-04): continue the last
            if self.last_create is None or not self.last_id:
                raise InvalidRequestError(
                    "response.append needs an earlier response on this connection.",
                    code="previous_response_not_found",
                )
            return {**self.last_create, "previous_response_id": self.last_id, **event}
        raise InvalidRequestError(
            f"Unknown event type {kind!r}: send 'response.create'.",
            param="type",
            code="unknown_event_type",
        )

    async def _create(self, body: dict[str, Any], frame_size: int) -> int:
        """Answer one ``response.create``; the status for the access log."""
        generate = body.pop("generate", True)
        stream_id = body.pop("stream_id", None)
        if not isinstance(generate, bool):
            raise InvalidRequestError(
                "Invalid type for 'generate': expected a boolean.", param="generate"
            )
        if stream_id is not None and not isinstance(stream_id, str):
            raise InvalidRequestError(
                "Invalid type for 'stream_id': expected a string.", param="stream_id"
            )
        if body.get("background"):
            raise InvalidRequestError(
                "background is not supported over a WebSocket.", param="background"
            )
        body["stream"] = True
        base = self.memory.expand(body)
        items = input_items(body.get("input")) or []
        chainable = "previous_response_id" not in body  # else its history is not ours
        if not generate:
            terminal = await self._send_sse(self._warm_up(body), stream_id)
        else:
            answer = await self.host.responses_from_body(body, self.headers)
            if not isinstance(answer, StreamResponse):  # an error status: nothing streamed
                return await self._send_error_response(answer, stream_id)
            terminal = await self._relay(answer, stream_id)
        if terminal is None or terminal[0].get("type") not in _KEPT:
            return 200
        event, size = terminal
        response = event.get("response")
        resp_id = response.get("id") if isinstance(response, dict) else None
        output = response.get("output") if isinstance(response, dict) else None
        if isinstance(resp_id, str) and isinstance(output, list):
            self.last_id = resp_id
            if chainable:  # (else the history it continued is not this connection's)
                self.memory.remember(resp_id, items, output, base + frame_size + size)
        return 200

    def _warm_up(self, body: dict[str, Any]) -> bytes:
        """The events of a ``generate: false`` response: no output, nothing generated.

        Checked as a generating request would be (a 400 for a bad body, a 404 for an
        unknown model); an id left unexpanded is one this connection never answered."""
        previous = body.get("previous_response_id")
        if previous is not None:
            raise InvalidRequestError(
                f"Previous response with id {previous!r} not found on this connection.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise InvalidRequestError("Missing required parameter: 'model'.", param="model")
        self.gateway.router.resolve(model)
        request = self.gateway.responses.parse_request(body)
        encoder = self.gateway.responses.stream_encoder(request)
        start = encoder.encode(StreamStart(random_id("resp_"), request.model, int(time.time())))
        return start + encoder.encode(StreamEnd(StopReason.END_TURN, usage=Usage()))

    # -- sending ----------------------------------------------------------------------------

    async def _relay(
        self, answer: StreamResponse, stream_id: Any
    ) -> tuple[dict[str, Any], int] | None:
        """Send each SSE event of ``answer`` as a frame; the terminal event and its size."""
        decoder = SSEDecoder()
        terminal: tuple[dict[str, Any], int] | None = None
        chunks = answer.chunks
        watch = answer.watch  # (the request's record, as StreamResponse itself shows it)
        outcome: str | None = None  # (how it ended, as StreamResponse decides it)
        try:
            try:
                async for chunk in chunks:
                    if watch is not None and watch(chunk):
                        watch = None
                    for event in decoder.decode(chunk):
                        terminal = await self._forward(event.data, stream_id) or terminal
                answer.completed = True
                for event in decoder.flush():
                    terminal = await self._forward(event.data, stream_id) or terminal
                outcome = answer.ended()
            except _ClientGone:
                # A frame is sent whole or not at all: the terminal one was, or it was not.
                outcome = answer.ended() if terminal is not None else StreamOutcome.CLIENT_GONE
                raise
            except asyncio.CancelledError:
                # The reader's cancel (the client left) or the drain's (run() tells which).
                if self.gone:
                    outcome = answer.ended() if terminal is not None else StreamOutcome.CLIENT_GONE
                elif self.host.drain.expired:
                    outcome = StreamOutcome.SHUTDOWN
                raise
            except Exception as exc:
                answer.broken = True
                outcome = StreamOutcome.BROKEN
                if answer.on_error is None:
                    raise
                if isinstance(exc, InterlinguaError):
                    log.warning("WebSocket response ended by an error after its first event")
                else:
                    log.exception("WebSocket response failed after its first event")
                terminal = await self._send_sse(answer.on_error(exc), stream_id) or terminal
        finally:
            await answer.release(outcome)
        return terminal

    async def _send_sse(
        self, data: bytes, stream_id: Any = None
    ) -> tuple[dict[str, Any], int] | None:
        decoder = SSEDecoder()
        terminal = None
        for event in [*decoder.decode(data), *decoder.flush()]:
            terminal = await self._forward(event.data, stream_id) or terminal
        return terminal

    async def _forward(self, data: str, stream_id: Any) -> tuple[dict[str, Any], int] | None:
        """One event as one frame; the parsed event when it ends the response."""
        if stream_id is not None and data.endswith("}"):
            data = f"{data[:-1]},{_json_field('stream_id', stream_id)}}}"
        await self._send_text(data)
        self.started = True
        # Only a terminal event is parsed (the deltas are most of a stream): its type is
        # a quoted word no JSON string value can contain unescaped.
        if any(f'"{kind}"' in data for kind in _TERMINAL):
            event = orjson.loads(data)
            if isinstance(event, dict) and event.get("type") in _TERMINAL:
                return event, len(data)
        return None

    async def _send_error(self, error: InterlinguaError) -> int:
        response = self.gateway.error_response(RESPONSES, error, self.turn_id)
        return await self._send_error_response(response, None)

    async def _send_error_response(self, response: BytesResponse, stream_id: Any) -> int:
        """An error status (ours or the upstream's, relayed) as an ``error`` frame."""
        await self._send_text(_error_frame(response, stream_id))
        return response.status

    async def _steer_failed(self, event: dict[str, Any]) -> None:
        steer = {
            "input": event.get("input"),
            "previous_response_id": event.get("previous_response_id"),
        }
        error = {
            "type": "invalid_request_error",
            "code": "steering_not_supported",
            "message": "This gateway does not support steering; send the input in the next "
            "response.create instead." + request_id_note(self.turn_id),
        }
        failed = {"type": "response.steer.failed", "sequence_number": 0, "error": error}
        await self._send_text(orjson.dumps({**failed, "steer": steer}).decode())


def _parse_frame(frame: str | bytes) -> dict[str, Any]:
    """A client frame as a JSON object, or the 400 that says what is wrong with it."""
    if isinstance(frame, bytes):
        raise InvalidRequestError(
            "Binary frames are not supported: send each event as a JSON text frame.",
            code="invalid_frame",
        )
    try:
        event = orjson.loads(frame)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequestError(
            f"The frame is not valid JSON: {exc}", code="invalid_json"
        ) from None
    if not isinstance(event, dict):
        raise InvalidRequestError("The frame must be a JSON object.", code="invalid_frame")
    return event


def _id_headers(request_id: str) -> list[tuple[bytes, bytes]]:
    """The request id under both its names, as the HTTP path sends it."""
    return [(b"x-request-id", request_id.encode()), (b"request-id", request_id.encode())]


def _json_field(name: str, value: Any) -> str:
    return f'"{name}":{orjson.dumps(value).decode()}'


def _error_frame(response: BytesResponse, stream_id: Any) -> str:
    """``{"type": "error", "status", "error", "headers"?}``: an HTTP error as Codex and the
    openai SDK read it on a socket (a body that is not the API's error shape is wrapped)."""
    try:
        payload = orjson.loads(response.body)
    except orjson.JSONDecodeError:
        payload = None
    error = payload.get("error") if isinstance(payload, dict) else None
    if not isinstance(error, dict):
        text = response.body.decode("utf-8", "replace")
        error = {"type": "server_error", "code": None, "message": text, "param": None}
    frame: dict[str, Any] = {"type": "error", "status": response.status, "error": error}
    headers = {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in response.headers
        if name in _ERROR_HEADERS
    }
    if headers:
        frame["headers"] = headers
    if stream_id is not None:
        frame["stream_id"] = stream_id
    return orjson.dumps(frame).decode()
