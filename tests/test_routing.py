"""Router: exact names, ordered deployments, the wildcard, and 404s."""

from __future__ import annotations

import pytest
import yaml

from interlingua.config import ConfigError, ModelOptions, fake_config, parse_config
from interlingua.errors import NotFoundError
from interlingua.routing import Route, Router
from interlingua.upstreams import Upstream
from interlingua.upstreams.text_options import TextOptionsUpstream

CONFIG = parse_config(
    yaml.safe_load(
        """
        upstreams:
          vllm: {kind: openai, base_url: "http://127.0.0.1:8000/v1"}
          claude: {kind: anthropic}
        models:
          - {name: sonnet, upstream: claude, model: claude-sonnet-4-5}
          - {name: qwen, upstream: vllm, model: Qwen/Qwen3-8B, options: {think_tags: true}}
          - {name: sonnet, upstream: vllm, model: Qwen/Qwen3-8B}
          - {name: "*", upstream: vllm}
        """
    )
)


@pytest.fixture
def upstreams() -> dict[str, Upstream]:
    return {"vllm": Upstream("vllm"), "claude": Upstream("claude")}


def test_exact_name_resolves_to_its_first_deployment(upstreams: dict[str, Upstream]) -> None:
    router = Router(CONFIG, upstreams)
    route = router.resolve("sonnet")
    assert route == Route("sonnet", upstreams["claude"], "claude-sonnet-4-5", ModelOptions())
    assert router.resolve("qwen").options == ModelOptions(think_tags=True)
    assert router.resolve("qwen").upstream_model == "Qwen/Qwen3-8B"


def test_deployments_are_in_config_order(upstreams: dict[str, Upstream]) -> None:
    router = Router(CONFIG, upstreams)
    assert [(r.upstream.name, r.upstream_model) for r in router.deployments("sonnet")] == [
        ("claude", "claude-sonnet-4-5"),
        ("vllm", "Qwen/Qwen3-8B"),
    ]


def test_wildcard_passes_the_requested_name(upstreams: dict[str, Upstream]) -> None:
    router = Router(CONFIG, upstreams)
    route = router.resolve("meta-llama/Llama-3.1-8B")
    assert route.model_name == "meta-llama/Llama-3.1-8B"
    assert route.upstream is upstreams["vllm"]
    assert route.upstream_model == "meta-llama/Llama-3.1-8B"
    assert len(router.deployments("anything")) == 1


def test_wildcard_with_model_set_rewrites_every_name() -> None:
    config = parse_config(
        {
            "upstreams": {"f": {"kind": "fake"}},
            "models": [{"name": "*", "upstream": "f", "model": "m"}],
        }
    )
    route = Router(config, {"f": Upstream("f")}).resolve("gpt-4o")
    assert (route.model_name, route.upstream_model) == ("gpt-4o", "m")


def test_wildcard_with_options_wraps_its_upstream_once() -> None:
    config = parse_config(
        {
            "upstreams": {"f": {"kind": "fake"}},
            "models": [{"name": "*", "upstream": "f", "options": {"think_tags": True}}],
        }
    )
    inner = Upstream("f")
    router = Router(config, {"f": inner})
    first, second = router.resolve("a"), router.resolve("b")
    assert isinstance(first.upstream, TextOptionsUpstream) and first.upstream.inner is inner
    assert second.upstream is first.upstream  # not a new wrapper per request
    assert router.deployments("c")[0].upstream is first.upstream
    assert (second.model_name, second.upstream_model) == ("b", "b")


def test_unknown_name_without_wildcard_is_a_404(upstreams: dict[str, Upstream]) -> None:
    config = parse_config(
        {"upstreams": {"vllm": {"kind": "fake"}}, "models": [{"name": "a", "upstream": "vllm"}]}
    )
    router = Router(config, upstreams)
    with pytest.raises(NotFoundError) as info:
        router.resolve("gpt-5")
    err = info.value
    assert (err.message, err.status, err.param, err.code) == (
        "model 'gpt-5' not found",
        404,
        "model",
        "model_not_found",
    )
    assert router.deployments("gpt-5") == ()


def test_model_names_are_unique_in_order_without_the_wildcard(
    upstreams: dict[str, Upstream],
) -> None:
    assert Router(CONFIG, upstreams).model_names() == ["sonnet", "qwen"]


def test_fake_config_answers_any_name() -> None:
    fake = Upstream("fake")
    router = Router(fake_config(), {"fake": fake})
    assert router.model_names() == ["fake", "default"]
    assert router.resolve("claude-opus-4").upstream_model == "claude-opus-4"
    assert router.resolve("default").upstream is fake


def test_missing_built_upstream_is_a_config_error() -> None:
    with pytest.raises(
        ConfigError, match=r"models\[0\]\.upstream: upstream 'claude' was not built"
    ):
        Router(CONFIG, {"vllm": Upstream("vllm")})
