"""The stored-response endpoints of the Responses API.

* ``GET /v1/responses/{id}`` -- the response object as it was sent (for a stream: the
  final object of its terminal event). ``include`` is accepted and has no effect: what
  the object holds was decided by the request that created it. ``stream=true`` (replay
  as events) is refused with a 400 naming ``stream``.
* ``GET /v1/responses/{id}/input_items`` -- the items the response was generated from,
  as the API lists them: the whole conversation up to this response (the inputs and
  outputs of every earlier response of a ``previous_response_id`` chain, then its own
  input), each item with an id. A ``list`` object (``data``, ``first_id``, ``last_id``,
  ``has_more``) paged by ``after`` / ``before`` (item ids), ``limit`` (1-100, default
  20) and ``order`` (``asc`` | ``desc``, default ``desc``: newest first).
* ``DELETE /v1/responses/{id}`` -- ``{"id", "object": "response.deleted", "deleted":
  true}``.

Each also answers without the ``/v1`` prefix. An unknown (deleted, expired, never
stored) id is a 404 ``Response with id '...' not found.``; with ``responses.store:
false`` every id is unknown. A response belongs to the key that stored it
(server/responses/state.py ``owner_of``): to any other key its id is unknown, the same
404 in every byte, so that no key can learn that another's response exists
(docs/decisions.md, "Stored responses belong to their key").
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request as HTTPRequest
from starlette.routing import Route

from ...dialects import get_dialect
from ...errors import InvalidRequestError
from ...usage import ResponseStore, StoreError
from ..asgi_io import BytesResponse
from .state import owner_of, store_unavailable

__all__ = ["StoredResponses", "page"]

RESPONSES = get_dialect("responses")
_MAX_LIMIT = 100


def _not_found(response_id: str, enabled: bool) -> InvalidRequestError:
    message = f"Response with id '{response_id}' not found."
    if not enabled:
        message += " (This gateway stores no responses: responses.store is false.)"
    return InvalidRequestError(message, status=404)


def page(items: list[dict[str, Any]], query: dict[str, str]) -> dict[str, Any]:
    """One page of ``items`` (oldest first) as the API's ``list`` object, per ``query``'s
    ``order``, ``limit``, ``after`` and ``before``; a 400 naming a bad one."""
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequestError(
            f"Invalid value for 'order': expected 'asc' or 'desc', got {order!r}.",
            param="order",
            code="invalid_value",
        )
    raw_limit = query.get("limit", "20")
    try:
        limit = int(raw_limit)
    except ValueError:
        limit = 0
    if not 1 <= limit <= _MAX_LIMIT:
        raise InvalidRequestError(
            f"Invalid value for 'limit': expected an integer from 1 to {_MAX_LIMIT}, "
            f"got {raw_limit!r}.",
            param="limit",
            code="invalid_value",
        )
    ordered = items if order == "asc" else items[::-1]
    ids = [item.get("id") for item in ordered]
    start, end = 0, len(ordered)
    for name in ("after", "before"):
        cursor = query.get(name)
        if cursor is None:
            continue
        if cursor not in ids:
            raise InvalidRequestError(
                f"Invalid value for '{name}': no item with id {cursor!r} in this list.",
                param=name,
                code="invalid_value",
            )
        if name == "after":
            start = ids.index(cursor) + 1
        else:
            end = ids.index(cursor)
    window = ordered[start:end]
    if query.get("before") is not None and query.get("after") is None:
        # Paging backwards: the items just before the cursor, still in the list's order.
        data, more = window[-limit:], len(window) > limit
    else:
        data, more = window[:limit], len(window) > limit
    return {
        "object": "list",
        "data": data,
        "first_id": data[0].get("id") if data else None,
        "last_id": data[-1].get("id") if data else None,
        "has_more": more,
    }


def _listed(input_items: list[dict[str, Any]], ids: list[str]) -> list[dict[str, Any]]:
    """A response's own input items with their ids, as the list shows them."""
    return [{"id": iid, **{k: v for k, v in item.items() if k != "id"}}
            for iid, item in zip(ids, input_items, strict=False)]  # fmt: skip


class StoredResponses:
    """The endpoint functions over one store (None: storing is off). ``answer`` and
    ``check_auth`` are the app's own (server/app.py ``Handlers``): ``check_auth`` gives
    the request's key, whose responses alone it may see."""

    def __init__(self, store: ResponseStore | None, answer: Any, check_auth: Any) -> None:
        self.store = store
        self._answer = answer
        self._check_auth = check_auth

    def routes(self) -> list[Route]:
        """The Starlette routes, with and without ``/v1``."""
        routes = []
        for prefix in ("/v1/responses", "/responses"):
            routes.append(
                Route(prefix + "/{response_id}/input_items", self.input_items, methods=["GET"])
            )
            routes.append(Route(prefix + "/{response_id}", self.retrieve, methods=["GET"]))
            routes.append(Route(prefix + "/{response_id}", self.delete, methods=["DELETE"]))
        return routes

    async def retrieve(self, request: HTTPRequest) -> BytesResponse:
        return await self._answer(request, RESPONSES, self._retrieve(request))  # type: ignore[no-any-return]

    async def _retrieve(self, request: HTTPRequest) -> BytesResponse:
        owner = owner_of(self._check_auth(request.headers))
        rid = request.path_params["response_id"]
        if request.query_params.get("stream", "false").lower() not in ("false", "0", ""):
            raise InvalidRequestError(
                "Replaying a stored response as a stream is not supported by this gateway: "
                "retrieve it without 'stream'.",
                param="stream",
                code="unsupported_parameter",
            )
        body = await self._call("get", rid, owner)
        if body is None:
            raise _not_found(rid, self.store is not None)
        return BytesResponse(body)

    async def delete(self, request: HTTPRequest) -> BytesResponse:
        return await self._answer(request, RESPONSES, self._delete(request))  # type: ignore[no-any-return]

    async def _delete(self, request: HTTPRequest) -> BytesResponse:
        owner = owner_of(self._check_auth(request.headers))
        rid = request.path_params["response_id"]
        if not await self._call("delete", rid, owner):
            raise _not_found(rid, self.store is not None)
        return BytesResponse(
            orjson.dumps({"id": rid, "object": "response.deleted", "deleted": True})
        )

    async def input_items(self, request: HTTPRequest) -> BytesResponse:
        return await self._answer(request, RESPONSES, self._input_items(request))  # type: ignore[no-any-return]

    async def _input_items(self, request: HTTPRequest) -> BytesResponse:
        owner = owner_of(self._check_auth(request.headers))
        rid = request.path_params["response_id"]
        chain = await self._call("chain", rid, owner)
        if chain is None:
            raise _not_found(rid, self.store is not None)
        items: list[dict[str, Any]] = []
        for link in chain.links:  # an ancestor that is gone leaves its part out
            items.extend(_listed(link.input_items, link.input_ids))
            if link.id != rid:
                items.extend(link.output)
        return BytesResponse(orjson.dumps(page(items, dict(request.query_params))))

    async def _call(self, method: str, response_id: str, owner: str) -> Any:
        """``store.<method>(response_id, owner=owner)``; a 503 when the store fails."""
        if self.store is None:
            return None
        try:
            return await getattr(self.store, method)(response_id, owner=owner)
        except StoreError as exc:
            raise store_unavailable(exc) from exc
