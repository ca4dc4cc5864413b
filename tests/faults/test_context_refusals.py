"""Refusals of the request itself: a prompt too long for the context window goes to the
model's ``context_fallbacks``; a content-filter refusal is the client's answer at once.

Through a live gateway in front of the raw-socket fault upstream, whose ``ctx-*`` and
``filter-*`` models answer 400 with the bodies real servers send
(:mod:`.refusal_bodies`), for both SDKs, stream or not, passthrough or translated. Every
upstream has ``retries.max: 2`` and every refusing model a ``fallbacks`` entry, so a
refusal that was retried or sent to the ordinary fallbacks shows in what the upstream
received (each request carries a nonce; :func:`seen_models` lists the models it reached,
in order). docs/reliability.md, "Refusals: context window and content filter".
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from interlingua.config import parse_config
from interlingua.server.app import create_app

from ..live_server import live_server
from .fault_upstream import ANSWER_TEXT, FaultUpstream
from .refusal_bodies import CONTEXT_REFUSALS, FILTER_REFUSALS
from .sdk_calls import ANTHROPIC_CLIENT, CLIENT_KEY, OPENAI_CLIENT, call

KEY_ENV = "INTERLINGUA_REFUSALS_KEY"
CLIENTS = (OPENAI_CLIENT, ANTHROPIC_CLIENT)
PATHS = ("passthrough", "translated")
#: the answer models of the context fallback and of the ordinary fallback
LONG, BACKUP = "ok:long", "ok:backup"


@dataclass
class Gateway:
    url: str
    up: FaultUpstream


def gateway_config(up: FaultUpstream) -> dict[str, Any]:
    """For each upstream kind ``k`` (``o``: OpenAI, ``a``: Anthropic) and refusal spec:
    ``k/<spec>`` with a context fallback and a fallback, ``k/<spec>/plain`` with the
    fallback only, ``k/<spec>/alone`` with neither (the gateway's one-attempt path)."""
    common = {"api_key_env": KEY_ENV, "timeout": {"connect": 2, "read": 30}}
    common["retries"] = {"max": 2, "max_wait": 0.1}
    upstreams = {
        "fo": {"kind": "openai", "base_url": up.openai_base_url, **common},
        "fa": {"kind": "anthropic", "base_url": up.url, **common},
    }
    models: list[dict[str, Any]] = []
    for kind in ("o", "a"):
        upstream = f"f{kind}"
        models.append({"name": f"{kind}/long", "upstream": upstream, "model": LONG})
        models.append({"name": f"{kind}/backup", "upstream": upstream, "model": BACKUP})
        for spec in [*CONTEXT_REFUSALS, *FILTER_REFUSALS]:
            name = f"{kind}/{spec}"
            fallbacks = {"fallbacks": [f"{kind}/backup"]}
            models.append(
                {"name": name, "upstream": upstream, "model": spec, **fallbacks}
                | {"context_fallbacks": [f"{kind}/long"]}
            )
            models.append(
                {"name": f"{name}/plain", "upstream": upstream, "model": spec, **fallbacks}
            )
            models.append({"name": f"{name}/alone", "upstream": upstream, "model": spec})
    return {"upstreams": upstreams, "models": models}


@pytest.fixture(scope="module")
def gateway() -> Iterator[Gateway]:
    with pytest.MonkeyPatch.context() as mp, FaultUpstream(hold=15.0) as up:
        mp.setenv(KEY_ENV, "sk-upstream-refusals")
        with live_server(create_app(parse_config(gateway_config(up)))) as url:
            yield Gateway(url, up)
    assert up.errors == []


def model_for(spec: str, client: str, path: str, variant: str = "") -> str:
    """The model name that sends ``client``'s request down ``path`` to ``spec``."""
    same = "o" if client == OPENAI_CLIENT else "a"
    kind = same if path == "passthrough" else {"o": "a", "a": "o"}[same]
    return f"{kind}/{spec}{variant}"


def seen_models(up: FaultUpstream, nonce: str) -> list[str]:
    """The upstream models the request carrying ``nonce`` reached, in order."""
    return [r.model for r in list(up.requests) if nonce.encode() in r.body]


def raw_call(url: str, client: str, model: str, stream: bool, prompt: str) -> httpx.Response:
    """The client's request as the SDK sends it, its answer read whole."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": 50,
        "stream": stream,
        "messages": [{"role": "user", "content": prompt}],
    }
    path = "/v1/chat/completions" if client == OPENAI_CLIENT else "/v1/messages"
    headers = {"authorization": f"Bearer {CLIENT_KEY}", "anthropic-version": "2023-06-01"}
    return httpx.post(url + path, json=body, headers=headers, timeout=10)


def cells(specs: list[str]) -> list[Any]:
    return [
        pytest.param(spec, client, stream, path, id=f"{spec}-{client}-{mode}-{path}")
        for spec in specs
        for client in CLIENTS
        for stream, mode in ((False, "json"), (True, "stream"))
        for path in PATHS
    ]


@pytest.mark.parametrize(("spec", "client", "stream", "path"), cells(list(CONTEXT_REFUSALS)))
def test_a_prompt_too_long_goes_to_the_context_fallback(
    gateway: Gateway, spec: str, client: str, stream: bool, path: str
) -> None:
    nonce = uuid.uuid4().hex
    seen = call(client, gateway.url, model_for(spec, client, path), stream, 6.0, 12.0, nonce)
    assert (seen.kind, seen.text) == ("answer", ANSWER_TEXT), seen.describe()
    assert seen.finish
    # one attempt on the refusing deployment (no retry), then the context fallback; the
    # ordinary fallback never
    assert seen_models(gateway.up, nonce) == [spec, LONG]


#: what of each refusal's message must reach the client (its own words)
REASONS = {
    "ctx-openai": "maximum context length is 128000 tokens",
    "ctx-anthropic": "prompt is too long: 208310 tokens",
    "ctx-vllm": "maximum context length is 4096 tokens",
    "ctx-llamacpp": "exceeds the available context size",
    "filter-azure": "content management policy",
    "filter-openai": "rejected as a result of our safety system",
}


def assert_refused(response: httpx.Response, spec: str, client: str, path: str) -> None:
    """``response`` is the upstream's 400, typed in the client's dialect, its reason kept."""
    assert response.status_code == 400, response.text[:300]
    error = response.json()["error"]
    assert REASONS[spec] in error["message"]
    if path == "passthrough":
        # the upstream's own body, relayed (its code too)
        if spec.startswith("filter-"):
            assert error["code"] == FILTER_CODES[spec]
        return
    # rendered by the gateway in the client's dialect
    assert error["type"] == "invalid_request_error"
    if client == ANTHROPIC_CLIENT:
        assert response.json()["type"] == "error"


FILTER_CODES = {"filter-azure": "content_filter", "filter-openai": "content_policy_violation"}


@pytest.mark.parametrize(("spec", "client", "stream", "path"), cells(list(CONTEXT_REFUSALS)))
@pytest.mark.parametrize("variant", ["/plain", "/alone"])
def test_without_context_fallbacks_the_client_gets_the_refusal(
    gateway: Gateway, spec: str, client: str, stream: bool, path: str, variant: str
) -> None:
    nonce = uuid.uuid4().hex
    model = model_for(spec, client, path, variant)
    assert_refused(raw_call(gateway.url, client, model, stream, nonce), spec, client, path)
    assert seen_models(gateway.up, nonce) == [spec]  # not retried, no fallback


@pytest.mark.parametrize(("spec", "client", "stream", "path"), cells(list(FILTER_REFUSALS)))
def test_a_content_filter_refusal_is_answered_at_once(
    gateway: Gateway, spec: str, client: str, stream: bool, path: str
) -> None:
    nonce = uuid.uuid4().hex
    model = model_for(spec, client, path)  # (with fallbacks and context fallbacks)
    assert_refused(raw_call(gateway.url, client, model, stream, nonce), spec, client, path)
    assert seen_models(gateway.up, nonce) == [spec]
