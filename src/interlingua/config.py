"""The gateway's configuration: YAML in, frozen values out.

The YAML shape is a contract (DESIGN.md, "Config")::

    server:                      # all optional; CLI flags override
      host: 127.0.0.1
      port: 8400
      max_body_mb: 32
      api_keys: []               # keys clients must present; empty = no auth
    upstreams:                   # name -> how to reach it
      vllm:
        kind: openai             # openai | anthropic | local | fake
        base_url: http://127.0.0.1:8000/v1
        api_key_env: VLLM_API_KEY
        headers: {X-Team: research}
        timeout: {connect: 10, read: 600, total: 3600}
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

Every validation failure raises :class:`ConfigError` naming the offending path, e.g.
``models[1].upstream: unknown upstream 'vlm' (known: vllm, smol)``. Upstream API keys are
never written in the file: ``api_key_env`` names an environment variable, read when the
upstream is built (:meth:`UpstreamConfig.api_key`).

Keys an upstream entry has beyond the common ones land in ``UpstreamConfig.options``
(kind-specific settings, e.g. ``wire`` for ``fake``); for the HTTP kinds, whose options
are known, an unknown key is a typo and is rejected with a suggestion.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "BUILTIN_KINDS",
    "BUNDLED_MODELS",
    "REDACTED",
    "WILDCARD",
    "Config",
    "ConfigError",
    "ModelConfig",
    "ModelOptions",
    "ServerConfig",
    "TimeoutConfig",
    "UpstreamConfig",
    "config_to_yaml",
    "default_config",
    "fake_config",
    "load_config",
    "parse_config",
]

#: The upstream kinds this package ships (outside packages may register more).
BUILTIN_KINDS: tuple[str, ...] = ("openai", "anthropic", "local", "fake")
#: A model entry with this name catches every model name not listed elsewhere.
WILDCARD = "*"
#: What ``--print-config`` writes instead of a client key; refused on load so that a
#: pasted printout fails loudly instead of accepting the literal placeholder as a key.
REDACTED = "<redacted>"

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_COMMON_UPSTREAM_KEYS = (
    "kind",
    "base_url",
    "api_key_env",
    "headers",
    "timeout",
    "bundled",
    "path",
)
# Kind-specific keys for the kinds we know; None = anything goes (outside kinds define
# their own settings in their package).
_KIND_OPTIONS: dict[str, tuple[str, ...] | None] = {
    "openai": (),
    "anthropic": (),
    "fake": ("wire", "chunk_size"),
    # The local engine (upstreams/local): context size, CPU threads, how many requests
    # may wait for the one model instance, a chat template overriding the GGUF's own,
    # and the text processing of its output.
    "local": (
        "n_ctx",
        "n_threads",
        "max_queue",
        "chat_template",
        "think_tags",
        "text_tool_calls",
    ),
}
#: Models that ship inside an installed package, usable as ``bundled: <name>``.
BUNDLED_MODELS: tuple[str, ...] = ("smollm2",)


class ConfigError(ValueError):
    """The configuration is invalid; the message names the path of the bad value."""


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Where the gateway listens and what it accepts."""

    host: str = "127.0.0.1"
    port: int = 8400
    max_body_mb: float = 32
    #: keys clients must present (Bearer or x-api-key); empty = no auth
    api_keys: tuple[str, ...] = ()
    #: seconds a client has to send a whole request head (408, or a close if it sent none)
    header_timeout: float = 10.0
    #: seconds of silence allowed while a request body is incomplete (then 408 and close)
    body_timeout: float = 30.0
    #: seconds an idle keep-alive connection stays open
    keep_alive_timeout: float = 5.0
    #: bytes of request line + headers beyond which the request gets 431
    max_header_bytes: int = 64 * 1024
    #: request headers beyond which the request gets 431
    max_headers: int = 256
    #: open client connections per process; None = derived from the file-descriptor limit
    max_connections: int | None = None
    #: seconds in-flight requests may run after SIGTERM before streams are ended in-band
    shutdown_timeout: float = 30.0


@dataclass(frozen=True, slots=True)
class TimeoutConfig:
    """Seconds to wait for a connection, between two reads of an answer, and for the
    whole answer (a stream included: a drip-feeding upstream cannot hold a request
    forever; generous, since a long reasoning answer may stream for many minutes)."""

    connect: float = 10.0
    read: float = 600.0
    total: float = 3600.0


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    """How to reach one upstream. ``headers`` and ``options`` must not be mutated."""

    name: str
    kind: str
    base_url: str | None = None
    api_key_env: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    timeout: TimeoutConfig = field(default_factory=TimeoutConfig)
    bundled: str | None = None
    path: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def api_key(self) -> str | None:
        """The key read from ``api_key_env`` now; None when no variable is named.

        Raises ConfigError when the named variable is unset or empty, naming the variable
        (never its value).
        """
        if self.api_key_env is None:
            return None
        value = os.environ.get(self.api_key_env)
        if not value:
            raise ConfigError(
                f"upstreams.{self.name}.api_key_env: environment variable "
                f"{self.api_key_env} is not set (or empty)"
            )
        return value


@dataclass(frozen=True, slots=True)
class ModelOptions:
    """Per-model output processing, all off by default."""

    #: split ``<think>...</think>`` in the text into reasoning
    think_tags: bool = False
    #: parse tool calls the model wrote as text
    text_tool_calls: bool = False


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """One model name clients may ask for, and where it goes.

    ``model`` is the name the upstream expects. For the wildcard entry (``name: "*"``)
    ``model == "*"`` means "the name the client asked for".
    """

    name: str
    upstream: str
    model: str = ""
    options: ModelOptions = field(default_factory=ModelOptions)

    def __post_init__(self) -> None:
        if not self.model:
            object.__setattr__(self, "model", self.name)


@dataclass(frozen=True, slots=True)
class Config:
    """The whole effective configuration."""

    server: ServerConfig = field(default_factory=ServerConfig)
    upstreams: dict[str, UpstreamConfig] = field(default_factory=dict)
    models: tuple[ModelConfig, ...] = ()


# --- the two built-in configurations -------------------------------------------------


def _default_upstreams_and_models() -> tuple[dict[str, UpstreamConfig], tuple[ModelConfig, ...]]:
    upstream = UpstreamConfig(name="local", kind="local", bundled="smollm2")
    models = (
        ModelConfig(name="smollm2", upstream="local", model="smollm2"),
        ModelConfig(name="default", upstream="local", model="smollm2"),
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
        return parse_config(data if data is not None else {})
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def parse_config(data: Any) -> Config:
    """Validate a decoded YAML document (a dict) into a :class:`Config`.

    With neither ``upstreams`` nor ``models`` given, they are the default config's (the
    bundled local model); giving one without the other is an error.
    """
    root = _mapping(data, "config")
    _reject_unknown(root, ("server", "upstreams", "models"), "config")
    server = _parse_server(root.get("server"))
    if root.get("upstreams") is None and root.get("models") is None:
        upstreams, models = _default_upstreams_and_models()
        return Config(server=server, upstreams=upstreams, models=models)
    if root.get("upstreams") is None:
        raise ConfigError("upstreams: required when models are listed")
    if root.get("models") is None:
        raise ConfigError("models: required when upstreams are listed")
    upstreams = _parse_upstreams(root["upstreams"])
    models = _parse_models(root["models"], upstreams)
    return Config(server=server, upstreams=upstreams, models=models)


def _parse_server(data: Any) -> ServerConfig:
    if data is None:
        return ServerConfig()
    raw = _mapping(data, "server")
    _reject_unknown(raw, _SERVER_KEYS, "server")
    defaults = ServerConfig()
    host = _str(raw.get("host", defaults.host), "server.host")
    port = _int(raw.get("port", defaults.port), "server.port")
    if not 0 <= port <= 65535:
        raise ConfigError(f"server.port: must be between 0 and 65535, got {port}")
    max_body = _positive(raw.get("max_body_mb", defaults.max_body_mb), "server.max_body_mb")
    keys_raw = raw.get("api_keys") or []
    if not isinstance(keys_raw, list):
        raise ConfigError(f"server.api_keys: expected a list of strings, got {_kind(keys_raw)}")
    keys: list[str] = []
    for i, key in enumerate(keys_raw):
        where = f"server.api_keys[{i}]"
        key = _str(key, where)
        if key == REDACTED:
            raise ConfigError(f"{where}: {REDACTED} is a placeholder from --print-config")
        keys.append(key)
    return ServerConfig(
        host=host, port=port, max_body_mb=max_body, api_keys=tuple(keys), **_server_limits(raw)
    )


_LIMIT_SECONDS = ("header_timeout", "body_timeout", "keep_alive_timeout", "shutdown_timeout")
_LIMIT_COUNTS = ("max_header_bytes", "max_headers")
_SERVER_KEYS = (
    "host",
    "port",
    "max_body_mb",
    "api_keys",
    *_LIMIT_SECONDS,
    *_LIMIT_COUNTS,
    "max_connections",
)


def _server_limits(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The hostile-client limits of ``server:`` (docs/config.md, docs/reliability.md)."""
    limits: dict[str, Any] = {}
    for key in _LIMIT_SECONDS:
        if key in raw:
            limits[key] = _positive(raw[key], f"server.{key}")
    for key in _LIMIT_COUNTS:
        if key in raw:
            limits[key] = _positive_int(raw[key], f"server.{key}")
    cap = raw.get("max_connections", "auto")
    if cap is not None and cap != "auto":
        limits["max_connections"] = _positive_int(cap, "server.max_connections")
    return limits


def _parse_upstreams(data: Any) -> dict[str, UpstreamConfig]:
    raw = _mapping(data, "upstreams")
    if not raw:
        raise ConfigError("upstreams: at least one upstream is required")
    return {
        _str(name, "upstreams"): _parse_upstream(str(name), value) for name, value in raw.items()
    }


def _parse_upstream(name: str, data: Any) -> UpstreamConfig:
    where = f"upstreams.{name}"
    raw = _mapping(data, where)
    if "api_key" in raw:
        raise ConfigError(
            f"{where}.api_key: keys are never written in the config; put the key in an "
            "environment variable and name it in api_key_env"
        )
    kind = _str(raw.get("kind"), f"{where}.kind") if "kind" in raw else None
    if kind is None:
        raise ConfigError(f"{where}.kind: required (one of {', '.join(_known_kinds())})")
    if kind not in _known_kinds():
        raise ConfigError(
            f"{where}.kind: unknown kind {kind!r} (known: {', '.join(_known_kinds())})"
        )
    options = {k: v for k, v in raw.items() if k not in _COMMON_UPSTREAM_KEYS}
    allowed = _KIND_OPTIONS.get(kind)
    if allowed is not None:
        _reject_unknown(options, allowed, where, also=_COMMON_UPSTREAM_KEYS)
    base_url = _opt_str(raw.get("base_url"), f"{where}.base_url")
    if base_url is not None and not base_url.startswith(("http://", "https://")):
        raise ConfigError(f"{where}.base_url: must start with http:// or https://")
    if kind == "openai" and base_url is None:
        raise ConfigError(f"{where}.base_url: required for kind openai")
    api_key_env = _opt_str(raw.get("api_key_env"), f"{where}.api_key_env")
    if api_key_env is not None and not _ENV_NAME.match(api_key_env):
        raise ConfigError(
            f"{where}.api_key_env: {api_key_env!r} is not an environment variable name "
            "(it names the variable holding the key, not the key itself)"
        )
    cfg = UpstreamConfig(
        name=name,
        kind=kind,
        base_url=base_url,
        api_key_env=api_key_env,
        headers=_parse_headers(raw.get("headers"), f"{where}.headers"),
        timeout=_parse_timeout(raw.get("timeout"), f"{where}.timeout"),
        bundled=_opt_str(raw.get("bundled"), f"{where}.bundled"),
        path=_opt_str(raw.get("path"), f"{where}.path"),
        options=options,
    )
    _check_kind_fields(cfg, where)
    return cfg


def _check_kind_fields(cfg: UpstreamConfig, where: str) -> None:
    if cfg.kind == "local":
        if cfg.bundled is None and cfg.path is None:
            raise ConfigError(f"{where}: kind local needs bundled (e.g. smollm2) or path")
        if cfg.bundled is not None and cfg.path is not None:
            raise ConfigError(f"{where}: give bundled or path, not both")
        if cfg.bundled is not None and cfg.bundled not in BUNDLED_MODELS:
            raise ConfigError(
                f"{where}.bundled: unknown bundled model {cfg.bundled!r} "
                f"(known: {', '.join(BUNDLED_MODELS)})"
            )
        _check_local_options(cfg.options, where)
    elif cfg.kind in BUILTIN_KINDS:
        for key in ("bundled", "path"):
            if getattr(cfg, key) is not None:
                raise ConfigError(f"{where}.{key}: only for kind local")
    if cfg.kind == "fake":
        wire = cfg.options.get("wire")
        if wire is not None and wire not in ("openai", "anthropic"):
            raise ConfigError(f"{where}.wire: must be openai or anthropic, got {wire!r}")
        size = cfg.options.get("chunk_size")
        if size is not None:
            _positive_int(size, f"{where}.chunk_size")


def _check_local_options(options: Mapping[str, Any], where: str) -> None:
    for key in ("n_ctx", "n_threads"):
        if key in options:
            _positive_int(options[key], f"{where}.{key}")
    if "n_ctx" in options and options["n_ctx"] < 16:
        raise ConfigError(f"{where}.n_ctx: must be at least 16, got {options['n_ctx']}")
    if "max_queue" in options:
        queue = _int(options["max_queue"], f"{where}.max_queue")
        if queue < 0:
            raise ConfigError(f"{where}.max_queue: must be 0 or more, got {queue}")
    if "chat_template" in options:
        _str(options["chat_template"], f"{where}.chat_template")
    for key in ("think_tags", "text_tool_calls"):
        if key in options and not isinstance(options[key], bool):
            raise ConfigError(f"{where}.{key}: expected true or false, got {_kind(options[key])}")


def _parse_headers(data: Any, where: str) -> dict[str, str]:
    if data is None:
        return {}
    raw = _mapping(data, where)
    headers: dict[str, str] = {}
    for key, value in raw.items():
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise ConfigError(f"{where}.{key}: expected a string, got {_kind(value)}")
        headers[str(key)] = str(value)
    return headers


def _parse_timeout(data: Any, where: str) -> TimeoutConfig:
    if data is None:
        return TimeoutConfig()
    raw = _mapping(data, where)
    _reject_unknown(raw, ("connect", "read", "total"), where)
    defaults = TimeoutConfig()
    return TimeoutConfig(
        connect=_positive(raw.get("connect", defaults.connect), f"{where}.connect"),
        read=_positive(raw.get("read", defaults.read), f"{where}.read"),
        total=_positive(raw.get("total", defaults.total), f"{where}.total"),
    )


def _parse_models(data: Any, upstreams: dict[str, UpstreamConfig]) -> tuple[ModelConfig, ...]:
    if not isinstance(data, list):
        raise ConfigError(f"models: expected a list, got {_kind(data)}")
    if not data:
        raise ConfigError("models: at least one model is required")
    return tuple(_parse_model(item, f"models[{i}]", upstreams) for i, item in enumerate(data))


def _parse_model(data: Any, where: str, upstreams: dict[str, UpstreamConfig]) -> ModelConfig:
    raw = _mapping(data, where)
    _reject_unknown(raw, ("name", "upstream", "model", "options"), where)
    if "name" not in raw:
        raise ConfigError(f"{where}.name: required")
    name = _str(raw["name"], f"{where}.name")
    if "upstream" not in raw:
        raise ConfigError(f"{where}.upstream: required (known: {', '.join(upstreams)})")
    upstream = _str(raw["upstream"], f"{where}.upstream")
    if upstream not in upstreams:
        raise ConfigError(
            f"{where}.upstream: unknown upstream {upstream!r} (known: {', '.join(upstreams)})"
        )
    model = _opt_str(raw.get("model"), f"{where}.model") or name
    return ModelConfig(
        name=name,
        upstream=upstream,
        model=model,
        options=_parse_model_options(raw.get("options"), f"{where}.options"),
    )


def _parse_model_options(data: Any, where: str) -> ModelOptions:
    if data is None:
        return ModelOptions()
    raw = _mapping(data, where)
    _reject_unknown(raw, ("think_tags", "text_tool_calls"), where)
    values: dict[str, bool] = {}
    for key, value in raw.items():
        if not isinstance(value, bool):
            raise ConfigError(f"{where}.{key}: expected true or false, got {_kind(value)}")
        values[str(key)] = value
    return ModelOptions(**values)


# --- printing ---------------------------------------------------------------------------


def config_to_yaml(config: Config, *, redact: bool = True) -> str:
    """The effective config as YAML in the documented shape (``--print-config``).

    Loading the output gives back an equal :class:`Config`. Upstream keys are never in a
    Config (only the variable names are). Client keys (``server.api_keys``) are printed as
    ``<redacted>`` unless ``redact=False``; a redacted printout is refused on load.
    """
    server = config.server
    doc: dict[str, Any] = {
        "server": {
            "host": server.host,
            "port": server.port,
            "max_body_mb": server.max_body_mb,
            "api_keys": [REDACTED if redact else k for k in server.api_keys],
            **{key: getattr(server, key) for key in (*_LIMIT_SECONDS, *_LIMIT_COUNTS)},
            "max_connections": server.max_connections or "auto",
        },
        "upstreams": {name: _upstream_doc(u) for name, u in config.upstreams.items()},
        "models": [_model_doc(m) for m in config.models],
    }
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def _upstream_doc(cfg: UpstreamConfig) -> dict[str, Any]:
    doc: dict[str, Any] = {"kind": cfg.kind}
    for key in ("base_url", "api_key_env", "bundled", "path"):
        value = getattr(cfg, key)
        if value is not None:
            doc[key] = value
    if cfg.headers:
        doc["headers"] = dict(cfg.headers)
    if cfg.kind not in ("local", "fake") or cfg.timeout != TimeoutConfig():
        timeout = cfg.timeout
        doc["timeout"] = {"connect": timeout.connect, "read": timeout.read, "total": timeout.total}
    doc.update(cfg.options)
    return doc


def _model_doc(cfg: ModelConfig) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": cfg.name, "upstream": cfg.upstream}
    if cfg.model != cfg.name:
        doc["model"] = cfg.model
    if cfg.options != ModelOptions():
        doc["options"] = {
            "think_tags": cfg.options.think_tags,
            "text_tool_calls": cfg.options.text_tool_calls,
        }
    return doc


# --- small validators -------------------------------------------------------------------


def _known_kinds() -> list[str]:
    # Imported late: the registry imports this module, and outside packages may have
    # registered kinds of their own by the time a config is parsed.
    from .upstreams import known_kinds

    return known_kinds()


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected a mapping, got {_kind(value)}")
    return value


def _reject_unknown(
    raw: Mapping[str, Any], known: tuple[str, ...], where: str, also: tuple[str, ...] = ()
) -> None:
    candidates = [*known, *also]
    for key in raw:
        if key in candidates:
            continue
        close = difflib.get_close_matches(str(key), candidates, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(candidates)}"
        raise ConfigError(f"{where}: unknown key {key!r} ({hint})")


def _str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: expected a non-empty string, got {_kind(value)}")
    return value


def _opt_str(value: Any, where: str) -> str | None:
    return None if value is None else _str(value, where)


def _int(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{where}: expected an integer, got {_kind(value)}")
    return value


def _positive(value: Any, where: str) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ConfigError(f"{where}: expected a positive number, got {_kind(value)}")
    if value <= 0:
        raise ConfigError(f"{where}: expected a positive number, got {value!r}")
    return value


def _positive_int(value: Any, where: str) -> int:
    number = _int(value, where)
    if number <= 0:
        raise ConfigError(f"{where}: expected a positive integer, got {number!r}")
    return number
