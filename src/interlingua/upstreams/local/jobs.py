"""A job for the engine and the items it produces (shared by :mod:`.engine` and :mod:`.batch`)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeAlias

from ...core import StopReason, TokenLogprob
from ...errors import UpstreamError
from .sampler import Sampling

__all__ = ["N_BATCH", "Finish", "Item", "Job", "Piece", "Started", "cancelled_error"]

#: Tokens decoded per step at most (prompt chunks and the running sequences' next tokens).
N_BATCH = 512


@dataclass(frozen=True, slots=True)
class Started:
    """The first item of a job that got a sequence: prompt tokens found in its KV cache."""

    cached_tokens: int


@dataclass(frozen=True, slots=True)
class Finish:
    """The last item of a job: why it stopped and how many tokens it generated."""

    stop_reason: StopReason
    stop_sequence: str | None
    output_tokens: int


@dataclass(frozen=True, slots=True)
class Piece:
    """Released text and the logprobs of the tokens generated since the last piece (a
    token whose text is still held back, by the UTF-8 decoder or the stop matcher, goes
    with a later piece; when a stop sequence matches, the tokens that spelled it go with
    the text released just before it, or are not sent when there is none)."""

    text: str
    logprobs: tuple[TokenLogprob, ...]


Item: TypeAlias = str | Piece | Started | Finish | BaseException


@dataclass(slots=True, eq=False)  # compared and hashed by identity
class Job:
    """One generation: the prompt, its limits, and the channel back to the event loop."""

    tokens: list[int]
    max_tokens: int
    sampling: Sampling
    stops: tuple[str, ...]
    loop: asyncio.AbstractEventLoop
    #: None: no logprobs; k: each token's logprob and its k most likely alternatives
    logprobs: int | None = None
    #: False: nobody reads the text before the end, so it is handed over in batches
    stream: bool = True
    queue: asyncio.Queue[Item] = field(default_factory=asyncio.Queue)
    cancel: threading.Event = field(default_factory=threading.Event)
    #: completed (on ``loop``) when the worker has let go of the model
    done: asyncio.Future[None] | None = None
    #: called (from the worker thread) when the job leaves the model, before ``done``
    on_release: Callable[[], None] | None = None
    #: set (in the worker thread) when the job has left the model
    ended: threading.Event = field(default_factory=threading.Event)

    def emit(self, item: Item) -> None:
        """Hand ``item`` to the consumer (from the worker thread)."""
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the consumer's loop is closed: nobody is listening
            self.cancel.set()

    def finished(self) -> None:
        """The job has left the model: release its slot, then tell the waiters."""
        release, self.on_release = self.on_release, None
        if release is not None:
            release()
        self.ended.set()
        done = self.done
        if done is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            self.loop.call_soon_threadsafe(_set_done, done)


def cancelled_error() -> UpstreamError:
    """What a consumer still listening gets when its job was stopped by a shutdown."""
    return UpstreamError("the local model stopped this generation (shutting down)", status=503)


def _set_done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
