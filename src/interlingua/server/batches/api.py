"""The OpenAI Batch API, and the Files API beside it, over one store and one executor.

* ``POST /v1/batches`` -- ``input_file_id`` (a ``batch`` file of the caller's),
  ``endpoint`` (``/v1/chat/completions``, ``/v1/responses`` or ``/v1/messages``: every
  line's ``url`` must be it), ``completion_window`` (``"24h"``, the one window the API
  has; ``batches.completion_window`` says how long it lasts here), ``metadata`` (at most
  16 pairs, keys up to 64 characters, values up to 512); the ``batch`` object,
  ``validating``. The executor (server/batches/executor.py) takes it from there.
* ``GET /v1/batches/{id}`` -- the ``batch`` object.
* ``GET /v1/batches`` -- a ``list`` object, newest first, paged by ``limit`` (1 to 100,
  default 20) and ``after`` (a batch id), with ``first_id``, ``last_id``, ``has_more``.
* ``POST /v1/batches/{id}/cancel`` -- a validating or running batch becomes
  ``cancelling`` and then ``cancelled``, keeping the lines that finished; a batch already
  cancelling or cancelled is answered as it is; one that ended otherwise is a 409.

Each also answers without the ``/v1`` prefix. A batch belongs to the key that created it,
as a file does (server/batches/files.py): to another key its id is the same 404 as an
unknown one. The output and error files belong to that key too (``purpose``
``batch_output``), read with ``GET /v1/files/{id}/content``.

Anthropic's Message Batches (``/v1/messages/batches``) are batches of this store too,
rendered their own way: server/batches/message_batches.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any, Protocol

import orjson
from starlette.requests import Request as HTTPRequest
from starlette.routing import Route

from ...batches import MESSAGE_BATCH_PURPOSE, Job, JobStore
from ...config import BatchesConfig, Config
from ...dialects import Dialect, get_dialect
from ...errors import InvalidRequestError
from ...usage import StoreError
from ..asgi_io import BytesResponse, decode_json_object, plain_headers, read_body
from ..keys import ClientKey
from ..responses.state import owner_of, store_unavailable
from .executor import Executor
from .files import FilesApi
from .lines import Handlers, LineRunner
from .message_batches import MessageBatchesApi

__all__ = ["ENDPOINTS", "WINDOWS", "BatchApis"]

OPENAI = get_dialect("openai")

#: the endpoints a batch may be of
ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/messages")
#: the completion windows the API accepts
WINDOWS = ("24h",)
_MAX_LIMIT, _DEFAULT_LIMIT = 100, 20
#: the API's bounds on ``metadata``
_METADATA_PAIRS, _METADATA_KEY, _METADATA_VALUE = 16, 64, 512
#: bytes a create request's body may have
_MAX_BODY = 64 * 1024


class AppHandlers(Handlers, Protocol):
    """What the APIs need of the app's handlers (server/app.py ``Handlers``)."""

    def answer(
        self, request: HTTPRequest, dialect: Dialect, work: Awaitable[Any]
    ) -> Awaitable[Any]:
        """``work``'s response, or its error as a response in ``dialect``."""
        ...

    def _check_auth(self, headers: Mapping[str, str]) -> ClientKey | None:
        """The request's key."""
        ...


def _invalid(param: str, message: str) -> InvalidRequestError:
    return InvalidRequestError(message, param=param, code="invalid_value")


def _not_found(batch_id: str) -> InvalidRequestError:
    return InvalidRequestError(f"No such Batch object: {batch_id}", status=404, param="id")


class BatchApis:
    """The Files and Batch APIs' routes, and what runs beside them while the app serves
    (:meth:`serving`: the store, the files' expiry sweep, the executor)."""

    def __init__(
        self, files: FilesApi, executor: Executor, config: BatchesConfig, handlers: AppHandlers
    ) -> None:
        self.files = files
        self.executor = executor
        self.jobs: JobStore = files.store.jobs
        self.config = config
        self._answer = handlers.answer
        self._check_auth = handlers._check_auth

    @classmethod
    def build(cls, config: Config, handlers: AppHandlers) -> BatchApis:
        """Both APIs over the store ``config.batches`` names (opened by :meth:`serving`)."""
        files = FilesApi.build(config, handlers.answer, handlers._check_auth)
        executor = Executor(files.store, config.batches, config.files, LineRunner(handlers))
        return cls(files, executor, config.batches, handlers)

    def routes(self) -> list[Route]:
        """The Starlette routes, with and without ``/v1``."""
        routes = self.files.routes() + MessageBatchesApi(self).routes()
        for prefix in ("/v1/batches", "/batches"):
            routes += [
                Route(prefix, self.create, methods=["POST"]),
                Route(prefix, self.list_batches, methods=["GET"]),
                Route(prefix + "/{batch_id}", self.retrieve, methods=["GET"]),
                Route(prefix + "/{batch_id}/cancel", self.cancel, methods=["POST"]),
            ]
        return routes

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """The Files API's store and sweep, and the executor inside them."""
        async with self.files.serving(), self.executor.serving():
            yield

    def _owner(self, request: HTTPRequest) -> str:
        return owner_of(self._check_auth(plain_headers(request)))

    async def _store(self) -> JobStore:
        await self.files.opened()  # (one database holds files and batches)
        return self.jobs

    # -- POST /v1/batches -------------------------------------------------------------

    async def create(self, request: HTTPRequest) -> Any:
        return await self._answer(request, OPENAI, self._create(request))

    async def _create(self, request: HTTPRequest) -> BytesResponse:
        headers = plain_headers(request)
        owner = owner_of(self._check_auth(headers))
        body = decode_json_object(await read_body(request, _MAX_BODY, headers))
        endpoint = body.get("endpoint")
        if endpoint not in ENDPOINTS:
            raise _invalid(
                "endpoint",
                f"Invalid value for 'endpoint': this gateway runs batches of "
                f"{', '.join(ENDPOINTS)}; got {endpoint!r}.",
            )
        window = body.get("completion_window")
        if window not in WINDOWS:
            raise _invalid(
                "completion_window",
                f"Invalid value for 'completion_window': expected '24h', got {window!r}.",
            )
        metadata = _metadata(body.get("metadata"))
        file_id = body.get("input_file_id")
        if not isinstance(file_id, str):
            raise _invalid("input_file_id", "'input_file_id' must be the id of an uploaded file.")
        jobs = await self._store()
        try:
            stored = await self.files.files.get(file_id, owner)
            if stored is None or stored.purpose == MESSAGE_BATCH_PURPOSE:
                raise InvalidRequestError(
                    f"No such File object: {file_id}", status=404, param="input_file_id"
                )
            if stored.purpose != "batch":
                raise _invalid(
                    "input_file_id",
                    f"The file {file_id} was uploaded with purpose {stored.purpose!r}; a "
                    "batch's input must have purpose 'batch'.",
                )
            job = await jobs.create(
                owner, endpoint, file_id, window, self.config.completion_window, metadata
            )
        except StoreError as exc:
            raise store_unavailable(exc) from exc
        self.executor.wake()
        return BytesResponse(orjson.dumps(job.as_object()))

    # -- GET /v1/batches, /v1/batches/{id} ----------------------------------------------

    async def list_batches(self, request: HTTPRequest) -> Any:
        return await self._answer(request, OPENAI, self._list(request))

    async def _list(self, request: HTTPRequest) -> BytesResponse:
        owner = self._owner(request)
        raw_limit = request.query_params.get("limit", str(_DEFAULT_LIMIT))
        limit = int(raw_limit) if raw_limit.isdigit() else 0
        if not 1 <= limit <= _MAX_LIMIT:
            raise _invalid(
                "limit",
                f"Invalid value for 'limit': expected an integer from 1 to {_MAX_LIMIT}, "
                f"got {raw_limit!r}.",
            )
        after = request.query_params.get("after")
        jobs = await self._store()
        try:
            page = await jobs.page(owner, limit=limit, after=after, kind="batch")
        except StoreError as exc:
            raise store_unavailable(exc) from exc
        if page is None:
            raise _invalid("after", f"Invalid value for 'after': no batch with id {after!r}.")
        data = [job.as_object() for job in page[0]]
        body = {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": page[1],
        }
        return BytesResponse(orjson.dumps(body))

    async def retrieve(self, request: HTTPRequest) -> Any:
        return await self._answer(request, OPENAI, self._retrieve(request))

    async def _retrieve(self, request: HTTPRequest) -> BytesResponse:
        owner = self._owner(request)
        batch_id = request.path_params["batch_id"]
        jobs = await self._store()
        try:
            job = await jobs.get(batch_id, owner, "batch")
        except StoreError as exc:
            raise store_unavailable(exc) from exc
        if job is None:
            raise _not_found(batch_id)
        return BytesResponse(orjson.dumps(job.as_object()))

    # -- POST /v1/batches/{id}/cancel ---------------------------------------------------

    async def cancel(self, request: HTTPRequest) -> Any:
        return await self._answer(request, OPENAI, self._cancel(request))

    async def _cancel(self, request: HTTPRequest) -> BytesResponse:
        owner = self._owner(request)
        batch_id = request.path_params["batch_id"]
        jobs = await self._store()
        try:
            job = await jobs.cancel(batch_id, owner, "batch")
        except StoreError as exc:
            raise store_unavailable(exc) from exc
        if job is None:
            raise _not_found(batch_id)
        _check_cancellable(job)
        self.executor.wake()
        return BytesResponse(orjson.dumps(job.as_object()))


def _check_cancellable(job: Job) -> None:
    """A 409 for a batch that ended otherwise than by a cancel."""
    if job.status not in ("cancelling", "cancelled"):
        raise InvalidRequestError(
            f"Cannot cancel a batch with status {job.status!r}.",
            status=409,
            param="id",
            code="batch_not_cancellable",
        )


def _metadata(value: Any) -> dict[str, str] | None:
    """``metadata`` within the API's bounds; a 400 naming the bound passed."""
    if value is None:
        return None
    if not isinstance(value, dict) or len(value) > _METADATA_PAIRS:
        raise _invalid(
            "metadata", f"'metadata' must be an object of at most {_METADATA_PAIRS} pairs."
        )
    for key, item in value.items():
        if len(key) > _METADATA_KEY or not isinstance(item, str) or len(item) > _METADATA_VALUE:
            raise _invalid(
                "metadata",
                f"'metadata' keys must be strings of at most {_METADATA_KEY} characters and "
                f"values strings of at most {_METADATA_VALUE}; {key!r} is not.",
            )
    return value
