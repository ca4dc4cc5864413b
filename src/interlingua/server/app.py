"""The Starlette application: routes, lifespan, and the thin endpoint handlers.

``create_app(config)`` builds everything from a :class:`~interlingua.config.Config`;
tests may pass ready-made ``upstreams`` (e.g. a scripted fake) instead. The app builds
the HTTP engines every upstream shares (:class:`~interlingua.upstreams.Transports`: they
open connections lazily, in the running loop) and the router up front; the lifespan starts
the upstreams and closes them, and the engines, at shutdown.

Endpoints: ``POST /v1/chat/completions`` (OpenAI), ``POST /v1/messages`` and
``POST /v1/messages/count_tokens`` (Anthropic; ``?beta=true`` is accepted and ignored),
``POST /v1/embeddings`` (OpenAI Embeddings: server/embeddings.py),
``POST /v1/completions`` (OpenAI text Completions: server/completions.py),
``POST /v1/responses`` (OpenAI Responses, with stored state: server/responses/state.py)
and its stored objects (``GET``/``DELETE /v1/responses/{id}``, ``GET
/v1/responses/{id}/input_items``: server/responses/api.py), ``GET /v1/models`` and ``GET
/v1/models/{id}`` (OpenAI shape, or Anthropic's when an ``anthropic-version`` header is
present: server/models_api.py), ``GET /health``,
and ``HEAD /`` (Claude Code pre-warms the connection with it); ``GET /v1/responses`` upgraded to a WebSocket
is the Responses API's socket mode (server/responses/websocket.py); ``/v1/files``, ``/v1/batches``: server/batches.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import orjson
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import ASGIApp

from ..config import Config
from ..dialects import Dialect, get_dialect
from ..dialects.anthropic import DIALECT as ANTHROPIC
from ..dialects.openai_responses import ResponsesDialect, Sealer
from ..dialects.relay_usage import estimate_tokens
from ..errors import InterlinguaError, InvalidRequestError, NotFoundError
from ..limits import SharedCounters
from ..upstreams import Transports, build_upstreams, check_config
from ..upstreams.base import Upstream
from ..usage import ResponseStore, open_store, open_usage_log
from ..usage.record import RecordSink
from .accounting import RECORD
from .admin_keys import AdminKeys
from .asgi_io import (
    JSON_CT,
    BytesResponse,
    StreamResponse,
    decode_json_object,
    plain_headers,
    read_body,
)
from .batches.api import BatchApis
from .budgets import SpendBook
from .completions import complete_text
from .drain import Drain, shutting_down_error
from .embeddings import embed
from .gateway import Gateway, internal_error
from .keys import ClientKey
from .middleware import REQUEST_ID, Front
from .models_api import ModelsApi
from .reload import ConfigSource, Live, Process, Reloader, build_live
from .responses.api import StoredResponses
from .responses.sealing_key import sealing_key
from .responses.state import respond
from .responses.websocket import ResponsesSocket
from .services import Services
from .stored_keys import stored_keys_for
from .telemetry import Telemetry, trace_stream
from .views.metrics import Metrics, metrics_routes
from .views.multiproc import multiprocess_dir
from .views.spend import SpendView
from .views.status_page import StatusPage

log = logging.getLogger("interlingua.server")
T = TypeVar("T")

OPENAI = get_dialect("openai")
RESPONSES = get_dialect("responses")


def _request_id(request: HTTPRequest) -> str:
    return str(request.scope.get("state", {}).get("request_id", ""))


def _client_dialect(request: HTTPRequest) -> Dialect:
    """Which dialect to answer a non-generation request in (errors, model lists)."""
    if "anthropic-version" in request.headers or request.url.path.startswith("/v1/messages"):
        return ANTHROPIC
    return OPENAI  # (the Responses API's errors have the Chat shape)


class Handlers:
    """The endpoint functions, over the bundle of the config being served (``live``:
    swapped whole by a reload, server/reload.py). A request reads ``self.live`` once, as
    it begins (before its first suspension, so the front layer counted it on the same
    bundle), and finishes on that bundle."""

    def __init__(
        self,
        live: Live,
        drain: Drain,
        store: ResponseStore | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.live = live
        self.drain = drain
        #: the stored Responses objects; None when ``responses.store`` is false
        self.store = store
        #: the requests' traces (``telemetry``; None: off, and the requests never look)
        self.telemetry = telemetry

    @property
    def gateway(self) -> Gateway:
        """The serving gateway (what a WebSocket session and the error pages use)."""
        return self.live.gateway

    def _check_auth(self, headers: Mapping[str, str]) -> ClientKey | None:
        """The key the request presents (None: the gateway is open); 401 when wrong."""
        return self.live.keys.authenticate(headers)

    async def answer(
        self, request: HTTPRequest, dialect: Dialect, work: Awaitable[T]
    ) -> T | BytesResponse:
        """``work``'s response, or the error it raised as a response in ``dialect``.

        The one place where an exception becomes a response: an InterlinguaError keeps
        its own status; anything else is a bug, logged with its traceback and answered
        as a 500 that names only the exception's type (``internal_error``).
        """
        # (the scope's path, not request.url.path: building the URL cost every request
        # ~300 bytecodes for a name that only an unexpected failure's log line shows)
        path = request.scope["path"]
        return await _as_response(self.live.gateway, dialect, work, _request_id(request), path)

    async def _generate(
        self, request: HTTPRequest, dialect: Dialect, endpoint: str | None = None
    ) -> BytesResponse | StreamResponse:
        """A request of one of the generation routes (``endpoint``: one of
        :data:`ENDPOINTS`; None: ``dialect``'s own generation endpoint)."""
        live = self.live
        if self.drain.draining:
            return self._shutting_down(request, dialect)
        try:
            if live.accounting is not None:
                response = await self.counted(
                    dialect,
                    plain_headers(request),
                    _request_id(request),
                    request.receive,
                    request=request,
                    live=live,
                    endpoint=endpoint,
                )
            else:
                work = self._generation(request, dialect, live, endpoint)
                path = request.scope["path"]
                response = await _as_response(
                    live.gateway, dialect, work, _request_id(request), path
                )
        except asyncio.CancelledError:
            # The drain's shutdown_timeout passed before the answer began (server/drain.py).
            task = asyncio.current_task()
            if not self.drain.expired or task is None:
                raise
            task.uncancel()
            return self._shutting_down(request, dialect)
        if type(response) is StreamResponse:
            response.drain = self.drain
        return response

    async def _generation(
        self, request: HTTPRequest, dialect: Dialect, live: Live, endpoint: str | None
    ) -> BytesResponse | StreamResponse:
        """The lean path, when nothing counts requests (:meth:`counted` otherwise)."""
        headers = plain_headers(request)
        key = live.keys.authenticate(headers)
        raw = await read_body(request, live.gateway.max_body, headers)
        body = decode_json_object(raw)
        # (a key without model globs allows all: two calls a request fewer)
        if key is not None and key.models and (model := _model_name(body)):
            key.check_model(model)
        if endpoint is not None:
            return await ENDPOINTS[endpoint](live.gateway, body, headers, request.receive)
        return await self._dispatch(live.gateway, dialect, body, headers, request.receive, key)

    async def counted(
        self,
        dialect: Dialect,
        headers: Mapping[str, str],
        request_id: str,
        receive: Any = None,
        *,
        request: HTTPRequest | None = None,
        body: dict[str, Any] | None = None,
        live: Live | None = None,
        batch: tuple[ClientKey | None, str] | None = None,
        endpoint: str | None = None,
    ) -> BytesResponse | StreamResponse:
        """A generation with its record kept and its key's limits applied: the body is
        read from ``request`` (HTTP) or given (a WebSocket frame; a batch line, with its
        ``batch``'s key and id). Errors come back as responses in ``dialect`` so that
        they are counted too. (One coroutine, not three: each await layer cost µs.)"""
        live = live or self.live
        accounting, gateway = live.accounting, live.gateway
        assert accounting is not None
        tab = accounting.open(request_id, dialect.name, endpoint)
        record = tab.record
        token = RECORD.set(record)
        trace = self.telemetry.begin(headers, record) if self.telemetry is not None else None
        try:
            try:
                if batch is None:
                    key = live.keys.authenticate(headers)
                else:
                    key, record.batch_id = batch
                if key is not None:
                    record.key = key.name
                if body is None:
                    assert request is not None
                    raw = await read_body(request, gateway.max_body, headers)
                    body = decode_json_object(raw)
                else:
                    raw = b""
                if trace is not None:
                    trace.body = body
                model = _model_name(body)
                record.model = model
                record.stream = body.get("stream") is True
                if key is not None:
                    if model and key.models:
                        key.check_model(model)
                    if key.limited:
                        tokens = _token_estimate(raw, body) if key.counts_tokens else 0
                        entry = key.admit_now(tokens)
                        if entry is None:  # (shared counts: Redis)
                            tab.admission = await key.admit(tokens)
                        else:
                            tab.key, tab.entry = key, entry
                if endpoint is not None:
                    response = await ENDPOINTS[endpoint](gateway, body, headers, receive)
                elif dialect is RESPONSES:
                    response = await respond(gateway, self.store, body, headers, receive, key=key)
                else:
                    response = await gateway.generate(dialect, body, headers, receive)
            except InterlinguaError as err:
                response = gateway.error_response(dialect, err, request_id)
            except Exception as exc:
                where = request.url.path if request is not None else "a WebSocket frame"
                log.exception("unexpected failure on %s", where)
                response = gateway.error_response(dialect, internal_error(exc), request_id)
        except BaseException as exc:
            # Cancelled before an answer: by the client leaving (the connection guard,
            # a WebSocket's hang-up), unless the shutdown's timeout did it.
            left = isinstance(exc, asyncio.CancelledError) and not self.drain.expired
            accounting.abandon(tab, client_left=left)
            raise
        finally:
            RECORD.reset(token)
        if trace is not None and isinstance(response, BytesResponse):
            trace.answer = response.body  # (its finish reasons, read when its span is made)
        response = accounting.close(tab, response, dialect)
        if trace is not None and isinstance(response, StreamResponse):
            trace_stream(response, trace)
        return response

    def _dispatch(
        self,
        gateway: Gateway,
        dialect: Dialect,
        body: dict[str, Any],
        headers: Mapping[str, str],
        receive: Any,
        key: ClientKey | None,
    ) -> Awaitable[BytesResponse | StreamResponse]:
        if dialect is RESPONSES:
            # the key owns what the request stores and is all it may continue
            return respond(gateway, self.store, body, headers, receive, key=key)
        return gateway.generate(dialect, body, headers, receive)

    async def responses_from_body(
        self, body: dict[str, Any], headers: Mapping[str, str], receive: Any = None
    ) -> BytesResponse | StreamResponse:
        """A decoded Responses request of a WebSocket frame (server/responses/websocket.py), after
        the connection's authentication: its key's model check and limits apply, and it
        is counted, per frame."""
        live = self.live
        if live.accounting is not None:
            return await self.counted(
                RESPONSES, headers, REQUEST_ID.get(), receive, body=body, live=live
            )
        key = live.keys.authenticate(headers)
        if key is not None and key.models and (model := _model_name(body)):
            key.check_model(model)
        return await respond(live.gateway, self.store, body, headers, receive, key=key)

    def _shutting_down(self, request: HTTPRequest, dialect: Dialect) -> BytesResponse:
        error = shutting_down_error()
        response = self.live.gateway.error_response(dialect, error, _request_id(request))
        response.headers.append((b"connection", b"close"))
        return response

    async def chat_completions(self, request: HTTPRequest) -> BytesResponse | StreamResponse:
        return await self._generate(request, OPENAI)

    async def messages(self, request: HTTPRequest) -> BytesResponse | StreamResponse:
        return await self._generate(request, ANTHROPIC)

    async def responses(self, request: HTTPRequest) -> BytesResponse | StreamResponse:
        return await self._generate(request, RESPONSES)

    async def embeddings(self, request: HTTPRequest) -> BytesResponse | StreamResponse:
        return await self._generate(request, OPENAI, EMBEDDINGS)

    async def completions(self, request: HTTPRequest) -> BytesResponse | StreamResponse:
        return await self._generate(request, OPENAI, COMPLETIONS)

    async def count_tokens(self, request: HTTPRequest) -> BytesResponse:
        return await self.answer(request, ANTHROPIC, self._count_tokens(request))

    async def _count_tokens(self, request: HTTPRequest) -> BytesResponse:
        headers = plain_headers(request)
        live = self.live
        key = live.keys.authenticate(headers)
        body = decode_json_object(await read_body(request, live.gateway.max_body, headers))
        parsed = ANTHROPIC.parse_count_tokens_request(body)
        if key is not None:
            key.check_model(parsed.model)
        count = await live.gateway.count_tokens(parsed)
        return BytesResponse(orjson.dumps({"input_tokens": count}))

    async def health(self, request: HTTPRequest) -> Any:
        if self.drain.draining:
            return BytesResponse(
                b'{"status":"draining"}', 503, [JSON_CT, (b"connection", b"close")]
            )
        return BytesResponse(b'{"status":"ok"}')

    async def root(self, request: HTTPRequest) -> Any:
        return BytesResponse(b'{"name":"interlingua","status":"ok"}')


_STARTED = int(time.time())


async def _as_response(
    gateway: Gateway, dialect: Dialect, work: Awaitable[T], request_id: str, where: str
) -> T | BytesResponse:
    """``work``'s response, or the error it raised as a response in ``dialect`` (see
    :meth:`Handlers.answer`)."""
    try:
        return await work
    except InterlinguaError as err:
        return gateway.error_response(dialect, err, request_id)
    except Exception as exc:
        log.exception("unexpected failure on %s", where)
        return gateway.error_response(dialect, internal_error(exc), request_id)


def _token_estimate(raw: bytes, body: dict[str, Any]) -> int:
    """A request's tokens as a key's ``tpm`` reserves them, by the one rule of the token
    limits (:func:`~interlingua.dialects.relay_usage.estimate_tokens`): its bytes (the
    decoded body's, for a WebSocket frame) and the output limit it sets (already decoded:
    no second parse)."""
    return estimate_tokens(len(raw) if raw else len(orjson.dumps(body)), body)


def _model_name(body: dict[str, Any]) -> str:
    """The body's ``model`` (the gateway's own check of it comes later: "" here)."""
    model = body.get("model")
    return model if isinstance(model, str) else ""


Endpoint = Callable[[Handlers, HTTPRequest], Awaitable[BytesResponse | StreamResponse]]

#: The endpoints on the generation routes' machinery (keys, limits, accounting) that are
#: not a dialect's generation: their name (the usage log's ``endpoint``) and their work.
EMBEDDINGS = "embeddings"
COMPLETIONS = "completions"
ENDPOINTS: dict[str, Callable[..., Awaitable[BytesResponse | StreamResponse]]] = {
    EMBEDDINGS: embed,
    COMPLETIONS: complete_text,
}

#: The generation endpoints (all POST) and the handler of each. The one table both the
#: fast dispatch (server/middleware.py:Front, which serves them) and the Starlette router
#: are built from: Starlette still needs them listed so that another method on one of
#: these paths is a 405 with ``Allow: POST``, not a 404.
GENERATION_ROUTES: dict[str, Endpoint] = {
    "/v1/chat/completions": Handlers.chat_completions,
    "/chat/completions": Handlers.chat_completions,
    "/v1/messages": Handlers.messages,
    "/v1/messages/count_tokens": Handlers.count_tokens,
    "/v1/responses": Handlers.responses,
    "/responses": Handlers.responses,
    "/v1/embeddings": Handlers.embeddings,
    "/embeddings": Handlers.embeddings,
    "/v1/completions": Handlers.completions,
    "/completions": Handlers.completions,
}


class _NotFoundAsError:
    """Starlette's 404/405 pages rendered as the caller's dialect error instead of text."""

    def __init__(self, handlers: Handlers) -> None:
        self.handlers = handlers

    async def __call__(self, request: HTTPRequest, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        dialect = _client_dialect(request)
        error: InterlinguaError
        if exc.status_code == 404:
            message = f"Unknown request URL: {request.method} {request.url.path}."
            error = NotFoundError(message, code="unknown_url")
        else:
            allow = (exc.headers or {}).get("Allow", "")
            message = f"Method not allowed: {request.method} {request.url.path} (allowed: {allow})."
            error = InvalidRequestError(message, status=exc.status_code, code="method_not_allowed")
        rendered = self.handlers.gateway.error_response(dialect, error, _request_id(request))
        # Starlette's exception handlers must return its own Response type.
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in rendered.headers}
        # The status is Starlette's (404/405), not the dialect's: Anthropic renders every
        # invalid request as 400. A 405 must carry Allow (RFC 9110 15.5.6).
        headers.update(exc.headers or {})
        return Response(rendered.body, exc.status_code, headers)


def create_app(
    config: Config,
    *,
    upstreams: dict[str, Upstream] | None = None,
    transports: Transports | None = None,
    drain: Drain | None = None,
    record_sinks: Sequence[RecordSink] = (),
    source: ConfigSource | None = None,
) -> ASGIApp:
    """Build the gateway ASGI app.

    ``upstreams`` replaces building them from ``config.upstreams`` (tests pass fakes);
    ``transports`` replaces the app's own HTTP engines (the caller closes them); ``drain``
    is the shutdown state the server's connection guard sets (server/process/serve.py;
    default: one never set); ``record_sinks`` are told of every finished generation
    request besides the usage log and the metrics (usage/record.py); ``source`` is where
    ``config`` came from: given, SIGHUP and ``POST /admin/reload`` read it again
    (server/reload.py; ``serve`` gives it, in the process's main thread).
    """
    check_config(config)  # the kinds' half of validation: refuse a bad entry before serving
    # state.url: limits and cooldowns counted in Redis with the other replicas (nothing
    # connects before the first request, in the worker's own loop)
    counters = SharedCounters(config.state.url) if config.state.url else None
    own_transports = Transports() if upstreams is None and transports is None else None
    if upstreams is None:
        upstreams = build_upstreams(config, transports or own_transports, counters)
    # GET /metrics (Prometheus) and GET /ui, /ui/data (the status page) are both off with
    # ``metrics: false`` (then /metrics is a 404); both are RecordSinks.
    metrics = Metrics(upstreams) if config.metrics else None
    # telemetry: each request's spans, made from its record when it ends (a sink too)
    telemetry = Telemetry(config) if config.telemetry is not None else None
    process = Process(
        transports or own_transports,
        counters,
        ResponsesDialect(Sealer(sealing_key(config.responses))),
        observe=_observer(metrics, telemetry),
        continued=metrics.continued if metrics is not None else None,
        spend=SpendBook(counters),  # (the budgets' spend: shared like the key limits)
    )
    router = process.router(config, upstreams)
    stored = config.responses
    store = open_store(stored.url, stored.expire_after) if stored.store else None
    usage_log = open_usage_log(config.usage)  # (None with `usage: false`)

    def authorize(headers: Mapping[str, str]) -> ClientKey | None:
        return handlers.live.keys.authenticate(headers)  # (the keys serving now)

    status_page = StatusPage(router, authorize, share_dir=multiprocess_dir()) if metrics else None
    sinks = (usage_log, metrics, status_page, telemetry)
    process.sinks = [*record_sinks, *(s for s in sinks if s is not None)]
    process.usage_log = usage_log
    process.stored = stored_keys_for(config, usage_log, counters)  # (with an admin section)
    handlers = Handlers(
        build_live(config, process, upstreams, router=router), drain or Drain(), store, telemetry
    )
    if status_page is not None:  # (spend from the usage log, budgets of the keys serving)
        status_page.spend = SpendView(usage_log, lambda: handlers.live.keys.budgeted())
    reloader = Reloader(source, handlers, process, _swapped(status_page, metrics, telemetry))
    services = Services(reloader, counters, usage_log, store, own_transports)
    services.telemetry = telemetry
    services.files = BatchApis.build(config, handlers)  # (the Files and Batch APIs)
    generation = _generation(handlers)
    app = Starlette(
        routes=[
            *_routes(handlers, generation, metrics, status_page),
            *services.files.routes(),
            Route("/admin/reload", reloader.admin_reload, methods=["POST"]),
            *AdminKeys(handlers, process.stored).routes(),
        ],
        lifespan=services.lifespan,
        exception_handlers={HTTPException: _NotFoundAsError(handlers)},
    )
    # No redirects to the slash-less path: the Location would come from the client's Host
    # header. The generation routes answer with or without the slash (server/middleware.py).
    app.router.redirect_slashes = False
    fast = {("POST", path): handler for path, handler in generation.items()}
    return Front(app, fast, handlers)


def _observer(
    metrics: Metrics | None, telemetry: Telemetry | None
) -> Callable[[str, str], None] | None:
    """The router's attempt observer: the metrics' count, the telemetry's attempt span."""
    if telemetry is None:
        return metrics.attempt if metrics is not None else None
    if metrics is None:
        return telemetry.observe
    count, trace = metrics.attempt, telemetry.observe

    def observe(upstream: str, outcome: str) -> None:
        count(upstream, outcome)
        trace(upstream, outcome)

    return observe


def _swapped(
    status_page: StatusPage | None, metrics: Metrics | None, telemetry: Telemetry | None
) -> Callable[[Live], None]:
    """What a reload tells the status page (the router it now shows), the metrics (the
    upstreams whose waiting lines they gauge) and the telemetry (the upstreams' kinds)."""

    def swapped(live: Live) -> None:
        if status_page is not None:
            status_page.router = live.gateway.router
        if metrics is not None:
            metrics.upstreams(live.upstreams)
        if telemetry is not None:
            telemetry.upstreams(live.config)

    return swapped


def _generation(handlers: Handlers) -> dict[str, Callable[[HTTPRequest], Awaitable[Any]]]:
    """The generation paths and their handlers, as bound methods: Starlette calls a
    Route's endpoint as a request handler only when it is a function or method (else it
    is taken for an ASGI app)."""
    return {path: endpoint.__get__(handlers) for path, endpoint in GENERATION_ROUTES.items()}


def _routes(
    handlers: Handlers,
    generation: Mapping[str, Callable[[HTTPRequest], Awaitable[Any]]],
    metrics: Metrics | None,
    status_page: StatusPage | None,
) -> list[BaseRoute]:
    """The route table (the generation routes are served by server/middleware.py:Front
    first: Starlette's copies of them answer another method with a 405)."""
    socket = ResponsesSocket(handlers)
    return [
        *(Route(path, handler, methods=["POST"]) for path, handler in generation.items()),
        *StoredResponses(handlers.store, handlers.answer, handlers._check_auth).routes(),
        *ModelsApi(
            lambda: handlers.live.gateway.router,
            handlers.answer,
            handlers._check_auth,
            _client_dialect,
            _STARTED,
        ).routes(),
        Route("/health", handlers.health, methods=["GET"]),
        Route("/", handlers.root, methods=["GET", "HEAD"]),
        *metrics_routes(metrics),
        *(status_page.routes() if status_page is not None else ()),
        # Codex and the openai SDK's responses.connect() (the server's ``ws`` protocol:
        # server/process/serve.py; a server without one answers the upgrade as a plain GET)
        WebSocketRoute("/v1/responses", socket),
        WebSocketRoute("/responses", socket),
    ]


__all__ = ["GENERATION_ROUTES", "create_app"]
