"""The batch engine against a fake server on 127.0.0.1: order, failures, resume, bounds."""

from __future__ import annotations

import asyncio
import base64
import io
from pathlib import Path
from typing import Any

import orjson
import pytest

from interlingua.batch import BatchOptions, BatchResult, BatchRunner
from interlingua.batch.runner import make_client

from .conftest import FakeChatServer, read_output, simple_rows, write_jsonl

GIF_1PX = base64.b64decode("R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7")


async def run(
    server: FakeChatServer, tmp_path: Path, rows: list[dict[str, Any]] | None, **kw: Any
) -> tuple[BatchRunner, BatchResult]:
    """Run a batch over ``rows`` (None: keep the existing in.jsonl) with instant retries."""
    path = tmp_path / "in.jsonl"
    if rows is not None:
        write_jsonl(path, rows)
    kw.setdefault("output", tmp_path / "out.jsonl")
    kw.setdefault("base_url", server.v1)
    options = BatchOptions(path, model="m", progress="off", **kw)
    client = make_client(options)
    client.retry_base = 0.0  # retries without waiting (the policy is tested in tests/client)
    runner = BatchRunner(options, client=client, stream=io.StringIO())
    try:
        result = await runner.run()
    finally:
        await client.aclose()
    return runner, result


def ids(records: list[dict[str, Any]]) -> list[str]:
    return [r["custom_id"] for r in records]


async def test_unordered_writes_every_id_exactly_once(
    server: FakeChatServer, tmp_path: Path
) -> None:
    rows = simple_rows(300)
    _, result = await run(server, tmp_path, rows, concurrency=16)
    out = read_output(tmp_path / "out.jsonl")
    assert sorted(ids(out)) == sorted(r["custom_id"] for r in rows)
    assert len(out) == 300
    for record in out:
        assert record["id"].startswith("batch_req_")
        assert record["error"] is None
        assert record["response"]["status_code"] == 200
        body = record["response"]["body"]
        assert body["choices"][0]["message"]["content"] == f"echo: {record['custom_id']}"
        assert record["response"]["request_id"] == f"req-{record['custom_id']}-1"
    assert result.stats.ok == 300 and result.stats.failed == 0
    assert result.stats.tokens_in == 300 * 5 and result.stats.tokens_out == 300 * 2
    assert not result.interrupted


async def test_ordered_output_follows_input_order_under_random_latency(
    tmp_path: Path,
) -> None:
    server = FakeChatServer(0.0, 0.02)
    server.start()
    try:
        rows = simple_rows(200)
        await run(server, tmp_path, rows, concurrency=16, ordered=True)
        ordered = ids(read_output(tmp_path / "out.jsonl"))
        await run(server, tmp_path, None, concurrency=16, output=tmp_path / "free.jsonl")
        free = ids(read_output(tmp_path / "free.jsonl"))
    finally:
        server.stop()
    expected = [r["custom_id"] for r in rows]
    assert ordered == expected
    # Without --ordered the same latencies do reorder lines: the check above has teeth.
    assert free != expected and sorted(free) == sorted(expected)


async def test_failures_become_error_lines_and_retries_are_counted(
    server: FakeChatServer, tmp_path: Path
) -> None:
    rows = simple_rows(20)
    rows[3] = {"custom_id": "bad3", "prompt": "bad3"}
    rows[5] = {"custom_id": "boom5", "prompt": "boom5"}
    rows[7] = {"custom_id": "flaky7", "prompt": "flaky7"}
    _, result = await run(server, tmp_path, rows, concurrency=4, retries=2)
    out = {r["custom_id"]: r for r in read_output(tmp_path / "out.jsonl")}
    assert len(out) == 20
    bad = out["bad3"]
    assert bad["error"]["code"] == "invalid_request"
    assert "bad input bad3" in bad["error"]["message"]
    assert bad["response"]["status_code"] == 400
    assert bad["response"]["body"]["error"]["message"] == "bad input bad3"
    assert bad["response"]["request_id"] == "req-bad3-1"
    boom = out["boom5"]
    assert boom["error"]["code"] == "upstream_error"
    assert boom["response"]["status_code"] == 500
    assert out["flaky7"]["error"] is None
    assert server.attempts["bad3"] == 1  # 400 is final
    assert server.attempts["boom5"] == 3  # 1 + 2 retries
    assert server.attempts["flaky7"] == 2
    stats = result.stats
    assert stats.retries == 3
    assert (stats.ok, stats.failed) == (18, 2)
    assert stats.failures == {"invalid_request (HTTP 400)": 1, "upstream_error (HTTP 500)": 1}


async def test_a_server_that_cannot_be_reached_fails_lines_not_the_run(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "in.jsonl", simple_rows(3))
    options = BatchOptions(
        tmp_path / "in.jsonl", tmp_path / "out.jsonl", base_url="http://127.0.0.1:9/v1",
        model="m", progress="off", retries=0,
    )  # fmt: skip
    result = await BatchRunner(options, stream=io.StringIO()).run()
    out = read_output(tmp_path / "out.jsonl")
    assert len(out) == 3
    assert {r["error"]["code"] for r in out} == {"connection_error"}
    assert all(r["response"] is None for r in out)
    assert "connection refused" in out[0]["error"]["message"]
    assert result.stats.failures == {"connection_error": 3}


async def test_same_dialect_lines_keep_the_servers_exact_body(
    server: FakeChatServer, tmp_path: Path
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x1"}], "stream": True}
    row = {"custom_id": "x1", "method": "POST", "url": "/v1/chat/completions", "body": body}
    await run(server, tmp_path, [row])
    line = (tmp_path / "out.jsonl").read_bytes()
    assert orjson.dumps(openai_like("echo: x1")) in line  # spliced in byte for byte
    assert "stream" not in server.bodies[0]  # batch output holds whole bodies, not streams
    server.pretty = True  # a multi-line body is re-encoded onto one line
    await run(server, tmp_path, [row], output=tmp_path / "pretty.jsonl")
    lines = (tmp_path / "pretty.jsonl").read_bytes().splitlines()
    assert len(lines) == 1
    assert orjson.loads(lines[0])["response"]["body"] == openai_like("echo: x1")


def openai_like(text: str) -> dict[str, Any]:
    from .conftest import openai_answer

    return openai_answer(text)


async def test_lines_in_the_other_dialect_are_translated_both_ways(
    server: FakeChatServer, tmp_path: Path
) -> None:
    messages_line = {
        "custom_id": "a1",
        "method": "POST",
        "url": "/v1/messages",
        "body": {"model": "c", "max_tokens": 50, "messages": [{"role": "user", "content": "a1"}]},
    }
    chat_line = {
        "custom_id": "o1",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "g", "messages": [{"role": "user", "content": "o1"}]},
    }
    await run(server, tmp_path, [messages_line, chat_line])
    out = {r["custom_id"]: r for r in read_output(tmp_path / "out.jsonl")}
    body = out["a1"]["response"]["body"]  # answered by an OpenAI-style server...
    assert body["type"] == "message"  # ...rendered as the line's dialect: Anthropic
    assert body["content"][0] == {"type": "text", "text": "echo: a1"}
    assert body["usage"]["input_tokens"] == 5 and body["usage"]["output_tokens"] == 2
    assert server.bodies[0]["max_tokens"] == 50 or server.bodies[1]["max_tokens"] == 50

    _, _ = await run(
        server, tmp_path, None, dialect="anthropic", base_url=server.url,
        output=tmp_path / "anthropic.jsonl",
    )  # fmt: skip
    out = {r["custom_id"]: r for r in read_output(tmp_path / "anthropic.jsonl")}
    chat = out["o1"]["response"]["body"]  # answered by an Anthropic-style server
    assert chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"]["content"] == "echo: o1"
    assert out["a1"]["response"]["body"]["content"][0]["text"] == "echo: a1"


async def test_simple_lines_take_defaults_and_images(
    server: FakeChatServer, tmp_path: Path
) -> None:
    image = tmp_path / "dot.gif"
    image.write_bytes(GIF_1PX)
    rows: list[dict[str, Any]] = [
        {"custom_id": "i1", "prompt": "i1", "images": [str(image)]},
        {"custom_id": "i2", "messages": [{"role": "user", "content": "i2"}], "max_tokens": 9},
    ]
    await run(server, tmp_path, rows, system="be brief", max_tokens=77, concurrency=1)
    first, second = server.bodies
    assert first["model"] == "m"
    assert first["max_tokens"] == 77
    assert first["messages"][0] == {"role": "system", "content": "be brief"}
    parts = first["messages"][1]["content"]
    assert {"type": "text", "text": "i1"} in parts
    (uri,) = [p["image_url"]["url"] for p in parts if p["type"] == "image_url"]
    assert uri == "data:image/gif;base64," + base64.b64encode(GIF_1PX).decode()
    assert second["max_tokens"] == 9  # the line's own setting wins
    assert len(read_output(tmp_path / "out.jsonl")) == 2


async def test_unreadable_and_duplicate_lines_are_recorded_once(
    server: FakeChatServer, tmp_path: Path
) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(
        b'\xef\xbb\xbf{"custom_id": "a", "prompt": "a"}\r\n'
        b"this is not json\n"
        b"\n"
        b'{"custom_id": "b"}\n'
        b'{"custom_id": "a", "prompt": "again"}\n'
        b'{"custom_id": "c", "method": "POST", "url": "/v1/moderations", "body": {}}\n'
    )
    _, result = await run(server, tmp_path, None, concurrency=1, ordered=True)
    out = read_output(tmp_path / "out.jsonl")
    assert [r["custom_id"] for r in out] == ["a", None, "b", "a", "c"]
    assert out[0]["error"] is None
    assert out[1]["error"]["code"] == "invalid_line" and out[1]["error"]["line"] == 2
    assert out[2]["error"]["code"] == "invalid_request"
    assert "prompt" in out[2]["error"]["message"]
    assert out[3]["error"]["code"] == "duplicate_custom_id"
    assert "line 5" in out[3]["error"]["message"]
    assert "/v1/moderations" in out[4]["error"]["message"]
    assert server.started == ["a"]  # only the one good line was sent
    assert result.stats.failed == 4
    # A second run finds everything recorded: nothing is sent or written again.
    await run(server, tmp_path, None, concurrency=1)
    assert read_output(tmp_path / "out.jsonl") == out
    assert server.started == ["a"]


async def test_resume_skips_done_ids_and_repairs_a_torn_tail(
    server: FakeChatServer, tmp_path: Path
) -> None:
    rows = simple_rows(50)
    await run(server, tmp_path, rows, concurrency=8)
    out_path = tmp_path / "out.jsonl"
    lines = out_path.read_bytes().splitlines(keepends=True)
    kept = lines[:30]
    out_path.write_bytes(b"".join(kept) + lines[30][: len(lines[30]) // 2])  # torn write
    server.started.clear()
    runner, result = await run(server, tmp_path, None, concurrency=8)
    final = ids(read_output(out_path))
    assert sorted(final) == sorted(r["custom_id"] for r in rows)
    redone = {orjson.loads(line)["custom_id"] for line in lines[30:]}
    assert sorted(server.started) == sorted(redone)
    assert result.stats.skipped == 30 and result.stats.done_before == 30
    assert isinstance(runner.stream, io.StringIO)
    assert "repaired" in runner.stream.getvalue()


async def test_shards_cover_every_id_exactly_once(server: FakeChatServer, tmp_path: Path) -> None:
    rows = simple_rows(120)
    rows.append({"custom_id": "", "prompt": "no id"})  # an unreadable line: one shard only
    seen: list[str | None] = []
    for i in range(3):
        out = tmp_path / f"out{i}.jsonl"
        await run(server, tmp_path, rows, shard=(i, 3), output=out)
        shard_ids = ids(read_output(out))
        assert 20 < len(shard_ids) < 60  # a real split, not everything in one shard
        seen += shard_ids
    assert sorted(x for x in seen if x is not None) == sorted(f"r{i}" for i in range(120))
    assert seen.count(None) == 1
    assert len(server.started) == 120


async def test_retry_failed_reruns_only_failures_and_compacts(
    server: FakeChatServer, tmp_path: Path
) -> None:
    rows = simple_rows(30)
    for i in (4, 11, 25):
        rows[i] = {"custom_id": f"boom{i}", "prompt": f"boom{i}"}
    await run(server, tmp_path, rows, concurrency=4, retries=0, ordered=True)
    first = read_output(tmp_path / "out.jsonl")
    assert sum(r["error"] is not None for r in first) == 3

    # Heal the server: the prompts change so "boom" is gone, but the ids stay.
    for i in (4, 11, 25):
        rows[i] = {"custom_id": f"boom{i}", "prompt": f"healed{i}"}
    server.started.clear()
    _, result = await run(server, tmp_path, rows, concurrency=4, retries=0, retry_failed=True)
    assert sorted(server.started) == ["healed11", "healed25", "healed4"]
    final = read_output(tmp_path / "out.jsonl")
    assert ids(final) == [r["custom_id"] for r in rows]  # compacted, original order kept
    assert all(r["error"] is None for r in final)
    assert result.compacted == 3
    assert final[4]["response"]["body"]["choices"][0]["message"]["content"] == "echo: healed4"


@pytest.mark.parametrize("ordered", [False, True])
async def test_in_flight_work_never_exceeds_the_concurrency(ordered: bool, tmp_path: Path) -> None:
    server = FakeChatServer(0.001, 0.01)
    server.start()
    try:
        runner, _ = await run(server, tmp_path, simple_rows(400), concurrency=8, ordered=ordered)
    finally:
        server.stop()
    assert server.max_in_flight <= 8
    assert runner.peak_in_flight == 8  # reached, never passed
    assert runner.peak_read_ahead == 1  # the producer holds one line, never reads ahead
    assert len(read_output(tmp_path / "out.jsonl")) == 400


async def _started_run(
    server: FakeChatServer, tmp_path: Path, rows: int, answered: int
) -> tuple[BatchRunner, asyncio.Task[Any]]:
    """A run of ``rows`` simple lines at concurrency 10, once ``answered`` calls are done."""
    write_jsonl(tmp_path / "in.jsonl", simple_rows(rows))
    options = BatchOptions(
        tmp_path / "in.jsonl", tmp_path / "out.jsonl", base_url=server.v1, model="m",
        progress="off", concurrency=10,
    )  # fmt: skip
    runner = BatchRunner(options, stream=io.StringIO())
    task = asyncio.create_task(runner.run())
    while len(server.answered) < answered:
        await asyncio.sleep(0.005)
    return runner, task


async def test_stop_finishes_in_flight_calls_then_resume_completes(tmp_path: Path) -> None:
    server = FakeChatServer(0.02, 0.05)
    server.start()
    try:
        runner, task = await _started_run(server, tmp_path, rows=200, answered=30)
        runner.stop()
        result = await task
        assert result.interrupted and not result.aborted
        written = ids(read_output(tmp_path / "out.jsonl"))
        assert 30 <= len(written) < 200
        assert set(server.started) <= set(written)  # every call in flight was finished
        await run(server, tmp_path, None, concurrency=10)
    finally:
        server.stop()
    final = ids(read_output(tmp_path / "out.jsonl"))
    assert sorted(final) == sorted(f"r{i}" for i in range(200))


async def test_abort_drops_in_flight_calls_which_a_resume_redoes(tmp_path: Path) -> None:
    server = FakeChatServer(0.05, 0.1)
    server.start()
    try:
        runner, task = await _started_run(server, tmp_path, rows=100, answered=10)
        runner.stop()
        runner.abort()
        result = await asyncio.wait_for(task, 5)
        assert result.aborted
        written = ids(read_output(tmp_path / "out.jsonl"))
        assert len(written) < len(set(server.started))  # some calls were dropped unwritten
        await run(server, tmp_path, None, concurrency=10)
    finally:
        server.stop()
    final = ids(read_output(tmp_path / "out.jsonl"))
    assert sorted(final) == sorted(f"r{i}" for i in range(100))


async def test_an_unwritable_output_ends_the_run_with_the_error(
    server: FakeChatServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from interlingua.batch.output import OutputWriter

    real = OutputWriter.write
    written: list[bytes] = []

    def write(self: OutputWriter, line: bytes) -> None:
        if len(written) == 5:
            raise OSError(28, "No space left on device")
        written.append(line)
        real(self, line)

    monkeypatch.setattr(OutputWriter, "write", write)
    with pytest.raises(OSError, match="No space left"):
        await asyncio.wait_for(run(server, tmp_path, simple_rows(100), concurrency=4), 10)
    assert len(read_output(tmp_path / "out.jsonl")) == 5
    assert len(server.started) < 100  # it stopped instead of sending everything


async def test_rate_limits_go_through_the_clients_limiter(
    server: FakeChatServer, tmp_path: Path
) -> None:
    batch_line = {
        "custom_id": "b1",
        "url": "/v1/chat/completions",
        "body": {"model": "m", "messages": [{"role": "user", "content": "b1"}], "max_tokens": 10},
    }
    rows = [*simple_rows(5), batch_line]
    runner, result = await run(
        server, tmp_path, rows, concurrency=3, requests_per_minute=1000,
        tokens_per_minute=1_000_000,
    )  # fmt: skip
    limits = runner.client.limiter.limits
    assert (limits.max_concurrency, limits.requests_per_minute) == (3, 1000)
    requests, tokens = runner.client.limiter.window_usage()
    assert requests == 6 and tokens > 0  # every call was admitted by the limiter
    assert result.stats.ok == 6
    unlimited = make_client(BatchOptions(tmp_path / "in.jsonl", tmp_path / "o.jsonl"))
    assert unlimited.limiter.unlimited  # no per-call limiter cost without --rpm/--tpm
    await unlimited.aclose()
