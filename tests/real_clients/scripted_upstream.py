"""A scripted OpenAI Chat Completions server on 127.0.0.1, for the real-client tests.

The gateway translates what Codex (Responses), Claude Code (Anthropic Messages) and the
Agents SDK (Responses) send into Chat Completions and posts it here, so every client
scenario crosses a dialect boundary both ways on real sockets.

A script is a list of steps; each request to ``/v1/chat/completions`` takes the first
step not yet used whose ``when_tool`` (if any) is among the tools the request offers and
whose ``when_text`` (if any) occurs in its messages (a gateway with ``text_tool_calls``
describes the tools in the prompt instead of offering them), and is answered with it:
``text``, ``reasoning`` (sent as ``reasoning_content``, as DeepSeek and vLLM do) and
``tool_calls`` (``{"id", "name", "arguments"}``, or ``"input"`` for a custom tool's
call), each optional. A request that no step fits gets ``default`` (a
short text): CLIs send side requests (titles, topic checks) that a test does not script.
Answers are streamed (text and arguments split in small pieces, usage when asked) or
plain JSON, as the request's ``stream`` says. Every request is recorded with the index
of the step that answered it (``None``: the default).
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

__all__ = ["ScriptedUpstream"]

CREATED = 1_795_000_000
PIECE = 7  # characters per streamed text / arguments delta


@dataclass
class ScriptedUpstream:
    """The server; :meth:`start` runs it on its own thread and loop, :meth:`stop` ends it."""

    steps: list[dict[str, Any]]
    default: str = "ok"
    requests: list[dict[str, Any]] = field(default_factory=list)
    url: str = ""
    _used: set[int] = field(default_factory=set)
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _runner: web.AppRunner | None = None

    def start(self) -> str:
        """Serve on a free port; returns the base URL (``http://127.0.0.1:PORT/v1``)."""
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def run() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            self._loop.run_until_complete(self._serve())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the scripted upstream did not start")
        return self.url

    def stop(self) -> None:
        if self._loop is None or self._runner is None:
            return
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(10)

    async def _serve(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/v1"

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        record: dict[str, Any] = {"method": request.method, "path": request.path, "step": None}
        self.requests.append(record)
        if request.method != "POST" or request.path != "/v1/chat/completions":
            return _error(404, f"no route {request.method} {request.path}")
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return _error(400, "body is not JSON")
        record["body"] = body
        index = self._pick(body)
        record["step"] = index
        step = {"text": self.default} if index is None else self.steps[index]
        model = str(body.get("model"))
        if body.get("stream"):
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await _stream(request, model, step, usage)
        return web.Response(
            body=orjson.dumps(_completion(model, step)), content_type="application/json"
        )

    def _pick(self, body: dict[str, Any]) -> int | None:
        offered = {
            (tool.get(tool.get("type")) or {}).get("name")
            for tool in body.get("tools") or ()
            if isinstance(tool, dict)
        }
        messages = orjson.dumps(body.get("messages")).decode()
        for i, step in enumerate(self.steps):
            if i in self._used:
                continue
            want, text = step.get("when_tool"), step.get("when_text")
            if (want is None or want in offered) and (text is None or text in messages):
                self._used.add(i)
                return i
        return None


def _error(status: int, message: str) -> web.Response:
    payload = {"error": {"message": message, "type": "invalid_request_error"}}
    return web.Response(status=status, body=orjson.dumps(payload), content_type="application/json")


USAGE = {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39}


def _calls(step: dict[str, Any]) -> list[dict[str, Any]]:
    """The step's calls in Chat's shape: a function call, or (``"input"`` instead of
    ``"arguments"``) a custom tool's call, whose input is raw text."""
    out = []
    for call in step.get("tool_calls") or ():
        if "input" in call:
            body = {"name": call["name"], "input": call["input"]}
            out.append({"id": call["id"], "type": "custom", "custom": body})
        else:
            body = {"name": call["name"], "arguments": call["arguments"]}
            out.append({"id": call["id"], "type": "function", "function": body})
    return out


def _completion(model: str, step: dict[str, Any]) -> dict[str, Any]:
    calls = _calls(step)
    message: dict[str, Any] = {"role": "assistant", "content": step.get("text")}
    if step.get("reasoning"):
        message["reasoning_content"] = step["reasoning"]  # DeepSeek's and vLLM's field
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": USAGE,
    }


def _chunk(model: str, delta: dict[str, Any] | None, finish: str | None = None) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    payload: dict[str, Any] = {
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": model,
        "choices": choices,
    }
    if delta is None:
        payload["usage"] = USAGE
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _pieces(text: str) -> list[str]:
    return [text[i : i + PIECE] for i in range(0, len(text), PIECE)]


async def _stream(
    request: web.Request, model: str, step: dict[str, Any], usage: bool
) -> web.StreamResponse:
    """The step as a Chat Completions stream, in the order OpenAI sends one."""
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    events = [_chunk(model, {"role": "assistant", "content": ""})]
    reasoning = _pieces(step.get("reasoning") or "")
    events += [_chunk(model, {"reasoning_content": piece}) for piece in reasoning]
    events += [_chunk(model, {"content": piece}) for piece in _pieces(step.get("text") or "")]
    calls = _calls(step)
    for index, call in enumerate(calls):
        kind = call["type"]
        field = "input" if kind == "custom" else "arguments"
        head = {"index": index, "id": call["id"], "type": kind}
        head[kind] = {"name": call[kind]["name"], field: ""}
        events.append(_chunk(model, {"tool_calls": [head]}))
        for piece in _pieces(call[kind][field]):
            delta = {"tool_calls": [{"index": index, kind: {field: piece}}]}
            events.append(_chunk(model, delta))
    events.append(_chunk(model, {}, "tool_calls" if calls else "stop"))
    if usage:
        events.append(_chunk(model, None))
    events.append(b"data: [DONE]\n\n")
    for event in events:
        await resp.write(event)
    await resp.write_eof()
    return resp
