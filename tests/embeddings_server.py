"""A fake OpenAI-compatible ``/v1/embeddings`` server, for the client and batch runner tests.

Each text's vector is a fixed function of the text (:func:`vector_for`), float32 values,
``dimensions`` long when the request asks (else :data:`DIMS`); the answer is base64 when
the request asks for it, unless ``ignore_base64`` (a server that only speaks floats).
A text holding ``boom`` fails its whole request with a 500, ``bad`` with a 400. Every
request is recorded (its body, the peak in flight); ``latency`` delays every answer.
"""

from __future__ import annotations

import array
import asyncio
import base64
import hashlib
import threading
from typing import Any

import orjson
from aiohttp import web

from .threaded_server import ThreadedAiohttpServer

DIMS = 8


def vector_for(text: Any, dims: int = DIMS) -> list[float]:
    """The float32 values the server answers for ``text`` (as Python floats)."""
    seed = hashlib.sha256(repr(text).encode()).digest()
    values = [((seed[i % 32] + i * 7) % 251) / 125.5 - 1.0 + i / 3.0 for i in range(dims)]
    return array.array("f", values).tolist()


def b64(vector: list[float]) -> str:
    return base64.b64encode(array.array("f", vector).tobytes()).decode()


class EmbeddingsServer(ThreadedAiohttpServer):
    """See the module docstring."""

    def __init__(self, latency: float = 0.0) -> None:
        super().__init__()
        self.latency = latency
        self.ignore_base64 = False
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    def routes(self, app: web.Application) -> None:
        app.router.add_route("POST", "/{tail:.*}", self._handle)

    async def _handle(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        with self._lock:
            self.bodies.append(body)
            self.paths.append(request.path)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.latency:
                await asyncio.sleep(self.latency)
            return self._answer(body)
        finally:
            with self._lock:
                self.in_flight -= 1

    def _answer(self, body: dict[str, Any]) -> web.Response:
        texts = body["input"]
        texts = [texts] if isinstance(texts, str) else texts
        if any(isinstance(t, str) and "boom" in t for t in texts):
            error = {"error": {"message": "server fell over", "type": "server_error"}}
            return web.json_response(error, status=500, headers={"x-request-id": "req-boom"})
        if any(isinstance(t, str) and "bad" in t for t in texts):
            error = {"error": {"message": "bad input", "type": "invalid_request_error"}}
            return web.json_response(error, status=400, headers={"x-request-id": "req-bad"})
        dims = body.get("dimensions") or DIMS
        as_b64 = body.get("encoding_format") == "base64" and not self.ignore_base64
        data = []
        for i, text in enumerate(texts):
            vector = vector_for(text, dims)
            data.append(
                {"object": "embedding", "index": i, "embedding": b64(vector) if as_b64 else vector}
            )
        tokens = sum(len(t.split()) if isinstance(t, str) else len(t) for t in texts)
        answer = {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return web.Response(body=orjson.dumps(answer), content_type="application/json")
