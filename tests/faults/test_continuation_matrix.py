"""The continuation fault matrix: every upstream fault, on a model that continues.

docs/reliability.md, "Continuing a broken stream", carries the outcome table taken from
these cells.

Each cell is one fault x client dialect (the openai SDK on ``/v1/chat/completions``, the
anthropic SDK on ``/v1/messages``, the openai SDK's Responses API on ``/v1/responses``)
x path (the primary upstream of the client's own dialect: passthrough; of the next
dialect: translated) x stream or not (a body that breaks reaches no client: its
non-stream cell expects the first fallback's answer, :func:`whole_body`; the faults
that would cost a wait or a retry there have none). Each cell runs a live gateway of its
own in front of a :class:`ContinuingUpstream` of its own, so the upstream's log is the
cell's: the model ``fox`` (``on_stream_break: continue``) goes to the primary upstream
as the fault's behaviour name; its fallbacks (on the dialect after the primary's, the
prefill refuser on the Anthropic one) answer ``ok``, ``tool`` or ``reasoning``: the same
turn, so a continuation spliced right reads as the canonical answer exactly once.

A cell passes when (:func:`run_cell`) the client got what :class:`Fault` says: the whole
canonical answer with a normal end (one id, contiguous sequence numbers, a tool call
whole with JSON arguments, reasoning only as far as it came), rescued by continuation or
before the first byte by a retry or fallback; or a typed error of the original fault
(in-band for a stream that had begun). And when the upstream's own log shows the
attempts the fault calls for, each continuation carrying exactly the text the client had
been sent, and the waits it calls for. ``/health`` answers 200 after every cell.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import pytest

from interlingua.config import parse_config
from interlingua.server.app import create_app

from ..live_server import live_server
from .continuing_sdk import TLS, Outcome, call
from .continuing_upstream import (
    ANSWER,
    REASONING_TEXT,
    TOOL,
    TOOL_TEXT,
    Behaviour,
    ContinuingUpstream,
    expected_turn,
)
from .continuing_wire import CHAT, DIALECTS, MESSAGES, RESPONSES, pieces

KEY_ENV = "INTERLINGUA_CONTINUATION_MATRIX_KEY"
UPSTREAM_KEY = "sk-upstream-continuation-matrix-7c41e0"
KIND = {CHAT: "openai", MESSAGES: "anthropic", RESPONSES: "responses"}
#: the translated path's upstream dialect, and the fallbacks' (after the primary's)
NEXT = {CHAT: MESSAGES, MESSAGES: RESPONSES, RESPONSES: CHAT}
PATHS = ("passthrough", "translated")
#: ``timeout.first_byte`` and ``timeout.idle`` where a fault needs them; ``read`` where a
#: non-stream answer must be given up
PHASE = 0.25
SHORT_READ = 0.35
#: the slack of a measured wait over the deadline that provokes it, and under it (the
#: gateway's clock starts when it sends, the upstream's when the request arrived)
SLACK = 1.5
EARLY = 0.02

CONTINUED = "rescued by continuation"
BEFORE = "rescued before the first byte"
ERROR = "typed error of the original fault"


def said(tokens: int, after: str = "") -> str:
    """``after`` and the first ``tokens`` text tokens of the canonical answer's rest."""
    return after + "".join(pieces(ANSWER[len(after) :])[:tokens])


@dataclass(frozen=True)
class Fault:
    """One row of the matrix: the primary's behaviour, who else is asked, what comes."""

    key: str
    #: the primary's behaviour (its upstream model name)
    spec: str
    outcome: str
    #: the behaviours of ``fox``'s fallbacks, in order
    fallbacks: tuple[str, ...] = ("ok",)
    #: the behaviour of its context fallback, if it has one
    context: str | None = None
    #: requests per behaviour the upstream must have received
    asked: dict[str, int] = field(default_factory=dict)
    #: the text each continuation must carry as its prefix, in order (:data:`AGAIN`: what
    #: the client had after the one before broke again, 5 tokens on)
    prefixes: tuple[str, ...] = ()
    retries: int = 0
    timeout: dict[str, float] = field(default_factory=dict)
    #: bounds of the wait between the first request and the second
    gap: tuple[float, float] | None = None
    #: the statuses a typed error may carry (per client dialect when a dict)
    statuses: tuple[int, ...] = ()
    #: a breaking fault (a stream that began): streamed cells only
    midstream: bool = False
    tools: bool = False
    routing: dict[str, Any] | None = None

    @property
    def answer(self) -> str:
        """The behaviour whose canonical turn the client must get."""
        return self.spec


AGAIN = "<5 more>"
PATIENT = {"first_byte": PHASE, "read": SHORT_READ}
FAULTS = [
    Fault("429", "429", BEFORE, asked={"429": 1, "ok": 1}),
    Fault("429 Retry-After, no fallback", "429-ra:0.2", ERROR, fallbacks=(), retries=1,
          asked={"429-ra:0.2": 2}, gap=(0.2, SLACK), statuses=(429,)),
    Fault("500 once", "500-once", BEFORE, retries=1, asked={"500-once": 2}),
    Fault("503 always", "503", BEFORE, retries=1, asked={"503": 2, "ok": 1}),
    Fault("reset before headers", "reset", BEFORE, asked={"reset": 1, "ok": 1}),
    Fault("no answer at all", "silent", BEFORE, retries=1, timeout=PATIENT,
          asked={"silent": 1, "ok": 1}, gap=(PHASE, PHASE + SLACK)),
    Fault("first event after 3 s", "first-after:3", BEFORE, retries=1, timeout=PATIENT,
          asked={"first-after:3": 1, "ok": 1}, gap=(PHASE, PHASE + SLACK)),
    Fault("400 context too long", "ctx", BEFORE, fallbacks=("reasoning",), context="ok",
          asked={"ctx": 1, "ok": 1}),
    Fault("400 content filter", "filter", ERROR, asked={"filter": 1}, statuses=(400,)),
    Fault("cut before the first token", "cut:0", CONTINUED, asked={"cut:0": 1, "ok": 1},
          midstream=True),
    Fault("in-band error first", "error-event:0", CONTINUED, asked={"error-event:0": 1, "ok": 1},
          midstream=True),
    Fault("malformed first", "malformed:0", CONTINUED, asked={"malformed:0": 1, "ok": 1},
          midstream=True),
    Fault("stall first", "stall:0", CONTINUED, asked={"stall:0": 1, "ok": 1},
          midstream=True, timeout={"first_byte": PHASE, "idle": PHASE}),
    Fault("cut after 5 tokens", "cut:5", CONTINUED, asked={"cut:5": 1, "ok": 1},
          prefixes=(said(5),), midstream=True),
    Fault("cut, and the retry's continuation cut again", "cut:5*", CONTINUED, retries=1,
          asked={"cut:5*": 2, "ok": 1}, prefixes=(said(5), AGAIN), midstream=True),
    Fault("stall after 5 tokens", "stall:5", CONTINUED, timeout={"idle": PHASE},
          asked={"stall:5": 1, "ok": 1}, prefixes=(said(5),), gap=(PHASE, PHASE + SLACK),
          midstream=True),
    Fault("malformed event at token 5", "malformed:5", CONTINUED,
          asked={"malformed:5": 1, "ok": 1}, prefixes=(said(5),), midstream=True),
    Fault("in-band error at token 5", "error-event:5", CONTINUED,
          asked={"error-event:5": 1, "ok": 1}, prefixes=(said(5),), midstream=True),
    Fault("no end after 5 tokens", "no-done:5", CONTINUED, asked={"no-done:5": 1, "ok": 1},
          prefixes=(said(5),), midstream=True),
    Fault("no end after the whole text", "no-done", CONTINUED, asked={"no-done": 1, "ok": 1},
          prefixes=(ANSWER,), midstream=True),
    Fault("cut inside a tool call", "tool-cut:2", CONTINUED, fallbacks=("tool",),
          asked={"tool-cut:2": 1, "tool": 1}, prefixes=(TOOL_TEXT,), midstream=True,
          tools=True),
    Fault("cut inside reasoning", "reasoning-cut:3", CONTINUED, fallbacks=("reasoning",),
          asked={"reasoning-cut:3": 1, "reasoning": 1}, midstream=True),
    Fault("cut; a fallback refuses prefill, a third continues", "cut:5", CONTINUED,
          fallbacks=("refuse-prefill", "ok"), asked={"cut:5": 1, "refuse-prefill": 1, "ok": 1},
          prefixes=(said(5), said(5)), midstream=True),
    Fault("cut; the only fallback refuses prefill", "cut:5", ERROR,
          fallbacks=("refuse-prefill",), asked={"cut:5": 1, "refuse-prefill": 1},
          prefixes=(said(5),), midstream=True),
]  # fmt: skip


def fallback_dialect(primary: str, behaviour: str) -> str:
    """Where a fallback of ``behaviour`` lives: the Anthropic upstream for the prefill
    refuser (Anthropic's refusal), the dialect after the primary's for the others."""
    return MESSAGES if behaviour == "refuse-prefill" else NEXT[primary]


def gateway_config(up: ContinuingUpstream, fault: Fault, primary: str) -> dict[str, Any]:
    """One upstream per dialect on ``up``; ``fox`` on the ``primary`` one, which alone
    has the fault's deadlines and retries (a loaded machine must not make a fallback
    miss a deadline meant for the fault)."""
    upstreams = {
        dialect: {
            "kind": KIND[dialect],
            "base_url": up.base_url(dialect),
            "api_key_env": KEY_ENV,
            "timeout": {"connect": 2, "read": 5, **(fault.timeout if dialect == primary else {})},
            "retries": {"max": fault.retries if dialect == primary else 0},
            **({} if dialect == MESSAGES else {"continue_with": "prefill"}),
        }
        for dialect in DIALECTS
    }
    names = [f"fallback-{i}" for i in range(len(fault.fallbacks))]
    fox: dict[str, Any] = {
        "name": "fox", "upstream": primary, "model": fault.spec,
        "on_stream_break": "continue", "fallbacks": names,
    }  # fmt: skip
    models = [fox] + [
        {"name": name, "upstream": fallback_dialect(primary, spec), "model": spec}
        for name, spec in zip(names, fault.fallbacks, strict=True)
    ]
    if fault.context is not None:
        fox["context_fallbacks"] = ["long"]
        models.append({"name": "long", "upstream": NEXT[primary], "model": fault.context})
    config: dict[str, Any] = {"upstreams": upstreams, "models": models, "usage": False}
    if fault.routing is not None:
        config["routing"] = fault.routing
    return config


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, UPSTREAM_KEY)


@contextlib.contextmanager
def gateway(fault: Fault, primary: str) -> Iterator[tuple[str, ContinuingUpstream]]:
    """A live gateway for one cell and its own upstream."""
    with ContinuingUpstream(hold=10) as up:
        with live_server(create_app(parse_config(gateway_config(up, fault, primary)))) as url:
            yield url, up
        assert up.mismatches == [], "a continuation carried a prefix the answer lacks"


NORMAL_END = {CHAT: ("stop", "tool_calls"), MESSAGES: ("end_turn", "tool_use"),
              RESPONSES: ("completed",)}  # fmt: skip


def check_answer(fault: Fault, client: str, out: Outcome) -> None:
    """The whole canonical turn, once, with a normal end; a tool call whole."""
    assert out.kind == "answer", out.describe()
    turn = expected_turn(fault.answer)
    assert out.text == turn.text, out.describe()
    assert out.finish in NORMAL_END[client], out.describe()
    assert len(out.ids) == 1, f"one answer, one id: {out.ids}"
    if out.sequence:
        assert out.sequence == list(range(len(out.sequence))), out.sequence
    if turn.tool is None:
        assert (out.tools, out.args) == ([], ""), out.describe()
    else:
        assert [name for _, name in out.tools] == [TOOL.name], out.describe()
        assert json.loads(out.args) == json.loads(TOOL.arguments), out.describe()
    if fault.outcome == CONTINUED and turn.reasoning:
        # as far as it came before the break, closed; the candidate's own (asked afresh,
        # with no text to prefill) never shown
        came = pieces(REASONING_TEXT)[: int(Behaviour.parse(fault.spec).number())]
        assert out.reasoning == "".join(came), out.describe()
    else:
        assert out.reasoning == turn.reasoning, out.describe()


def check_error(fault: Fault, out: Outcome) -> None:
    """A typed error of the original fault: never an answer, never the refusal."""
    assert out.kind != "answer", f"a broken answer reported complete: {out.describe()}"
    assert out.kind != "failure", out.describe()
    if fault.midstream:
        assert out.kind == "inband", out.describe()
        assert out.finish is None, out.describe()
        assert out.text == said(5), out.describe()
        assert "prefill" not in out.detail.lower(), f"the refusal reached the client: {out.detail}"
    else:
        assert out.kind == "status" and out.status in fault.statuses, out.describe()
        if 429 in fault.statuses:
            assert out.retry_after is not None, out.describe()


def check_upstream(fault: Fault, up: ContinuingUpstream, primary: str) -> None:
    """The attempts, continuation prefixes and waits in the upstream's own log."""
    seen = up.requests
    log = [(s.behaviour, s.dialect, s.continuation, s.prefix, s.ended) for s in seen]
    assert Counter(s.behaviour for s in seen) == Counter(fault.asked), log
    continued = [s for s in seen if s.continuation is not None]
    assert all(s.continuation == "prefill" for s in continued), log
    for s in continued:
        # the gateway's prefill marker never reaches a wire body; a Chat upstream gets
        # vLLM's two fields
        assert "interlingua.prefill" not in s.body, s.body
        if s.dialect == CHAT:
            vllm = (s.body.get("continue_final_message"), s.body.get("add_generation_prompt"))
            assert vllm == (True, False), s.body
    assert len(continued) == len(fault.prefixes), log
    before = ""
    for s, prefix in zip(continued, fault.prefixes, strict=True):
        prefix = said(5, after=before) if prefix == AGAIN else prefix
        # (Anthropic refuses a prefill ending in whitespace: the gateway cuts it)
        assert s.prefix == (prefix.rstrip() if s.dialect == MESSAGES else prefix), log
        before = s.prefix or ""
    assert all(s.dialect == primary for s in seen if s.behaviour == fault.spec), log
    if fault.gap is not None:
        low, high = fault.gap
        gap = seen[1].at - seen[0].at
        assert low - EARLY <= gap <= high, f"waited {gap:.2f} s, not within {fault.gap}: {log}"


def run_cell(fault: Fault, client: str, path: str, stream: bool) -> None:
    """One cell: the call, then what the client got and what the upstream saw."""
    primary = client if path == "passthrough" else NEXT[client]
    with gateway(fault, primary) as (url, up):
        out = call(client, url, "fox", stream, tools=fault.tools)
        if fault.outcome == ERROR:
            check_error(fault, out)
        else:
            check_answer(fault, client, out)
        check_upstream(fault, up, primary)
        assert httpx.get(url + "/health", timeout=5, verify=TLS).status_code == 200


def whole_body(fault: Fault) -> Fault | None:
    """The row a breaking fault becomes without ``stream``: the client has no byte yet
    when the body breaks, so the first fallback answers (no continuation). None where
    the fault would cost a wait (a stall: only ``read`` ends it) or a retry."""
    if not fault.midstream or fault.retries or fault.timeout:
        return None
    first = fault.fallbacks[0]
    return replace(fault, outcome=BEFORE, asked={fault.spec: 1, first: 1}, prefixes=())


def cells() -> list[Any]:
    """Every fault x client dialect x path x stream or not (:func:`whole_body`). The
    non-stream cells are marked ``slow``: a request without ``stream`` is not touched by
    ``on_stream_break`` (nothing is set up for it), so each is a fault of
    tests/faults/test_fault_matrix.py answered by a fallback, which that matrix already
    runs by default; ``.ci/run`` runs them after the main run."""
    out = []
    for fault in FAULTS:
        modes = [(True, fault), (False, fault if not fault.midstream else whole_body(fault))]
        for client in DIALECTS:
            for path in PATHS:
                for stream, row in modes:
                    mode = "stream" if stream else "nonstream"
                    cell = f"{fault.key}-{client}-{path}-{mode}"
                    if row is not None:
                        # (without ``stream`` the setting is not in play: those cells
                        # are the fault matrix's again, so they run with the slow suites)
                        marks = () if stream else (pytest.mark.slow,)
                        out.append(pytest.param(row, client, path, stream, id=cell, marks=marks))
    return out


@pytest.mark.parametrize(("fault", "client", "path", "stream"), cells())
def test_cell(fault: Fault, client: str, path: str, stream: bool) -> None:
    run_cell(fault, client, path, stream)


DOWN = 0.5
COOLDOWN = 0.2
DOWN_ROUTING = {"cooldown": {"failures": 1, "window": 10, "duration": COOLDOWN}}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("client", DIALECTS)
def test_primary_down_then_healthy(client: str, path: str) -> None:
    """Steady traffic at a primary that answers 503 for ``DOWN`` s: each request is
    answered whole (by the fallback meanwhile), and the primary serves again within a
    cooldown of its recovery (at length: tests/server/test_routing_health.py)."""
    spec = f"down:{DOWN}"
    fault = Fault("down", spec, BEFORE, routing=DOWN_ROUTING)
    primary = client if path == "passthrough" else NEXT[client]
    with gateway(fault, primary) as (url, up):
        up.reset_clock()
        while True:
            out = call(client, url, "fox", stream=True)
            check_answer(fault, client, out)
            last = up.requests[-1]
            if last.behaviour == spec and last.at - up.epoch >= DOWN:
                break  # the primary answered
            assert time.monotonic() - up.epoch < DOWN + 1.5, "the primary never served again"
        served = [s for s in up.requests if s.behaviour == "ok"]
        assert served, "nothing was served by the fallback while the primary was down"
        # asked once, then once per cooldown (a probe) until it answered
        probes = sum(s.behaviour == spec for s in up.requests)
        assert probes <= 2 + DOWN / COOLDOWN, [(s.behaviour, s.at - up.epoch) for s in up.requests]
        assert last.at - up.epoch < DOWN + COOLDOWN + SLACK
        assert httpx.get(url + "/health", timeout=5, verify=TLS).status_code == 200
