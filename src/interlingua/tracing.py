"""The W3C trace context of the generation request being answered, and its attempts.

With telemetry configured (server/telemetry.py) every generation request gets a
:class:`Trace`: its client's ``traceparent`` / ``tracestate`` (W3C Trace Context,
https://www.w3.org/TR/trace-context/) when it sent them, else a new trace id, and an id
for the request's own span. :data:`TRACE` holds it for the request's task, so an
upstream sees it without an extra argument: each HTTP request to an upstream starts an
:class:`Attempt` (its own span id, sent on as the ``traceparent`` whose parent is that
attempt: :meth:`Trace.attempt`), and the router's attempt observer tells the trace how
each attempt ended (:meth:`Trace.outcome`). The spans themselves are built from these
facts and the request's usage record once the request is over, off the request path.

Nothing here imports OpenTelemetry: with telemetry off :data:`TRACE` stays None and an
upstream request pays one context-variable read.

>>> trace = Trace.begin({"traceparent": "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"})
>>> f"{trace.trace_id:032x}", f"{trace.parent_id:016x}", trace.flags
('abababababababababababababababab', 'cdcdcdcdcdcdcdcd', 1)
>>> trace.attempt("claude", None)["traceparent"][:36]
'00-abababababababababababababababab-'
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Mapping
from contextvars import ContextVar
from typing import Any

__all__ = ["TRACE", "Attempt", "Trace", "traceparent"]

#: the trace of the generation request being answered (None: telemetry off, or none)
TRACE: ContextVar[Trace | None] = ContextVar("interlingua_trace", default=None)

# version 00: trace id, parent id, flags; an all-zero id is invalid (section 3.2.2.3)
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
#: a random source of ids apart from the ``random`` module's shared one (which a
#: program may seed for its own use)
_IDS = random.Random()


def traceparent(trace_id: int, span_id: int, flags: int) -> str:
    """The ``traceparent`` header value for a span (version 00)."""
    return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"


def _parse(value: str | None) -> tuple[int, int, int] | None:
    """(trace id, parent id, flags) of a ``traceparent``; None when absent or invalid (then
    the request starts a trace of its own, as the spec asks)."""
    if not value:
        return None
    found = _TRACEPARENT.fullmatch(value.strip().lower()[:55])
    if found is None or found.group(1) == "ff":
        return None
    trace_id, parent_id = int(found.group(2), 16), int(found.group(3), 16)
    if not trace_id or not parent_id:
        return None
    return trace_id, parent_id, int(found.group(4), 16)


class Attempt:
    """One HTTP request to an upstream: its span id and what came of it. Times are Unix
    nanoseconds (what a span carries)."""

    __slots__ = ("end", "error", "first_byte", "span_id", "start", "status", "upstream")

    def __init__(self, upstream: str, span_id: int) -> None:
        self.upstream = upstream
        self.span_id = span_id
        self.start = time.time_ns()
        #: when its answer began (the status line; None: never)
        self.first_byte: int | None = None
        #: when it ended (None: still going, or a stream that ended with the request)
        self.end: int | None = None
        #: the upstream's HTTP status (None: no answer at all)
        self.status: int | None = None
        #: the error kind when it failed (errors.ErrorKind value), before or during a stream
        self.error: str | None = None


class Trace:
    """The trace facts of one request (module docstring)."""

    __slots__ = (
        "answer",
        "attempts",
        "body",
        "flags",
        "parent_id",
        "span_id",
        "state",
        "tail",
        "trace_id",
    )

    def __init__(self, trace_id: int, parent_id: int | None, flags: int, state: str | None) -> None:
        self.trace_id = trace_id
        #: the client's span (None: the request began the trace)
        self.parent_id = parent_id
        self.flags = flags
        #: the client's ``tracestate``, sent on unchanged
        self.state = state
        self.span_id = _IDS.getrandbits(64) or 1
        self.attempts: list[Attempt] = []
        #: the request's decoded body (for its max_tokens, and its prompt when content
        #: is exported); the answer's body when it was a whole one
        self.body: dict[str, Any] | None = None
        self.answer: bytes | None = None
        #: a stream's last events as its client got them (its finish reasons): a relayed
        #: stream's last reads, a translated one's last encoded batch; None: not a stream,
        #: or it never ended
        self.tail: bytes | None = None

    @classmethod
    def begin(cls, headers: Mapping[str, str]) -> Trace:
        """The trace of a request with these (lowercase) headers, continuing the client's."""
        parent = _parse(headers.get("traceparent"))
        if parent is None:  # (a tracestate without a valid traceparent is dropped: 3.3)
            return cls(_IDS.getrandbits(128) or 1, None, 1, None)
        return cls(parent[0], parent[1], parent[2], headers.get("tracestate") or None)

    def attempt(self, upstream: str, extra: Mapping[str, str] | None) -> dict[str, str]:
        """Start an attempt on ``upstream``: ``extra`` headers plus the trace context
        that makes the attempt the upstream's parent."""
        attempt = Attempt(upstream, _IDS.getrandbits(64) or 1)
        self.attempts.append(attempt)
        headers = dict(extra) if extra else {}
        headers["traceparent"] = traceparent(self.trace_id, attempt.span_id, self.flags)
        if self.state:
            headers["tracestate"] = self.state
        return headers

    def answered(self, status: int) -> None:
        """The last attempt's answer began with ``status``."""
        if self.attempts:
            last = self.attempts[-1]
            last.status = status
            last.first_byte = time.time_ns()

    def outcome(self, upstream: str, kind: str) -> None:
        """An attempt on ``upstream`` ended (``kind`` an error kind), or answered
        (``"ok"``); a stream that broke after answering is told again with its fault.
        An upstream that is not reached over HTTP gets its attempt here."""
        now = time.time_ns()
        for attempt in reversed(self.attempts):
            if attempt.upstream == upstream and attempt.end is None:
                break
        else:
            attempt = Attempt(upstream, _IDS.getrandbits(64) or 1)
            self.attempts.append(attempt)
        if kind == "ok":
            if attempt.first_byte is None:
                attempt.first_byte = now
        else:
            attempt.error = kind
            attempt.end = now
