"""``interlingua usage``: through the CLI's entry point, on a config whose ``usage.url``
points at a SQLite file the test fills."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

import interlingua
from interlingua.cli import main
from interlingua.usage import UsageLog, connect

from .helpers import make_record

NOW = time.time()


def _config(tmp_path: Path, usage: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(
        "upstreams: {f: {kind: fake}}\n"
        "models: [{name: model-x, upstream: f}, {name: model-y, upstream: f}]\n"
        f"usage: {usage}\n"
    )
    return str(path)


def _fill(url: str) -> None:
    """Two hours of traffic: team-a/model-x 4 requests (one failed), team-b/model-y 2, an
    hour and a half ago team-a/model-x 1 more, and 3 days ago one more."""

    async def write() -> None:
        log = UsageLog(connect(url))
        await log.start()
        rows = [
            make_record(1, key="team-a", model="model-x", latency=0.1, input_tokens=10,
                        output_tokens=1, upstream="up-1", cost_usd=Decimal("0.213300")),
            make_record(2, key="team-a", model="model-x", latency=0.2, input_tokens=20,
                        output_tokens=2, upstream="up-1", cost_usd=Decimal("0.561500")),
            make_record(3, key="team-a", model="model-x", latency=0.3, input_tokens=30,
                        output_tokens=3, upstream="up-2", status=502, error="upstream_error",
                        cost_usd=Decimal(0)),
            make_record(4, key="team-a", model="model-x", latency=0.4, input_tokens=40,
                        output_tokens=4, upstream="up-2", cost_usd=Decimal("0.000125")),
            make_record(5, key="team-b", model="model-y", latency=1.0, input_tokens=5,
                        output_tokens=50, upstream="up-1"),
            make_record(6, key="team-b", model="model-y", latency=3.0, input_tokens=5,
                        output_tokens=50, upstream="up-1", cost_usd=Decimal("1.5")),
        ]  # fmt: skip
        for row in rows:
            row.at = NOW - 60
        older = make_record(7, key="team-a", model="model-x", latency=0.5, input_tokens=1,
                            output_tokens=1, upstream="up-1")  # fmt: skip
        older.at = NOW - 5400
        ancient = make_record(8, key="team-c", model="model-x", upstream="up-1")
        ancient.at = NOW - 3 * 86400
        for row in [*rows, older, ancient]:
            log.record(row)
        await log.aclose()

    asyncio.run(write())


@pytest.fixture
def config(tmp_path: Path) -> str:
    url = f"sqlite://{tmp_path}/usage.db"
    _fill(url)
    return _config(tmp_path, f'{{url: "{url}"}}')


def test_json_per_key_and_model(config: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["usage", "--config", config, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"key": "team-a", "model": "model-x", "requests": 5, "errors": 1,
         "client_disconnects": 0, "continued": 0,
         "input_tokens": 101, "output_tokens": 11, "cached_tokens": 17,
         "cache_write_tokens": 0, "reasoning_tokens": 7, "cost_usd": 0.774925, "unpriced": 1,
         "p50_latency_s": 0.3, "p95_latency_s": 0.48},
        {"key": "team-b", "model": "model-y", "requests": 2, "errors": 0,
         "client_disconnects": 0, "continued": 0,
         "input_tokens": 10, "output_tokens": 100, "cached_tokens": 11,
         "cache_write_tokens": 0, "reasoning_tokens": 5, "cost_usd": 1.5, "unpriced": 1,
         "p50_latency_s": 2.0, "p95_latency_s": 2.9},
    ]  # fmt: skip


def test_since_and_by(config: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["usage", "-c", config, "--since", "30m", "--by", "upstream", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [(e["upstream"], e["requests"], e["errors"]) for e in got] == [
        ("up-1", 4, 0),
        ("up-2", 2, 1),
    ]
    assert main(["usage", "-c", config, "--since", "7d", "--by", "key", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [(e["key"], e["requests"]) for e in got] == [("team-a", 5), ("team-b", 2), ("team-c", 1)]
    day = time.strftime("%Y-%m-%d", time.gmtime(NOW - 2 * 86400))
    assert main(["usage", "-c", config, "--since", day, "--by", "key", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert [(e["key"], e["requests"]) for e in got] == [("team-a", 5), ("team-b", 2)]


def test_the_table(config: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["usage", "--config", config]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("Usage since ") and lines[0].endswith(" UTC:")
    assert lines[2:] == [
        "KEY     MODEL    REQUESTS  ERRORS  DISCONNECTS  INPUT TOKENS  OUTPUT TOKENS  P50 LATENCY  P95 LATENCY",
        "team-a  model-x         5       1            0           101             11       300 ms       480 ms",
        "team-b  model-y         2       0            0            10            100     2,000 ms     2,900 ms",
        "TOTAL                   7       1            0           111            111       400 ms     2,400 ms",
    ]


def test_the_table_with_cost(config: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["usage", "--config", config, "--cost", "--by", "key"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[-2:] for line in lines[2:6]] == [
        ["(USD)", "UNPRICED"],
        ["0.7749", "1"],
        ["1.5000", "1"],
        ["2.2749", "2"],
    ]
    assert lines[-1] == (
        "2 of 7 requests were unpriced (no price for their model): "
        "their cost is unknown and not in the sums."
    )


def test_nothing_in_the_window(config: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["usage", "--config", config, "--since", "10s"]) == 0
    assert capsys.readouterr().out.startswith("No requests since ")
    assert main(["usage", "--config", config, "--since", "10s", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_no_usage_log_yet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite://{tmp_path}/not-yet/usage.db"
    config = _config(tmp_path, f'{{url: "{url}"}}')
    assert main(["usage", "--config", config]) == 0
    assert capsys.readouterr().out == f"No usage log yet at {url}.\n"
    assert main(["usage", "--config", config, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert not (tmp_path / "not-yet").exists()  # a report creates nothing


def test_the_default_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    _fill(f"sqlite://{tmp_path}/interlingua/usage.db")
    assert main(["usage", "--json", "--by", "model"]) == 0  # (no --config)
    got = json.loads(capsys.readouterr().out)
    assert [(e["model"], e["requests"]) for e in got] == [("model-x", 5), ("model-y", 2)]


def test_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    off = _config(tmp_path, "false")
    assert main(["usage", "--config", off]) == 2
    assert "the usage log is off (usage: false)" in capsys.readouterr().err
    for flag, value, message in (
        ("--since", "yesterday", "neither a duration"),
        ("--by", "key,region", "'region' is not one of"),
    ):
        with pytest.raises(SystemExit) as exited:
            main(["usage", "--config", off, flag, value])
        assert exited.value.code == 2
        assert message in capsys.readouterr().err


def test_an_unreachable_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("asyncpg")
    from ..live_server import free_port

    url = f"postgresql://someone:hunter2@127.0.0.1:{free_port()}/usage"
    assert main(["usage", "--config", _config(tmp_path, f'{{url: "{url}"}}')]) == 1
    err = capsys.readouterr().err
    assert err.startswith("interlingua: usage log: PostgreSQL ") and "hunter2" not in err


def test_the_installed_command(config: str) -> None:
    src = str(Path(interlingua.__file__).parents[1])
    done = subprocess.run(
        [sys.executable, "-m", "interlingua.cli", "usage", "--config", config, "--json"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": src},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert [(e["key"], e["model"], e["requests"]) for e in got] == [
        ("team-a", "model-x", 5),
        ("team-b", "model-y", 2),
    ]
