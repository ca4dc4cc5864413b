"""``POST /v1/completions``: the OpenAI (legacy) Completions API over the gateway's routing.

Parse (the API's checks: :func:`~interlingua.dialects.completions.check_request`) ->
route (the model's plan: deployments, retries, fallbacks, cooldowns, as for a chat
request: server/attempts.py) -> call (each attempt's upstream
:meth:`~..upstreams.base.Upstream.complete_text` with the body as parsed, its ``model``
the upstream's name, shaped by the model entry's ``params`` / ``drop_params``) -> relay.

The answer is relayed as a Chat passthrough answer is: a whole body as it came (scrubbed
of upstream keys), a stream event by event behind Chat's relay check (a text
completion's chunks have Chat's outline). A counted stream (the usage log, a key's
token limit) asks its upstream for ``stream_options.include_usage`` and, when its client
did not, cuts that usage chunk from what the client gets (as Chat:
server/accounting.py ``strip_usage``). An upstream whose API has no text completions
(Anthropic, an embedding model) refuses with a 400 naming the endpoint
(``Upstream.complete_text``'s default); the local engine continues the raw prompt
itself (upstreams/local/text_completion.py).

A model whose entry says ``completions: as_chat`` takes the request as a Chat one
instead (:func:`~interlingua.dialects.completions.as_chat_body`: the prompt as one user
message) on the gateway's own Chat path, to any upstream it translates to, and its answer
is written back as a text completion, a stream chunk by chunk (lossy: the dialect
module says what is refused). The entry of the name the client gave decides, for all
of its deployments and fallbacks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from functools import partial
from typing import Any

import orjson
from starlette.types import Receive

from ..core import Request, aclose_iterator
from ..dialects import encode_body, get_dialect
from ..dialects.completions import as_chat_body, check_request, text_answer, text_chunk
from ..routing import Route
from ..upstreams.base import RawResponse
from ..upstreams.shaping import drop_params, merge_params
from .accounting import RECORD, strip_usage
from .asgi_io import JSON_CT, SSE_HEADERS, BytesResponse, StreamResponse
from .attempts import run_attempts
from .gateway import _ENDS, Gateway, _after, _model_of, _pause, _relayed, _went_to, relayed_failure

__all__ = ["complete_text"]

_OPENAI = get_dialect("openai")


async def complete_text(
    gateway: Gateway,
    body: dict[str, Any],
    headers: Mapping[str, str],
    receive: Receive | None = None,
) -> BytesResponse | StreamResponse:
    """Answer a Completions request ``body`` (module docstring); an error the gateway
    itself finds is raised, an upstream's error answer returned as it came."""
    name = _model_of(body)
    check_request(body)
    entry = gateway.router.resolve(name).entry
    if entry is not None and entry.completions == "as_chat":
        return await _as_chat(gateway, body, headers, receive)
    plan = gateway.router.plan(name)
    attempt = partial(_attempt, gateway, body, headers)
    answer = await run_attempts(gateway.router, plan, attempt, name, receive, _pause)
    assert isinstance(answer, BytesResponse | StreamResponse)
    return answer


async def _attempt(
    gateway: Gateway, body: dict[str, Any], headers: Mapping[str, str], route: Route
) -> BytesResponse | StreamResponse:
    """One deployment's try: its own copy of the body (a model name, shaping and the
    usage chunk's request of its own), the upstream's answer relayed, or raised as a
    :class:`RelayedFailure` for the attempt loop to judge."""
    _went_to(route)
    sent = dict(body)
    sent["model"] = route.upstream_model
    stream = sent.get("stream") is True
    record = RECORD.get()
    if stream and isinstance(sent.get("stream_options"), dict):
        sent["stream_options"] = dict(sent["stream_options"])  # (not the client's copy)
    # (the usage log needs a stream's usage: asked for here, cut for the client)
    strip = record is not None and stream and _OPENAI.ask_stream(sent, True)
    entry = route.entry
    if entry is not None and entry.shapes_body:
        merge_params(sent, entry)
        drop_params(sent, entry)
    answer = await route.upstream.complete_text(encode_body(sent), stream, headers)
    relayed = [JSON_CT, *_relayed(answer)]
    if answer.status >= 400 or answer.chunks is None:
        await answer.aclose()
        data = gateway.scrub_bytes(answer.body) if gateway.secrets else answer.body
        if answer.status >= 400:
            raise relayed_failure(data, _OPENAI.client_status(answer.status), relayed, answer)
        return BytesResponse(data, answer.status, relayed)
    return await _relay_stream(gateway, answer, route, strip)


async def _relay_stream(
    gateway: Gateway, answer: RawResponse, route: Route, strip: bool
) -> StreamResponse:
    """``answer``'s chunks as the client's stream; its first events are read before the
    status line, so a stream broken from its start is a real 502 (as on Chat's path)."""
    assert answer.chunks is not None
    chunks = gateway._scrub_stream(answer.chunks) if gateway.secrets else answer.chunks
    record = RECORD.get()
    if strip and record is not None:
        chunks = strip_usage(chunks, record)
    try:
        first = await anext(chunks, b"")
    except BaseException:
        await answer.aclose()
        raise
    request = Request(model=route.upstream_model, messages=(), stream=True)
    response = StreamResponse(
        _after(first, chunks),
        headers=SSE_HEADERS + _relayed(answer),
        on_error=lambda exc: gateway.stream_error_bytes(_OPENAI, request, exc),
        aclose=answer.aclose,
        ping=_OPENAI.stream_encoder(request).ping(),
    )
    response.ends = _ENDS["openai"]
    response.check = answer.check
    return response


async def _as_chat(
    gateway: Gateway,
    body: dict[str, Any],
    headers: Mapping[str, str],
    receive: Receive | None,
) -> BytesResponse | StreamResponse:
    """``body`` answered by the gateway's Chat path (module docstring), written back as
    a text completion; an error answer as it came (the two APIs' errors are one shape)."""
    answer = await gateway.generate(_OPENAI, as_chat_body(body), headers, receive)
    if isinstance(answer, StreamResponse):
        answer.chunks = _text_chunks(answer.chunks)
        return answer
    if answer.status < 300:
        chat = orjson.loads(answer.body)
        if isinstance(chat, dict) and "choices" in chat:
            answer.body = orjson.dumps(text_answer(chat))
    return answer


async def _text_chunks(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """A Chat stream's chunks as a text completion's: each ``data:`` event with
    ``choices`` rewritten (:func:`~..dialects.completions.text_chunk`), every other
    event (an error, ``[DONE]``, a keep-alive) as it came."""
    held = b""
    try:
        async for data in chunks:
            held += data
            end = held.rfind(b"\n\n")
            if end < 0:
                continue
            whole, held = held[: end + 2], held[end + 2 :]
            yield b"".join(_text_event(e) for e in whole.split(b"\n\n")[:-1])
        if held:
            yield held
    finally:
        await aclose_iterator(chunks)


def _text_event(event: bytes) -> bytes:
    """One whole SSE event of a Chat stream, as a text completion's (with its end)."""
    payload = event[5:].lstrip() if event.startswith(b"data:") else b""
    if payload[:1] == b"{":
        chunk = orjson.loads(payload)
        if isinstance(chunk, dict) and "choices" in chunk:
            event = b"data: " + orjson.dumps(text_chunk(chunk))
    return event + b"\n\n"
