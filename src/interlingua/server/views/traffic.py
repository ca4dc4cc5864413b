"""The last hour of traffic, minute by minute, and the last failed requests: what the status
page (server/views/status_page.py) charts and lists.

:class:`Traffic` does the status page's counting (the page is the ``RecordSink``: it
hands its batches of finished requests to :meth:`Traffic.records`). Each finished request
counts in three *series*:
its model's (the name the client asked for), its key's (the key's name; none when no
named keys are configured) and its deployment's (``upstream/upstream-model``, as
:class:`~interlingua.routing.Deployment` names it). A series is a ring of
:data:`MINUTES` one-minute slots of counts (requests, failures, input and output tokens,
latency and time to first token sums): memory does not grow with traffic. A request is
added once, to the ring of its (model, key, deployment) combination, and the three
series are summed from those rings when a snapshot is taken (rare: the page polls);
combinations past :data:`MAX_COMBOS` are added to the three series one by one. A request counts in the minute it *arrived* (``Record.at``), as
the usage log dates it. Failed requests (an error kind, or a status of 400 and more; not
a client that hung up: ``usage.record.failed``) also go into a ring of the last
:data:`RECENT_ERRORS`. The row of an attempt whose broken stream another attempt
continued (``usage.record.CONTINUED``) adds only its tokens: its request is counted,
once, by the row of the attempt that finished it, and it is not a failure.

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

from ...usage.record import CONTINUED, Record
from ...usage.record import failed as is_failure

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
#: a slot's counts before any request (FIELDS, then a combination's upstream failures)
_ZEROS = (0, 0, 0, 0, 0.0, 0.0, 0, 0)


def upstream_failure(row: Record) -> bool:
    """Whether ``row`` failed at its upstream, as opposed to the client's mistake (a 400
    the upstream returned is the request's fault, not the deployment's)."""
    return row.upstream is not None and (row.status >= 500 or row.error in _UPSTREAM_KINDS)


class _Series:
    """One name's ring of minute slots; slot ``m % MINUTES`` holds minute ``m``."""

    __slots__ = ("counts", "stamps")

    def __init__(self, width: int = len(FIELDS)) -> None:
        #: the minute each slot holds (_EMPTY: none yet)
        self.stamps = [_EMPTY] * MINUTES
        self.counts = [list(_ZEROS[:width]) for _ in range(MINUTES)]

    def add(self, minute: int, row: Record, failed: bool, upstream_failed: bool = False) -> None:
        """Count ``row`` in ``minute``'s slot (``upstream_failed``: in the eighth count,
        which a combination's ring has)."""
        i = minute % MINUTES
        stamp = self.stamps[i]
        counts = self.counts[i]
        if stamp != minute:
            if stamp > minute:  # older than the whole ring (a very long request)
                return
            self.stamps[i] = minute
            counts[:] = _ZEROS[: len(counts)]
        counts[0] += 1
        if failed:
            counts[1] += 1
            if upstream_failed:
                counts[7] += 1
        counts[2] += row.input_tokens
        counts[3] += row.output_tokens
        counts[4] += row.latency
        if row.ttft is not None:
            counts[5] += row.ttft
            counts[6] += 1

    def add_tokens(self, minute: int, row: Record) -> None:
        """Count only ``row``'s tokens in ``minute``'s slot: the row of an attempt whose
        broken stream another attempt continued (not a request of its own: its
        request's row, the finishing attempt's, counts that; nor a failure)."""
        i = minute % MINUTES
        stamp = self.stamps[i]
        counts = self.counts[i]
        if stamp != minute:
            if stamp > minute:
                return
            self.stamps[i] = minute
            counts[:] = _ZEROS[: len(counts)]
        counts[2] += row.input_tokens
        counts[3] += row.output_tokens

    def snapshot(self, first: int) -> dict[str, list[float]]:
        """The slots from minute ``first`` on, keyed by the minute (a JSON object key)."""
        return {
            str(stamp): list(self.counts[i])
            for i, stamp in enumerate(self.stamps)
            if stamp >= first
        }


class _Combo:
    """One (model, key, deployment) combination's ring, and the series names it adds up
    under: a request touches one ring, not three (what the page shows per model, per key
    and per deployment is summed from the rings when a snapshot is taken)."""

    __slots__ = ("deployment", "key", "model", "ring")

    def __init__(self, model: str, key: str | None, deployment: str | None) -> None:
        self.model = model
        self.key = key
        self.deployment = deployment
        #: FIELDS, then the requests that failed at the upstream (the deployment's failures)
        self.ring = _Series(len(FIELDS) + 1)


#: combinations kept with a ring of their own; later ones add to the named series directly
MAX_COMBOS = 400


class Traffic:
    """Minute counts per model, key and deployment, and the recent failures (module doc)."""

    def __init__(self) -> None:
        #: the series of requests past MAX_COMBOS combinations, added to one by one
        self._series: dict[str, dict[str, _Series]] = {kind: {} for kind in KINDS}
        #: the names admitted per kind (MAX_SERIES at most, then OTHER)
        self._names: dict[str, set[str]] = {kind: set() for kind in KINDS}
        #: (model, key, upstream, upstream model) -> its ring
        self._combos: dict[tuple[str, str | None, str | None, str | None], _Combo] = {}
        self._errors: deque[dict[str, Any]] = deque(maxlen=RECENT_ERRORS)

    def record(self, row: Record) -> None:
        """Add one finished request (:meth:`records` of one; raises for a broken one)."""
        if self.records((row,)):
            raise ValueError(f"a record that cannot be counted: {row!r}")

    def records(self, rows: Iterable[Record]) -> int:
        """Add finished requests (a ``RecordSink``'s work: never blocks); returns how
        many could not be counted (a broken record: the caller logs it)."""
        combos = self._combos
        broken = 0
        for row in rows:
            try:
                minute = int(row.at // 60)
                error = row.error
                if error is not None and error == CONTINUED:
                    self._continued(minute, row)
                    continue
                failed = is_failure(row)
                combo = combos.get((row.model, row.key, row.upstream, row.upstream_model))
                if combo is None:
                    combo = self._combo(row)
                if combo is not None:
                    upstream_failed = (
                        failed and combo.deployment is not None and upstream_failure(row)
                    )
                    combo.ring.add(minute, row, failed, upstream_failed)
                else:
                    self._add_alone(minute, row, failed)
                if failed:
                    self._failed(row)
            except Exception:
                broken += 1
        return broken

    def _continued(self, minute: int, row: Record) -> None:
        """A continued attempt's row: its tokens in the series of its combination."""
        combo = self._combos.get((row.model, row.key, row.upstream, row.upstream_model))
        if combo is None:
            combo = self._combo(row)
        if combo is not None:
            combo.ring.add_tokens(minute, row)
            return
        named = self._series
        for kind, name in zip(KINDS, self._names_of(row), strict=True):
            if name is not None:
                _series(named[kind], name).add_tokens(minute, row)

    def _failed(self, row: Record) -> None:
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

    def _combo(self, row: Record) -> _Combo | None:
        if len(self._combos) >= MAX_COMBOS:
            return None
        combo = _Combo(*self._names_of(row))
        self._combos[(row.model, row.key, row.upstream, row.upstream_model)] = combo
        return combo

    def _names_of(self, row: Record) -> tuple[str, str | None, str | None]:
        """The series names ``row`` adds up under (OTHER past MAX_SERIES names a kind)."""
        deployment = None
        if row.upstream is not None:
            deployment = self._admit("deployment", f"{row.upstream}/{row.upstream_model}")
        key = None if row.key is None else self._admit("key", row.key)
        return self._admit("model", row.model), key, deployment

    def _admit(self, kind: str, name: str) -> str:
        names = self._names[kind]
        if name in names:
            return name
        if len(names) >= MAX_SERIES:
            return OTHER
        names.add(name)
        return name

    def _add_alone(self, minute: int, row: Record, failed: bool) -> None:
        model, key, deployment = self._names_of(row)
        named = self._series
        _series(named["model"], model).add(minute, row, failed)
        if key is not None:
            _series(named["key"], key).add(minute, row, failed)
        if deployment is not None:
            _series(named["deployment"], deployment).add(minute, row, upstream_failure(row))

    def snapshot(self, now: float) -> dict[str, Any]:
        """The last MINUTES minutes before ``now`` as plain data::

            {"series": {kind: {name: {"<minute>": [counts in FIELDS order]}}},
             "errors": [recent failures, oldest first]}

        Minutes are Unix minutes (``int(at // 60)``); minutes with no traffic are left out.
        """
        first = int(now // 60) - MINUTES + 1
        series: dict[str, dict[str, dict[str, list[float]]]] = {kind: {} for kind in KINDS}
        for kind, named in self._series.items():
            for name, ring in named.items():
                for minute, counts in ring.snapshot(first).items():
                    _add_into(series[kind].setdefault(name, {}), minute, counts)
        for combo in self._combos.values():
            for minute, counts in combo.ring.snapshot(first).items():
                fields = counts[: len(FIELDS)]
                _add_into(series["model"].setdefault(combo.model, {}), minute, fields)
                if combo.key is not None:
                    _add_into(series["key"].setdefault(combo.key, {}), minute, fields)
                if combo.deployment is not None:
                    fields = [fields[0], counts[7], *fields[2:]]  # its failures: upstream ones
                    target = series["deployment"].setdefault(combo.deployment, {})
                    _add_into(target, minute, fields)
        return {"series": series, "errors": list(self._errors)}


def _add_into(target: dict[str, list[float]], minute: str, counts: list[float]) -> None:
    have = target.get(minute)
    if have is None:
        target[minute] = list(counts)
    else:
        for i, value in enumerate(counts):
            have[i] += value


def _series(named: dict[str, _Series], name: str) -> _Series:
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
                    _add_into(target, minute, counts)
    errors.sort(key=lambda e: e.get("at", 0.0))
    return {"series": series, "errors": errors[-RECENT_ERRORS:]}
