"""The app factory uvicorn imports in each worker process (``serve --workers N``).

Several workers need an import string, not an app object: uvicorn starts each worker as
a fresh process that imports :func:`app_from_environment`. The parent passes the
effective config through the environment as YAML (``INTERLINGUA_CONFIG_YAML``), so every
worker serves exactly what ``serve`` resolved -- flags, ``--fake`` and defaults included.
Upstream keys are not in it (a config holds only the names of their variables).
"""

from __future__ import annotations

import logging
import os

import yaml
from starlette.types import ASGIApp

from ...config import Config, config_to_yaml, parse_config
from ..app import create_app

ENV_VAR = "INTERLINGUA_CONFIG_YAML"
LOG_LEVEL_ENV = "INTERLINGUA_LOG_LEVEL"


def configure_logging(level: str) -> None:
    """Log lines to stderr at ``level`` (``serve`` calls it, and so does each worker)."""
    logging.basicConfig(
        level=getattr(logging, level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def export_config(config: Config) -> None:
    """Put ``config`` where :func:`app_from_environment` finds it (this process's env)."""
    os.environ[ENV_VAR] = config_to_yaml(config, redact=False)


def app_from_environment() -> ASGIApp:
    """Build the gateway from the config that :func:`export_config` exported."""
    text = os.environ.get(ENV_VAR)
    if text is None:
        raise RuntimeError(f"{ENV_VAR} is not set; start workers with `interlingua serve`")
    configure_logging(os.environ.get(LOG_LEVEL_ENV, "info"))
    return create_app(parse_config(yaml.safe_load(text)))
