"""The attempt loop: a request's plan of deployments, tried in turn before the first byte.

:meth:`~interlingua.routing.Router.plan` orders the candidates (a model's deployments,
then its fallbacks'); :func:`run_attempts` calls one attempt per candidate until one
answers, where an *attempt* is everything up to the point of no return: the whole answer
(non-stream), or the upstream's first events (a stream, before the status line is sent;
after it a failure travels in-band, never retried, since the client may have acted on
the bytes it got).

A failed attempt is judged by :func:`interlingua.retry.should_retry` (408, 409, 429,
5xx, 529, cannot connect, timed out; ``x-should-retry`` from the upstream wins). Not
retryable (400, 401, 403, 404...): returned at once, the other candidates untried. Else
it counts toward the deployment's cooldown, and:

* the same deployment is tried again, up to its upstream's ``retries.max`` times, after
  the wait the upstream asked for (``retry-after-ms`` / ``Retry-After``) when that is
  within ``retries.max_wait``, else after a capped exponential backoff with full jitter;
  an asked-for wait over ``max_wait`` is not waited for: the next candidate is tried;
* then the next candidate (each once, plus its own retries), at once.

An attempt that timed out silently (:class:`~..upstreams.deadlines.SilentTimeoutError`:
no answer within ``timeout.read`` or ``total``, or no content within a stream's
``timeout.first_byte``) is not retried on its deployment, even when it is the last
candidate: the next candidate is tried at once, or the client gets the 504.

A refusal that says the prompt does not fit the model's context window
(:func:`interlingua.errors.refusal`: ``context_length_exceeded``, "prompt is too long",
...) is not retryable either, and the rest of the plan would refuse it the same way, so
it goes to the model's ``context_fallbacks`` instead
(:meth:`~interlingua.routing.Router.context_plan`), tried as above; without any, it is
the client's answer like any 400. A content-filter refusal is a plain 400: answered at
once, its code and message kept.

When every candidate failed, the client gets the last failure: the last upstream's error
in its own dialect with its Retry-After (a passthrough error body relayed as it came).
Each attempt is logged at DEBUG on ``interlingua.routing``, with the request id::

    req_1f.. model=smart attempt=1 deployment=nim/deepseek-r1 outcome="429 rate_limit"
        latency_ms=31.2 next=same wait_s=1.00
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

import orjson
from starlette.types import Receive

from ..config import RetriesConfig
from ..errors import (
    CONTEXT_WINDOW,
    InterlinguaError,
    body_refusal,
    error_class_for_status,
    error_refusal,
    parse_retry_after,
)
from ..retry import retry_delay, should_retry
from ..routing import Deployment, Route, Router
from ..upstreams.deadlines import SilentTimeoutError
from .asgi_io import BytesResponse, StreamResponse
from .middleware import REQUEST_ID

__all__ = [
    "RelayedFailure",
    "alone_answered",
    "alone_failed",
    "run_attempts",
]

log = logging.getLogger("interlingua.routing")

Answer = BytesResponse | StreamResponse
Attempt = Callable[[Route], Awaitable[Answer]]
#: how the loop waits before a retry: ``pause(seconds, receive)``; raises when the client
#: hangs up meanwhile (server/gateway.py)
Pause = Callable[[float, Receive | None], Awaitable[None]]


class RelayedFailure(Exception):
    """A passthrough attempt the upstream answered with an error status.

    Raised rather than returned so the loop can judge it like any other failure; when it
    is the last, ``response`` (the upstream's own error body, scrubbed, with its
    Retry-After) is what the client gets.
    """

    def __init__(self, response: BytesResponse, status: int, headers: Mapping[str, str]) -> None:
        super().__init__(f"upstream answered {status}")
        self.response = response
        self.status = status
        self.headers = headers


def _judged(failure: InterlinguaError | RelayedFailure) -> tuple[bool, float | None, str]:
    """Whether ``failure`` is worth another attempt, the wait its upstream asked for, and
    how to name it in the log."""
    if isinstance(failure, RelayedFailure):
        status, headers = failure.status, failure.headers
        kind = error_class_for_status(status).kind.value
        retryable, asked = should_retry(status, headers), parse_retry_after(headers)
        outcome = f"{status} {kind}"
    else:
        status, retryable, asked = failure.status, should_retry(failure), failure.retry_after
        outcome = f"{status} {failure.kind.value}"
    if retryable and status < 500 and _refusal(failure) is not None:
        # A 4xx the upstream said to retry (x-should-retry: true) that refuses the prompt
        # itself: the same prompt would be refused again.
        retryable = False
    return retryable, asked, outcome


def _refusal(failure: InterlinguaError | RelayedFailure) -> str | None:
    """What refusal of the request ``failure`` is (:func:`interlingua.errors.refusal`)."""
    if isinstance(failure, RelayedFailure):
        try:
            payload = orjson.loads(failure.response.body)
        except orjson.JSONDecodeError:
            return None
        return body_refusal(failure.status, payload)
    return error_refusal(failure)


def _retry_wait(retries: RetriesConfig, tries: int, asked: float | None) -> float | None:
    """Seconds before trying the same deployment again, or None to move on."""
    if tries >= retries.max:
        return None
    if asked is not None:
        return asked if asked <= retries.max_wait else None
    return min(retry_delay(tries), retries.max_wait)


def _observe_failure(
    router: Router, deployment: Deployment, failure: InterlinguaError | RelayedFailure
) -> None:
    """Tell the router's observer (the metrics) an attempt failed, and of which kind."""
    if router.observe is not None:
        if isinstance(failure, RelayedFailure):
            kind = error_class_for_status(failure.status).kind.value
        else:
            kind = failure.kind.value
        router.observe(deployment.route.upstream.name, kind)


def _begin(router: Router, deployment: Deployment) -> float:
    """Tell the router an attempt on ``deployment`` starts; its start time."""
    router.attempt_started(deployment)
    return time.perf_counter()


def _answered(
    router: Router, deployment: Deployment, answer: Answer, started: float, model: str, number: int
) -> Answer:
    """``answer``, once the router knows the attempt succeeded (and, for a stream, will
    know when it ends)."""
    latency = time.perf_counter() - started
    if type(answer) is StreamResponse:
        # A stream is in flight until its last byte went out, and may still break: its
        # end, not its first byte, says whether the deployment served the client.
        router.attempt_succeeded(deployment, latency, whole=False)
        answer.aclose = _ending(answer, router, deployment)
        answer.on_broken = deployment.broke
        answer.on_complete = deployment.completed
    else:
        router.attempt_succeeded(deployment, latency)
        router.attempt_ended(deployment)
    if router.observe is not None:
        router.observe(deployment.route.upstream.name, "ok")
    if log.isEnabledFor(logging.DEBUG):
        _log(model, number, deployment, f"{answer.status} ok", latency, None, 0.0)
    return answer


def alone_answered(
    router: Router, deployment: Deployment, answer: Answer, started: float, model: str
) -> Answer:
    """:func:`_answered` for a name's only deployment with nothing to retry (the hot path):
    its cooldown is cleared (a stream's when it completes), but no in-flight count or
    latency is kept, since no strategy ever orders a deployment that has no sibling."""
    if type(answer) is StreamResponse:
        # Its end decides: a break after the first byte is the deployment's failure (not
        # a client leaving), only a completed stream its success.
        answer.on_broken = deployment.broke
        answer.on_complete = deployment.completed
    else:
        router.cooldowns.record_success(deployment.key)
    if router.observe is not None:
        router.observe(deployment.route.upstream.name, "ok")
    if log.isEnabledFor(logging.DEBUG):
        latency = time.perf_counter() - started
        _log(model, 1, deployment, f"{answer.status} ok", latency, None, 0.0)
    return answer


def alone_failed(
    router: Router,
    deployment: Deployment,
    failure: InterlinguaError | RelayedFailure,
    started: float,
    model: str,
) -> BytesResponse:
    """The end of a request whose only attempt failed (one deployment, no retries): the
    failure counts toward the deployment's cooldown (it matters where the name is another
    one's fallback) and is the client's answer."""
    latency = time.perf_counter() - started
    retryable, asked, outcome = _judged(failure)
    _observe_failure(router, deployment, failure)
    if retryable:
        router.attempt_failed(deployment, asked)
    if log.isEnabledFor(logging.DEBUG):
        after = "none" if retryable else "none (not retryable)"
        _log(model, 1, deployment, outcome, latency, after, 0.0)
    try:
        return _give_up(failure)
    finally:
        del failure  # (see _give_up)


async def run_attempts(
    router: Router,
    plan: Sequence[Deployment],
    attempt: Attempt,
    model: str,
    receive: Receive | None,
    pause: Pause,
    *,
    number: int = 0,
    context: bool = True,
) -> Answer:
    """The first answer of ``attempt`` over ``plan`` (module docstring); raises the last
    failure (or returns a relayed one) when none answers. ``number`` counts the attempts
    made before; ``context``: a refusal of the prompt as too long may still go to the
    model's context fallbacks (not once there)."""
    failure: InterlinguaError | RelayedFailure | None = None
    last = len(plan) - 1
    for index, deployment in enumerate(plan):
        tries = 0
        while True:
            number += 1
            started = _begin(router, deployment)
            try:
                answer = await attempt(deployment.route)
            except (InterlinguaError, RelayedFailure) as exc:
                router.attempt_ended(deployment)
                failure = exc
            except BaseException:
                router.attempt_ended(deployment)
                raise
            else:
                return _answered(router, deployment, answer, started, model, number)
            latency = time.perf_counter() - started
            retryable, asked, outcome = _judged(failure)
            _observe_failure(router, deployment, failure)
            debug = log.isEnabledFor(logging.DEBUG)
            if not retryable:
                if debug:
                    _log(model, number, deployment, outcome, latency, "none (not retryable)", 0.0)
                spare = _context_plan(router, model, failure) if context else None
                if spare:
                    failure = None  # (see _give_up)
                    return await run_attempts(
                        router, spare, attempt, model, receive, pause, number=number, context=False
                    )
                try:
                    return _give_up(failure)
                finally:
                    failure = None  # (see _give_up)
            router.attempt_failed(deployment, asked)
            # A silent upstream may still be working on the request: asking it again
            # doubles its load and the client's wait, so the next candidate gets it now.
            silent = isinstance(failure, SilentTimeoutError)
            wait = None if silent else _retry_wait(deployment.retries, tries, asked)
            if wait is None:
                if debug:
                    after = "none" if index == last else plan[index + 1].key
                    _log(model, number, deployment, outcome, latency, after, 0.0)
                break
            if debug:
                _log(model, number, deployment, outcome, latency, "same", wait)
            if wait > 0:
                await pause(wait, receive)
            tries += 1
    assert failure is not None  # (a plan is never empty)
    try:
        return _give_up(failure)
    finally:
        failure = None  # (see _give_up)


def _context_plan(
    router: Router, model: str, failure: InterlinguaError | RelayedFailure
) -> Sequence[Deployment] | None:
    """Where a failure that refuses the prompt as too long for the context window goes:
    the model's context fallbacks (None for any other failure, or when it has none)."""
    if _refusal(failure) != CONTEXT_WINDOW:
        return None
    spare = router.context_plan(model)
    if spare and log.isEnabledFor(logging.DEBUG):
        keys = ",".join(d.key for d in spare)
        log.debug("%s context window refused: context_fallbacks=%s", REQUEST_ID.get(), keys)
    return spare or None


def _give_up(failure: InterlinguaError | RelayedFailure) -> BytesResponse:
    """The client's answer for the last failure: a relayed error body, or the error
    raised for the caller's error boundary.

    Every frame the raised error's traceback passes through must let go of it (``del``
    / ``= None`` in a ``finally``): a frame that still held it would make a cycle (error
    -> traceback -> frame -> error) that keeps the failed answer's buffered bytes alive
    until a full garbage collection, which a busy gateway runs rarely. RSS grew over
    thousands of faulted requests before (docs/reliability.md,
    "Memory and file descriptors under faults"; pinned by
    tests/server/test_memory_under_faults.py).
    """
    if isinstance(failure, RelayedFailure):
        return failure.response
    try:
        raise failure
    finally:
        del failure


def _ending(
    answer: StreamResponse, router: Router, deployment: Deployment
) -> Callable[[], Awaitable[None]]:
    """``answer``'s close, then the end of its attempt (once, however often called)."""
    aclose = answer.aclose
    ended = False

    async def close() -> None:
        nonlocal ended
        try:
            if aclose is not None:
                await aclose()
        finally:
            if not ended:
                ended = True
                router.attempt_ended(deployment)

    return close


def _log(
    model: str,
    number: int,
    deployment: Deployment,
    outcome: str,
    latency: float,
    after: str | None,
    wait: float,
) -> None:
    tail = "" if after is None else f' next="{after}" wait_s={wait:.2f}'
    if not model.isprintable() or " " in model or '"' in model:
        model = repr(model)  # the client's string: it must not forge a log line
    log.debug(
        '%s model=%s attempt=%d deployment=%s outcome="%s" latency_ms=%.1f%s',
        REQUEST_ID.get(),
        model,
        number,
        deployment.key,
        outcome,
        latency * 1000,
        tail,
    )
