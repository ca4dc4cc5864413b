"""Router: exact names, deployments and their order by strategy, cooldowns, fallbacks,
the wildcard, and 404s."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import yaml

from interlingua import routing
from interlingua.config import (
    ConfigError,
    CooldownConfig,
    ModelOptions,
    fake_config,
    parse_config,
)
from interlingua.errors import NotFoundError
from interlingua.routing import Cooldowns, Route, Router
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


# -- deployments, strategies, cooldowns, fallbacks --------------------------------------


def _router(models: list[dict], routing: dict | None = None, **kw: object) -> Router:
    names = {m["upstream"] for m in models}
    upstreams_cfg = {n: {"kind": "fake", "retries": {"max": 2, "max_wait": 9}} for n in names}
    raw = {"upstreams": upstreams_cfg, "models": models}
    if routing is not None:
        raw["routing"] = routing
    return Router(parse_config(raw), {n: Upstream(n) for n in names}, **kw)  # type: ignore[arg-type]


class Clock:
    """A hand-moved clock for cooldowns."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _keys(plan: object) -> list[str]:
    return [d.key for d in plan]  # type: ignore[attr-defined]


def test_a_lone_deployment_has_a_prebuilt_plan() -> None:
    router = _router([{"name": "m", "upstream": "a", "model": "am"}])
    plan = router.plan("m")
    assert router.plan("m") is plan  # nothing built per request
    (only,) = plan
    assert (only.key, only.route.upstream_model, only.weight) == ("a/am", "am", 1.0)
    assert (only.retries.max, only.retries.max_wait) == (2, 9.0)  # its upstream's retries:
    assert router.resolve("m") is only.route


def test_weighted_first_choice_follows_the_weights() -> None:
    router = _router(
        [
            {"name": "m", "upstream": "a", "weight": 3},
            {"name": "m", "upstream": "b", "weight": 1},
        ],
        rng=random.Random(11),
    )
    n = 4000
    firsts = Counter(router.plan("m")[0].key for _ in range(n))
    # Binomial(4000, 0.75): mean 3000, sigma 27.4; seeded, so this cannot flake, and a
    # uniform or config-order choice (2000 or 4000) is far outside.
    assert abs(firsts["a/m"] - 3000) < 4 * 27.4
    # Without replacement: every plan holds each deployment exactly once.
    assert sorted(_keys(router.plan("m"))) == ["a/m", "b/m"]


def test_weighted_order_draws_the_rest_without_replacement() -> None:
    router = _router(
        [
            {"name": "m", "upstream": "a", "weight": 6},
            {"name": "m", "upstream": "b", "weight": 3},
            {"name": "m", "upstream": "c", "weight": 1},
        ],
        rng=random.Random(5),
    )
    seconds = Counter()
    for _ in range(3000):
        plan = _keys(router.plan("m"))
        if plan[0] == "a/m":
            seconds[plan[1]] += 1
    # Given a first, b comes second with probability 3/4.
    share = seconds["b/m"] / (seconds["b/m"] + seconds["c/m"])
    assert 0.70 < share < 0.80


def test_least_busy_puts_the_fewest_in_flight_first() -> None:
    router = _router(
        [{"name": "m", "upstream": u} for u in ("a", "b", "c")], {"strategy": "least-busy"}
    )
    a, b, _c = router._groups["m"].deployments
    for _ in range(3):
        router.attempt_started(a)
    router.attempt_started(b)
    assert _keys(router.plan("m")) == ["c/m", "b/m", "a/m"]
    router.attempt_ended(a)
    router.attempt_ended(a)
    router.attempt_ended(a)
    assert _keys(router.plan("m"))[-1] == "b/m"


def test_lowest_latency_measures_the_unmeasured_first() -> None:
    router = _router(
        [{"name": "m", "upstream": u} for u in ("a", "b", "c")], {"strategy": "lowest-latency"}
    )
    a, b, c = router._groups["m"].deployments
    router.attempt_succeeded(a, 0.5)
    router.attempt_succeeded(b, 0.2)
    assert _keys(router.plan("m")) == ["c/m", "b/m", "a/m"]
    router.attempt_succeeded(c, 0.3)
    assert _keys(router.plan("m")) == ["b/m", "c/m", "a/m"]
    # A moving average: one slow answer moves b, but does not replace its history.
    router.attempt_succeeded(b, 1.5)
    assert b.latency == pytest.approx(0.2 + 0.3 * (1.5 - 0.2))
    assert _keys(router.plan("m")) == ["c/m", "a/m", "b/m"]


def test_a_broken_stream_does_not_look_fast() -> None:
    router = _router(
        [{"name": "m", "upstream": u} for u in ("a", "b")], {"strategy": "lowest-latency"}
    )
    a, b = router._groups["m"].deployments
    router.attempt_succeeded(a, 0.1, whole=False)  # a stream's first events, fast
    router.attempt_succeeded(b, 0.5)
    assert _keys(router.plan("m")) == ["a/m", "b/m"]
    a.broke()  # ... and then it broke: a failure, and a slow sample
    assert a.latency == pytest.approx(0.1 + 0.3 * (routing.BROKEN_LATENCY - 0.1))
    assert _keys(router.plan("m")) == ["b/m", "a/m"]
    # Its first events were no success for the cooldown: the break is its first failure.
    assert router.cooldowns.record_failure(a.key) is None
    assert router.cooldowns.record_failure(a.key) is not None  # the third (default 3)


def test_only_a_completed_stream_clears_the_failures() -> None:
    router = _router([{"name": "m", "upstream": u} for u in ("a", "b")], {})
    a, _b = router._groups["m"].deployments
    for _ in range(2):
        router.attempt_failed(a)
        router.attempt_succeeded(a, 0.1, whole=False)  # the first byte does not clear
    a.broke()
    assert router.cooldowns.cooling_until(a.key) is not None
    router.cooldowns = Cooldowns(CooldownConfig(failures=3, window=60, duration=30))
    router.attempt_failed(a)
    router.attempt_failed(a)
    a.completed()  # the stream's end does
    router.attempt_failed(a)
    assert router.cooldowns.cooling_until(a.key) is None


def test_cooldown_counts_failures_within_the_window() -> None:
    clock = Clock()
    cool = Cooldowns(CooldownConfig(failures=3, window=60, duration=30), clock)
    assert cool.record_failure("k") is None
    clock.now += 61  # the first failure leaves the window
    assert cool.record_failure("k") is None
    assert cool.record_failure("k") is None
    assert cool.cooling_until("k") is None
    assert cool.record_failure("k") == clock.now + 30
    clock.now += 29.9
    assert cool.cooling_until("k") == pytest.approx(clock.now + 0.1)
    clock.now += 0.2
    assert cool.cooling_until("k") is None


def test_after_a_cooldown_one_probe_decides() -> None:
    clock = Clock()
    cool = Cooldowns(CooldownConfig(failures=3, window=60, duration=30), clock)
    for _ in range(3):
        cool.record_failure("k")
    clock.now += 30.1  # the cooldown is over: back in plans, on probation
    assert cool.cooling_until("k") is None
    # The probe failed: cooling again at once, not after three more failures.
    assert cool.record_failure("k") == clock.now + 30
    clock.now += 30.1
    cool.record_success("k")  # the next probe answered: all forgotten
    assert [cool.record_failure("k") for _ in range(3)] == [None, None, clock.now + 30]


def test_cooldown_honours_retry_after_and_ends_on_success() -> None:
    clock = Clock()
    cool = Cooldowns(CooldownConfig(failures=3, window=60, duration=30), clock)
    assert cool.record_failure("k", retry_after=90) == clock.now + 90  # one 429 is enough
    assert cool.cooling_until("other") is None
    cool.record_success("k")
    assert cool.cooling_until("k") is None
    cool.record_failure("k")
    cool.record_failure("k")
    cool.record_success("k")  # a success forgets the failures before it
    assert cool.record_failure("k") is None


def test_cooldown_forgets_stale_keys_when_many() -> None:
    clock = Clock()
    cool = Cooldowns(CooldownConfig(failures=3, window=60, duration=30), clock)
    cool.SWEEP_AT = 10
    for i in range(10):
        cool.record_failure(f"k{i}")
    clock.now += 61
    cool.record_failure("new")
    assert list(cool._keys) == ["new"]


def test_plan_skips_cooling_deployments() -> None:
    clock = Clock()
    router = _router(
        [{"name": "m", "upstream": u} for u in ("a", "b", "c")],
        {"cooldown": {"failures": 1, "window": 60, "duration": 30}},
        clock=clock,
    )
    _a, b, _c = router._groups["m"].deployments
    router.attempt_failed(b)
    for _ in range(20):
        assert sorted(_keys(router.plan("m"))) == ["a/m", "c/m"]
    clock.now += 31
    assert sorted(_keys(router.plan("m"))) == ["a/m", "b/m", "c/m"]


def test_all_cooling_tries_the_one_that_ends_first() -> None:
    clock = Clock()
    router = _router(
        [{"name": "m", "upstream": u} for u in ("a", "b", "c")],
        {"cooldown": {"failures": 1, "window": 60, "duration": 5}},
        clock=clock,
    )
    a, b, c = router._groups["m"].deployments
    router.attempt_failed(a, retry_after=40)
    router.attempt_failed(b, retry_after=20)
    router.attempt_failed(c, retry_after=30)
    assert _keys(router.plan("m")) == ["b/m"]


def test_fallbacks_follow_in_config_order_one_level_deep() -> None:
    clock = Clock()
    router = _router(
        [
            {"name": "m", "upstream": "a", "fallbacks": ["f1"]},
            {"name": "m", "upstream": "b", "fallbacks": ["f2", "f1"]},
            {"name": "f1", "upstream": "c", "fallbacks": ["f3"]},
            {"name": "f2", "upstream": "d"},
            {"name": "f2", "upstream": "e"},
            {"name": "f3", "upstream": "g"},
        ],
        {"cooldown": {"failures": 1, "window": 60, "duration": 30}},
        clock=clock,
    )
    assert router.fallbacks("m") == ("f1", "f2")  # the union over m's entries
    plan = _keys(router.plan("m"))
    assert sorted(plan[:2]) == ["a/m", "b/m"]
    assert plan[2] == "c/f1"
    assert sorted(plan[3:]) == ["d/f2", "e/f2"]  # and not f1's own fallback f3
    assert _keys(router.plan("f1")) == ["c/f1", "g/f3"]
    # A name all cooling goes last (tried, but after every healthy candidate).
    for d in router._groups["m"].deployments:
        router.attempt_failed(d, retry_after=10)
    cooled = _keys(router.plan("m"))
    assert cooled[0] == "c/f1" and sorted(cooled[1:3]) == ["d/f2", "e/f2"]
    assert len(cooled) == 4 and cooled[3] in {"a/m", "b/m"}


def test_context_fallbacks_are_a_plan_of_their_own() -> None:
    router = _router(
        [
            {"name": "m", "upstream": "a", "fallbacks": ["f"], "context_fallbacks": ["long"]},
            {"name": "m", "upstream": "b", "context_fallbacks": ["longer", "long"]},
            {"name": "f", "upstream": "c"},
            {"name": "long", "upstream": "d", "fallbacks": ["f"], "context_fallbacks": ["m"]},
            {"name": "longer", "upstream": "e"},
            {"name": "lone", "upstream": "g"},
        ]
    )
    # Not in the ordinary plan; the union over m's entries, one level deep (not long's
    # own fallbacks or context fallbacks).
    assert sorted(_keys(router.plan("m"))) == ["a/m", "b/m", "c/f"]
    assert _keys(router.context_plan("m")) == ["d/long", "e/longer"]
    assert router.context_plan("lone") == [] and router.context_plan("f") == []
    # a name with context fallbacks leaves the hot path: a refusal has somewhere to go
    assert not router._groups["long"].deployments[0].alone


def test_a_fallback_may_be_served_by_the_wildcard() -> None:
    router = _router(
        [
            {"name": "m", "upstream": "a", "fallbacks": ["gpt-4o"]},
            {"name": "*", "upstream": "w"},
        ]
    )
    plan = router.plan("m")
    assert _keys(plan) == ["a/m", "w/gpt-4o"]
    assert plan[1].route.model_name == "gpt-4o"
    # The wildcard's deployments are remembered per name: their cooldowns hold.
    assert router.plan("gpt-4o")[0] is plan[1]


def test_wildcard_memory_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(routing, "WILDCARD_CACHE", 3)
    router = _router([{"name": "*", "upstream": "w"}])
    for i in range(10):
        router.plan(f"name-{i}")
        assert len(router._wildcard_groups) <= 3


def test_in_flight_is_counted_per_deployment() -> None:
    router = _router([{"name": "m", "upstream": "a"}, {"name": "m", "upstream": "b"}])
    a, _ = router._groups["m"].deployments
    router.attempt_started(a)
    router.attempt_started(a)
    router.attempt_ended(a)
    assert a.in_flight == 1


def test_alone_marks_the_gateways_hot_path() -> None:
    config = parse_config(
        {
            "upstreams": {"a": {"kind": "fake"}, "r": {"kind": "fake", "retries": {"max": 1}}},
            "models": [
                {"name": "lone", "upstream": "a"},
                {"name": "retried", "upstream": "r"},
                {"name": "with-fallback", "upstream": "a", "fallbacks": ["lone"]},
                {"name": "pair", "upstream": "a"},
                {"name": "pair", "upstream": "r"},
            ],
        }
    )
    router = Router(config, {"a": Upstream("a"), "r": Upstream("r")})
    alone = {name: [d.alone for d in router._groups[name].deployments] for name in router._groups}
    assert alone == {
        "lone": [True],
        "retried": [False],
        "with-fallback": [False],
        "pair": [False, False],
    }


def test_only_keeps_the_deployments_that_serve_else_the_coolest_of_them() -> None:
    router = _router(
        [
            {"name": "m", "upstream": "a", "fallbacks": ["n"]},
            {"name": "m", "upstream": "b"},
            {"name": "n", "upstream": "c"},
        ],
        {"cooldown": {"failures": 1, "window": 60, "duration": 30}},
    )
    a, _b = router._groups["m"].deployments
    (c,) = router._groups["n"].deployments
    not_b = lambda route: route.upstream.name != "b"  # noqa: E731
    assert _keys(router.only("m", router.plan("m"), not_b)) in (["a/m", "c/n"], ["c/n", "a/m"])
    router.attempt_failed(a, retry_after=50)
    router.attempt_failed(c, retry_after=40)
    assert _keys(router.plan("m")) == ["b/m", "c/n"]  # (c: its name's last resort)
    assert _keys(router.only("m", router.plan("m"), not_b)) == ["c/n"]
    only_a = lambda route: route.upstream.name == "a"  # noqa: E731
    assert router.only("m", router.plan("m"), only_a) == [a]  # cooling, but the only one
    assert router.only("m", router.plan("m"), lambda route: False) == []
