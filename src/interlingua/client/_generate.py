"""In-process batches: many prompts through one client, one answer each.

::

    with Client("http://127.0.0.1:8400/v1", model="qwen3",
                defaults={"temperature": 0.2, "max_tokens": 512}) as client:
        results = client.generate(["Hi", {"prompt": "Hello", "temperature": 0}],
                                  progress=True)
        for r in results:
            print(r.text if isinstance(r, ChatResult) else f"failed: {r}")

An **item** is one of:

* what :meth:`~interlingua.client.AsyncClient.chat` takes as its prompt: a string; a
  list or tuple of content items (strings, images, datastudio BaseAPI's ``{"type":
  "text"|"image"|"system", "value": ...}`` items) or of messages; one message (a
  :class:`~interlingua.core.Message`, or a dict with ``role``); one content item (a dict
  with ``type``, an image);
* a dict of ``chat`` keyword arguments holding the prompt under ``prompt`` (or
  ``messages``, the same thing), e.g. ``{"prompt": "Hi", "images": ["a.png"],
  "temperature": 0}``; its settings win over the batch's, which win over the client's
  ``defaults``.

Any other dict (no ``role``, ``type``, ``prompt`` or ``messages``) is refused, as a
setting ``chat`` does not take is: that item's :class:`Failure` says which.

The engine: ``concurrency`` workers take the next item from one shared iterator (the
input is read as calls free up and results are taken, so a generator of a million
prompts is never all in memory, nor are its answers when the consumer is slower than the
server), call ``chat`` -- retries, rate limits and the image cache are the client's own
-- and hand ``(index, result)`` to the consumer in completion order. A failure is a
:class:`Failure` value; with ``raise_first`` the first one cancels the calls in flight
and its error is raised. However the batch ends, ``ended`` is called: the client drops
its image cache then (a long-lived process would otherwise keep every image it sent).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sized
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from ._inputs import InputError
from ._settings import merge

__all__ = ["Batch", "Failure", "generate_iter", "generate_list", "split_item"]

#: what one call of a batch gives (a ChatResult for ``generate``; vectors for ``embed``)
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Failure:
    """An item that got no answer: the typed error, the attempts made, the request id.

    ``attempts`` counts the requests sent for the item (0 when the item could not
    become a request: an unreadable image, an unknown setting); ``request_id`` is the
    server's id of the last one, when it answered.
    """

    error: Exception
    attempts: int
    request_id: str | None = None

    @property
    def message(self) -> str:
        """The error's message."""
        return str(getattr(self.error, "message", None) or self.error)

    def __str__(self) -> str:
        return f"{type(self.error).__name__}: {self.message}"


def split_item(item: Any, keys: frozenset[str], where: str) -> tuple[Any, dict[str, Any]]:
    """(prompt, its own chat settings) of one item (see the module doc)."""
    if not isinstance(item, dict) or "role" in item or "type" in item:
        return item, {}
    if ("prompt" in item) == ("messages" in item):
        raise InputError(
            f"{where}: a dict item needs exactly one of 'prompt' or 'messages' (with chat "
            "settings beside it), or is one message ('role') or content item ('type')"
        )
    own = dict(item)
    prompt = own.pop("prompt") if "prompt" in own else own.pop("messages")
    unknown = sorted(set(own) - keys)
    if unknown:
        raise InputError(f"{where}: unknown setting {unknown[0]!r}; chat takes {sorted(keys)}")
    return prompt, own


class _Gate:
    """A counting gate with O(1) enter and leave, first come first served.

    (asyncio's Semaphore would do, but scans its waiters on every release: with hundreds
    of workers waiting that is the batch's hottest line.)
    """

    __slots__ = ("room", "waiting")

    def __init__(self, room: int) -> None:
        self.room = room
        self.waiting: deque[asyncio.Future[None]] = deque()

    async def enter(self) -> None:
        if self.room > 0:
            self.room -= 1
            return
        future = asyncio.get_running_loop().create_future()
        self.waiting.append(future)
        await future  # the place is handed over by leave(), not counted back first

    def leave(self) -> None:
        while self.waiting:
            future = self.waiting.popleft()
            if not future.done():  # (a waiter cancelled while waiting is skipped)
                future.set_result(None)
                return
        self.room += 1


class _End:
    """A worker is done (``error``: what stopped it early, if anything)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException | None) -> None:
        self.error = error


def _failure(exc: Exception) -> Failure:
    request_id = getattr(exc, "request_id", None)
    return Failure(exc, int(getattr(exc, "attempts", 0)), request_id)


@dataclass(frozen=True, slots=True)
class Batch(Generic[R]):
    """What one batch runs: ``chat`` over ``items`` with ``settings`` (an item's own win),
    ``width`` calls in flight; ``keys`` are the settings ``chat`` takes. ``unit`` and
    ``label`` name what the progress bar counts."""

    chat: Callable[..., Awaitable[R]]
    items: Iterable[Any]
    settings: Mapping[str, Any]
    width: int
    keys: frozenset[str]
    progress: bool = False
    raise_first: bool = False
    retries: Callable[[], int] | None = None
    #: called once the batch is over, however it ended (the client drops its image cache)
    ended: Callable[[], None] | None = None
    unit: str = "item"
    label: str = "generate"

    @property
    def total(self) -> int | None:
        """The number of items, when the input knows it."""
        return len(self.items) if isinstance(self.items, Sized) else None

    async def one(self, index: int, item: Any) -> R | Failure:
        """One item's call: its answer, or its :class:`Failure`."""
        try:
            prompt, own = split_item(item, self.keys, f"items[{index}]")
            return await self.chat(prompt, **merge(self.settings, own))
        except Exception as exc:  # every failure of one item is that item's answer
            return _failure(exc)

    def bar(self) -> _Bar | None:
        if not self.progress:
            return None
        return _Bar(self.total, self.retries, self.unit, self.label)


async def generate_list(batch: Batch[R]) -> list[R | Failure]:
    """Every item's result in input order (see the module doc).

    :func:`generate_iter` less its hand-over: each worker appends its results itself, so
    an item costs no queue put, no wake-up of a consumer task and no async-generator step
    (measured: a tenth of the client's own work per item in a 10,000-item batch). With
    no consumer between, nothing needs to bound the read-ahead: a worker reads the next
    item only when its call is done.
    """
    total = batch.total
    if total == 0:
        return []
    source = enumerate(batch.items)
    done: list[tuple[int, R | Failure]] = []
    bar = batch.bar()

    async def worker() -> None:
        for index, item in source:  # shared: each worker takes the next item
            result = await batch.one(index, item)
            done.append((index, result))
            if bar is not None:
                bar.update(result)
            if batch.raise_first and isinstance(result, Failure):
                raise result.error

    count = batch.width if total is None else min(batch.width, total)
    workers = [asyncio.create_task(worker()) for _ in range(count)]
    try:
        ended, _ = await asyncio.wait(workers, return_when=asyncio.FIRST_EXCEPTION)
        for task in ended:  # a failure with raise_first, or the input's own iterator's
            if not task.cancelled() and task.exception() is not None:
                raise cast(BaseException, task.exception())
    finally:
        await _stop(workers, bar, batch.ended)
    done.sort(key=_first)
    return [result for _, result in done]


def _first(pair: tuple[int, Any]) -> int:
    return pair[0]


async def _stop(
    workers: list[asyncio.Task[None]], bar: _Bar | None, ended: Callable[[], None] | None
) -> None:
    """Cancel the workers still running (a failure, or the caller went away), wait for
    them, close the bar, say the batch ended."""
    for task in workers:
        task.cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    if bar is not None:
        bar.close()
    if ended is not None:
        ended()


async def generate_iter(batch: Batch[R]) -> AsyncGenerator[tuple[int, R | Failure], None]:
    """``(index, result)`` for every item, in completion order (see the module doc)."""
    total = batch.total
    if total == 0:
        return
    source = enumerate(batch.items)
    queue: asyncio.Queue[tuple[int, R | Failure] | _End] = asyncio.Queue()
    # Entered before an item is read, left when its result is handed over: at most
    # 2 x ``width`` items read and not yet handed over, however slow the consumer (2 x:
    # a consumer busy for a moment does not stall the workers).
    room = _Gate(2 * batch.width)

    async def worker() -> None:
        error: BaseException | None = None
        try:
            while True:
                await room.enter()
                taken = next(source, None)  # shared: each worker takes the next item
                if taken is None:
                    room.leave()
                    return
                queue.put_nowait((taken[0], await batch.one(*taken)))
        except BaseException as exc:  # the input's own iterator failed, or cancelled
            error = exc
        finally:
            queue.put_nowait(_End(error))

    count = batch.width if total is None else min(batch.width, total)
    workers = [asyncio.create_task(worker()) for _ in range(count)]
    bar = batch.bar()
    try:
        running = count
        while running:
            got = await queue.get()
            if isinstance(got, _End):
                running -= 1
                if got.error is not None and not isinstance(got.error, asyncio.CancelledError):
                    raise got.error
                continue
            room.leave()
            if bar is not None:
                bar.update(got[1])
            if batch.raise_first and isinstance(got[1], Failure):
                raise got[1].error
            yield got
    finally:
        await _stop(workers, bar, batch.ended)


class _Bar:
    """tqdm's bar over the items: done/total, rate, ETA; failures and retries after it."""

    def __init__(
        self,
        total: int | None,
        retries: Callable[[], int] | None,
        unit: str = "item",
        label: str = "generate",
    ) -> None:
        from tqdm import tqdm

        self._retries = retries
        self.failed = 0
        self._bar = tqdm(total=total, unit=unit, desc=label, dynamic_ncols=True, mininterval=0.2)

    def update(self, result: object) -> None:
        if isinstance(result, Failure):
            self.failed += 1
        self._bar.set_postfix_str(self._postfix(), refresh=False)
        self._bar.update(1)

    def _postfix(self) -> str:
        text = f"failed {self.failed}"
        if self._retries is not None:
            text += f", retries {self._retries()}"
        return text

    def close(self) -> None:
        with contextlib.suppress(Exception):  # a closed terminal must not hide the results
            self._bar.close()
