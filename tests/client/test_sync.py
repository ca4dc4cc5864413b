"""Client (sync) mirrors AsyncClient: the same methods, and the same results for the same
scripted answers."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Any

import pytest

from interlingua.client import AsyncClient, BadRequestError, ChatStream, Client, SyncChatStream
from interlingua.core import TextDelta

from .conftest import FakeServer, Reply, Stream, call, error_body, openai_body, openai_chunks

RENAMED = {"aclose": "close"}


def public_methods(cls: type) -> set[str]:
    return {
        RENAMED.get(name, name)
        for name, value in inspect.getmembers(cls)
        if not name.startswith("_") and callable(value)
    }


def test_method_parity() -> None:
    assert public_methods(AsyncClient) == public_methods(Client)
    assert public_methods(ChatStream) - {"aclose"} | {"close"} == public_methods(SyncChatStream)
    for name in public_methods(AsyncClient) - {"close"}:
        a = inspect.signature(getattr(AsyncClient, name)).parameters
        s = inspect.signature(getattr(Client, name)).parameters
        # the same keyword-only options (prepare forwards **kwargs to the async one)
        a_kw = {n for n, p in a.items() if p.kind is p.KEYWORD_ONLY}
        s_kw = {n for n, p in s.items() if p.kind is p.KEYWORD_ONLY}
        assert s_kw <= a_kw, name
        if not any(p.kind is p.VAR_KEYWORD for p in s.values()):
            assert s_kw == a_kw, name


def script(server: FakeServer) -> None:
    server.push(
        Reply(
            openai_body(
                "hi",
                reasoning="think",
                usage={
                    "prompt_tokens": 8,
                    "completion_tokens": 3,
                    "prompt_tokens_details": {"cached_tokens": 4},
                },
            )
        ),
        Stream(openai_chunks(["a", "b", "c"])),
        Reply(openai_body(None, tool_calls=[call("c1", "double", '{"n": 21}')])),
        Reply(openai_body("42")),
        Reply(error_body("bad"), 400),
        Reply(openai_body('{"k": [1]}')),
    )


def summary(chat: Any, events: list[Any], tools: Any, error: BaseException, parsed: Any) -> Any:
    return (
        chat.text,
        chat.reasoning,
        chat.usage,
        chat.stop_reason,
        events,
        tools.text,
        [m.role for m in tools.messages],
        type(error),
        error.status,  # type: ignore[attr-defined]
        parsed,
    )


def double(n: int) -> int:
    return 2 * n


async def run_async(server: FakeServer) -> Any:
    script(server)
    async with AsyncClient(server.url + "/v1", model="m", max_retries=0) as c:
        chat = await c.chat("x", think_tags=True)
        async with c.stream("y") as stream:
            events = [e async for e in stream]
        tools = await c.run_tools("z", {"double": double})
        with pytest.raises(BadRequestError) as info:
            await c.chat("bad")
        parsed = (await c.chat("j", parse_json=True)).parsed
    return summary(chat, events, tools, info.value, parsed)


def run_sync(server: FakeServer) -> Any:
    script(server)
    with Client(server.url + "/v1", model="m", max_retries=0) as c:
        chat = c.chat("x", think_tags=True)
        with c.stream("y") as stream:
            events = list(stream)
        tools = c.run_tools("z", {"double": double})
        with pytest.raises(BadRequestError) as info:
            c.chat("bad")
        parsed = c.chat("j", parse_json=True).parsed
    return summary(chat, events, tools, info.value, parsed)


async def test_same_results(server: FakeServer) -> None:
    expected = await run_async(server)
    bodies_async = server.bodies
    server.seen.clear()
    # the sync client blocks: run it off this test's event loop
    got = await asyncio.to_thread(run_sync, server)
    assert got == expected
    assert server.bodies == bodies_async  # and the same requests went out
    assert expected[0] == "<think>\nthink\n</think>\n\nhi"
    assert [e.text for e in expected[4] if isinstance(e, TextDelta)] == ["a", "b", "c"]
    assert expected[5] == "42"


def test_sync_stream_text_and_early_exit(server: FakeServer) -> None:
    server.push(Stream(openai_chunks(["x", "y", "z"])), Stream(openai_chunks(["1", "2"])))
    with Client(server.url + "/v1", model="m") as c:
        with c.stream("s") as stream:
            assert list(stream.text_stream()) == ["x", "y", "z"]
        assert stream.result is not None and stream.result.usage.output_tokens == 3
        with c.stream("t") as stream:
            for _ in stream:
                break  # leaving early closes the response
        assert c.chat("after").text == "echo: after"


def test_close_stops_the_loop_thread(server: FakeServer) -> None:
    c = Client(server.url + "/v1", model="m")
    assert c.chat("x").text == "echo: x"
    thread = c._runner._thread
    assert thread.is_alive() and thread in threading.enumerate()
    c.close()
    c.close()  # idempotent
    assert not thread.is_alive()
    with pytest.raises(RuntimeError, match="closed"):
        c.chat("x")
