"""Config: the documented YAML shape, validation messages, printing and round trips."""

from __future__ import annotations

import textwrap
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from interlingua.config import (
    Config,
    ConfigError,
    ModelConfig,
    ModelOptions,
    ServerConfig,
    TimeoutConfig,
    UpstreamConfig,
    config_to_yaml,
    default_config,
    fake_config,
    load_config,
    parse_config,
)

# The sample of the config package's docstring (docs/config.md has the whole shape).
DOCUMENTED_EXAMPLE = textwrap.dedent(
    """\
    server:
      host: 127.0.0.1
      port: 8400
      max_body_mb: 32
    upstreams:
      vllm:
        kind: openai
        base_url: http://127.0.0.1:8000/v1
        api_key_env: VLLM_API_KEY
        timeout: {connect: 10, read: 600}
      smol:
        kind: local
        bundled: smollm2
    models:
      - name: claude-sonnet-4-5
        upstream: vllm
        model: Qwen/Qwen3-8B
        options:
          think_tags: true
          text_tool_calls: false
      - name: smollm2
        upstream: smol
    """
)


def parse_yaml(text: str) -> Config:
    return parse_config(yaml.safe_load(textwrap.dedent(text)))


def error_of(text: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse_yaml(text)
    return str(info.value)


def test_documented_example_parses_into_the_documented_values(tmp_path: Path) -> None:
    path = tmp_path / "interlingua.yaml"
    path.write_text(DOCUMENTED_EXAMPLE)
    config = load_config(path)
    assert config.server == ServerConfig(host="127.0.0.1", port=8400, max_body_mb=32)
    assert list(config.upstreams) == ["vllm", "smol"]
    assert config.upstreams["vllm"] == UpstreamConfig(
        name="vllm",
        kind="openai",
        base_url="http://127.0.0.1:8000/v1",
        api_key_env="VLLM_API_KEY",
        timeout=TimeoutConfig(connect=10, read=600),
    )
    assert config.upstreams["smol"].options == {"bundled": "smollm2"}
    assert config.models == (
        ModelConfig("claude-sonnet-4-5", "vllm", "Qwen/Qwen3-8B", ModelOptions(think_tags=True)),
        ModelConfig("smollm2", "smol", "smollm2"),
    )


def test_model_defaults_to_its_name_and_options_off() -> None:
    config = parse_yaml(
        """
        upstreams: {u: {kind: openai, base_url: "http://h/v1"}}
        models: [{name: gpt-4o, upstream: u}]
        """
    )
    assert config.models[0].model == "gpt-4o"
    assert config.models[0].options == ModelOptions(think_tags=False, text_tool_calls=False)
    assert config.upstreams["u"].timeout == TimeoutConfig(connect=10.0, read=600.0)


def test_unknown_upstream_names_the_path_and_the_known_ones() -> None:
    message = error_of(
        """
        upstreams:
          vllm: {kind: openai, base_url: "http://h/v1"}
          smol: {kind: local, bundled: smollm2}
        models:
          - {name: a, upstream: vllm}
          - {name: b, upstream: vlm}
        """
    )
    assert message == "models[1].upstream: unknown upstream 'vlm' (known: vllm, smol)"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[1, 2]", "config: expected a mapping, got a list"),
        ("{serve: {}}", "config: unknown key 'serve' (did you mean 'server'?)"),
        ("{server: {port: http}}", "server.port: expected an integer, got a string"),
        ("{server: {port: 70000}}", "server.port: must be between 0 and 65535, got 70000"),
        ("{server: {max_body_mb: 0}}", "server.max_body_mb: expected a positive number, got 0"),
        ("{server: {api_keys: k}}", "server.api_keys: expected a list of strings, got a string"),
        ("{upstreams: {u: {kind: openai, base_url: 'http://h'}}}", "models: required"),
        ("{models: [{name: a, upstream: u}]}", "upstreams: required"),
        ("{upstreams: {u: {base_url: 'http://h'}}, models: []}", "upstreams.u.kind: required"),
        ("{upstreams: {u: {kind: ''}}, models: []}", "upstreams.u.kind: expected a non-empty"),
        (
            "{upstreams: {u: {kind: openai, base_url: 'h:8000'}}, models: []}",
            "upstreams.u.base_url: must start with http:// or https://",
        ),
        (
            "{upstreams: {u: {kind: anthropic, api_key: sk-ant-123}}, models: []}",
            "upstreams.u.api_key: keys are never written in the config",
        ),
        (
            "{upstreams: {u: {kind: anthropic, api_key_env: sk-ant-123}}, models: []}",
            "upstreams.u.api_key_env: 'sk-ant-123' is not an environment variable name",
        ),
        (
            "{upstreams: {u: {kind: anthropic, timeout: {read: -1}}}, models: []}",
            "upstreams.u.timeout.read: expected a positive number, got -1",
        ),
        (
            "{upstreams: {u: {kind: anthropic, timeout: {first_byte: 0}}}, models: []}",
            "upstreams.u.timeout.first_byte: expected a positive number, got 0",
        ),
        (
            "{upstreams: {u: {kind: anthropic, timeout: {write: 1}}}, models: []}",
            "upstreams.u.timeout: unknown key 'write'",
        ),
        (
            "{upstreams: {u: {kind: anthropic, headers: {X-A: [1]}}}, models: []}",
            "upstreams.u.headers.X-A: expected a string, got a list",
        ),
        ("{upstreams: {u: {kind: fake}}, models: []}", "models: at least one model is required"),
        (
            "{upstreams: {u: {kind: fake}}, models: {a: u}}",
            "models: expected a list, got a mapping",
        ),
        ("{upstreams: {u: {kind: fake}}, models: [{upstream: u}]}", "models[0].name: required"),
        (
            "{upstreams: {u: {kind: fake}}, models: [{name: a, upstream: u, modle: b}]}",
            "models[0]: unknown key 'modle' (did you mean 'model'?)",
        ),
        (
            "{upstreams: {u: {kind: fake}}, models: [{name: a, upstream: u, options: {think_tags: 1}}]}",
            "models[0].options.think_tags: expected true or false, got a number",
        ),
        (
            "{upstreams: {u: {kind: fake}}, models: [{name: a, upstream: u, options: {thinking: true}}]}",
            "models[0].options: unknown key 'thinking'",
        ),
        ("{responses: {stor: false}}", "responses: unknown key 'stor' (did you mean 'store'?)"),
        ("{responses: {store: no_thanks}}", "responses.store: expected true or false"),
        ("{responses: {expire_after: 0}}", "responses.expire_after: expected a positive number"),
        (
            "{responses: {url: 'mysql://h/db'}}",
            "responses.url: expected sqlite:///path/to/file.db or postgresql://",
        ),
        ("{responses: {url: 'sqlite://'}}", "responses.url: sqlite:// needs a path"),
        (
            "{upstreams: {u: {kind: fake, limits: {rpm: 0}}}, models: [{name: a, upstream: u}]}",
            "upstreams.u.limits.rpm: expected a positive integer",
        ),
        (
            "{upstreams: {u: {kind: fake, limits: {rps: 1}}}, models: [{name: a, upstream: u}]}",
            "upstreams.u.limits: unknown key 'rps' (did you mean 'rpm'?)",
        ),
        (
            "{upstreams: {u: {kind: fake, retries: {max: -1}}}, models: [{name: a, upstream: u}]}",
            "upstreams.u.retries.max: must be 0 or more",
        ),
        (
            "{upstreams: {u: {kind: fake}}, models: [{name: a, upstream: u, weight: 0}]}",
            "models[0].weight: expected a positive number",
        ),
        (
            "{upstreams: {u: {kind: fake}}, models: [{name: a, upstream: u, fallbacks: [b]}]}",
            "models[0].fallbacks[0]: unknown model 'b' (known: a)",
        ),
        (
            "{upstreams: {u: {kind: fake}}, models: [{name: a, upstream: u, fallbacks: [a]}]}",
            "models[0].fallbacks[0]: 'a' is the model itself",
        ),
        (
            "{upstreams: {u: {kind: fake}}, models: [{name: a, upstream: u, context_fallbacks: [b]}]}",
            "models[0].context_fallbacks[0]: unknown model 'b' (known: a)",
        ),
        (
            "{upstreams: {u: {kind: fake}}, models: [{name: a, upstream: u, context_fallbacks: [a]}]}",
            "models[0].context_fallbacks[0]: 'a' is the model itself",
        ),
        (
            "{upstreams: {u: {kind: fake}}, models: [{name: a, upstream: u, context_fallbacks: b}]}",
            "models[0].context_fallbacks: expected a list of strings, got a string",
        ),
        (
            "{upstreams: {u: {kind: fake}}, models: [{name: a, upstream: u, params: {stream: true}}]}",
            "models[0].params.stream: the gateway sets stream itself",
        ),
        (
            "{upstreams: {u: {kind: fake}}, models: [{name: a, upstream: u, force_params: [t]}]}",
            "models[0].force_params[0]: 't' is not in params",
        ),
        ("{routing: {strategy: fastest}}", "routing.strategy: unknown strategy 'fastest'"),
        ("{routing: {cooldown: {failures: 0}}}", "routing.cooldown.failures: expected a positive"),
    ],
)
def test_validation_messages_name_the_path(text: str, expected: str) -> None:
    assert error_of(text).startswith(expected)


def test_kind_specific_keys_land_in_options_unchecked() -> None:
    # Config checks only what every entry shares; the kinds check the rest
    # (upstreams.check_config, tests/upstreams/test_registry.py).
    config = parse_yaml(
        """
        upstreams:
          smol: {kind: local, path: /m.gguf, n_ctx: 4096, n_threads: 2}
          f: {kind: fake, wire: grpc, chunk_size: 0}
          o: {kind: openia, region: mars}
        models: [{name: a, upstream: smol}]
        """
    )
    assert config.upstreams["smol"].options == {"path": "/m.gguf", "n_ctx": 4096, "n_threads": 2}
    assert config.upstreams["f"].options == {"wire": "grpc", "chunk_size": 0}
    assert (config.upstreams["o"].kind, config.upstreams["o"].options) == (
        "openia",
        {"region": "mars"},
    )


def test_api_key_is_read_from_the_named_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = UpstreamConfig(name="vllm", kind="openai", base_url="http://h/v1", api_key_env="K_1")
    monkeypatch.setenv("K_1", "sk-secret-value")
    assert cfg.api_key() == "sk-secret-value"
    monkeypatch.delenv("K_1")
    with pytest.raises(ConfigError) as info:
        cfg.api_key()
    assert str(info.value) == (
        "upstreams.vllm.api_key_env: environment variable K_1 is not set (or empty)"
    )
    assert UpstreamConfig(name="x", kind="openai").api_key() is None


def test_empty_file_and_server_only_mean_the_default_models(tmp_path: Path) -> None:
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert load_config(path) == default_config()
    config = parse_yaml("{server: {port: 9000, api_keys: [k1]}}")
    assert config.server == ServerConfig(port=9000, api_keys=("k1",))
    assert config.models == default_config().models


def test_load_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("models: [\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: invalid YAML"):
        load_config(path)
    path.write_text("{server: {port: x}}")
    with pytest.raises(ConfigError, match=r"bad\.yaml: server\.port: expected an integer"):
        load_config(path)
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "missing.yaml")


def test_default_config_is_the_bundled_local_model() -> None:
    config = default_config()
    assert config.upstreams == {
        "local": UpstreamConfig(name="local", kind="local", options={"bundled": "smollm2"})
    }
    assert [(m.name, m.upstream, m.model) for m in config.models] == [
        ("smollm2", "local", "smollm2"),
        ("default", "local", "smollm2"),
    ]


def test_fake_config_has_fake_default_and_a_wildcard() -> None:
    config = fake_config()
    assert config.upstreams["fake"].kind == "fake"
    assert [(m.name, m.model) for m in config.models] == [
        ("fake", "fake"),
        ("default", "default"),
        ("*", "*"),
    ]
    assert fake_config(wire="openai").upstreams["fake"].options == {"wire": "openai"}


@pytest.mark.parametrize(
    "config",
    [
        default_config(),
        fake_config(wire="anthropic"),
        parse_yaml(DOCUMENTED_EXAMPLE),
        parse_yaml(
            """
            server: {host: 0.0.0.0, port: 0, max_body_mb: 1.5}
            upstreams:
              claude:
                kind: anthropic
                api_key_env: ANTHROPIC_API_KEY
                headers: {anthropic-beta: "a,b"}
                timeout: {connect: 2.5, read: 30, total: 90, first_byte: 5, idle: 7.5}
              smol: {kind: local, path: /m.gguf, n_ctx: 2048}
            models:
              - {name: c, upstream: claude, model: claude-sonnet-4-5, options: {text_tool_calls: true}}
              - {name: c, upstream: smol}
              - {name: "*", upstream: claude}
            responses: {store: false, url: "postgresql://u@db:5432/gw", expire_after: 3600}
            """
        ),
    ],
)
def test_printed_config_round_trips(config: Config) -> None:
    assert parse_config(yaml.safe_load(config_to_yaml(config))) == config


def test_printed_config_shape() -> None:
    doc = yaml.safe_load(config_to_yaml(parse_yaml(DOCUMENTED_EXAMPLE)))
    assert doc["upstreams"]["vllm"] == {
        "kind": "openai",
        "base_url": "http://127.0.0.1:8000/v1",
        "api_key_env": "VLLM_API_KEY",
        "timeout": {"connect": 10, "read": 600, "total": 3600},
    }
    assert doc["upstreams"]["smol"] == {"kind": "local", "bundled": "smollm2"}
    assert doc["models"][1] == {"name": "smollm2", "upstream": "smol"}
    assert doc["models"][0]["model"] == "Qwen/Qwen3-8B"


def test_responses_section_defaults_and_printing() -> None:
    config = parse_yaml("{}")
    assert config.responses.store is True and config.responses.url is None
    assert config.responses.expire_after == 30 * 24 * 3600
    assert yaml.safe_load(config_to_yaml(config))["responses"] == {
        "store": True,
        "expire_after": 2592000,
    }
    set_url = parse_yaml("{responses: {url: 'sqlite:///var/lib/r.db', expire_after: 0.5}}")
    assert yaml.safe_load(config_to_yaml(set_url))["responses"] == {
        "store": True,
        "url": "sqlite:///var/lib/r.db",
        "expire_after": 0.5,
    }


def test_client_keys_are_redacted_when_printed_and_the_placeholder_is_refused() -> None:
    config = parse_yaml("{server: {api_keys: [client-key-1]}}")
    printed = config_to_yaml(config)
    assert "client-key-1" not in printed
    with pytest.raises(ConfigError, match=r"server\.api_keys\[0\]: <redacted> is a placeholder"):
        parse_config(yaml.safe_load(printed))
    assert parse_config(yaml.safe_load(config_to_yaml(config, redact=False))) == config


def test_printed_config_never_holds_an_upstream_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "sk-live-do-not-print")
    printed = config_to_yaml(parse_yaml(DOCUMENTED_EXAMPLE))
    assert "sk-live-do-not-print" not in printed
    assert "VLLM_API_KEY" in printed


def test_config_imports_nothing_of_ours() -> None:
    # A leaf: the upstream kinds import config (to check their options), never the reverse.
    # Its own modules import each other only.
    import ast

    import interlingua.config

    ours = []
    for path in Path(interlingua.config.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        ours += [
            node.module or "."
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            and (node.level > 1 or "interlingua" in (node.module or ""))
        ]
        ours += [
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
            if alias.name.startswith("interlingua")
        ]
    assert ours == []


def test_routing_keys_parse_and_print_back() -> None:
    """The routing contract: every key as docs/config.md spells it ("Routing and retries",
    "Request shaping", "Upstream limits")."""
    config = parse_config(
        yaml.safe_load(
            textwrap.dedent(
                """
                upstreams:
                  nim:
                    kind: openai
                    base_url: https://integrate.api.nvidia.com/v1
                    limits: {rpm: 40, tpm: 200000, max_concurrency: 8, max_queue: 128,
                             queue_timeout: 60}
                    retries: {max: 3, max_wait: 60}
                    max_tokens_field: max_completion_tokens
                  vllm: {kind: openai, base_url: "http://127.0.0.1:8000/v1"}
                models:
                  - {name: smart, upstream: nim, model: r1, weight: 3, fallbacks: [backup]}
                  - {name: smart, upstream: vllm, model: r1b, weight: 1}
                  - name: backup
                    upstream: vllm
                    params: {temperature: 0.6, chat_template_kwargs: {enable_thinking: true}}
                    force_params: [temperature]
                    drop_params: [reasoning_effort]
                    options: {force_background_tasks_off: true}
                routing:
                  strategy: least-busy
                  cooldown: {failures: 2, window: 30, duration: 10}
                """
            )
        )
    )
    nim = config.upstreams["nim"]
    assert (nim.limits.rpm, nim.limits.tpm, nim.limits.max_concurrency) == (40, 200000, 8)
    assert (nim.limits.max_queue, nim.limits.queue_timeout) == (128, 60)
    assert (nim.retries.max, nim.retries.max_wait) == (3, 60)
    assert nim.options == {"max_tokens_field": "max_completion_tokens"}
    assert config.upstreams["vllm"].limits.unlimited
    first, second, backup = config.models
    assert (first.weight, first.fallbacks, second.weight) == (3, ("backup",), 1)
    assert backup.params["chat_template_kwargs"] == {"enable_thinking": True}
    assert backup.force_params == ("temperature",) and backup.drop_params == ("reasoning_effort",)
    assert backup.options.force_background_tasks_off and backup.shapes_body
    assert not first.shapes_body
    assert config.routing.strategy == "least-busy"
    assert (config.routing.cooldown.failures, config.routing.cooldown.duration) == (2, 10)
    assert parse_config(yaml.safe_load(config_to_yaml(config))) == config


def test_the_team_keys_parse_and_print_back() -> None:
    """The operational contract: keys, state, usage, metrics as docs/config.md spells them
    ("Keys", "Shared state (Redis)", "Usage log", "Metrics and the status page")."""
    digest = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    config = parse_config(
        yaml.safe_load(
            textwrap.dedent(
                f"""
                keys:
                  - name: team-a
                    key_env: TEAM_A_KEY
                  - name: team-b
                    key_sha256: {digest.upper()}
                    models: [lb, "claude-*"]
                    limits: {{rpm: 5, tpm: 100000, max_concurrency: 4, tokens_per_day: 2000000,
                             budget_per_day: 0.10, budget_per_month: 300}}
                state: {{url: "redis://127.0.0.1:6379/0"}}
                usage: {{url: "sqlite:///var/lib/interlingua/usage.db"}}
                metrics: true
                """
            )
        )
    )
    a, b = config.keys
    assert (a.name, a.key_env, a.key_sha256, a.models) == ("team-a", "TEAM_A_KEY", None, ())
    assert (b.key_sha256, b.models) == (digest, ("lb", "claude-*"))
    assert (b.limits.rpm, b.limits.tpm, b.limits.max_concurrency) == (5, 100000, 4)
    assert b.limits.tokens_per_day == 2000000
    # (the number's text, never its binary float: ten cents exactly)
    assert (b.limits.budget_per_day, b.limits.budget_per_month) == (Decimal("0.10"), 300)
    assert config.state.url == "redis://127.0.0.1:6379/0"
    assert config.usage.url == "sqlite:///var/lib/interlingua/usage.db" and config.metrics
    assert parse_config(yaml.safe_load(config_to_yaml(config))) == config
    assert parse_config({"usage": False}).usage.enabled is False
    assert parse_config({}).usage.enabled and parse_config({}).metrics


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"keys": [{"name": "x"}]}, "exactly one of key_env and key_sha256"),
        ({"keys": [{"name": "x", "key_env": "A", "key_sha256": "0" * 64}]}, "exactly one"),
        ({"keys": [{"name": "x", "key_sha256": "abc"}]}, "64 hexadecimal"),
        ({"keys": [{"name": "x", "key_env": "A"}, {"name": "x", "key_env": "B"}]}, "used by"),
        ({"keys": [{"name": "x", "key_env": "A", "limits": {"rpn": 1}}]}, "did you mean 'rpm'"),
        ({"keys": [{"name": "x", "key_env": "A", "models": []}]}, "non-empty list"),
        (
            {"keys": [{"name": "x", "key_env": "A", "limits": {"budget_per_day": 0}}]},
            r"keys\[0\].limits.budget_per_day: expected an amount in USD above 0",
        ),
        (
            {"keys": [{"name": "x", "key_env": "A", "limits": {"budget_per_month": "lots"}}]},
            "budget_per_month: expected an amount in USD",
        ),
        ({"state": {"url": "http://x"}}, "redis://"),
        ({"usage": {"url": "mysql://x"}}, "sqlite:///"),
        ({"metrics": "yes"}, "true or false"),
    ],
)
def test_team_keys_are_checked(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(raw)


def test_continuation_keys_parse_and_print_back() -> None:
    """``models[].on_stream_break`` and ``upstreams.<n>.continue_with``, as docs/config.md
    spells them; a default is not printed, a set value is and loads back the same."""
    config = parse_yaml(
        """
        upstreams:
          vllm: {kind: openai, base_url: "http://127.0.0.1:8000/v1", continue_with: prefill}
          nim: {kind: openai, base_url: "http://h/v1", continue_with: instruct}
          claude: {kind: anthropic}
        models:
          - {name: smart, upstream: nim, on_stream_break: continue, fallbacks: [other]}
          - {name: other, upstream: vllm}
        """
    )
    assert config.upstreams["vllm"].continue_with == "prefill"
    assert config.upstreams["nim"].continue_with == "instruct"
    assert config.upstreams["claude"].continue_with == "auto"
    assert "continue_with" not in config.upstreams["vllm"].options
    assert [m.on_stream_break for m in config.models] == ["continue", "error"]
    doc = yaml.safe_load(config_to_yaml(config))
    assert doc["upstreams"]["vllm"]["continue_with"] == "prefill"
    assert "continue_with" not in doc["upstreams"]["claude"]
    assert doc["models"][0]["on_stream_break"] == "continue"
    assert "on_stream_break" not in doc["models"][1]
    assert parse_config(doc) == config


def test_the_completions_key_parses_prints_back_and_is_checked() -> None:
    """``models[].completions``: ``as_chat`` printed and loaded back, the default not
    printed, another value refused naming the choices."""
    config = parse_yaml(
        """
        upstreams: {claude: {kind: anthropic}}
        models:
          - {name: text, upstream: claude, completions: as_chat}
          - {name: chat, upstream: claude}
        """
    )
    assert [m.completions for m in config.models] == ["as_chat", "native"]
    doc = yaml.safe_load(config_to_yaml(config))
    assert doc["models"][0]["completions"] == "as_chat"
    assert "completions" not in doc["models"][1]
    assert parse_config(doc) == config
    doc["models"][1]["completions"] = "chat"
    with pytest.raises(
        ConfigError, match=r"models\[1\]\.completions: expected one of native, as_chat"
    ):
        parse_config(doc)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            """
            upstreams: {u: {kind: openai, base_url: "http://h/v1", continue_with: yes}}
            models: [{name: m, upstream: u}]
            """,
            "upstreams.u.continue_with: expected one of prefill, instruct, none, auto, "
            "got a boolean",
        ),
        (
            """
            upstreams: {u: {kind: openai, base_url: "http://h/v1", continue_with: prefil}}
            models: [{name: m, upstream: u}]
            """,
            "upstreams.u.continue_with: expected one of prefill, instruct, none, auto, "
            "got 'prefil'",
        ),
        (
            """
            upstreams: {u: {kind: openai, base_url: "http://h/v1"}}
            models: [{name: m, upstream: u, on_stream_break: retry}]
            """,
            "models[0].on_stream_break: expected one of error, continue, got 'retry'",
        ),
        (
            """
            upstreams: {u: {kind: openai, base_url: "http://h/v1"}}
            models: [{name: m, upstream: u, on_stream_brake: continue}]
            """,
            "models[0]: unknown key 'on_stream_brake' (did you mean 'on_stream_break'?)",
        ),
    ],
)
def test_continuation_keys_are_checked(text: str, expected: str) -> None:
    assert error_of(text) == expected
