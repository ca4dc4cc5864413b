"""The sections a team running the gateway sets: ``keys``, ``state``, ``usage``, ``metrics``,
``telemetry``, ``admin``.

The shape is a contract (docs/config.md, "Keys", "Shared state (Redis)", "Usage log",
"Metrics and the status page" and "Traces (OpenTelemetry)")::

    keys:                                  # when present, every request carries one
      - name: team-a                       # what logs, usage and metrics show
        key_env: TEAM_A_KEY                # the key's value comes from this variable...
      - name: team-b
        key_sha256: 9f86d081...            # ...or only its SHA-256 is stored
        models: [lb, "claude-*"]           # allowed model names (globs); default: all
        limits: {rpm: 5, tpm: 100000, max_concurrency: 4, tokens_per_day: 2000000,
                 budget_per_day: 20, budget_per_month: 300}    # budgets in USD
    state: {url: "redis://127.0.0.1:6379/0"}   # shared counters; default: in process
    usage: {url: "sqlite:///var/lib/interlingua/usage.db"}   # or postgresql://...;
                                                              # `usage: false`: off
    metrics: true                          # GET /metrics; default on
    telemetry:                             # OTLP/HTTP traces; off when absent
      otlp_endpoint: http://otel-collector:4318
      service_name: llm-gateway            # default: interlingua
      content: false                       # export prompts and answers too
    admin: {key_env: GATEWAY_ADMIN_KEY}    # /admin/* with this key; absent: no /admin

Nothing secret is written here: a key is named by its variable or stored as a digest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import os
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from ._values import (
    ENV_NAME,
    ConfigError,
    database_url,
    describe,
    expect_bool,
    expect_positive_int,
    expect_str,
    expect_usd,
    mapping,
    opt_str,
    reject_unknown,
)

__all__ = [
    "AdminConfig",
    "KeyConfig",
    "KeyLimits",
    "StateConfig",
    "TelemetryConfig",
    "UsageConfig",
    "admin_doc",
    "key_doc",
    "parse_admin",
    "parse_key_limits",
    "parse_keys",
    "parse_metrics",
    "parse_state",
    "parse_telemetry",
    "parse_usage",
    "state_doc",
    "telemetry_doc",
    "usage_doc",
]

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_STATE_SCHEMES = ("redis://", "rediss://", "unix://")


@dataclass(frozen=True)
class KeyLimits:
    """What one key may use; None: no limit. ``rpm``/``tpm`` are sliding one-minute
    windows, ``tokens_per_day`` counts the UTC calendar day; the budgets are US dollars
    of spend (the usage log's ``cost_usd``) per UTC calendar day and month."""

    rpm: int | None = None
    tpm: int | None = None
    max_concurrency: int | None = None
    tokens_per_day: int | None = None
    budget_per_day: Decimal | None = None
    budget_per_month: Decimal | None = None

    @property
    def any(self) -> bool:
        """Whether any limit is set."""
        return any(v is not None for v in dataclasses.astuple(self))


@dataclass(frozen=True)
class KeyConfig:
    """One client key: its name, where its value comes from, what it may use."""

    name: str
    key_env: str | None = None
    key_sha256: str | None = None
    #: allowed model names (fnmatch globs); empty: every model
    models: tuple[str, ...] = ()
    limits: KeyLimits = field(default_factory=KeyLimits)

    def digest(self) -> str:
        """The key's SHA-256 (hex): stored, or of the variable's value (read now).

        Raises ConfigError when the variable is unset or empty: a key nobody can
        present would lock its team out without a word.
        """
        if self.key_sha256 is not None:
            return self.key_sha256
        assert self.key_env is not None
        value = os.environ.get(self.key_env)
        if not value:
            raise ConfigError(
                f"keys: key {self.name!r}: environment variable {self.key_env} is not set"
            )
        return hashlib.sha256(value.encode()).hexdigest()


@dataclass(frozen=True)
class StateConfig:
    """Where limit counters and cooldowns live: None in this process, else Redis."""

    url: str | None = None


@dataclass(frozen=True)
class UsageConfig:
    """The usage log: on by default, in SQLite in the user data dir unless ``url``."""

    enabled: bool = True
    url: str | None = None


@dataclass(frozen=True)
class TelemetryConfig:
    """Where the gateway's traces go (OTLP over HTTP), under which service name, and
    whether prompts and answers go with them."""

    otlp_endpoint: str
    service_name: str = "interlingua"
    content: bool = False


@dataclass(frozen=True)
class AdminConfig:
    """The operator's key for ``/admin/*`` (e.g. ``POST /admin/reload``): its value is
    read from ``key_env`` when the app is built, never written in the file."""

    key_env: str

    def digest(self) -> bytes:
        """The admin key's SHA-256; ConfigError when its variable is unset or empty (an
        admin section nobody can use is a mistake worth refusing)."""
        value = os.environ.get(self.key_env)
        if not value:
            raise ConfigError(f"admin.key_env: environment variable {self.key_env} is not set")
        return hashlib.sha256(value.encode()).digest()


def parse_admin(data: Any) -> AdminConfig | None:
    """The ``admin`` section; None when absent (then no /admin route answers)."""
    if data is None:
        return None
    raw = mapping(data, "admin")
    reject_unknown(raw, ("key_env",), "admin")
    key_env = expect_str(raw.get("key_env"), "admin.key_env")
    if not ENV_NAME.match(key_env):
        raise ConfigError(f"admin.key_env: the name of an environment variable, got {key_env!r}")
    return AdminConfig(key_env)


def admin_doc(admin: AdminConfig) -> dict[str, Any]:
    return {"key_env": admin.key_env}


def parse_keys(data: Any) -> tuple[KeyConfig, ...]:
    if data is None:
        return ()
    if not isinstance(data, list):
        raise ConfigError(f"keys: expected a list of keys, got {describe(data)}")
    keys: list[KeyConfig] = []
    seen: set[str] = set()
    for i, item in enumerate(data):
        key = _parse_key(item, f"keys[{i}]")
        if key.name in seen:
            raise ConfigError(f"keys[{i}].name: {key.name!r} is used by another key")
        seen.add(key.name)
        keys.append(key)
    return tuple(keys)


def _parse_key(data: Any, where: str) -> KeyConfig:
    raw = mapping(data, where)
    reject_unknown(raw, ("name", "key_env", "key_sha256", "models", "limits"), where)
    name = expect_str(raw.get("name"), f"{where}.name")
    key_env = opt_str(raw.get("key_env"), f"{where}.key_env")
    digest = opt_str(raw.get("key_sha256"), f"{where}.key_sha256")
    if (key_env is None) == (digest is None):
        raise ConfigError(f"{where}: give exactly one of key_env and key_sha256")
    if key_env is not None and not ENV_NAME.match(key_env):
        raise ConfigError(f"{where}.key_env: the name of an environment variable, got {key_env!r}")
    if digest is not None:
        digest = digest.lower()
        if not _SHA256.match(digest):
            raise ConfigError(
                f"{where}.key_sha256: 64 hexadecimal characters (sha256sum of the key)"
            )
    models_raw = raw.get("models")
    models: tuple[str, ...] = ()
    if models_raw is not None:
        if not isinstance(models_raw, list) or not models_raw:
            raise ConfigError(
                f"{where}.models: expected a non-empty list of model names, "
                f"got {describe(models_raw)}"
            )
        models = tuple(expect_str(m, f"{where}.models[{j}]") for j, m in enumerate(models_raw))
    return KeyConfig(name, key_env, digest, models, parse_key_limits(raw.get("limits"), where))


def parse_key_limits(data: Any, where: str) -> KeyLimits:
    """A key's ``limits`` mapping (None: none), else ConfigError naming ``where``."""
    if data is None:
        return KeyLimits()
    raw = mapping(data, f"{where}.limits")
    counts = ("rpm", "tpm", "max_concurrency", "tokens_per_day")
    budgets = ("budget_per_day", "budget_per_month")
    reject_unknown(raw, counts + budgets, f"{where}.limits")
    values: dict[str, Any] = {
        k: expect_positive_int(raw[k], f"{where}.limits.{k}")
        for k in counts
        if raw.get(k) is not None
    }
    values.update(
        (k, expect_usd(raw[k], f"{where}.limits.{k}")) for k in budgets if raw.get(k) is not None
    )
    return KeyLimits(**values)


def parse_state(data: Any) -> StateConfig:
    if data is None:
        return StateConfig()
    raw = mapping(data, "state")
    reject_unknown(raw, ("url",), "state")
    url = opt_str(raw.get("url"), "state.url")
    if url is not None and not url.startswith(_STATE_SCHEMES):
        raise ConfigError(
            f"state.url: expected redis://host:port/db (or rediss://, unix://), got {url!r}"
        )
    return StateConfig(url)


def parse_usage(data: Any) -> UsageConfig:
    if data is None or data is True:
        return UsageConfig()
    if data is False:
        return UsageConfig(enabled=False)
    raw = mapping(data, "usage")
    reject_unknown(raw, ("url",), "usage")
    return UsageConfig(url=database_url(raw.get("url"), "usage.url"))


def parse_metrics(data: Any) -> bool:
    return True if data is None else expect_bool(data, "metrics")


def key_doc(key: KeyConfig) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": key.name}
    if key.key_env is not None:
        doc["key_env"] = key.key_env
    else:
        doc["key_sha256"] = key.key_sha256
    if key.models:
        doc["models"] = list(key.models)
    limits = {
        k: _usd_doc(v) if isinstance(v, Decimal) else v
        for k, v in dataclasses.asdict(key.limits).items()
        if v is not None
    }
    if limits:
        doc["limits"] = limits
    return doc


def _usd_doc(amount: Decimal) -> int | float:
    """An amount as a config file writes it (a YAML number)."""
    return int(amount) if amount == amount.to_integral_value() else float(amount)


def state_doc(state: StateConfig) -> dict[str, Any]:
    return {"url": state.url} if state.url else {}


def usage_doc(usage: UsageConfig) -> Any:
    if not usage.enabled:
        return False
    return {"url": usage.url} if usage.url else {}


def parse_telemetry(data: Any) -> TelemetryConfig | None:
    """The ``telemetry`` section (None: off). The exporter is an optional install, so a
    config that asks for traces without it is refused here, before serving, rather
    than at the first request."""
    if data is None:
        return None
    raw = mapping(data, "telemetry")
    reject_unknown(raw, ("otlp_endpoint", "service_name", "content"), "telemetry")
    endpoint = expect_str(raw.get("otlp_endpoint"), "telemetry.otlp_endpoint").rstrip("/")
    if not endpoint.startswith(("http://", "https://")):
        raise ConfigError(
            f"telemetry.otlp_endpoint: expected an OTLP/HTTP URL such as "
            f"http://otel-collector:4318, got {endpoint!r}"
        )
    service = expect_str(raw.get("service_name", "interlingua"), "telemetry.service_name")
    content = expect_bool(raw.get("content", False), "telemetry.content")
    if not _installed("opentelemetry.sdk") or not _installed(
        "opentelemetry.exporter.otlp.proto.http"
    ):
        raise ConfigError(
            "telemetry: needs the OpenTelemetry exporter, an optional extra: "
            "pip install 'interlingua[otel]'"
        )
    return TelemetryConfig(endpoint, service, content)


def _installed(module: str) -> bool:
    """Whether ``module`` can be imported, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # (a parent package is missing)
        return False


def telemetry_doc(telemetry: TelemetryConfig) -> dict[str, Any]:
    return dataclasses.asdict(telemetry)
