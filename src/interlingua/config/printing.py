"""The effective config back as YAML, in the documented shape (``--print-config``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml

from .batches import batches_doc, files_doc
from .sections import (
    REDACTED,
    SERVER_LIMIT_COUNTS,
    SERVER_LIMIT_SECONDS,
    Config,
    LimitsConfig,
    ModelConfig,
    ModelOptions,
    ResponsesConfig,
    RetriesConfig,
    TimeoutConfig,
    UpstreamConfig,
)
from .team import admin_doc, key_doc, state_doc, telemetry_doc, usage_doc

__all__ = ["config_to_yaml"]


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
            **{key: getattr(server, key) for key in (*SERVER_LIMIT_SECONDS, *SERVER_LIMIT_COUNTS)},
            "max_connections": server.max_connections or "auto",
        },
        "upstreams": {name: _upstream_doc(u) for name, u in config.upstreams.items()},
        "models": [_model_doc(m) for m in config.models],
        "responses": _responses_doc(config.responses),
        "routing": {
            "strategy": config.routing.strategy,
            "cooldown": dataclasses.asdict(config.routing.cooldown),
        },
        "keys": [key_doc(key) for key in config.keys],
        "state": state_doc(config.state),
        "usage": usage_doc(config.usage),
        "metrics": config.metrics,
    }
    if config.prices is not None:
        doc["prices"] = config.prices
    if config.telemetry is not None:  # (absent: off, as in the file)
        doc["telemetry"] = telemetry_doc(config.telemetry)
    if config.admin is not None:
        doc["admin"] = admin_doc(config.admin)
    doc["files"] = files_doc(config.files)
    doc["batches"] = batches_doc(config.batches)
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def _upstream_doc(cfg: UpstreamConfig) -> dict[str, Any]:
    doc: dict[str, Any] = {"kind": cfg.kind}
    for key in ("base_url", "api_key_env"):
        value = getattr(cfg, key)
        if value is not None:
            doc[key] = value
    if cfg.headers:
        doc["headers"] = dict(cfg.headers)
    # The timeout shows whenever it is set, and for an HTTP upstream (one with a URL or a
    # key) even at its defaults: those bound every request it gets. Not for an in-process
    # or scripted one, whose entry names neither and which never waits on a socket.
    if cfg.timeout != TimeoutConfig() or cfg.base_url or cfg.api_key_env:
        timeout = cfg.timeout
        doc["timeout"] = {"connect": timeout.connect, "read": timeout.read, "total": timeout.total}
        for phase in ("first_byte", "idle"):
            if getattr(timeout, phase) is not None:
                doc["timeout"][phase] = getattr(timeout, phase)
    if cfg.limits != LimitsConfig():
        limits = dataclasses.asdict(cfg.limits)
        doc["limits"] = {k: v for k, v in limits.items() if v is not None}
    if cfg.retries != RetriesConfig():
        doc["retries"] = dataclasses.asdict(cfg.retries)
    if cfg.continue_with != "auto":
        doc["continue_with"] = cfg.continue_with
    doc.update(cfg.options)
    return doc


def _responses_doc(cfg: ResponsesConfig) -> dict[str, Any]:
    # ``url`` only when set: the default (SQLite in the user data dir) is resolved when
    # the store opens, so a printout loads back as the same config on another machine.
    doc: dict[str, Any] = {"store": cfg.store}
    if cfg.url is not None:
        doc["url"] = cfg.url
    doc["expire_after"] = cfg.expire_after
    if cfg.secret_env is not None:
        doc["secret_env"] = cfg.secret_env
    return doc


def _model_doc(cfg: ModelConfig) -> dict[str, Any]:
    doc: dict[str, Any] = {"name": cfg.name, "upstream": cfg.upstream}
    if cfg.model != cfg.name:
        doc["model"] = cfg.model
    if cfg.options != ModelOptions():
        doc["options"] = dataclasses.asdict(cfg.options)
    if cfg.weight != 1.0:
        doc["weight"] = cfg.weight
    for key in ("fallbacks", "context_fallbacks", "force_params", "drop_params"):
        if getattr(cfg, key):
            doc[key] = list(getattr(cfg, key))
    if cfg.params:
        doc["params"] = dict(cfg.params)
    if cfg.on_stream_break != "error":
        doc["on_stream_break"] = cfg.on_stream_break
    if cfg.price is not None:  # (a price the file gave is printed as the entry's own)
        doc["price"] = cfg.price.as_doc()
    if cfg.kind is not None:
        doc["kind"] = cfg.kind
    if cfg.completions != "native":
        doc["completions"] = cfg.completions
    return doc
