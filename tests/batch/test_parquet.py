"""Parquet in and out for the single-process runner: columns, records, parts, crash recovery."""

from __future__ import annotations

import base64
import io
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

from interlingua.batch import BatchOptions, BatchRunner
from interlingua.batch.files import Columns
from interlingua.batch.parquet import JOURNAL, ParquetOutput, read_records, schema
from interlingua.batch.records import success_record
from interlingua.batch.runner import make_client
from interlingua.cli import build_parser

from .conftest import FakeChatServer, read_output, simple_rows, write_jsonl

GIF_1PX = base64.b64decode("R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7")
CLI = [sys.executable, "-m", "interlingua.cli"]


async def run(server: FakeChatServer, inp: Path, out: Path, **kw: Any) -> BatchRunner:
    options = BatchOptions(inp, out, base_url=server.v1, model="m", progress="off", **kw)
    client = make_client(options)
    client.retry_base = 0.0
    runner = BatchRunner(options, client=client, stream=io.StringIO())
    try:
        await runner.run()
    finally:
        await client.aclose()
    return runner


def write_parquet(path: Path, rows: list[dict[str, Any]], **kw: Any) -> Path:
    pq.write_table(pa.Table.from_pylist(rows, **kw), path)
    return path


def without_ids(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records less their random record id, in a stable order."""
    stripped = [{k: v for k, v in r.items() if k != "id"} for r in records]
    return sorted(stripped, key=lambda r: orjson.dumps(r, option=orjson.OPT_SORT_KEYS))


def parts(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


async def test_parquet_rows_become_requests_through_the_configured_columns(
    server: FakeChatServer, tmp_path: Path
) -> None:
    image = tmp_path / "dot.gif"
    image.write_bytes(GIF_1PX)
    uri = "data:image/gif;base64," + base64.b64encode(GIF_1PX).decode()
    rows = [
        {"qid": 0, "question": "q0", "pics": None, "max_tokens": 9, "label": "x"},
        {"qid": 1, "question": "q1", "pics": [str(image)], "max_tokens": None, "label": "y"},
        {"qid": 2, "question": "q2", "pics": [uri], "max_tokens": None, "label": "z"},
        {"qid": None, "question": "lost", "pics": None, "max_tokens": None, "label": "w"},
    ]
    inp = write_parquet(tmp_path / "in.parquet", rows)
    columns = Columns(id="qid", prompt="question", images="pics")
    await run(server, inp, tmp_path / "out.jsonl", columns=columns, concurrency=1, ordered=True)
    out = read_output(tmp_path / "out.jsonl")
    assert [r["custom_id"] for r in out] == ["0", "1", "2", None]
    for record in out[:3]:
        body = record["response"]["body"]
        assert body["choices"][0]["message"]["content"] == f"echo: q{record['custom_id']}"
    assert out[3]["error"]["code"] == "invalid_line" and out[3]["error"]["line"] == 4
    first, second, third = server.bodies
    assert first["max_tokens"] == 9 and "max_tokens" not in second  # a null is no setting
    assert first["messages"] == [{"role": "user", "content": "q0"}]
    for body in (second, third):
        assert image_urls(body) == [uri]


def image_urls(body: dict[str, Any]) -> list[str]:
    return [p["image_url"]["url"] for p in body["messages"][0]["content"] if "image_url" in p]


async def test_images_as_bytes_or_hugging_face_structs(
    server: FakeChatServer, tmp_path: Path
) -> None:
    uri = "data:image/gif;base64," + base64.b64encode(GIF_1PX).decode()
    raw = [{"custom_id": "raw", "prompt": "raw", "images": GIF_1PX}]
    write_parquet(tmp_path / "raw.parquet", raw)
    await run(server, tmp_path / "raw.parquet", tmp_path / "raw.jsonl")
    hf = [{"custom_id": "hf", "prompt": "hf", "image": {"bytes": GIF_1PX, "path": "x.gif"}}]
    write_parquet(tmp_path / "hf.parquet", hf)
    await run(
        server, tmp_path / "hf.parquet", tmp_path / "hf.jsonl", columns=Columns(images="image")
    )
    assert [image_urls(body) for body in server.bodies] == [[uri], [uri]]


async def test_parquet_rows_in_the_openai_batch_form_with_json_text_bodies(
    server: FakeChatServer, tmp_path: Path
) -> None:
    body = {"model": "g", "messages": [{"role": "user", "content": "b1"}]}
    rows = [{"custom_id": "b1", "method": "POST", "url": "/v1/chat/completions",
             "body": orjson.dumps(body).decode()}]  # fmt: skip
    inp = write_parquet(tmp_path / "in.parquet", rows)
    await run(server, inp, tmp_path / "out.jsonl")
    (record,) = read_output(tmp_path / "out.jsonl")
    assert record["response"]["body"]["choices"][0]["message"]["content"] == "echo: b1"
    assert server.bodies == [body]


async def test_jsonl_lines_take_renamed_keys_too(server: FakeChatServer, tmp_path: Path) -> None:
    inp = write_jsonl(
        tmp_path / "in.jsonl", [{"key": "k1", "text": "k1"}, {"key": "k2", "text": "k2"}]
    )
    await run(server, inp, tmp_path / "out.jsonl", columns=Columns(id="key", prompt="text"))
    out = read_output(tmp_path / "out.jsonl")
    assert sorted(r["custom_id"] for r in out) == ["k1", "k2"]
    assert all(r["error"] is None for r in out)


async def test_parquet_output_holds_the_jsonl_records(
    server: FakeChatServer, tmp_path: Path
) -> None:
    rows = simple_rows(40)
    rows[3] = {"custom_id": "bad3", "prompt": "bad3"}
    rows[5] = {"custom_id": "boom5", "prompt": "boom5"}
    rows[7] = {"custom_id": "flaky7", "prompt": "flaky7"}
    inp = write_jsonl(tmp_path / "in.jsonl", [*rows, {"custom_id": "r1", "prompt": "dup"}])
    await run(server, inp, tmp_path / "out.jsonl", retries=0)
    server.attempts.clear()
    runner = await run(server, inp, tmp_path / "out.parquet", retries=0)
    as_jsonl = without_ids(read_output(tmp_path / "out.jsonl"))
    records = list(read_records(tmp_path / "out.parquet"))
    assert len(records) == 41  # 40 ids and a duplicate's error, nothing twice
    assert without_ids(records) == as_jsonl
    assert all(r["id"].startswith("batch_req_") for r in records)
    flaky = [r for r in records if r["custom_id"] == "flaky7"]
    assert flaky[0]["error"]["code"] == "upstream_error"
    assert runner.stats.failed == 4
    # The directory is a plain Parquet dataset: its journal is gone, readers see the parts.
    directory = tmp_path / "out.parquet"
    assert parts(directory) == ["part-00000.parquet"]
    table = pads.dataset(str(directory), format="parquet").to_table()
    assert table.schema == schema() and table.num_rows == 41
    (r0,) = [r for r in table.to_pylist() if r["custom_id"] == "r0"]
    assert orjson.loads(r0["response"]["body"])["choices"][0]["message"]["content"] == "echo: r0"


async def test_parts_are_sealed_as_results_come_and_a_resume_skips_them(
    server: FakeChatServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("interlingua.batch.parquet.PART_ROWS", 7)
    inp = write_jsonl(tmp_path / "in.jsonl", simple_rows(30))
    out = tmp_path / "out.parquet"
    runner = await run(server, write_jsonl(tmp_path / "half.jsonl", simple_rows(16)), out)
    assert runner.stats.ok == 16
    assert parts(out) == [f"part-0000{i}.parquet" for i in range(3)]  # 7, 7, the last 2
    server.started.clear()
    runner = await run(server, inp, out, ordered=True)
    assert runner.stats.skipped == 16 and runner.stats.ok == 14
    assert sorted(server.started) == sorted(f"r{i}" for i in range(16, 30))
    ids = [r["custom_id"] for r in read_records(out)]
    assert sorted(ids) == sorted(f"r{i}" for i in range(30))
    assert ids[16:] == [f"r{i}" for i in range(16, 30)]  # the second run's, in order


def record(cid: str) -> bytes:
    return success_record(cid, 200, None, orjson.dumps({"text": cid}))


def test_opening_finishes_a_seal_that_a_crash_interrupted(tmp_path: Path) -> None:
    directory = tmp_path / "out.parquet"
    out = ParquetOutput(directory, part_rows=3)
    out.open()
    for cid in "abcde":
        out.write(record(cid))
    assert parts(directory) == [JOURNAL, "part-00000.parquet"]
    out.sync()
    # A crash in the next seal, after the journal was renamed, before its part was
    # renamed into place; then a new journal that got one line and half of another.
    os.replace(directory / JOURNAL, directory / "_journal-00001.jsonl")
    (directory / ".part-00001.parquet.tmp").write_bytes(b"PAR1 half a part")
    (directory / JOURNAL).write_bytes(record("f") + record("g")[:20])
    again = ParquetOutput(directory, part_rows=3)
    scan = again.open()
    assert len(scan.done) == 6
    assert all(cid in scan.done for cid in "abcdef") and "g" not in scan.done
    assert scan.repaired == 20
    assert parts(directory) == [JOURNAL, *(f"part-0000{i}.parquet" for i in range(3))]
    again.close()
    assert [r["custom_id"] for r in read_records(directory)] == list("abcdef")
    assert parts(directory) == [f"part-0000{i}.parquet" for i in range(3)]


def test_a_renamed_journal_whose_part_exists_is_not_counted_twice(tmp_path: Path) -> None:
    directory = tmp_path / "out.parquet"
    out = ParquetOutput(directory, part_rows=2)
    out.open()
    out.write(record("a"))
    out.write(record("b"))  # sealed: part 0
    out.close()
    # A crash after the part's rename, before its journal was deleted.
    (directory / "_journal-00000.jsonl").write_bytes(record("a") + record("b"))
    scan = ParquetOutput(directory).open()
    assert len(scan.done) == 2 and scan.lines == 2
    assert [r["custom_id"] for r in read_records(directory)] == ["a", "b"]
    assert not (directory / "_journal-00000.jsonl").exists()


def test_a_file_where_the_output_directory_should_be_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "out.parquet"
    path.write_bytes(b"not a directory")
    with pytest.raises(NotADirectoryError, match="directory of parts"):
        ParquetOutput(path).open()


async def test_retry_failed_compacts_the_parts_to_one_record_per_id(
    server: FakeChatServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("interlingua.batch.parquet.PART_ROWS", 4)
    rows = simple_rows(12)
    for i in (2, 9):
        rows[i] = {"custom_id": f"boom{i}", "prompt": f"boom{i}"}
    out = tmp_path / "out.parquet"
    await run(server, write_jsonl(tmp_path / "in.jsonl", rows), out, retries=0, ordered=True)
    assert sum(r["error"] is not None for r in read_records(out)) == 2
    for i in (2, 9):
        rows[i] = {"custom_id": f"boom{i}", "prompt": f"healed{i}"}
    runner = await run(
        server, write_jsonl(tmp_path / "in.jsonl", rows), out, retries=0, retry_failed=True
    )
    final = list(read_records(out))
    assert [r["custom_id"] for r in final] == [r["custom_id"] for r in rows]  # first places
    assert all(r["error"] is None for r in final)
    assert final[9]["response"]["body"]["choices"][0]["message"]["content"] == "echo: healed9"
    assert parts(out) == ["part-00004.parquet"]  # the compacted part replaced the others
    assert runner.stats.ok == 2


def test_a_kill_9_loses_no_finished_result(tmp_path: Path) -> None:
    """The CLI with Parquet in and out, killed mid-run and resumed: every id once."""
    server = FakeChatServer(0.02, 0.05)
    server.start()
    try:
        n = 300
        rows = [{"id": f"r{i}", "q": f"r{i}"} for i in range(n)]
        inp = write_parquet(tmp_path / "in.parquet", rows)
        out = tmp_path / "out.parquet"
        args = [
            *CLI, "batch", "run", str(inp), "-o", str(out), "--base-url", server.v1,
            "--model", "m", "--concurrency", "8", "--progress", "off",
            "--id-column", "id", "--prompt-column", "q",
        ]  # fmt: skip
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        journal = out / JOURNAL
        deadline = time.monotonic() + 30
        while not (journal.exists() and journal.read_bytes().count(b"\n") >= 40):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no results in 30 s"
            time.sleep(0.01)
        proc.kill()
        proc.communicate()
        written = journal.read_bytes().count(b"\n")
        assert 40 <= written < n  # really killed mid-run
        again = subprocess.run(args, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
        assert "skipped (already in the output)" in again.stderr
    finally:
        server.stop()
    ids = [r["custom_id"] for r in read_records(out)]
    assert sorted(ids) == sorted(r["id"] for r in rows)  # each exactly once
    assert all(r["error"] is None for r in read_records(out))
    assert parts(out) == ["part-00000.parquet", "part-00001.parquet"]  # recovered, then the rest


def test_engine_flags_need_the_ray_engine(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "in.jsonl", simple_rows(1))
    args = [*CLI, "batch", "run", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "o.jsonl")]
    result = subprocess.run([*args, "--address", "auto"], capture_output=True, text=True)
    assert result.returncode == 2 and "need --engine ray" in result.stderr
    assert not (tmp_path / "o.jsonl").exists()


def test_help_lists_the_column_and_engine_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["batch", "run", "--help"])
    text = capsys.readouterr().out
    for flag in (
        "--id-column", "--prompt-column", "--image-column", "--engine", "--address",
        "--actors", "--state-url", "Parquet",
    ):  # fmt: skip
        assert flag in text
    args = build_parser().parse_args(["batch", "run", "in.parquet", "-o", "out.parquet"])
    assert (args.engine, args.actors, args.prompt_column) == ("single", 2, "prompt")
