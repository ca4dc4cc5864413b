"""``GET /v1/models`` and ``GET /v1/models/{id}``: the model names a key may use, and what
each is.

Both answer in the OpenAI shape, or Anthropic's when the request carries an
``anthropic-version`` header (what each SDK's ``models.list()`` / ``models.retrieve()``
reads). Every model object carries one field more than the vendors': ``kind``, ``chat`` or
``embedding`` (its entry's ``kind`` when set, else what its first deployment's upstream
says: a ``local`` upstream with ``embedding: true`` serves an embedding model), so a client
can pick the models its endpoint takes. With ``keys:``, a key sees only the names its
``models`` globs allow; a name it may not use is a 404, as one that does not exist (a key
learns nothing of the others' models).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import orjson
from starlette.requests import Request as HTTPRequest
from starlette.routing import Route

from ..dialects import Dialect
from ..errors import NotFoundError
from ..routing import Router
from .asgi_io import BytesResponse
from .keys import ClientKey

__all__ = ["ModelsApi", "model_kind"]

Answer = Callable[[HTTPRequest, Dialect, Awaitable[BytesResponse]], Awaitable[BytesResponse]]


def model_kind(router: Router, name: str) -> str:
    """``chat`` or ``embedding``: what model ``name`` is (module docstring)."""
    route = router.resolve(name)
    entry = route.entry
    if entry is not None and entry.kind is not None:
        return entry.kind
    return route.upstream.model_kind


class ModelsApi:
    """The model list and one model, over the router and keys being served."""

    def __init__(
        self,
        router: Callable[[], Router],
        answer: Answer,
        authorize: Callable[[Mapping[str, str]], ClientKey | None],
        dialect_of: Callable[[HTTPRequest], Dialect],
        started: int,
    ) -> None:
        self._router, self._answer, self._authorize = router, answer, authorize
        self._dialect_of, self._started = dialect_of, started

    def routes(self) -> list[Route]:
        """The routes, with and without the ``/v1`` prefix (as the generation routes)."""
        return [
            Route("/v1/models", self.list, methods=["GET"]),
            Route("/models", self.list, methods=["GET"]),
            Route("/v1/models/{model:path}", self.retrieve, methods=["GET"]),
            Route("/models/{model:path}", self.retrieve, methods=["GET"]),
        ]

    async def list(self, request: HTTPRequest) -> BytesResponse:
        """``GET /v1/models``."""
        dialect = self._dialect_of(request)
        return await self._answer(request, dialect, self._list(request, dialect))

    async def retrieve(self, request: HTTPRequest) -> BytesResponse:
        """``GET /v1/models/{id}``."""
        dialect = self._dialect_of(request)
        return await self._answer(request, dialect, self._retrieve(request, dialect))

    async def _list(self, request: HTTPRequest, dialect: Dialect) -> BytesResponse:
        key = self._authorize(request.headers)
        router = self._router()
        names = router.model_names()
        if key is not None and key.models:
            names = [name for name in names if key.allows(name)]
        body = dialect.render_model_list(names, self._started)
        _with_kinds(body["data"], names, router)
        return BytesResponse(orjson.dumps(body))

    async def _retrieve(self, request: HTTPRequest, dialect: Dialect) -> BytesResponse:
        key = self._authorize(request.headers)
        name = request.path_params["model"]
        router = self._router()
        allowed = key is None or not key.models or key.allows(name)
        if not name or not allowed or not router.deployments(name):
            raise NotFoundError(
                f"The model '{name}' does not exist or you do not have access to it.",
                param="model",
                code="model_not_found",
            )
        (model,) = dialect.render_model_list([name], self._started)["data"]
        _with_kinds([model], [name], router)
        return BytesResponse(orjson.dumps(model))


def _with_kinds(models: list[dict[str, Any]], names: list[str], router: Router) -> None:
    for model, name in zip(models, names, strict=True):
        model["kind"] = model_kind(router, name)
