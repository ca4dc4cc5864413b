"""Model name -> where the request goes.

Each ``models`` entry of the config is a *deployment*: a client-facing name, the upstream
that serves it, the name that upstream expects, and per-model options. Several entries
with the same name are that name's ordered deployments. For now :meth:`Router.resolve`
returns the first one; load balancing across them and fallback to the next on failure
come later and will read :meth:`Router.deployments`.

An entry named ``"*"`` (the wildcard) receives every name not listed. Its upstream model
is the name the client asked for, unless the entry sets ``model``.

Hot path: exact names resolve to a prebuilt :class:`Route` with one dict lookup.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .config import WILDCARD, Config, ConfigError, ModelConfig, ModelOptions
from .errors import NotFoundError
from .upstreams.base import Upstream
from .upstreams.text_options import with_options

__all__ = ["Route", "Router"]


@dataclass(frozen=True, slots=True)
class Route:
    """One deployment chosen for a request."""

    #: the name the client asked for
    model_name: str
    upstream: Upstream
    #: the name to put in the upstream request's ``model``
    upstream_model: str
    options: ModelOptions
    #: the config entry of this deployment (weight, fallbacks, params, drop_params...)
    entry: ModelConfig | None = field(default=None, compare=False)


class Router:
    """Resolves client model names against the config's ``models`` list.

    ``upstreams`` maps each configured upstream name to its built :class:`Upstream`;
    a model entry naming an upstream that is not there is a ConfigError.
    """

    def __init__(self, config: Config, upstreams: Mapping[str, Upstream]) -> None:
        self._exact: dict[str, tuple[Route, ...]] = {}
        # Each wildcard entry with its upstream already wrapped for its options: built
        # once here, not on every request that falls through to the wildcard.
        self._wildcard: tuple[tuple[ModelConfig, Upstream], ...] = ()
        wildcard: list[tuple[ModelConfig, Upstream]] = []
        exact: dict[str, list[Route]] = {}
        for i, model in enumerate(config.models):
            upstream = upstreams.get(model.upstream)
            if upstream is None:
                raise ConfigError(
                    f"models[{i}].upstream: upstream {model.upstream!r} was not built "
                    f"(built: {', '.join(upstreams) or 'none'})"
                )
            if model.name == WILDCARD:
                wildcard.append((model, with_options(upstream, model.options)))
            else:
                route = Route(
                    model.name,
                    with_options(upstream, model.options),
                    model.model,
                    model.options,
                    model,
                )
                exact.setdefault(model.name, []).append(route)
        self._exact = {name: tuple(routes) for name, routes in exact.items()}
        self._wildcard = tuple(wildcard)

    def resolve(self, name: str) -> Route:
        """The route for ``name``: its first deployment, else the wildcard's.

        Raises NotFoundError (404, ``param="model"``, ``code="model_not_found"``) when
        neither exists.
        """
        routes = self._exact.get(name)
        if routes is not None:
            return routes[0]
        if self._wildcard:
            return self._wildcard_route(self._wildcard[0], name)
        raise NotFoundError(f"model '{name}' not found", param="model", code="model_not_found")

    def deployments(self, name: str) -> tuple[Route, ...]:
        """All deployments for ``name`` in config order (empty if none, wildcard included)."""
        routes = self._exact.get(name)
        if routes is not None:
            return routes
        return tuple(self._wildcard_route(entry, name) for entry in self._wildcard)

    def model_names(self) -> list[str]:
        """The configured model names, in config order, without duplicates or ``"*"``."""
        return list(self._exact)

    def _wildcard_route(self, entry: tuple[ModelConfig, Upstream], name: str) -> Route:
        model, upstream = entry
        upstream_model = name if model.model == WILDCARD else model.model
        return Route(name, upstream, upstream_model, model.options, model)
