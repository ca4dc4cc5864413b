"""The gateway's configuration: YAML in, frozen values out.

The YAML shape is a contract users, tests and docs rely on (docs/architecture.md,
"Configuration"; every key in docs/config.md, "Configuration")::

    server:                      # all optional; CLI flags override
      host: 127.0.0.1
      port: 8400
      max_body_mb: 32
      api_keys: []               # keys clients must present; empty = no auth
    upstreams:                   # name -> how to reach it
      vllm:
        kind: openai             # openai | anthropic | responses | local | fake
        base_url: http://127.0.0.1:8000/v1
        api_key_env: VLLM_API_KEY
        headers: {X-Team: research}
        timeout: {connect: 10, read: 600, total: 3600}   # + first_byte, idle (streams)
      smol:
        kind: local
        bundled: smollm2         # or: path: /models/some.gguf
        n_ctx: 8192              # local only, all optional: n_ctx, n_threads, max_queue,
                                 # chat_template, think_tags, text_tool_calls
    models:                      # what clients ask for -> where it goes
      - name: claude-sonnet-4-5
        upstream: vllm
        model: Qwen/Qwen3-8B     # default: same as name
        options: {think_tags: true, text_tool_calls: false}
      - name: "*"                # any other model name; upstream model = requested name
        upstream: vllm
    responses:                   # stored Responses API objects (all optional)
      store: true                # false: keep nothing
      url: sqlite:///path/responses.db   # or postgresql://...; default: the user data dir
      expire_after: 2592000      # seconds a stored response is kept (30 days)

Every validation failure raises :class:`ConfigError` naming the offending path, e.g.
``models[1].upstream: unknown upstream 'vlm' (known: vllm, smol)``. Upstream API keys are
never written in the file: ``api_key_env`` names an environment variable, read when the
upstream is built (:meth:`UpstreamConfig.api_key`).

This module checks the shape every upstream entry shares (a ``kind`` string, ``base_url``,
``api_key_env``, ``headers``, ``timeout``); every other key of an entry lands in
``UpstreamConfig.options`` unchecked. What a kind accepts there (``bundled`` and
``n_ctx`` for ``local``, ``wire`` for ``fake``, ``base_url`` being required for
``openai``) belongs to the kind: :func:`interlingua.upstreams.check_config` runs each
kind's check, and rejects kinds nobody registered. This module imports nothing of ours,
so a kind's module may import it; its small validators (:func:`expect_str` and friends)
are public for kinds to use.

The package: this module loads and parses; :mod:`.models` parses the ``models`` list,
:mod:`.prices` the prices; :mod:`.sections` holds the frozen values, :mod:`.team` the
team's sections (keys, state, usage, metrics, telemetry, admin), :mod:`.batches` the
Files and Batch store's (files, batches), :mod:`.printing` turns
a config back into YAML, :mod:`._values` the small validators.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypedDict

import yaml

from ._values import (
    ENV_NAME,
    ConfigError,
    database_url,
    describe,
    expect_bool,
    expect_choice,
    expect_int,
    expect_positive_int,
    expect_str,
    mapping,
    opt_str,
    positive,
    reject_unknown,
)
from .batches import BatchesConfig, FilesConfig, parse_batches, parse_files
from .models import parse_models
from .prices import Price, check_one_price, match_price, parse_prices
from .printing import config_to_yaml
from .sections import (
    COMMON_UPSTREAM_KEYS,
    CONTINUE_MODES,
    REDACTED,
    SERVER_LIMIT_COUNTS,
    SERVER_LIMIT_SECONDS,
    STRATEGIES,
    STREAM_BREAK_MODES,
    WILDCARD,
    Config,
    CooldownConfig,
    LimitsConfig,
    ModelConfig,
    ModelOptions,
    ResponsesConfig,
    RetriesConfig,
    RoutingConfig,
    ServerConfig,
    TimeoutConfig,
    UpstreamConfig,
)
from .team import (
    AdminConfig,
    KeyConfig,
    KeyLimits,
    StateConfig,
    TelemetryConfig,
    UsageConfig,
    parse_admin,
    parse_keys,
    parse_metrics,
    parse_state,
    parse_telemetry,
    parse_usage,
)

__all__ = [
    "COMMON_UPSTREAM_KEYS",
    "CONTINUE_MODES",
    "REDACTED",
    "SERVER_LIMIT_COUNTS",
    "SERVER_LIMIT_SECONDS",
    "STRATEGIES",
    "STREAM_BREAK_MODES",
    "WILDCARD",
    "AdminConfig",
    "BatchesConfig",
    "Config",
    "ConfigError",
    "CooldownConfig",
    "FilesConfig",
    "KeyConfig",
    "KeyLimits",
    "LimitsConfig",
    "ModelConfig",
    "ModelOptions",
    "Price",
    "ResponsesConfig",
    "RetriesConfig",
    "RoutingConfig",
    "ServerConfig",
    "StateConfig",
    "TelemetryConfig",
    "TimeoutConfig",
    "UpstreamConfig",
    "UsageConfig",
    "config_to_yaml",
    "default_config",
    "describe",
    "expect_bool",
    "expect_choice",
    "expect_int",
    "expect_positive_int",
    "expect_str",
    "fake_config",
    "load_config",
    "parse_config",
    "reject_unknown",
    "user_data_dir",
]

# What the default config serves: a model the ``local`` kind bundles. Plain data here
# (this module imports no upstream); the local kind knows which names exist
# (upstreams/local/kind.py), and a test pins that it knows this one.
_DEFAULT_BUNDLED = "smollm2"


def user_data_dir() -> Path:
    """Where the gateway keeps what it makes itself (stored responses, its sealing key):
    ``$XDG_DATA_HOME/interlingua``, else ``~/.local/share/interlingua`` (the XDG
    base-directory default)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "share"
    )
    return Path(base).absolute() / "interlingua"


# --- the two built-in configurations -------------------------------------------------


def _default_upstreams_and_models() -> tuple[dict[str, UpstreamConfig], tuple[ModelConfig, ...]]:
    upstream = UpstreamConfig(name="local", kind="local", options={"bundled": _DEFAULT_BUNDLED})
    models = (
        ModelConfig(name=_DEFAULT_BUNDLED, upstream="local", model=_DEFAULT_BUNDLED),
        ModelConfig(name="default", upstream="local", model=_DEFAULT_BUNDLED),
    )
    return {"local": upstream}, models


def default_config(server: ServerConfig | None = None) -> Config:
    """The config with no file: the bundled SmolLM2 as ``smollm2`` and ``default``."""
    upstreams, models = _default_upstreams_and_models()
    return Config(server=server or ServerConfig(), upstreams=upstreams, models=models)


def fake_config(server: ServerConfig | None = None, wire: str | None = None) -> Config:
    """The config for ``serve --fake``: one scripted upstream that answers any model name.

    ``fake`` and ``default`` are listed (so ``GET /v1/models`` shows them); the wildcard
    entry routes every other name there too, under the name the client asked for.
    """
    options: dict[str, Any] = {"wire": wire} if wire else {}
    upstream = UpstreamConfig(name="fake", kind="fake", options=options)
    models = (
        ModelConfig(name="fake", upstream="fake"),
        ModelConfig(name="default", upstream="fake"),
        ModelConfig(name=WILDCARD, upstream="fake"),
    )
    return Config(server=server or ServerConfig(), upstreams={"fake": upstream}, models=models)


# --- loading ----------------------------------------------------------------------------


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a YAML config file. An empty file means the default config."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    try:
        return parse_config(data if data is not None else {}, base=Path(path).parent)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def parse_config(data: Any, base: Path | None = None) -> Config:
    """Validate a decoded YAML document (a dict) into a :class:`Config`.

    With neither ``upstreams`` nor ``models`` given, they are the default config's (the
    bundled local model); giving one without the other is an error. ``base``: the
    directory a relative ``prices:`` file is read from (the config file's).
    """
    root = mapping(data, "config")
    reject_unknown(root, _ROOT_KEYS, "config")
    prices, price_table = parse_prices(root.get("prices"), base)
    sections = _Sections(
        server=_parse_server(root.get("server")),
        responses=_parse_responses(root.get("responses")),
        routing=_parse_routing(root.get("routing")),
        keys=parse_keys(root.get("keys")),
        state=parse_state(root.get("state")),
        usage=parse_usage(root.get("usage")),
        metrics=parse_metrics(root.get("metrics")),
        prices=prices,
        price_table=price_table,
        telemetry=parse_telemetry(root.get("telemetry")),
        admin=parse_admin(root.get("admin")),
        files=parse_files(root.get("files")),
        batches=parse_batches(root.get("batches")),
    )
    if root.get("upstreams") is None and root.get("models") is None:
        upstreams, models = _default_upstreams_and_models()
        return Config(upstreams=upstreams, models=models, **sections)
    if root.get("upstreams") is None:
        raise ConfigError("upstreams: required when models are listed")
    if root.get("models") is None:
        raise ConfigError("models: required when upstreams are listed")
    upstreams = _parse_upstreams(root["upstreams"])
    models = parse_models(root["models"], upstreams)
    if price_table:  # (an entry's own price beats the file's; a wildcard entry's
        # upstream model is the name asked for: matched per request, usage/cost.py)
        models = tuple(
            m
            if m.price or m.model == WILDCARD
            else dataclasses.replace(m, price=match_price(price_table, m.model, m.name))
            for m in models
        )
    check_one_price(models)
    return Config(upstreams=upstreams, models=models, **sections)


class _Sections(TypedDict):
    """The sections of a config besides upstreams and models."""

    server: ServerConfig
    responses: ResponsesConfig
    routing: RoutingConfig
    keys: tuple[KeyConfig, ...]
    state: StateConfig
    usage: UsageConfig
    metrics: bool
    prices: str | None
    price_table: tuple[tuple[str, Price], ...]
    telemetry: TelemetryConfig | None
    admin: AdminConfig | None
    files: FilesConfig
    batches: BatchesConfig


_ROOT_KEYS = (
    "server",
    "upstreams",
    "models",
    "responses",
    "routing",
    "keys",
    "state",
    "usage",
    "metrics",
    "prices",
    "telemetry",
    "admin",
    "files",
    "batches",
)


def _parse_server(data: Any) -> ServerConfig:
    if data is None:
        return ServerConfig()
    raw = mapping(data, "server")
    reject_unknown(raw, _SERVER_KEYS, "server")
    defaults = ServerConfig()
    host = expect_str(raw.get("host", defaults.host), "server.host")
    port = expect_int(raw.get("port", defaults.port), "server.port")
    if not 0 <= port <= 65535:
        raise ConfigError(f"server.port: must be between 0 and 65535, got {port}")
    max_body = positive(raw.get("max_body_mb", defaults.max_body_mb), "server.max_body_mb")
    keys_raw = raw.get("api_keys") or []
    if not isinstance(keys_raw, list):
        raise ConfigError(f"server.api_keys: expected a list of strings, got {describe(keys_raw)}")
    keys: list[str] = []
    for i, key in enumerate(keys_raw):
        where = f"server.api_keys[{i}]"
        key = expect_str(key, where)
        if key == REDACTED:
            raise ConfigError(f"{where}: {REDACTED} is a placeholder from --print-config")
        keys.append(key)
    return ServerConfig(
        host=host, port=port, max_body_mb=max_body, api_keys=tuple(keys), **_server_limits(raw)
    )


_SERVER_KEYS = (
    "host",
    "port",
    "max_body_mb",
    "api_keys",
    *SERVER_LIMIT_SECONDS,
    *SERVER_LIMIT_COUNTS,
    "max_connections",
)


def _server_limits(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The hostile-client limits of ``server:`` (docs/config.md, docs/reliability.md)."""
    limits: dict[str, Any] = {}
    for key in SERVER_LIMIT_SECONDS:
        if key in raw:
            limits[key] = positive(raw[key], f"server.{key}")
    for key in SERVER_LIMIT_COUNTS:
        if key in raw:
            limits[key] = expect_positive_int(raw[key], f"server.{key}")
    cap = raw.get("max_connections", "auto")
    if cap is not None and cap != "auto":
        limits["max_connections"] = expect_positive_int(cap, "server.max_connections")
    return limits


def _parse_responses(data: Any) -> ResponsesConfig:
    if data is None:
        return ResponsesConfig()
    raw = mapping(data, "responses")
    reject_unknown(raw, ("store", "url", "expire_after", "secret_env"), "responses")
    defaults = ResponsesConfig()
    url = database_url(raw.get("url"), "responses.url")
    secret_env = opt_str(raw.get("secret_env"), "responses.secret_env")
    if secret_env is not None and not ENV_NAME.match(secret_env):
        raise ConfigError(
            f"responses.secret_env: the name of an environment variable, got {secret_env!r}"
        )
    return ResponsesConfig(
        store=expect_bool(raw.get("store", defaults.store), "responses.store"),
        url=url,
        expire_after=positive(
            raw.get("expire_after", defaults.expire_after), "responses.expire_after"
        ),
        secret_env=secret_env,
    )


def _parse_upstreams(data: Any) -> dict[str, UpstreamConfig]:
    raw = mapping(data, "upstreams")
    if not raw:
        raise ConfigError("upstreams: at least one upstream is required")
    return {
        expect_str(name, "upstreams"): _parse_upstream(str(name), value)
        for name, value in raw.items()
    }


def _parse_upstream(name: str, data: Any) -> UpstreamConfig:
    where = f"upstreams.{name}"
    raw = mapping(data, where)
    if "api_key" in raw:
        raise ConfigError(
            f"{where}.api_key: keys are never written in the config; put the key in an "
            "environment variable and name it in api_key_env"
        )
    if "kind" not in raw:
        raise ConfigError(
            f"{where}.kind: required (the kind of server, e.g. openai; see docs/config.md)"
        )
    base_url = opt_str(raw.get("base_url"), f"{where}.base_url")
    if base_url is not None and not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}.base_url: must start with http:// or https://")
    api_key_env = opt_str(raw.get("api_key_env"), f"{where}.api_key_env")
    if api_key_env is not None and not ENV_NAME.match(api_key_env):
        raise ConfigError(
            f"{where}.api_key_env: {api_key_env!r} is not an environment variable name "
            "(it names the variable holding the key, not the key itself)"
        )
    return UpstreamConfig(
        name=name,
        kind=expect_str(raw["kind"], f"{where}.kind"),
        base_url=base_url,
        api_key_env=api_key_env,
        headers=_parse_headers(raw.get("headers"), f"{where}.headers"),
        timeout=_parse_timeout(raw.get("timeout"), f"{where}.timeout"),
        limits=_parse_limits(raw.get("limits"), f"{where}.limits"),
        retries=_parse_retries(raw.get("retries"), f"{where}.retries"),
        options={k: v for k, v in raw.items() if k not in COMMON_UPSTREAM_KEYS},
        continue_with=expect_choice(
            raw.get("continue_with", "auto"), CONTINUE_MODES, f"{where}.continue_with"
        ),
    )


def _parse_limits(data: Any, where: str) -> LimitsConfig:
    if data is None:
        return LimitsConfig()
    raw = mapping(data, where)
    reject_unknown(raw, ("rpm", "tpm", "max_concurrency", "max_queue", "queue_timeout"), where)
    defaults = LimitsConfig()
    counts = {
        key: expect_positive_int(raw[key], f"{where}.{key}")
        for key in ("rpm", "tpm", "max_concurrency")
        if raw.get(key) is not None
    }
    max_queue = expect_int(raw.get("max_queue", defaults.max_queue), f"{where}.max_queue")
    if max_queue < 0:
        raise ConfigError(f"{where}.max_queue: must be 0 or more, got {max_queue}")
    timeout = positive(raw.get("queue_timeout", defaults.queue_timeout), f"{where}.queue_timeout")
    return LimitsConfig(**counts, max_queue=max_queue, queue_timeout=timeout)


def _parse_retries(data: Any, where: str) -> RetriesConfig:
    if data is None:
        return RetriesConfig()
    raw = mapping(data, where)
    reject_unknown(raw, ("max", "max_wait"), where)
    defaults = RetriesConfig()
    count = expect_int(raw.get("max", defaults.max), f"{where}.max")
    if count < 0:
        raise ConfigError(f"{where}.max: must be 0 or more, got {count}")
    max_wait = raw.get("max_wait", defaults.max_wait)
    if max_wait != 0:
        max_wait = positive(max_wait, f"{where}.max_wait")
    return RetriesConfig(max=count, max_wait=float(max_wait))


def _parse_routing(data: Any) -> RoutingConfig:
    if data is None:
        return RoutingConfig()
    raw = mapping(data, "routing")
    reject_unknown(raw, ("strategy", "cooldown"), "routing")
    strategy = expect_str(raw.get("strategy", "weighted"), "routing.strategy")
    if strategy not in STRATEGIES:
        raise ConfigError(
            f"routing.strategy: unknown strategy {strategy!r} (known: {', '.join(STRATEGIES)})"
        )
    cooldown = CooldownConfig()
    if raw.get("cooldown") is not None:
        where = "routing.cooldown"
        cool = mapping(raw["cooldown"], where)
        reject_unknown(cool, ("failures", "window", "duration"), where)
        cooldown = CooldownConfig(
            failures=expect_positive_int(
                cool.get("failures", cooldown.failures), f"{where}.failures"
            ),
            window=positive(cool.get("window", cooldown.window), f"{where}.window"),
            duration=positive(cool.get("duration", cooldown.duration), f"{where}.duration"),
        )
    return RoutingConfig(strategy=strategy, cooldown=cooldown)


def _parse_headers(data: Any, where: str) -> dict[str, str]:
    if data is None:
        return {}
    raw = mapping(data, where)
    headers: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise ConfigError(f"{where}.{key}: expected a string, got {describe(value)}")
        headers[str(key)] = str(value)
    return headers


def _parse_timeout(data: Any, where: str) -> TimeoutConfig:
    if data is None:
        return TimeoutConfig()
    raw = mapping(data, where)
    reject_unknown(raw, ("connect", "read", "total", "first_byte", "idle"), where)
    defaults = TimeoutConfig()
    phases = {
        key: positive(raw[key], f"{where}.{key}")
        for key in ("first_byte", "idle")
        if raw.get(key) is not None
    }
    return TimeoutConfig(
        connect=positive(raw.get("connect", defaults.connect), f"{where}.connect"),
        read=positive(raw.get("read", defaults.read), f"{where}.read"),
        total=positive(raw.get("total", defaults.total), f"{where}.total"),
        **phases,
    )
