"""generate / generate_iter: in-process batches through one client (sync and async), and
client-wide defaults, against the scripted server and the live gateway in both dialects."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from interlingua.client import (
    AsyncClient,
    BadRequestError,
    ChatResult,
    Client,
    Failure,
    InputError,
    InternalServerError,
    RateLimit,
)
from interlingua.core import Response, StopReason, TextPart, Usage
from interlingua.errors import InvalidRequestError

from .conftest import (
    FakeServer,
    Gateway,
    Reply,
    Seen,
    Stream,
    error_body,
    openai_body,
    openai_chunks,
)
from .test_client_gateway import DIALECTS, client_for


def texts(results: list[ChatResult | Failure]) -> list[str]:
    return [r.text if isinstance(r, ChatResult) else f"failed: {r}" for r in results]


async def test_results_in_input_order_within_the_concurrency(server: FakeServer) -> None:
    server.hold = 0.02
    prompts = [f"p{i}" for i in range(40)]
    async with AsyncClient(server.url + "/v1", model="m") as c:
        results = await c.generate(prompts, concurrency=5)
    assert texts(results) == [f"echo: p{i}" for i in range(40)]
    assert 1 < server.max_in_flight <= 5
    assert all(r.request_id and r.latency is not None for r in results)  # type: ignore[union-attr]


async def test_an_empty_list_and_an_empty_generator(server: FakeServer) -> None:
    async with AsyncClient(server.url + "/v1", model="m") as c:
        assert await c.generate([]) == []
        assert await c.generate(iter(())) == []
        assert [pair async for pair in c.generate_iter([])] == []
    assert server.seen == []


async def test_generate_iter_yields_in_completion_order(server: FakeServer) -> None:
    def slow_first(seen: Seen) -> Reply:
        text = seen.body["messages"][-1]["content"]
        return Reply(openai_body(f"echo: {text}"), delay=0.3 if text == "slow" else 0.0)

    server.push(slow_first, slow_first, slow_first)
    async with AsyncClient(server.url + "/v1", model="m") as c:
        pairs = [(i, r.text) async for i, r in c.generate_iter(["slow", "a", "b"])]  # type: ignore[union-attr]
    assert pairs[-1] == (0, "echo: slow")
    assert sorted(pairs) == [(0, "echo: slow"), (1, "echo: a"), (2, "echo: b")]


async def test_a_lazy_input_is_read_as_calls_free_up(server: FakeServer) -> None:
    pulled: list[int] = []

    def endless() -> Iterator[str]:
        for i in itertools.count():
            pulled.append(i)
            yield f"q{i}"

    server.hold = 0.01
    async with AsyncClient(server.url + "/v1", model="m") as c:
        got = []
        async with contextlib.aclosing(c.generate_iter(endless(), concurrency=3)) as pairs:
            async for index, result in pairs:
                got.append((index, result))
                if len(got) == 5:
                    break
    # 5 handed over, and at most 2 x 3 more read (in flight, or finished and not taken)
    assert len(pulled) <= 5 + 2 * 3
    assert all(isinstance(r, ChatResult) for _, r in got)


async def test_generate_reads_a_lazy_input_as_calls_free_up_and_raises_its_error(
    server: FakeServer,
) -> None:
    pulled: list[int] = []
    ahead: list[int] = []  # items read but not yet at the server, as each one arrives

    def items(n: int, then: Exception | None = None) -> Iterator[str]:
        for i in range(n):
            pulled.append(i)
            yield f"q{i}"
        if then is not None:
            raise then

    def answer(seen: Seen) -> Reply:
        ahead.append(len(pulled) - len(server.seen))
        return Reply(openai_body(f"echo: {seen.body['messages'][-1]['content']}"), delay=0.02)

    server.push(*[answer] * 20)
    async with AsyncClient(server.url + "/v1", model="m") as c:
        results = await c.generate(items(8), concurrency=3)
        assert [r.text for r in results] == [f"echo: q{i}" for i in range(8)]  # type: ignore[union-attr]
        assert max(ahead) <= 3  # never more read than calls in flight
        pulled.clear()
        server.seen.clear()
        with pytest.raises(ValueError, match="the input broke"):
            await c.generate(items(4, ValueError("the input broke")), concurrency=2)
        assert len(server.seen) <= 4  # the calls in flight were cancelled, none sent after


async def test_failures_are_returned_per_item(server: FakeServer) -> None:
    def answer(seen: Seen) -> Reply:
        text = seen.body["messages"][-1]["content"]
        if text == "bad":
            return Reply(error_body("no good"), 400, headers={"x-request-id": "req_bad"})
        if text == "down":
            return Reply(error_body("fell over", "server_error"), 500)
        return Reply(openai_body(f"echo: {text}"))

    server.push(*[answer] * 6)
    async with AsyncClient(server.url + "/v1", model="m", max_retries=2) as c:
        c.retry_base = 0.0
        results = await c.generate(["ok", "bad", "down", {"prompt": "x", "colour": "red"}])
    ok, bad, down, unknown = results
    assert isinstance(ok, ChatResult) and ok.text == "echo: ok"
    assert isinstance(bad, Failure) and isinstance(bad.error, BadRequestError)
    assert (bad.attempts, bad.request_id) == (1, "req_bad")
    assert "no good" in bad.message and str(bad).startswith("BadRequestError: ")
    assert isinstance(down, Failure) and isinstance(down.error, InternalServerError)
    assert down.attempts == 3  # the first try and max_retries=2
    assert isinstance(unknown, Failure) and isinstance(unknown.error, InputError)
    assert unknown.attempts == 0 and "'colour'" in unknown.message
    assert len(server.seen) == 1 + 1 + 3


async def test_on_error_raise_cancels_the_rest(server: FakeServer) -> None:
    def answer(seen: Seen) -> Reply:
        if seen.body["messages"][-1]["content"] == "p1":
            return Reply(error_body("no"), 400)
        return Reply(openai_body("fine"), delay=0.2)

    server.push(*[answer] * 20)
    async with AsyncClient(server.url + "/v1", model="m") as c:
        with pytest.raises(BadRequestError):
            await c.generate([f"p{i}" for i in range(20)], concurrency=2, on_error="raise")
        await asyncio.sleep(0.3)
        # p0 (in flight, cancelled), p1 (failed), perhaps p2: never the other 17
        assert len(server.seen) <= 3
        server.script.clear()
        assert (await c.chat("after")).text == "echo: after"  # the client still works


async def test_item_forms_and_settings_precedence(server: FakeServer) -> None:
    items: list[Any] = [
        "a string",
        ["text and", {"type": "text", "value": "items"}],
        {"role": "user", "content": "a message"},
        {"type": "text", "value": "one item"},
        {"prompt": "own settings", "temperature": 0.9, "max_tokens": 5},
        {"messages": [{"role": "user", "content": "messages key"}], "max_tokens": None},
    ]
    async with AsyncClient(
        server.url + "/v1", model="m", defaults={"temperature": 0.2, "max_tokens": 512}
    ) as c:
        results = await c.generate(items, temperature=0.5, concurrency=1)
    assert texts(results) == [
        "echo: a string", "echo: text anditems", "echo: a message", "echo: one item",
        "echo: own settings", "echo: messages key",
    ]  # fmt: skip
    settings = [(b.get("temperature"), b.get("max_tokens")) for b in server.bodies]
    # item > generate(...) > the client's defaults; an item's None is "not given"
    assert settings == [(0.5, 512)] * 4 + [(0.9, 5), (0.5, 512)]


async def test_a_dict_that_is_no_item_is_that_items_failure(server: FakeServer) -> None:
    async with AsyncClient(server.url + "/v1", model="m") as c:
        (failure,) = await c.generate([{"text": "hi"}])
        (both,) = await c.generate([{"prompt": "a", "messages": []}])
    assert isinstance(failure, Failure) and "exactly one of 'prompt' or 'messages'" in str(failure)
    assert isinstance(both, Failure) and both.attempts == 0
    assert server.seen == []


async def test_bad_arguments_raise_at_once(server: FakeServer) -> None:
    async with AsyncClient(server.url + "/v1", model="m") as c:
        with pytest.raises(TypeError, match="generate: unknown setting 'temprature'"):
            await c.generate(["x"], temprature=0.1)
        with pytest.raises(ValueError, match="on_error"):
            await c.generate(["x"], on_error="ignore")
        with pytest.raises(ValueError, match="concurrency"):
            await c.generate(["x"], concurrency=0)
    with pytest.raises(TypeError, match="defaults: unknown setting 'colour'"):
        AsyncClient(server.url + "/v1", defaults={"colour": "red"})


async def test_defaults_take_the_sampling_and_audio_settings(server: FakeServer) -> None:
    """The settings a default may set are prepare's: the sampling, logprobs and audio
    ones too, sent as any call's would be; a name prepare lacks is refused."""
    defaults = {"min_p": 0.1, "logprobs": True, "repetition_penalty": 1.1, "top_k": 4}
    async with AsyncClient(server.url + "/v1", model="m", defaults=defaults) as c:
        assert c.defaults == defaults
        await c.chat("hi")
        await c.chat("again", min_p=0.3, logprobs=None)
        request = await c.prepare("p", drop_unsupported=True, paths_as_images=False)
    first, second = server.bodies
    assert (first["min_p"], first["logprobs"], first["repetition_penalty"]) == (0.1, True, 1.1)
    assert (second["min_p"], second["logprobs"], second["top_k"]) == (0.3, True, 4)
    assert (request.min_p, request.logprobs) == (0.1, True)
    audio = {"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}}
    async with AsyncClient(server.url + "/v1", model="m", defaults=audio) as c:
        assert (await c.prepare("p")).output_audio == {"voice": "alloy", "format": "wav"}
    with pytest.raises(TypeError, match="defaults: unknown setting 'min_q'"):
        AsyncClient(server.url + "/v1", defaults={"min_p": 0.1, "min_q": 0.2})
    with Client(server.url + "/v1", model="m", defaults={"min_p": 0.1, "logprobs": True}) as sc:
        assert sc.prepare("p").min_p == 0.1


async def test_the_clients_rate_limit_bounds_a_batch(server: FakeServer) -> None:
    server.hold = 0.03
    limit = RateLimit(max_concurrency=2)
    async with AsyncClient(server.url + "/v1", model="m", rate_limit=limit) as c:
        assert c.concurrency == 2
        results = await c.generate([f"p{i}" for i in range(8)], concurrency=8)
    assert len(texts(results)) == 8 and server.max_in_flight == 2


async def test_progress_bar(server: FakeServer, capsys: pytest.CaptureFixture[str]) -> None:
    server.push(Reply(error_body("no"), 400))
    async with AsyncClient(server.url + "/v1", model="m") as c:
        await c.generate(["a", "b", "c"], progress=True, concurrency=1)
    err = capsys.readouterr().err
    assert "generate" in err and "3/3" in err and "failed 1" in err


def test_sync_generate_and_iter(server: FakeServer) -> None:
    server.push(Reply(error_body("no"), 400))
    with Client(server.url + "/v1", model="m", defaults={"max_tokens": 7}) as c:
        first = c.generate(["x", "y", "z"], concurrency=1)
        pairs = sorted((i, r.text) for i, r in c.generate_iter(["u", "v"]))  # type: ignore[union-attr]
        # leaving early cancels the rest, and the client goes on working
        with contextlib.closing(c.generate_iter([f"w{i}" for i in range(50)], concurrency=2)) as it:
            next(it)
        assert c.chat("after").text == "echo: after"
        assert c.defaults == {"max_tokens": 7}
    assert isinstance(first[0], Failure) and texts(first)[1:] == ["echo: y", "echo: z"]
    assert pairs == [(0, "echo: u"), (1, "echo: v")]
    assert all(b["max_tokens"] == 7 for b in server.bodies)
    assert len(server.seen) <= 3 + 2 + (1 + 2 * 2) + 1  # w: one taken, 2 x 2 more at most


async def test_defaults_reach_every_kind_of_call(server: FakeServer) -> None:
    defaults = {
        "temperature": 0.2, "system": "be brief", "think_tags": True,
        "extra_body": {"top_k": 3, "chat_template_kwargs": {"x": 1}},
    }  # fmt: skip
    server.push(Reply(openai_body("4", reasoning="2+2")), Reply(openai_body("echo: hi")))
    server.push(Stream(openai_chunks(["s"])))
    async with AsyncClient(server.url + "/v1", model="m", defaults=defaults) as c:
        folded = await c.chat("2+2?", extra_body={"top_k": 5})
        plain = await c.chat("hi", think_tags=False, temperature=None, system="other")
        request = await c.prepare("p")
        async with c.stream("s") as stream:
            await stream.final()
        await c.run_tools("t", {})
    assert folded.text == "<think>\n2+2\n</think>\n\n4" and plain.text == "echo: hi"
    first, second, third, fourth = server.bodies
    assert first["temperature"] == 0.2 and first["messages"][0]["content"] == "be brief"
    assert (first["top_k"], first["chat_template_kwargs"]) == (5, {"x": 1})  # merged, call wins
    assert second["temperature"] == 0.2 and second["messages"][0]["content"] == "other"
    assert request.temperature == 0.2 and request.system_text == "be brief"
    assert third["temperature"] == 0.2 and third["stream"] is True
    assert fourth["messages"][0]["content"] == "be brief"


# --- the live gateway -----------------------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_generate_through_the_gateway(gateway: Gateway, dialect: str) -> None:
    gateway.fake.enqueue(Response("r", "fake", (TextPart("first"),), usage=Usage(3, 1)))
    gateway.fake.enqueue(InvalidRequestError("not that one"))
    items: list[Any] = [
        "one",
        "two",
        [{"type": "system", "value": "sys"}, {"type": "text", "value": "three"}],
        {"prompt": "four", "max_tokens": 9},
    ]
    async with client_for(gateway, dialect, defaults={"max_tokens": 33}) as c:
        results = await c.generate(items, concurrency=1)
    first, second, third, fourth = results
    assert isinstance(first, ChatResult) and first.text == "first"
    assert first.stop_reason is StopReason.END_TURN and first.ttft is not None
    assert isinstance(second, Failure) and isinstance(second.error, BadRequestError)
    assert second.attempts == 1 and second.request_id  # the gateway's request id
    assert texts([third, fourth]) == ["echo: three", "echo: four"]
    asked = gateway.fake.requests[-2:]
    assert asked[0].system_text == "sys"
    assert [r.max_tokens for r in asked] == [33, 9]
