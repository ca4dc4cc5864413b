"""The outermost ASGI layer: request ids, the access log, and hot-route dispatch.

Every request is counted on the config bundle it began on (``Live.users``,
server/reload.py), until its response has been sent to the end: a reload closes the
upstreams that left once the old bundle has no user.

Every response carries a request id, sent back as both ``x-request-id`` (OpenAI's name)
and ``request-id`` (Anthropic's) so either SDK exposes it to its caller; it is also put
in ``scope["state"]["request_id"]`` for handlers (Anthropic error bodies carry it) and in
the one access-log line per request.

The generation endpoints are dispatched here directly, by an exact (method, path) lookup,
instead of through Starlette's router and its request/response wrappers: they are the
gateway's hot path (see docs/performance.md), and their responses (``BytesResponse`` /
``StreamResponse``) take the id headers into their own header list, so no ``send``
wrapper is needed either. Everything else -- lifespan, model lists, health, 404s -- goes
to the Starlette app.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from contextvars import ContextVar
from typing import Any

from starlette.requests import Request as HTTPRequest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .asgi_io import BytesResponse, StreamResponse

access_log = logging.getLogger("interlingua.access")
log = logging.getLogger("interlingua.server")

#: ``scope["state"]`` keys shared with the connection (server/process/guard.py): the task running
#: the request, and the flag the connection sets when it cancels that task because its
#: client hung up before the answer began (uvicorn itself would let it run on for nobody)
TASK = "task"
CLIENT_GONE = "client_gone"

#: the id of the request being answered, for log lines deep in the request path (the
#: routing attempts: server/attempts.py) that get no scope; "-" outside a request
REQUEST_ID: ContextVar[str] = ContextVar("interlingua_request_id", default="-")

FastHandler = Callable[[HTTPRequest], Awaitable[BytesResponse | StreamResponse]]

# A random per-process prefix and a counter: unique across processes and restarts, and
# far cheaper per request than drawing fresh random bytes.
_PREFIX = "req_" + os.urandom(6).hex()
_COUNTER = itertools.count(1)


def serving_id() -> str:
    """The id of the request being served ("" outside one): what its errors name."""
    request_id = REQUEST_ID.get()
    return "" if request_id == "-" else request_id


def new_request_id() -> str:
    """``req_`` + 12 random hex characters (per process) + a 12-digit hex counter."""
    return f"{_PREFIX}{next(_COUNTER):012x}"


class Front:
    """Assign a request id, log one access line, and dispatch the hot routes directly."""

    def __init__(
        self,
        app: ASGIApp,
        fast_routes: Mapping[tuple[str, str], FastHandler],
        holder: Any,
    ) -> None:
        """``holder``: whose ``live`` bundle (server/reload.py: ``Live``, not imported:
        it sits above this module) each request is counted on; the handlers read the
        same one, before the request's first suspension."""
        self.app = app
        self.fast_routes = fast_routes
        self.holder = holder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                # (not counted: it lasts as long as the process, and would keep the first
                # config's bundle in use forever)
                await self.app(scope, receive, send)
                return
            socket_live = self.holder.live
            socket_live.users += 1
            try:
                await self.app(scope, receive, send)
            finally:
                socket_live.left()
            return
        # (counted here, in this coroutine's own try: a wrapping coroutine would cost
        # every request a frame)
        live = self.holder.live
        request_id = new_request_id()
        state = scope.setdefault("state", {})
        state["request_id"] = request_id
        token = REQUEST_ID.set(request_id)
        state[TASK] = asyncio.current_task()
        id_headers = [(b"x-request-id", request_id.encode()), (b"request-id", request_id.encode())]
        started = time.perf_counter()
        status = 0
        live.users += 1
        try:
            path = scope["path"]
            handler = self.fast_routes.get((scope["method"], path))
            if handler is None and path.endswith("/") and len(path) > 1:
                # POST /v1/messages/ is served as /v1/messages: a redirect would be built
                # from the client's Host header, and SDKs do not re-POST after a 307.
                handler = self.fast_routes.get((scope["method"], path.rstrip("/")))
            if handler is not None:
                response = await handler(HTTPRequest(scope, receive))
                response.headers = [*response.headers, *id_headers]
                status = response.status
                await response(scope, receive, send)
                return

            async def send_with_id(message: Message) -> None:
                nonlocal status
                if message["type"] == "http.response.start":
                    status = message["status"]
                    message["headers"] = [*message.get("headers", ()), *id_headers]
                await send(message)

            await self.app(scope, receive, send_with_id)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if not state.get(CLIENT_GONE) or task is None:
                raise
            task.uncancel()  # the connection's cancel, consumed: nobody awaits the answer
            status = 499
            log.info("client disconnected before the answer; its request was cancelled")
        finally:
            live.left()
            REQUEST_ID.reset(token)
            if access_log.isEnabledFor(logging.INFO):
                access_log.info(
                    '%s "%s %s" %d %.1fms',
                    request_id,
                    scope["method"],
                    scope["path"],
                    status,
                    (time.perf_counter() - started) * 1000,
                )
