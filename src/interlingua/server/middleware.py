"""Pure-ASGI middleware: a request id on every response and one access-log line per request.

The id is put in ``scope["state"]["request_id"]`` for handlers (Anthropic error bodies
carry it) and sent back as both ``x-request-id`` (OpenAI's name) and ``request-id``
(Anthropic's), so either SDK exposes it to its caller.
"""

from __future__ import annotations

import logging
import os
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

access_log = logging.getLogger("interlingua.access")


def new_request_id() -> str:
    """``req_`` + 24 hex characters (96 random bits)."""
    return "req_" + os.urandom(12).hex()


class RequestIdMiddleware:
    """Assign a request id, add it to the response headers, and log one access line."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = new_request_id()
        scope.setdefault("state", {})["request_id"] = request_id
        raw_id = request_id.encode()
        started = time.perf_counter()
        status = 0

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", ()))
                headers.append((b"x-request-id", raw_id))
                headers.append((b"request-id", raw_id))
                message["headers"] = headers
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            if access_log.isEnabledFor(logging.INFO):
                access_log.info(
                    '%s "%s %s" %d %.1fms',
                    request_id,
                    scope["method"],
                    scope["path"],
                    status,
                    (time.perf_counter() - started) * 1000,
                )
