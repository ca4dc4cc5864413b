"""The OpenAI Files API: upload, list, retrieve, download and delete files.

* ``POST /v1/files`` -- ``multipart/form-data`` with ``file``, ``purpose`` (``batch`` or
  ``user_data``) and optionally ``expires_after[anchor]=created_at`` with
  ``expires_after[seconds]`` (3600 to 2592000, as the API); the ``file`` object. The body
  is read as it arrives and the file's bytes go straight to the store
  (server/batches/multipart.py): never held whole, and refused with a 413 the moment the
  file passes ``files.max_bytes`` (or at once, when Content-Length says so).
* ``GET /v1/files`` -- a ``list`` object (``data``, ``first_id``, ``last_id``,
  ``has_more``), filtered by ``purpose``, paged by ``limit`` (1 to 10,000, default
  10,000) and ``after`` (a file id), ordered by ``order`` (``desc``, the default: newest
  first, or ``asc``).
* ``GET /v1/files/{id}`` -- the ``file`` object; ``GET /v1/files/{id}/content`` its
  bytes (``application/octet-stream``), streamed from the store a chunk at a time.
* ``DELETE /v1/files/{id}`` -- ``{"id", "object": "file", "deleted": true}``.

Each also answers without the ``/v1`` prefix. A file belongs to the key that uploaded it
(server/responses/state.py ``owner_of``): to any other key its id is unknown, the same
404 as an id never seen. The store is interlingua/batches; a store that fails is a 503.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import orjson
from starlette.requests import Request as HTTPRequest
from starlette.responses import StreamingResponse
from starlette.routing import Route

from ...batches import (
    MESSAGE_BATCH_PURPOSE,
    BatchStore,
    FileStore,
    StoredFile,
    Upload,
    open_batch_store,
)
from ...config import Config, FilesConfig
from ...dialects import get_dialect
from ...errors import InvalidRequestError, RequestTooLargeError
from ...usage import StoreError
from ..asgi_io import BytesResponse, plain_headers
from ..keys import ClientKey
from ..responses.state import owner_of, store_unavailable
from .multipart import MAX_FIELD_BYTES, FormReader, boundary_of

__all__ = ["PURPOSES", "FilesApi"]

log = logging.getLogger("interlingua.server")
OPENAI = get_dialect("openai")

#: the purposes an upload may have here: input for the Batch API, and anything else
PURPOSES = ("batch", "user_data")
#: the API's bounds on ``expires_after[seconds]``
EXPIRES_AFTER_RANGE = (3600, 2_592_000)
_MAX_LIMIT = 10_000
#: bytes of a form beyond its file: boundaries, part headers, the small fields
_FORM_OVERHEAD = MAX_FIELD_BYTES + 16 * 1024

Answer = Callable[[HTTPRequest, Any, Awaitable[Any]], Awaitable[Any]]


def _not_found(file_id: str) -> InvalidRequestError:
    return InvalidRequestError(f"No such File object: {file_id}", status=404, param="id")


def _too_large(limit: int) -> RequestTooLargeError:
    size = f"{limit / (1024 * 1024):g} MB" if limit >= 1024 * 1024 else f"{limit} bytes"
    return RequestTooLargeError(
        f"The file is larger than this gateway's limit of {size} (files.max_bytes).",
        param="file",
        code="file_too_large",
    )


def _invalid(param: str, message: str) -> InvalidRequestError:
    return InvalidRequestError(message, param=param, code="invalid_value")


class FilesApi:
    """The endpoint functions over one store. ``answer`` and ``check_auth`` are the
    app's own (server/app.py ``Handlers``): ``check_auth`` gives the request's key,
    whose files alone it may see."""

    def __init__(
        self,
        store: BatchStore,
        config: FilesConfig,
        answer: Answer,
        check_auth: Callable[[Mapping[str, str]], ClientKey | None],
    ) -> None:
        self.store = store
        self.files: FileStore = store.files
        self.config = config
        self._answer = answer
        self._check_auth = check_auth

    @classmethod
    def build(
        cls,
        config: Config,
        answer: Answer,
        check_auth: Callable[[Mapping[str, str]], ClientKey | None],
    ) -> FilesApi:
        """The routes over the store ``config.batches`` names (not yet opened:
        :meth:`serving` does that), with ``config.files``' limits."""
        return cls(open_batch_store(config.batches.url), config.files, answer, check_auth)

    def routes(self) -> list[Route]:
        """The Starlette routes, with and without ``/v1``."""
        routes = []
        for prefix in ("/v1/files", "/files"):
            routes += [
                Route(prefix, self.create, methods=["POST"]),
                Route(prefix, self.list_files, methods=["GET"]),
                Route(prefix + "/{file_id}/content", self.content, methods=["GET"]),
                Route(prefix + "/{file_id}", self.retrieve, methods=["GET"]),
                Route(prefix + "/{file_id}", self.delete, methods=["DELETE"]),
            ]
        return routes

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """Open the store (a failure is logged: the routes answer 503 and retry) and
        sweep expired files while the app serves."""
        try:
            await self.store.open()
        except StoreError as exc:
            log.error("files store unavailable (retried on use): %s", exc)
        every = min(60.0, max(0.2, self.config.expire_after / 4))
        async with self.files.sweeping(every):
            try:
                yield
            finally:
                await self.store.aclose()

    def _owner(self, request: HTTPRequest) -> str:
        return owner_of(self._check_auth(plain_headers(request)))

    async def opened(self) -> FileStore:
        """The file store, opened (503 while its database is away)."""
        try:
            await self.store.open()
        except StoreError as exc:
            raise store_unavailable(exc) from exc
        return self.files

    # -- POST /v1/files -----------------------------------------------------------------

    async def create(self, request: HTTPRequest) -> Any:
        return await self._answer(request, OPENAI, self._create(request))

    async def _create(self, request: HTTPRequest) -> BytesResponse:
        headers = plain_headers(request)
        owner = owner_of(self._check_auth(headers))
        limit = self.config.max_bytes
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit + _FORM_OVERHEAD:
            raise _too_large(limit)  # (before a byte of it is read)
        reader = FormReader(boundary_of(headers.get("content-type", "")))
        files = await self.opened()
        upload: Upload | None = None
        try:
            upload = await self._receive(request, reader, files, owner)
            purpose = _purpose(reader.fields)
            expire_after = _expire_after(reader.fields, self.config.expire_after)
            if upload is None:
                raise _invalid("file", "The form has no 'file' part: the file to upload.")
            assert reader.filename is not None
            stored = await upload.finish(purpose, reader.filename, expire_after)
        except BaseException:
            if upload is not None:
                await _abort(upload)
            raise
        return BytesResponse(orjson.dumps(stored.as_object()))

    async def _receive(
        self, request: HTTPRequest, reader: FormReader, files: FileStore, owner: str
    ) -> Upload | None:
        """Read the body into ``reader``, the file's bytes into a new upload (None: the
        form had no file); a 413 as soon as the file passes the limit."""
        limit = self.config.max_bytes
        upload: Upload | None = None
        try:
            while True:
                message = await request.receive()
                if message["type"] == "http.disconnect":
                    raise InvalidRequestError("The client disconnected before the whole upload.")
                reader.feed(message.get("body", b""))
                if reader.filename is not None and upload is None:
                    _purpose(reader.fields, missing_ok=True)  # (a wrong one: refused now)
                    upload = await files.begin(owner)
                for data in reader.take():
                    assert upload is not None
                    if upload.size + len(data) > limit:
                        raise _too_large(limit)
                    await upload.write(data)
                if not message.get("more_body", False):
                    reader.finish()
                    return upload
        except BaseException:
            if upload is not None:
                await _abort(upload)
            raise

    # -- GET /v1/files ------------------------------------------------------------------

    async def list_files(self, request: HTTPRequest) -> Any:
        return await self._answer(request, OPENAI, self._list(request))

    async def _list(self, request: HTTPRequest) -> BytesResponse:
        owner = self._owner(request)
        query = request.query_params
        order = query.get("order", "desc")
        if order not in ("asc", "desc"):
            raise _invalid(
                "order", f"Invalid value for 'order': expected 'asc' or 'desc', got {order!r}."
            )
        raw_limit = query.get("limit", str(_MAX_LIMIT))
        limit = int(raw_limit) if raw_limit.isdigit() else 0
        if not 1 <= limit <= _MAX_LIMIT:
            raise _invalid(
                "limit",
                f"Invalid value for 'limit': expected an integer from 1 to {_MAX_LIMIT}, "
                f"got {raw_limit!r}.",
            )
        after = query.get("after")
        try:
            files = await self.opened()
            page = await files.page(
                owner, purpose=query.get("purpose"), limit=limit, after=after, order=order
            )
        except StoreError as exc:
            raise store_unavailable(exc) from exc
        if page is None:
            raise _invalid("after", f"Invalid value for 'after': no file with id {after!r}.")
        data = [f.as_object() for f in page.files]
        body = {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": page.has_more,
        }
        return BytesResponse(orjson.dumps(body))

    # -- GET /v1/files/{id}, its content, DELETE ------------------------------------------

    async def retrieve(self, request: HTTPRequest) -> Any:
        return await self._answer(request, OPENAI, self._retrieve(request))

    async def _retrieve(self, request: HTTPRequest) -> BytesResponse:
        return BytesResponse(orjson.dumps((await self._found(request)).as_object()))

    async def _found(self, request: HTTPRequest) -> StoredFile:
        owner = self._owner(request)
        file_id = request.path_params["file_id"]
        try:
            stored = await (await self.opened()).get(file_id, owner)
        except StoreError as exc:
            raise store_unavailable(exc) from exc
        if stored is None or stored.purpose == MESSAGE_BATCH_PURPOSE:  # (that API's)
            raise _not_found(file_id)
        return stored

    async def content(self, request: HTTPRequest) -> Any:
        return await self._answer(request, OPENAI, self._content(request))

    async def _content(self, request: HTTPRequest) -> StreamingResponse:
        stored = await self._found(request)
        name = stored.filename.replace('"', "").replace("\\", "")
        headers = {
            "content-length": str(stored.bytes),
            "content-disposition": f'attachment; filename="{name}"',
        }
        return StreamingResponse(
            self.files.content(stored.id), media_type="application/octet-stream", headers=headers
        )

    async def delete(self, request: HTTPRequest) -> Any:
        return await self._answer(request, OPENAI, self._delete(request))

    async def _delete(self, request: HTTPRequest) -> BytesResponse:
        owner = self._owner(request)
        file_id = request.path_params["file_id"]
        await self._found(request)  # (a message batch's file is deleted with the batch)
        try:
            deleted = await (await self.opened()).delete(file_id, owner)
        except StoreError as exc:
            raise store_unavailable(exc) from exc
        if not deleted:
            raise _not_found(file_id)
        return BytesResponse(orjson.dumps({"id": file_id, "object": "file", "deleted": True}))


async def _abort(upload: Upload) -> None:
    """Delete an upload that will not finish; a store failure is logged (the sweep
    takes the row and bytes a day later)."""
    try:
        await upload.abort()
    except (StoreError, OSError) as exc:
        log.warning("could not delete the aborted upload %s (swept later): %s", upload.id, exc)


def _purpose(fields: Mapping[str, str], *, missing_ok: bool = False) -> str:
    """The form's ``purpose``; a 400 naming what is accepted."""
    purpose = fields.get("purpose")
    if purpose is None and missing_ok:
        return ""
    if purpose not in PURPOSES:
        got = "none" if purpose is None else repr(purpose)
        raise _invalid(
            "purpose",
            f"Invalid value for 'purpose': this gateway accepts {' or '.join(PURPOSES)}, got {got}.",
        )
    return purpose


def _expire_after(fields: Mapping[str, str], default: float) -> float:
    """Seconds the file is kept: the form's ``expires_after``, else ``default``."""
    anchor = fields.get("expires_after[anchor]")
    seconds = fields.get("expires_after[seconds]")
    if anchor is None and seconds is None:
        return default
    if anchor != "created_at":
        raise _invalid(
            "expires_after.anchor",
            f"Invalid value for 'expires_after.anchor': expected 'created_at', got {anchor!r}.",
        )
    low, high = EXPIRES_AFTER_RANGE
    if seconds is None or not seconds.isdigit() or not low <= int(seconds) <= high:
        raise _invalid(
            "expires_after.seconds",
            f"Invalid value for 'expires_after.seconds': expected an integer from {low} to "
            f"{high}, got {seconds!r}.",
        )
    return float(seconds)
