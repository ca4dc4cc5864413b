"""Client: the synchronous API, the AsyncClient driven on a private event-loop thread.

Every method of :class:`~interlingua.client.AsyncClient` has a twin here with the same
name and arguments (``aclose`` -> ``close``, async context managers -> plain ones); the
parity tests check both the method list and the results. One loop thread per client keeps
the pooled connections, the rate limiter and the image cache alive between calls, which
``asyncio.run`` per call would throw away; the thread is a daemon, so a client that is
never closed cannot hang interpreter exit.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import (
    AsyncIterator,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from concurrent.futures import Future
from typing import Any, TypeVar

from ..core import Request, StreamEvent, ToolSpec
from ..limits import RateLimiter
from ._async import AsyncClient, RawReply
from ._embed import DEFAULT_BATCH_SIZE
from ._generate import Failure
from ._outputs import ChatResult
from ._stream import ChatStream
from ._tools import DEFAULT_MAX_TURNS

__all__ = ["Client", "SyncChatStream"]

T = TypeVar("T")


class _LoopThread:
    """An event loop running forever in a daemon thread; ``run`` blocks on a coroutine."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="interlingua-client", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            # asyncio.to_thread uses the loop's default executor (image encoding, sync
            # tools): shut it down with the loop so no worker thread outlives the client.
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
            self.loop.close()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a sync Client method was called from its own loop thread")
        if self.loop.is_closed() or not self._thread.is_alive():
            coro.close()
            raise RuntimeError("this client is closed; create a new one")
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result()
        except KeyboardInterrupt:
            future.cancel()
            raise

    def stop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join()


def _drive(runner: _LoopThread, make: Callable[[], AsyncIterator[T]]) -> Iterator[T]:
    """Iterate an async iterator made (on the loop) by ``make``, one item per loop trip;
    leaving early closes it there."""

    async def start() -> AsyncIterator[T]:
        return make()

    agen = runner.run(start())
    finished = False
    try:
        while True:
            try:
                yield runner.run(agen.__anext__())  # type: ignore[arg-type]
            except StopAsyncIteration:
                finished = True
                return
    finally:
        if not finished and hasattr(agen, "aclose"):
            runner.run(agen.aclose())


class SyncChatStream:
    """The sync twin of :class:`~interlingua.client.ChatStream` (a context manager)."""

    def __init__(self, runner: _LoopThread, stream: ChatStream) -> None:
        self._runner = runner
        self._stream = stream

    def __enter__(self) -> SyncChatStream:
        self._runner.run(self._stream.__aenter__())
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP response and release the rate-limit slot."""
        self._runner.run(self._stream.aclose())

    def __iter__(self) -> Iterator[StreamEvent]:
        return _drive(self._runner, self._stream.__aiter__)

    def text_stream(self) -> Iterator[str]:
        """Just the answer text, piece by piece."""
        return _drive(self._runner, self._stream.text_stream)

    def final(self) -> ChatResult:
        """Read whatever is left and return the folded answer."""
        return self._runner.run(self._stream.final())

    @property
    def result(self) -> ChatResult | None:
        """The folded answer once the stream has ended."""
        return self._stream.result

    @property
    def request_id(self) -> str | None:
        """The server's request id."""
        return self._stream.request_id


class Client:
    """The synchronous client; takes exactly :class:`AsyncClient`'s arguments.

    >>> with Client("http://127.0.0.1:8400/v1", model="gpt-4o-mini") as c:  # doctest: +SKIP
    ...     print(c.chat("Hello").text)
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._runner = _LoopThread()
        try:
            self._async = AsyncClient(*args, **kwargs)
        except BaseException:
            self._runner.stop()
            raise

    # --- attributes of the async client ---

    @property
    def async_client(self) -> AsyncClient:
        """The AsyncClient doing the work (runs on this client's private loop)."""
        return self._async

    @property
    def base_url(self) -> str:
        """The server's base URL."""
        return self._async.base_url

    @property
    def url(self) -> str:
        """The endpoint calls are POSTed to."""
        return self._async.url

    @property
    def dialect(self) -> str:
        """``openai`` or ``anthropic``."""
        return self._async.dialect

    @property
    def model(self) -> str | None:
        """The default model name."""
        return self._async.model

    @property
    def limiter(self) -> RateLimiter:
        """The rate limiter every call goes through."""
        return self._async.limiter

    @property
    def retries(self) -> int:
        """Retries made so far by this client."""
        return self._async.retries

    @property
    def empty_retries(self) -> int:
        """Of the retries: empty answers retried (``retry_on_empty``)."""
        return self._async.empty_retries

    @property
    def unreadable_retries(self) -> int:
        """Of the retries: unreadable 2xx bodies retried (``retry_on_empty``)."""
        return self._async.unreadable_retries

    @property
    def defaults(self) -> dict[str, Any]:
        """Settings merged into every call (the call's own win)."""
        return self._async.defaults

    @property
    def concurrency(self) -> int:
        """Calls ``generate`` keeps in flight by default."""
        return self._async.concurrency

    # --- lifecycle ---

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the pooled connections and stop the loop thread (idempotent)."""
        if self._runner.loop.is_closed():
            return
        try:
            self._runner.run(self._async.aclose())
        finally:
            self._runner.stop()

    # --- calls ---

    def render(self, request: Request) -> dict[str, Any]:
        """The JSON body sent for ``request``; see :meth:`AsyncClient.render`."""
        return self._async.render(request)

    def prepare(self, prompt: Any, **kwargs: Any) -> Request:
        """The neutral request ``chat`` would send; see :meth:`AsyncClient.prepare`."""
        return self._runner.run(self._async.prepare(prompt, **kwargs))

    def chat(
        self,
        prompt: Any,
        *,
        parse_json: bool | None = None,
        think_tags: bool | None = None,
        retry_on_empty: bool | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        """One model answer; see :meth:`AsyncClient.chat`."""
        return self._runner.run(
            self._async.chat(
                prompt,
                parse_json=parse_json,
                think_tags=think_tags,
                retry_on_empty=retry_on_empty,
                **kwargs,
            )
        )

    def send(
        self,
        request: Request,
        *,
        parse_json: bool | None = None,
        think_tags: bool | None = None,
        response_format: Any = None,
        retry_on_empty: bool | None = None,
    ) -> ChatResult:
        """Send a prepared neutral request; see :meth:`AsyncClient.send`."""
        return self._runner.run(
            self._async.send(
                request,
                parse_json=parse_json,
                think_tags=think_tags,
                response_format=response_format,
                retry_on_empty=retry_on_empty,
            )
        )

    def stream(
        self,
        prompt: Any,
        *,
        think_tags: bool | None = None,
        parse_json: bool | None = None,
        **kwargs: Any,
    ) -> SyncChatStream:
        """A streaming call: ``with client.stream(...) as s: for event in s: ...``."""
        stream = self._async.stream(prompt, think_tags=think_tags, parse_json=parse_json, **kwargs)
        return SyncChatStream(self._runner, stream)

    def stream_request(self, request: Request, *, think_tags: bool | None = None) -> SyncChatStream:
        """Stream a prepared neutral request."""
        return SyncChatStream(
            self._runner, self._async.stream_request(request, think_tags=think_tags)
        )

    def run_tools(
        self,
        prompt: Any,
        tools: Mapping[str, Callable[..., Any]],
        *,
        max_turns: int = DEFAULT_MAX_TURNS,
        specs: Sequence[ToolSpec | Mapping[str, Any]] | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        """The agent loop; see :meth:`AsyncClient.run_tools` (async tools run on the loop)."""
        return self._runner.run(
            self._async.run_tools(prompt, tools, max_turns=max_turns, specs=specs, **kwargs)
        )

    def clear_cache(self) -> None:
        """Drop the cached image encodings; see :meth:`AsyncClient.clear_cache`."""
        self._async.clear_cache()

    def send_raw(
        self,
        body: Mapping[str, Any] | bytes,
        *,
        estimated_tokens: int = 0,
        retry_on_empty: bool = False,
        log_failure: bool = True,
        endpoint: str | None = None,
    ) -> RawReply:
        """POST a ready body with retries and rate limits; see :meth:`AsyncClient.send_raw`."""
        return self._runner.run(
            self._async.send_raw(
                body,
                estimated_tokens=estimated_tokens,
                retry_on_empty=retry_on_empty,
                log_failure=log_failure,
                endpoint=endpoint,
            )
        )

    def generate(
        self,
        items: Iterable[Any],
        *,
        concurrency: int | None = None,
        progress: bool = False,
        on_error: str = "return",
        **defaults: Any,
    ) -> list[ChatResult | Failure]:
        """One answer per item, in input order; see :meth:`AsyncClient.generate`.

        Ctrl-C cancels the calls in flight and raises KeyboardInterrupt.
        """
        return self._runner.run(
            self._async.generate(
                items, concurrency=concurrency, progress=progress, on_error=on_error, **defaults
            )
        )

    def embed(
        self,
        texts: Iterable[str | list[int]],
        *,
        model: str | None = None,
        dimensions: int | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        concurrency: int | None = None,
        encoding_format: str = "base64",
        user: str | None = None,
        extra_body: Mapping[str, Any] | None = None,
        progress: bool = False,
        on_error: str = "return",
    ) -> list[list[float] | Failure]:
        """One vector per text, in input order; see :meth:`AsyncClient.embed`."""
        return self._runner.run(
            self._async.embed(
                texts, model=model, dimensions=dimensions, batch_size=batch_size,
                concurrency=concurrency, encoding_format=encoding_format, user=user,
                extra_body=extra_body, progress=progress, on_error=on_error,
            )
        )  # fmt: skip

    def generate_iter(
        self,
        items: Iterable[Any],
        *,
        concurrency: int | None = None,
        progress: bool = False,
        on_error: str = "return",
        **defaults: Any,
    ) -> Iterator[tuple[int, ChatResult | Failure]]:
        """``(index, result)`` pairs in completion order; see :meth:`AsyncClient.generate_iter`.

        The items are read on the client's loop thread; leaving the loop early cancels
        the calls in flight.
        """
        # Checked here, at the call, rather than at the first next().
        made = self._async.generate_iter(
            items, concurrency=concurrency, progress=progress, on_error=on_error, **defaults
        )
        return _drive(self._runner, lambda: made)
