"""The fault matrix: every upstream fault as the official SDKs see it.

docs/reliability.md, "How the upstream faults are tested", says what it promises.

Each cell is one fault x client dialect (openai SDK on ``/v1/chat/completions``,
anthropic SDK on ``/v1/messages``) x stream or not x passthrough (upstream of the
client's own dialect) or translated (the other dialect), through a live gateway in front
of the raw-socket :class:`FaultUpstream`. A cell passes when the SDK saw what the fault
demands (:class:`Expect`): the normal, complete answer with a finish reason; or a typed
API error with the right status (Retry-After relayed on 429), in-band only where the
stream may already have started. Never a normal return with wrong or partial content,
never ``JSONDecodeError``, never a raw transport exception, never a hang. After every
cell ``/health`` must answer 200.

Two pairs of upstreams serve the cells. The hang cells go to ``to``/``ta`` with
``read: 0.3``, so a timeout costs little. All others go to ``o``/``a`` with ``read: 30``,
longer than the SDK's own timeout: a gateway that stalls on them (waiting for a read
timeout instead of acting on what it got) shows up as a client-side hang, not as a quick
error that would hide the stall. The drip cells run against a second gateway whose
upstreams also have an overall deadline (``timeout.total: 0.8``: past their ``read: 0.3``,
which the drip's byte every 20 ms keeps from firing) and a drip that would take far
longer.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from interlingua.config import parse_config
from interlingua.http_pool.engines import ENGINE_ENV
from interlingua.server.app import create_app

from ..live_server import live_server
from .fault_upstream import RETRY_AFTER, FaultUpstream, expected_text, parse_fault
from .sdk_calls import ANTHROPIC_CLIENT, CLIENT_KEY, OPENAI_CLIENT, Seen, call

KEY_ENV = "INTERLINGUA_FAULT_MATRIX_KEY"
#: the upstream key: must reach the upstream, must never reach a client
UPSTREAM_KEY = "sk-upstream-S3CR3T-fault-matrix-4f1d2c9a"
#: the SDK's own timeout: above the short gateway deadlines, below the patient ones
SDK_TIMEOUT = 6.0
#: a whole stream must end within this (the SDK timeout bounds only each read)
STREAM_DEADLINE = 12.0
#: the short read timeout of the ``t`` upstreams, and the drip gateway's overall deadline
SHORT_READ = 0.3
DRIP_TOTAL = 0.8
CLIENTS = (OPENAI_CLIENT, ANTHROPIC_CLIENT)
PATHS = ("passthrough", "translated")


@dataclass(frozen=True)
class Expect:
    """What a client must see for one fault."""

    #: the upstream model name (picks the fault, see :mod:`.fault_upstream`)
    spec: str
    #: allowed statuses of a typed error; empty = a normal answer is expected
    statuses: tuple[int, ...] = ()
    #: whether a stream may carry the error in-band (it may have started before the fault)
    inband: bool = False
    retry_after: str | None = None
    #: status toward OpenAI clients when it differs (529 -> 503: docs/protocols.md,
    #: "Errors and statuses")
    openai_statuses: tuple[int, ...] | None = None
    #: status toward Anthropic clients of an OpenAI upstream when it differs (Anthropic
    #: has no 503 and uses 529 for overload: docs/protocols.md, "Errors and statuses")
    to_anthropic_statuses: tuple[int, ...] | None = None
    #: the cell tests a gateway timeout: use the upstreams with ``read: 1``
    timeouts: bool = False
    modes: tuple[bool, ...] = (False, True)
    slow: bool = False

    def allowed(self, client: str, path: str) -> tuple[int, ...]:
        """The statuses a typed error may carry for this client and path."""
        if client == OPENAI_CLIENT and self.openai_statuses is not None:
            return self.openai_statuses
        translated_to_anthropic = path == "translated" and client == ANTHROPIC_CLIENT
        if translated_to_anthropic and self.to_anthropic_statuses is not None:
            return self.to_anthropic_statuses
        return self.statuses


GARBAGE = (502,)
FAULTS = [
    Expect("ok"),
    Expect("html-200", GARBAGE, inband=True),
    Expect("text-200", GARBAGE, inband=True),
    Expect("truncate", GARBAGE, inband=True),
    Expect("bad-json-event", GARBAGE, inband=True),
    Expect("bad-chunk-size", GARBAGE, inband=True),
    Expect("short-content-length", GARBAGE, inband=True),
    Expect("hang-headers", (504,), inband=True, timeouts=True),
    Expect("hang-body", (502, 504), inband=True, timeouts=True),
    Expect("huge:1000000"),
    Expect("huge:5000000"),
    Expect("huge:20000000", modes=(True,), slow=True),
    Expect("huge-error", (500, 502)),
    Expect("429", (429,), retry_after=RETRY_AFTER),
    Expect("500", (500,)),
    Expect("503", (503,), to_anthropic_statuses=(529,)),
    Expect("529", (529,), openai_statuses=(503,)),
    # found by a fault hunt after the first round of fixes
    Expect("error-200", (500, 502)),
    Expect("other-200", GARBAGE),
    Expect("no-data-events"),
    Expect("comments-only", GARBAGE, modes=(True,)),
    Expect("no-final-blank", modes=(True,)),
    Expect("cr-only", modes=(True,)),
    Expect("first-error-event", (529,), openai_statuses=(503,), modes=(True,)),
    Expect("redirect-307", GARBAGE),
]
DRIP = Expect("drip:0.02", (504,), inband=True, timeouts=True)


def model_for(expect: Expect, client: str, path: str) -> str:
    """The model name that routes this cell: ``[t]o/<spec>`` to the OpenAI-kind upstream,
    ``[t]a/<spec>`` to the Anthropic-kind one (``t``: the short-timeout pair)."""
    same = "o" if client == OPENAI_CLIENT else "a"
    kind = same if path == "passthrough" else {"o": "a", "a": "o"}[same]
    return f"{'t' if expect.timeouts else ''}{kind}/{expect.spec}"


def gateway_config(up: FaultUpstream, specs: list[str], total: float | None) -> dict[str, Any]:
    """Upstreams of both kinds on the fault server, patient (``o``, ``a``) and quick to
    time out (``to``, ``ta``); the model ``<prefix>/<spec>`` goes to upstream
    ``f<prefix>`` as model ``<spec>``."""
    upstreams = {}
    for prefix, read in (("", 30), ("t", SHORT_READ)):
        timeout: dict[str, float] = {"connect": 2, "read": read}
        if total is not None:
            timeout["total"] = total
        common = {"api_key_env": KEY_ENV, "timeout": timeout}
        upstreams[f"f{prefix}o"] = {"kind": "openai", "base_url": up.openai_base_url, **common}
        upstreams[f"f{prefix}a"] = {"kind": "anthropic", "base_url": up.url, **common}
    models = [
        {"name": f"{prefix}/{spec}", "upstream": f"f{prefix}", "model": spec}
        for spec in specs
        for prefix in ("o", "a", "to", "ta")
    ]
    return {"upstreams": upstreams, "models": models}


@dataclass
class Gateway:
    url: str
    up: FaultUpstream


@pytest.fixture(scope="module")
def up() -> Iterator[FaultUpstream]:
    with pytest.MonkeyPatch.context() as mp, FaultUpstream(hold=15.0) as server:
        mp.setenv(KEY_ENV, UPSTREAM_KEY)
        yield server
    # The gateway sent the fault server only requests it could read.
    assert server.errors == []


@pytest.fixture(scope="module")
def gateway(up: FaultUpstream) -> Iterator[Gateway]:
    specs = [f.spec for f in FAULTS] + ["close-reused", "echo-key"]
    config = parse_config(gateway_config(up, specs, total=None))
    with live_server(create_app(config)) as url:
        yield Gateway(url, up)


@pytest.fixture(scope="module")
def aiohttp_gateway(up: FaultUpstream) -> Iterator[Gateway]:
    """The same gateway posting to its http:// upstreams with aiohttp, the engine every
    https:// upstream uses (the app reads the variable once, when built)."""
    config = parse_config(gateway_config(up, [f.spec for f in BODY_FAULTS], total=None))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENGINE_ENV, "aiohttp")
        app = create_app(config)
    with live_server(app) as url:
        yield Gateway(url, up)


@pytest.fixture(scope="module")
def drip_gateway(up: FaultUpstream) -> Iterator[Gateway]:
    # Apart from the main gateway: until upstreams take `timeout.total`, only these
    # cells fail (on the config), not the whole matrix.
    config = parse_config(gateway_config(up, [DRIP.spec], total=DRIP_TOTAL))
    with live_server(create_app(config)) as url:
        yield Gateway(url, up)


def problem(seen: Seen, expect: Expect, client: str, stream: bool, path: str) -> str | None:
    """Why ``seen`` is not what ``expect`` demands; None when it is."""
    statuses = expect.allowed(client, path)
    if seen.kind == "failure":
        return f"FAILURE {seen.describe()}"
    if not statuses:
        fault, param = parse_fault(expect.spec)
        if seen.kind != "answer":
            return f"expected a normal answer, got {seen.describe()}"
        if seen.text != expected_text(fault, param) or not seen.finish:
            return f"WRONG ANSWER {seen.describe()}"
        return None
    if seen.kind == "answer":
        return f"SILENT WRONG ANSWER (expected an error {statuses}): {seen.describe()}"
    if seen.kind == "inband":
        if stream and expect.inband:
            return None
        return f"expected status {statuses} before the stream, got in-band {seen.detail}"
    if seen.status not in statuses:
        return f"expected status {statuses}, got {seen.describe()}"
    if expect.retry_after is not None and seen.retry_after != expect.retry_after:
        return f"expected Retry-After {expect.retry_after}, got {seen.describe()}"
    return None


def assert_healthy(url: str) -> None:
    assert httpx.get(url + "/health", timeout=5).status_code == 200


def run_cell(gw: Gateway, expect: Expect, client: str, stream: bool, path: str) -> None:
    model = model_for(expect, client, path)
    seen = call(client, gw.url, model, stream, SDK_TIMEOUT, STREAM_DEADLINE)
    try:
        reason = problem(seen, expect, client, stream, path)
        assert reason is None, reason
    finally:
        assert_healthy(gw.url)


def cells(expects: list[Expect]) -> list[Any]:
    """Every fault x client x stream x path, as pytest params with readable ids."""
    out = []
    for expect in expects:
        marks = [pytest.mark.slow] if expect.slow else []
        for client in CLIENTS:
            for stream in expect.modes:
                for path in PATHS:
                    mode = "stream" if stream else "nonstream"
                    cell_id = f"{expect.spec}-{client}-{mode}-{path}"
                    out.append(pytest.param(expect, client, stream, path, id=cell_id, marks=marks))
    return out


@pytest.mark.parametrize(("expect", "client", "stream", "path"), cells(FAULTS))
def test_fault(gateway: Gateway, expect: Expect, client: str, stream: bool, path: str) -> None:
    run_cell(gateway, expect, client, stream, path)


#: faults in the body, after the head: each HTTP engine reads bodies its own way
BODY_FAULTS = [f for f in FAULTS if f.spec in {"ok", "truncate", "bad-chunk-size",
    "short-content-length", "hang-body", "bad-json-event", "huge:1000000"}]  # fmt: skip


@pytest.mark.parametrize(("expect", "client", "stream", "path"), cells(BODY_FAULTS))
def test_body_fault_through_aiohttp(
    aiohttp_gateway: Gateway, expect: Expect, client: str, stream: bool, path: str
) -> None:
    # aiohttp 3.14 waited out timeout.total on an invalid chunk-size line after the first
    # chunk (http_pool/engines.py:_AiohttpAnswer); the lean pool never did.
    run_cell(aiohttp_gateway, expect, client, stream, path)


@pytest.mark.parametrize(("expect", "client", "stream", "path"), cells([DRIP]))
def test_drip_beyond_the_deadline(
    drip_gateway: Gateway, expect: Expect, client: str, stream: bool, path: str
) -> None:
    run_cell(drip_gateway, expect, client, stream, path)


@pytest.mark.parametrize(("expect", "client", "stream", "path"), cells([Expect("close-reused")]))
def test_close_on_a_reused_connection_is_never_resent(
    gateway: Gateway, expect: Expect, client: str, stream: bool, path: str
) -> None:
    """Two requests back to back on a keep-alive pool: the upstream reads the one that
    lands on a reused connection and closes without answering. The gateway may answer
    it 502 (or correctly, had it reconnected safely) but must not post it twice."""
    up = gateway.up
    before = len(up.unanswered)
    model = model_for(expect, client, path)
    for _ in range(2):
        nonce = uuid.uuid4().hex
        seen = call(client, gateway.url, model, stream, SDK_TIMEOUT, STREAM_DEADLINE, f"Hi {nonce}")
        times = up.received(nonce)
        assert times == 1, (
            f"the upstream received the POST {times} times; SDK saw {seen.describe()}"
        )
        # A 502 (or in-band error) is right; so is the answer, had it been got safely.
        demand = expect if seen.kind == "answer" else Expect("close-reused", GARBAGE, inband=True)
        reason = problem(seen, demand, client, stream, path)
        assert reason is None, reason
        assert_healthy(gateway.url)
    assert len(up.unanswered) > before, "no request landed on a reused connection"


def _raw_request(client: str, model: str, stream: bool) -> tuple[str, dict[str, Any]]:
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": 50,
        "stream": stream,
        "messages": [{"role": "user", "content": "Hi"}],
    }
    if client == OPENAI_CLIENT:
        return "/v1/chat/completions", body
    return "/v1/messages", body


@pytest.mark.parametrize(("expect", "client", "stream", "path"), cells([Expect("echo-key")]))
def test_an_echoed_upstream_key_never_reaches_the_client(
    gateway: Gateway, expect: Expect, client: str, stream: bool, path: str
) -> None:
    url, body = _raw_request(client, model_for(expect, client, path), stream)
    headers = {
        "authorization": f"Bearer {CLIENT_KEY}",
        "anthropic-version": "2023-06-01",
        "accept-encoding": "identity",  # the raw bytes must be searchable as sent
    }
    with httpx.stream("POST", gateway.url + url, json=body, headers=headers, timeout=10) as resp:
        raw = b"".join(resp.iter_raw())
        head = "\n".join(f"{k}: {v}" for k, v in resp.headers.items())
    sent = gateway.up.requests[-1].headers
    assert UPSTREAM_KEY in sent.get("authorization", "") + sent.get("x-api-key", "")
    assert UPSTREAM_KEY.encode() not in raw, f"the upstream key reached the client: {raw[:300]!r}"
    assert UPSTREAM_KEY not in head
    assert resp.status_code == 200, raw[:300]
    assert_healthy(gateway.url)
