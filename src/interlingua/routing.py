"""Model name -> the ordered deployments to try for one request.

Each ``models`` entry of the config is a *deployment*: a client-facing name, the upstream
that serves it, the name that upstream expects, and per-model options. Several entries
with the same name are that name's deployments. :meth:`Router.plan` gives the gateway, per
request, the candidates to try in order (server/gateway.py runs the attempts):

1. the name's deployments, ordered by ``routing.strategy``:

   * ``weighted`` -- a weighted random order (drawn without replacement, in proportion to
     ``weight``: each deployment draws ``u ** (1 / weight)`` for a uniform ``u``, largest
     first), so the first choice is deployment *i* with probability ``w_i / sum(w)``, the
     second is drawn the same way among the rest, and so on;
   * ``least-busy`` -- fewest attempts in flight first (the gateway reports starts and
     ends), ties broken by the weighted draw;
   * ``lowest-latency`` -- lowest moving average of the latency of successful attempts
     (time to the first streamed events, or to the whole answer) first; a stream that
     broke after its first byte adds a sample of :data:`BROKEN_LATENCY` instead, so a
     deployment that answers fast and then cuts does not look fast; deployments not yet
     measured come before all others so that each gets measured;

   deployments cooling down (:class:`Cooldowns`) are left out; when *every* deployment of
   the name is cooling, the one whose cooldown ends first is kept, at the end of the plan
   (after the fallbacks' healthy deployments), so a request is never refused untried;
2. then each of the name's ``fallbacks`` (the union over its entries, in config order),
   each with its own deployments, ordered the same way. A fallback's own fallbacks are
   not followed: the plan is one level deep, so fallbacks cannot loop.

A name's ``context_fallbacks`` are apart from that plan: :meth:`Router.context_plan`
gives their deployments (ordered the same way, one level deep too) for a request some
candidate refused because the prompt does not fit its context window
(server/attempts.py), which neither a retry nor an ordinary fallback would fix.

An entry named ``"*"`` (the wildcard) receives every name not listed. Its upstream model
is the name the client asked for, unless the entry sets ``model``.

Hot path: a name with one deployment and no fallbacks (of either kind) has a prebuilt
one-element plan, so
planning it is one dict lookup and allocates nothing. (Cooldown does not change such a
plan: the only deployment is tried whether cooling or not.)
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from .config import (
    WILDCARD,
    Config,
    ConfigError,
    CooldownConfig,
    ModelConfig,
    ModelOptions,
    RetriesConfig,
)
from .errors import NotFoundError
from .upstreams.base import Upstream
from .upstreams.text_options import with_options

__all__ = ["Cooldowns", "Deployment", "Route", "Router"]

#: weight of the newest sample in the latency moving average (exponential, per attempt)
LATENCY_ALPHA = 0.3
#: the latency sample, in seconds, that a stream broken after its first byte counts as:
#: its client waited and got no whole answer, which is worse than any slow answer a
#: healthy stream's time to its first events measures (one such sample lifts an average
#: of 0.5 s to about 18 s, behind every healthy sibling, until it answers well again)
BROKEN_LATENCY = 60.0
#: wildcard names remembered (their deployments and statistics); past this the memory is
#: cleared, so a client cycling through model names cannot grow it without bound
WILDCARD_CACHE = 4096


@dataclass(frozen=True, slots=True)
class Route:
    """Where one attempt goes: a deployment's upstream, model name and options."""

    #: the name the deployment serves (the client's, or a fallback's)
    model_name: str
    upstream: Upstream
    #: the name to put in the upstream request's ``model``
    upstream_model: str
    options: ModelOptions
    #: the config entry of this deployment (weight, fallbacks, params, drop_params...)
    entry: ModelConfig | None = field(default=None, compare=False)


def _nobody() -> None:
    """A deployment no router has taken in yet: nobody to tell."""


class Deployment:
    """One deployment of a model name, and what the router has learnt of it.

    ``key`` names the deployment in :class:`Cooldowns` (``upstream/upstream-model``: two
    names that reach the same upstream model share its cooldown); ``retries`` is its
    upstream's ``retries:``; ``in_flight`` and ``latency`` are kept by the router from
    what the gateway reports, for the deployments a strategy orders: an ``alone``
    deployment takes the gateway's hot path, which keeps its cooldown but not these (no
    plan ever sorts a deployment without siblings).
    """

    __slots__ = (
        "alone",
        "broke",
        "completed",
        "in_flight",
        "inverse_weight",
        "key",
        "latency",
        "retries",
        "route",
        "weight",
    )

    def __init__(self, route: Route, weight: float, retries: RetriesConfig) -> None:
        self.route = route
        self.weight = weight
        self.inverse_weight = 1.0 / weight
        self.retries = retries
        self.key = f"{route.entry.upstream if route.entry else route.upstream.name}/" + (
            route.upstream_model
        )
        #: tells the router this deployment's stream broke after its first byte (it
        #: counts toward the cooldown and as a slow sample); set by the router, built once
        self.broke: Callable[[], None] = _nobody
        #: tells the router this deployment's stream reached its end: only then is it a
        #: success for the cooldown (a first byte is not); set by the router, built once
        self.completed: Callable[[], None] = _nobody
        self.in_flight = 0
        #: its name's only deployment, no fallbacks, no retries: a plan of its own is this
        #: deployment alone, always (the gateway's hot path; set by the router)
        self.alone = False
        #: moving average of successful attempts' latency in seconds; None: not measured
        self.latency: float | None = None

    def __repr__(self) -> str:
        return f"Deployment({self.key!r}, weight={self.weight:g})"


class _Failures:
    """One key's recent failures and cooldown (see :class:`Cooldowns`)."""

    __slots__ = ("times", "until")

    def __init__(self) -> None:
        self.times: deque[float] = deque()
        self.until = 0.0


class CooldownBook(Protocol):
    """What the router asks of its cooldowns: :class:`Cooldowns` in this process, or the
    same shared by replicas (limits/shared_cooldowns.py)."""

    def record_failure(self, key: str, retry_after: float | None = None) -> float | None: ...

    def record_success(self, key: str) -> None: ...

    def cooling_until(self, key: str) -> float | None: ...


class Cooldowns:
    """Which deployments are cooling down, in this process.

    ``failures`` failures of one key within ``window`` seconds cool it for ``duration``
    seconds; a failure that names its own wait (a 429 or 503 with Retry-After) cools it
    for that long at least. A success forgets the key's failures and ends its cooldown.
    Times are on ``clock``'s scale (monotonic by default).

    When a cooldown ends the key is back in plans at once, on probation: the first
    attempts it gets are its probe. Their first success ends the probation (and forgets
    everything); a failure before any success cools it again at once, for ``duration``,
    without waiting for ``failures`` more: a deployment that is still down costs one
    failed attempt per cooldown, not ``failures`` of them.

    The interface is all the router uses, so a shared implementation (several gateway
    replicas, Redis) can replace this one: :meth:`record_failure`,
    :meth:`record_success`, :meth:`cooling_until`.

    >>> cool = Cooldowns(CooldownConfig(failures=2, window=60, duration=30), clock=lambda: 100.0)
    >>> cool.record_failure("a"), cool.record_failure("a"), cool.cooling_until("a")
    (None, 130.0, 130.0)
    >>> cool.record_success("a"); cool.cooling_until("a") is None
    True
    >>> cool.record_failure("b", retry_after=5)  # a 429 that asked for 5 s
    105.0
    >>> cool.clock = lambda: 106.0; cool.cooling_until("b") is None  # on probation
    True
    >>> cool.record_failure("b")  # the probe failed: cooling again at once
    136.0
    """

    #: keys tracked before entries with nothing recent are swept out
    SWEEP_AT = 4096

    def __init__(self, config: CooldownConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self.clock = clock
        self._keys: dict[str, _Failures] = {}

    def record_failure(self, key: str, retry_after: float | None = None) -> float | None:
        """Count a failure of ``key``; the time its cooldown ends if it is now cooling."""
        now = self.clock()
        state = self._keys.get(key)
        if state is None:
            if len(self._keys) >= self.SWEEP_AT:
                self._sweep(now)
            state = self._keys[key] = _Failures()
        times = state.times
        if state.until and state.until <= now:  # on probation: the probe failed
            times.clear()
            state.until = now + self.config.duration
        else:
            times.append(now)
            horizon = now - self.config.window
            while times and times[0] < horizon:
                times.popleft()
            if len(times) >= self.config.failures:
                times.clear()
                state.until = max(state.until, now + self.config.duration)
        if retry_after is not None and retry_after > 0:
            state.until = max(state.until, now + retry_after)
        return state.until if state.until > now else None

    def record_success(self, key: str) -> None:
        """``key`` answered: forget its failures and end its cooldown."""
        if key in self._keys:
            del self._keys[key]

    def cooling_until(self, key: str) -> float | None:
        """When ``key``'s cooldown ends, or None when it is not cooling."""
        state = self._keys.get(key)
        if state is None or not state.until:
            return None
        return state.until if state.until > self.clock() else None

    def probing(self, key: str) -> bool:
        """Whether ``key``'s cooldown has ended with no success since (on probation)."""
        state = self._keys.get(key)
        return state is not None and 0 < state.until <= self.clock()

    def _sweep(self, now: float) -> None:
        horizon = now - self.config.window
        for key in [
            k
            for k, s in self._keys.items()
            if s.until <= now and (not s.times or s.times[-1] < horizon)
        ]:
            del self._keys[key]


@dataclass(frozen=True, slots=True)
class _Group:
    """A name's deployments and fallbacks; ``fixed`` is its plan when it never varies."""

    deployments: tuple[Deployment, ...]
    fallbacks: tuple[str, ...]
    fixed: tuple[Deployment, ...] | None
    context_fallbacks: tuple[str, ...] = ()
    #: a broken stream is carried on (``on_stream_break: continue`` on one of its entries)
    continues: bool = False


def _group(
    deployments: tuple[Deployment, ...],
    fallbacks: tuple[str, ...],
    context_fallbacks: tuple[str, ...] = (),
) -> _Group:
    # (with context fallbacks a refusal has somewhere to go: the attempt loop must run)
    alone = len(deployments) == 1 and not fallbacks and not context_fallbacks
    fixed = deployments if alone else None
    if fixed is not None and not fixed[0].retries.max:
        fixed[0].alone = True
    continues = any(
        d.route.entry is not None and d.route.entry.on_stream_break == "continue"
        for d in deployments
    )
    return _Group(deployments, fallbacks, fixed, context_fallbacks, continues)


class Router:
    """Resolves client model names against the config's ``models`` list.

    ``upstreams`` maps each configured upstream name to its built :class:`Upstream`;
    a model entry naming an upstream that is not there is a ConfigError. ``rng`` and
    ``clock`` are injectable for tests (the weighted draw; cooldown times).
    """

    def __init__(
        self,
        config: Config,
        upstreams: Mapping[str, Upstream],
        *,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        cooldowns: CooldownBook | None = None,
        observe: Callable[[str, str], None] | None = None,
        continued: Callable[[str, str], None] | None = None,
    ) -> None:
        self.strategy = config.routing.strategy
        #: which deployments cool down (default: counted in this process, on ``clock``;
        #: the gateway passes ones shared through Redis when ``state.url`` is set)
        self.cooldowns: CooldownBook = cooldowns or Cooldowns(config.routing.cooldown, clock)
        #: told of every attempt's end, as (upstream name, "ok" or the error kind): the
        #: metrics' attempt counters (server/views/metrics.py); None: nobody listens
        self.observe = observe
        #: told of every stream that broke after its first byte and that another attempt
        #: continues, as (model asked for, error kind of the break): the metrics'
        #: continuation counter; None: nobody listens
        self.continued = continued
        self._rng = rng or random.Random()
        self._retries = {name: cfg.retries for name, cfg in config.upstreams.items()}
        # Each wildcard entry with its upstream already wrapped for its options: built
        # once here, not on every request that falls through to the wildcard.
        wildcard: list[tuple[ModelConfig, Upstream]] = []
        exact: dict[str, list[Deployment]] = {}
        fallbacks: dict[str, list[str]] = {}
        context: dict[str, list[str]] = {}
        for i, model in enumerate(config.models):
            upstream = upstreams.get(model.upstream)
            if upstream is None:
                raise ConfigError(
                    f"models[{i}].upstream: upstream {model.upstream!r} was not built "
                    f"(built: {', '.join(upstreams) or 'none'})"
                )
            names = fallbacks.setdefault(model.name, [])
            names.extend(n for n in model.fallbacks if n not in names)
            names = context.setdefault(model.name, [])
            names.extend(n for n in model.context_fallbacks if n not in names)
            if model.name == WILDCARD:
                wildcard.append((model, with_options(upstream, model.options)))
            else:
                route = Route(
                    model.name,
                    with_options(upstream, model.options),
                    model.model,
                    model.options,
                    model,
                )
                exact.setdefault(model.name, []).append(self._deployment(route))
        self._groups = {
            name: _group(tuple(deps), tuple(fallbacks[name]), tuple(context[name]))
            for name, deps in exact.items()
        }
        self._wildcard = tuple(wildcard)
        self._wildcard_fallbacks = tuple(fallbacks.get(WILDCARD, ()))
        self._wildcard_context = tuple(context.get(WILDCARD, ()))
        self._wildcard_groups: dict[str, _Group] = {}

    def _deployment(self, route: Route) -> Deployment:
        entry = route.entry
        retries = self._retries.get(entry.upstream) if entry is not None else None
        deployment = Deployment(route, entry.weight if entry else 1.0, retries or RetriesConfig())
        deployment.broke = partial(self.stream_broke, deployment)
        deployment.completed = partial(self.stream_completed, deployment)
        return deployment

    # -- lookups ------------------------------------------------------------------------

    def plan(self, name: str) -> Sequence[Deployment]:
        """The deployments to try for a request for ``name``, in order (module docstring).

        Raises NotFoundError (404, ``param="model"``, ``code="model_not_found"``) when
        neither the name nor a wildcard exists. Never empty.
        """
        group = self._groups.get(name)
        if group is None:
            group = self._group_of(name)
        if group.fixed is not None:
            return group.fixed
        last_resort: list[Deployment] = []
        plan = self._healthy(group, self.cooldowns.cooling_until, last_resort)
        return self._then(plan, group.fallbacks, last_resort)

    def context_plan(self, name: str) -> list[Deployment]:
        """The deployments of ``name``'s ``context_fallbacks``, in order (each name's
        ordered as :meth:`plan` orders them, cooling ones last); empty when it has none.

        For a request a candidate refused as too long for its context window: neither
        the name's other deployments nor its ``fallbacks`` are in it.
        """
        group = self._groups.get(name) or self._wildcard_group(name)
        if group is None or not group.context_fallbacks:
            return []
        return self._then([], group.context_fallbacks, [])

    def _then(
        self, plan: list[Deployment], names: tuple[str, ...], last_resort: list[Deployment]
    ) -> list[Deployment]:
        """``plan`` followed by the healthy deployments of each of ``names``, then by
        ``last_resort`` (where the all-cooling groups left their soonest one)."""
        until = self.cooldowns.cooling_until
        for fallback in names:
            fallback_group = self._groups.get(fallback) or self._wildcard_group(fallback)
            if fallback_group is not None:
                plan += self._healthy(fallback_group, until, last_resort)
        if last_resort:
            plan += last_resort
        return plan

    def only(
        self, name: str, plan: Sequence[Deployment], serves: Callable[[Route], bool]
    ) -> list[Deployment]:
        """The deployments of ``plan`` (``name``'s) whose route ``serves`` the request,
        for a request only some can serve; when the plan has none because all of those
        are cooling down, the one whose cooldown ends first, rather than refusing the
        request untried (as for a name whose deployments all cool). Empty: none serves.
        """
        kept = [d for d in plan if serves(d.route)]
        if kept:
            return kept
        group = self._groups.get(name) or self._group_of(name)
        groups = [group, *(self._groups.get(f) or self._wildcard_group(f) for f in group.fallbacks)]
        until = self.cooldowns.cooling_until
        cooling = [
            (ends, d)
            for each in groups
            if each is not None
            for d in each.deployments
            if serves(d.route) and (ends := until(d.key)) is not None
        ]
        return [min(cooling, key=lambda pair: pair[0])[1]] if cooling else []

    def resolve(self, name: str) -> Route:
        """The route of ``name``'s first deployment in config order (else the wildcard's).

        For what does not need a plan: token counting, and checks that a name exists.
        Raises NotFoundError as :meth:`plan` does.
        """
        group = self._groups.get(name)
        if group is None:
            group = self._group_of(name)
        return group.deployments[0].route

    def deployments(self, name: str) -> tuple[Route, ...]:
        """All deployments for ``name`` in config order (empty if none, wildcard included)."""
        group = self._groups.get(name) or self._wildcard_group(name)
        return tuple(d.route for d in group.deployments) if group is not None else ()

    def fallbacks(self, name: str) -> tuple[str, ...]:
        """The fallback names of ``name`` (the union over its entries, config order)."""
        group = self._groups.get(name) or self._wildcard_group(name)
        return group.fallbacks if group is not None else ()

    def context_fallbacks(self, name: str) -> tuple[str, ...]:
        """The context fallback names of ``name`` (tried for a prompt too long for it)."""
        group = self._groups.get(name) or self._wildcard_group(name)
        return group.context_fallbacks if group is not None else ()

    def continues(self, name: str) -> bool:
        """Whether a broken stream of ``name`` is carried on (``on_stream_break:
        continue`` on one of its entries)."""
        group = self._groups.get(name) or self._wildcard_group(name)
        return group is not None and group.continues

    def model_names(self) -> list[str]:
        """The configured model names, in config order, without duplicates or ``"*"``."""
        return list(self._groups)

    def configured(self) -> dict[str, tuple[Deployment, ...]]:
        """Each configured name's deployments in config order, with what the router has
        learnt of them (the status page shows them); ``"*"`` is not listed."""
        return {name: group.deployments for name, group in self._groups.items()}

    def _group_of(self, name: str) -> _Group:
        group = self._wildcard_group(name)
        if group is None:
            raise NotFoundError(f"model '{name}' not found", param="model", code="model_not_found")
        return group

    def _wildcard_group(self, name: str) -> _Group | None:
        if not self._wildcard:
            return None
        group = self._wildcard_groups.get(name)
        if group is None:
            if len(self._wildcard_groups) >= WILDCARD_CACHE:
                self._wildcard_groups.clear()
            deployments = tuple(
                self._deployment(self._wildcard_route(entry, name)) for entry in self._wildcard
            )
            group = self._wildcard_groups[name] = _group(
                deployments, self._wildcard_fallbacks, self._wildcard_context
            )
        return group

    def _wildcard_route(self, entry: tuple[ModelConfig, Upstream], name: str) -> Route:
        model, upstream = entry
        upstream_model = name if model.model == WILDCARD else model.model
        return Route(name, upstream, upstream_model, model.options, model)

    # -- planning -----------------------------------------------------------------------

    def _healthy(
        self,
        group: _Group,
        until: Callable[[str], float | None],
        last_resort: list[Deployment],
    ) -> list[Deployment]:
        """``group``'s deployments not cooling, in strategy order (a new list); when all
        are cooling, the one whose cooldown ends first goes onto ``last_resort``."""
        healthy = [d for d in group.deployments if until(d.key) is None]
        if len(healthy) > 1:
            return self._ordered(healthy)
        if not healthy:
            last_resort.append(min(group.deployments, key=lambda d: until(d.key) or 0.0))
        return healthy

    def _ordered(self, deployments: list[Deployment]) -> list[Deployment]:
        """``deployments`` (two or more) in the strategy's order for one request."""
        rand = self._rng.random
        if self.strategy == "weighted":
            if len(deployments) == 2:  # the common case, in one draw
                a, b = deployments
                return deployments if rand() * (a.weight + b.weight) < a.weight else [b, a]
            # Weighted order without replacement (Efraimidis-Spirakis): each draws
            # u ** (1 / weight), largest first.
            return sorted(deployments, key=lambda d: rand() ** d.inverse_weight, reverse=True)
        if self.strategy == "least-busy":
            return sorted(deployments, key=lambda d: (d.in_flight, -(rand() ** d.inverse_weight)))
        return sorted(  # lowest-latency
            deployments,
            key=lambda d: (_unmeasured_first(d.latency), -(rand() ** d.inverse_weight)),
        )

    # -- what the gateway reports -------------------------------------------------------

    @staticmethod
    def attempt_started(deployment: Deployment) -> None:
        """An attempt on ``deployment`` began (it counts as in flight until it ends)."""
        deployment.in_flight += 1

    @staticmethod
    def attempt_ended(deployment: Deployment) -> None:
        """An attempt on ``deployment`` ended (a stream: when its last byte went out)."""
        deployment.in_flight -= 1

    def attempt_succeeded(self, deployment: Deployment, latency: float, whole: bool = True) -> None:
        """``deployment`` answered after ``latency`` seconds (to its first events, for a
        stream): the sample joins its moving average. A ``whole`` answer is a success for
        its cooldown (its failures are forgotten); a stream is not yet (``whole=False``):
        it is one when it completes (:meth:`stream_completed`), a failure if it breaks."""
        if whole:
            self.cooldowns.record_success(deployment.key)
        self._sample(deployment, latency)

    def attempt_failed(self, deployment: Deployment, retry_after: float | None = None) -> None:
        """``deployment`` failed in a way worth retrying elsewhere; it counts toward its
        cooldown (and ``retry_after``, the wait the upstream asked for, cools it that long)."""
        self.cooldowns.record_failure(deployment.key, retry_after)

    def stream_completed(self, deployment: Deployment) -> None:
        """A stream of ``deployment`` reached its end: a success for its cooldown."""
        self.cooldowns.record_success(deployment.key)

    def stream_broke(self, deployment: Deployment) -> None:
        """A stream of ``deployment`` broke after its first byte: a failure toward its
        cooldown, and a :data:`BROKEN_LATENCY` sample (once measured: a deployment no
        strategy orders keeps no latency)."""
        self.cooldowns.record_failure(deployment.key)
        if deployment.latency is not None:
            self._sample(deployment, BROKEN_LATENCY)

    @staticmethod
    def _sample(deployment: Deployment, latency: float) -> None:
        average = deployment.latency
        deployment.latency = (
            latency if average is None else average + LATENCY_ALPHA * (latency - average)
        )


def _unmeasured_first(latency: float | None) -> float:
    return -1.0 if latency is None else latency
