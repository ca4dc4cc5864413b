"""The last hour of traffic, minute by minute, and the last failed requests: what the status
page (server/status_page.py) charts and lists.

:class:`Traffic` is a ``RecordSink``. Each finished request is added to three *series*:
its model's (the name the client asked for), its key's (the key's name; none when no
named keys are configured) and its deployment's (``upstream/upstream-model``, as
:class:`~interlingua.routing.Deployment` names it). A series is a ring of
:data:`MINUTES` one-minute slots of counts (requests, failures, input and output tokens,
latency and time to first token sums): adding a request touches one slot, and memory does
not grow with traffic. A request counts in the minute it *arrived* (``Record.at``), as
the usage log dates it. Failed requests (an error kind, or a status of 400 and more) also
go into a ring of the last :data:`RECENT_ERRORS`.

:meth:`Traffic.snapshot` turns it all into plain JSON-ready data (sparse: only minutes
with traffic), and :func:`merge` adds snapshots together: several worker processes each
keep their own Traffic and the page shows their sum.

Everything is bounded: at most :data:`MAX_SERIES` names per kind (a wildcard route lets
clients send any model name; the rest are counted as ``(other)``).

>>> traffic = Traffic()
>>> row = Record(at=600.0, request_id="r1", key=None, dialect="openai", model="m")
>>> row.status, row.input_tokens, row.output_tokens = 200, 12, 3
>>> traffic.record(row)
>>> traffic.snapshot(now=610.0)["series"]["model"]["m"]
{'10': [1, 0, 12, 3, 0.0, 0.0, 0]}
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from ..usage.record import Record

__all__ = [
    "FIELDS",
    "KINDS",
    "MAX_SERIES",
    "MINUTES",
    "OTHER",
    "RECENT_ERRORS",
    "Traffic",
    "merge",
    "upstream_failure",
]

#: minutes of history kept (the charts' width)
MINUTES = 60
#: failed requests kept for the page's list
RECENT_ERRORS = 50
#: names kept per kind of series; later names add up under OTHER
MAX_SERIES = 200
OTHER = "(other)"
#: the kinds of series, and what names them
KINDS = ("model", "key", "deployment")
#: the counts of one minute, in order (the snapshot's lists)
FIELDS = (
    "requests",
    "errors",
    "input_tokens",
    "output_tokens",
    "latency_sum",
    "ttft_sum",
    "ttft_count",
)
#: error kinds that say the deployment itself failed (not the client's request)
_UPSTREAM_KINDS = frozenset({"upstream_error", "overloaded", "timeout", "rate_limit"})
#: the stamp of a slot that never held a minute: before any minute
_EMPTY = -(1 << 62)


def upstream_failure(row: Record) -> bool:
    """Whether ``row`` failed at its upstream, as opposed to the client's mistake (a 400
    the upstream returned is the request's fault, not the deployment's)."""
    return row.upstream is not None and (row.status >= 500 or row.error in _UPSTREAM_KINDS)


class _Series:
    """One name's ring of minute slots; slot ``m % MINUTES`` holds minute ``m``."""

    __slots__ = ("counts", "stamps")

    def __init__(self) -> None:
        #: the minute each slot holds (_EMPTY: none yet)
        self.stamps = [_EMPTY] * MINUTES
        self.counts = [[0, 0, 0, 0, 0.0, 0.0, 0] for _ in range(MINUTES)]

    def add(self, minute: int, row: Record, failed: bool) -> None:
        i = minute % MINUTES
        stamp = self.stamps[i]
        counts = self.counts[i]
        if stamp != minute:
            if stamp > minute:  # older than the whole ring (a very long request)
                return
            self.stamps[i] = minute
            counts[:] = (0, 0, 0, 0, 0.0, 0.0, 0)
        counts[0] += 1
        if failed:
            counts[1] += 1
        counts[2] += row.input_tokens
        counts[3] += row.output_tokens
        counts[4] += row.latency
        if row.ttft is not None:
            counts[5] += row.ttft
            counts[6] += 1

    def snapshot(self, first: int) -> dict[str, list[float]]:
        """The slots from minute ``first`` on, keyed by the minute (a JSON object key)."""
        return {
            str(stamp): list(self.counts[i])
            for i, stamp in enumerate(self.stamps)
            if stamp >= first
        }


class Traffic:
    """Minute counts per model, key and deployment, and the recent failures (module doc)."""

    def __init__(self) -> None:
        self._series: dict[str, dict[str, _Series]] = {kind: {} for kind in KINDS}
        self._models = self._series["model"]
        self._keys = self._series["key"]
        #: (upstream, upstream model) -> its series (no name built per request)
        self._deployments: dict[tuple[str, str | None], _Series] = {}
        self._errors: deque[dict[str, Any]] = deque(maxlen=RECENT_ERRORS)

    def record(self, row: Record) -> None:
        """Add one finished request (a ``RecordSink``: never blocks, never raises)."""
        minute = int(row.at // 60)
        failed = row.error is not None or row.status >= 400
        series = self._models.get(row.model) or _named(self._models, row.model)
        series.add(minute, row, failed)
        if row.key is not None:
            series = self._keys.get(row.key) or _named(self._keys, row.key)
            series.add(minute, row, failed)
        if row.upstream is not None:
            where = (row.upstream, row.upstream_model)
            series = self._deployments.get(where) or self._deployment(where)
            series.add(minute, row, upstream_failure(row))
        if failed:
            self._errors.append(
                {
                    "at": row.at,
                    "request_id": row.request_id,
                    "key": row.key,
                    "model": row.model,
                    "dialect": row.dialect,
                    "stream": row.stream,
                    "status": row.status,
                    "error": row.error,
                    "upstream": row.upstream,
                    "upstream_model": row.upstream_model,
                }
            )

    def _deployment(self, where: tuple[str, str | None]) -> _Series:
        series = _named(self._series["deployment"], f"{where[0]}/{where[1]}")
        if len(self._deployments) < MAX_SERIES:
            self._deployments[where] = series
        return series

    def snapshot(self, now: float) -> dict[str, Any]:
        """The last MINUTES minutes before ``now`` as plain data::

            {"series": {kind: {name: {"<minute>": [counts in FIELDS order]}}},
             "errors": [recent failures, oldest first]}

        Minutes are Unix minutes (``int(at // 60)``); minutes with no traffic are left out.
        """
        first = int(now // 60) - MINUTES + 1
        series: dict[str, dict[str, dict[str, list[float]]]] = {}
        for kind, named in self._series.items():
            series[kind] = {}
            for name, ring in named.items():
                minutes = ring.snapshot(first)
                if minutes:
                    series[kind][name] = minutes
        return {"series": series, "errors": list(self._errors)}


def _named(named: dict[str, _Series], name: str) -> _Series:
    """The series of ``name`` in ``named``, new if need be; OTHER's once MAX_SERIES
    names are kept."""
    series = named.get(name)
    if series is None:
        if len(named) >= MAX_SERIES:
            name = OTHER
            series = named.get(name)
        if series is None:
            series = named[name] = _Series()
    return series


def merge(snapshots: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Several :meth:`Traffic.snapshot` results added together (the last RECENT_ERRORS
    failures among them all, oldest first)."""
    series: dict[str, dict[str, dict[str, list[float]]]] = {kind: {} for kind in KINDS}
    errors: list[dict[str, Any]] = []
    for snapshot in snapshots:
        errors.extend(snapshot.get("errors", ()))
        for kind, named in snapshot.get("series", {}).items():
            into = series.setdefault(kind, {})
            for name, minutes in named.items():
                target = into.setdefault(name, {})
                for minute, counts in minutes.items():
                    have = target.get(minute)
                    if have is None:
                        target[minute] = list(counts)
                    else:
                        for i, value in enumerate(counts):
                            have[i] += value
    errors.sort(key=lambda e: e.get("at", 0.0))
    return {"series": series, "errors": errors[-RECENT_ERRORS:]}
