"""``/admin/keys``: create, list, show, revoke and rotate client keys without a restart.

Admin key only (as ``/admin/reload``: 404 without an ``admin`` section, 401 without a
key, 403 with another), errors in the OpenAI error shape. The keys created here live in
the usage log's database (usage/keys_store.py) and reach every process within a second
(server/stored_keys.py). docs/admin-api.md describes every route, its request and answer.

* ``POST /admin/keys`` ``{"name", "models", "limits", "expires_at"}`` -> 201 with the
  key's secret in ``key``: the only time it is shown (only its SHA-256 is stored).
* ``GET /admin/keys`` -> ``{"object": "list", "data": [...]}``: the config's keys
  (``source: "config"``) and the database's (``"database"``, revoked ones too), each
  with its models, limits, times and its spend today and this month (UTC) in US dollars
  from the usage log. Never a secret nor a digest.
* ``GET /admin/keys/{name}``, ``DELETE /admin/keys/{name}`` (revoke: refused at once,
  the row kept, the name not reused), ``POST /admin/keys/{name}/rotate`` (a new secret,
  shown once; the old one refused from now on).

A config key cannot be created, revoked or rotated here (409, saying to edit the file
and reload): the file is its source of truth, and a change here would be undone by the
next reload.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.routing import BaseRoute, Route

from ..config import ConfigError
from ..config.team import parse_key_limits
from ..dialects import get_dialect
from ..errors import InterlinguaError, InvalidRequestError, NotFoundError
from ..usage import StoreError
from ..usage.keys_store import (
    KeyExists,
    Spend,
    StoredKey,
    check_name,
    describe,
    expiry_of,
    iso,
    new_secret,
    parse_models,
    secret_digest,
)
from .asgi_io import BytesResponse
from .reload import Holder, check_admin
from .stored_keys import StoredKeys

__all__ = ["AdminKeys"]

OPENAI = get_dialect("openai")
#: what ``POST /admin/keys`` reads
_FIELDS = ("name", "models", "limits", "expires_at")


class AdminKeys:
    """The ``/admin/keys`` routes over the serving bundle (``holder.live``) and the
    process's database keys (``stored``; None: the usage log is off, so keys cannot
    live in a database: listing shows the config's, writing is refused)."""

    def __init__(self, holder: Holder, stored: StoredKeys | None) -> None:
        self.holder = holder
        self.stored = stored

    def routes(self) -> list[BaseRoute]:
        """The route table entries."""
        return [
            Route("/admin/keys", self._wrap(self.create), methods=["POST"]),
            Route("/admin/keys", self._wrap(self.list_keys), methods=["GET"]),
            Route("/admin/keys/{name}", self._wrap(self.show), methods=["GET"]),
            Route("/admin/keys/{name}", self._wrap(self.revoke), methods=["DELETE"]),
            Route("/admin/keys/{name}/rotate", self._wrap(self.rotate), methods=["POST"]),
        ]

    def _wrap(
        self, handler: Callable[[Request], Awaitable[BytesResponse]]
    ) -> Callable[[Request], Awaitable[BytesResponse]]:
        """``handler`` behind the admin check, its errors as OpenAI error answers."""

        async def endpoint(request: Request) -> BytesResponse:
            live = self.holder.live
            request_id = request.scope.get("state", {}).get("request_id", "")
            try:
                check_admin(live, request)
                return await handler(request)
            except InterlinguaError as err:
                return live.gateway.error_response(OPENAI, err, request_id)
            except ConfigError as exc:
                invalid = InvalidRequestError(str(exc), code="invalid_key_request")
                return live.gateway.error_response(OPENAI, invalid, request_id)
            except StoreError as exc:
                down = InterlinguaError(
                    f"The key database failed: {exc}", status=503, code="key_store_unavailable"
                )
                return live.gateway.error_response(OPENAI, down, request_id)

        return endpoint

    def _store(self) -> StoredKeys:
        if self.stored is None:
            raise InvalidRequestError(
                "Keys live in the usage log's database, and the usage log is off "
                "(usage: false): turn it on to create keys without editing the config.",
                status=409,
                code="key_store_off",
            )
        return self.stored

    def _config_names(self) -> set[str]:
        return {key.name for key in self.holder.live.config.keys}

    def _not_config(self, name: str, verb: str) -> None:
        if name in self._config_names():
            raise InvalidRequestError(
                f"The key '{name}' comes from the config file: {verb} it there and reload "
                "(kill -HUP, or POST /admin/reload); a change made here would be undone by "
                "the next reload.",
                status=409,
                code="config_key",
            )

    async def create(self, request: Request) -> BytesResponse:
        """``POST /admin/keys``."""
        stored = self._store()
        body = await _json_object(request)
        unknown = sorted(set(body) - set(_FIELDS))
        if unknown:
            raise ConfigError(
                f"unknown field(s) {', '.join(unknown)}: expected {', '.join(_FIELDS)}"
            )
        name = check_name(body.get("name"))
        models = parse_models(body.get("models"))
        limits = parse_key_limits(body.get("limits"), f"keys.{name}")
        expires_at = expiry_of(body.get("expires_at"))
        if expires_at is not None and expires_at <= time.time():
            raise ConfigError(f"expires_at: {iso(expires_at)} has passed")
        self._not_config(name, "change")
        secret = new_secret()
        try:
            row = await stored.store.create(name, secret_digest(secret), models, limits, expires_at)
        except KeyExists:
            raise InvalidRequestError(
                f"A key named '{name}' exists (or existed: a revoked key's name is not "
                "reused, so the usage log's history under it stays one key's).",
                status=409,
                code="key_exists",
            ) from None
        await stored.changed()
        answer = {"key": secret, **await self._described_row(row)}
        return BytesResponse(orjson.dumps(answer), 201)

    async def list_keys(self, request: Request) -> BytesResponse:
        """``GET /admin/keys``."""
        rows = await self.stored.store.all() if self.stored is not None else []
        spend = await self._spend()
        data = [*self._config_docs(spend), *(_row_doc(row, spend) for row in rows)]
        return BytesResponse(orjson.dumps({"object": "list", "data": data}))

    async def show(self, request: Request) -> BytesResponse:
        """``GET /admin/keys/{name}``."""
        name = request.path_params["name"]
        spend = await self._spend()
        for doc in self._config_docs(spend):
            if doc["name"] == name:
                return BytesResponse(orjson.dumps(doc))
        row = await self.stored.store.get(name) if self.stored is not None else None
        if row is None:
            raise _unknown(name)
        return BytesResponse(orjson.dumps(_row_doc(row, spend)))

    async def revoke(self, request: Request) -> BytesResponse:
        """``DELETE /admin/keys/{name}``: revoked (again: unchanged, 200 as well)."""
        name = request.path_params["name"]
        self._not_config(name, "remove")
        stored = self._store()
        row = await stored.store.revoke(name)
        if row is None:
            raise _unknown(name)
        await stored.changed()
        return BytesResponse(orjson.dumps({"revoked": True, **await self._described_row(row)}))

    async def rotate(self, request: Request) -> BytesResponse:
        """``POST /admin/keys/{name}/rotate``: a new secret, shown once."""
        name = request.path_params["name"]
        self._not_config(name, "change")
        stored = self._store()
        old = await stored.store.get(name)
        if old is None:
            raise _unknown(name)
        if old.revoked_at is not None:
            raise InvalidRequestError(
                f"The key '{name}' is revoked: create a new key instead.",
                status=409,
                code="key_revoked",
            )
        secret = new_secret()
        row = await stored.store.rotate(name, secret_digest(secret))
        if row is None:  # (revoked meanwhile)
            raise _unknown(name)
        await stored.changed()
        return BytesResponse(orjson.dumps({"key": secret, **await self._described_row(row)}))

    async def _spend(self) -> Spend:
        """Spend per key name today and this month (UTC); nothing without a database."""
        if self.stored is None:
            return {}, {}
        return await self.stored.store.spend_now(time.time())

    async def _described_row(self, row: StoredKey) -> dict[str, Any]:
        return _row_doc(row, await self._spend())

    def _config_docs(self, spend: Spend) -> list[dict[str, Any]]:
        return [
            describe(key.name, key.models, key.limits, spend)
            for key in self.holder.live.config.keys
        ]


def _row_doc(row: StoredKey, spend: Spend) -> dict[str, Any]:
    return describe(row.name, row.models, row.limits, spend, row, time.time())


def _unknown(name: str) -> NotFoundError:
    return NotFoundError(f"No key named '{name}'.", code="key_not_found")


async def _json_object(request: Request) -> dict[str, Any]:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError:
        raise ConfigError("the body is not JSON") from None
    if not isinstance(body, dict):
        raise ConfigError("the body must be a JSON object")
    return body
