"""Client keys (docs/config.md, "Keys"): 401 without one, 403 for a model the key may not use, 429 over
its limits, in the caller's dialect, stream and not; the key itself never logged.

    openai / anthropic SDK -> live gateway (keys:) -> mock Chat and Messages upstreams
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import anthropic
import httpx
import openai
import pytest

from interlingua.config import KeyLimits, parse_config
from interlingua.server import create_app
from interlingua.server.keys import KeyRing
from interlingua.usage.keys_store import StoredKey, secret_digest
from interlingua.usage.record import Record

from ..live_server import live_server
from .mock_upstream import MockOpenAI, endless, mock_openai, ok
from .test_shaping import anthropic_answer

KEY_A = "sk-team-a-0123456789"
KEY_B = "sk-team-b-abcdefghij"
KEY_C = "sk-team-c-limited-concurrency"
KEY_D = "sk-team-d-per-day"
KEY_R = "sk-team-r-per-minute"
PLAIN = "sk-plain-shared"
HELLO: Any = [{"role": "user", "content": "hello"}]


class Rows:
    """A record sink that keeps every row (thread-safe: the gateway runs in a thread)."""

    def __init__(self) -> None:
        self.rows: list[Record] = []
        self.lock = threading.Lock()

    def records(self, rows: Sequence[Record]) -> None:
        with self.lock:
            self.rows.extend(rows)

    def matching(
        self, wanted: Callable[[Record], bool], count: int = 1, timeout: float = 5.0
    ) -> list[Record]:
        """The rows ``wanted`` picks, once there are ``count`` (the accounting hands
        records over in batches, a tenth of a second apart)."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                found = [row for row in self.rows if wanted(row)]
            if len(found) >= count or time.monotonic() > deadline:
                return found
            time.sleep(0.01)


class Stack:
    def __init__(self, url: str, chat: MockOpenAI, messages: MockOpenAI, rows: Rows) -> None:
        self.url, self.chat, self.messages, self.rows = url, chat, messages, rows


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    mp = pytest.MonkeyPatch()
    mp.setenv("TEAM_A_KEY", KEY_A)
    mp.setenv("TEAM_C_KEY", KEY_C)
    mp.setenv("TEAM_D_KEY", KEY_D)
    mp.setenv("TEAM_R_KEY", KEY_R)
    with (
        mock_openai() as chat,
        mock_openai("/v1/messages", default=anthropic_answer) as messages,
    ):
        config = parse_config(
            {
                "server": {"api_keys": [PLAIN]},
                "upstreams": {
                    "chat": {"kind": "openai", "base_url": chat.base_url},
                    "anth": {"kind": "anthropic", "base_url": messages.base_url},
                },
                "models": [
                    {"name": "gpt-x", "upstream": "chat"},
                    {"name": "lb", "upstream": "chat"},
                    {"name": "claude-x", "upstream": "anth"},
                    {"name": "claude-y", "upstream": "anth"},
                ],
                "keys": [
                    {"name": "team-a", "key_env": "TEAM_A_KEY"},
                    {
                        "name": "team-b",
                        "key_sha256": hashlib.sha256(KEY_B.encode()).hexdigest(),
                        "models": ["lb", "claude-*"],
                    },
                    {"name": "team-r", "key_env": "TEAM_R_KEY", "limits": {"rpm": 3}},
                    {"name": "team-c", "key_env": "TEAM_C_KEY", "limits": {"max_concurrency": 1}},
                    {"name": "team-d", "key_env": "TEAM_D_KEY", "limits": {"tokens_per_day": 100}},
                ],
            }
        )
        rows = Rows()
        try:
            with live_server(create_app(config, record_sinks=[rows])) as url:
                yield Stack(url, chat, messages, rows)
        finally:
            mp.undo()


def gpt(stack: Stack, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.url + "/v1", api_key=key, max_retries=0)


def claude(stack: Stack, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stack.url, api_key=key, max_retries=0)


def chat(client: openai.OpenAI, model: str, stream: bool) -> None:
    if stream:
        for _ in client.chat.completions.create(model=model, messages=HELLO, stream=True):
            pass
    else:
        client.chat.completions.create(model=model, messages=HELLO)


def message(client: anthropic.Anthropic, model: str, stream: bool) -> None:
    if stream:
        with client.messages.stream(model=model, max_tokens=16, messages=HELLO) as events:
            for _ in events:
                pass
    else:
        client.messages.create(model=model, max_tokens=16, messages=HELLO)


@pytest.mark.parametrize("stream", [False, True])
def test_named_env_digest_and_plain_keys_are_let_in(stack: Stack, stream: bool) -> None:
    for key in (KEY_A, PLAIN):
        with gpt(stack, key) as client:
            chat(client, "gpt-x", stream)
        with claude(stack, key) as client:
            message(client, "claude-x", stream)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("key", ["sk-wrong", KEY_A + "x", KEY_A[:-1]])
def test_a_wrong_key_is_a_401_in_each_dialect(stack: Stack, stream: bool, key: str) -> None:
    with gpt(stack, key) as client, pytest.raises(openai.AuthenticationError) as err:
        chat(client, "gpt-x", stream)
    assert err.value.code == "invalid_api_key"
    with claude(stack, key) as client, pytest.raises(anthropic.AuthenticationError) as aerr:
        message(client, "claude-x", stream)
    assert aerr.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]


def test_a_missing_key_is_a_401(stack: Stack) -> None:
    for path in ("/v1/chat/completions", "/v1/messages", "/v1/responses"):
        answer = httpx.post(stack.url + path, json={"model": "gpt-x"})
        assert answer.status_code == 401, path
    assert httpx.get(stack.url + "/v1/models").status_code == 401


@pytest.mark.parametrize("stream", [False, True])
def test_a_model_the_key_may_not_use_is_a_403(stack: Stack, stream: bool) -> None:
    with gpt(stack, KEY_B) as client, pytest.raises(openai.PermissionDeniedError) as err:
        chat(client, "gpt-x", stream)
    assert "not available to key 'team-b'" in err.value.message
    with claude(stack, KEY_B) as client:
        message(client, "claude-y", stream)  # matches "claude-*"
    # count_tokens is checked the same way
    answer = httpx.post(
        stack.url + "/v1/messages/count_tokens",
        headers={"x-api-key": KEY_B, "anthropic-version": "2023-06-01"},
        json={"model": "gpt-x", "messages": HELLO},
    )
    assert answer.status_code == 403
    assert answer.json()["error"]["type"] == "permission_error"


def test_the_model_list_shows_what_the_key_may_use(stack: Stack) -> None:
    with gpt(stack, KEY_B) as client:
        assert sorted(m.id for m in client.models.list()) == ["claude-x", "claude-y", "lb"]
    with gpt(stack, KEY_A) as client:
        assert sorted(m.id for m in client.models.list()) == ["claude-x", "claude-y", "gpt-x", "lb"]


def test_rpm_refuses_with_429_and_retry_after_in_each_dialect(stack: Stack) -> None:
    # team-r: rpm 3. Three admitted (over both dialects), then refused.
    with gpt(stack, KEY_R) as client:
        chat(client, "gpt-x", False)
        chat(client, "gpt-x", True)
    with claude(stack, KEY_R) as client:
        message(client, "claude-x", False)
        with pytest.raises(anthropic.RateLimitError) as aerr:
            message(client, "claude-x", True)
    assert aerr.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    retry_after = float(aerr.value.response.headers["retry-after"])
    assert 0 < retry_after <= 60
    with gpt(stack, KEY_R) as client, pytest.raises(openai.RateLimitError) as err:
        chat(client, "gpt-x", False)
    assert "team-r" in err.value.message and "rpm 3" in err.value.message
    # a refused request is not admitted: it did not take a place in the window
    refused = stack.rows.matching(lambda r: r.key == "team-r" and r.status == 429, 2)
    assert len(refused) == 2 and all(r.error == "rate_limit" for r in refused)


def test_max_concurrency_refuses_while_a_stream_is_open(stack: Stack) -> None:
    stack.chat.enqueue(endless())
    with httpx.Client(base_url=stack.url, headers={"authorization": f"Bearer {KEY_C}"}) as http:
        body = {"model": "gpt-x", "messages": HELLO, "stream": True}
        with http.stream("POST", "/v1/chat/completions", json=body) as held:
            assert held.status_code == 200
            reading = held.iter_bytes()  # (kept: a dropped generator closes the response)
            next(reading)
            refused = http.post("/v1/chat/completions", json={**body, "stream": False})
            assert refused.status_code == 429
            assert "max_concurrency 1" in refused.json()["error"]["message"]
        stack.chat.wait_for_end()
        # the slot is free once the stream has closed
        stack.chat.enqueue(ok)
        assert http.post("/v1/chat/completions", json={**body, "stream": False}).is_success


def test_tokens_per_day_counts_what_answers_cost(stack: Stack) -> None:
    # team-d: 100 tokens a day; each mock Chat answer reports 59.
    with gpt(stack, KEY_D) as client:
        chat(client, "gpt-x", False)
        chat(client, "gpt-x", True)  # 118 used: the next is refused
        # (a stream is charged when its response is over, just after the client read its
        # end: a request sent at once may still find the day's count without it)
        deadline = time.monotonic() + 5
        while True:
            try:
                chat(client, "gpt-x", False)
            except openai.RateLimitError as refused:
                err = refused
                break
            assert time.monotonic() < deadline, "the day's tokens were never spent"
            time.sleep(0.05)
    assert "tokens_per_day 100" in err.message
    retry_after = float(err.response.headers["retry-after"])
    assert 0 < retry_after <= 86400


def test_a_key_is_found_by_its_digest_in_one_lookup_among_many(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Authentication is one dict lookup by the presented key's SHA-256 (why that is as
    safe as comparing every digest: server/keys.py's docstring), so 20,000 keys cost a
    request what two do: no comparison per key, whichever key is presented."""
    monkeypatch.setenv("K1", "first")
    config = parse_config(
        {"keys": [{"name": "one", "key_env": "K1"}], "server": {"api_keys": ["third"]}}
    )
    rows = [
        StoredKey(f"db-{i}", secret_digest(f"secret-{i}"), (), KeyLimits(), 0.0)
        for i in range(20_000)
    ]
    ring = KeyRing.from_config(config, stored=rows)
    import hmac

    calls: list[int] = []
    real = hmac.compare_digest

    def counting(a: Any, b: Any) -> bool:
        calls.append(1)
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    presented = (
        ("first", "one"),
        ("third", None),
        ("secret-0", "db-0"),
        ("secret-19999", "db-19999"),
    )
    for secret, name in presented:
        found = ring.authenticate({"authorization": f"Bearer {secret}"})
        assert found is not None and found.name == name
    with pytest.raises(Exception, match="Invalid or missing API key"):
        ring.authenticate({"x-api-key": "nope"})
    assert calls == []
    started = time.perf_counter()
    for _ in range(2000):
        ring.authenticate({"x-api-key": "secret-12345"})
    assert time.perf_counter() - started < 0.5  # (20,000 comparisons each: ~10 s)


def test_a_key_env_that_is_unset_refuses_to_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    config = parse_config({"keys": [{"name": "x", "key_env": "NOT_SET_ANYWHERE"}]})
    with pytest.raises(ValueError, match="NOT_SET_ANYWHERE is not set"):
        create_app(config)


def test_no_key_in_any_log_line_or_record(stack: Stack, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for key in (KEY_A, KEY_B, PLAIN, "sk-wrong-guess"):
        with gpt(stack, key) as client, contextlib.suppress(openai.APIError):
            chat(client, "lb", False)
    rows = stack.rows.matching(lambda r: r.model == "lb", 3)
    text = caplog.text + repr(rows)
    for key in (KEY_A, KEY_B, KEY_C, KEY_D, KEY_R, PLAIN, "sk-wrong-guess"):
        assert key not in text
    named = {r.key for r in rows}
    assert {"team-a", "team-b"} <= named
