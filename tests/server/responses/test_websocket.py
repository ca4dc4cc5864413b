"""The Responses API over a WebSocket (server/responses/websocket.py), as Codex CLI drives it.

The gateway runs on uvicorn with the production protocols (the guard's HTTP protocol,
server/process/socket_guard.py's WebSocket one) over scripted upstreams speaking the Chat wire
and the Anthropic wire (the translated path) and the Responses wire (the passthrough
path); the `websockets` library is the client. Each response's frames must be the SSE
stream's events for the same request; warm-ups, chaining by ``previous_response_id``
with ``store: false``, error frames, auth, queueing and hang-ups as the module says.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
import websockets
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from interlingua.config import parse_config
from interlingua.core import (
    Request,
    StopReason,
    StreamError,
    StreamEvent,
    ToolCallPart,
    ToolResultPart,
    unfold,
)
from interlingua.errors import RateLimitError, UpstreamError
from interlingua.sse import SSEDecoder
from interlingua.upstreams.fake import FakeUpstream

from ...conformance.cases import reply
from .socket_helpers import (
    SlowUpstream,
    create,
    guarded_gateway,
    response_events,
    until,
    ws_url,
)

CONFIG = parse_config(
    {
        "upstreams": {
            "oai": {"kind": "fake"},
            "ant": {"kind": "fake"},
            "rsp": {"kind": "fake"},
            "slow": {"kind": "fake"},
            "hold": {"kind": "fake"},
        },
        "models": [
            {"name": "via-chat", "upstream": "oai", "model": "deepseek-chat"},
            {"name": "via-anthropic", "upstream": "ant", "model": "claude-haiku"},
            {"name": "via-responses", "upstream": "rsp", "model": "gpt-5"},
            {"name": "slow", "upstream": "slow"},
            {"name": "hold", "upstream": "hold"},
        ],
    }
)
MODELS = ["via-chat", "via-anthropic", "via-responses"]
Served = tuple[str, dict[str, Any]]


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    fakes: dict[str, Any] = {
        "via-chat": FakeUpstream("oai", wire="openai", chunk_size=3),
        "via-anthropic": FakeUpstream("ant", wire="anthropic", chunk_size=3),
        "via-responses": FakeUpstream("rsp", wire="responses", chunk_size=3),
        "slow": SlowUpstream("slow", deltas=2000, pause=0.01),
        "hold": HoldingUpstream("hold"),
    }
    upstreams = {
        "oai": fakes["via-chat"],
        "ant": fakes["via-anthropic"],
        "rsp": fakes["via-responses"],
        "slow": fakes["slow"],
        "hold": fakes["hold"],
    }
    with guarded_gateway(CONFIG, upstreams) as (url, _server):
        yield url, fakes


def _sse_events(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``data:`` JSON of ``POST /v1/responses`` streamed."""
    decoder = SSEDecoder()
    with httpx.stream("POST", url + "/v1/responses", json={**body, "stream": True}) as resp:
        assert resp.status_code == 200
        events = [e for chunk in resp.iter_bytes() for e in decoder.decode(chunk)]
    return [json.loads(e.data) for e in [*events, *decoder.flush()]]


@pytest.mark.parametrize("model", MODELS)
async def test_frames_are_the_sse_stream_events(served: Served, model: str) -> None:
    url, fakes = served
    answer = reply(
        "Checking.",
        ToolCallPart("call_1", "get_weather", '{"city":"Paris"}'),
        stop=StopReason.TOOL_USE,
    )
    tool = {"type": "function", "name": "get_weather", "parameters": {"type": "object"}}
    body = {"model": model, "input": "Weather in Paris?", "tools": [tool], "store": False}
    fakes[model].enqueue(answer)
    sse = _sse_events(url, body)
    fakes[model].enqueue(answer)
    async with connect(ws_url(url)) as ws:
        await ws.send(json.dumps({"type": "response.create", **body}))
        frames = await response_events(ws)
    assert [e["type"] for e in frames] == [e["type"] for e in sse]
    assert [e["sequence_number"] for e in frames] == list(range(len(sse)))
    # The scripted answer has fixed ids; the time a translated answer is stamped with is
    # the second it began (the two runs may straddle a second on a busy machine).
    times = [e["response"].pop("created_at") for e in [*frames, *sse] if "response" in e]
    assert max(times) - min(times) <= 5
    assert frames == sse
    assert frames[-1]["type"] == "response.completed"


async def test_warm_up_then_chaining_with_store_false(served: Served) -> None:
    url, fakes = served
    fake: FakeUpstream = fakes["via-chat"]
    tool = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    settings = {"instructions": "Be brief.", "tools": [tool], "store": False}
    before = len(fake.requests)
    async with connect(
        ws_url(url), additional_headers={"OpenAI-Beta": "responses_websockets=2026-02-06"}
    ) as ws:
        # Codex's prewarm: the whole prompt, generate false; it waits for completed.
        await ws.send(create("via-chat", "first", generate=False, **settings))
        warm = await response_events(ws)
        assert [e["type"] for e in warm] == [
            "response.created",
            "response.in_progress",
            "response.completed",
        ]
        assert warm[-1]["response"]["output"] == []
        assert len(fake.requests) == before  # nothing was generated
        warm_id = warm[-1]["response"]["id"]

        fake.enqueue(
            replace(
                reply("Looking.", ToolCallPart("call_9", "lookup", "{}"), stop=StopReason.TOOL_USE),
                id="resp_turn2",
            )
        )
        await ws.send(create("via-chat", "second", previous_response_id=warm_id, **settings))
        turn2 = await response_events(ws)
        assert turn2[-1]["type"] == "response.completed"
        sent = fake.requests[-1]
        assert sent.system_text == "Be brief."  # (this request's own, not inherited)
        assert [m.role for m in sent.messages if m.role != "system"] == ["user", "user"]

        # Codex's next request: only the tool's output, chained to turn 2.
        output = {"type": "function_call_output", "call_id": "call_9", "output": "42"}
        fake.enqueue(replace(reply("It is 42."), id="resp_turn3"))
        turn2_id = turn2[-1]["response"]["id"]
        await ws.send(create("via-chat", [output], previous_response_id=turn2_id, **settings))
        turn3 = await response_events(ws)
        assert turn3[-1]["response"]["output"][0]["content"][0]["text"] == "It is 42."
    whole = [m for m in fake.requests[-1].messages if m.role != "system"]
    assert [m.role for m in whole] == ["user", "user", "assistant", "user"]
    assert [p.id for p in whole[2].parts if isinstance(p, ToolCallPart)] == ["call_9"]
    result = whole[3].parts[0]
    assert isinstance(result, ToolResultPart) and result.tool_call_id == "call_9"
    # The upstream got it all through its own wire too (assistant tool call, tool result).
    assert [m["role"] for m in fake.wire_requests[-1]["messages"]][-3:] == [
        "user",
        "assistant",
        "tool",
    ]


async def test_a_connection_does_not_see_another_ones_chain(served: Served) -> None:
    url, _fakes = served
    async with connect(ws_url(url)) as first:
        await first.send(create("via-chat", "hello", store=False))
        first_id = (await response_events(first))[-1]["response"]["id"]
        async with connect(ws_url(url)) as second:
            await second.send(create("via-chat", "more", previous_response_id=first_id))
            (error,) = await response_events(second)
            assert error["type"] == "error" and error["status"] in (400, 404)
            assert error["error"]["param"] == "previous_response_id"
            # ... and the socket goes on; the first one still continues its own.
            await second.send(create("via-chat", "fresh"))
            assert (await response_events(second))[-1]["type"] == "response.completed"
        await first.send(create("via-chat", "more", previous_response_id=first_id))
        assert (await response_events(first))[-1]["type"] == "response.completed"


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("not json", "invalid_json"),
        ("[1, 2]", "invalid_frame"),
        (b"\x00\x01", "invalid_frame"),
        ('{"type": "session.update"}', "unknown_event_type"),
        ('{"model": "via-chat"}', "unknown_event_type"),
        (create("via-chat", "x", generate="no"), None),
        (create("via-chat", "x", background=True), None),
        (create("no-such-model", "x"), "model_not_found"),
        (create("via-chat", "x", tools=[{"type": "function"}]), None),
    ],
)
async def test_bad_frames_get_an_error_frame_and_the_socket_stays_open(
    served: Served, frame: str | bytes, code: str | None
) -> None:
    url, _fakes = served
    async with connect(ws_url(url)) as ws:
        await ws.send(frame)
        (error,) = await response_events(ws)
        assert error["type"] == "error"
        assert error["status"] in (400, 404)
        assert error["error"]["message"]
        if code is not None:
            assert error["error"]["code"] == code
        # Codex acknowledges a response it read: accepted silently, nothing answers it.
        await ws.send('{"type": "response.processed", "response_id": "resp_x"}')
        await ws.send(create("via-chat", "still here"))
        events = await response_events(ws)
        assert events[0]["type"] == "response.created"
        assert events[-1]["type"] == "response.completed"


async def test_upstream_errors_become_error_frames_with_status_and_headers(
    served: Served,
) -> None:
    url, fakes = served
    fake: FakeUpstream = fakes["via-anthropic"]
    async with connect(ws_url(url)) as ws:
        fake.enqueue(RateLimitError("Slow down.", retry_after=2))
        await ws.send(create("via-anthropic", "hi"))
        (limited,) = await response_events(ws)
        assert limited["status"] == 429
        assert limited["error"]["type"] == "rate_limit_error" or limited["error"]["message"]
        assert limited["headers"]["retry-after"] == "2"
        fake.enqueue(UpstreamError("The upstream broke.", status=500))
        await ws.send(create("via-anthropic", "hi"))
        (broken,) = await response_events(ws)
        assert broken["type"] == "error" and broken["status"] >= 500
        await ws.send(create("via-anthropic", "again"))
        assert (await response_events(ws))[-1]["type"] == "response.completed"


async def test_errors_name_the_request_id_of_their_turn(served: Served) -> None:
    url, fakes = served
    fake: FakeUpstream = fakes["via-anthropic"]
    broken = [*list(unfold(reply("half")))[:3], StreamError(UpstreamError("cut short", status=502))]
    async with connect(ws_url(url)) as ws:
        conn_id = ws.response.headers["x-request-id"]
        await ws.send(create("no-such-model", "x"))
        (refused,) = await response_events(ws)
        fake.enqueue(broken)
        await ws.send(create("via-anthropic", "hi"))
        failed = (await response_events(ws))[-1]
        await ws.send(json.dumps({"type": "response.steer", "input": "stop"}))
        steer = json.loads(await asyncio.wait_for(ws.recv(), 5))
    assert failed["type"] == "response.failed"
    messages = [
        refused["error"]["message"],
        failed["response"]["error"]["message"],
        steer["error"]["message"],
    ]
    assert messages[1].startswith("cut short")
    ids = [re.findall(r" \(request id: (req_[0-9a-f]+)\)$", m) for m in messages]
    assert all(len(found) == 1 for found in ids), messages
    turns = {found[0] for found in ids}
    assert len(turns) == 3 and conn_id not in turns  # each turn is a request of its own


async def test_requests_sent_mid_response_are_answered_in_order(served: Served) -> None:
    url, fakes = served
    fake: FakeUpstream = fakes["via-responses"]
    fake.enqueue(replace(reply("one"), id="resp_one"))
    fake.enqueue(replace(reply("two"), id="resp_two"))
    async with connect(ws_url(url)) as ws:
        await ws.send(create("via-responses", "1"))
        await ws.send(create("via-responses", "2"))
        first = await response_events(ws)
        second = await response_events(ws)
    assert first[-1]["response"]["id"] == "resp_one"
    assert second[0]["type"] == "response.created" and second[0]["sequence_number"] == 0
    assert second[-1]["response"]["id"] == "resp_two"


async def test_stream_id_is_echoed_and_steering_is_refused(served: Served) -> None:
    url, _fakes = served
    async with connect(ws_url(url)) as ws:
        await ws.send(create("via-chat", "hi", stream_id="lane-1"))
        events = await response_events(ws)
        assert {e["stream_id"] for e in events} == {"lane-1"}
        steer = {"type": "response.steer", "previous_response_id": "resp_1", "input": "stop"}
        await ws.send(json.dumps(steer))
        failed = json.loads(await asyncio.wait_for(ws.recv(), 5))
        assert failed["type"] == "response.steer.failed"
        assert failed["error"]["code"] == "steering_not_supported"
        assert failed["steer"]["input"] == "stop"


async def test_a_hang_up_mid_response_closes_the_upstream(served: Served) -> None:
    url, fakes = served
    slow: SlowUpstream = fakes["slow"]
    slow.closed.clear()
    left = _counted(url, "interlingua_client_disconnects_total", "slow")
    ws = await connect(ws_url(url))
    await ws.send(create("slow", "talk for long"))
    while json.loads(await asyncio.wait_for(ws.recv(), 5))["type"] != "response.output_text.delta":
        pass
    ws.transport.abort()  # gone, without a closing handshake
    await until(slow.closed.is_set)
    assert not slow.finished
    # The client's doing, not an error.
    await until(lambda: _counted(url, "interlingua_client_disconnects_total", "slow") > left)
    assert _counted(url, "interlingua_request_errors_total", "slow") == 0


class HoldingUpstream(SlowUpstream):
    """Streams a short answer whole, then holds its stream open (the gateway has relayed
    the last event but not seen the upstream end) until the gateway closes it."""

    async def stream(self, request: Request) -> AsyncIterator[StreamEvent]:
        self.requests.append(request)
        try:
            for event in unfold(reply("Hi.")):
                yield event
            await asyncio.Event().wait()
        finally:
            self.closed.set()


def _counted(url: str, name: str, model: str) -> float:
    page = httpx.get(url + "/metrics").text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in page.splitlines()
        if line.startswith(name + "{") and f'model="{model}"' in line
    )


async def test_a_hang_up_after_the_terminal_event_is_a_success(served: Served) -> None:
    # Codex closes its socket once it has read response.completed; the socket sees the
    # hang-up while the gateway still waits for its upstream's end.
    url, fakes = served
    hold: HoldingUpstream = fakes["hold"]
    hold.closed.clear()
    ws = await connect(ws_url(url))
    await ws.send(create("hold", "hi"))
    assert (await response_events(ws))[-1]["type"] == "response.completed"
    ws.transport.abort()
    await until(hold.closed.is_set)
    await until(lambda: _counted(url, "interlingua_requests_total", "hold") == 1)
    assert _counted(url, "interlingua_client_disconnects_total", "hold") == 0
    assert _counted(url, "interlingua_request_errors_total", "hold") == 0


async def test_auth_is_checked_on_the_upgrade() -> None:
    config = parse_config(
        {
            "server": {"api_keys": ["sk-right"]},
            "upstreams": {"oai": {"kind": "fake"}},
            "models": [{"name": "m", "upstream": "oai"}],
        }
    )
    with guarded_gateway(config, {"oai": FakeUpstream("oai", wire="openai")}) as (url, _):
        for headers in ({}, {"Authorization": "Bearer sk-wrong"}):
            with pytest.raises(InvalidStatus) as refused:
                await connect(ws_url(url), additional_headers=headers)
            assert refused.value.response.status_code == 401
            body = json.loads(refused.value.response.body)
            assert body["error"]["code"] == "invalid_api_key"
            rid = refused.value.response.headers["x-request-id"]
            assert body["error"]["message"].endswith(f" (request id: {rid})")
        headers = {
            "Authorization": "Bearer sk-right",
            "OpenAI-Beta": "responses_websockets=2026-02-06",
        }
        async with connect(ws_url(url), additional_headers=headers) as ws:
            await ws.send(create("m", "hi"))
            events = await response_events(ws)
            assert events[-1]["response"]["output"][0]["content"][0]["text"] == "echo: hi"
        async with connect(ws_url(url), additional_headers={"x-api-key": "sk-right"}) as ws:
            await ws.send(create("m", "hi"))
            assert (await response_events(ws))[-1]["type"] == "response.completed"


async def test_a_named_key_s_models_and_limits_apply_to_every_frame(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The upgrade authenticates; each ``response.create`` is a request of its own: the
    key's model list and rpm apply to it (an error frame, the socket stays open)."""
    monkeypatch.setenv("WS_TEAM_KEY", "sk-team")
    config = parse_config(
        {
            "upstreams": {"oai": {"kind": "fake"}},
            "models": [{"name": "m", "upstream": "oai"}, {"name": "other", "upstream": "oai"}],
            "keys": [
                {"name": "t", "key_env": "WS_TEAM_KEY", "models": ["m"], "limits": {"rpm": 2}}
            ],
            "usage": False,
        }
    )
    with guarded_gateway(config, {"oai": FakeUpstream("oai", wire="openai")}) as (url, _):
        async with connect(ws_url(url), additional_headers={"x-api-key": "sk-team"}) as ws:
            await ws.send(create("other", "hi"))
            refused = (await response_events(ws))[-1]
            assert refused["type"] == "error" and refused["status"] == 403
            await ws.send(create("m", "hi"))
            assert (await response_events(ws))[-1]["type"] == "response.completed"
            await ws.send(create("m", "hi"))
            assert (await response_events(ws))[-1]["type"] == "response.completed"
            await ws.send(create("m", "hi"))
            limited = (await response_events(ws))[-1]
            assert limited["type"] == "error" and limited["status"] == 429


async def test_shutdown_finishes_the_response_in_flight_then_closes_with_1001() -> None:
    config = parse_config(
        {
            "server": {"shutdown_timeout": 10},
            "upstreams": {"slow": {"kind": "fake"}},
            "models": [{"name": "slow", "upstream": "slow"}],
        }
    )
    slow = SlowUpstream("slow", deltas=40, pause=0.02)
    with guarded_gateway(config, {"slow": slow}) as (url, server):
        busy = await connect(ws_url(url))
        idle = await connect(ws_url(url))
        await busy.send(create("slow", "go"))
        first = json.loads(await asyncio.wait_for(busy.recv(), 5))
        assert first["type"] == "response.created"
        server.should_exit = True
        # The idle socket goes at once; the busy one finishes its response first.
        with pytest.raises(ConnectionClosed) as idle_closed:
            await asyncio.wait_for(idle.recv(), 5)
        assert idle_closed.value.rcvd is not None and idle_closed.value.rcvd.code == 1001
        rest = await response_events(busy)
        assert rest[-1]["type"] == "response.completed"
        assert "".join(e["delta"] for e in rest if "delta" in e) == "".join(
            f"{i} " for i in range(40)
        )
        with pytest.raises(ConnectionClosed) as busy_closed:
            await asyncio.wait_for(busy.recv(), 5)
        assert busy_closed.value.rcvd is not None and busy_closed.value.rcvd.code == 1001
        assert slow.finished


async def test_the_openai_sdk_connects_and_streams(served: Served) -> None:
    openai = pytest.importorskip("openai")
    url, fakes = served
    fakes["via-chat"].enqueue(reply("Hello over the socket."))
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)
    async with client.responses.connect() as connection:
        await connection.send({"type": "response.create", "model": "via-chat", "input": "Hi"})
        text = []
        async for event in connection:
            if event.type == "response.output_text.delta":
                text.append(event.delta)
            if event.type == "response.completed":
                break
    assert "".join(text) == "Hello over the socket."


def test_plain_get_without_upgrade_is_still_refused(served: Served) -> None:
    url, _ = served
    resp = httpx.get(url + "/v1/responses")
    assert resp.status_code == 405
    assert websockets.__version__  # the server's own WebSocket library is present


async def test_an_idle_socket_outlives_the_keep_alive_timeout_but_yields_at_the_cap() -> None:
    config = parse_config(
        {
            "server": {"max_connections": 2, "keep_alive_timeout": 0.3},
            "upstreams": {"oai": {"kind": "fake"}},
            "models": [{"name": "m", "upstream": "oai"}],
        }
    )
    with guarded_gateway(config, {"oai": FakeUpstream("oai", wire="openai")}) as (url, _):
        older = await connect(ws_url(url))
        await asyncio.sleep(0.05)
        newer = await connect(ws_url(url))
        await asyncio.sleep(1.0)  # three keep-alive timeouts: pings, not that, watch sockets
        await older.send(create("m", "still open?"))
        assert (await response_events(older))[-1]["type"] == "response.completed"
        await asyncio.sleep(0.05)
        # At the cap, with no slow sender or idle HTTP connection to evict, a newcomer
        # takes the place of the socket idle longest (now ``newer``), closed with 1013.
        async with httpx.AsyncClient() as client:
            assert (await client.get(url + "/health")).status_code == 200
        with pytest.raises(ConnectionClosed) as evicted:
            await asyncio.wait_for(newer.recv(), 5)
        assert evicted.value.rcvd is not None and evicted.value.rcvd.code == 1013
        await older.send(create("m", "and now?"))
        assert (await response_events(older))[-1]["type"] == "response.completed"
        await older.close()


async def test_passthrough_chaining_and_the_older_append(served: Served) -> None:
    url, fakes = served
    fake: FakeUpstream = fakes["via-responses"]
    fake.enqueue(replace(reply("Paris."), id="resp_pt1"))
    fake.enqueue(replace(reply("Rome."), id="resp_pt2"))
    fake.enqueue(replace(reply("Berlin."), id="resp_pt3"))
    async with connect(ws_url(url)) as ws:
        await ws.send(create("via-responses", "Capital of France?", store=False))
        first = await response_events(ws)
        first_id = first[-1]["response"]["id"]
        await ws.send(create("via-responses", "And Italy?", previous_response_id=first_id))
        await response_events(ws)
        # The same body a Responses upstream gets: every item, and no id it cannot know.
        sent = fake.requests[-1]
        assert [m.role for m in sent.messages] == ["user", "assistant", "user"]
        # The first protocol's append: the last response continued with the same settings.
        await ws.send(json.dumps({"type": "response.append", "input": "And Germany?"}))
        third = await response_events(ws)
        assert third[-1]["type"] == "response.completed"
        assert [m.role for m in fake.requests[-1].messages] == [
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
        ]
    async with connect(ws_url(url)) as fresh:
        await fresh.send(json.dumps({"type": "response.append", "input": "x"}))
        (error,) = await response_events(fresh)
        assert error["status"] == 400
        assert error["error"]["code"] == "previous_response_not_found"
