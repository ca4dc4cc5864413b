"""The batch runner logs each failed line once, at WARNING, naming its custom_id (and the
request id, status and attempts when a call was made); ``interlingua batch run`` shows
those lines above its progress display."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest

from interlingua.batch import BatchOptions
from interlingua.batch.terminal import run_batch

from .conftest import FakeChatServer, write_jsonl
from .test_runner import run

ROWS = [
    {"custom_id": "bad1", "prompt": "bad1"},
    {"custom_id": "boom1", "prompt": "boom1"},
    {"custom_id": "ok1", "prompt": "ok1"},
    {"custom_id": "ok1", "prompt": "again"},
    {"prompt": "no id"},
]


def warnings(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == name and r.levelno >= 30]


async def test_each_failed_line_is_logged_once(
    server: FakeChatServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "interlingua")
    _, result = await run(server, tmp_path, ROWS, concurrency=2, retries=2)
    assert result.stats.failed == 4
    logged = warnings(caplog, "interlingua.batch")
    assert len(logged) == 4, logged
    (bad,) = [m for m in logged if "'bad1'" in m]
    assert "HTTP 400" in bad and "req-bad1-1" in bad and "1 attempt" in bad
    (boom,) = [m for m in logged if "'boom1'" in m]
    assert "HTTP 500" in boom and "req-boom1-3" in boom and "3 attempts" in boom
    assert sum("'ok1'" in m for m in logged) == 1  # the duplicate line
    assert sum("line 5" in m for m in logged) == 1  # the line without an id
    # the client warns of the second retry, and leaves the failure to the runner
    client = warnings(caplog, "interlingua.client")
    assert len(client) == 1 and "retry 2 of 2" in client[0]


def test_the_command_shows_them_with_its_progress(server: FakeChatServer, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "in.jsonl", ROWS[:1])
    out = io.StringIO()
    options = BatchOptions(
        tmp_path / "in.jsonl", output=tmp_path / "out.jsonl", base_url=server.v1, model="m",
        progress="log", retries=0,
    )  # fmt: skip
    assert run_batch(options, stream=out, show_logs=True) == 0
    shown = out.getvalue()
    assert "'bad1'" in shown and "HTTP 400" in shown
    assert not logging.getLogger("interlingua").handlers  # removed when the run ended
