"""The output file: appends, scan on open, torn-tail repair, compaction, the id set."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from interlingua.batch.idset import IdSet
from interlingua.batch.output import OutputWriter, compact
from interlingua.batch.records import DUPLICATE, error_record, success_record


def ok(cid: str, text: str = "x") -> bytes:
    return success_record(cid, 200, None, orjson.dumps({"text": text}))


def fail(cid: str) -> bytes:
    return error_record(cid, "upstream_error", "boom", status=500)


def test_writer_appends_whole_lines_and_fsyncs_on_a_clock(tmp_path: Path) -> None:
    now = [0.0]
    writer = OutputWriter(tmp_path / "sub" / "out.jsonl", clock=lambda: now[0])
    scan = writer.open()
    assert len(scan.done) == 0 and scan.lines == 0
    line = ok("a")
    writer.write(line)
    assert writer.fsyncs == 0
    assert (tmp_path / "sub" / "out.jsonl").read_bytes() == line  # in the file at once
    now[0] = 1.5
    writer.write(ok("b"))
    assert writer.fsyncs == 1  # a second passed: synced
    writer.write(ok("c"))
    writer.maybe_sync()
    assert writer.fsyncs == 1
    writer.close()
    assert writer.fsyncs == 2  # and at close
    writer.close()  # idempotent
    lines = (tmp_path / "sub" / "out.jsonl").read_bytes().splitlines()
    assert [orjson.loads(x)["custom_id"] for x in lines] == ["a", "b", "c"]


def test_open_scans_done_and_failed_with_the_latest_line_winning(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(
        ok("a") + fail("b") + fail("c") + ok("c") + ok("d") + fail("d")
        + error_record("a", DUPLICATE, "dup") + error_record(None, "invalid_line", "x", line_no=4)
    )  # fmt: skip
    scan = OutputWriter(path).open()
    assert all(cid in scan.done for cid in "abcd")
    assert "e" not in scan.done
    assert sorted(c for c in "abcd" if c in scan.failed) == ["b", "d"]
    assert scan.duplicates == {"a": 1}
    assert scan.bad_lines == {4}
    assert scan.repaired == 0 and scan.lines == 8


def test_a_torn_tail_without_newline_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    good = ok("a") + ok("b")
    torn = ok("c")[:40]
    path.write_bytes(good + torn)
    writer = OutputWriter(path)
    scan = writer.open()
    assert scan.repaired == len(torn)
    assert "c" not in scan.done and "b" in scan.done
    c = ok("c")
    writer.write(c)
    writer.close()
    assert path.read_bytes() == good + c
    assert [orjson.loads(x)["custom_id"] for x in path.read_bytes().splitlines()] == list("abc")


def test_a_last_line_that_is_not_json_is_cut_but_a_middle_one_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    junk = b'{"id": "batch_req_1", "custom_id": "z", "resp\n'
    a, b = ok("a"), ok("b")
    path.write_bytes(a + junk + b + junk)
    scan = OutputWriter(path).open()
    assert scan.repaired == len(junk)
    assert scan.unreadable == 1  # the middle one: left alone, not counted as done
    assert "z" not in scan.done and "b" in scan.done
    assert path.read_bytes() == a + junk + b


def test_compact_keeps_the_latest_line_at_the_first_position(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    dup = error_record("a", DUPLICATE, "dup")
    a_new, b, c_new = ok("a", "new"), ok("b"), ok("c", "new")
    path.write_bytes(fail("a") + b + dup + fail("c") + a_new + c_new)
    assert compact(path) == 2
    lines = path.read_bytes().splitlines(keepends=True)
    assert lines == [a_new, b, dup, c_new]
    records = [orjson.loads(x) for x in lines]
    assert [r["custom_id"] for r in records] == ["a", "b", "a", "c"]
    assert records[0]["response"]["body"] == {"text": "new"}
    assert records[3]["response"]["body"] == {"text": "new"}
    assert records[2]["error"]["code"] == DUPLICATE
    assert not list(tmp_path.glob("*.tmp"))
    assert compact(path) == 0  # nothing left to fold


def test_idset_holds_many_ids_in_little_memory() -> None:
    ids = IdSet()
    for i in range(50_000):
        assert ids.add(f"request-{i}")
    assert len(ids) == 50_000
    assert all(f"request-{i}" in ids for i in range(0, 50_000, 7))
    assert "request-50000" not in ids and 5 not in ids
    assert not ids.add("request-3")
    ids.discard("request-3")
    ids.discard("never-there")
    assert "request-3" not in ids and len(ids) == 49_999
    assert ids.add("request-3") and len(ids) == 50_000
    assert ids._slots.itemsize * len(ids._slots) <= 50_000 * 8 * 4  # <= 32 bytes an id


def test_idset_deleted_slots_do_not_hide_later_keys() -> None:
    ids = IdSet(str(i) for i in range(3000))
    for i in range(0, 3000, 2):
        ids.discard(str(i))
    assert all((str(i) in ids) == (i % 2 == 1) for i in range(3000))
    for i in range(3000, 6000):
        ids.add(str(i))
    assert len(ids) == 4500 and "2999" in ids and "5999" in ids and "0" not in ids


def test_fsync_reaches_the_output_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    real = os.fsync

    def spy(fd: int) -> None:
        calls.append(fd)
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    writer = OutputWriter(tmp_path / "o.jsonl", fsync_interval=0.0)
    writer.open()
    fd = writer._fd
    writer.write(ok("a"))
    writer.write(ok("b"))
    writer.close()
    assert calls == [fd, fd]  # once per write at interval 0; nothing left dirty at close
