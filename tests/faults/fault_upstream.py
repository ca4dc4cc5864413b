"""A raw-socket upstream that misbehaves on request, at the byte level.

It speaks HTTP/1.1 with keep-alive straight on asyncio streams (no HTTP library, so it can
send what no library would: a bad chunk-size line, a Content-Length longer than the body,
a close-delimited stream cut before its end). It runs on its own event-loop thread on a
free 127.0.0.1 port, so it serves sync SDK clients and an in-thread gateway alike.

The behaviour is picked **from the model name** in the JSON body: ``<fault>`` or
``fault/<fault>``, optionally followed by ``:<param>`` (``huge:1000000``, ``drip:0.02``).
The answer is in the wire dialect of the path (``/v1/chat/completions`` -> OpenAI,
``/v1/messages`` -> Anthropic), streamed or not per the body's ``stream``. Faults
(:data:`FAULTS`):

=====================  ===================================================================
``ok``                 a normal answer; streams are chunk-encoded, one event split in two
``html-200``           200, ``text/html`` page (stream or not)
``text-200``           200, ``text/plain`` proxy message
``truncate``           close-delimited (no length, no chunking) and closed halfway: a
                       stream at an event boundary before ``[DONE]``/``message_stop``; JSON
                       cut in the middle
``bad-json-event``     stream: one event mid-stream has invalid JSON, then the rest
                       normally; non-stream: a 200 ``application/json`` body that is not JSON
``bad-chunk-size:<s>`` chunked, then an invalid chunk-size line after a chunk that ended
                       mid-event (mid-JSON); the rest unframed, then held open. With
                       ``<s>``, the line follows ``<s>`` seconds after the chunk (in a
                       read of its own), else at once
``short-content-length``  Content-Length larger than what is sent, then close (a stream
                       cut mid-event; a JSON body sent whole but short of its length)
``hang-headers``       read the request, never answer
``hang-body``          headers and part of the body (stream: the first two events), then
                       silence
``drip:<s>``           the normal answer, every byte (head included) ``<s>`` seconds apart
                       (default 0.2)
``huge:<n>``           a normal answer whose text is ``<n>`` bytes (stream: 16 KiB events)
``huge-error:<n>``     500 with the dialect's error body, ``<n>`` bytes (default 1 MB)
``429``                429, ``Retry-After: 7``, the dialect's rate-limit error body
``500`` / ``503``      that status with the dialect's error body
``529``                529 with Anthropic's ``overloaded_error`` body (on either path)
``close-reused``       the first request on a connection is answered normally (keep-alive);
                       any later one on that connection is read, then the socket is closed
                       without an answer (recorded in :attr:`FaultUpstream.unanswered`)
``echo-key``           a normal answer whose text contains the ``authorization`` and
                       ``x-api-key`` values received
``ctx-*``, ``filter-*``  400 with a real server's refusal body, as it sends it
                       (:mod:`.refusal_bodies`)
=====================  ===================================================================

Every request is recorded (:attr:`FaultUpstream.requests`: path, lowercase headers, raw
body, connection number and its index on that connection); :meth:`FaultUpstream.received`
counts the requests whose body holds a marker, so a test can prove a POST arrived once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import orjson

from .fault_http import read_request
from .fault_wire import (
    ANSWER_TEXT,
    ANTHROPIC,
    answer_json,
    dialect_of,
    error_json,
    huge_text,
    overloaded_json,
    stream_events,
)
from .refusal_bodies import REFUSALS

HTML_PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title></head>\n"
    b"<body><h1>Welcome to nginx!</h1><p>If you see this page, the web server works.</p>"
    b"</body></html>\n"
)
PLAIN_TEXT = b"upstream connect error or disconnect/reset before headers. reset reason: overflow"
RETRY_AFTER = "7"
#: Default drip interval (seconds per byte) and huge-error size (bytes).
DRIP_INTERVAL = 0.2
HUGE_ERROR_SIZE = 1_000_000
# 529 is not in http.HTTPStatus; Anthropic sends it for overload.
_REASONS = {529: "Site Overloaded"}
_EVENT_STREAM = ("content-type", "text/event-stream")
_JSON = ("content-type", "application/json")


@dataclass
class Received:
    """One request the fault upstream read."""

    path: str
    headers: dict[str, str]
    body: bytes
    #: which TCP connection (1, 2, ...) and how many requests it carried before this one
    connection: int
    index: int

    @property
    def model(self) -> str:
        """The ``model`` of the JSON body ('' when there is none)."""
        try:
            return str(orjson.loads(self.body).get("model", ""))
        except (orjson.JSONDecodeError, AttributeError):
            return ""


@dataclass
class Call:
    """What a behaviour needs to know about the request it answers."""

    request: Received
    dialect: str
    model: str
    stream: bool
    param: str | None
    #: OpenAI sends a usage chunk only when asked (docs/protocols.md, "Chat Completions: stream")
    usage: bool


def parse_fault(model: str) -> tuple[str, str | None]:
    """``"fault/huge:1000"`` -> ``("huge", "1000")``; ``"ok"`` -> ``("ok", None)``."""
    name = model.removeprefix("fault/")
    fault, sep, param = name.partition(":")
    return fault, (param if sep else None)


def head(status: int, *headers: tuple[str, str]) -> bytes:
    """An HTTP/1.1 response head with exactly these headers."""
    reason = _REASONS.get(status) or HTTPStatus(status).phrase
    lines = [f"HTTP/1.1 {status} {reason}", *(f"{k}: {v}" for k, v in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def chunk(data: bytes) -> bytes:
    """``data`` as one chunk of chunked transfer coding (RFC 9112 7.1)."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


LAST_CHUNK = b"0\r\n\r\n"


def answer_text(call: Call) -> str:
    """The text a normal answer to ``call`` carries (see :func:`expected_text`)."""
    fault, param = parse_fault(call.model)
    if fault == "echo-key":
        headers = call.request.headers
        return (
            f"{ANSWER_TEXT} authorization={headers.get('authorization', '')} "
            f"x-api-key={headers.get('x-api-key', '')}"
        )
    return expected_text(fault, param)


def expected_text(fault: str, param: str | None = None) -> str:
    """The full text a client should read from a normal answer to this fault."""
    if fault == "huge" and param is not None:
        return huge_text(int(param))
    return ANSWER_TEXT


def full_json(call: Call) -> bytes:
    """The complete non-stream answer body."""
    return answer_json(call.dialect, call.model, answer_text(call))


def full_events(call: Call) -> list[bytes]:
    """The complete stream, one SSE event per item."""
    return stream_events(call.dialect, call.model, answer_text(call), call.usage)


def ok_bytes(call: Call) -> bytes:
    """The whole normal response, head included (streams chunk-encoded, one event per chunk)."""
    if not call.stream:
        body = full_json(call)
        return head(200, _JSON, ("content-length", str(len(body)))) + body
    frames = [chunk(event) for event in full_events(call)]
    return (
        head(200, _EVENT_STREAM, ("transfer-encoding", "chunked")) + b"".join(frames) + LAST_CHUNK
    )


class Conn:
    """One accepted connection: the reader, the writer, and the hold-open policy."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hold: float):
        self.reader = reader
        self.writer = writer
        self.hold_seconds = hold

    async def send(self, *parts: bytes) -> None:
        """Write and flush ``parts``."""
        for part in parts:
            self.writer.write(part)
        await self.writer.drain()

    async def hold(self) -> None:
        """Stay silent until the peer hangs up (or ``hold_seconds``, a bound for teardown)."""
        with contextlib.suppress(TimeoutError, ConnectionError):
            await asyncio.wait_for(self.reader.read(), self.hold_seconds)


Behaviour = Callable[["FaultUpstream", Conn, Call], Awaitable[bool]]


async def _ok(up: FaultUpstream, conn: Conn, call: Call) -> bool:
    if not call.stream:
        await conn.send(ok_bytes(call))
        return True
    await conn.send(head(200, _EVENT_STREAM, ("transfer-encoding", "chunked")))
    for i, event in enumerate(full_events(call)):
        if i == 1:  # one event split over two chunks, as real servers and sockets do
            await conn.send(chunk(event[:7]))
            await asyncio.sleep(0.005)
            event = event[7:]
        await conn.send(chunk(event))
    await conn.send(LAST_CHUNK)
    return True


def _fixed(status: int, content_type: str, body: bytes, *extra: tuple[str, str]) -> Behaviour:
    async def behaviour(up: FaultUpstream, conn: Conn, call: Call) -> bool:
        length = ("content-length", str(len(body)))
        await conn.send(head(status, ("content-type", content_type), length, *extra), body)
        return True

    return behaviour


def _status(status: int, *extra: tuple[str, str]) -> Behaviour:
    async def behaviour(up: FaultUpstream, conn: Conn, call: Call) -> bool:
        body = error_json(call.dialect, status, f"fault upstream says {status}")
        if status == 529:
            body = overloaded_json()
        length = ("content-length", str(len(body)))
        await conn.send(head(status, _JSON, length, *extra), body)
        return True

    return behaviour


async def _truncate(up: FaultUpstream, conn: Conn, call: Call) -> bool:
    # Close-delimited (RFC 9112 6.3 rule 8): only the missing end marker shows the cut.
    if call.stream:
        events = full_events(call)
        sent = b"".join(events[: len(events) // 2])
        await conn.send(head(200, _EVENT_STREAM, ("connection", "close")), sent)
    else:
        body = full_json(call)
        await conn.send(head(200, _JSON, ("connection", "close")), body[: len(body) // 2])
    return False


def broken_event(call: Call) -> bytes:
    """An event whose data is JSON cut off inside a string (then the blank line)."""
    if call.dialect == ANTHROPIC:
        return (
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
            b'"delta":{"type":"text_delta","text":"lazy\n\n'
        )
    return b'data: {"id":"chatcmpl-fault","object":"chat.completion.chunk","choices":[{"ind\n\n'


async def _bad_json_event(up: FaultUpstream, conn: Conn, call: Call) -> bool:
    if not call.stream:
        body = full_json(call)[:-1] + b",,}"
        await conn.send(head(200, _JSON, ("content-length", str(len(body)))), body)
        return True
    events = full_events(call)
    middle = len(events) // 2
    # The broken event stands in for a real one: a decoder that skips it loses that text.
    events[middle] = broken_event(call)
    frames = [chunk(event) for event in events]
    await conn.send(head(200, _EVENT_STREAM, ("transfer-encoding", "chunked")), *frames, LAST_CHUNK)
    return True


async def _bad_chunk_size(up: FaultUpstream, conn: Conn, call: Call) -> bool:
    whole = b"".join(full_events(call)) if call.stream else full_json(call)
    ctype = _EVENT_STREAM if call.stream else _JSON
    cut = len(whole) // 3  # inside an event (or the JSON), so a relay holds half a line
    first = (head(200, ctype, ("transfer-encoding", "chunked")), chunk(whole[:cut]))
    broken = (b"zz; not hex\r\n", whole[cut:])  # RFC 9112 7.1: chunk-size = 1*HEXDIG
    if call.param:
        await conn.send(*first)
        await asyncio.sleep(float(call.param))
        await conn.send(*broken)
    else:
        await conn.send(*first, *broken)
    await conn.hold()
    return False


async def _short_content_length(up: FaultUpstream, conn: Conn, call: Call) -> bool:
    if call.stream:
        whole = b"".join(full_events(call))
        sent = whole[: len(whole) // 2]  # cut mid-event
        declared = len(whole)
    else:
        sent = full_json(call)  # complete JSON, but short of its declared length
        declared = len(sent) + 64
    ctype = _EVENT_STREAM if call.stream else _JSON
    await conn.send(head(200, ctype, ("content-length", str(declared))), sent)
    return False


async def _hang_headers(up: FaultUpstream, conn: Conn, call: Call) -> bool:
    await conn.hold()
    return False


async def _hang_body(up: FaultUpstream, conn: Conn, call: Call) -> bool:
    if call.stream:
        events = full_events(call)
        hdr = head(200, _EVENT_STREAM, ("transfer-encoding", "chunked"))
        await conn.send(hdr, chunk(events[0]), chunk(events[1]))
    else:
        body = full_json(call)
        hdr = head(200, _JSON, ("content-length", str(len(body))))
        await conn.send(hdr, body[: len(body) // 2])
    await conn.hold()
    return False


async def _drip(up: FaultUpstream, conn: Conn, call: Call) -> bool:
    interval = float(call.param) if call.param else DRIP_INTERVAL
    for byte in ok_bytes(call):
        await conn.send(bytes((byte,)))
        await asyncio.sleep(interval)
    return True


async def _huge_error(up: FaultUpstream, conn: Conn, call: Call) -> bool:
    size = int(call.param) if call.param else HUGE_ERROR_SIZE
    overhead = len(error_json(call.dialect, 500, ""))
    body = error_json(call.dialect, 500, "E" * max(0, size - overhead))
    await conn.send(head(500, _JSON, ("content-length", str(len(body)))), body)
    return True


async def _close_reused(up: FaultUpstream, conn: Conn, call: Call) -> bool:
    if call.request.index == 0:
        return await _ok(up, conn, call)
    up.unanswered.append(call.request)
    return False


async def _unknown(up: FaultUpstream, conn: Conn, call: Call) -> bool:
    body = error_json(call.dialect, 400, f"fault upstream: unknown fault in model {call.model!r}")
    await conn.send(head(400, _JSON, ("content-length", str(len(body)))), body)
    return True


def _error_200(up: FaultUpstream, conn: Conn, call: Call) -> Awaitable[bool]:
    # Some providers (OpenRouter among them) answer 200 with an error body.
    body = error_json(call.dialect, 500, "provider returned error")
    return _fixed(200, "application/json", body)(up, conn, call)


async def _stream_with(
    conn: Conn, events: list[bytes], *, close: bool = False, framing: bytes = b"\n"
) -> bool:
    """A 200 event stream of ``events`` (LF lines rewritten to ``framing``), chunked, or
    close-delimited and closed after the last byte when ``close``."""
    frames = [event.replace(b"\n", framing) for event in events]
    if close:
        await conn.send(head(200, _EVENT_STREAM, ("connection", "close")), *frames)
        return False
    chunked = [chunk(frame) for frame in frames if frame]
    await conn.send(head(200, _EVENT_STREAM, ("transfer-encoding", "chunked")), *chunked)
    await conn.send(LAST_CHUNK)
    return True


async def _no_data_events(up: FaultUpstream, conn: Conn, call: Call) -> bool:
    # WHATWG readers ignore events with no data; the openai SDK would parse "" as JSON.
    if not call.stream:
        return await _ok(up, conn, call)
    events = full_events(call)
    events[1:1] = [b"event: ping\n\n", b"id: 7\n\n", b"data:\n\n", b": comment\n\n"]
    return await _stream_with(conn, events)


async def _comments_only(up: FaultUpstream, conn: Conn, call: Call) -> bool:
    return await _stream_with(conn, [b": processing\n\n", b": still\n\n"], close=True)


async def _no_final_blank(up: FaultUpstream, conn: Conn, call: Call) -> bool:
    # The last event lacks its blank line: SSE readers still dispatch it at the close.
    events = full_events(call)
    events[-1] = events[-1][:-1]
    return await _stream_with(conn, events, close=True)


async def _cr_only(up: FaultUpstream, conn: Conn, call: Call) -> bool:
    return await _stream_with(conn, full_events(call), framing=b"\r")


async def _first_error_event(up: FaultUpstream, conn: Conn, call: Call) -> bool:
    # Overloaded, said in-band before anything else: a client can get a real status.
    if call.dialect == ANTHROPIC:
        event = b"event: error\ndata: " + overloaded_json("busy") + b"\n\n"
    else:
        event = (
            b'data: {"error":{"message":"busy","type":"overloaded_error","code":"overloaded"}}\n\n'
        )
    return await _stream_with(conn, [b": opening\n\n", event])


#: fault name -> behaviour (a model name picks one with :func:`parse_fault`)
FAULTS: dict[str, Behaviour] = {
    "ok": _ok,
    "huge": _ok,
    "echo-key": _ok,
    "html-200": _fixed(200, "text/html; charset=utf-8", HTML_PAGE),
    "text-200": _fixed(200, "text/plain; charset=utf-8", PLAIN_TEXT),
    "truncate": _truncate,
    "bad-json-event": _bad_json_event,
    "bad-chunk-size": _bad_chunk_size,
    "short-content-length": _short_content_length,
    "hang-headers": _hang_headers,
    "hang-body": _hang_body,
    "drip": _drip,
    "huge-error": _huge_error,
    "429": _status(429, ("retry-after", RETRY_AFTER)),
    "500": _status(500),
    "503": _status(503),
    "529": _status(529),
    "close-reused": _close_reused,
    "error-200": _error_200,
    "other-200": _fixed(200, "application/json", b'{"hello": "world"}'),
    "no-data-events": _no_data_events,
    "comments-only": _comments_only,
    "no-final-blank": _no_final_blank,
    "cr-only": _cr_only,
    "first-error-event": _first_error_event,
    "redirect-307": _fixed(307, "text/html", b"moved", ("location", "http://elsewhere/v1")),
    **{name: _fixed(400, "application/json", body) for name, body in REFUSALS.items()},
}


@dataclass
class FaultUpstream:
    """The fault server. ``with FaultUpstream() as up:`` serves on ``up.url``.

    ``hold`` bounds how long a hanging behaviour stays silent when the peer never hangs
    up, so that teardown cannot wait on it.
    """

    hold: float = 30.0
    url: str = ""
    requests: list[Received] = field(default_factory=list)
    #: requests read and then answered only by closing the connection (close-reused)
    unanswered: list[Received] = field(default_factory=list)
    #: exceptions raised while answering (other than the peer going away), for diagnosis
    errors: list[str] = field(default_factory=list)
    _loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.new_event_loop)
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[Any]] = field(default_factory=set)
    _connections: Any = field(default_factory=lambda: itertools.count(1))
    _thread: threading.Thread | None = None

    @property
    def openai_base_url(self) -> str:
        """The ``base_url`` an OpenAI-compatible upstream config uses (``.../v1``)."""
        return self.url + "/v1"

    def received(self, marker: str | bytes) -> int:
        """How many requests carried ``marker`` in their body."""
        needle = marker.encode() if isinstance(marker, str) else marker
        return sum(needle in r.body for r in list(self.requests))

    def start(self) -> None:
        """Listen on a free 127.0.0.1 port and serve from a private loop thread."""
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=1 << 20)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        """Stop listening, cut every open connection, end the thread."""
        if self._thread is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        self._thread = None

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def __enter__(self) -> FaultUpstream:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = Conn(reader, writer, self.hold)
        number = next(self._connections)
        try:
            for index in itertools.count():
                request = await read_request(reader)
                if request is None:
                    break
                received = Received(*request, connection=number, index=index)
                self.requests.append(received)
                if not await self._answer(conn, received):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the peer went away (or we are stopping): nothing to answer
        except Exception as exc:  # recorded for the test, never silent
            self.errors.append(repr(exc))
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self._tasks.discard(task)

    async def _answer(self, conn: Conn, request: Received) -> bool:
        """Answer ``request``; False when the connection must close afterwards."""
        dialect = dialect_of(request.path)
        try:
            body = orjson.loads(request.body) if request.body else {}
        except orjson.JSONDecodeError:
            body = None
        if dialect is None or not isinstance(body, dict):
            reply = b'{"error": {"message": "fault upstream: not a chat request"}}'
            await conn.send(head(404, _JSON, ("content-length", str(len(reply)))), reply)
            return True
        model = str(body.get("model", ""))
        fault, param = parse_fault(model)
        options = body.get("stream_options") or {}
        call = Call(
            request=request,
            dialect=dialect,
            model=model,
            stream=body.get("stream") is True,
            param=param,
            usage=dialect == ANTHROPIC or bool(options.get("include_usage")),
        )
        return await FAULTS.get(fault, _unknown)(self, conn, call)


__all__ = [
    "FAULTS",
    "HTML_PAGE",
    "PLAIN_TEXT",
    "RETRY_AFTER",
    "Call",
    "FaultUpstream",
    "Received",
    "broken_event",
    "chunk",
    "expected_text",
    "head",
    "ok_bytes",
    "parse_fault",
    "read_request",
]
