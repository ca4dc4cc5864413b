"""Anthropic's Message Batches over the Batch API's store and executor.

A message batch IS a batch of the endpoint ``/v1/messages`` (server/batches/api.py) whose
requests come in the create request rather than in an uploaded file: they are written,
as Batch input lines (``{custom_id, method: POST, url: /v1/messages, body: params}``), to
an input file of the key's with the purpose ``message_batch`` (batches/files.py: never
listed nor served by the Files API), and the batch is created with ``kind``
``message_batch``. The executor runs it as any other (so restarts, leases, limits and
translation apply alike); this module renders it, and its results, Anthropic's way.

* ``POST /v1/messages/batches`` -- ``requests``: 1 to 100,000 of ``{custom_id, params}``
  (``custom_id`` 1 to 64 of ``[a-zA-Z0-9_-]``, unique; ``params`` a Messages request body,
  checked as ``/v1/messages`` checks one, without running it; no ``stream``; a model the
  key may use). A bad one is a 400 naming its index. The ``message_batch`` object.
* ``GET /v1/messages/batches/{id}`` -- the object; ``results_url`` once it ended.
* ``GET /v1/messages/batches`` -- ``{data, has_more, first_id, last_id}``, newest first,
  ``limit`` 1 to 1000 (20), ``after_id`` (older than it) or ``before_id`` (newer).
* ``POST /v1/messages/batches/{id}/cancel`` -- ``canceling`` until the lines running
  finish; an ended batch is answered as it is.
* ``GET /v1/messages/batches/{id}/results`` -- JSONL, one line per request:
  ``succeeded`` (the Message), ``errored`` (the error response), ``canceled``,
  ``expired``. A 400 before the batch has ended.
* ``DELETE /v1/messages/batches/{id}`` -- an ended batch, with its files; a 400 before.

Errors are in the Anthropic dialect throughout (another key's batch: the same
``not_found_error`` as an unknown id). ``processing_status`` folds the executor's
statuses: validating, running and finalizing are ``in_progress``; cancelling is
``canceling``; any end is ``ended``. Counts other than ``processing`` stay zero until the
batch ends, as the API's do.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Mapping
from datetime import UTC, datetime
from typing import Any, Protocol

import orjson
from starlette.requests import Request as HTTPRequest
from starlette.responses import StreamingResponse
from starlette.routing import Route

from ...batches import MESSAGE_BATCH_PURPOSE, Job, JobStore
from ...batches.jobs import ENDED
from ...config import BatchesConfig
from ...dialects import Dialect, get_dialect
from ...dialects.anthropic.validate import validate_request
from ...errors import InterlinguaError, InvalidRequestError, NotFoundError
from ...usage import StoreError
from ..asgi_io import BytesResponse, decode_json_object, plain_headers, read_body
from ..keys import ClientKey
from ..responses.state import owner_of, store_unavailable
from .executor import Executor
from .files import FilesApi
from .lines import MAX_MESSAGE_REQUESTS, input_lines


class Apis(Protocol):
    """What this API uses of the Batch API's (server/batches/api.py ``BatchApis``)."""

    files: FilesApi
    executor: Executor
    jobs: JobStore
    config: BatchesConfig

    def _answer(self, request: HTTPRequest, dialect: Dialect, work: Awaitable[Any]) -> Any:
        """``work``'s response, or its error as a response in ``dialect``."""
        ...

    def _check_auth(self, headers: Mapping[str, str]) -> ClientKey | None:
        """The request's key."""
        ...

    async def _store(self) -> JobStore:
        """The opened store's batches (a 503 when it cannot be reached)."""
        ...


__all__ = ["KIND", "Apis", "MessageBatchesApi", "message_batch_object"]

ANTHROPIC = get_dialect("anthropic")
#: the batches store's ``kind`` of a message batch
KIND = "message_batch"
_CUSTOM_ID = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_MAX_LIMIT, _DEFAULT_LIMIT = 1000, 20
#: bytes the input file is written in at a time
_WRITE = 1024 * 1024


def _rfc3339(seconds: int | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def _counts(job: Job) -> dict[str, int]:
    """``request_counts``: every request ``processing`` until the batch ends."""
    counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
    if job.status not in ENDED:
        counts["processing"] = job.total
    elif job.status == "failed" and job.errors and not job.counts.completed:
        counts["errored"] = job.total  # (refused as a whole: every request errored)
    else:
        succeeded, failed = job.counts.completed, job.counts.failed
        counts.update(succeeded=succeeded, errored=failed - job.expired, expired=job.expired)
        counts["canceled"] = max(0, job.total - succeeded - failed)
    return counts


def message_batch_object(job: Job, base_url: str) -> dict[str, Any]:
    """The API's ``message_batch`` object of ``job`` (``base_url``: this gateway's, as
    the request reached it, for ``results_url``)."""
    times = job.times
    ended = job.status in ENDED
    status = "ended" if ended else "canceling" if job.status == "cancelling" else "in_progress"
    ended_at = times.get(f"{job.status}_at") if ended else None
    return {
        "id": job.id,
        "type": "message_batch",
        "processing_status": status,
        "request_counts": _counts(job),
        "created_at": _rfc3339(times["created_at"]),
        "ended_at": _rfc3339(ended_at),
        "expires_at": _rfc3339(times["expires_at"]),
        "archived_at": None,
        "cancel_initiated_at": _rfc3339(times["cancelling_at"]),
        "results_url": f"{base_url}/v1/messages/batches/{job.id}/results" if ended else None,
    }


def _refused(index: int, message: str) -> InvalidRequestError:
    return InvalidRequestError(f"requests.{index}: {message}", param=f"requests.{index}")


def _not_found(batch_id: str) -> NotFoundError:
    return NotFoundError(f"No Message Batch with id {batch_id!r}.", status=404)


def check_requests(body: dict[str, Any], key: ClientKey | None) -> list[dict[str, Any]]:
    """The create request's ``requests``, each checked (see the module docstring); a 400
    naming the first bad one's index."""
    requests = body.get("requests")
    if not isinstance(requests, list) or not 1 <= len(requests) <= MAX_MESSAGE_REQUESTS:
        raise InvalidRequestError(
            f"requests: expected a list of 1 to {MAX_MESSAGE_REQUESTS} requests.",
            param="requests",
        )
    seen: set[str] = set()
    for index, item in enumerate(requests):
        if not isinstance(item, dict) or not isinstance(item.get("params"), dict):
            raise _refused(index, "expected an object with 'custom_id' and 'params'.")
        custom_id = item.get("custom_id")
        if not isinstance(custom_id, str) or not _CUSTOM_ID.fullmatch(custom_id):
            raise _refused(
                index, "custom_id: expected 1 to 64 letters, digits, underscores or hyphens."
            )
        if custom_id in seen:
            raise _refused(index, f"custom_id {custom_id!r} is used by an earlier request.")
        seen.add(custom_id)
        params = item["params"]
        try:
            validate_request(params)
        except InterlinguaError as err:
            raise _refused(index, f"params.{err.message}") from err
        if params.get("stream") is True:
            raise _refused(index, "params.stream: a batched request cannot stream.")
        if key is not None and not key.allows(params["model"]):
            raise _refused(index, f"params.model: this key may not use {params['model']!r}.")
    return requests


class MessageBatchesApi:
    """The Message Batches routes, over a :class:`BatchApis`' store and executor."""

    def __init__(self, apis: Apis) -> None:
        self.apis = apis
        self.jobs: JobStore = apis.jobs

    def routes(self) -> list[Route]:
        """The Starlette routes."""
        prefix = "/v1/messages/batches"
        return [
            Route(prefix, self._route(self._create), methods=["POST"]),
            Route(prefix, self._route(self._list), methods=["GET"]),
            Route(prefix + "/{batch_id}", self._route(self._retrieve), methods=["GET"]),
            Route(prefix + "/{batch_id}", self._route(self._delete), methods=["DELETE"]),
            Route(prefix + "/{batch_id}/cancel", self._route(self._cancel), methods=["POST"]),
            Route(prefix + "/{batch_id}/results", self._route(self._results), methods=["GET"]),
        ]

    def _route(self, work: Any) -> Any:
        async def endpoint(request: HTTPRequest) -> Any:
            return await self.apis._answer(request, ANTHROPIC, work(request))

        return endpoint

    def _owner(self, request: HTTPRequest) -> str:
        return owner_of(self.apis._check_auth(plain_headers(request)))

    def _object(self, request: HTTPRequest, job: Job) -> BytesResponse:
        base = str(request.base_url).rstrip("/")
        return BytesResponse(orjson.dumps(message_batch_object(job, base)))

    async def _job(self, request: HTTPRequest) -> Job:
        owner = self._owner(request)
        batch_id = request.path_params["batch_id"]
        await self.apis._store()
        try:
            job = await self.jobs.get(batch_id, owner, KIND)
        except StoreError as exc:
            raise store_unavailable(exc) from exc
        if job is None:
            raise _not_found(batch_id)
        return job

    # -- POST /v1/messages/batches ------------------------------------------------------

    async def _create(self, request: HTTPRequest) -> BytesResponse:
        headers = plain_headers(request)
        key = self.apis._check_auth(headers)
        owner = owner_of(key)
        limit = self.apis.files.config.max_bytes
        requests = check_requests(decode_json_object(await read_body(request, limit, headers)), key)
        await self.apis._store()
        files = self.apis.files.files
        try:
            upload = await files.begin(owner)
            chunk = bytearray()
            for item in requests:
                line = {"custom_id": item["custom_id"], "method": "POST", "url": "/v1/messages",
                        "body": item["params"]}  # fmt: skip
                chunk += orjson.dumps(line) + b"\n"
                if len(chunk) >= _WRITE:
                    await upload.write(bytes(chunk))
                    chunk.clear()
            await upload.write(bytes(chunk))
            keep = self.apis.files.config.expire_after
            stored = await upload.finish(MESSAGE_BATCH_PURPOSE, "message_batch_input.jsonl", keep)
            config = self.apis.config
            job = await self.jobs.create(
                owner, "/v1/messages", stored.id, "24h", config.completion_window, None,
                kind=KIND, total=len(requests),
            )  # fmt: skip
        except StoreError as exc:
            raise store_unavailable(exc) from exc
        self.apis.executor.wake()
        return self._object(request, job)

    # -- GET /v1/messages/batches, /{id}; cancel; DELETE ----------------------------------

    async def _list(self, request: HTTPRequest) -> BytesResponse:
        owner = self._owner(request)
        query = request.query_params
        raw = query.get("limit", str(_DEFAULT_LIMIT))
        limit = int(raw) if raw.isdigit() else 0
        if not 1 <= limit <= _MAX_LIMIT:
            raise InvalidRequestError(
                f"limit: expected an integer from 1 to {_MAX_LIMIT}, got {raw!r}.", param="limit"
            )
        after, before = query.get("after_id"), query.get("before_id")
        await self.apis._store()
        try:
            page = await self.jobs.page(owner, limit=limit, after=after, before=before, kind=KIND)
        except StoreError as exc:
            raise store_unavailable(exc) from exc
        if page is None:
            name = "after_id" if after is not None else "before_id"
            raise InvalidRequestError(
                f"{name}: no Message Batch with id {after or before!r}.", param=name
            )
        base = str(request.base_url).rstrip("/")
        data = [message_batch_object(job, base) for job in page[0]]
        body = {
            "data": data,
            "has_more": page[1],
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }
        return BytesResponse(orjson.dumps(body))

    async def _retrieve(self, request: HTTPRequest) -> BytesResponse:
        return self._object(request, await self._job(request))

    async def _cancel(self, request: HTTPRequest) -> BytesResponse:
        job = await self._job(request)
        try:
            cancelled = await self.jobs.cancel(job.id, job.owner, KIND)
        except StoreError as exc:
            raise store_unavailable(exc) from exc
        self.apis.executor.wake()
        return self._object(request, cancelled or job)

    async def _delete(self, request: HTTPRequest) -> BytesResponse:
        job = await self._job(request)
        if job.status not in ENDED:
            raise InvalidRequestError(
                f"Message Batch {job.id} is still processing; cancel it and delete it once "
                "it has ended.",
            )
        try:
            if await self.jobs.delete(job.id, job.owner):
                names = [job.input_file_id, job.output_file_id, job.error_file_id]
                await self.apis.files.files.discard([name for name in names if name])
        except StoreError as exc:
            raise store_unavailable(exc) from exc
        return BytesResponse(orjson.dumps({"id": job.id, "type": "message_batch_deleted"}))

    # -- GET /v1/messages/batches/{id}/results --------------------------------------------

    async def _results(self, request: HTTPRequest) -> StreamingResponse:
        job = await self._job(request)
        if job.status not in ENDED:
            raise InvalidRequestError(
                f"Message Batch {job.id} has not ended yet; its results are available once "
                "its processing_status is 'ended'.",
            )
        return StreamingResponse(self._lines(job), media_type="application/x-jsonl")

    async def _lines(self, job: Job) -> AsyncIterator[bytes]:
        """One result line per request: from the output file, the error file, then the
        requests neither holds (canceled; errored when the batch was refused whole)."""
        files = self.apis.files.files
        seen: set[str] = set()
        for file_id in (job.output_file_id, job.error_file_id):
            if file_id:
                async for _, raw in input_lines(files, file_id):
                    custom_id, result = _result(orjson.loads(raw))
                    seen.add(custom_id)
                    yield _line(custom_id, result)
        if job.status not in ("cancelled", "failed"):
            return
        left: dict[str, Any] = {"type": "canceled"}
        if job.status == "failed":
            message = "; ".join(str(e.get("message")) for e in job.errors or ()) or "failed"
            left = _errored("invalid_request_error", message)
        async for _, raw in input_lines(files, job.input_file_id):
            custom_id = orjson.loads(raw)["custom_id"]
            if custom_id not in seen:
                yield _line(custom_id, left)


def _line(custom_id: str, result: dict[str, Any]) -> bytes:
    return orjson.dumps({"custom_id": custom_id, "result": result}) + b"\n"


def _errored(error_type: str, message: str) -> dict[str, Any]:
    return {"type": "errored", "error": {"type": "error",
            "error": {"type": error_type, "message": message}}}  # fmt: skip


def _result(record: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(custom_id, result)`` of one Batch output line of a message batch."""
    custom_id = record["custom_id"]
    error = record.get("error")
    response = record.get("response") or {}
    if error is None:
        return custom_id, {"type": "succeeded", "message": response.get("body")}
    if error.get("code") == "batch_expired":
        return custom_id, {"type": "expired"}
    body = response.get("body")
    if isinstance(body, dict) and body.get("type") == "error":
        return custom_id, {"type": "errored", "error": body}  # (the Anthropic error body)
    return custom_id, _errored("api_error", str(error.get("message")))
