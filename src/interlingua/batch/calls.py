"""One input line -> one HTTP call -> one output line.

Which call depends on the line and the client's dialect:

* an OpenAI Batch line in the client's own dialect is POSTed as is
  (:meth:`~interlingua.client.AsyncClient.send_raw`) and the server's body is kept byte
  for byte -- OpenAI's batch output carries the exact response body;
* an OpenAI Batch line in another dialect (a ``/v1/messages`` or ``/v1/responses`` line
  through a Chat Completions server, a ``/v1/chat/completions`` line through a Responses
  or Messages one, ...) is parsed by its url's codec, sent through the neutral
  core (:meth:`~interlingua.client.AsyncClient.send`), and the answer is rendered back in
  the line's dialect: the output body always matches the line's url;
* an ``/v1/embeddings`` or ``/v1/completions`` line is POSTed as is to the server's
  endpoint of that name (a completion without ``stream``: a batch keeps whole answers)
  and its answer kept byte for byte;
* a simple line is built with :meth:`~interlingua.client.AsyncClient.prepare` (images
  encoded off the event loop, deduplicated by the client's bounded cache), rendered in the
  client's dialect and sent raw, so the output holds the server's own body.

Answers that are not answers (``retry_on_empty``, on by default): a 2xx with no text, no
tool call and no refusal is retried like a 5xx, an unreadable body once, both within
``--retries`` (the client judges them, :meth:`~interlingua.client.AsyncClient.send_raw`);
when they persist the line is an error line (``empty_response`` / ``invalid_response``)
keeping the server's status and body. ``fold_reasoning`` rewrites each successful body's
text with its reasoning in front (:mod:`.fold`).

The encoded request (images included) lives only in this call's frame: once the call
returns it is garbage, so memory follows the number of calls in flight, not the file.
Every failure becomes an error line, logged once at WARNING by
:func:`~.records.failed_line` (the client is asked not to log it a second time);
nothing here raises except cancellation.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import orjson

from ..client import (
    APIConnectionError,
    APIError,
    APITimeoutError,
    AsyncClient,
    InputError,
    RawReply,
    better_usage,
    normalize_usage,
)
from ..core import Request, Response
from ..core.tokens import estimate_request_tokens, estimate_text
from ..dialects import Dialect, get_dialect
from ..errors import InterlinguaError
from .fold import fold_body
from .records import BatchItem, LineError, error_record, failed_line, success_record

__all__ = ["Defaults", "Outcome", "call_item", "failure_kind"]

log = logging.getLogger("interlingua.batch")

_BODY_QUOTE = 2000  # characters of an unreadable 2xx body kept in the error line


@dataclass(frozen=True, slots=True)
class Defaults:
    """Settings from the command line for lines that do not carry their own.

    ``model`` and ``max_tokens`` also fill OpenAI Batch bodies that lack them; ``system``
    applies to simple lines only (a batch body's messages are taken as written).
    ``retry_on_empty`` and ``fold_reasoning`` apply to every line (module doc).
    """

    model: str | None = None
    max_tokens: int | None = None
    system: str | None = None
    retry_on_empty: bool = True
    fold_reasoning: bool = False

    @classmethod
    def of(cls, options: Any) -> Defaults:
        """The defaults a run's ``BatchOptions`` give its lines (either engine)."""
        return cls(
            options.model,
            options.max_tokens,
            options.system,
            retry_on_empty=options.retry_on_empty,
            fold_reasoning=options.fold_reasoning,
        )


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one line produced: its output line, failure kind (None = ok), token counts."""

    line: bytes
    failure: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0


_CODECS: dict[str, Dialect] = {}


def _codec(name: str) -> Dialect:
    """``get_dialect`` memoized (it imports by name on every call)."""
    codec = _CODECS.get(name)
    if codec is None:
        codec = _CODECS[name] = get_dialect(name)
    return codec


def failure_kind(exc: APIError) -> tuple[str, str]:
    """(``error.code`` for the line, the label it is counted under in the summary)."""
    if isinstance(exc, APITimeoutError):
        return "timeout", "timeout"
    if isinstance(exc, APIConnectionError) or exc.status is None:
        return "connection_error", "connection_error"
    code = exc.kind or "api_error"
    return code, f"{code} (HTTP {exc.status})"


async def call_item(client: AsyncClient, item: BatchItem, defaults: Defaults) -> Outcome:
    """Send ``item`` and return its output line (see the module docstring)."""
    cid = item.custom_id
    try:
        if item.endpoint is not None:
            return await _call_endpoint_line(client, item, defaults)
        if item.dialect is not None:
            return await _call_batch_line(client, item, defaults)
        return await _call_simple_line(client, item, defaults)
    except APIError as exc:
        code, label = failure_kind(exc)
        line = failed_line(
            cid,
            code,
            exc.message,
            status=exc.status,
            request_id=exc.request_id,
            body=exc.body,
            attempts=exc.attempts,
        )
        return Outcome(line, label)
    except (LineError, InterlinguaError, InputError, ValueError, TypeError) as exc:
        # The line itself is wrong (a codec rejected its body, an image cannot be read):
        # no request was made; the message names the field.
        message = getattr(exc, "message", None) or str(exc)
        return Outcome(failed_line(cid, "invalid_request", message), "invalid_request")
    except Exception as exc:  # a bug must not end a million-line run: record it
        log.exception("unexpected error on custom_id %r", cid)  # (its one log line)
        message = f"internal error: {type(exc).__name__}: {exc}"
        return Outcome(error_record(cid, "internal_error", message), "internal_error")


def _estimate(client: AsyncClient, request: Request) -> int:
    """Tokens to reserve against --tpm (0 without a token limit, skipping the work)."""
    if client.limiter.limits.tokens_per_minute is None:
        return 0
    return estimate_request_tokens(request) + (request.max_tokens or 0)


def _fill(body: dict[str, Any], dialect: str, defaults: Defaults) -> dict[str, Any]:
    """A copy of a batch body with the defaults filled in and streaming turned off."""
    body = dict(body)
    codec = _codec(dialect)
    # Batch output is one JSON body per line; a streamed answer has no such body.
    codec.drop_stream(body)
    if "model" not in body and defaults.model:
        body["model"] = defaults.model
    fields = codec.output_limit_fields
    if defaults.max_tokens is not None and not any(f in body for f in fields):
        body[fields[0]] = defaults.max_tokens
    return body


async def _call_batch_line(client: AsyncClient, item: BatchItem, defaults: Defaults) -> Outcome:
    assert item.body is not None and item.dialect is not None
    body = _fill(item.body, item.dialect, defaults)
    codec = _codec(item.dialect)
    if item.dialect == client.dialect:
        estimate = 0
        if client.limiter.limits.tokens_per_minute is not None:
            estimate = _estimate(client, codec.parse_request(body))
        reply = await client.send_raw(
            body,
            estimated_tokens=estimate,
            retry_on_empty=defaults.retry_on_empty,
            log_failure=False,
        )
        return reply_outcome(item.custom_id, reply, client.dialect, defaults.fold_reasoning)
    # Across dialects: through the neutral core and back into the line's dialect. Sent
    # raw and parsed here rather than with ``client.send``, which would also validate
    # structured output -- a batch records the answer, it does not judge it.
    request = codec.parse_request(body)
    reply = await client.send_raw(
        _render(client, request),
        estimated_tokens=_estimate(client, request),
        retry_on_empty=defaults.retry_on_empty,
        log_failure=False,  # call_item logs the failed line, naming it
    )
    try:
        raw = reply.json()
        response = better_usage(_codec(client.dialect).parse_response(raw, request), raw)
    except Exception as exc:  # orjson's or the codec's: the body is not a chat answer
        detail = getattr(exc, "message", None) or str(exc)
        return _unreadable(item.custom_id, reply.status, reply.request_id, reply.body, detail)
    out = codec.render_response(response, request)
    if defaults.fold_reasoning:
        fold_body(item.dialect, out, response.reasoning)
    usage = response.usage
    line = success_record(item.custom_id, reply.status, reply.request_id, orjson.dumps(out))
    return Outcome(line, None, usage.input_tokens, usage.output_tokens)


async def _call_endpoint_line(client: AsyncClient, item: BatchItem, defaults: Defaults) -> Outcome:
    """An embeddings or text completions line: its body (the model filled in, a
    completion's ``stream`` dropped) to the server's endpoint, the answer kept byte for
    byte. Its input's estimated tokens (and a completion's ``max_tokens``) count against
    --tpm."""
    assert item.body is not None and item.endpoint is not None
    body = item.body
    if "model" not in body and defaults.model:
        body = {**body, "model": defaults.model}
    completions = item.endpoint == "completions"
    if completions and ("stream" in body or "stream_options" in body):
        body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    estimate = 0
    if client.limiter.limits.tokens_per_minute is not None:
        if completions:
            limit = body.get("max_tokens")
            estimate = _input_tokens(body.get("prompt")) + (limit if type(limit) is int else 16)
        else:
            estimate = _input_tokens(body.get("input"))
    reply = await client.send_raw(
        body, estimated_tokens=estimate, log_failure=False, endpoint=item.endpoint
    )
    return ok_outcome(item.custom_id, reply.status, reply.request_id, reply.body)


def _input_tokens(value: Any) -> int:
    """Estimated tokens of an embeddings ``input`` or a completion's ``prompt``: texts by
    their length, token ids counted, a list of either summed."""
    if isinstance(value, str):
        return estimate_text(value)
    if isinstance(value, list):
        if all(type(v) is int for v in value):
            return len(value)
        return sum(_input_tokens(v) for v in value)
    return 0


def _render(client: AsyncClient, request: Request) -> dict[str, Any]:
    """``request`` as a non-streaming body in the client's dialect.

    Toward a Responses server a request that is not a Responses line's own gets
    ``store: false`` (the API stores by default): its answer is in the output file, and
    neither a Chat line (whose API stores nothing by default) nor a prompt asked for a
    copy on the server.
    """
    body = client.render(request)  # (the client places a Chat body's output limit)
    _codec(client.dialect).drop_stream(body)
    if client.dialect == "responses" and request.source_dialect != "responses":
        body.setdefault("store", False)
    return body


def _unreadable(cid: str, status: int, request_id: str | None, raw: bytes, why: str) -> Outcome:
    line = failed_line(
        cid,
        "invalid_response",
        f"the server answered {status} with a body that could not be read: {why}",
        status=status,
        request_id=request_id,
        body=raw[:_BODY_QUOTE].decode("utf-8", "replace"),
    )
    return Outcome(line, "invalid_response")


async def _call_simple_line(client: AsyncClient, item: BatchItem, defaults: Defaults) -> Outcome:
    settings = dict(item.settings)
    settings.setdefault("model", defaults.model)
    settings.setdefault("system", defaults.system)
    settings.setdefault("max_tokens", defaults.max_tokens)
    request = await client.prepare(item.prompt, images=item.images, **settings)
    reply = await client.send_raw(
        _render(client, request),
        estimated_tokens=_estimate(client, request),
        retry_on_empty=defaults.retry_on_empty,
        log_failure=False,  # call_item logs the failed line, naming it
    )
    return reply_outcome(item.custom_id, reply, client.dialect, defaults.fold_reasoning)


def reply_outcome(cid: str, reply: RawReply, dialect: str, fold: bool) -> Outcome:
    """The line for a 2xx reply in ``dialect`` (its reasoning folded into its text when
    ``fold``); the body read once, by the client when it judged the answer."""
    try:
        parsed = reply.json()  # (decoded already when the client judged the answer)
    except orjson.JSONDecodeError as exc:
        return _unreadable(cid, reply.status, reply.request_id, reply.body, f"not JSON ({exc})")
    folded = fold and fold_body(dialect, parsed, _reasoning(dialect, parsed, reply.response))
    return ok_outcome(cid, reply.status, reply.request_id, reply.body, parsed, folded)


def _reasoning(dialect: str, body: Any, response: Response | None) -> str:
    """The reasoning of a body, from its neutral reading (made here when the client's
    judging of the answer did not need one); "" when the codec cannot read the body."""
    if response is None:
        try:
            response = _codec(dialect).parse_response(body)
        except Exception:  # an answer the codec cannot read has nothing to fold
            return ""
    return response.reasoning


def ok_outcome(
    cid: str,
    status: int,
    request_id: str | None,
    raw: bytes,
    parsed: Any = None,
    changed: bool = False,
) -> Outcome:
    """The line for a 2xx answer: the body spliced in as is when it is one-line JSON.

    ``parsed``: the body already decoded (None: decode ``raw``); ``changed``: it was
    edited since, so it is encoded again.
    """
    if parsed is None:
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            return _unreadable(cid, status, request_id, raw, f"not JSON ({exc})")
    tokens_in, tokens_out = _tokens(parsed)
    # A pretty-printed body would break the one-record-per-line format: re-encode it.
    pretty = b"\n" in raw or b"\r" in raw
    body = orjson.dumps(parsed) if changed or pretty else raw.strip()
    line = success_record(cid, status, request_id, body)
    return Outcome(line, None, tokens_in, tokens_out)


def _tokens(body: Any) -> tuple[int, int]:
    """(input, output) tokens of a response body; OpenAI's plain shape read directly."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if isinstance(usage, dict):
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if type(prompt) is int and type(completion) is int:  # the common case, fast
            return prompt, completion
    normalized = normalize_usage(body)  # Anthropic, Ollama, vLLM... (the slow, general way)
    return normalized.input_tokens, normalized.output_tokens
