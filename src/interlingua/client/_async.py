"""AsyncClient: chat, stream and tool loops against any OpenAI- or Anthropic-style server.

The transport is aiohttp with one pooled ``ClientSession`` per client (connector limit
sized to the client's concurrency): DESIGN.md measured aiohttp at 13x httpx's throughput
at 50 concurrent requests, and a batch runner drives hundreds of calls in flight through
one client. Requests are built as a neutral :class:`~interlingua.core.Request` and rendered
by the dialect codec; answers are parsed by the same codec, so the client speaks exactly
what the gateway speaks, to interlingua or directly to a provider.

Every call goes through the same path: build (prompt forms, images encoded off-loop and
deduplicated) -> render once to bytes -> for each attempt: take a rate-limiter slot, POST,
map failures to typed errors -> on a retryable failure sleep (outside the slot) and try
again, at most ``max_retries`` times, each retry logged at debug with its reason and delay.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import aiohttp
import orjson

from ..core import Request, Response, ToolSpec
from ..core.tokens import estimate_request_tokens
from ..dialects import Dialect, get_dialect
from ..errors import describe_os_error
from ..limits import RateLimit, RateLimiter, Slot
from ..retry import DEFAULT_MAX_RETRIES, INITIAL_DELAY, MAX_DELAY, retry_delay, should_retry
from ._build import to_reasoning, to_response_format, to_stop, to_tool_choice, to_tools
from ._errors import APIConnectionError, APIError, APITimeoutError, error_for_status
from ._inputs import DEFAULT_IMAGE_CACHE_BYTES, InputError, Inputs
from ._outputs import ChatResult, better_usage, validate_structured
from ._stream import ChatStream, _finish, _request_id
from ._tools import DEFAULT_MAX_TURNS
from ._tools import run_tools as _run_tools

__all__ = ["DEFAULT_TIMEOUT", "AsyncClient", "CallOptions", "RawReply"]

log = logging.getLogger("interlingua.client")

T = TypeVar("T")

DEFAULT_TIMEOUT = (10.0, 600.0)
"""(connect, read) seconds; read bounds the silence between two reads, not the whole call."""
DEFAULT_CONNECTIONS = 256
_DEFAULT_BASE = {"openai": "http://127.0.0.1:8400/v1", "anthropic": "http://127.0.0.1:8400"}
_TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError)


@dataclass(frozen=True, slots=True)
class CallOptions:
    """Per-call result handling: ``think_tags``, and structured parsing (+ pydantic class)."""

    think_tags: bool = False
    structured: bool = False
    model_class: Any = None


@dataclass(frozen=True, slots=True)
class RawReply:
    """A 2xx answer as bytes (:meth:`AsyncClient.send_raw`), for relays and batch output."""

    status: int
    headers: dict[str, str]
    body: bytes
    request_id: str | None

    def json(self) -> Any:
        """The body decoded."""
        return orjson.loads(self.body)


def _timeouts(timeout: float | tuple[float, float] | None) -> tuple[float | None, float | None]:
    if timeout is None:
        return None, None
    if isinstance(timeout, int | float):
        return float(timeout), float(timeout)
    connect, read = timeout
    return connect, read


class AsyncClient:
    """An asyncio client for OpenAI Chat Completions or Anthropic Messages servers.

    >>> async with AsyncClient("http://127.0.0.1:8400/v1", model="gpt-4o-mini") as c:  # doctest: +SKIP
    ...     print((await c.chat("Hello")).text)

    ``dialect="openai"`` POSTs to ``{base_url}/chat/completions`` (base URL ending in
    ``/v1``); ``dialect="anthropic"`` to ``{base_url}/v1/messages`` with ``x-api-key``.
    ``rate_limit`` is a :class:`~interlingua.limits.RateLimit`, a dict of its fields, or a
    :class:`~interlingua.limits.RateLimiter` to share between clients. ``session`` injects
    an aiohttp session (then not closed by :meth:`aclose`).
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        dialect: str = "openai",
        model: str | None = None,
        timeout: float | tuple[float, float] | None = DEFAULT_TIMEOUT,
        max_retries: int = DEFAULT_MAX_RETRIES,
        rate_limit: RateLimit | Mapping[str, int | None] | RateLimiter | None = None,
        headers: Mapping[str, str] | None = None,
        max_image_side: int | None = None,
        image_cache_bytes: int = DEFAULT_IMAGE_CACHE_BYTES,
        inline_image_urls: bool = True,
        connections: int | None = None,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.dialect = dialect
        self._codec: Dialect = get_dialect(dialect)
        base = base_url or os.environ.get("INTERLINGUA_BASE_URL") or _DEFAULT_BASE[dialect]
        self.base_url = base.rstrip("/")
        self.model = model
        self.max_retries = max_retries
        self.retry_base, self.retry_cap = INITIAL_DELAY, MAX_DELAY
        #: retries made so far by this client (all calls), for progress displays
        self.retries = 0
        self._connect, self._read = _timeouts(timeout)
        self._timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self._connect, sock_read=self._read
        )
        self.limiter = _limiter(rate_limit)
        self._no_slot = Slot(self.limiter, None)
        self._connections = (
            connections or self.limiter.limits.max_concurrency or DEFAULT_CONNECTIONS
        )
        self.url, self._headers = self._endpoint(api_key, headers)
        self._session = session
        self._owns_session = session is None
        self._closed = False
        self.inputs = Inputs(
            max_side=max_image_side,
            cache_bytes=image_cache_bytes,
            fetch=self._fetch,
            inline_urls=inline_image_urls,
        )
        # Seams for tests: patch these instead of the wall clock or the RNG.
        self._sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep
        self._rand: Callable[[], float] = random.random

    def _endpoint(
        self, api_key: str | None, extra: Mapping[str, str] | None
    ) -> tuple[str, dict[str, str]]:
        # The dialect knows its URL and auth headers (Anthropic: with or without /v1).
        url, headers = self._codec.endpoint(self.base_url, api_key)
        headers["accept"] = "application/json"
        for key, value in (extra or {}).items():
            headers[key.lower()] = value
        return url, headers

    # --- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the pooled connections (an injected session is left open)."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None and self._owns_session:
            await session.close()

    def _get_session(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None or session.closed:
            if self._closed:
                raise RuntimeError("this client is closed; create a new one")
            connector = aiohttp.TCPConnector(
                limit=self._connections, limit_per_host=0, ttl_dns_cache=300
            )
            session = self._session = aiohttp.ClientSession(connector=connector)
            self._owns_session = True
        return session

    # --- building ----------------------------------------------------------------------

    async def prepare(
        self,
        prompt: Any,
        *,
        model: str | None = None,
        system: str | None = None,
        images: Iterable[Any] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        top_k: int | None = None,
        seed: int | None = None,
        stop: str | Sequence[str] | None = None,
        tools: Sequence[Any] | None = None,
        tool_choice: Any = None,
        parallel_tool_calls: bool | None = None,
        response_format: Any = None,
        reasoning: Any = None,
        extra_body: Mapping[str, Any] | None = None,
    ) -> Request:
        """The neutral request ``chat`` would send (images encoded). See :meth:`chat`."""
        name = model or self.model
        if not name:
            raise ValueError("model is required: pass model=... to the call or to the client")
        fmt, _ = to_response_format(response_format)
        return Request(
            model=name,
            messages=await self.inputs.messages(prompt, system=system, images=images),
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            seed=seed,
            stop=to_stop(stop),
            tools=to_tools(tools),
            tool_choice=to_tool_choice(tool_choice),
            parallel_tool_calls=parallel_tool_calls,
            response_format=fmt,
            reasoning=to_reasoning(reasoning),
            # The codec re-emits ``extra`` only to its own dialect: passing extra_body
            # fields (vLLM's ``top_k``, ``chat_template_kwargs``...) needs this marker.
            source_dialect=self.dialect if extra_body else "",
            extra=dict(extra_body or {}),
        )

    def _render(self, request: Request) -> dict[str, Any]:
        body = self._codec.render_request(request)
        if not request.stream:
            body.pop("stream", None)
            body.pop("stream_options", None)
        return body

    def _estimate(self, request: Request) -> int:
        """Tokens to reserve with the rate limiter: input estimate + max output (OpenAI
        counts a request against its token limit the same way). 0 without a token limit."""
        if self.limiter.limits.tokens_per_minute is None:
            return 0
        return estimate_request_tokens(request) + (request.max_tokens or 0)

    # --- calls -------------------------------------------------------------------------

    async def chat(
        self,
        prompt: Any,
        *,
        parse_json: bool = False,
        think_tags: bool = False,
        **kwargs: Any,
    ) -> ChatResult:
        """One model answer.

        ``prompt``: a string, a list of strings and images, ``{type, value}`` items, or
        full messages (see :mod:`interlingua.client._inputs`). Keyword arguments:
        ``model, system, images, max_tokens, temperature, top_p, top_k, seed, stop, tools,
        tool_choice, parallel_tool_calls, response_format`` (JSON schema dict or pydantic
        class; ``.parsed`` holds the result), ``reasoning`` (effort or budget),
        ``extra_body``; ``parse_json=True`` extracts JSON from the text into ``.parsed``;
        ``think_tags=True`` folds reasoning into ``.text`` as ``<think>…</think>``.
        """
        request = await self.prepare(prompt, **kwargs)
        return await self.send(
            request,
            parse_json=parse_json,
            think_tags=think_tags,
            response_format=kwargs.get("response_format"),
        )

    async def send(
        self,
        request: Request,
        *,
        parse_json: bool = False,
        think_tags: bool = False,
        response_format: Any = None,
    ) -> ChatResult:
        """Send a prepared neutral request (``stream`` is ignored: use :meth:`stream`)."""
        if request.stream:
            request = replace(request, stream=False)
        options = _options(request, parse_json, think_tags, response_format)
        body = orjson.dumps(self._render(request))
        estimate = self._estimate(request)

        async def attempt() -> ChatResult:
            async with self._slot(estimate) as slot:
                data, headers = await self._post(body)
                result = self._parse(data, headers, options)
                slot.settle(result.usage.total_tokens)
                return result

        return await self._retrying(attempt, "chat")

    def stream(
        self, prompt: Any, *, think_tags: bool = False, parse_json: bool = False, **kwargs: Any
    ) -> ChatStream:
        """A streaming call: ``async with client.stream(...) as s: async for event in s``.

        Takes the same arguments as :meth:`chat`; see :class:`ChatStream`.
        """

        async def prepare() -> tuple[Request, CallOptions]:
            request = await self.prepare(prompt, **kwargs)
            fmt = kwargs.get("response_format")
            return request, _options(request, parse_json, think_tags, fmt)

        return ChatStream(self, prepare)

    def stream_request(self, request: Request, *, think_tags: bool = False) -> ChatStream:
        """Stream a prepared neutral request."""

        async def prepare() -> tuple[Request, CallOptions]:
            return request, CallOptions(think_tags=think_tags)

        return ChatStream(self, prepare)

    async def run_tools(
        self,
        prompt: Any,
        tools: Mapping[str, Callable[..., Any]],
        *,
        max_turns: int = DEFAULT_MAX_TURNS,
        specs: Sequence[ToolSpec | Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        """Let the model call ``tools`` (name -> function) until it answers.

        Returns the final answer; ``result.messages`` is the transcript. See
        :mod:`interlingua.client._tools`.
        """
        system = kwargs.pop("system", None)
        images = kwargs.pop("images", None)
        messages = await self.inputs.messages(prompt, system=system, images=images)
        return await _run_tools(
            self.chat,
            messages,
            tools,
            max_turns=max_turns,
            specs=to_tools(specs) if specs is not None else None,
            **kwargs,
        )

    async def send_raw(
        self, body: Mapping[str, Any] | bytes, *, estimated_tokens: int = 0
    ) -> RawReply:
        """POST a ready body (this dialect's JSON) with retries and rate limits; no parsing.

        For relays and batch runners that must keep the server's exact answer. Errors are
        raised as typed exceptions like every other call.
        """
        data = body if isinstance(body, bytes) else orjson.dumps(body)

        async def attempt() -> RawReply:
            async with self._slot(estimated_tokens):
                raw, headers = await self._post(data)
                return RawReply(200, headers, raw, _request_id(headers))

        return await self._retrying(attempt, "request")

    # --- transport ---------------------------------------------------------------------

    @asynccontextmanager
    async def _slot(self, estimate: int) -> AsyncIterator[Slot]:
        if self.limiter.unlimited:
            yield self._no_slot  # settling it is a no-op
            return
        async with self.limiter.slot(estimate) as slot:
            yield slot

    async def _retrying(self, attempt: Callable[[], Awaitable[T]], what: str) -> T:
        for n in itertools.count():
            try:
                return await attempt()
            except APIError as exc:
                if n >= self.max_retries or not should_retry(exc):
                    raise
                delay = retry_delay(
                    n, exc.headers, self.retry_base, self.retry_cap, rand=self._rand
                )
                self.retries += 1
                log.debug(
                    "retrying %s to %s in %.2fs (retry %d of %d): %s",
                    what, self.url, delay, n + 1, self.max_retries, exc.message,
                )  # fmt: skip
                await self._sleep(delay)
        raise AssertionError("unreachable")

    async def _open(self, body: bytes) -> aiohttp.ClientResponse:
        """POST; a 2xx response (caller reads and finishes it) or raise the typed error."""
        session = self._get_session()
        try:
            resp = await session.post(
                self.url, data=body, headers=self._headers, timeout=self._timeout
            )
        except _TRANSPORT_ERRORS as exc:
            raise self._transport_error(exc) from exc
        if 200 <= resp.status < 300:
            return resp
        try:
            data = await resp.read()
        except _TRANSPORT_ERRORS:
            data = b""
        finally:
            _finish(resp)
        raise self._status_error(resp.status, data, resp.headers)

    async def _post(self, body: bytes) -> tuple[bytes, dict[str, str]]:
        resp = await self._open(body)
        try:
            data = await resp.read()
        except _TRANSPORT_ERRORS as exc:
            raise self._transport_error(exc) from exc
        finally:
            _finish(resp)
        return data, {k.lower(): v for k, v in resp.headers.items()}

    def _parse(self, data: bytes, headers: dict[str, str], options: CallOptions) -> ChatResult:
        request_id = _request_id(headers)
        try:
            raw = orjson.loads(data)
            response: Response = self._codec.parse_response(raw)
        except Exception as exc:  # the codec's errors, orjson's, a malformed shape
            detail = getattr(exc, "message", None) or str(exc)
            raise APIError(
                f"{self.url} answered 2xx with a body that could not be read: {detail}",
                status=200,
                body=data[:2000].decode("utf-8", "replace"),
                request_id=request_id,
            ) from exc
        result = ChatResult(better_usage(response, raw), raw, request_id, options.think_tags)
        if options.structured:
            result.parsed = validate_structured(response.text, options.model_class)
        return result

    def _status_error(self, status: int, data: bytes, raw_headers: Any) -> APIError:
        headers = {k.lower(): v for k, v in raw_headers.items()}
        parsed = self._codec.parse_error(status, data, headers)
        request_id = _request_id(headers)
        if request_id is None and isinstance(parsed.body, dict):
            body_id = parsed.body.get("request_id")  # Anthropic puts it in the body too
            request_id = body_id if isinstance(body_id, str) else None
        return error_for_status(
            status, parsed, url=self.url, request_id=request_id, headers=headers
        )

    def _transport_error(self, exc: BaseException) -> APIConnectionError:
        """A failure with no HTTP answer -> the typed error, saying what to do."""
        where = self.base_url
        if isinstance(exc, aiohttp.ConnectionTimeoutError):
            return APITimeoutError(
                f"timed out connecting to {where} after {self._connect}s — is the host "
                "reachable? raise timeout=(connect, read) if it is slow to accept"
            )
        if isinstance(exc, TimeoutError):
            return APITimeoutError(
                f"no data from {where} for {self._read}s (read timeout) — the server may be "
                "overloaded; raise timeout=(connect, read) for long generations"
            )
        if isinstance(exc, aiohttp.ClientConnectorError):
            return APIConnectionError(
                f"cannot reach {where}: {describe_os_error(exc.os_error)} — is the server running?"
            )
        detail = str(exc) or type(exc).__name__
        return APIConnectionError(
            f"connection to {where} failed: {detail} — the server closed the connection "
            "(crashed, restarted, or a proxy cut it)"
        )

    async def _fetch(self, url: str) -> bytes:
        """GET an image URL for inlining (one attempt; errors name the URL)."""
        session = self._get_session()
        try:
            async with session.get(url, timeout=self._timeout) as resp:
                if resp.status != 200:
                    raise InputError(f"cannot fetch image {url}: HTTP {resp.status}")
                return await resp.read()
        except _TRANSPORT_ERRORS as exc:
            raise InputError(f"cannot fetch image {url}: {exc or type(exc).__name__}") from exc


def _limiter(value: RateLimit | Mapping[str, int | None] | RateLimiter | None) -> RateLimiter:
    if isinstance(value, RateLimiter):
        return value
    if value is None:
        return RateLimiter()
    if isinstance(value, RateLimit):
        return RateLimiter.from_limits(value)
    return RateLimiter.from_limits(RateLimit(**dict(value)))


def _options(request: Request, parse_json: bool, think_tags: bool, fmt: Any) -> CallOptions:
    _, model_class = to_response_format(fmt) if fmt is not None else (None, None)
    fmt_type = request.response_format.type if request.response_format else "text"
    structured = parse_json or fmt_type in ("json_object", "json_schema")
    return CallOptions(think_tags=think_tags, structured=structured, model_class=model_class)
