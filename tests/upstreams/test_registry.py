"""The upstream registry: built-in kinds and their config checks, outside kinds, the
optional local engine."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import yaml

from interlingua import upstreams as registry
from interlingua.config import (
    Config,
    ConfigError,
    UpstreamConfig,
    default_config,
    fake_config,
    parse_config,
)
from interlingua.upstreams import (
    Upstream,
    build_upstream,
    build_upstreams,
    check_config,
    known_kinds,
    register_kind,
)
from interlingua.upstreams.anthropic import AnthropicUpstream
from interlingua.upstreams.fake import FakeUpstream
from interlingua.upstreams.local.kind import BUNDLED_MODELS
from interlingua.upstreams.openai_compatible import OpenAICompatibleUpstream
from interlingua.upstreams.openai_responses import OpenAIResponsesUpstream

from .conftest import SECRET


@pytest.fixture
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_KINDS", dict(registry._KINDS))


def checked(entry: str) -> Config:
    """``entry`` (YAML) as upstream ``u`` of a config, parsed and put through the kinds'
    checks."""
    config = parse_config(
        {"upstreams": {"u": yaml.safe_load(entry)}, "models": [{"name": "m", "upstream": "u"}]}
    )
    check_config(config)
    return config


def check_error(entry: str) -> str:
    with pytest.raises(ConfigError) as info:
        checked(entry)
    return str(info.value)


def test_builtin_kinds_are_registered() -> None:
    assert known_kinds()[:5] == ["openai", "anthropic", "responses", "local", "fake"]


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


def test_responses_kind_posts_to_the_responses_path(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = UpstreamConfig(
        name="oai",
        kind="responses",
        base_url="https://api.openai.com/v1/",
        api_key_env="OAI_TEST_KEY",
    )
    monkeypatch.setenv("OAI_TEST_KEY", SECRET)
    up = build_upstream(cfg, None)
    assert isinstance(up, OpenAIResponsesUpstream)
    assert (up.name, up.dialect, up.url) == (
        "oai",
        "responses",
        "https://api.openai.com/v1/responses",
    )
    assert up._headers["authorization"] == f"Bearer {SECRET}"


def test_fake_kind_takes_its_options() -> None:
    cfg = UpstreamConfig(name="f", kind="fake", options={"chunk_size": 2})
    up = build_upstream(cfg, None)
    assert isinstance(up, FakeUpstream)
    assert (up.name, up.wire, up.chunk_size, up.dialect) == ("f", None, 2, None)


def test_local_kind_without_the_extra_fails_cleanly(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes the import fail as if the module were not installed.
    monkeypatch.setitem(sys.modules, "interlingua.upstreams.local", None)
    cfg = UpstreamConfig(name="smol", kind="local", options={"bundled": "smollm2"})
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


# --- the kinds' config checks -----------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            "{kind: openia}",
            "upstreams.u.kind: unknown kind 'openia' (known: openai, anthropic, responses, local, fake)",
        ),
        ("{kind: openai}", "upstreams.u.base_url: required"),
        ("{kind: responses}", "upstreams.u.base_url: required for kind responses"),
        (
            "{kind: responses, base_url: 'http://h', n_ctx: 8}",
            "upstreams.u.n_ctx: only for kind local",
        ),
        (
            "{kind: openai, base_ur: 'http://h'}",
            "upstreams.u: unknown key 'base_ur' (did you mean 'base_url'?)",
        ),
        ("{kind: anthropic, region: us}", "upstreams.u: unknown key 'region' (known: kind,"),
        ("{kind: local}", "upstreams.u: kind local needs bundled"),
        ("{kind: local, bundled: a, path: b}", "upstreams.u: give bundled or path, not both"),
        ("{kind: anthropic, path: /m.gguf}", "upstreams.u.path: only for kind local"),
        (
            "{kind: openai, base_url: 'http://h', wire: openai}",
            "upstreams.u.wire: only for kind fake",
        ),
        (
            "{kind: fake, wire: grpc}",
            "upstreams.u.wire: must be openai, anthropic or responses, got 'grpc'",
        ),
        (
            "{kind: fake, chunk_size: 0}",
            "upstreams.u.chunk_size: expected a positive integer, got 0",
        ),
        (
            "{kind: local, bundled: llama9}",
            "upstreams.u.bundled: unknown bundled model 'llama9' (known: smollm2)",
        ),
        ("{kind: local, path: 5}", "upstreams.u.path: expected a non-empty string, got a number"),
        ("{kind: local, bundled: smollm2, n_ctx: 8}", "upstreams.u.n_ctx: must be at least 16"),
        (
            "{kind: local, bundled: smollm2, n_threads: 0}",
            "upstreams.u.n_threads: expected a positive",
        ),
        (
            "{kind: local, bundled: smollm2, max_queue: -1}",
            "upstreams.u.max_queue: must be 0 or more",
        ),
        (
            "{kind: local, bundled: smollm2, chat_template: ''}",
            "upstreams.u.chat_template: expected",
        ),
        (
            "{kind: local, bundled: smollm2, think_tags: 1}",
            "upstreams.u.think_tags: expected true or false, got a number",
        ),
        (
            "{kind: local, bundled: smollm2, n_cxt: 9}",
            "upstreams.u: unknown key 'n_cxt' (did you mean 'n_ctx'?)",
        ),
    ],
)
def test_kind_checks_name_the_path(entry: str, expected: str) -> None:
    assert check_error(entry).startswith(expected)


def test_builtin_kinds_accept_their_options() -> None:
    assert checked("{kind: openai, base_url: 'http://h/v1'}").upstreams["u"].base_url
    assert checked("{kind: anthropic}").upstreams["u"].options == {}
    local = "{kind: local, path: /m.gguf, n_ctx: 16, n_threads: 2, max_queue: 0, think_tags: true}"
    assert checked(local).upstreams["u"].options["max_queue"] == 0
    assert checked("{kind: fake, wire: anthropic, chunk_size: 2}").upstreams["u"].options == {
        "wire": "anthropic",
        "chunk_size": 2,
    }


def test_the_default_configs_pass_the_kind_checks() -> None:
    # config.py names the default's bundled model as plain data; the local kind owns the
    # list of bundled models, and must know that one.
    check_config(default_config())
    check_config(fake_config(wire="openai"))
    assert default_config().upstreams["local"].options["bundled"] in BUNDLED_MODELS


def test_building_runs_the_kind_check_first() -> None:
    with pytest.raises(
        ConfigError, match=r"upstreams\.f\.wire: must be openai, anthropic or responses"
    ):
        build_upstream(UpstreamConfig(name="f", kind="fake", options={"wire": "grpc"}), None)


def test_a_plugin_kind_gets_its_options_checked(isolated_registry: None) -> None:
    class Echo(Upstream):
        pass

    def check_echo(cfg: UpstreamConfig, where: str) -> None:
        if cfg.options.get("voice", "low") not in ("low", "high"):
            raise ConfigError(f"{where}.voice: must be low or high")

    register_kind("echo", lambda cfg, session: Echo(cfg.name), options=("voice",), check=check_echo)
    assert checked("{kind: echo, voice: high}").upstreams["u"].options == {"voice": "high"}
    assert check_error("{kind: echo, voice: loud}") == "upstreams.u.voice: must be low or high"
    assert check_error("{kind: echo, voise: low}") == (
        "upstreams.u: unknown key 'voise' (did you mean 'voice'?)"
    )
    # A key only a built-in kind takes is named as that kind's.
    assert check_error("{kind: echo, n_ctx: 64}") == "upstreams.u.n_ctx: only for kind local"
    with pytest.raises(ConfigError, match=r"upstreams\.e\.voice: must be low or high"):
        build_upstream(UpstreamConfig(name="e", kind="echo", options={"voice": "?"}), None)


def test_an_unknown_kind_is_rejected_by_the_check(isolated_registry: None) -> None:
    config = parse_config(
        {"upstreams": {"e": {"kind": "echo"}}, "models": [{"name": "m", "upstream": "e"}]}
    )
    with pytest.raises(ConfigError) as info:
        check_config(config)
    assert str(info.value) == (
        "upstreams.e.kind: unknown kind 'echo' (known: openai, anthropic, responses, local, fake)"
    )
    register_kind("echo", lambda cfg, session: Upstream(cfg.name))
    check_config(config)  # a kind registered with neither options nor check takes anything


def test_local_entries_are_checked_without_the_extra() -> None:
    # A child interpreter in which llama-cpp cannot be imported: the local kind's check
    # is light, so a bad value is reported as such and a good entry passes.
    code = textwrap.dedent(
        """
        import sys
        sys.modules["llama_cpp"] = None
        from interlingua.config import ConfigError, default_config, parse_config
        from interlingua.upstreams import build_upstreams, check_config
        check_config(default_config())
        bad = {"upstreams": {"s": {"kind": "local", "bundled": "smollm2", "n_ctx": 1}},
               "models": [{"name": "m", "upstream": "s"}]}
        try:
            check_config(parse_config(bad))
        except ConfigError as exc:
            print(exc)
        try:
            build_upstreams(default_config(), None)
        except ConfigError as exc:
            print(exc)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "upstreams.s.n_ctx: must be at least 16, got 1",
        "upstreams.local: the local engine needs the 'local' extra: pip install -e '.[local]'"
        " (missing module: llama_cpp)",
    ]
