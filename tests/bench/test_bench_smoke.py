"""The pure parts of the benchmark harness: no load, no sockets, no subprocesses.

wrk output parsing, nginx and gateway config generation, the mock answers, the answer
checks, the report, the profile summary and the command line.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest
import yaml
from bench.__main__ import options
from bench.micro import MicroResult
from bench.nginx import built_modules_without, render_config, temp_path_directives
from bench.procs import parse_vmrss_kb

from bench import make_bodies, mock, peers, profile, report, scenarios, wrk
from interlingua.config import parse_config
from interlingua.dialects import get_dialect
from interlingua.sse import SSEDecoder

WRK_OK = """Running 2s test @ http://127.0.0.1:41234/v1/chat/completions
  2 threads and 10 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.47ms    2.00ms  11.68ms   83.60%
    Req/Sec     7.90k     1.74k   12.33k    67.50%
  31651 requests in 2.02s, 23.09MB read
Requests/sec:  15690.46
Transfer/sec:     11.45MB
BENCH_JSON {"requests":31651,"duration_us":2017213,"bytes":24213015,"connect_errors":0,\
"read_errors":0,"write_errors":0,"status_errors":0,"timeout_errors":0,"p50_us":308,\
"p90_us":4490,"p99_us":8037,"p999_us":9562,"mean_us":1474.3,"max_us":11683}
"""

WRK_BAD = """Running 1s test @ http://127.0.0.1:41234/nope
  1 threads and 1 connections
  9121 requests in 1.00s, 2.56MB read
  Socket errors: connect 0, read 2, write 0, timeout 3
  Non-2xx or 3xx responses: 9121
Requests/sec:   9084.15
BENCH_JSON {"requests":9121,"duration_us":1000000,"bytes":2681574,"connect_errors":1,\
"read_errors":2,"write_errors":0,"status_errors":9000,"timeout_errors":3,"p50_us":50,\
"p90_us":2775,"p99_us":6927,"p999_us":12765,"mean_us":810.3,"max_us":14195}
"""


# --- wrk ------------------------------------------------------------------------------


def test_parse_wrk_output_reads_the_json_line() -> None:
    result = wrk.parse_output(WRK_OK)
    assert result.requests == 31651
    assert result.rps == pytest.approx(31651 / 2.017213)
    assert (result.p50_ms, result.p90_ms, result.p99_ms) == (0.308, 4.49, 8.037)
    assert result.max_ms == 11.683
    assert result.errors == 0


def test_parse_wrk_output_counts_every_error() -> None:
    result = wrk.parse_output(WRK_BAD)
    # The human summary's Non-2xx count wins when it is larger than the Lua one.
    assert result.status_errors == 9121
    assert result.socket_errors == 1 + 2 + 0 + 3
    assert result.errors == 9121 + 6


def test_parse_wrk_output_without_the_lua_line_fails() -> None:
    with pytest.raises(ValueError, match="BENCH_JSON"):
        wrk.parse_output("Running 1s test\nRequests/sec: 10\n")


def test_wrk_command_line() -> None:
    cmd = wrk.command("/usr/bin/wrk", "http://x/v1", Path("/tmp/b.json"), 50, 2.4, ("A: b",))
    assert cmd[:4] == ["/usr/bin/wrk", "-t2", "-c50", "-d2s"]
    assert cmd[cmd.index("-s") + 1].endswith("bench/lua/post.lua")
    assert cmd[-4:] == ["http://x/v1", "--", "/tmp/b.json", "A: b"]
    assert wrk.threads_for(1) == 1


def test_lua_script_prints_what_the_parser_reads() -> None:
    lua = wrk.LUA_POST.read_text()
    for key in ("requests", "duration_us", "status_errors", "p50_us", "p99_us", "max_us"):
        assert f'"{key}":' in lua
    assert "BENCH_JSON " in lua and 'wrk.method = "POST"' in lua


# --- nginx ----------------------------------------------------------------------------


def test_nginx_config_has_no_root_paths(tmp_path: Path) -> None:
    text = render_config(tmp_path, 41234, {"http_uwsgi", "http_scgi"})
    assert "listen 127.0.0.1:41234" in text
    assert "master_process off;" in text and "access_log off;" in text
    # Every filesystem path (pid, logs, temp paths, served files) is under the temp dir.
    for line in text.splitlines():
        words = line.split()
        if words and words[0] != "location":
            for word in words[1:]:
                if word.startswith("/"):
                    assert word.startswith(str(tmp_path)), line
    # One exact location per mock endpoint, each turning POST's 405 into the file.
    assert text.count("error_page 405 =200 $uri;") == len(mock.site())
    assert "location = /stream/v1/chat/completions {" in text
    assert "uwsgi_temp_path" not in text and "proxy_temp_path" in text


def test_temp_paths_follow_the_modules_built(tmp_path: Path) -> None:
    version = "configure arguments: --with-threads --without-http_fastcgi_module --without-mail"
    without = built_modules_without(version)
    assert without == {"http_fastcgi"}
    lines = temp_path_directives(tmp_path, without)
    assert f"client_body_temp_path {tmp_path / 'temp_client_body'};" in lines
    assert not any(line.startswith("fastcgi") for line in lines)


# --- the mock answers -----------------------------------------------------------------


def test_openai_stream_is_20_chunks_ending_with_usage_and_done() -> None:
    chunks = mock.openai_stream_chunks()
    assert len(chunks) == mock.OPENAI_STREAM_CHUNKS == 20
    last = orjson.loads(chunks[-1].removeprefix(b"data: "))
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 17
    assert mock.openai_stream().endswith(b"\n\ndata: [DONE]\n\n")


def test_mock_answers_decode_with_our_own_codecs() -> None:
    openai, anthropic = get_dialect("openai"), get_dialect("anthropic")
    assert openai.parse_response(orjson.loads(mock.openai_completion())).text == mock.TEXT
    assert anthropic.parse_response(orjson.loads(mock.anthropic_message())).text == mock.TEXT
    names = [event.event for event in SSEDecoder().decode(mock.anthropic_stream())]
    assert names[0] == "message_start" and names[-1] == "message_stop"
    assert names.count("content_block_delta") == len(mock.TEXT_PIECES)


def test_responses_mock_answers_are_what_the_relay_and_the_sdk_accept() -> None:
    from interlingua.core import Request, fold
    from interlingua.dialects import EventDecoder

    responses = get_dialect("responses")
    body = orjson.loads(mock.responses_object())
    assert responses.parse_response(body).text == mock.TEXT
    assert responses.relay_check().check_body(body) is None
    stream = mock.responses_stream()
    check = responses.relay_check()
    assert check.feed(stream) == stream and check.finish() is None and check.ended
    decoder = EventDecoder(responses, Request(model="m", messages=()))
    folded = fold(decoder.decode(stream) + decoder.flush())
    assert folded.text == mock.TEXT and folded.usage.output_tokens == len(mock.TEXT_PIECES)
    numbers = [orjson.loads(e.data)["sequence_number"] for e in SSEDecoder().decode(stream)]
    assert numbers == list(range(len(numbers)))


# --- scenarios and configs ------------------------------------------------------------


def test_gateway_config_is_valid_and_routes_every_scenario() -> None:
    config = parse_config(yaml.safe_load(scenarios.gateway_config_yaml("http://127.0.0.1:9", 8)))
    assert config.server.port == 8
    assert config.server.api_keys == (scenarios.CLIENT_KEY,)
    assert f"Bearer {scenarios.CLIENT_KEY}" in scenarios.OPENAI_HEADERS[0]
    names = {m.name for m in config.models}
    for scenario in scenarios.GATEWAY:
        assert scenario.model in names
        assert scenario.baseline in scenarios.BY_NAME
    assert config.upstreams["openai_stream"].base_url == "http://127.0.0.1:9/stream/v1"
    assert config.upstreams["anthropic_stream"].kind == "anthropic"


@pytest.mark.parametrize("team", scenarios.TEAMS)
def test_every_team_variant_is_a_valid_config(team: str, tmp_path: Path) -> None:
    sections = scenarios.team_sections(team, tmp_path)
    config = parse_config(scenarios.gateway_config("http://127.0.0.1:9", 8000, None, sections))
    assert config.metrics is sections["metrics"]


def test_on_less_one_is_on_without_that_feature(tmp_path: Path) -> None:
    on = scenarios.team_sections("on", tmp_path)
    assert scenarios.team_sections("on-no-usage", tmp_path) == {**on, "usage": False}
    assert scenarios.team_sections("on-no-metrics", tmp_path) == {**on, "metrics": False}
    (key,) = scenarios.team_sections("on-no-limits", tmp_path)["keys"]
    assert key == {k: v for k, v in on["keys"][0].items() if k != "limits"}


def test_litellm_config_mirrors_the_gateway_routes() -> None:
    config = peers.litellm_config("http://127.0.0.1:9")
    entries = {e["model_name"]: e["litellm_params"] for e in config["model_list"]}
    assert set(entries) == set(scenarios.ROUTES) | set(scenarios.DEPLOYMENTS)
    weighted = [e for e in config["model_list"] if e["model_name"] == "bench-weighted"]
    assert [e["litellm_params"]["weight"] for e in weighted] == [3, 1]
    assert entries["bench-openai-stream"]["model"] == "openai/gpt-4o-mini"
    assert entries["bench-openai-stream"]["api_base"] == "http://127.0.0.1:9/stream/v1"
    assert entries["bench-o2a-stream"]["model"] == "anthropic/claude-sonnet-4-5"
    # Same client key as the gateway checks; Anthropic clients reach the upstream's Chat
    # Completions endpoint (the only one the mock serves), not the Responses API.
    assert config["general_settings"]["master_key"] == scenarios.CLIENT_KEY
    assert config["litellm_settings"]["use_chat_completions_url_for_anthropic_messages"] is True


def test_request_bodies_set_model_and_stream() -> None:
    body = orjson.loads(scenarios.request_body(scenarios.BY_NAME["passthrough-stream"]))
    assert body["model"] == "bench-openai-stream" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    direct = orjson.loads(scenarios.request_body(scenarios.BY_NAME["direct-json"]))
    assert direct["model"] == "gpt-4o-mini" and direct["stream"] is False


def test_claude_code_body_is_80_kb_with_24_tools_and_parses() -> None:
    raw = (scenarios.BODIES / "claude_code_80k.json").read_bytes()
    body = orjson.loads(raw)
    assert 75_000 <= len(orjson.dumps(body)) <= 90_000
    assert len(body["tools"]) == 24
    request = get_dialect("anthropic").parse_request(body)
    assert len(request.tools) == 24
    # The committed file is what the generator writes (regenerate with make_bodies).
    assert body == make_bodies.claude_code()


def test_check_answer_accepts_the_mock_and_rejects_the_rest() -> None:
    by = scenarios.BY_NAME
    assert (
        scenarios.check_answer(by["direct-json"], 200, "application/json", mock.openai_completion())
        == ""
    )
    sse = "text/event-stream"
    assert scenarios.check_answer(by["direct-stream"], 200, sse, mock.openai_stream()) == ""
    assert (
        scenarios.check_answer(by["direct-anthropic-stream"], 200, sse, mock.anthropic_stream())
        == ""
    )
    assert "HTTP 502" in scenarios.check_answer(by["passthrough"], 502, "", b"{}")
    assert "DONE" in scenarios.check_answer(by["passthrough-stream"], 200, sse, b"data: {}\n\n")
    assert "unexpected" in scenarios.check_answer(
        by["a2o"], 200, "application/json", b'{"content":[]}'
    )


# --- report ---------------------------------------------------------------------------


def _rows() -> list[report.Row]:
    return [
        report.Row("nginx (direct)", "direct-json", 1, 20000, 0.08, 0.20, 8),
        report.Row("nginx (direct)", "direct-json", 50, 60000, 0.70, 2.00, 8),
        report.Row("interlingua", "passthrough", 1, 2500, 0.38, 0.90, 45),
        report.Row("interlingua", "passthrough", 50, 3300, 15.0, 30.0, 52),
        report.Row("litellm 1.106.2", "passthrough", 50, 66, 700.0, 900.0, 440),
        report.Row("litellm 1.106.2", "o2a-stream", 50, 0, 0, 0, 0, note="probe failed: HTTP 500"),
    ]


def test_report_table_overheads_and_ratio() -> None:
    table = report.render_table(_rows())
    line = next(x for x in table.splitlines() if "| 1 | interlingua |" in x)
    cells = [c.strip() for c in line.split("|")]
    assert cells[4:12] == ["2,500", "0.38", "0.90", "+0.30", "+0.70", "n/a", "45", "0"]
    line50 = next(x for x in table.splitlines() if "| 50 | interlingua |" in x)
    assert "| 50.0× |" in line50
    assert "probe failed: HTTP 500" in table


def test_report_targets_say_met_or_not() -> None:
    micro = [MicroResult("stream", 12.0, "chunk")]
    text = report.render_targets(_rows(), micro, "not measured")
    lines = {line.split("|")[1].strip(): line for line in text.splitlines()[2:]}
    assert (
        "3,300 req/s" in lines["passthrough, 50 conns"]
        and "| yes |" in lines["passthrough, 50 conns"]
    )
    assert "50.0×" in lines["passthrough vs LiteLLM, 50 conns"]
    assert "+0.30 ms" in lines["passthrough overhead p50, 1 conn"]
    assert "| yes |" in lines["passthrough overhead p99, 1 conn"]
    assert "not measured" in lines["Anthropic→OpenAI non-stream, 50 conns"]
    assert "52 MB" in lines["gateway RSS after the run"]


def test_team_targets_read_the_together_figures() -> None:
    team = {
        "passthrough": report.TeamFigure(ratio=0.91, rounds=5, cpu_ratio=1.12),
        "a2o": report.TeamFigure(ratio=0.80, rounds=5, cpu_ratio=1.27),
    }
    text = report.render_targets(_rows(), [], "not measured", team)
    lines = {line.split("|")[1].strip(): line for line in text.splitlines()[2:]}
    line = lines["team on vs off: passthrough, 50 conns"]
    assert "0.91× (median of 5 rounds together; CPU per request 1.12×)" in line
    assert line.endswith("| yes |")
    assert lines["team on vs off: Anthropic→OpenAI, 50 conns"].endswith("| **no** |")
    assert "not measured" in lines["team on vs off: passthrough stream, 50 conns"]


def test_negative_overhead_is_unclear_not_met() -> None:
    rows = _rows()
    rows[0] = report.Row("nginx (direct)", "direct-json", 1, 20000, 0.08, 2.50, 8)
    text = report.render_targets(rows, [], "not measured")
    line = next(x for x in text.splitlines() if x.startswith("| passthrough overhead p99"))
    assert "-1.60 ms (direct run noisier)" in line and line.endswith("| unclear |")


def test_full_report_has_every_section() -> None:
    info = report.RunInfo(
        date="2026-01-01 00:00", command="python -m bench --quick", machine="2 cores"
    )
    info.notes.append("preliminary")
    text = report.render(info, _rows(), [MicroResult("stream", 12.0, "chunk")], "### Profile")
    for heading in (
        "# Benchmark 2026-01-01",
        "## Results",
        "## Targets",
        "## Translation",
        "### Profile",
    ):
        assert heading in text
    assert "`python -m bench --quick`" in text and "- preliminary" in text


# --- processes, profile, command line -------------------------------------------------


def test_vmrss_parsing() -> None:
    assert parse_vmrss_kb("Name:\tpython\nVmPeak:\t 9 kB\nVmRSS:\t   47512 kB\n") == 47512
    assert parse_vmrss_kb("Name:\tzombie\n") == 0


def test_profile_summary_self_inclusive_and_packages() -> None:
    collapsed = "\n".join(
        [
            "run (/usr/lib/python3.11/asyncio/runners.py);relay (/w/src/interlingua/server/http.py) 6",
            "run (/usr/lib/python3.11/asyncio/runners.py);post (/v/site-packages/aiohttp/client.py) 3",
            "run (/usr/lib/python3.11/asyncio/runners.py) 1",
        ]
    )
    spots = profile.summarise(collapsed)
    assert spots.samples == 10
    assert spots.self_time[0] == ("interlingua/server/http.py:relay", 60.0)
    # On every stack, so not listed as inclusive time; the rest are.
    assert "stdlib/asyncio/runners.py:run" not in dict(spots.inclusive)
    assert dict(spots.inclusive)["aiohttp/client.py:post"] == 30.0
    assert dict(spots.packages) == {"interlingua": 60.0, "aiohttp": 30.0, "stdlib/asyncio": 10.0}
    assert "| `interlingua/server/http.py:relay` | 60.0 |" in profile.render(spots, "t")


def test_command_line_adds_baselines_and_quick_durations() -> None:
    opts = options(["--quick", "--scenarios", "a2o-stream", "--connections", "1,50"])
    assert opts.scenarios == ("direct-stream", "a2o-stream")
    assert opts.duration == 2.0 and opts.connections == (1, 50)
    assert opts.command == "python -m bench --quick --scenarios a2o-stream --connections 1,50"
    with pytest.raises(SystemExit):
        options(["--scenarios", "nope"])
    with pytest.raises(SystemExit):
        options(["--peers", "vllm"])


def test_on_traced_exports_to_a_local_collector_that_answers_200(tmp_path: Path) -> None:
    traced = scenarios.team_sections("on-traced", tmp_path)
    assert {k: v for k, v in traced.items() if k != "telemetry"} == scenarios.team_sections(
        "on", tmp_path
    )
    endpoint = traced["telemetry"]["otlp_endpoint"]
    answer = httpx.post(endpoint + "/v1/traces", content=b"\x0a\x00", timeout=5)
    assert answer.status_code == 200
