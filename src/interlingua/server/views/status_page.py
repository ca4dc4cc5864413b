"""The status page for a person: ``GET /ui`` (one HTML file) and ``GET /ui/data`` (its JSON).

The page (``static/ui.html``) has no build step and loads nothing from elsewhere: its
CSS and script are inline and it draws its charts as SVG itself, so it works offline and
its Content-Security-Policy allows nothing but this server. Every few seconds it asks
``/ui/data`` for:

* the configured models and their deployments: upstream, upstream model, weight, requests
  in flight (kept by the router for names with several deployments), the cooldown's
  seconds left, the router's latency average, the last five minutes of requests and
  failures, and a health word: ``cooling``, ``failing`` (half or more of its recent
  requests failed at the upstream), ``degraded`` (some did), ``ok`` or ``idle``;
* requests and tokens per minute over the last hour, per model and per key, and in all
  (server/views/traffic.py keeps them);
* the last failed requests: time, request id, key name, model, status, error kind;
* dollars spent per key and per model over the last hour and today, and each key's
  budgets with what is left (server/views/spend.py; with the usage log).

**Access**: ``/ui`` itself holds no data. ``/ui/data`` calls ``authorize(headers)``
first (the gateway's own key check: raises an InterlinguaError to refuse); when it
refuses, the page asks for a key, keeps it in the tab's ``sessionStorage`` and sends it
as ``Authorization: Bearer``. What a key sees: a key without a name (``server.api_keys``,
the gateway's shared keys) sees everything; a *named* key (``keys:``, one team's) sees
the models it may use with their deployments' health and all traffic on them (the state
of the service it uses), but of the per-key charts and the recent failures only its own:
one team does not learn another's name, traffic, request ids or errors.

**Several workers** (``serve --workers N``): each keeps its own counts, and a request for
the page reaches one of them. So each worker also writes its state, at most every
:data:`SHARE_SECONDS` while traffic comes, into a file of the multiprocess directory
(server/views/multiproc.py), and the worker that answers
``/ui/data`` adds the others' files to its own counts: the charts show every worker's
traffic, in-flight counts add up, and a deployment cooling in any worker shows cooling.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import Any, Protocol, runtime_checkable

import orjson
from starlette.requests import Request as HTTPRequest
from starlette.responses import Response
from starlette.routing import Route

from ...errors import InterlinguaError
from ...routing import Deployment, Router
from ...usage.record import Record, nothing_to_catch_up
from .multiproc import process_alive
from .spend import SpendView, seen_by
from .traffic import FIELDS, MINUTES, Traffic, merge

__all__ = ["HEALTH_MINUTES", "SHARE_SECONDS", "StatusPage"]

log = logging.getLogger("interlingua.server")

#: minutes of a deployment's traffic its health is judged on
HEALTH_MINUTES = 5
#: seconds between two writes of a worker's state for the others (several workers)
SHARE_SECONDS = 2.0
#: the page allows only itself: inline style and script, requests to this server
_CSP = (
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)
_PAGE_HEADERS = {
    "cache-control": "no-store",
    "content-security-policy": _CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}

#: raises to refuse; else returns who asks: an object with ``name`` (None: sees all) and
#: ``allows(model)`` (server/keys.py ClientKey), or None (no keys: sees all)
Authorize = Callable[[Mapping[str, str]], object]


@runtime_checkable
class Viewer(Protocol):
    """Who asks for ``/ui/data`` (a ClientKey)."""

    @property
    def name(self) -> str | None: ...

    def allows(self, model: str) -> bool: ...


def _page() -> bytes:
    return resources.files(__package__).joinpath("static/ui.html").read_bytes()


class StatusPage:
    """The status page's state and endpoints (see the module docstring); a ``RecordSink``.

    ``router`` is the gateway's (models, deployments, cooldowns); ``authorize(headers)``
    raises to refuse ``/ui/data``. ``share_dir`` is the multiprocess directory when
    several workers serve (None: this process alone). ``clock`` gives wall-clock
    seconds (tests).
    """

    def __init__(
        self,
        router: Router,
        authorize: Authorize | None = None,
        *,
        share_dir: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.router = router
        self.authorize = authorize
        self.traffic = Traffic()
        self.clock = clock
        self.share_dir = os.path.join(share_dir, "status") if share_dir else None
        if self.share_dir is not None:
            os.makedirs(self.share_dir, exist_ok=True)
        self._share_due = False
        self._failed_once = False
        #: hands over the records that wait to be counted (the accounting sets it)
        self.catch_up: Callable[[], None] = nothing_to_catch_up
        #: the spend and budgets part (None: not shown)
        self.spend: SpendView | None = None
        self._page = _page()
        if self.share_dir is not None:
            self.share()  # (the others count this worker from its start, traffic or not)

    # -- RecordSink ---------------------------------------------------------------------

    def record(self, row: Record) -> None:
        """Count one finished request (:meth:`records` of one)."""
        self.records((row,))

    def records(self, rows: Sequence[Record]) -> None:
        """Count finished requests (never blocks, never raises)."""
        try:
            if self.traffic.records(rows) and not self._failed_once:
                self._failed_once = True
                log.error("status page: a request could not be counted (a broken record)")
            if rows and self.share_dir is not None and not self._share_due:
                self._schedule_share()
        except Exception:
            if not self._failed_once:
                self._failed_once = True
                log.exception("status page: a request could not be counted")

    # -- the data -----------------------------------------------------------------------

    def data(
        self, viewer: Viewer | None = None, spend: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """What ``/ui/data`` answers (all workers' when several serve), with ``spend``
        (a :class:`SpendView` snapshot); for a named ``viewer`` only what it may see
        (module docstring)."""
        self.catch_up()
        now = self.clock()
        own = self._state(now)
        states = [own, *self._others(now)] if self.share_dir is not None else [own]
        traffic = merge(state["traffic"] for state in states)
        if viewer is not None and viewer.name is not None:
            traffic = _seen_by(traffic, viewer.name, viewer.allows)
        live = [state for state in states if state.get("live", True)]
        first = int(now // 60) - MINUTES + 1
        models = self._models(traffic, live, first + MINUTES - HEALTH_MINUTES, now)
        if viewer is not None and viewer.name is not None:
            models = [model for model in models if viewer.allows(model["name"])]
            if spend is not None:
                spend = seen_by(spend, viewer.name, viewer.allows)
        return {
            "now": now,
            "first_minute": first,
            "minutes": MINUTES,
            "workers": len(live),
            "models": models,
            "totals": _dense_total(traffic["series"]["model"], first),
            "traffic": {
                kind: {
                    name: _dense(minutes, first)
                    for name, minutes in traffic["series"][kind].items()
                }
                for kind in ("model", "key")
            },
            "errors": traffic["errors"][::-1],
            "spend": spend,
        }

    def _state(self, now: float) -> dict[str, Any]:
        """This process's state, as it is shared with the other workers."""
        cooldowns = self.router.cooldowns
        monotonic = getattr(cooldowns, "clock", time.monotonic)()
        deployments: dict[str, dict[str, Any]] = {}
        for group in self.router.configured().values():
            for deployment in group:
                until = cooldowns.cooling_until(deployment.key)
                deployments[deployment.key] = {
                    "in_flight": None if deployment.alone else deployment.in_flight,
                    "cooling_for": None if until is None else max(0.0, until - monotonic),
                    "latency": deployment.latency,
                }
        return {
            "pid": os.getpid(),
            "written": now,
            "traffic": self.traffic.snapshot(now),
            "deployments": deployments,
        }

    def _models(
        self, traffic: dict[str, Any], live: list[dict[str, Any]], since: int, now: float
    ) -> list[dict[str, Any]]:
        recent = traffic["series"]["deployment"]
        models = []
        for name, group in self.router.configured().items():
            models.append(
                {
                    "name": name,
                    "fallbacks": list(self.router.fallbacks(name)),
                    "context_fallbacks": list(self.router.context_fallbacks(name)),
                    "continues": self.router.continues(name),
                    "deployments": [
                        _deployment_view(d, live, recent.get(d.key, {}), since, now) for d in group
                    ],
                }
            )
        return models

    # -- sharing between workers --------------------------------------------------------

    def _schedule_share(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.share()
            return
        self._share_due = True
        loop.call_later(SHARE_SECONDS, self._shared)

    def _shared(self) -> None:
        self._share_due = False
        self.share()

    def share(self) -> None:
        """Write this worker's state for the others to read (atomically: a reader never
        sees half a file)."""
        if self.share_dir is None:
            return
        self.catch_up()
        state = self._state(self.clock())
        path = os.path.join(self.share_dir, f"{state['pid']}.json")
        try:
            with open(path + ".tmp", "wb") as out:
                out.write(orjson.dumps(state))
            os.replace(path + ".tmp", path)
        except OSError as exc:
            log.warning("status page: cannot share this worker's counts: %s", exc)

    def _others(self, now: float) -> list[dict[str, Any]]:
        """The other workers' last shared states; ``live`` says whether each still runs
        (a gone worker's traffic stays in the charts, its in-flight and cooldowns do not)."""
        assert self.share_dir is not None
        me = f"{os.getpid()}.json"
        states = []
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.share_dir):
                if not entry.name.endswith(".json") or entry.name == me:
                    continue
                try:
                    with open(entry.path, "rb") as src:
                        state = orjson.loads(src.read())
                except (OSError, orjson.JSONDecodeError):
                    continue
                state["live"] = process_alive(int(state.get("pid", 0)))
                state["age"] = max(0.0, now - float(state.get("written", now)))
                states.append(state)
        return states

    # -- endpoints ----------------------------------------------------------------------

    async def page(self, request: HTTPRequest) -> Response:
        """``GET /ui``: the page (it holds no data; it fetches ``/ui/data``)."""
        return Response(self._page, media_type="text/html; charset=utf-8", headers=_PAGE_HEADERS)

    async def data_endpoint(self, request: HTTPRequest) -> Response:
        """``GET /ui/data``: :meth:`data` as JSON, after ``authorize``."""
        headers = {"cache-control": "no-store"}
        viewer = None
        if self.authorize is not None:
            try:
                viewer = self.authorize(request.headers)
            except InterlinguaError as err:
                refusal = {"error": {"message": err.message, "type": err.kind.value}}
                return Response(orjson.dumps(refusal), err.status, headers, "application/json")
        spend = await self.spend.snapshot() if self.spend is not None else None
        body = orjson.dumps(self.data(viewer if isinstance(viewer, Viewer) else None, spend))
        return Response(body, 200, headers, "application/json")

    def routes(self) -> list[Route]:
        return [
            Route("/ui", self.page, methods=["GET"]),
            Route("/ui/", self.page, methods=["GET"]),
            Route("/ui/data", self.data_endpoint, methods=["GET"]),
        ]


def _seen_by(traffic: dict[str, Any], name: str, allows: Callable[[str], bool]) -> dict[str, Any]:
    """``traffic`` (a merged snapshot) as the key ``name`` may see it: the models it may
    use, its own key series, its own failures (deployments stay: the page shows only
    those of the models kept)."""
    series = traffic["series"]
    return {
        "series": {
            **series,
            "model": {model: m for model, m in series["model"].items() if allows(model)},
            "key": {key: k for key, k in series["key"].items() if key == name},
        },
        "errors": [error for error in traffic["errors"] if error.get("key") == name],
    }


def _deployment_view(
    deployment: Deployment,
    live: list[dict[str, Any]],
    minutes: dict[str, list[float]],
    since: int,
    now: float,
) -> dict[str, Any]:
    """One deployment on the page: its config, the workers' state of it, its health."""
    route = deployment.route
    in_flight: int | None = None
    cooling: float | None = None
    latencies = []
    for state in live:
        seen = state["deployments"].get(deployment.key)
        if seen is None:
            continue
        if seen["in_flight"] is not None:
            in_flight = (in_flight or 0) + seen["in_flight"]
        if seen["cooling_for"] is not None:
            left = seen["cooling_for"] - state.get("age", 0.0)
            if left > 0:
                cooling = max(cooling or 0.0, left)
        if seen["latency"] is not None:
            latencies.append(seen["latency"])
    requests = errors = 0
    latency_sum = 0.0
    for minute, counts in minutes.items():
        if int(minute) >= since:
            requests += int(counts[0])
            errors += int(counts[1])
            latency_sum += counts[4]
    if cooling is not None:
        health = "cooling"
    elif errors:
        health = "failing" if errors * 2 >= requests else "degraded"
    else:
        health = "ok" if requests else "idle"
    return {
        "key": deployment.key,
        "upstream": route.entry.upstream if route.entry else route.upstream.name,
        "upstream_model": route.upstream_model,
        "weight": deployment.weight,
        "in_flight": in_flight,
        "cooling_for": cooling,
        "latency": sum(latencies) / len(latencies) if latencies else None,
        "recent": {
            "minutes": HEALTH_MINUTES,
            "requests": requests,
            "errors": errors,
            "latency": latency_sum / requests if requests else None,
        },
        "health": health,
    }


def _dense(minutes: dict[str, list[float]], first: int) -> dict[str, list[float]]:
    """A series' sparse minutes as one list per field, MINUTES long, oldest first (the
    latency is the minute's average, null when nothing was measured)."""
    columns: dict[str, list[Any]] = {field: [0] * MINUTES for field in FIELDS[:4]}
    latency: list[float | None] = [None] * MINUTES
    ttft: list[float | None] = [None] * MINUTES
    for minute, counts in minutes.items():
        i = int(minute) - first
        if not 0 <= i < MINUTES:
            continue
        for j, field in enumerate(FIELDS[:4]):
            columns[field][i] = counts[j]
        if counts[0]:
            latency[i] = counts[4] / counts[0]
        if counts[6]:
            ttft[i] = counts[5] / counts[6]
    return {**columns, "latency": latency, "ttft": ttft}


def _dense_total(named: dict[str, dict[str, list[float]]], first: int) -> dict[str, list[Any]]:
    """Every model's series added up: the gateway's whole traffic."""
    total = merge([{"series": {"model": {"all": minutes}}} for minutes in named.values()])
    return _dense(total["series"]["model"].get("all", {}), first)
