"""The ``models`` section: what clients may ask for, and where each name goes."""

from __future__ import annotations

from typing import Any

from ._values import (
    ConfigError,
    describe,
    expect_bool,
    expect_choice,
    expect_str,
    mapping,
    opt_str,
    positive,
    reject_unknown,
)
from .prices import parse_price
from .sections import (
    COMPLETIONS_MODES,
    MODEL_KINDS,
    STREAM_BREAK_MODES,
    WILDCARD,
    ModelConfig,
    ModelOptions,
    UpstreamConfig,
)

__all__ = ["parse_models"]


def parse_models(data: Any, upstreams: dict[str, UpstreamConfig]) -> tuple[ModelConfig, ...]:
    if not isinstance(data, list):
        raise ConfigError(f"models: expected a list, got {describe(data)}")
    if not data:
        raise ConfigError("models: at least one model is required")
    models = tuple(_parse_model(item, f"models[{i}]", upstreams) for i, item in enumerate(data))
    names = {m.name for m in models}
    for i, model in enumerate(models):
        # Both lists are followed one level deep (a fallback's own fallbacks are not), so
        # naming the model itself is the only loop there is to refuse.
        for key in ("fallbacks", "context_fallbacks"):
            for j, fallback in enumerate(getattr(model, key)):
                where = f"models[{i}].{key}[{j}]"
                if fallback == model.name:
                    raise ConfigError(f"{where}: {fallback!r} is the model itself")
                if fallback not in names and WILDCARD not in names:
                    known = ", ".join(sorted(n for n in names if n != WILDCARD))
                    raise ConfigError(f"{where}: unknown model {fallback!r} (known: {known})")
    return models


def _parse_model(data: Any, where: str, upstreams: dict[str, UpstreamConfig]) -> ModelConfig:
    raw = mapping(data, where)
    reject_unknown(raw, _MODEL_KEYS, where)
    if "name" not in raw:
        raise ConfigError(f"{where}.name: required")
    name = expect_str(raw["name"], f"{where}.name")
    if "upstream" not in raw:
        raise ConfigError(f"{where}.upstream: required (known: {', '.join(upstreams)})")
    upstream = expect_str(raw["upstream"], f"{where}.upstream")
    if upstream not in upstreams:
        raise ConfigError(
            f"{where}.upstream: unknown upstream {upstream!r} (known: {', '.join(upstreams)})"
        )
    model = opt_str(raw.get("model"), f"{where}.model") or name
    weight = positive(raw.get("weight", 1.0), f"{where}.weight")
    params = dict(mapping(raw.get("params") or {}, f"{where}.params"))
    for key in ("model", "messages", "input", "stream"):
        if key in params:
            raise ConfigError(f"{where}.params.{key}: the gateway sets {key} itself")
    force = _names(raw.get("force_params"), f"{where}.force_params")
    for i, key in enumerate(force):
        if key not in params:
            raise ConfigError(f"{where}.force_params[{i}]: {key!r} is not in params")
    drop = _names(raw.get("drop_params"), f"{where}.drop_params")
    for i, key in enumerate(drop):
        if key in params:
            raise ConfigError(f"{where}.drop_params[{i}]: {key!r} is also in params")
    return ModelConfig(
        name=name,
        upstream=upstream,
        model=model,
        options=_parse_model_options(raw.get("options"), f"{where}.options"),
        weight=weight,
        fallbacks=_names(raw.get("fallbacks"), f"{where}.fallbacks"),
        context_fallbacks=_names(raw.get("context_fallbacks"), f"{where}.context_fallbacks"),
        params=params,
        force_params=force,
        drop_params=drop,
        on_stream_break=expect_choice(
            raw.get("on_stream_break", "error"), STREAM_BREAK_MODES, f"{where}.on_stream_break"
        ),
        price=parse_price(raw["price"], f"{where}.price") if "price" in raw else None,
        kind=expect_choice(raw["kind"], MODEL_KINDS, f"{where}.kind") if "kind" in raw else None,
        completions=expect_choice(
            raw.get("completions", "native"), COMPLETIONS_MODES, f"{where}.completions"
        ),
    )


_MODEL_KEYS = (
    "name",
    "upstream",
    "model",
    "options",
    "weight",
    "fallbacks",
    "context_fallbacks",
    "params",
    "force_params",
    "drop_params",
    "on_stream_break",
    "price",
    "kind",
    "completions",
)


def _names(data: Any, where: str) -> tuple[str, ...]:
    """A list of non-empty strings (None: empty)."""
    if data is None:
        return ()
    if not isinstance(data, list):
        raise ConfigError(f"{where}: expected a list of strings, got {describe(data)}")
    names = []
    for i, item in enumerate(data):
        value = expect_str(item, f"{where}[{i}]")
        if not value:
            raise ConfigError(f"{where}[{i}]: must not be empty")
        names.append(value)
    return tuple(names)


_OPTION_KEYS = (
    "think_tags",
    "text_tool_calls",
    "force_background_tasks_off",
    "fill_empty_answer",
    "estimate_input_tokens",
)


def _parse_model_options(data: Any, where: str) -> ModelOptions:
    if data is None:
        return ModelOptions()
    raw = mapping(data, where)
    reject_unknown(raw, _OPTION_KEYS, where)
    values: dict[str, bool] = {}
    for key, value in raw.items():
        values[str(key)] = expect_bool(value, f"{where}.{key}")
    return ModelOptions(**values)
