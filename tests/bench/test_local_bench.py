"""The pure parts of ``bench.local_bench``: streams, statistics, commands, build, report.

No servers, no sockets, no compiler: the SSE lines are the shapes the servers were seen
to send (ours with a usage chunk, llama_cpp.server without one and with ``", "``
separators), the log lines are llama-server's and our engine's own.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import orjson
import pytest
from bench.local_build import (
    PORTABLE,
    BuildSkipped,
    build_args,
    cache_key,
    configure_args,
    ensure_llama_server,
    missing_tools,
    pinned_version,
    read_built,
    vendored_members,
)
from bench.local_report import Setup, render_rates, render_report, render_targets, render_ttft
from bench.local_servers import (
    CPP,
    OURS,
    PY,
    Engine,
    cpp_command,
    display,
    ours_command,
    py_command,
)
from bench.local_stats import (
    PROMPT,
    Burst,
    EngineLog,
    Sample,
    alternate,
    burst_of,
    chat_body,
    parse_engine_log,
    parse_llama_server_log,
    parse_stream,
    percentile,
    round_ratios,
    split_lines,
)
from bench.procs import BenchError

from bench import local_bench as lb
from tests import engine_build


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


# -- request and stream ---------------------------------------------------------------


def test_chat_body_is_the_same_request_for_every_server() -> None:
    body = orjson.loads(chat_body(64, 7, stream=True))
    assert body["max_tokens"] == 64 and body["seed"] == 7 and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["messages"] == [{"role": "user", "content": PROMPT}]
    assert body["temperature"] == 0.8 and body["repeat_penalty"] == 1.0
    assert "ignore_eos" not in body
    assert "stream" not in orjson.loads(chat_body(1, 7, stream=False))
    with_eos = orjson.loads(chat_body(64, 7, stream=True, ignore_eos=True))
    assert with_eos.pop("ignore_eos") is True and with_eos == body


def test_parse_stream_takes_tokens_from_usage() -> None:
    sample = parse_stream(OURS_STREAM, sent=0.0, end=0.1, max_tokens=128)
    assert (sample.tokens, sample.source, sample.finish) == (4, "usage", "length")
    assert sample.ttft_s == pytest.approx(0.020)  # the empty role chunk does not count
    assert sample.decode_s == pytest.approx(0.030)
    assert sample.total_s == pytest.approx(0.1)
    assert sample.rate == pytest.approx(40.0)
    assert sample.decode_rate == pytest.approx(100.0)  # 3 tokens after the first in 30 ms


def test_parse_stream_without_usage_trusts_length_finish() -> None:
    sample = parse_stream(THEIRS_STREAM, sent=0.005, end=0.067, max_tokens=128)
    assert (sample.tokens, sample.source) == (128, "length")
    assert sample.ttft_s == pytest.approx(0.020)
    assert sample.total_s == pytest.approx(0.062)


def test_parse_stream_without_usage_or_length_counts_chunks() -> None:
    lines = [*THEIRS_STREAM[:3], (0.05, _chunk(finish="stop")), (0.06, b"data: [DONE]")]
    sample = parse_stream(lines, sent=0.0, end=0.06, max_tokens=128)
    assert (sample.tokens, sample.source, sample.finish) == (2, "chunks", "stop")


def test_parse_stream_ignores_comments_and_stops_at_done() -> None:
    lines = [(0.0, b": keep-alive"), *OURS_STREAM, (0.07, _chunk("after done"))]
    assert parse_stream(lines, 0.0, 0.1, 128).tokens == 4


def test_parse_stream_errors() -> None:
    with pytest.raises(BenchError, match="overloaded"):
        parse_stream([(0.0, b'data: {"error": {"message": "overloaded"}}')], 0, 1, 8)
    with pytest.raises(BenchError, match="no content"):
        parse_stream([(0.0, _chunk("", role=True)), (0.1, b"data: [DONE]")], 0, 1, 8)


def test_single_token_has_no_decode_rate() -> None:
    sample = Sample(1, 0.5, 0.5, 0.0, "length", "usage")
    assert sample.rate == 2.0 and sample.decode_rate == 0.0


def test_split_lines_rejoins_reads_split_mid_line() -> None:
    reads = [
        (1.0, b'data: {"a"'),
        (2.0, b": 1}\n\nda"),
        (3.0, b"ta: [DONE]\n\n"),
        (4.0, b"data: tail"),
    ]
    assert split_lines(reads) == [
        (2.0, b'data: {"a": 1}'),
        (3.0, b"data: [DONE]"),
        (4.0, b"data: tail"),
    ]
    assert split_lines([]) == []


# -- statistics ---------------------------------------------------------------------


def test_alternate_reverses_every_other_round() -> None:
    assert alternate(3, ("a", "b", "c")) == [["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"]]
    assert alternate(0, ("a",)) == []
    # over an even number of rounds every server sits at every position equally often
    order = alternate(4, ("a", "b", "c"))
    assert all(sorted(o.index(n) for o in order) == [0, 0, 2, 2] for n in "ac")


@pytest.mark.parametrize(
    "values", [[5.0], [1.0, 2.0], [3.0, 1.0, 2.0, 10.0], [0.25, 0.1, 0.7, 0.3, 0.3, 9.0, 4.0]]
)
@pytest.mark.parametrize("q", [0, 5, 50, 90, 95, 100])
def test_percentile_matches_numpy_linear(values: list[float], q: float) -> None:
    assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))


def test_percentile_edges() -> None:
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == statistics.median([1.0, 2.0, 3.0, 4.0])
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1.0], 101)


def _sample(tokens: int = 64, ttft: float = 0.05, total: float = 1.0) -> Sample:
    return Sample(tokens, total, ttft, total - ttft, "length", "usage")


def test_burst_rate_is_all_tokens_over_the_wall_time() -> None:
    timed = [(10.0, 11.0, _sample()), (10.1, 12.0, _sample()), (10.2, 12.5, _sample(32))]
    got = burst_of(timed)
    assert (got.concurrency, got.tokens) == (3, 160)
    assert got.wall_s == pytest.approx(2.5)  # first sent 10.0 -> last end 12.5
    assert got.rate == pytest.approx(64.0)
    with pytest.raises(BenchError):
        burst_of([])


def _burst(rate: float, n: int = 1, ttft: float = 0.05) -> Burst:
    return Burst(tuple(_sample(64, ttft) for _ in range(n)), 64 * n / rate)


def test_round_ratios_pair_bursts_of_the_same_round() -> None:
    ours = [_burst(50), _burst(90), _burst(80)]
    theirs = [_burst(40), _burst(100)]
    assert round_ratios(ours, theirs) == pytest.approx([1.25, 0.9])
    assert round_ratios(ours, []) == []


def test_parse_engine_log() -> None:
    log = (
        "INFO:     Started server process [4095]\n"
        "2026-11-22 04:11:52,597 INFO interlingua.local: loaded "
        "SmolLM2-135M-Instruct.Q4_1.gguf (n_ctx 8192, 1 threads) in 0.80 s\n"
    )
    assert parse_engine_log(log) == EngineLog(8192, 1, None)
    assert parse_engine_log("other (n_ctx 5, 2 threads)\nINFO: ready\n") is None
    parallel = (
        "2026-11-27 08:40:01,100 INFO interlingua.local: loaded "
        "SmolLM2-135M-Instruct.Q4_1.gguf (n_ctx 8192 x 4 sequences, 2 threads) in 0.31 s\n"
    )
    assert parse_engine_log(parallel) == EngineLog(8192, 2, 4)


def test_parse_llama_server_log() -> None:
    log = (
        "main: loading model\n"
        "system_info: n_threads = 1 (n_threads_batch = 1) / 2 | CPU : SSE3 = 1 | AVX2 = 1 |\n"
        "srv    load_model: initializing, n_slots = 4, n_ctx_slot = 8192, kv_unified = 'false'\n"
    )
    got = parse_llama_server_log(log)
    assert got is not None
    assert (got.n_slots, got.n_ctx_slot, got.n_threads, got.n_threads_batch) == (4, 8192, 1, 1)
    no_threads = parse_llama_server_log(log.splitlines()[2])
    assert no_threads is not None and no_threads.n_threads is None
    # this build logs system_info at trace level only: the threadpool line says the threads
    pool = "0.00.923.864 I cmn          init: llama threadpool init, n_threads = 2\n"
    got = parse_llama_server_log(pool + log.splitlines()[2])
    assert got is not None and (got.n_threads, got.n_threads_batch) == (2, None)
    assert parse_llama_server_log("main: loading model\n") is None


# -- commands ---------------------------------------------------------------------------


ENGINE = Engine("/m.gguf", n_threads=3, n_ctx=2048, parallel=4)


def _flags(command: list[str], start: int) -> dict[str, str]:
    return dict(zip(command[start::2], command[start + 1 :: 2], strict=True))


def test_llama_server_gets_the_same_settings_per_slot() -> None:
    command = cpp_command("/b/llama-server", 4321, ENGINE)
    assert command[0] == "/b/llama-server"
    assert _flags(command, 1) == {
        "-m": "/m.gguf",
        "--host": "127.0.0.1",
        "--port": "4321",
        "-t": "3",
        "-tb": "3",
        "-c": "8192",  # split over 4 slots: 2048 each, the context one request gets from ours
        "--parallel": "4",
        "-fa": "auto",  # llama.cpp's default, as our engine's context gets it
    }
    extra = Engine("/m.gguf", 1, 512, 2, "on", ("--kv-unified",))
    assert cpp_command("s", 1, extra)[-3:] == ["-fa", "on", "--kv-unified"]


def test_python_server_queues_rather_than_interrupts() -> None:
    command = py_command(4321, ENGINE)
    assert command[1:4] == ["-m", "llama_cpp.server", "--model"]
    assert _flags(command, 5) == {
        "--host": "127.0.0.1",
        "--port": "4321",
        "--n_threads": "3",
        "--n_threads_batch": "3",
        "--n_ctx": "2048",
        "--flash_attn": "True",  # auto: on for the CPU; it has no auto
        "--interrupt_requests": "False",
    }
    off = Engine("/m.gguf", 1, 512, 2, flash_attn="off")
    assert py_command(1, off)[-4:-2] == ["--flash_attn", "False"]


def test_ours_with_and_without_config() -> None:
    assert display(ours_command("<free>")) == "python -m interlingua.cli serve --port <free>"
    assert ours_command(1, Path("/c.yaml"))[-2:] == ["--config", "/c.yaml"]
    shown = lb.shown_commands(ENGINE, Path("/b/llama-server"), True, [OURS, CPP, PY])
    assert shown[OURS].endswith("--port <free> --config <the no-config config + parallel>")
    assert shown[CPP].startswith("/b/llama-server -m <bundled gguf> --host 127.0.0.1 --port <free>")
    assert "<bundled gguf>" in shown[PY]
    assert list(lb.shown_commands(ENGINE, None, False, [OURS, CPP])) == [OURS]


def test_options() -> None:
    args = lb.options([])
    assert (args.rounds, args.max_tokens, args.startup_runs, args.parallel) == (6, 64, 3, 4)
    assert args.concurrency == [1, 4, 8] and args.without == [] and args.flash_attn == "auto"
    assert lb.options(["--concurrency", "8,1, 2"]).concurrency == [1, 2, 8]
    assert lb.options(["--without", CPP, "--without", PY]).without == [CPP, PY]
    for bad in (["--rounds", "0"], ["--concurrency", "0,4"], ["--concurrency", "a"]):
        with pytest.raises(SystemExit):
            lb.options(bad)


# -- building llama-server (no compiler runs here) -------------------------------------


def test_portable_flags_are_the_wheels() -> None:
    assert PORTABLE == engine_build.PORTABLE


def test_pinned_version() -> None:
    assert pinned_version('local = [\n    "llama-cpp-python==0.3.36",\n]') == "0.3.36"
    assert pinned_version('dev = ["llama-cpp-python[server]==0.4.1"]') == "0.4.1"
    assert pinned_version() == engine_build.pinned("llama-cpp-python").split("==")[1]
    with pytest.raises(BenchError):
        pinned_version('"llama-cpp-python>=0.3"')


def test_build_commands() -> None:
    configure = configure_args(Path("/src"), Path("/build"))
    assert configure[:5] == ["cmake", "-S", "/src", "-B", "/build"]
    for flag in ("-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DGGML_NATIVE=OFF"):
        assert flag in configure
    assert set(PORTABLE.split()) <= set(configure)
    assert build_args(Path("/build")) == [
        *("cmake", "--build", "/build", "--target", "llama-server", "-j", "2")
    ]


def test_cache_key_changes_with_version_and_flags() -> None:
    key = cache_key("0.3.36")
    assert key.startswith("0.3.36-") and key == cache_key("0.3.36", PORTABLE)
    assert cache_key("0.3.37") != key
    assert cache_key("0.3.36", PORTABLE + " -DGGML_AVX512=ON") != key


def test_missing_tools() -> None:
    assert missing_tools(lambda name: f"/usr/bin/{name}") == []
    only_gcc = {"gcc", "make"}
    missing = missing_tools(lambda name: name if name in only_gcc else None)
    assert missing == ["cmake", "a C++ compiler (c++, g++ or clang++)"]


def test_build_skipped_without_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("bench.local_build.shutil.which", lambda name: None)
    with pytest.raises(BuildSkipped, match="cmake"):
        ensure_llama_server("0.3.36", cache=tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing downloaded or created


def test_cached_build_is_found(tmp_path: Path) -> None:
    folder = tmp_path / cache_key("0.3.36")
    folder.mkdir()
    assert read_built(folder) is None
    binary = folder / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    meta = {"version": "0.3.36", "flags": PORTABLE, "build_seconds": 612.5}
    (folder / "build.json").write_bytes(orjson.dumps(meta))
    built = ensure_llama_server("0.3.36", cache=tmp_path)  # found: no tools needed
    assert (built.path, built.build_seconds, built.cached) == (binary, 612.5, True)


def test_vendored_members() -> None:
    names = [
        "llama_cpp_python-0.3.36/CMakeLists.txt",
        "llama_cpp_python-0.3.36/vendor/llama.cpp/CMakeLists.txt",
        "llama_cpp_python-0.3.36/vendor/llama.cpp/src/llama.cpp",
        "llama_cpp_python-0.3.36/vendor/llava/x",
    ]
    assert vendored_members(names, "0.3.36") == names[1:3]


# -- report -----------------------------------------------------------------------------


def _rates(ours: float, cpp: float, py: float) -> dict[int, dict[str, list[Burst]]]:
    out: dict[int, dict[str, list[Burst]]] = {}
    for level, slow in ((1, 1.0), (4, 4.0)):
        out[level] = {
            OURS: [_burst(ours * k, level, 0.05 * slow) for k in (1, 1.25, 0.8)],
            CPP: [_burst(cpp * k, level, 0.05) for k in (1, 1.25, 0.8)],
            PY: [_burst(py * k, level, 0.05 * slow) for k in (1, 1.25, 0.8)],
        }
    return out


def test_render_rates_medians_and_per_round_ratios() -> None:
    rows = render_rates(_rates(88.0, 110.0, 80.0))
    assert rows[2] == (
        "| 1 | 88.0 (70.4–110.0) | 110.0 (88.0–137.5) | 80.0 (64.0–100.0) "
        "| 0.800 (0.800–0.800) | 1.100 (1.100–1.100) |"
    )
    assert rows[3].startswith("| 4 | 88.0 ")


def test_render_ttft_percentiles_in_ms() -> None:
    rows = render_ttft(_rates(88.0, 110.0, 80.0))
    assert rows[2] == "| 1 | 50 | 50 | 50 | 50 | 50 | 50 | 3 |"
    assert rows[3] == "| 4 | 200 | 200 | 50 | 50 | 200 | 200 | 12 |"


def test_render_targets_met_and_not_met() -> None:
    missed = render_targets(_rates(88.0, 110.0, 80.0), {OURS: [1.5, 1.9, 2.5]})
    assert missed[2].startswith("| tokens/s vs llama-server, 1 concurrent | ≥ 1.0× | 0.800× ")
    assert missed[2].endswith("| no |")
    assert missed[4] == (
        "| interlingua TTFT p95 at 4 concurrent vs its TTFT (p50) at 1 | ≤ 2× "
        "| 200 ms / 50 ms = 4.0× (over p95 at 1: 4.0×; llama-server 1.0×) | no |"
    )
    assert missed[5] == "| `interlingua serve` start → first answer | ≤ 2 s | 1.90 s | yes |"
    met = _rates(110.0, 110.0, 80.0)
    met[4][OURS] = [_burst(120.0, 4, 0.09)]
    rows = render_targets(met, {})
    assert [row.rsplit("|", 2)[1].strip() for row in rows[2:]] == ["yes", "yes", "yes"]


def _setup(**changes: object) -> Setup:
    fields: dict[str, object] = {
        "day": "2026-11-27",
        "command": "python -m bench.local_bench",
        "commands": {OURS: "python -m interlingua.cli serve --port <free>"},
        "n_threads": 1,
        "n_ctx": 8192,
        "parallel": 4,
        "ours_parallel": False,
        "max_tokens": 64,
        "seed": 42,
        "machine": "2 cores",
        "load_before": "1.00",
        "load_after": "1.20",
        "build": "left out: cmake not found",
    }
    return Setup(**{**fields, **changes})  # type: ignore[arg-type]


def test_render_report_has_command_tables_and_short_requests() -> None:
    rates = _rates(88.0, 110.0, 80.0)
    rates[4][PY].append(Burst((_sample(30), _sample()), 1.0))
    text = render_report(_setup(), rates, {OURS: [1.2], PY: [1.4]})
    assert text.startswith("# Local engine benchmark — 2026-11-27\n")
    assert "`python -m bench.local_bench`" in text
    assert "n_threads 1, n_threads_batch 1, 8192 tokens of context per request" in text
    assert "our engine takes no `parallel` key yet" in text
    assert "llama-server: left out: cmake not found." in text
    assert "Requests that ended before max_tokens: llama_cpp.server at 4: 1 of 14" in text
    assert "| interlingua | 1.20 | 1.20–1.20 | 1 |" in text
    assert "`parallel: 4` on our local upstream" in render_report(
        _setup(ours_parallel=True), {}, {}
    )


def test_render_report_without_llama_server() -> None:
    rates = _rates(88.0, 110.0, 80.0)
    for level in rates.values():
        del level[CPP]
    text = render_report(_setup(), rates, {})
    assert "| 1 | 88.0 (70.4–110.0) | — | 80.0 (64.0–100.0) | — | 1.100 (1.100–1.100) |" in text
    assert "tokens/s vs llama-server" not in text and "Start → first" not in text
