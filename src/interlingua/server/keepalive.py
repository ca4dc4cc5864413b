"""Keep-alive ticks for translated streams whose upstream goes quiet.

A reasoning model may think for minutes before its next event, and proxies, load
balancers and some clients drop an HTTP stream that stays silent for long. The Anthropic
API itself sends ``event: ping`` during such silences; :func:`with_keepalive` lets the
gateway do the same for every translated stream: it yields the source's items and
``None`` whenever ``interval`` seconds pass without one, and the caller writes the
dialect's keep-alive (Anthropic ``ping``, an SSE comment for OpenAI) for each ``None``.

The source is read by a pump task: a timeout on the read itself would cancel the
upstream's generator mid-await and break it. The pump asks for the next item only after
the consumer is done with the previous one, exactly as a plain ``async for`` would.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Generic, TypeVar

T = TypeVar("T")

#: seconds of upstream silence before a keep-alive is sent
KEEPALIVE_SECONDS = 15.0


class _Failed:
    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


class _End:
    __slots__ = ()


_END = _End()


class _Pump(Generic[T]):
    def __init__(self, source: AsyncIterator[T]) -> None:
        self.source = source
        self.queue: asyncio.Queue[T | _Failed | _End] = asyncio.Queue(maxsize=1)

    async def run(self) -> None:
        try:
            async for item in self.source:
                await self.queue.put(item)
                # Read the next item only once the consumer is done with this one: no
                # read-ahead, so after an error item nothing more is asked of the source.
                await self.queue.join()
        except Exception as exc:  # handed to the consumer, which raises it in its place
            # The error's traceback keeps this frame: drop the last item (it may be
            # large) so it does not live as long as the error.
            item = None
            await self.queue.put(_Failed(exc))
            return
        await self.queue.put(_END)


async def with_keepalive(source: AsyncIterator[T], interval: float) -> AsyncIterator[T | None]:
    """``source``'s items, and ``None`` after every ``interval`` seconds without one.

    Closing this generator cancels the pump and closes ``source``.
    """
    pump = _Pump(source)
    task = asyncio.create_task(pump.run())
    try:
        while True:
            try:
                async with asyncio.timeout(interval):
                    item = await pump.queue.get()
            except TimeoutError:
                yield None
                continue
            if isinstance(item, _End):
                return
            if isinstance(item, _Failed):
                error = item.error
                del item
                try:
                    raise error
                finally:
                    # Not kept by this frame, which its traceback keeps: no cycle, so
                    # the error and what it holds are freed without a full gc pass.
                    del error
            yield item
            pump.queue.task_done()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            await aclose()
