"""A scripted upstream that breaks its answers on request, and **continues** them correctly.

It serves Chat Completions (``/v1/chat/completions``), Anthropic Messages
(``/v1/messages``) and the Responses API (``/v1/responses``) on a free 127.0.0.1 port from
its own event-loop thread (:class:`~tests.threaded_server.ThreadedAiohttpServer`), so sync
SDK clients and an in-thread gateway can both use it. Streams are what the real APIs send
(:mod:`.continuing_wire`).

The behaviour is the request's model name, ``<behaviour>[:<param>][*]``. Every answer
is a fixed canonical turn (:func:`expected_turn`); a content *token* is one streamed
piece (a word and the whitespace after it):

=====================  ===================================================================
``ok``                 the whole answer
``tool``, ``reasoning``  the whole turn of ``tool-cut`` / ``reasoning-cut`` (a healthy
                       candidate to continue those: the prefix must be of the same turn)
``cut:N``              N text tokens, then the connection is dropped (no end of the
                       chunked body, no end event)
``stall:N``            N text tokens, then silence; the connection is held open until
                       the upstream stops
``malformed:N``        N text tokens, an event whose JSON is cut (standing in for token
                       N+1), then the rest of the stream as usual
``error-event:N``      N text tokens, then the dialect's in-band error (Chat ``data:
                       {"error"}``, Messages ``event: error`` overloaded_error, Responses
                       ``response.failed``), then a clean end of the body
``no-done[:N]``        all (or N) text tokens, then a clean end of the body without the
                       end events (Chat: no finish_reason, usage chunk or ``[DONE]``;
                       Messages: no message_delta/message_stop; Responses: no
                       response.completed)
``first-after:S``      headers at once, the first event S seconds later (non-stream: the
                       whole response S seconds later)
``silent``             reads the request, never sends a byte (held until the upstream
                       stops)
``429`` / ``429-ra:S``  429 with the dialect's rate-limit body, without / with
                       ``Retry-After: S``
``500-once``           500 to the first request of this model name, then ``ok``
``503``                503 always
``reset``              the socket is closed before the response head
``ctx``                400 "prompt too long", the dialect's real body (OpenAI's
                       context_length_exceeded; Anthropic's "prompt is too long")
``filter``             400 content filter (OpenAI content_policy_violation; Anthropic
                       "Output blocked by content filtering policy")
``refuse-prefill``     400 with Anthropic's exact prefill refusal (in the dialect's error
                       body) to any prefill request; a normal answer otherwise
``down:T``             503 for T seconds after the start (or :meth:`reset_clock`), then ok
``tool-cut:N``         a short text, then a tool call whose arguments are streamed in
                       pieces, dropped after N argument pieces
``reasoning-cut:N``    reasoning first (Chat ``reasoning_content``, a Messages thinking
                       block with its signature_delta, a Responses reasoning item with
                       summary text), dropped after N reasoning tokens
=====================  ===================================================================

A request without ``stream: true`` gets the non-stream form: the breaking behaviours
send a head with the full Content-Length and half the body, then drop (``stall``: hold)
the connection; ``malformed`` a 200 body that is not JSON; ``error-event`` a 200 whose
body is the dialect's error (Responses: a failed response object).

**Continuations.** A request is a *prefill* continuation when its last message (Responses:
its last input item) is an assistant message, whatever else it carries (vLLM's
``continue_final_message`` included), and an *instruct* continuation when an assistant
message is followed by a final user message containing :data:`CONTINUE_WORD`. The
assistant message's text is the prefix; the answer is the canonical text minus the prefix,
so a correct splice yields the canonical text exactly once. A prefix the canonical text
does not start with is answered 400 and recorded in :attr:`ContinuingUpstream.mismatches`.
A continuation is answered ``ok`` whatever the behaviour, unless the behaviour ends with
``*`` (``cut:5*``): then it breaks the continuation the same way, counting tokens in the
remainder. ``refuse-prefill`` refuses every prefill, ``*`` or not. A continuation never
reasons again: ``reasoning-cut`` continues with the (remaining) answer text;
``tool-cut`` continues with the remaining text and then the whole tool call. (A request
ending in reasoning alone, a Responses reasoning item or an assistant message without
text, is a prefill of no text.) A request carrying no words of the answer is not a
continuation: a retry of ``cut:0`` or of a ``reasoning-cut`` with the client's own
request breaks again.

Every request is recorded (:attr:`ContinuingUpstream.requests`, :class:`Seen`).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from ..threaded_server import ThreadedAiohttpServer
from . import continuing_wire as wire
from .continuing_wire import (
    ARGS,
    CONTINUE_WORD,
    END,
    MESSAGES,
    REASONING,
    RESPONSES,
    TEXT,
    Tagged,
    Tool,
    Turn,
    continuation_of,
    remainder_turn,
)
from .refusal_bodies import REFUSALS

#: The canonical answer: word tokens with the spaces after them, a paragraph break inside.
ANSWER = (
    "The quick brown fox jumps over the lazy dog.\n\n"
    "Then it runs across the wide green field and home again."
)
REASONING_TEXT = "The user wants a short story about a fox, so I will tell it plainly."
TOOL_TEXT = "Let me check the weather in Paris first."
TOOL = Tool("call_cu0001", "get_weather", ('{"ci', 'ty": "Pa', 'ris", "un', 'it": "cel', 'sius"}'))
#: Anthropic's refusal of an assistant prefill, word for word.
PREFILL_REFUSAL = (
    "This model does not support assistant message prefill. "
    "The conversation must end with a user message."
)
ANTHROPIC_FILTER = "Output blocked by content filtering policy"
#: How long ``silent`` and ``stall`` hold a connection at most (a bound for teardown).
HOLD_SECONDS = 120.0
#: How often a held connection looks whether the client hung up.
HOLD_POLL = 0.05


@dataclass(frozen=True)
class Behaviour:
    """A parsed model name: ``cut:5*`` -> name ``cut``, param ``5``, again ``True``."""

    name: str
    param: str | None
    #: also break continuations
    again: bool

    @classmethod
    def parse(cls, model: str) -> Behaviour:
        """Parse ``<name>[:<param>][*]``."""
        again = model.endswith("*")
        name, sep, param = model.removesuffix("*").partition(":")
        return cls(name, param if sep else None, again)

    def number(self, default: float = 0) -> float:
        """The param as a number (``default`` when there is none)."""
        return float(self.param) if self.param else default


def expected_turn(behaviour: str) -> Turn:
    """The whole canonical turn a model name answers."""
    name = Behaviour.parse(behaviour).name
    if name in ("tool", "tool-cut"):
        return Turn(TOOL_TEXT, tool=TOOL)
    if name in ("reasoning", "reasoning-cut"):
        return Turn(ANSWER, reasoning=REASONING_TEXT)
    return Turn(ANSWER)


def expected_text(behaviour: str) -> str:
    """The answer text a client should finally read (reasoning and tool call aside)."""
    return expected_turn(behaviour).text


@dataclass
class Seen:
    """One request the upstream received."""

    path: str
    dialect: str
    headers: dict[str, str]
    body: dict[str, Any]
    #: ``time.monotonic()`` when it arrived
    at: float
    #: the model name, as sent
    behaviour: str
    #: 1 for the first request of this model name on this upstream, then 2, 3...
    attempt: int
    #: ``"prefill"``, ``"instruct"`` or None
    continuation: str | None = None
    #: the assistant text the continuation carried
    prefix: str | None = None
    #: how a stream (or a cut body) ended: ``eof``, ``dropped``, ``held`` (until the
    #: upstream stopped), ``peer-left`` (the client hung up first); None otherwise
    ended: str | None = None


@dataclass
class Call:
    """One request being answered."""

    seen: Seen
    behaviour: Behaviour
    turn: Turn
    rid: str
    stream: bool
    include_usage: bool

    def events(self) -> list[Tagged]:
        """The complete tagged stream of this call's turn."""
        return wire.events(
            self.seen.dialect, self.rid, self.seen.behaviour, self.turn, self.include_usage
        )

    def body(self) -> bytes:
        """The complete non-stream body."""
        return orjson.dumps(wire.body(self.seen.dialect, self.rid, self.seen.behaviour, self.turn))


def before_token(events: list[Tagged], tag: str, n: int) -> int:
    """The index of the ``n``-th (0-based) event tagged ``tag``; the index of the first end
    event when there are not that many."""
    count = 0
    for i, (_, kind) in enumerate(events):
        if kind == tag:
            if count == n:
                return i
            count += 1
        elif kind == END:
            return i
    return len(events)


Handler = Callable[["ContinuingUpstream", web.Request, Call], Awaitable[web.StreamResponse]]
_JSON = "application/json"


def _reply(status: int, payload: bytes, **headers: str) -> web.Response:
    return web.Response(status=status, body=payload, content_type=_JSON, headers=headers)


async def _sse(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    return resp


def _drop(request: web.Request) -> None:
    """Close the socket without ending the response (buffered bytes still go out)."""
    if request.transport is not None:
        request.transport.close()


async def _stream(
    up: ContinuingUpstream,
    request: web.Request,
    call: Call,
    frames: list[bytes],
    then: str,
    delay: float = 0,
) -> web.StreamResponse:
    """A 200 event stream of ``frames`` (the head at once, the frames ``delay`` seconds
    later); ``then`` says how it ends: ``eof`` (a clean end of the chunked body), ``drop``
    (socket closed) or ``hold`` (silence, then drop). How it ended goes to
    ``call.seen.ended``."""
    resp = await _sse(request)
    await asyncio.sleep(delay)
    try:
        for frame in frames:
            await resp.write(frame)
        if then == "eof":
            await resp.write_eof()
            call.seen.ended = "eof"
            return resp
    except ConnectionResetError:  # the client hung up first (a gateway that gave up on us)
        call.seen.ended = "peer-left"
        return resp
    await _end(up, request, call, then)
    return resp


async def _end(up: ContinuingUpstream, request: web.Request, call: Call, then: str) -> None:
    """Drop the connection, after holding it (``then == "hold"``) until the upstream stops
    or the client hangs up."""
    ended = "dropped"
    if then == "hold":
        ended = "peer-left" if await up.held(request) else "held"
    _drop(request)
    call.seen.ended = ended


async def _partial_body(
    up: ContinuingUpstream, request: web.Request, call: Call, then: str
) -> web.StreamResponse:
    """Non-stream: the full Content-Length, half the body, then drop or hold."""
    whole = call.body()
    resp = web.StreamResponse(headers={"content-type": _JSON})
    resp.content_length = len(whole)
    await resp.prepare(request)
    await resp.write(whole[: len(whole) // 2])
    await _end(up, request, call, then)
    return resp


async def ok(up: ContinuingUpstream, request: web.Request, call: Call) -> web.StreamResponse:
    """The whole turn."""
    if not call.stream:
        return _reply(200, call.body())
    return await _stream(up, request, call, [frame for frame, _ in call.events()], "eof")


def _cut_at(tag: str, then: str) -> Handler:
    """Send up to the N-th ``tag`` token, then end as ``then`` says (see :func:`_stream`)."""

    async def handler(
        up: ContinuingUpstream, request: web.Request, call: Call
    ) -> web.StreamResponse:
        if not call.stream:
            return await _partial_body(up, request, call, then)
        events = call.events()
        default = len(events) if then == "eof" else 0
        upto = before_token(events, tag, int(call.behaviour.number(default)))
        frames = [frame for frame, kind in events[:upto] if kind != END]
        return await _stream(up, request, call, frames, then)

    return handler


async def malformed(up: ContinuingUpstream, request: web.Request, call: Call) -> web.StreamResponse:
    """N good tokens, one cut-off event in place of token N+1, then the rest."""
    if not call.stream:
        return _reply(200, call.body()[:-1] + b",,}")
    events = call.events()
    at = before_token(events, TEXT, int(call.behaviour.number()))
    frames = [frame for frame, _ in events]
    frames[at] = wire.broken(frames[at])
    return await _stream(up, request, call, frames, "eof")


async def error_event(
    up: ContinuingUpstream, request: web.Request, call: Call
) -> web.StreamResponse:
    """N good tokens, then the dialect's in-band error and a clean end."""
    seen = call.seen
    if not call.stream:
        if call.seen.dialect == RESPONSES:
            failed = wire.error_event(RESPONSES, call.rid, seen.behaviour, call.turn, 0)
            payload = orjson.loads(failed.split(b"data: ", 1)[1])["response"]
            return _reply(200, orjson.dumps(payload))
        return _reply(200, wire.wire_error(call.seen.dialect, 500, "Overloaded"))
    events = call.events()
    at = before_token(events, TEXT, int(call.behaviour.number()))
    seq = wire.sequence_number(events[at][0])
    error = wire.error_event(call.seen.dialect, call.rid, seen.behaviour, call.turn, seq)
    return await _stream(up, request, call, [frame for frame, _ in events[:at]] + [error], "eof")


async def first_after(
    up: ContinuingUpstream, request: web.Request, call: Call
) -> web.StreamResponse:
    """Headers at once, every event ``S`` seconds later (non-stream: all of it later)."""
    delay = call.behaviour.number()
    if not call.stream:
        await asyncio.sleep(delay)
        return _reply(200, call.body())
    frames = [frame for frame, _ in call.events()]
    return await _stream(up, request, call, frames, "eof", delay)


async def silent(up: ContinuingUpstream, request: web.Request, call: Call) -> web.StreamResponse:
    """Never a byte: held until the upstream stops, then the socket is closed."""
    await _end(up, request, call, "hold")
    return web.Response()


async def reset(up: ContinuingUpstream, request: web.Request, call: Call) -> web.StreamResponse:
    """The socket closed before the response head."""
    _drop(request)
    return web.Response()


def status(code: int, retry_after: bool = False) -> Handler:
    """``code`` with the dialect's error body (``Retry-After: <param>`` when asked)."""

    async def handler(
        up: ContinuingUpstream, request: web.Request, call: Call
    ) -> web.StreamResponse:
        body = wire.wire_error(call.seen.dialect, code, f"continuing upstream says {code}")
        headers = {"retry-after": str(call.behaviour.param)} if retry_after else {}
        return _reply(code, body, **headers)

    return handler


async def once_500(up: ContinuingUpstream, request: web.Request, call: Call) -> web.StreamResponse:
    """500 to the first request of this model name, then the whole answer."""
    if call.seen.attempt == 1:
        return await status(500)(up, request, call)
    return await ok(up, request, call)


async def down(up: ContinuingUpstream, request: web.Request, call: Call) -> web.StreamResponse:
    """503 until ``T`` seconds after the upstream's clock started, then the whole answer."""
    if time.monotonic() - up.epoch < call.behaviour.number():
        return await status(503)(up, request, call)
    return await ok(up, request, call)


def refusal(kind: str) -> Handler:
    """400 with the dialect's real ``ctx`` or ``filter`` refusal body."""

    async def handler(
        up: ContinuingUpstream, request: web.Request, call: Call
    ) -> web.StreamResponse:
        if call.seen.dialect == MESSAGES:
            if kind == "ctx":
                return _reply(400, REFUSALS["ctx-anthropic"])
            return _reply(400, wire.invalid_request(MESSAGES, ANTHROPIC_FILTER))
        return _reply(400, REFUSALS["ctx-openai" if kind == "ctx" else "filter-openai"])

    return handler


async def refuse_prefill(
    up: ContinuingUpstream, request: web.Request, call: Call
) -> web.StreamResponse:
    """Anthropic's refusal of a prefill; any other request is answered whole."""
    if call.seen.continuation == "prefill":
        return _reply(400, wire.invalid_request(call.seen.dialect, PREFILL_REFUSAL))
    return await ok(up, request, call)


#: behaviour name -> handler
BEHAVIOURS: dict[str, Handler] = {
    "ok": ok,
    "cut": _cut_at(TEXT, "drop"),
    "stall": _cut_at(TEXT, "hold"),
    "malformed": malformed,
    "error-event": error_event,
    "no-done": _cut_at(TEXT, "eof"),
    "first-after": first_after,
    "silent": silent,
    "429": status(429),
    "429-ra": status(429, retry_after=True),
    "500-once": once_500,
    "503": status(503),
    "reset": reset,
    "ctx": refusal("ctx"),
    "filter": refusal("filter"),
    "refuse-prefill": refuse_prefill,
    "down": down,
    "tool-cut": _cut_at(ARGS, "drop"),
    "reasoning-cut": _cut_at(REASONING, "drop"),
    "tool": ok,
    "reasoning": ok,
}


@dataclass(eq=False)
class _State:
    requests: list[Seen] = field(default_factory=list)
    attempts: Counter[str] = field(default_factory=Counter)
    mismatches: list[Seen] = field(default_factory=list)
    answered: int = 0


class ContinuingUpstream(ThreadedAiohttpServer):
    """The upstream. ``with ContinuingUpstream() as up:`` serves on ``up.url``; the state
    (recorded requests, attempt counts, the ``down`` clock) belongs to this instance."""

    def __init__(self, hold: float = HOLD_SECONDS) -> None:
        super().__init__()
        self.hold = hold
        self.epoch = time.monotonic()
        self._state = _State()
        self._release: asyncio.Event | None = None

    @property
    def requests(self) -> list[Seen]:
        """Every request received, in arrival order."""
        return list(self._state.requests)

    @property
    def mismatches(self) -> list[Seen]:
        """Continuations whose prefix the canonical text does not start with."""
        return list(self._state.mismatches)

    def base_url(self, dialect: str) -> str:
        """The ``base_url`` an upstream of that dialect is configured with (the Messages
        one without ``/v1``, which the Anthropic clients add themselves)."""
        return self.url if dialect == MESSAGES else self.url + "/v1"

    def requests_for(self, behaviour: str) -> list[Seen]:
        """The requests whose model name is ``behaviour``."""
        return [seen for seen in self.requests if seen.behaviour == behaviour]

    def gaps(self, behaviour: str) -> list[float]:
        """Seconds between consecutive requests for ``behaviour``."""
        times = [seen.at for seen in self.requests_for(behaviour)]
        return [b - a for a, b in itertools.pairwise(times)]

    def start(self) -> None:
        """Serve, and start the ``down:T`` clock."""
        self.reset_clock()
        super().start()

    def reset_clock(self) -> None:
        """Restart the ``down:T`` clock (T counts from now)."""
        self.epoch = time.monotonic()

    def routes(self, app: web.Application) -> None:
        """One handler for the three paths (run on the server's loop)."""
        self._release = asyncio.Event()
        for path in wire.PATHS.values():
            app.router.add_post(path, self._handle)

    def stop(self) -> None:
        """Release held connections, then stop serving."""
        if self._release is not None:
            self._loop.call_soon_threadsafe(self._release.set)
        super().stop()

    async def held(self, request: web.Request) -> bool:
        """Stay silent until the upstream stops (at most ``hold`` seconds) or the client
        hangs up; True when the client did."""
        assert self._release is not None
        deadline = time.monotonic() + self.hold
        while not self._release.is_set() and time.monotonic() < deadline:
            if request.transport is None or request.transport.is_closing():
                return True
            with suppress(TimeoutError):
                await asyncio.wait_for(self._release.wait(), HOLD_POLL)
        return False

    def __enter__(self) -> ContinuingUpstream:
        self.start()
        return self

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = orjson.loads(raw) if raw else {}
        dialect = wire.dialect_of(request.path)
        assert dialect is not None
        model = str(body.get("model", ""))
        state = self._state
        state.attempts[model] += 1
        kind, prefix = continuation_of(dialect, body)
        headers = {k.lower(): v for k, v in request.headers.items()}
        seen = Seen(
            request.path, dialect, headers, body, time.monotonic(), model,
            state.attempts[model], kind, prefix,
        )  # fmt: skip
        state.requests.append(seen)
        behaviour = Behaviour.parse(model)
        handler = BEHAVIOURS.get(behaviour.name)
        if handler is None:
            message = f"continuing upstream: unknown behaviour {model!r}"
            return _reply(400, wire.invalid_request(dialect, message))
        turn = expected_turn(model)
        refused = behaviour.name == "refuse-prefill" and kind == "prefill"
        if kind is not None and prefix is not None and not refused:
            rest = remainder_turn(turn, prefix)
            if rest is None:
                state.mismatches.append(seen)
                message = f"continuing upstream: {prefix!r} does not start {turn.text!r}"
                return _reply(400, wire.invalid_request(dialect, message))
            turn = rest
            if not behaviour.again and behaviour.name != "refuse-prefill":
                handler = ok
        state.answered += 1
        options = body.get("stream_options") or {}
        call = Call(
            seen=seen,
            behaviour=behaviour,
            turn=turn,
            rid=wire.response_id(dialect, state.answered),
            stream=body.get("stream") is True,
            include_usage=bool(options.get("include_usage")),
        )
        return await handler(self, request, call)


__all__ = [
    "ANSWER",
    "BEHAVIOURS",
    "CONTINUE_WORD",
    "PREFILL_REFUSAL",
    "REASONING_TEXT",
    "TOOL",
    "TOOL_TEXT",
    "Behaviour",
    "ContinuingUpstream",
    "Seen",
    "continuation_of",
    "expected_text",
    "expected_turn",
    "remainder_turn",
]
