"""A batch's input lines: read from its file, checked before anything runs, and each run
through the gateway's own request path as the batch's key.

Reading: :func:`input_lines` streams the input file from the store a chunk at a time and
yields its lines numbered from 1 (blank lines are skipped but keep their number), so a
file of 200 MB is never held whole.

Checking (:func:`check_line`): every line is read as the CLI batch runner reads an
OpenAI Batch line (interlingua/batch/records.py ``parse_line``), then held to what a
Batch API batch needs: the OpenAI Batch form only, ``url`` the batch's ``endpoint``, a
``custom_id`` no earlier line used, a ``model`` the batch's key may use, no ``stream``.
Every bad line becomes one entry of the batch's ``errors`` (code, message, param and its
line): a batch with any is ``failed`` and runs nothing.

Running (:class:`LineRunner`): a line is the request a client of the batch's key would
send: ``Handlers.counted`` (its key's model check and limits, the usage row, now with the
batch's id) when the gateway counts requests, else the same dispatch as an uncounted
request; then translation, the local engine, routing, fallbacks and upstream limits as
for any request. It runs as background work (``limits.BACKGROUND``): the upstream limiter
serves interactive requests first.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from ...batch.records import URL_DIALECTS, LineError, error_record, parse_line, success_record
from ...batches import FileStore
from ...dialects import Dialect, get_dialect
from ...errors import AuthenticationError, InterlinguaError
from ...limits import BACKGROUND
from ..asgi_io import BytesResponse, StreamResponse
from ..gateway import internal_error
from ..keys import ClientKey
from ..reload import Live

__all__ = ["Checker", "LineOutcome", "LineRunner", "check_line", "input_lines"]

log = logging.getLogger("interlingua.batches")

#: the most lines a batch may have (the API's own limit)
MAX_LINES = 50_000


class Handlers(Protocol):
    """What a line needs of the app's handlers (server/app.py ``Handlers``)."""

    live: Live

    def counted(
        self,
        dialect: Dialect,
        headers: Mapping[str, str],
        request_id: str,
        receive: Any = None,
        *,
        body: dict[str, Any] | None = None,
        live: Live | None = None,
        batch: tuple[ClientKey | None, str] | None = None,
    ) -> Awaitable[BytesResponse | StreamResponse]:
        """A counted generation (see the app's)."""
        ...

    def _dispatch(
        self,
        gateway: Any,
        dialect: Dialect,
        body: dict[str, Any],
        headers: Mapping[str, str],
        receive: Any,
        key: ClientKey | None,
    ) -> Awaitable[BytesResponse | StreamResponse]:
        """An uncounted generation (see the app's)."""
        ...


async def input_lines(files: FileStore, file_id: str) -> AsyncIterator[tuple[int, bytes]]:
    """``(number, line)`` for each non-blank line of the file ``file_id``."""
    number = 0
    rest = b""
    async for chunk in files.content(file_id):
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        for line in lines:
            number += 1
            if line.strip():
                yield number, line
    if rest.strip():
        yield number + 1, rest


def key_named(live: Live, owner: str) -> ClientKey | None:
    """The key a batch of ``owner``'s runs as (None: the gateway has no keys);
    AuthenticationError when no key of that name is configured any more."""
    keys = live.keys
    if not keys.enabled:
        return None
    for key in keys.keys:
        if (key.name or "") == owner:
            return key
    raise AuthenticationError(
        f"The key {owner!r} that created this batch is no longer configured.",
        code="invalid_api_key",
    )


@dataclass
class Checker:
    """The state of one batch's check: the ids seen, the first model, the errors."""

    endpoint: str
    key: ClientKey | None
    seen: set[str]
    errors: list[dict[str, Any]]
    model: str | None = None
    lines: int = 0


def _error(code: str, message: str, line: int, param: str | None = None) -> dict[str, Any]:
    return {"code": code, "message": message, "param": param, "line": line}


def check_line(checker: Checker, number: int, raw: bytes) -> None:
    """Check one input line, noting its error in ``checker`` (see the module docstring)."""
    checker.lines += 1
    if checker.lines == MAX_LINES + 1:
        message = f"A batch may have at most {MAX_LINES} requests."
        checker.errors.append(_error("too_many_requests", message, number))
    try:
        item = parse_line(raw, number)
    except LineError as exc:
        code = "invalid_json" if "JSON" in exc.message else "invalid_request"
        checker.errors.append(_error(code, exc.message, number))
        return
    if item.dialect is None or item.body is None:
        message = 'Expected a request of the form {"custom_id", "method", "url", "body"}.'
        checker.errors.append(_error("invalid_request", message, number))
        return
    url = next(u for u, d in URL_DIALECTS.items() if d == item.dialect)
    if url != checker.endpoint:
        message = f"The url {url!r} does not match the batch's endpoint {checker.endpoint!r}."
        checker.errors.append(_error("mismatched_endpoint", message, number, "url"))
    if item.custom_id in checker.seen:
        message = f"The custom_id {item.custom_id!r} is used by an earlier line."
        checker.errors.append(_error("duplicate_custom_id", message, number, "custom_id"))
    checker.seen.add(item.custom_id)
    _check_body(checker, number, item.body)


def _check_body(checker: Checker, number: int, body: dict[str, Any]) -> None:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        message = "The body has no 'model'."
        checker.errors.append(_error("missing_model", message, number, "body.model"))
    elif checker.key is not None and not checker.key.allows(model):
        message = f"This key may not use the model {model!r}."
        checker.errors.append(_error("model_not_allowed", message, number, "body.model"))
    elif checker.model is None:
        checker.model = model
    if body.get("stream") is True:
        message = "A batch request cannot stream: leave 'stream' out or false."
        checker.errors.append(_error("invalid_request", message, number, "body.stream"))


@dataclass(frozen=True, slots=True)
class LineOutcome:
    """One call of a line: the status and the answer's body (JSON bytes)."""

    status: int
    body: bytes
    request_id: str
    retry_after: float | None = None


class LineRunner:
    """Runs batch lines through the app's handlers (see the module docstring)."""

    def __init__(self, handlers: Handlers) -> None:
        self.handlers = handlers

    async def call(self, owner: str, batch_id: str, dialect: str, body: bytes) -> LineOutcome:
        """One call of a line's request, as the key ``owner`` names."""
        handlers = self.handlers
        live = handlers.live
        live.users += 1  # (the bundle is kept until its last request, as for a client's)
        token = BACKGROUND.set(True)
        request_id = "batch_req_" + secrets.token_hex(12)
        client = get_dialect(dialect)
        try:
            response = await self._respond(live, owner, batch_id, client, body, request_id)
            if isinstance(response, StreamResponse):  # (not asked for: refused when checked)
                raise AssertionError("a batch line was answered with a stream")
        finally:
            BACKGROUND.reset(token)
            live.left()
        return LineOutcome(
            response.status, response.body, request_id, _retry_after(response.headers)
        )

    async def _respond(
        self, live: Live, owner: str, batch_id: str, dialect: Dialect, raw: bytes, request_id: str
    ) -> BytesResponse | StreamResponse:
        body = orjson.loads(raw)  # (a fresh body for each attempt: the path may change it)
        try:
            key = key_named(live, owner)
            if live.accounting is not None:
                return await self.handlers.counted(
                    dialect, {}, request_id, body=body, live=live, batch=(key, batch_id)
                )
            if key is not None and key.models:
                key.check_model(str(body.get("model", "")))
            return await self.handlers._dispatch(live.gateway, dialect, body, {}, None, key)
        except InterlinguaError as err:
            return live.gateway.error_response(dialect, err, request_id)
        except (asyncio.CancelledError, KeyboardInterrupt):
            raise
        except Exception as exc:
            log.exception("unexpected failure on a line of batch %s", batch_id)
            return live.gateway.error_response(dialect, internal_error(exc), request_id)


def _retry_after(headers: list[tuple[bytes, bytes]]) -> float | None:
    for name, value in headers:
        if name.lower() == b"retry-after":
            try:
                return max(0.0, float(value))
            except ValueError:
                return None
    return None


def output_record(custom_id: str, outcome: LineOutcome) -> tuple[bytes, bool]:
    """The Batch output line of a line's last call, and whether it failed (the CLI
    runner's format: a failure always has ``error``, its answer in ``response``)."""
    if outcome.status < 400:
        body = (
            outcome.body if b"\n" not in outcome.body else orjson.dumps(orjson.loads(outcome.body))
        )
        return success_record(custom_id, outcome.status, outcome.request_id, body), False
    try:
        answer: Any = orjson.loads(outcome.body)
    except orjson.JSONDecodeError:
        answer = outcome.body.decode("utf-8", "replace")
    error = answer.get("error") if isinstance(answer, dict) else None
    if not isinstance(error, dict):
        error = {}
    code = error.get("code") or error.get("type") or f"http_{outcome.status}"
    message = error.get("message") or f"HTTP {outcome.status}"
    record = error_record(
        custom_id, str(code), str(message), status=outcome.status,
        request_id=outcome.request_id, body=answer,
    )  # fmt: skip
    return record, True


def usage_of(body: bytes) -> tuple[int, int, int, int]:
    """(input, output, cached, reasoning) tokens of a successful answer in any of the
    three dialects (zeros when it says none)."""
    try:
        usage = orjson.loads(body).get("usage")
    except (orjson.JSONDecodeError, AttributeError):
        return 0, 0, 0, 0
    if not isinstance(usage, dict):
        return 0, 0, 0, 0
    inp = usage.get("input_tokens", usage.get("prompt_tokens", 0))
    out = usage.get("output_tokens", usage.get("completion_tokens", 0))
    details = usage.get("input_tokens_details") or usage.get("prompt_tokens_details") or {}
    cached = details.get("cached_tokens", usage.get("cache_read_input_tokens", 0))
    out_details = usage.get("output_tokens_details") or usage.get("completion_tokens_details") or {}
    reasoning = out_details.get("reasoning_tokens", 0)
    return tuple(int(v) if isinstance(v, int) else 0 for v in (inp, out, cached, reasoning))  # type: ignore[return-value]
