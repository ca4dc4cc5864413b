"""The pure parts of ``bench.local_bench``: stream parsing, log parsing, order, report.

No servers, no sockets: the SSE lines are the shapes the two servers were seen to send
(ours with a usage chunk, llama_cpp.server without one and with ``", "`` separators).
"""

from __future__ import annotations

import orjson
import pytest
from bench.procs import BenchError

from bench import local_bench as lb


def _chunk(content: str | None = None, finish: str | None = None, role: bool = False) -> bytes:
    delta: dict[str, str] = {"role": "assistant"} if role else {}
    if content is not None:
        delta["content"] = content
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return b"data: " + orjson.dumps({"object": "chat.completion.chunk", "choices": [choice]})


OURS_STREAM = [
    (0.010, _chunk("", role=True)),
    (0.020, _chunk("Once")),
    (0.030, _chunk(" upon")),
    (0.050, _chunk(" a")),
    (0.060, _chunk(finish="length")),
    (0.061, b'data: {"choices":[],"usage":{"prompt_tokens":43,"completion_tokens":4}}'),
    (0.062, b"data: [DONE]"),
]

# llama_cpp.server: role chunk without content, spaces after separators, no usage.
THEIRS_STREAM = [
    (0.015, b'data: {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}'),
    (0.025, b'data: {"choices": [{"index": 0, "delta": {"content": "Once"}}]}'),
    (0.045, b'data: {"choices": [{"index": 0, "delta": {"content": " upon"}}]}'),
    (0.065, b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}'),
    (0.066, b"data: [DONE]"),
]


def test_chat_body_is_the_same_request_for_both() -> None:
    body = orjson.loads(lb.chat_body(128, 7, stream=True))
    assert body["max_tokens"] == 128 and body["seed"] == 7 and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "user", "content": lb.PROMPT}]
    assert body["temperature"] == 0.8 and body["repeat_penalty"] == 1.0
    assert "stream" not in orjson.loads(lb.chat_body(1, 7, stream=False))


def test_parse_stream_takes_tokens_from_usage() -> None:
    sample = lb.parse_stream(OURS_STREAM, sent=0.0, end=0.1, max_tokens=128)
    assert (sample.tokens, sample.source, sample.finish) == (4, "usage", "length")
    assert sample.ttft_s == pytest.approx(0.020)  # the empty role chunk does not count
    assert sample.decode_s == pytest.approx(0.030)
    assert sample.total_s == pytest.approx(0.1)
    assert sample.rate == pytest.approx(40.0)
    assert sample.decode_rate == pytest.approx(100.0)  # 3 tokens after the first in 30 ms


def test_parse_stream_without_usage_trusts_length_finish() -> None:
    sample = lb.parse_stream(THEIRS_STREAM, sent=0.005, end=0.067, max_tokens=128)
    assert (sample.tokens, sample.source) == (128, "length")
    assert sample.ttft_s == pytest.approx(0.020)
    assert sample.total_s == pytest.approx(0.062)


def test_parse_stream_without_usage_or_length_counts_chunks() -> None:
    lines = [*THEIRS_STREAM[:3], (0.05, _chunk(finish="stop")), (0.06, b"data: [DONE]")]
    sample = lb.parse_stream(lines, sent=0.0, end=0.06, max_tokens=128)
    assert (sample.tokens, sample.source, sample.finish) == (2, "chunks", "stop")


def test_parse_stream_ignores_comments_and_stops_at_done() -> None:
    lines = [(0.0, b": keep-alive"), *OURS_STREAM, (0.07, _chunk("after done"))]
    assert lb.parse_stream(lines, 0.0, 0.1, 128).tokens == 4


def test_parse_stream_errors() -> None:
    with pytest.raises(BenchError, match="overloaded"):
        lb.parse_stream([(0.0, b'data: {"error": {"message": "overloaded"}}')], 0, 1, 8)
    with pytest.raises(BenchError, match="no content"):
        lb.parse_stream([(0.0, _chunk("", role=True)), (0.1, b"data: [DONE]")], 0, 1, 8)


def test_single_token_has_no_decode_rate() -> None:
    sample = lb.Sample(1, 0.5, 0.5, 0.0, "length", "usage")
    assert sample.rate == 2.0 and sample.decode_rate == 0.0


def test_split_lines_rejoins_reads_split_mid_line() -> None:
    reads = [
        (1.0, b'data: {"a"'),
        (2.0, b": 1}\n\nda"),
        (3.0, b"ta: [DONE]\n\n"),
        (4.0, b"data: tail"),
    ]
    assert lb.split_lines(reads) == [
        (2.0, b'data: {"a": 1}'),
        (3.0, b"data: [DONE]"),
        (4.0, b"data: tail"),
    ]
    assert lb.split_lines([]) == []


def test_parse_engine_log() -> None:
    log = (
        "INFO:     Started server process [4095]\n"
        "2026-11-22 04:11:52,597 INFO interlingua.local: loaded "
        "SmolLM2-135M-Instruct.Q4_1.gguf (n_ctx 8192, 1 threads) in 0.80 s\n"
    )
    assert lb.parse_engine_log(log) == (8192, 1)
    assert lb.parse_engine_log("other (n_ctx 5, 2 threads)\nINFO: ready\n") is None


def test_alternate_spreads_the_order() -> None:
    assert lb.alternate(3, ("a", "b")) == ["a", "b", "b", "a", "a", "b"]


def test_commands_use_the_same_engine_settings() -> None:
    theirs = lb.theirs_command(4321, "/m.gguf", 3, 2048)
    assert theirs[1:4] == ["-m", "llama_cpp.server", "--model"]
    flags = dict(zip(theirs[5::2], theirs[6::2], strict=True))
    assert flags == {
        "--host": "127.0.0.1",
        "--port": "4321",
        "--n_threads": "3",
        "--n_threads_batch": "3",
        "--n_ctx": "2048",
    }
    assert lb.display(lb.ours_command("<free>")) == (
        "python -m interlingua.cli serve --port <free>"
    )


def _samples(rate_ours: float, rate_theirs: float) -> dict[str, list[lb.Sample]]:
    def make(rate: float) -> list[lb.Sample]:
        total = 128 / rate
        return [
            lb.Sample(128, total * k, 0.02, total * k - 0.02, "length", "usage")
            for k in (1, 1.25, 0.8)
        ]

    return {lb.OURS: make(rate_ours), lb.THEIRS: make(rate_theirs)}


def test_render_rates_medians_and_ratio() -> None:
    rows = lb.render_rates(_samples(76.0, 80.0))
    assert rows[2].startswith("| interlingua | 76.0 | 60.8–95.0 |")
    assert rows[3].startswith("| llama_cpp.server | 80.0 | 64.0–100.0 |")
    assert rows[4].startswith("| **ours / theirs** | **0.950** |")
    assert rows[5].startswith(
        "| ours / theirs, same round (median) | 0.950 | 0.950–0.950 | 0.949 |"
    )


def test_paired_ratios_follow_the_rounds() -> None:
    def sample(rate: float) -> lb.Sample:
        return lb.Sample(100, 100 / rate, 0.0, 99 / rate, "length", "usage")

    samples = {lb.OURS: [sample(50), sample(90)], lb.THEIRS: [sample(40), sample(100)]}
    assert lb.paired_ratios(samples) == pytest.approx([1.25, 0.9])
    assert lb.paired_ratios(samples, decode=True) == pytest.approx([1.25, 0.9])
    assert lb.paired_ratios({lb.OURS: [sample(50)]}) == []


def test_render_targets_met_and_not_met() -> None:
    met = lb.render_targets(_samples(76.0, 80.0), {lb.OURS: [1.5, 1.9, 2.5]})
    assert met[2] == (
        "| tokens/s vs llama_cpp.server | ≥ 0.95× | 0.950× (same-round median 0.950×) | yes |"
    )
    assert met[3] == "| `interlingua serve` start → first answer | ≤ 2 s | 1.90 s | yes |"
    missed = lb.render_targets(_samples(70.0, 80.0), {lb.OURS: [2.1, 2.2, 2.0]})
    assert missed[2].endswith("| 0.875× (same-round median 0.875×) | no |")
    assert missed[3].endswith("| 2.10 s | no |")


def test_render_report_has_command_tables_and_short_samples() -> None:
    setup = lb.Setup(
        day="2026-11-22",
        command="python -m bench.local_bench",
        ours_command="python -m interlingua.cli serve --port <free>",
        theirs_command="python -m llama_cpp.server ...",
        n_threads=1,
        n_ctx=8192,
        max_tokens=128,
        machine="2 cores",
        load_before="1.00",
        load_after="1.20",
    )
    samples = _samples(80.0, 80.0)
    samples[lb.THEIRS].append(lb.Sample(90, 1.0, 0.02, 0.9, "stop", "chunks"))
    text = lb.render_report(setup, samples, {lb.OURS: [1.2], lb.THEIRS: [1.4]})
    assert text.startswith("# Local engine benchmark — 2026-11-22\n")
    assert "`python -m bench.local_bench`" in text
    assert "n_threads 1, n_threads_batch 1, n_ctx 8192" in text
    assert "Samples that ended before max_tokens: llama_cpp.server 90 (stop)." in text
    assert "| interlingua | 1.20 | 1.20–1.20 | 1 |" in text
    assert "| llama_cpp.server | 1.40 | 1.40–1.40 | 1 |" in text


def test_render_report_with_one_part_skipped() -> None:
    setup = lb.Setup("d", "c", "o", "t", 1, 8192, 128, "m", "0", "0")
    text = lb.render_report(setup, {}, {lb.OURS: [1.0], lb.THEIRS: [1.1]})
    assert "Tokens/s" not in text and "| `interlingua serve` start" in text


def test_options() -> None:
    args = lb.options([])
    assert (args.rounds, args.max_tokens, args.startup_runs) == (10, 128, 5)
    assert lb.options(["--rounds", "9", "--no-startup"]).no_startup is True
    with pytest.raises(SystemExit):
        lb.options(["--rounds", "0"])
