"""The app refuses a config its upstream kinds refuse, before serving anything."""

from __future__ import annotations

import pytest

from interlingua.config import ConfigError, parse_config
from interlingua.server import create_app
from interlingua.server.process import factory

# config.py accepts it (kind-specific keys are the kind's to check); kind fake does not.
BAD = parse_config(
    {
        "upstreams": {"f": {"kind": "fake", "chunk_size": 0}},
        "models": [{"name": "m", "upstream": "f"}],
    }
)
MESSAGE = r"upstreams\.f\.chunk_size: expected a positive integer, got 0"


def test_create_app_runs_the_kind_checks() -> None:
    with pytest.raises(ConfigError, match=MESSAGE):
        create_app(BAD)


def test_the_app_factory_runs_the_kind_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(factory.ENV_VAR, "")  # so that monkeypatch restores it afterwards
    monkeypatch.setattr(factory, "configure_logging", lambda level: None)
    factory.export_config(BAD)
    with pytest.raises(ConfigError, match=MESSAGE):
        factory.app_from_environment()
