"""``interlingua batch run`` as a real subprocess: kill -9 and resume, Ctrl-C, exit codes."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from interlingua.cli import build_parser

from .conftest import FakeChatServer, read_output, simple_rows, write_jsonl

CLI = [sys.executable, "-m", "interlingua.cli"]
N = 400


@pytest.fixture
def slow_server() -> Iterator[FakeChatServer]:
    """Answers after 20-50 ms: a run of 400 lines at concurrency 8 takes ~2 s."""
    srv = FakeChatServer(0.02, 0.05)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def command(server: FakeChatServer, tmp_path: Path, *extra: str) -> list[str]:
    return [
        *CLI, "batch", "run", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out.jsonl"),
        "--base-url", server.v1, "--model", "m", "--concurrency", "8", "--progress", "log",
        "--log-every", "0.5", *extra,
    ]  # fmt: skip


def start(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=os.getcwd()
    )


def wait_for_lines(path: Path, n: int, proc: subprocess.Popen[str], limit: float = 20) -> int:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        count = path.read_bytes().count(b"\n") if path.exists() else 0
        if count >= n:
            return count
        if proc.poll() is not None:
            raise AssertionError(f"the run ended early: {proc.communicate()}")
        time.sleep(0.01)
    proc.kill()
    raise AssertionError(f"no {n} output lines in {limit}s: {proc.communicate()}")


def assert_exactly_once(path: Path) -> None:
    ids = [r["custom_id"] for r in read_output(path)]
    assert len(ids) == N, f"{len(ids)} lines"
    assert sorted(ids) == sorted(f"r{i}" for i in range(N))  # none lost, none twice


def test_resume_after_kill_9_finishes_every_id_exactly_once(
    slow_server: FakeChatServer, tmp_path: Path
) -> None:
    write_jsonl(tmp_path / "in.jsonl", simple_rows(N))
    args = command(slow_server, tmp_path)
    proc = start(args)
    wait_for_lines(tmp_path / "out.jsonl", 40, proc)
    proc.send_signal(signal.SIGKILL)  # no handler, no cleanup, no final fsync
    proc.communicate(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    before = read_output(tmp_path / "out.jsonl")
    assert 40 <= len(before) < N  # really killed mid-run
    assert len({r["custom_id"] for r in before}) == len(before)

    again = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert_exactly_once(tmp_path / "out.jsonl")
    assert f"{len(before)} skipped" in again.stderr
    # The second run sent only what the first had not written (plus what was in flight).
    assert len(slow_server.started) < N + 8 + len(before)


def test_first_ctrl_c_finishes_in_flight_and_prints_the_resume_command(
    slow_server: FakeChatServer, tmp_path: Path
) -> None:
    write_jsonl(tmp_path / "in.jsonl", simple_rows(N))
    proc = start(command(slow_server, tmp_path, "--ordered"))
    wait_for_lines(tmp_path / "out.jsonl", 30, proc)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=15)
    assert proc.returncode == 130, stderr
    assert "stopping" in stderr and "Resume with the exact same command" in stderr
    written = [r["custom_id"] for r in read_output(tmp_path / "out.jsonl")]
    assert 30 <= len(written) < N
    assert written == [f"r{i}" for i in range(len(written))]  # --ordered: a prefix
    assert set(slow_server.started) <= set(written)  # every request sent was finished

    resume = shlex.split(stderr.split("Resume with the exact same command:\n")[1].splitlines()[0])
    assert resume[:3] == ["interlingua", "batch", "run"] and "--ordered" in resume
    done = subprocess.run([*CLI, *resume[1:]], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    final = [r["custom_id"] for r in read_output(tmp_path / "out.jsonl")]
    assert final == [f"r{i}" for i in range(N)]  # both runs in order, one after the other


def test_progress_log_lines_and_summary_when_not_a_terminal(
    server: FakeChatServer, tmp_path: Path
) -> None:
    rows = simple_rows(30)
    rows[2] = {"custom_id": "bad2", "prompt": "bad2"}
    write_jsonl(tmp_path / "in.jsonl", rows)
    result = subprocess.run(command(server, tmp_path), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    err = result.stderr
    assert "\r" not in err  # no bar in a log
    assert "batch: 30 lines in" in err and "29 ok, 1 failed" in err
    assert "failures: invalid_request (HTTP 400) 1" in err
    assert "tokens: in 145, out 58" in err and "p50" in err and "p95" in err
    assert "--retry-failed" in err
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--shard", "3/3"], "--shard i/n needs 0 <= i < n"),
        (["--concurrency", "0"], "--concurrency must be at least 1"),
        (["--api-key-env", "INTERLINGUA_TEST_SURELY_UNSET"], "is not set"),
    ],
)
def test_bad_flags_exit_2_with_a_message(tmp_path: Path, extra: list[str], message: str) -> None:
    write_jsonl(tmp_path / "in.jsonl", simple_rows(1))
    args = [
        *CLI, "batch", "run", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "o.jsonl"), *extra
    ]  # fmt: skip
    result = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert message in result.stderr
    assert not (tmp_path / "o.jsonl").exists()


def test_help_lists_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    with pytest.raises(SystemExit):
        parser.parse_args(["batch", "run", "--help"])
    text = capsys.readouterr().out
    for flag in (
        "--output", "--base-url", "--model", "--dialect", "--api-key-env", "--concurrency",
        "--rpm", "--tpm", "--retries", "--ordered", "--shard", "--retry-failed",
        "--max-tokens", "--system", "--timeout", "--fold-reasoning", "--no-retry-empty",
    ):  # fmt: skip
        assert flag in text
    args = parser.parse_args(["batch", "run", "in.jsonl", "-o", "out.jsonl"])
    assert args.concurrency == 256 and args.dialect == "openai" and not args.ordered


def test_a_missing_input_file_exits_2(tmp_path: Path) -> None:
    args = [*CLI, "batch", "run", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "o.jsonl")]
    result = subprocess.run(args, capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert "input file not found" in result.stderr
