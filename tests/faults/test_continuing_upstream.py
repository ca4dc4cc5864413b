"""The continuing upstream sends what each behaviour claims, and continues correctly.

Plain httpx reads it, so that when a continuation test fails the blame lands on the
gateway, not on the instrument: every behaviour in every dialect, stream and not, the
remainder a prefill or instruct continuation gets, the ``*`` suffix, the request log.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from .continuing_client import body_text, call, error_message, fold, request
from .continuing_upstream import (
    ANSWER,
    ANTHROPIC_FILTER,
    PREFILL_REFUSAL,
    REASONING_TEXT,
    TOOL,
    TOOL_TEXT,
    ContinuingUpstream,
    expected_text,
)
from .continuing_wire import CHAT, DIALECTS, MESSAGES, PATHS, RESPONSES, pieces

#: The instrument's own tests run with the slow suites (``.ci/run``): they check the test
#: upstream, not the gateway, and tell something only when the upstream changes; the
#: continuation matrix drives every behaviour through the gateway in the default run, and
#: fails there if the upstream misbehaves.
pytestmark = pytest.mark.slow

WORDS = pieces(ANSWER)
STALL_READ = 0.4


@pytest.fixture(scope="module")
def up() -> Iterator[ContinuingUpstream]:
    with ContinuingUpstream(hold=20) as server:
        yield server


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("usage", [False, True])
def test_ok_stream_is_the_real_shape(up: ContinuingUpstream, dialect: str, usage: bool) -> None:
    options: dict[str, Any] = {"include_usage": True} if usage else {}
    got = call(up, dialect, request(dialect, "ok", stream_options=options))
    assert got.status == 200 and got.headers["content-type"] == "text/event-stream"
    assert got.end == "eof" and got.headers["transfer-encoding"] == "chunked"
    seen = fold(dialect, got.raw)
    assert seen.text == ANSWER and seen.done and not seen.invalid and len(seen.ids) == 1
    assert seen.finish == (
        None if dialect == RESPONSES else "stop" if dialect == CHAT else "end_turn"
    )
    if dialect == RESPONSES:
        assert seen.sequence == list(range(len(seen.sequence)))
    if dialect == CHAT and not usage:
        assert seen.usage is None  # only sent when asked, as OpenAI does
    else:
        out = seen.usage.get("completion_tokens", seen.usage.get("output_tokens"))
        assert out == len(WORDS)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_ok_json(up: ContinuingUpstream, dialect: str) -> None:
    got = call(up, dialect, request(dialect, "ok", stream=False))
    assert got.status == 200 and body_text(dialect, got.json()) == ANSWER


def test_ids_differ_per_answer(up: ContinuingUpstream) -> None:
    first, second = (fold(CHAT, call(up, CHAT, request(CHAT, "ok")).raw) for _ in range(2))
    assert first.ids != second.ids  # a splice must rewrite the continuation's ids


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("n", [0, 3, 9])
def test_cut_drops_the_connection_after_n_tokens(
    up: ContinuingUpstream, dialect: str, n: int
) -> None:
    got = call(up, dialect, request(dialect, f"cut:{n}"))
    seen = fold(dialect, got.raw)
    assert got.status == 200 and got.end == "cut"
    assert seen.text == "".join(WORDS[:n]) and not seen.done and seen.finish is None


@pytest.mark.parametrize("dialect", DIALECTS)
def test_stall_holds_the_connection_open(up: ContinuingUpstream, dialect: str) -> None:
    got = call(up, dialect, request(dialect, "stall:4"), read=STALL_READ)
    seen = fold(dialect, got.raw)
    assert got.end == "timeout" and seen.text == "".join(WORDS[:4]) and not seen.done


@pytest.mark.parametrize("dialect", DIALECTS)
def test_malformed_event_stands_in_for_a_token(up: ContinuingUpstream, dialect: str) -> None:
    got = call(up, dialect, request(dialect, "malformed:5"))
    seen = fold(dialect, got.raw)
    assert got.end == "eof" and seen.done and len(seen.invalid) == 1
    assert seen.text == "".join(WORDS[:5] + WORDS[6:])  # a reader that skips it loses a word


@pytest.mark.parametrize("dialect", DIALECTS)
def test_error_event_after_n_tokens(up: ContinuingUpstream, dialect: str) -> None:
    got = call(up, dialect, request(dialect, "error-event:6"))
    seen = fold(dialect, got.raw)
    assert got.status == 200 and got.end == "eof" and not seen.done
    assert seen.text == "".join(WORDS[:6]) and seen.error is not None
    if dialect == MESSAGES:
        assert b"event: error\n" in got.raw and seen.error["type"] == "overloaded_error"
    elif dialect == RESPONSES:
        assert b"event: response.failed\n" in got.raw and seen.error["code"] == "server_error"
        assert seen.sequence == list(range(len(seen.sequence)))
    else:
        assert got.raw.endswith(b'"code":null}}\n\n')


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(("model", "words"), [("no-done", len(WORDS)), ("no-done:7", 7)])
def test_no_done_ends_cleanly_without_an_end(
    up: ContinuingUpstream, dialect: str, model: str, words: int
) -> None:
    got = call(up, dialect, request(dialect, model, stream_options={"include_usage": True}))
    seen = fold(dialect, got.raw)
    assert got.end == "eof" and seen.text == "".join(WORDS[:words])
    assert not seen.done and seen.finish is None and seen.usage is None


@pytest.mark.parametrize("dialect", DIALECTS)
def test_first_after_sends_the_head_then_waits(up: ContinuingUpstream, dialect: str) -> None:
    got = call(up, dialect, request(dialect, "first-after:0.5"))
    assert got.head_after < 0.4 and got.body_after is not None and got.body_after >= 0.5
    assert fold(dialect, got.raw).text == ANSWER
    started = time.monotonic()
    assert call(up, dialect, request(dialect, "first-after:0.3", stream=False)).status == 200
    assert time.monotonic() - started >= 0.3


def test_silent_never_sends_a_head(up: ContinuingUpstream) -> None:
    with pytest.raises(httpx.ReadTimeout):
        call(up, CHAT, request(CHAT, "silent"), read=STALL_READ)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_reset_closes_before_the_head(up: ContinuingUpstream, dialect: str) -> None:
    with pytest.raises(httpx.RemoteProtocolError):
        call(up, dialect, request(dialect, "reset"))


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(
    ("model", "code", "retry_after"),
    [("429", 429, None), ("429-ra:3", 429, "3"), ("503", 503, None)],
)
def test_statuses(
    up: ContinuingUpstream, dialect: str, model: str, code: int, retry_after: str | None
) -> None:
    got = call(up, dialect, request(dialect, model))
    assert got.status == code and got.headers.get("retry-after") == retry_after
    error = got.json()
    if dialect == MESSAGES:
        assert error["type"] == "error"
        assert error["error"]["type"] == ("rate_limit_error" if code == 429 else "api_error")
    else:
        assert error["error"]["message"] == f"continuing upstream says {code}"


@pytest.mark.parametrize("dialect", DIALECTS)
def test_500_once_counts_attempts_per_upstream(dialect: str) -> None:
    with ContinuingUpstream() as up:
        assert call(up, dialect, request(dialect, "500-once")).status == 500
        assert call(up, dialect, request(dialect, "500-once")).status == 200
        assert [seen.attempt for seen in up.requests_for("500-once")] == [1, 2]
    with ContinuingUpstream() as fresh:  # the count belongs to the instance
        assert call(fresh, dialect, request(dialect, "500-once")).status == 500


@pytest.mark.parametrize("dialect", DIALECTS)
def test_context_and_filter_refusals(up: ContinuingUpstream, dialect: str) -> None:
    ctx = call(up, dialect, request(dialect, "ctx"))
    filtered = call(up, dialect, request(dialect, "filter"))
    assert ctx.status == filtered.status == 400
    if dialect == MESSAGES:
        assert error_message(ctx).startswith("prompt is too long")
        assert error_message(filtered) == ANTHROPIC_FILTER
    else:
        assert ctx.json()["error"]["code"] == "context_length_exceeded"
        assert filtered.json()["error"]["code"] == "content_policy_violation"


@pytest.mark.parametrize("dialect", DIALECTS)
def test_refuse_prefill_refuses_only_a_prefill(up: ContinuingUpstream, dialect: str) -> None:
    refused = call(up, dialect, request(dialect, "refuse-prefill", prefix="whatever"))
    assert refused.status == 400 and error_message(refused) == PREFILL_REFUSAL
    if dialect == MESSAGES:
        assert refused.json()["error"]["type"] == "invalid_request_error"
    plain = call(up, dialect, request(dialect, "refuse-prefill"))
    assert fold(dialect, plain.raw).text == ANSWER
    instruct = call(
        up, dialect, request(dialect, "refuse-prefill", prefix="The quick", instruct=True)
    )
    assert fold(dialect, instruct.raw).text == ANSWER.removeprefix("The quick")


def test_down_then_healthy_and_reset_clock() -> None:
    with ContinuingUpstream() as up:
        assert call(up, CHAT, request(CHAT, "down:0.4")).status == 503
        time.sleep(0.45)
        assert call(up, MESSAGES, request(MESSAGES, "down:0.4")).status == 200
        up.reset_clock()
        assert call(up, RESPONSES, request(RESPONSES, "down:0.4")).status == 503


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("n", [0, 2, 5])
def test_tool_cut_inside_the_arguments(up: ContinuingUpstream, dialect: str, n: int) -> None:
    got = call(up, dialect, request(dialect, f"tool-cut:{n}"))
    seen = fold(dialect, got.raw)
    assert got.end == "cut" and seen.text == TOOL_TEXT and not seen.done
    tool_id = TOOL.tool_use_id if dialect == MESSAGES else TOOL.call_id
    assert seen.tool == (tool_id, TOOL.name) and seen.args == "".join(TOOL.pieces[:n])


@pytest.mark.parametrize("dialect", DIALECTS)
def test_tool_turn_whole(up: ContinuingUpstream, dialect: str) -> None:
    # A continuation of the whole text gets the whole call: the complete tool turn.
    got = call(up, dialect, request(dialect, "tool-cut:1", prefix=TOOL_TEXT))
    seen = fold(dialect, got.raw)
    assert got.end == "eof" and seen.done and seen.text == ""
    assert seen.args == TOOL.arguments and orjson.loads(seen.args) == {
        "city": "Paris",
        "unit": "celsius",
    }
    assert seen.finish in (None, "tool_calls", "tool_use")
    answer = call(
        up, dialect, request(dialect, "tool-cut:1", stream=False, prefix="Let me ")
    ).json()
    assert body_text(dialect, answer) == TOOL_TEXT.removeprefix("Let me ")


@pytest.mark.parametrize("dialect", DIALECTS)
def test_reasoning_cut_inside_the_reasoning(up: ContinuingUpstream, dialect: str) -> None:
    got = call(up, dialect, request(dialect, "reasoning-cut:4"))
    seen = fold(dialect, got.raw)
    assert got.end == "cut" and seen.text == "" and not seen.done
    assert seen.reasoning == "".join(pieces(REASONING_TEXT)[:4])
    if dialect == MESSAGES:
        assert b'"signature_delta"' not in got.raw  # cut before the block's end
    whole = fold(dialect, call(up, dialect, request(dialect, "reasoning-cut:99", prefix="")).raw)
    assert whole.reasoning == "" and whole.text == ANSWER  # a continuation does not reason


@pytest.mark.parametrize("dialect", DIALECTS)
def test_reasoning_turn_signature(up: ContinuingUpstream, dialect: str) -> None:
    got = call(up, dialect, request(dialect, "reasoning-cut:999"))
    seen = fold(dialect, got.raw)
    assert seen.reasoning == REASONING_TEXT and seen.text == ANSWER  # all of it, then cut
    assert got.end == "cut" and not seen.done
    if dialect == MESSAGES:
        assert b'"signature_delta"' in got.raw


# -- continuations -----------------------------------------------------------------------------

SPLITS = [0, 1, 4, 8, len(WORDS) - 1]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("instruct", [False, True])
@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("stream", [True, False])
def test_continuation_answers_the_remainder(
    up: ContinuingUpstream, dialect: str, instruct: bool, split: int, stream: bool
) -> None:
    prefix = "".join(WORDS[:split])
    model = f"cut:{split}"
    body = request(dialect, model, stream=stream, prefix=prefix, instruct=instruct)
    got = call(up, dialect, body)
    text = fold(dialect, got.raw).text if stream else body_text(dialect, got.json())
    assert got.status == 200 and got.end == "eof"
    assert prefix + text == ANSWER
    seen = up.requests[-1]
    assert seen.continuation == ("instruct" if instruct else "prefill") and seen.prefix == prefix


@pytest.mark.parametrize("dialect", DIALECTS)
def test_stripped_prefix_continues_with_the_lost_whitespace(
    up: ContinuingUpstream, dialect: str
) -> None:
    # After "dog.\n\nThen " the gateway may send "...dog.\n\nThen" (Anthropic refuses
    # trailing whitespace): the continuation starts with the space the prefix lost.
    prefix = "".join(WORDS[:9])
    assert prefix.endswith("Then ")
    got = call(up, dialect, request(dialect, "stall:2", prefix=prefix.rstrip()))
    text = fold(dialect, got.raw).text
    assert text.startswith(" it ") and prefix.rstrip() + text == ANSWER
    paragraph = ANSWER[: ANSWER.index("\n") + 1]  # cut inside a whitespace run
    text = fold(dialect, call(up, dialect, request(dialect, "ok", prefix=paragraph)).raw).text
    assert text.startswith("\nThen") and paragraph + text == ANSWER


def test_chat_prefill_with_vllm_fields(up: ContinuingUpstream) -> None:
    body = request(CHAT, "malformed:1", prefix="The ", continue_final_message=True)
    body["add_generation_prompt"] = False
    got = call(up, CHAT, body)
    assert fold(CHAT, got.raw).text == ANSWER.removeprefix("The ")
    assert up.requests[-1].body["continue_final_message"] is True


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(
    "model", ["cut:3", "stall:3", "malformed:3", "error-event:3", "503", "silent", "reset"]
)
def test_continuations_are_healthy_without_the_star(
    up: ContinuingUpstream, dialect: str, model: str
) -> None:
    got = call(up, dialect, request(dialect, model, prefix="The quick ", instruct=True))
    seen = fold(dialect, got.raw)
    assert got.status == 200 and seen.done and "The quick " + seen.text == ANSWER


@pytest.mark.parametrize("dialect", DIALECTS)
def test_star_breaks_continuations_too(up: ContinuingUpstream, dialect: str) -> None:
    prefix = "".join(WORDS[:3])
    got = call(up, dialect, request(dialect, "cut:3*", prefix=prefix))
    seen = fold(dialect, got.raw)
    assert got.end == "cut" and not seen.done
    assert prefix + seen.text == "".join(WORDS[:6])  # three more tokens of the remainder
    assert call(up, dialect, request(dialect, "503*", prefix=prefix)).status == 503
    stalled = call(up, dialect, request(dialect, "stall:2*", prefix=prefix), read=STALL_READ)
    assert stalled.end == "timeout"


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_wrong_prefix_is_refused_and_recorded(dialect: str) -> None:
    with ContinuingUpstream() as up:
        got = call(up, dialect, request(dialect, "ok", prefix="The quick red"))
        assert got.status == 400 and "does not start" in error_message(got)
        assert [seen.prefix for seen in up.mismatches] == ["The quick red"]


def test_unknown_behaviour(up: ContinuingUpstream) -> None:
    got = call(up, CHAT, request(CHAT, "no-such-thing"))
    assert got.status == 400 and "unknown behaviour" in error_message(got)


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("model", ["cut:2", "tool-cut:1", "reasoning-cut:1", "no-done"])
def test_non_stream_breaks_send_half_the_body(
    up: ContinuingUpstream, dialect: str, model: str
) -> None:
    got = call(up, dialect, request(dialect, model, stream=False))
    assert got.status == 200 and got.end == "cut"
    assert int(got.headers["content-length"]) > len(got.raw) > 0


@pytest.mark.parametrize("dialect", DIALECTS)
def test_non_stream_malformed_and_error_event(up: ContinuingUpstream, dialect: str) -> None:
    with pytest.raises(orjson.JSONDecodeError):
        call(up, dialect, request(dialect, "malformed:2", stream=False)).json()
    failed = call(up, dialect, request(dialect, "error-event:2", stream=False))
    assert failed.status == 200
    answer = failed.json()
    assert answer["status"] == "failed" if dialect == RESPONSES else "error" in answer


def test_the_log_records_every_request() -> None:
    with ContinuingUpstream() as up:
        started = time.monotonic()
        call(up, CHAT, request(CHAT, "cut:2"))
        time.sleep(0.2)
        headers = {"x-api-key": "k1"}
        body = request(MESSAGES, "cut:2", prefix="The quick")
        httpx.post(up.url + PATHS[MESSAGES], json=body, headers=headers, timeout=5)
        call(up, RESPONSES, request(RESPONSES, "ok", prefix="The ", instruct=True))
        first, second = up.requests_for("cut:2")
        assert (first.path, first.dialect, first.continuation, first.attempt) == (
            PATHS[CHAT], CHAT, None, 1,
        )  # fmt: skip
        assert (second.dialect, second.continuation, second.prefix) == (
            MESSAGES,
            "prefill",
            "The quick",
        )
        assert second.attempt == 2 and second.headers["x-api-key"] == "k1"
        assert second.body["messages"][-1]["role"] == "assistant"
        assert started <= first.at < second.at and up.gaps("cut:2")[0] >= 0.2
        last = up.requests[-1]
        assert (last.behaviour, last.continuation, last.prefix) == ("ok", "instruct", "The ")
        assert len(up.requests) == 3


def test_expected_text_and_base_urls(up: ContinuingUpstream) -> None:
    assert expected_text("cut:3*") == expected_text("ok") == ANSWER
    assert expected_text("tool-cut:2") == TOOL_TEXT
    assert len(WORDS) == 19 and "".join(WORDS) == ANSWER
    assert up.base_url(CHAT) == up.base_url(RESPONSES) == up.url + "/v1"
    assert up.base_url(MESSAGES) == up.url


def test_trailing_reasoning_is_a_prefill_of_no_text(up: ContinuingUpstream) -> None:
    body = request(RESPONSES, "reasoning-cut:2")
    body["input"].append({"type": "reasoning", "id": "rs_1", "summary": []})
    seen = fold(RESPONSES, call(up, RESPONSES, body).raw)
    assert seen.done and seen.reasoning == "" and seen.text == ANSWER
    chat = request(CHAT, "reasoning-cut:2")
    chat["messages"].append({"role": "assistant", "content": None, "reasoning_content": "Hm"})
    assert fold(CHAT, call(up, CHAT, chat).raw).text == ANSWER
    assert up.requests[-1].continuation == "prefill" and up.requests[-1].prefix == ""


def test_the_sdks_read_the_turns(up: ContinuingUpstream) -> None:
    # The official SDKs' stream accumulators take every turn shape as a real one.
    chat = openai.OpenAI(base_url=up.base_url(CHAT), api_key="k", max_retries=0)
    turns: list[Any] = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": TOOL_TEXT},
    ]
    with chat.chat.completions.stream(
        model="tool-cut:1", messages=turns, stream_options={"include_usage": True}
    ) as stream:
        completion = stream.get_final_completion()
    calls = completion.choices[0].message.tool_calls or []
    assert [c.function.arguments for c in calls] == [TOOL.arguments]
    assert completion.usage is not None and completion.usage.completion_tokens == 5
    claude = anthropic.Anthropic(base_url=up.base_url(MESSAGES), api_key="k", max_retries=0)
    with claude.messages.stream(
        model="reasoning-cut:1", max_tokens=99, messages=[{"role": "user", "content": "Hi"}]
    ) as messages:
        with pytest.raises(Exception, match="incomplete chunked read"):  # the SDK's own httpx
            messages.get_final_message()
        assert [b.type for b in messages.current_message_snapshot.content] == ["thinking"]
    with chat.responses.stream(model="ok", input="Hi") as responses:
        response = responses.get_final_response()
    assert response.output_text == ANSWER and response.usage is not None


def wait_for_end(up: ContinuingUpstream, model: str) -> str | None:
    """How the last stream for ``model`` ended, once it did (None if not within 3 s)."""
    deadline = time.monotonic() + 3
    while (ended := up.requests_for(model)[-1].ended) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return ended


def test_the_log_says_how_each_stream_ended() -> None:
    with ContinuingUpstream(hold=10) as up:
        call(up, CHAT, request(CHAT, "ok"))
        call(up, CHAT, request(CHAT, "cut:2"))
        assert [seen.ended for seen in up.requests] == ["eof", "dropped"]
        started = time.monotonic()
        call(up, MESSAGES, request(MESSAGES, "stall:2"), read=STALL_READ)
        assert wait_for_end(up, "stall:2") == "peer-left"  # noticed at once, not after `hold`
        assert time.monotonic() - started < 2
        with pytest.raises(httpx.ReadTimeout):
            call(up, RESPONSES, request(RESPONSES, "silent"), read=STALL_READ)
        assert wait_for_end(up, "silent") == "peer-left"
        # a client that leaves a slow stream before it starts: no error on the upstream
        assert call(up, CHAT, request(CHAT, "first-after:0.6"), read=0.2).end == "timeout"
        assert wait_for_end(up, "first-after:0.6") == "peer-left"


@pytest.mark.parametrize("dialect", DIALECTS)
def test_healthy_tool_and_reasoning_turns(up: ContinuingUpstream, dialect: str) -> None:
    tool = fold(dialect, call(up, dialect, request(dialect, "tool")).raw)
    assert tool.done and tool.text == TOOL_TEXT and tool.args == TOOL.arguments
    thought = fold(dialect, call(up, dialect, request(dialect, "reasoning")).raw)
    assert thought.done and thought.reasoning == REASONING_TEXT and thought.text == ANSWER
    rest = fold(dialect, call(up, dialect, request(dialect, "tool", prefix="Let me ")).raw)
    assert rest.text == TOOL_TEXT.removeprefix("Let me ") and rest.args == TOOL.arguments
