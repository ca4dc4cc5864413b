"""A byte-level mock upstream for the soak: OpenAI and Anthropic wire, faults by model name.

``python -m bench.fault_upstream --port P`` serves ``POST /v1/chat/completions`` (OpenAI
Chat) and ``POST /v1/messages`` (Anthropic Messages) on raw asyncio streams, so a fault
can break the HTTP framing itself, which an HTTP server library would not let us do. The
answer is ``echo:`` + the text of the last message, so a client can check that it got
*its own* answer, whole. The model name the gateway sends decides what happens:

=========  ==========================================================================
``ok``     a normal answer (JSON, or an SSE stream of :data:`PIECES` text deltas)
``500``    HTTP 500 with the dialect's error body
``big500`` HTTP 500 with a 1 MB error body (its message is :data:`BIG` bytes long)
``429``    HTTP 429, ``retry-after: 1``, the dialect's rate-limit error body
``cut``    stream: two events, then the connection closes inside the chunked body;
           JSON: half the declared ``Content-Length``, then close
``badjson`` stream: an event whose data is not JSON, then the rest; JSON: a 200 whose
           body is not JSON
``hang``   reads the request and answers nothing (the gateway's read timeout ends it)
``stall``  stream: headers and two events, then silence; JSON: like ``hang``
``bigstall`` :data:`BIG` bytes of the answer (a JSON body declared twice as long, or an
           event with no text in it), then silence
=========  ==========================================================================

Connections are kept alive between answers (as vLLM and the real APIs do). A connection
is never held longer than :data:`HOLD_LIMIT` seconds, so a run always ends.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from typing import Any

import orjson

#: The text deltas of a streamed answer: the echoed text is split in this many pieces.
PIECES = 4
#: The longest a hanging or stalled answer holds its connection.
HOLD_LIMIT = 60.0
FAULTS = ("500", "big500", "429", "cut", "badjson", "hang", "stall", "bigstall")
#: The length of the ``big500`` error message.
BIG = 1_000_000


def answer_text(body: dict[str, Any]) -> str:
    """``echo:`` + the text of the last message (string or list of text parts/blocks)."""
    messages = body.get("messages") or [{}]
    content = messages[-1].get("content", "")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "echo:" + str(content)


def split(text: str, n: int = PIECES) -> list[str]:
    """``text`` in ``n`` non-empty pieces (fewer if it is shorter)."""
    size = max(1, -(-len(text) // n))
    return [text[i : i + size] for i in range(0, len(text), size)]


# --- OpenAI Chat -------------------------------------------------------------------------


def openai_json(model: str, text: str) -> bytes:
    return orjson.dumps(
        {
            "id": "chatcmpl-soak",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
    )


def _oai_chunk(model: str, delta: dict[str, Any] | None, finish: str | None = None) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    payload: dict[str, Any] = {
        "id": "chatcmpl-soak",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": model,
        "choices": choices,
    }
    if delta is None:
        payload["usage"] = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def openai_events(model: str, text: str) -> list[bytes]:
    events = [_oai_chunk(model, {"role": "assistant", "content": ""})]
    events += [_oai_chunk(model, {"content": piece}) for piece in split(text)]
    events += [_oai_chunk(model, {}, "stop"), _oai_chunk(model, None), b"data: [DONE]\n\n"]
    return events


def openai_error(status: int, message: str) -> bytes:
    kind = "rate_limit_error" if status == 429 else "server_error"
    return orjson.dumps({"error": {"message": message, "type": kind, "code": None}})


# --- Anthropic Messages ------------------------------------------------------------------


def anthropic_json(model: str, text: str) -> bytes:
    return orjson.dumps(
        {
            "id": "msg_soak",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
    )


def _ant_event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def anthropic_events(model: str, text: str) -> list[bytes]:
    start = orjson.loads(anthropic_json(model, ""))
    start.update(content=[], stop_reason=None, usage={"input_tokens": 10, "output_tokens": 1})
    events = [
        _ant_event("message_start", {"type": "message_start", "message": start}),
        _ant_event(
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
    ]
    for piece in split(text):
        delta = {"type": "text_delta", "text": piece}
        events.append(
            _ant_event(
                "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
            )
        )
    events += [
        _ant_event("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _ant_event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 5},
            },
        ),
        _ant_event("message_stop", {"type": "message_stop"}),
    ]
    return events


def anthropic_error(status: int, message: str) -> bytes:
    kind = "rate_limit_error" if status == 429 else "api_error"
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message}})


# --- HTTP ------------------------------------------------------------------------------------


def head(status: int, reason: str, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}"] + [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


async def read_request(reader: asyncio.StreamReader) -> tuple[str, bytes] | None:
    """One request: (path, body), or None at a clean end of the connection."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    lines = raw.decode("latin-1").split("\r\n")
    path = lines[0].split(" ")[1] if len(lines[0].split(" ")) > 1 else "/"
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return path, body


class Handler:
    """Answers the requests of one connection until it closes or a fault closes it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def serve(self) -> None:
        try:
            while True:
                request = await read_request(self.reader)
                if request is None:
                    return
                if not await self.answer(*request):
                    return  # the fault closed (or abandoned) the connection
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            return
        finally:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()

    async def hold(self) -> bool:
        """Answer nothing until the peer goes away (or HOLD_LIMIT); then close."""
        with contextlib.suppress(asyncio.TimeoutError, ConnectionError):
            await asyncio.wait_for(self.reader.read(), HOLD_LIMIT)
        return False

    async def answer(self, path: str, raw: bytes) -> bool:
        """Answer one request; False when the connection must not be reused."""
        anthropic = path.endswith("/messages")
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = {}
        fault = str(body.get("model", "ok"))
        stream = bool(body.get("stream"))
        text = answer_text(body)
        w = self.writer
        if fault in ("500", "big500", "429"):
            status = 429 if fault == "429" else 500
            error = anthropic_error if anthropic else openai_error
            message = "x" * BIG if fault == "big500" else f"injected {fault}"
            payload = error(status, message)
            headers = {"content-type": "application/json", "content-length": str(len(payload))}
            if status == 429:
                headers["retry-after"] = "1"
            reason = "Too Many Requests" if status == 429 else "Internal Server Error"
            w.write(head(status, reason, headers) + payload)
            await w.drain()
            return True
        if fault == "hang" or (fault == "stall" and not stream):
            return await self.hold()
        if fault == "bigstall" and not stream:
            headers = {"content-type": "application/json", "content-length": str(2 * BIG)}
            w.write(head(200, "OK", headers) + b'{"pad": "' + b"x" * BIG)
            await w.drain()
            return await self.hold()
        if stream:
            return await self.stream(fault, anthropic, body, text)
        payload = (anthropic_json if anthropic else openai_json)(body.get("model", ""), text)
        if fault == "badjson":
            payload = b"<html><body>502 Bad Gateway</body></html>"
        headers = {"content-type": "application/json", "content-length": str(len(payload))}
        if fault == "cut":
            w.write(head(200, "OK", headers) + payload[: len(payload) // 2])
            await w.drain()
            return False
        w.write(head(200, "OK", headers) + payload)
        await w.drain()
        return True

    async def stream(self, fault: str, anthropic: bool, body: dict[str, Any], text: str) -> bool:
        model = str(body.get("model", ""))
        events = (anthropic_events if anthropic else openai_events)(model, text)
        if fault == "badjson":  # a truncated JSON object where a text delta belongs
            bad = b'data: {"type": "content_block_delta", "index": 0, "delta": {\n\n'
            events.insert(2, b"event: content_block_delta\n" + bad if anthropic else bad)
        headers = {
            "content-type": "text/event-stream",
            "cache-control": "no-cache",
            "transfer-encoding": "chunked",
        }
        w = self.writer
        w.write(head(200, "OK", headers))
        if fault == "bigstall":  # a long event that carries no text, then silence
            if anthropic:
                pad = _ant_event("ping", {"type": "ping", "pad": "x" * BIG})
            else:
                pad = b"data: " + orjson.dumps({"choices": [], "pad": "x" * BIG}) + b"\n\n"
            w.write(chunk(b"".join(events[:2])) + chunk(pad))
            await w.drain()
            return await self.hold()
        for i, event in enumerate(events):
            if i == 2 and fault == "cut":
                w.write(chunk(event)[: len(event) // 2])  # inside a chunk, inside an event
                await w.drain()
                return False
            if i == 2 and fault == "stall":
                await w.drain()
                return await self.hold()
            w.write(chunk(event))
            await w.drain()
        w.write(b"0\r\n\r\n")
        await w.drain()
        return True


async def serve(host: str, port: int) -> None:
    """Serve until SIGTERM or SIGINT."""

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await Handler(reader, writer).serve()

    server = await asyncio.start_server(on_connect, host, port, backlog=1024)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:  # plain asyncio is fine, only slower
        factory = asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
