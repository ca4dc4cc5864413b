"""``bench.soak``: the answer checks, the verdicts and the report, then a few-second run.

The checks are pure (:mod:`bench.soak_check`) and tested on hand-made answers; the smoke
run starts the fault upstream and ``interlingua serve`` for real, as the soak does, and
checks that the report has its fields and that its counts add up. It does not ask for 0
unexpected outcomes: that is the soak's verdict on the gateway, not a test of the harness.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from pathlib import Path

import orjson
import pytest
from bench.fault_upstream import answer_text, anthropic_events, openai_events, split
from bench.soak_check import Call, Seen, classify, parse_sse

from bench import soak
from interlingua.config import parse_config

OAI_STREAM = Call("openai", "openai", True, "ok")
ANT_STREAM = Call("anthropic", "openai", True, "ok")


def sse(events: list[bytes]) -> list[tuple[str, str]]:
    parsed, rest = parse_sse(b"".join(events))
    assert rest == b""
    return parsed


def stream_seen(events: list[bytes]) -> Seen:
    return Seen(status=200, content_type="text/event-stream", events=sse(events))


def test_the_mock_answers_echo_the_last_message_in_pieces() -> None:
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "abc"}]}]}
    assert answer_text(body) == "echo:abc"
    pieces = split("echo:abcdefgh")
    assert len(pieces) == 4 and all(pieces) and "".join(pieces) == "echo:abcdefgh"


@pytest.mark.parametrize(
    ("call", "events"),
    [(OAI_STREAM, openai_events("m", "echo:x1")), (ANT_STREAM, anthropic_events("m", "echo:x1"))],
)
def test_a_whole_stream_is_an_answer_and_a_short_one_is_not(
    call: Call, events: list[bytes]
) -> None:
    assert classify(call, "echo:x1", stream_seen(events)) == ("answer", "")
    assert classify(call, "echo:x2", stream_seen(events)) == ("unexpected", "wrong content")
    short = stream_seen(events[:-3])
    assert classify(call, "echo:x1", short)[1] == "stream ended without its end event or an error"


def test_stream_faults_need_an_error_event_and_valid_json() -> None:
    cut = Call("openai", "openai", True, "cut")
    events = openai_events("m", "echo:x1")
    error = b'data: {"error": {"message": "upstream closed", "type": "server_error"}}\n\n'
    assert classify(cut, "echo:x1", stream_seen([*events[:2], error])) == ("typed_error", "")
    glued = [*events[:1], events[1][:20] + error]  # the error glued to a half event
    assert classify(cut, "echo:x1", stream_seen(glued)) == (
        "unexpected",
        "event data is not JSON",
    )
    assert classify(cut, "echo:x1", stream_seen(events))[1] == (
        "stream ended normally for injected cut"
    )
    anthropic_error = b'event: error\ndata: {"type": "error", "error": {"type": "api_error"}}\n\n'
    ant_cut = Call("anthropic", "openai", True, "cut")
    seen = stream_seen([*anthropic_events("m", "echo:x1")[:3], anthropic_error])
    assert classify(ant_cut, "echo:x1", seen) == ("typed_error", "")


def test_statuses_are_typed_errors_only_when_a_fault_was_injected() -> None:
    body = orjson.dumps({"type": "error", "error": {"type": "api_error", "message": "x"}})
    seen = Seen(status=502, body=body)
    assert classify(Call("anthropic", "openai", False, "500"), "", seen) == ("typed_error", "")
    assert classify(Call("anthropic", "openai", False, "ok"), "", seen) == (
        "unexpected",
        "502 with no injected fault",
    )
    assert classify(Call("openai", "openai", False, "500"), "", seen)[1] == (
        "502 without a openai error body"
    )


def test_hangs_transport_errors_and_hangups() -> None:
    call = Call("openai", "anthropic", True, "ok", hangup=True)
    assert classify(call, "", Seen(status=200)) == ("hangup", "")
    assert classify(call, "", Seen(timed_out=True))[0] == "unexpected"
    broken = Seen(status=200, transport_error="ClientPayloadError")
    assert classify(Call("openai", "openai", True, "ok"), "", broken) == (
        "unexpected",
        "transport error: ClientPayloadError",
    )


def test_the_mix_covers_every_class_and_the_config_routes_it() -> None:
    rng = random.Random(3)
    calls = [soak.draw(rng, 0.5, 0.1) for _ in range(4000)]
    assert {(c.client, c.upstream, c.stream) for c in calls} == {
        (a, b, s) for a in soak.DIALECTS for b in soak.DIALECTS for s in (True, False)
    }
    assert {c.fault for c in calls} == {"ok", *soak.ALL_FAULTS}
    assert not any(c.hangup and not c.stream for c in calls)
    config = soak.gateway_config(1, 2)
    names = {m["name"] for m in config["models"]}
    assert {soak.model_name(c.upstream, c.fault) for c in calls} <= names
    parse_config(config)  # a config the gateway accepts


def test_verdict_ignores_the_warm_up() -> None:
    samples = [
        soak.Sample(0, 0, 40_000, 10),
        soak.Sample(30, 100, 80_000, 60),  # warm-up: grows
        soak.Sample(60, 200, 100_000, 60),
        soak.Sample(90, 300, 101_000, 62),
        soak.Sample(120, 400, 104_000, 61),
    ]
    tally = soak.Tally(outcomes=Counter(answer=400))
    judged = soak.verdict(tally, samples, soak.Sample(140, 400, 100_000, 11), warmup=60)
    assert judged.rss_growth == pytest.approx(0.04) and judged.rss_ok
    assert judged.fds_flat and judged.fds_idle == (10, 11)
    assert judged.passed
    leaking = [*samples, soak.Sample(150, 500, 110_000, 90)]
    judged = soak.verdict(tally, leaking, soak.Sample(170, 500, 110_000, 40), warmup=60)
    assert not judged.rss_ok and not judged.fds_flat and not judged.passed


def test_a_few_seconds_of_soak_report_fields_that_add_up(tmp_path: Path) -> None:
    argv = ["--minutes", "0.05", "--probe-seconds", "1", "--probe-concurrency", "4"]
    argv += ["--sample-every", "1", "--idle-wait", "0.5", "--fault-rate", "0.3"]
    argv += ["--results", str(tmp_path)]
    code = soak.main(argv)
    (path,) = tmp_path.glob("soak-*.md")
    text = path.read_text()
    assert code == (1 if "**NO**" in text else 0)
    for field in (
        "0 unexpected outcomes",
        "fds flat: idle",
        "RSS growth after warm-up < 5%",
        "## RSS and fds",
        "rate: max measured",
    ):
        assert field in text, field
    head = re.search(r"(\d+) sent, (\d+) finished: answer (\d+), typed_error (\d+), "
                     r"hangup (\d+), unexpected (\d+)", text)  # fmt: skip
    assert head is not None
    sent, finished, *outcomes = map(int, head.groups())
    assert sent == finished == sum(outcomes) > 0
    rows = [line.split("|")[3:7] for line in text.splitlines() if re.match(r"\| \w{3}→", line)]
    assert sum(int(cell) for row in rows for cell in row) == finished
    curve = [line for line in text.splitlines() if re.match(r"\| \d+( \(idle\))? \| \d+ \|", line)]
    assert len(curve) >= 3  # idle before, at least one under load, idle after
