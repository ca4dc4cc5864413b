"""AsyncClient: chat, stream and tool loops against any OpenAI- or Anthropic-style server.

Requests are built as a neutral :class:`~interlingua.core.Request` and rendered by the
dialect codec; answers are parsed by the same codec, so the client speaks exactly what the
gateway speaks, to interlingua or directly to a provider.

Every call goes through the same path: build (prompt forms, images encoded off-loop and
deduplicated) -> render once to bytes -> for each attempt: take a rate-limiter slot, POST,
map failures to typed errors -> on a retryable failure sleep (outside the slot) and try
again, at most ``max_retries`` times, each retry logged at debug with its reason and delay.

The parts: :mod:`._transport` sends bytes and maps failures (by default aiohttp with one
pooled ``ClientSession`` per client, sized to the client's concurrency, because a batch
runner drives hundreds of calls in flight through one client; aiohttp over httpx for
throughput, as measured in a prototype: DESIGN.md); :mod:`._policy` holds the retries and
rate limits; :class:`~._stream.ChatStream` runs a streaming call with both.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar, cast

import aiohttp
import orjson

from ..core import Request, Response, ToolSpec
from ..dialects import Dialect, get_dialect
from ..dialects.openai_chat import MAX_TOKENS_FIELDS, place_max_tokens
from ..limits import RateLimit, RateLimiter
from ..retry import DEFAULT_MAX_RETRIES
from ._audio import with_audio_format
from ._build import (
    render_supported,
    to_output_audio,
    to_reasoning,
    to_response_format,
    to_stop,
    to_tool_choice,
    to_tools,
)
from ._errors import APIError
from ._inputs import DEFAULT_IMAGE_CACHE_BYTES, Inputs
from ._outputs import CallOptions, ChatResult, better_usage, validate_structured
from ._policy import Policy, limiter_for
from ._stream import ChatStream
from ._tools import DEFAULT_MAX_TURNS
from ._tools import run_tools as _run_tools
from ._transport import (
    DEFAULT_CONNECTIONS,
    DEFAULT_TIMEOUT,
    AiohttpTransport,
    Transport,
    request_id,
)

__all__ = ["DEFAULT_TIMEOUT", "AsyncClient", "CallOptions", "RawReply"]

V = TypeVar("V")

_DEFAULT_BASE = {
    "openai": "http://127.0.0.1:8400/v1",
    "anthropic": "http://127.0.0.1:8400",
    "responses": "http://127.0.0.1:8400/v1",
}


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


class _PolicyField(Generic[V]):
    """An attribute of the client that lives on its :class:`Policy` (read and written there).

    ``max_retries``, ``retry_base``, ``retry_cap``, ``retries`` and ``limiter`` have always
    been client attributes (the batch runner reads ``retries``, tests set ``retry_base``
    and the ``_sleep``/``_rand`` seams); the policy owns them now, streams included.
    """

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, client: AsyncClient, owner: type | None = None) -> V:
        return cast("V", getattr(client._policy, self.name))

    def __set__(self, client: AsyncClient, value: V) -> None:
        setattr(client._policy, self.name, value)


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
    """

    max_retries: _PolicyField[int] = _PolicyField("max_retries")
    retry_base: _PolicyField[float] = _PolicyField("retry_base")
    retry_cap: _PolicyField[float] = _PolicyField("retry_cap")
    #: retries made so far by this client (all calls), for progress displays
    retries: _PolicyField[int] = _PolicyField("retries")
    limiter: _PolicyField[RateLimiter] = _PolicyField("limiter")
    _sleep: _PolicyField[Callable[[float], Awaitable[Any]]] = _PolicyField("sleep")
    _rand: _PolicyField[Callable[[], float]] = _PolicyField("rand")

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
    ) -> None:
        if max_tokens_field is not None and max_tokens_field not in MAX_TOKENS_FIELDS:
            raise ValueError(f"max_tokens_field must be one of {', '.join(MAX_TOKENS_FIELDS)}")
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
        if transport is None:
            base = base_url or os.environ.get("INTERLINGUA_BASE_URL") or _DEFAULT_BASE[dialect]
            connections = connections or limiter.limits.max_concurrency or DEFAULT_CONNECTIONS
            transport = AiohttpTransport(
                self._codec, base, api_key, headers=headers, timeout=timeout,
                connections=connections, session=session,
            )  # fmt: skip
        self._transport: Transport = transport
        self.base_url, self.url = transport.base_url, transport.url
        self._policy = Policy(limiter, max_retries, self.url)
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
        logprobs: bool = False,
        top_logprobs: int | None = None,
        min_p: float | None = None,
        repetition_penalty: float | None = None,
        modalities: Sequence[str] | None = None,
        audio: Mapping[str, Any] | None = None,
        drop_unsupported: bool | None = None,
    ) -> Request:
        """The neutral request ``chat`` would send (images encoded). See :meth:`chat`."""
        name = model or self.model
        if not name:
            raise ValueError("model is required: pass model=... to the call or to the client")
        fmt, _ = to_response_format(response_format)
        request = Request(
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
        if self.dialect == "openai":
            place_max_tokens(body, self.max_tokens_field)
        return body

    def _render(self, request: Request) -> dict[str, Any]:
        body = self.render(request)
        if not request.stream:
            body.pop("stream", None)
            body.pop("stream_options", None)
        return body

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
        ``model, system, images, max_tokens, temperature, top_p, top_k, min_p,
        repetition_penalty, seed, stop, tools, tool_choice, parallel_tool_calls,
        response_format`` (JSON schema dict or pydantic class; ``.parsed`` holds the
        result), ``reasoning`` (effort or budget), ``logprobs`` / ``top_logprobs``
        (``.logprobs`` holds them), ``modalities`` + ``audio`` (spoken answer in
        ``.audio``), ``drop_unsupported``, ``extra_body``; ``parse_json=True`` extracts
        JSON from the text into ``.parsed``; ``think_tags=True`` folds reasoning into
        ``.text`` as ``<think>…</think>``.
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
        policy, transport = self._policy, self._transport
        estimate = policy.estimate(request)

        async def attempt() -> ChatResult:
            async with policy.slot(estimate) as slot:
                data, headers = await transport.post(body)
                result = self._parse(data, headers, options, request)
                slot.settle(result.usage.total_tokens)
                return result

        return await policy.retrying(attempt, "chat")

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

        return ChatStream(self._transport, self._codec, self._policy, prepare, self.render)

    def stream_request(self, request: Request, *, think_tags: bool = False) -> ChatStream:
        """Stream a prepared neutral request."""

        async def prepare() -> tuple[Request, CallOptions]:
            return request, CallOptions(think_tags=think_tags)

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
        policy, transport = self._policy, self._transport

        async def attempt() -> RawReply:
            async with policy.slot(estimated_tokens):
                raw, headers = await transport.post(data)
                return RawReply(200, headers, raw, request_id(headers))

        return await policy.retrying(attempt, "request")

    # --- answers -----------------------------------------------------------------------

    def _parse(
        self, data: bytes, headers: dict[str, str], options: CallOptions, request: Request
    ) -> ChatResult:
        rid = request_id(headers)
        try:
            raw = orjson.loads(data)
            response: Response = self._codec.parse_response(raw, request)
        except Exception as exc:  # the codec's errors, orjson's, a malformed shape
            detail = getattr(exc, "message", None) or str(exc)
            raise APIError(
                f"{self.url} answered 2xx with a body that could not be read: {detail}",
                status=200,
                body=data[:2000].decode("utf-8", "replace"),
                request_id=rid,
            ) from exc
        response = with_audio_format(better_usage(response, raw), request)
        result = ChatResult(response, raw, rid, options.think_tags)
        if options.structured:
            result.parsed = validate_structured(response.text, options.model_class)
        return result


def _options(request: Request, parse_json: bool, think_tags: bool, fmt: Any) -> CallOptions:
    _, model_class = to_response_format(fmt) if fmt is not None else (None, None)
    fmt_type = request.response_format.type if request.response_format else "text"
    structured = parse_json or fmt_type in ("json_object", "json_schema")
    return CallOptions(think_tags=think_tags, structured=structured, model_class=model_class)
