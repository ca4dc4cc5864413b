"""Upstreams and the tiny registry of their kinds.

A *kind* (``openai``, ``anthropic``, ``responses``, ``local``, ``fake``) owns its part of the config: a
:class:`KindSpec` holds the factory ``(UpstreamConfig, Transports | None) -> Upstream``,
the option keys the kind takes beyond the common ones, and a check of their values.
:class:`Transports` are the shared HTTP engines (``http_pool/engines.py``) an HTTP kind
posts through; a kind that makes no HTTP calls ignores them. :mod:`interlingua.config`
validates only what every entry shares and leaves the rest in ``UpstreamConfig.options``;
:func:`check_config` runs the kinds' checks. The built-in kinds are registered below
exactly as an outside package would register its own::

    from interlingua.config import ConfigError
    from interlingua.upstreams import register_kind

    def check_gemini(cfg, where):          # where = "upstreams.<name>"
        if cfg.options.get("region", "us") not in ("us", "eu"):
            raise ConfigError(f"{where}.region: must be us or eu")

    register_kind(
        "gemini",
        lambda cfg, transports: GeminiUpstream.from_config(cfg, transports),
        options=("region",),               # None: any key, left to the check
        check=check_gemini,
    )

Factories and checks import their module only when called, so ``import
interlingua.upstreams`` stays cheap and the local engine's heavy dependencies load only
when a ``local`` upstream is built. Kind ``local`` lives in ``interlingua.upstreams.local``
(its engine needs the ``local`` extra; its config check does not).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ..config import COMMON_UPSTREAM_KEYS, Config, ConfigError, UpstreamConfig
from ..config.batches import DEFAULT_SHARE
from .base import RawResponse, Upstream
from .prefill import continue_mode

if TYPE_CHECKING:
    from ..http_pool.engines import Transports
    from ..limits import SharedCounters

__all__ = [
    "KindSpec",
    "OptionsCheck",
    "RawResponse",
    "Transports",
    "Upstream",
    "UpstreamFactory",
    "build_upstream",
    "build_upstreams",
    "check_config",
    "check_upstream",
    "known_kinds",
    "register_kind",
    "require_local_engine",
]

UpstreamFactory = Callable[[UpstreamConfig, "Transports | None"], Upstream]
#: ``(cfg, where)`` -> None, or ConfigError naming ``where`` (``upstreams.<name>``) + key
OptionsCheck = Callable[[UpstreamConfig, str], None]


@dataclass(frozen=True, slots=True)
class KindSpec:
    """What the registry knows of one kind."""

    factory: UpstreamFactory
    #: option keys the kind takes; any other is refused. None: anything goes
    options: tuple[str, ...] | None = None
    #: checks the options' values (and any rule across fields)
    check: OptionsCheck | None = None


_KINDS: dict[str, KindSpec] = {}


def __getattr__(name: str) -> Any:
    # Transports imports aiohttp (a quarter of a second): loaded when first named, so
    # that importing the registry (config checks, the CLI) stays cheap.
    if name == "Transports":
        from ..http_pool.engines import Transports

        return Transports
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


LOCAL_EXTRA_HINT = "the local engine needs the 'local' extra: pip install -e '.[local]'"


def register_kind(
    kind: str,
    factory: UpstreamFactory,
    *,
    options: tuple[str, ...] | None = None,
    check: OptionsCheck | None = None,
    replace: bool = False,
) -> None:
    """Make ``kind`` usable in config. Registering a taken kind needs ``replace=True``."""
    if kind in _KINDS and not replace:
        raise ValueError(f"upstream kind {kind!r} is already registered")
    _KINDS[kind] = KindSpec(factory, options, check)


def known_kinds() -> list[str]:
    """Every registered kind, in registration order."""
    return list(_KINDS)


def check_upstream(cfg: UpstreamConfig) -> None:
    """ConfigError when no kind ``cfg.kind`` is registered or the kind refuses ``cfg``."""
    where = f"upstreams.{cfg.name}"
    spec = _KINDS.get(cfg.kind)
    if spec is None:
        raise ConfigError(f"{where}.kind: unknown kind {cfg.kind!r} (known: {', '.join(_KINDS)})")
    if spec.options is not None:
        for key in cfg.options:
            if key not in spec.options:
                raise ConfigError(_unknown_option(key, spec.options, where))
    if spec.check is not None:
        spec.check(cfg, where)


def check_config(config: Config) -> None:
    """Run every upstream's kind check: the half of validation :mod:`interlingua.config`
    leaves to the kinds. Call it before serving a config; ConfigError names the path."""
    for cfg in config.upstreams.values():
        check_upstream(cfg)


def _unknown_option(key: str, allowed: tuple[str, ...], where: str) -> str:
    # A key another kind takes is a misplaced option, not a typo: say whose it is.
    owners = [kind for kind, spec in _KINDS.items() if spec.options and key in spec.options]
    if owners:
        return f"{where}.{key}: only for kind {' or '.join(owners)}"
    candidates = [*allowed, *COMMON_UPSTREAM_KEYS]
    close = difflib.get_close_matches(key, candidates, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(candidates)}"
    return f"{where}: unknown key {key!r} ({hint})"


def build_upstream(
    cfg: UpstreamConfig,
    transports: Transports | None,
    counters: SharedCounters | None = None,
    name: str = "",
    share: float = DEFAULT_SHARE,
) -> Upstream:
    """Build the upstream ``cfg`` describes, posting through ``transports`` if HTTP.

    The kind's check runs first, so a factory gets only entries its kind accepted. With
    ``transports=None`` an HTTP upstream makes its own and closes them in ``aclose()``;
    the app passes the ones it built for every upstream instead. Raises
    ConfigError for an unknown kind, a refused entry, a missing extra, or an unset
    ``api_key_env``. The upstream's ``continue_with`` is set from the entry's, ``auto``
    resolved by kind (:func:`.prefill.continue_mode`). An entry with ``limits`` comes wrapped in a
    :class:`~.limited.LimitedUpstream` (whatever its kind); without, it is the kind's own.
    With ``counters`` (``state.url``) its limits are counted in Redis under ``name``,
    together with the other replicas'. ``share`` is the part of the limits batch requests
    may use (``batches.share``).
    """
    check_upstream(cfg)
    upstream = _KINDS[cfg.kind].factory(cfg, transports)
    # Before the limits' wrapper, which copies it: every upstream says how it continues.
    upstream.continue_with = continue_mode(cfg)
    if cfg.limits.unlimited:
        return upstream
    from .limited import LimitedUpstream

    limits = cfg.limits
    state = (
        counters.limit_state(f"upstream:{name}", limits.rpm, limits.tpm, limits.max_concurrency)
        if counters is not None
        else None
    )
    return LimitedUpstream(upstream, limits, state=state, share=share)


def build_upstreams(
    config: Config, transports: Transports | None, counters: SharedCounters | None = None
) -> dict[str, Upstream]:
    """Build every configured upstream, by name (their limits shared through
    ``counters`` when given, ``batches.share`` of them for batch requests)."""
    share = config.batches.share
    return {
        name: build_upstream(cfg, transports, counters, name, share)
        for name, cfg in config.upstreams.items()
    }


def require_local_engine(upstream: str) -> None:
    """Import the local engine now; ConfigError naming the extra when it cannot be."""
    _import_local("engine", upstream)


def _import_local(module: str, upstream: str) -> ModuleType:
    package = f"{__name__}.local"
    try:
        import_module(package)  # first: a cached submodule would hide an absent package
        return import_module(f"{package}.{module}")
    except ModuleNotFoundError as exc:
        # Either our package is absent or one of its dependencies (llama_cpp) is; both
        # mean the extra is not installed.
        ours = not exc.name or exc.name.startswith(package)
        missing = "" if ours else f" (missing module: {exc.name})"
        raise ConfigError(f"upstreams.{upstream}: {LOCAL_EXTRA_HINT}{missing}") from None


# --- built-in kinds, registered like any outside kind -----------------------------------


def _openai(cfg: UpstreamConfig, transports: Transports | None) -> Upstream:
    from .openai_compatible import OpenAICompatibleUpstream

    return OpenAICompatibleUpstream.from_config(cfg, transports)


def _check_openai(cfg: UpstreamConfig, where: str) -> None:
    from .openai_compatible import check_options

    check_options(cfg, where)


def _responses(cfg: UpstreamConfig, transports: Transports | None) -> Upstream:
    from .openai_responses import OpenAIResponsesUpstream

    return OpenAIResponsesUpstream.from_config(cfg, transports)


def _check_responses(cfg: UpstreamConfig, where: str) -> None:
    from .openai_compatible import check_options

    check_options(cfg, where, "responses")


def _anthropic(cfg: UpstreamConfig, transports: Transports | None) -> Upstream:
    from .anthropic import AnthropicUpstream

    return AnthropicUpstream.from_config(cfg, transports)


def _fake(cfg: UpstreamConfig, transports: Transports | None) -> Upstream:
    from .fake import FakeUpstream

    return FakeUpstream.from_config(cfg)


def _check_fake(cfg: UpstreamConfig, where: str) -> None:
    from .fake import check_options

    check_options(cfg, where)


def _local(cfg: UpstreamConfig, transports: Transports | None) -> Upstream:
    # The engine module imports llama-cpp: a missing extra is a ConfigError here.
    upstream: Upstream
    if cfg.options.get("embedding"):  # an embedding model: /v1/embeddings only
        module = _import_local("embedding", cfg.name)
        upstream = module.LocalEmbeddingUpstream.from_config(cfg)
    else:
        upstream = _import_local("upstream", cfg.name).LocalUpstream.from_config(cfg)
    return upstream


def _check_local(cfg: UpstreamConfig, where: str) -> None:
    _import_local("kind", cfg.name).check_options(cfg, where)


# max_tokens_field: which field carries the output limit (o-series and gpt-5 models
# refuse max_tokens); upstreams/openai_compatible.py checks and applies it.
register_kind("openai", _openai, options=("max_tokens_field",), check=_check_openai)
register_kind("anthropic", _anthropic, options=())
register_kind("responses", _responses, options=(), check=_check_responses)
register_kind(
    "local",
    _local,
    # The model file (bundled or path), context size, CPU threads, sequences decoded side
    # by side, how many requests may wait for a place, a chat template overriding the
    # GGUF's own, the text processing of its output, and whether it is an embedding
    # model (upstreams/local/kind.py checks the values).
    options=(
        "bundled",
        "path",
        "n_ctx",
        "n_threads",
        "parallel",
        "max_queue",
        "chat_template",
        "think_tags",
        "text_tool_calls",
        "embedding",
    ),
    check=_check_local,
)
register_kind("fake", _fake, options=("wire", "chunk_size"), check=_check_fake)
