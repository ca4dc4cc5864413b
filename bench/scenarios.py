"""What is measured: the scenarios, the gateway config that routes them, the bodies sent.

Each scenario is a client dialect posting one body to one path; the model alias in the
body picks the route. Routes go to upstreams on the mock nginx, one per answer kind
(OpenAI Chat, OpenAI Responses or Anthropic wire, JSON or SSE), because nginx answers
by path, not by body::

    openai_json       http://127.0.0.1:<nginx>/v1          -> /v1/chat/completions
    openai_stream     http://127.0.0.1:<nginx>/stream/v1   -> /stream/v1/chat/completions
    anthropic_stream  http://127.0.0.1:<nginx>/stream      -> /stream/v1/messages
    responses_json    http://127.0.0.1:<nginx>/v1          -> /v1/responses
    responses_stream  http://127.0.0.1:<nginx>/stream/v1   -> /stream/v1/responses

A gateway scenario names its ``baseline``: the direct-to-nginx scenario hitting the same
upstream answer, from which the overhead is computed.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

from .otlp_sink import sink_url

BODIES = Path(__file__).resolve().parent / "bodies"
#: The key clients present. Every server under test checks it (interlingua's
#: ``server.api_keys``, LiteLLM's master key, which LiteLLM refuses to run without), so
#: client authentication is part of every measured request, as in production.
CLIENT_KEY = "sk-bench-7f3a9c2e5b1d4f6a8c0e2b4d6f8a1c3e"
OPENAI_HEADERS = (f"Authorization: Bearer {CLIENT_KEY}",)
ANTHROPIC_HEADERS = (f"x-api-key: {CLIENT_KEY}", "anthropic-version: 2023-06-01")


@dataclass(frozen=True, slots=True)
class Scenario:
    """One load shape: who calls (``client``), what, and which direct run it compares to."""

    name: str
    title: str
    client: str  # "openai" | "anthropic" | "responses": the dialect of body and answer
    path: str  # request path on the server under test
    body: str  # file in bench/bodies
    model: str  # the model alias routed by the gateway config ("" = keep, direct runs)
    stream: bool
    baseline: str = ""  # name of the direct scenario ("" for direct ones)

    @property
    def direct(self) -> bool:
        """A run straight at nginx (the floor), not through a gateway."""
        return not self.baseline

    @property
    def headers(self) -> tuple[str, ...]:
        """The request headers a real client of this dialect sends."""
        return ANTHROPIC_HEADERS if self.client == "anthropic" else OPENAI_HEADERS


DIRECT = (
    Scenario("direct-json", "direct nginx, chat JSON", "openai", "/v1/chat/completions",
             "openai_chat.json", "", False),
    Scenario("direct-stream", "direct nginx, chat SSE", "openai", "/stream/v1/chat/completions",
             "openai_chat.json", "", True),
    Scenario("direct-anthropic-stream", "direct nginx, messages SSE", "anthropic",
             "/stream/v1/messages", "anthropic_messages.json", "", True),
    Scenario("direct-responses", "direct nginx, responses JSON", "responses", "/v1/responses",
             "responses.json", "", False),
    Scenario("direct-responses-stream", "direct nginx, responses SSE", "responses",
             "/stream/v1/responses", "responses.json", "", True),
    Scenario("direct-embeddings", "direct nginx, embeddings JSON", "openai", "/v1/embeddings",
             "openai_embeddings.json", "", False),
)  # fmt: skip
GATEWAY = (
    Scenario("passthrough", "OpenAI→OpenAI non-stream (passthrough)", "openai",
             "/v1/chat/completions", "openai_chat.json", "bench-openai", False, "direct-json"),
    Scenario("passthrough-stream", "OpenAI→OpenAI stream (passthrough)", "openai",
             "/v1/chat/completions", "openai_chat.json", "bench-openai-stream", True,
             "direct-stream"),
    Scenario("a2o", "Anthropic→OpenAI non-stream", "anthropic", "/v1/messages",
             "anthropic_messages.json", "bench-a2o", False, "direct-json"),
    Scenario("a2o-stream", "Anthropic→OpenAI stream", "anthropic", "/v1/messages",
             "anthropic_messages.json", "bench-a2o-stream", True, "direct-stream"),
    Scenario("o2a-stream", "OpenAI→Anthropic stream", "openai", "/v1/chat/completions",
             "openai_chat.json", "bench-o2a-stream", True, "direct-anthropic-stream"),
    Scenario("a2o-80k", "80 KB Claude Code body, Anthropic→OpenAI non-stream", "anthropic",
             "/v1/messages", "claude_code_80k.json", "bench-a2o", False, "direct-json"),
    Scenario("r2o", "Responses→OpenAI non-stream", "responses", "/v1/responses",
             "responses.json", "bench-r2o", False, "direct-json"),
    Scenario("r2o-stream", "Responses→OpenAI stream", "responses", "/v1/responses",
             "responses.json", "bench-r2o-stream", True, "direct-stream"),
    # r2o/r2o-stream send `store: false` (stateless, as Codex runs): they measure the
    # translation. r2o-stored leaves the API's default, so each answer is also written to
    # the gateway's SQLite store: the price of stored state, reported beside r2o.
    Scenario("r2o-stored", "Responses→OpenAI non-stream, stored (SQLite)", "responses",
             "/v1/responses", "responses_stored.json", "bench-r2o", False, "direct-json"),
    # One name, two deployments weighted 3:1 (two upstream entries on the same nginx
    # route): the routing plan's price beside plain passthrough.
    Scenario("weighted", "OpenAI→OpenAI non-stream, 2 weighted deployments", "openai",
             "/v1/chat/completions", "openai_chat.json", "bench-weighted", False,
             "direct-json"),
    Scenario("r2r", "Responses→Responses non-stream (passthrough)", "responses",
             "/v1/responses", "responses.json", "bench-r2r", False, "direct-responses"),
    Scenario("r2r-stream", "Responses→Responses stream (passthrough)", "responses",
             "/v1/responses", "responses.json", "bench-r2r-stream", True,
             "direct-responses-stream"),
    Scenario("embeddings", "OpenAI embeddings (passthrough)", "openai", "/v1/embeddings",
             "openai_embeddings.json", "bench-embeddings", False, "direct-embeddings"),
)  # fmt: skip
ALL = DIRECT + GATEWAY
BY_NAME = {s.name: s for s in ALL}

#: model alias -> (upstream name, upstream model)
ROUTES = {
    "bench-openai": ("openai_json", "gpt-4o-mini"),
    "bench-openai-stream": ("openai_stream", "gpt-4o-mini"),
    "bench-a2o": ("openai_json", "gpt-4o-mini"),
    "bench-a2o-stream": ("openai_stream", "gpt-4o-mini"),
    "bench-o2a-stream": ("anthropic_stream", "claude-sonnet-4-5"),
    "bench-r2o": ("openai_json", "gpt-4o-mini"),
    "bench-r2o-stream": ("openai_stream", "gpt-4o-mini"),
    "bench-r2r": ("responses_json", "gpt-4o-mini"),
    "bench-r2r-stream": ("responses_stream", "gpt-4o-mini"),
    "bench-embeddings": ("openai_json", "text-embedding-3-small"),
}
#: model alias -> its deployments (upstream name, upstream model, weight), for aliases
#: with several
DEPLOYMENTS = {
    "bench-weighted": (("openai_json", "gpt-4o-mini", 3), ("openai_json_b", "gpt-4o-mini", 1)),
}
#: upstream name -> (kind, path under the nginx root that is its base_url)
UPSTREAMS = {
    "openai_json": ("openai", "/v1"),
    "openai_json_b": ("openai", "/v1"),
    "openai_stream": ("openai", "/stream/v1"),
    "anthropic_stream": ("anthropic", "/stream"),
    "responses_json": ("responses", "/v1"),
    "responses_stream": ("responses", "/stream/v1"),
}


#: the variable the ``team`` config reads the named client key from
TEAM_KEY_ENV = "BENCH_TEAM_KEY"


#: the ``team`` variants (:func:`team_sections`): all on, all off, one feature alone, and
#: all on but one (what each feature costs beside the others: compare with ``on``)
TEAMS = (
    "off",
    "on",
    "keys",
    "usage",
    "metrics",
    "on-no-limits",
    "on-no-usage",
    "on-no-metrics",
    "on-priced",
    "on-budgeted",
    "on-traced",
)


def team_sections(team: str, tmp: Path) -> dict[str, Any]:
    """The team layer's sections of a ``team`` variant: ``off`` (no usage log,
    no metrics, the plain shared key), ``on`` (a named key with limits that a bench never
    reaches, the usage log in SQLite under ``tmp``, metrics), one of those alone
    (``keys``, ``usage``, ``metrics``), or ``on`` less one (``on-no-limits``: the named
    key without limits; ``on-no-usage``; ``on-no-metrics``), or ``on`` with every model
    priced (``on-priced``: a ``prices:`` file under ``tmp`` whose one glob matches every
    model, with each kind of price, so every request's cost is computed), or priced with
    the key's daily and monthly budgets too (``on-budgeted``: each request checked
    against them and charged; budgets a bench never reaches), or ``on`` with traces
    (``on-traced``: every request's spans exported to a local collector)."""
    if team not in TEAMS:
        raise ValueError(f"unknown team variant {team!r} (known: {', '.join(TEAMS)})")
    limits = {"rpm": 10**9, "tpm": 10**12, "max_concurrency": 10**6}
    key: dict[str, Any] = {"name": "bench", "key_env": TEAM_KEY_ENV}
    if team == "on-budgeted":
        limits = {**limits, "budget_per_day": 10**9, "budget_per_month": 10**10}
    if team != "on-no-limits":
        key["limits"] = limits
    usage = {"url": f"sqlite:///{tmp / 'usage.db'}"}
    has = {
        "keys": team in ("keys", "on") or team.startswith("on-"),
        "usage": team in ("usage", "on") or (team.startswith("on-") and team != "on-no-usage"),
        "metrics": team in ("metrics", "on")
        or (team.startswith("on-") and team != "on-no-metrics"),
    }
    priced: dict[str, Any] = {}
    if team == "on-traced":  # (spans to a collector of the bench's own: bench/otlp_sink.py)
        priced["telemetry"] = {"otlp_endpoint": sink_url(), "service_name": "bench"}
    if team in ("on-priced", "on-budgeted"):
        tmp.mkdir(parents=True, exist_ok=True)
        prices = tmp / "prices.yaml"
        price = {"input": 3.00, "output": 15.00, "cache_read": 0.30, "cache_write": 3.75}
        prices.write_text(yaml.safe_dump({"*": {**price, "reasoning": 15.00}}))
        priced["prices"] = str(prices)
    return {
        **({"keys": [key]} if has["keys"] else {}),
        "usage": usage if has["usage"] else False,
        "metrics": has["metrics"],
        **priced,
    }


def gateway_config(
    nginx_base: str,
    port: int,
    scenarios: Collection[Scenario] | None = None,
    team: dict[str, Any] | None = None,
    on_stream_break: str = "",
) -> dict[str, Any]:
    """The interlingua config (as a YAML-able dict) routing every scenario (or only
    ``scenarios``: an older tree under A/B may not know every upstream kind) to nginx;
    ``team`` adds operational sections (:func:`team_sections`). ``on_stream_break``
    (``error`` or ``continue``) gives every model that setting and a fallback (a twin
    of itself), so that both settings are measured on the same path: a stream can only
    be continued where there is a candidate to continue it."""
    models: list[dict[str, Any]] = [
        {"name": alias, "upstream": upstream, "model": model}
        for alias, (upstream, model) in ROUTES.items()
    ]
    models += [
        {"name": alias, "upstream": upstream, "model": model, "weight": weight}
        for alias, deployments in DEPLOYMENTS.items()
        for upstream, model, weight in deployments
    ]
    if scenarios is not None:
        wanted = {s.model for s in scenarios}
        models = [m for m in models if m["name"] in wanted]
    if on_stream_break:
        twins = [{**m, "name": m["name"] + "~spare"} for m in models]
        for m in models:
            m["on_stream_break"] = on_stream_break
            m["fallbacks"] = [m["name"] + "~spare"]
        models += twins
    used = {m["upstream"] for m in models}
    team = team or {}
    # A named key replaces the plain one (the same value, read from TEAM_KEY_ENV).
    keys = [] if team.get("keys") else [CLIENT_KEY]
    return {
        "server": {"host": "127.0.0.1", "port": port, "api_keys": keys},
        "upstreams": {
            name: {"kind": kind, "base_url": nginx_base + path}
            for name, (kind, path) in UPSTREAMS.items()
            if name in used
        },
        "models": models,
        **team,
    }


def gateway_config_yaml(
    nginx_base: str,
    port: int,
    scenarios: Collection[Scenario] | None = None,
    team: dict[str, Any] | None = None,
    on_stream_break: str = "",
) -> str:
    """:func:`gateway_config` as YAML text."""
    config = gateway_config(nginx_base, port, scenarios, team, on_stream_break)
    return yaml.safe_dump(config, sort_keys=False)


def request_body(scenario: Scenario) -> bytes:
    """The compact JSON ``scenario`` posts: the body file with its model and stream set."""
    body = orjson.loads((BODIES / scenario.body).read_bytes())
    if scenario.model:
        body["model"] = scenario.model
    if scenario.path.endswith("/embeddings"):  # (no stream in the embeddings API)
        return orjson.dumps(body)
    body["stream"] = scenario.stream
    if scenario.stream and scenario.client == "openai":
        # What the OpenAI SDK sends when the caller wants usage
        # (docs/protocols.md, "Chat Completions: stream").
        body["stream_options"] = {"include_usage": True}
    return orjson.dumps(body)


def check_answer(scenario: Scenario, status: int, content_type: str, body: bytes) -> str:
    """Why one answer to ``scenario`` is wrong ("" when it is right).

    Checked once before each load run: wrk only counts statuses, so a server answering
    200 with the wrong thing would otherwise be measured as if it worked.
    """
    if status != 200:
        return f"HTTP {status}: {body[:300]!r}"
    if scenario.stream:
        if "text/event-stream" not in content_type:
            return f"content-type {content_type!r}, expected text/event-stream"
        if scenario.client == "openai" and not body.rstrip().endswith(b"data: [DONE]"):
            return f"OpenAI stream does not end with [DONE]: ...{body[-200:]!r}"
        if scenario.client == "anthropic" and b"event: message_stop" not in body:
            return f"Anthropic stream has no message_stop: ...{body[-200:]!r}"
        # (by the data's type: LiteLLM writes no `event:` lines, which the SDK tolerates)
        if scenario.client == "responses" and b'"type":"response.completed"' not in body:
            return f"Responses stream has no response.completed: ...{body[-200:]!r}"
        if b"42" not in body:
            return "the streamed text is missing"
        return ""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return f"not JSON: {body[:300]!r}"
    if scenario.path.endswith("/embeddings"):
        vectors = [d.get("embedding") for d in data.get("data", []) if isinstance(d, dict)]
        if len(vectors) != 2 or not all(isinstance(v, str) and len(v) > 8000 for v in vectors):
            return f"not two base64 vectors: {body[:300]!r}"
        return ""
    if scenario.client == "openai":
        text = data.get("choices", [{}])[0].get("message", {}).get("content")
    elif scenario.client == "responses":
        text = "".join(
            part.get("text", "")
            for item in data.get("output", [])
            if isinstance(item, dict) and item.get("type") == "message"
            for part in item.get("content", [])
            if isinstance(part, dict)
        )
    else:
        text = "".join(b.get("text", "") for b in data.get("content", []) if isinstance(b, dict))
    if not text or "42" not in text:
        return f"unexpected answer: {body[:300]!r}"
    return ""
