"""AsyncClient: chat, stream and tool loops against any OpenAI- or Anthropic-style server.

Requests are built as a neutral :class:`~interlingua.core.Request` and rendered by the
dialect codec; answers are parsed by the same codec, so the client speaks exactly what the
gateway speaks, to interlingua or directly to a provider.

Every call goes through the same path: build (prompt forms, images encoded off-loop and
deduplicated) -> render once to bytes -> for each attempt: take a rate-limiter slot, POST,
map failures to typed errors -> on a retryable failure sleep (outside the slot) and try
again, at most ``max_retries`` times, each retry logged at debug with its reason and delay.

The parts: :mod:`._transport` sends bytes and maps failures (one pool of connections per
client, sized to the client's concurrency, because a batch runner drives hundreds of
calls in flight through one client: the lean HTTP/1.1 pool of :mod:`interlingua.http_pool`
for a plain ``http://`` server, aiohttp for ``https://`` and proxies, each chosen by
measurement:
docs/decisions.md, "The client posts through the same pool to `http://` servers" and
"aiohttp, not httpx, on the hot paths"); :mod:`._policy` holds the retries and rate
limits; :class:`~._stream.ChatStream` runs a streaming call with both.
"""

from __future__ import annotations

import inspect
import os
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

import aiohttp
import orjson

from ..core import Request, ToolSpec
from ..dialects import Dialect, get_dialect
from ..dialects.openai_chat import MAX_TOKENS_FIELDS
from ..limits import RateLimit, RateLimiter
from ..retry import DEFAULT_MAX_RETRIES
from ._answers import UNREAD, RawReply, empty_error, read_answer
from ._build import (
    render_supported,
    to_output_audio,
    to_reasoning,
    to_response_format,
    to_stop,
    to_tool_choice,
    to_tools,
)
from ._embed import DEFAULT_BATCH_SIZE, Embedder, embed_all, embed_settings, embeddings_url
from ._generate import Batch, Failure, generate_iter, generate_list
from ._images import release_memory
from ._inputs import DEFAULT_IMAGE_CACHE_BYTES, Inputs
from ._outputs import (
    CallOptions,
    ChatResult,
    call_options,
    is_empty_answer,
    validate_structured,
)
from ._policy import CLIENT_LOG, AnyLogger, Policy, PolicyField, limiter_for
from ._settings import RESULT_KEYS, check_keys, merge, request_defaults, with_defaults
from ._stream import ChatStream
from ._tools import DEFAULT_MAX_TURNS
from ._tools import run_tools as _run_tools
from ._transport import (
    DEFAULT_CONNECTIONS,
    DEFAULT_TIMEOUT,
    HttpTransport,
    Transport,
    request_id,
)

__all__ = ["CHAT_KEYS", "DEFAULT_TIMEOUT", "AsyncClient", "CallOptions", "RawReply"]

_DEFAULT_BASE = {
    "openai": "http://127.0.0.1:8400/v1",
    "anthropic": "http://127.0.0.1:8400",
    "responses": "http://127.0.0.1:8400/v1",
}


class AsyncClient:
    """An asyncio client for OpenAI Chat Completions or Anthropic Messages servers.

    >>> async with AsyncClient("http://127.0.0.1:8400/v1", model="gpt-4o-mini") as c:  # doctest: +SKIP
    ...     print((await c.chat("Hello")).text)

    ``dialect="openai"`` POSTs to ``{base_url}/chat/completions`` (base URL ending in
    ``/v1``); ``dialect="anthropic"`` to ``{base_url}/v1/messages`` with ``x-api-key``;
    ``dialect="responses"`` to ``{base_url}/responses`` (the OpenAI Responses API).
    ``rate_limit`` is a :class:`~interlingua.limits.RateLimit`, a dict of its fields, or a
    :class:`~interlingua.limits.RateLimiter` to share between clients. ``session`` injects
    an aiohttp session (then not closed by :meth:`aclose`).

    ``transport`` replaces the HTTP layer (a :class:`~interlingua.client._transport.Transport`,
    e.g. a fake in tests); it then owns the URL, headers, timeouts and connections, so
    ``base_url``, ``api_key``, ``headers``, ``timeout``, ``connections`` and ``session``
    are not used. Like an injected session, it is not closed by :meth:`aclose`.

    ``drop_unsupported=True`` sends a request without the settings its dialect has no
    field for (``logprobs``, ``min_p``, ``repetition_penalty``, audio output toward
    ``anthropic``; ``top_k`` and those toward ``responses``) instead of raising
    :class:`~interlingua.client.UnsupportedParameterError`; a call may override it.

    ``defaults`` are settings merged into every call, the call's own winning
    (``defaults={"temperature": 0.2, "max_tokens": 512}``; see
    :mod:`interlingua.client._settings`).

    ``logger`` (default: the ``interlingua.client`` logger) receives a WARNING for every
    retry of a call after its first and for a call that fails for good, naming the
    status, request id and attempts (:mod:`interlingua.client._policy`).
    """

    max_retries: PolicyField[int] = PolicyField("max_retries")
    retry_base: PolicyField[float] = PolicyField("retry_base")
    retry_cap: PolicyField[float] = PolicyField("retry_cap")
    #: retries made so far by this client (all calls), for progress displays
    retries: PolicyField[int] = PolicyField("retries")
    #: of which: empty answers and unreadable 2xx bodies retried (``retry_on_empty``)
    empty_retries: PolicyField[int] = PolicyField("empty_retries")
    unreadable_retries: PolicyField[int] = PolicyField("unreadable_retries")
    limiter: PolicyField[RateLimiter] = PolicyField("limiter")
    #: where retries and failures are logged (the ``logger`` argument)
    logger: PolicyField[AnyLogger] = PolicyField("log")
    _sleep: PolicyField[Callable[[float], Awaitable[Any]]] = PolicyField("sleep")
    _rand: PolicyField[Callable[[], float]] = PolicyField("rand")

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
        transport: Transport | None = None,
        max_tokens_field: str | None = None,
        drop_unsupported: bool = False,
        defaults: Mapping[str, Any] | None = None,
        logger: AnyLogger | None = None,
    ) -> None:
        if max_tokens_field is not None and max_tokens_field not in MAX_TOKENS_FIELDS:
            raise ValueError(f"max_tokens_field must be one of {', '.join(MAX_TOKENS_FIELDS)}")
        check_keys(defaults or (), CHAT_KEYS, "defaults")
        #: settings merged into every call (the call's own win)
        self.defaults: dict[str, Any] = dict(defaults or {})
        #: (OpenAI Chat only) the field the output limit is sent in; None: by model name,
        #: ``max_completion_tokens`` for the o-series and gpt-5 models, else ``max_tokens``
        self.max_tokens_field = max_tokens_field
        #: drop settings the dialect lacks instead of raising (see the class docstring)
        self.drop_unsupported = drop_unsupported
        self.dialect = dialect
        self._codec: Dialect = get_dialect(dialect)
        self.model = model
        limiter = limiter_for(rate_limit)
        if transport is not None and session is not None:
            raise ValueError("pass either transport= or session=, not both")
        self._owns_transport = transport is None
        connections = connections or limiter.limits.max_concurrency or DEFAULT_CONNECTIONS
        #: calls ``generate`` keeps in flight by default (the connection pool's size)
        self.concurrency = connections
        if transport is None:
            base = base_url or os.environ.get("INTERLINGUA_BASE_URL") or _DEFAULT_BASE[dialect]
            transport = HttpTransport(
                self._codec, base, api_key, headers=headers, timeout=timeout,
                connections=connections, session=session,
            )  # fmt: skip
        self._transport: Transport = transport
        self.base_url, self.url = transport.base_url, transport.url
        self._policy = Policy(limiter, max_retries, self.url, logger or CLIENT_LOG)
        self.inputs = Inputs(
            max_side=max_image_side,
            cache_bytes=image_cache_bytes,
            fetch=self._transport.get,
            inline_urls=inline_image_urls,
        )

    # --- lifecycle ---------------------------------------------------------------------

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the pooled connections (an injected session or transport is left open)."""
        if self._owns_transport:
            await self._transport.aclose()

    def clear_cache(self) -> None:
        """Drop the cached image encodings and hand the memory back (``generate`` and the
        batch runner do it when a batch ends; see :func:`~._images.release_memory`)."""
        self.inputs.cache.clear()
        release_memory()

    # --- building ----------------------------------------------------------------------

    def _settings(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """A call's request settings over the client's defaults (the result options of
        the defaults are read by :meth:`_flag`)."""
        if not self.defaults:
            return dict(kwargs)
        return merge(request_defaults(self.defaults), kwargs)

    def _flag(self, value: bool | None, name: str, default: bool = False) -> bool:
        """A result option: the call's, else the client's default, else ``default``."""
        if value is not None:
            return value
        return bool(self.defaults.get(name, default))

    @with_defaults
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
        logprobs: bool = False,
        top_logprobs: int | None = None,
        min_p: float | None = None,
        repetition_penalty: float | None = None,
        modalities: Sequence[str] | None = None,
        audio: Mapping[str, Any] | None = None,
        drop_unsupported: bool | None = None,
        paths_as_images: bool = False,
    ) -> Request:
        """The neutral request ``chat`` would send (images encoded). See :meth:`chat`."""
        name = model or self.model
        if not name:
            raise ValueError("model is required: pass model=... to the call or to the client")
        fmt, _ = to_response_format(response_format)
        messages = await self.inputs.messages(
            prompt, system=system, images=images, paths_as_images=paths_as_images
        )
        request = Request(
            model=name,
            messages=messages,
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
            logprobs=logprobs or top_logprobs is not None,
            top_logprobs=top_logprobs,
            min_p=min_p,
            repetition_penalty=repetition_penalty,
            output_audio=to_output_audio(modalities, audio),
        )
        drop = self.drop_unsupported if drop_unsupported is None else drop_unsupported
        if drop:
            request, _ = render_supported(self._codec, request, drop=True)
        return request

    def render(self, request: Request) -> dict[str, Any]:
        """The JSON body this client sends for ``request`` (Chat: the output limit in the
        field the model takes, see ``max_tokens_field``). A setting the dialect has no
        field for raises :class:`~interlingua.client.UnsupportedParameterError`, or is
        left out with ``drop_unsupported``."""
        _, body = render_supported(self._codec, request, self.drop_unsupported)
        self._codec.place_output_limit(body, self.max_tokens_field)
        return body

    def _render(self, request: Request) -> dict[str, Any]:
        body = self.render(request)
        if not request.stream:
            self._codec.drop_stream(body)  # (extra_body may have asked for one)
        return body

    # --- calls -------------------------------------------------------------------------

    async def chat(
        self,
        prompt: Any,
        *,
        parse_json: bool | None = None,
        think_tags: bool | None = None,
        retry_on_empty: bool | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        """One model answer.

        ``prompt``: a string, a list of strings and images, ``{type, value}`` items, or
        full messages (see :mod:`interlingua.client._inputs`). Keyword arguments:
        ``model, system, images, max_tokens, temperature, top_p, top_k, min_p,
        repetition_penalty, seed, stop, tools, tool_choice, parallel_tool_calls,
        response_format`` (JSON schema dict or pydantic class; ``.parsed`` holds the
        result), ``reasoning`` (effort or budget), ``logprobs`` / ``top_logprobs``
        (``.logprobs`` holds them), ``modalities`` + ``audio`` (spoken answer in
        ``.audio``), ``drop_unsupported``, ``extra_body``, ``paths_as_images`` (strings
        naming image files are images); ``parse_json=True`` extracts JSON from the text
        into ``.parsed``; ``think_tags=True`` folds reasoning into ``.text`` as
        ``<think>\\n…\\n</think>\\n\\n``; ``retry_on_empty=True`` retries an answer with
        no text, tool call or refusal (within ``max_retries``) and an unreadable 2xx body
        (once), raising :class:`~interlingua.client.EmptyAnswerError` /
        :class:`~interlingua.client.UnreadableAnswerError` when they persist. Unset
        options come from the client's ``defaults``.
        """
        settings = self._settings(kwargs)
        request = await self.prepare(prompt, **settings)
        return await self.send(
            request,
            parse_json=parse_json,
            think_tags=think_tags,
            response_format=settings.get("response_format"),
            retry_on_empty=retry_on_empty,
        )

    async def send(
        self,
        request: Request,
        *,
        parse_json: bool | None = None,
        think_tags: bool | None = None,
        response_format: Any = None,
        retry_on_empty: bool | None = None,
    ) -> ChatResult:
        """Send a prepared neutral request (``stream`` is ignored: use :meth:`stream`).

        The result options default to the client's ``defaults``; the request is sent as
        it is (its settings were fixed when it was prepared).
        """
        if request.stream:
            request = replace(request, stream=False)
        options = self._options(request, parse_json, think_tags, response_format, retry_on_empty)
        body = orjson.dumps(self._render(request))
        policy, transport = self._policy, self._transport
        estimate = policy.estimate(request)
        started = time.perf_counter()

        async def attempt() -> ChatResult:
            async with policy.slot(estimate) as slot:
                data, headers = await transport.post(body)
                arrived = time.perf_counter()
                result = self._parse(data, headers, options, request)
                slot.settle(result.usage.total_tokens)
            result.ttft = arrived - started
            result.latency = time.perf_counter() - started
            if options.retry_on_empty and is_empty_answer(result.response):
                raise empty_error(self.url, result, data)
            return result

        return await policy.retrying(attempt, "chat")

    def stream(
        self,
        prompt: Any,
        *,
        think_tags: bool | None = None,
        parse_json: bool | None = None,
        **kwargs: Any,
    ) -> ChatStream:
        """A streaming call: ``async with client.stream(...) as s: async for event in s``.

        Takes the same arguments as :meth:`chat` but ``retry_on_empty`` (a stream is
        never retried once its first byte has arrived); see :class:`ChatStream`.
        """

        async def prepare() -> tuple[Request, CallOptions]:
            settings = self._settings(kwargs)
            settings.pop("retry_on_empty", None)
            request = await self.prepare(prompt, **settings)
            fmt = settings.get("response_format")
            return request, self._options(request, parse_json, think_tags, fmt, False)

        return ChatStream(self._transport, self._codec, self._policy, prepare, self.render)

    def stream_request(self, request: Request, *, think_tags: bool | None = None) -> ChatStream:
        """Stream a prepared neutral request."""

        async def prepare() -> tuple[Request, CallOptions]:
            return request, CallOptions(think_tags=self._flag(think_tags, "think_tags"))

        return ChatStream(self._transport, self._codec, self._policy, prepare, self.render)

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
        kwargs = self._settings(kwargs)
        system = kwargs.pop("system", None)
        images = kwargs.pop("images", None)
        paths = bool(kwargs.pop("paths_as_images", False))
        messages = await self.inputs.messages(
            prompt, system=system, images=images, paths_as_images=paths
        )
        return await _run_tools(
            self.chat,
            messages,
            tools,
            max_turns=max_turns,
            specs=to_tools(specs) if specs is not None else None,
            **kwargs,
        )

    async def send_raw(
        self,
        body: Mapping[str, Any] | bytes,
        *,
        estimated_tokens: int = 0,
        retry_on_empty: bool = False,
        log_failure: bool = True,
        endpoint: str | None = None,
    ) -> RawReply:
        """POST a ready body (this dialect's JSON) with retries and rate limits; no parsing.

        For relays and batch runners that must keep the server's exact answer. Errors are
        raised as typed exceptions like every other call. ``retry_on_empty=True`` reads
        the answer to judge it as :meth:`chat` does (an empty answer and an unreadable
        body are retried); the reply then carries the decoded body (:meth:`RawReply.json`)
        and, when judging it took the codec's full reading, the neutral ``response``.
        ``log_failure=False``: a caller that logs failures itself, with its own context
        (the batch runner names the line), gets no WARNING from the client for them.
        ``endpoint="embeddings"`` POSTs to ``{base_url}/embeddings`` instead (another
        endpoint of an OpenAI-style server; ``retry_on_empty`` judges chat answers only).
        """
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        policy, transport = self._policy, self._transport
        post = transport.post
        if endpoint is not None:
            url = embeddings_url(self.dialect, self.base_url, endpoint)
            post = partial(transport.post_to, url)

        async def attempt() -> RawReply:
            async with policy.slot(estimated_tokens):
                raw, headers = await post(data)
            rid = request_id(headers)
            if not retry_on_empty:
                return RawReply(200, headers, raw, rid)
            return self._judge(raw, headers, rid)

        return await policy.retrying(attempt, "request", log_failure)

    def _judge(self, raw: bytes, headers: dict[str, str], rid: str | None) -> RawReply:
        """``send_raw``'s reply once judged an answer (else the retryable error)."""
        try:
            decoded = orjson.loads(raw)
        except orjson.JSONDecodeError:
            decoded = UNREAD  # read_answer says why, in its words
        if decoded is not UNREAD and self._codec.plainly_answered(decoded):
            return RawReply(200, headers, raw, rid, None, decoded)  # no full reading needed
        decoded, response = read_answer(self._codec, self.url, raw, rid, True, decoded=decoded)
        if is_empty_answer(response):
            raise empty_error(self.url, ChatResult(response, decoded, rid), raw)
        return RawReply(200, headers, raw, rid, response, decoded)

    # --- batches -----------------------------------------------------------------------

    async def generate(
        self,
        items: Iterable[Any],
        *,
        concurrency: int | None = None,
        progress: bool = False,
        on_error: str = "return",
        **defaults: Any,
    ) -> list[ChatResult | Failure]:
        """One answer per item, in input order, with up to ``concurrency`` calls in flight.

        An item is what :meth:`chat` takes as its prompt (a string, a list of content
        items, messages) or a dict of :meth:`chat` keyword arguments holding ``prompt``
        (or ``messages``): see :mod:`interlingua.client._generate`. ``defaults`` are chat
        settings for every item (an item's own win; the client's ``defaults`` under
        both); ``retry_on_empty`` is on unless they say otherwise. ``concurrency``
        defaults to the client's (its ``rate_limit`` max_concurrency, else its
        connection pool); rate limits apply as to every call. ``progress=True`` shows a
        tqdm bar. When the batch ends the image cache is dropped (:meth:`clear_cache`). A failed item is a :class:`~interlingua.client.Failure` (the typed
        error, attempts, request id) with ``on_error="return"``; ``on_error="raise"``
        cancels the rest and raises the first failure's error.
        """
        return await generate_list(self._batch(items, concurrency, progress, on_error, defaults))

    def generate_iter(
        self,
        items: Iterable[Any],
        *,
        concurrency: int | None = None,
        progress: bool = False,
        on_error: str = "return",
        **defaults: Any,
    ) -> AsyncGenerator[tuple[int, ChatResult | Failure], None]:
        """:meth:`generate` as ``(index, result)`` pairs in completion order.

        ``items`` may be any iterable, a generator too: it is read as calls free up, so
        a huge input is never all in memory. Leaving the loop early cancels the calls in
        flight.
        """
        return generate_iter(self._batch(items, concurrency, progress, on_error, defaults))

    def _batch(
        self,
        items: Iterable[Any],
        concurrency: int | None,
        progress: bool,
        on_error: str,
        defaults: dict[str, Any],
    ) -> Batch[ChatResult]:
        """A batch of ``chat`` calls, its arguments checked."""
        check_keys(defaults, CHAT_KEYS, "generate")
        width = self._width(concurrency, on_error)
        settings = dict(defaults)
        if "retry_on_empty" not in self.defaults:
            settings.setdefault("retry_on_empty", True)
        return Batch(
            self.chat, items, settings, width, CHAT_KEYS, progress,
            raise_first=on_error == "raise", retries=lambda: self._policy.retries,
            ended=self.clear_cache,
        )  # fmt: skip

    def _width(self, concurrency: int | None, on_error: str) -> int:
        """A batch's calls in flight, its ``on_error`` checked."""
        if on_error not in ("return", "raise"):
            raise ValueError(f'on_error must be "return" or "raise", got {on_error!r}')
        width = self.concurrency if concurrency is None else concurrency
        if width < 1:
            raise ValueError("concurrency must be at least 1")
        return width

    async def embed(
        self,
        texts: Iterable[str | list[int]],
        *,
        model: str | None = None,
        dimensions: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        concurrency: int | None = None,
        encoding_format: str = "base64",
        user: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
        progress: bool = False,
        on_error: str = "return",
    ) -> list[list[float] | Failure]:
        """One vector per text, in input order, from the server's ``/embeddings``.

        ``batch_size`` texts per request (at most 2048, the API's limit), up to
        ``concurrency`` requests in flight (default: the client's), under the client's
        rate limits and retries; ``dimensions`` is passed on (models that can shorten
        their vectors); vectors travel as base64 unless ``encoding_format="float"``.
        Texts may also be lists of token ids. A batch that fails for good puts its
        :class:`~interlingua.client.Failure` in each of its texts' places
        (``on_error="raise"``: its error is raised). See :mod:`interlingua.client._embed`.
        """
        width = self._width(concurrency, on_error)
        settings = embed_settings(
            model or self.model, dimensions, encoding_format, user, extra_body
        )
        embedder = Embedder(self._transport, self._policy, self.dialect, self.base_url)
        raise_first = on_error == "raise"
        return await embed_all(embedder, texts, batch_size, settings, width, progress, raise_first)

    # --- answers -----------------------------------------------------------------------

    def _parse(
        self, data: bytes, headers: dict[str, str], options: CallOptions, request: Request
    ) -> ChatResult:
        rid = request_id(headers)
        raw, response = read_answer(
            self._codec, self.url, data, rid, options.retry_on_empty, request
        )
        result = ChatResult(response, raw, rid, options.think_tags)
        if options.structured:
            result.parsed = validate_structured(response.text, options.model_class)
        return result

    def _options(
        self,
        request: Request,
        parse_json: bool | None,
        think_tags: bool | None,
        fmt: Any,
        retry_on_empty: bool | None,
    ) -> CallOptions:
        _, model_class = to_response_format(fmt) if fmt is not None else (None, None)
        fmt_type = request.response_format.type if request.response_format else "text"
        structured = self._flag(parse_json, "parse_json") or fmt_type in (
            "json_object",
            "json_schema",
        )
        think = self._flag(think_tags, "think_tags")
        return call_options(
            think, structured, model_class, self._flag(retry_on_empty, "retry_on_empty")
        )


#: the keyword arguments ``chat`` takes: ``prepare``'s and the result options
CHAT_KEYS = RESULT_KEYS | frozenset(
    name
    for name, p in inspect.signature(AsyncClient.prepare).parameters.items()
    if p.kind is p.KEYWORD_ONLY
)
