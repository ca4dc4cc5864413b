"""The Ray engine's parts without Ray: the map actor and the driver in one process.

:class:`RequestActor` is a plain class that Ray instantiates in each actor; here it is
called directly on tables, in this event loop, and :class:`RayBatch` writes what it
yields through ``open`` / ``consume`` / ``finish`` -- the path a Ray run takes, less the
transport. The same behaviour across real actors is in ``test_ray.py`` (slow).
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from interlingua.batch import BatchOptions, BatchResult
from interlingua.batch.files import Columns
from interlingua.batch.idset import IdSet
from interlingua.batch.parquet import read_records
from interlingua.batch.ray import RayBatch, RequestActor
from interlingua.batch.ray_limits import LimitKeeper
from interlingua.batch.records import success_record

from .conftest import FakeChatServer, read_output, simple_rows, write_jsonl
from .twins import comparable, mixed_rows, run_single


async def through_the_actor(
    options: BatchOptions, tables: list[pa.Table], *, text_rows: bool, batches: int = 1
) -> tuple[RayBatch, BatchResult]:
    """Open the output, send ``tables`` through one actor, write what it yields."""
    batch = RayBatch(options, stream=io.StringIO())
    scan = batch.open()
    actor = RequestActor(options, skip=batch.skip, text_rows=text_rows)
    try:
        results = [out for table in tables async for out in actor(table)]
    finally:
        await actor.aclose()
    assert scan is batch.scan
    batch.consume(results)
    return batch, batch.finish()


def lines(path: Path, size: int) -> list[pa.Table]:
    """A JSONL file as ``ray.data.read_text`` gives it: tables of one ``text`` column."""
    text = path.read_text().splitlines()
    return [pa.table({"text": text[i : i + size]}) for i in range(0, len(text), size)]


def options_for(server: FakeChatServer, inp: Path, out: Path, **kw: Any) -> BatchOptions:
    return BatchOptions(inp, out, base_url=server.v1, model="m", progress="off", **kw)


async def test_the_actor_writes_what_the_single_runner_writes(
    server: FakeChatServer, tmp_path: Path
) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", mixed_rows())
    with open(inp, "ab") as f:
        f.write(b"not json at all\n")
    one = await run_single(server, inp, tmp_path / "one.jsonl", retries=0)
    server.attempts.clear()
    options = options_for(server, inp, tmp_path / "ray.jsonl", retries=0)
    _, result = await through_the_actor(options, lines(inp, 8), text_rows=True)
    got = read_output(tmp_path / "ray.jsonl")
    assert comparable(got) == comparable(read_output(tmp_path / "one.jsonl"))
    a, b = one.stats, result.stats
    assert (a.ok, a.failed, a.failures, a.tokens_in) == (b.ok, b.failed, b.failures, b.tokens_in)
    (unreadable,) = [r for r in got if r["custom_id"] is None]
    assert unreadable["error"]["message"].endswith(": 'not json at all'")
    (nofield,) = [r for r in got if r["custom_id"] == "nofield"]
    assert nofield["error"]["message"].startswith("nofield: unknown fields ['colour']")
    (dup,) = [r for r in got if r["custom_id"] == "r1" and r["error"]]
    assert dup["error"]["code"] == "duplicate_custom_id"


async def test_table_rows_resume_and_retries(server: FakeChatServer, tmp_path: Path) -> None:
    """Parquet-like rows (named columns, integer ids, nulls); a resume skips what is
    done and counts it; a retried row counts its retry."""
    rows = [
        {"n": i, "q": f"flaky{i}" if i == 3 else f"q{i}", "max_tokens": None} for i in range(12)
    ]
    table = pa.Table.from_pylist(rows)
    pq.write_table(table, tmp_path / "in.parquet")  # (read for the progress total only)
    out = tmp_path / "out.parquet"
    columns = Columns(id="n", prompt="q")
    options = options_for(server, tmp_path / "in.parquet", out, columns=columns, retries=1)
    _, first = await through_the_actor(options, [table.slice(0, 6)], text_rows=False)
    assert (first.stats.ok, first.stats.retries) == (6, 1)
    server.started.clear()
    _, second = await through_the_actor(
        options, [table.slice(0, 6), table.slice(6)], text_rows=False
    )
    assert sorted(server.started) == sorted(f"q{i}" for i in range(6, 12))
    assert (second.stats.skipped, second.stats.ok, second.stats.done_before) == (6, 6, 6)
    assert second.stats.total == 12
    records = list(read_records(out))
    assert sorted(r["custom_id"] for r in records) == sorted(str(i) for i in range(12))
    assert all(r["error"] is None for r in records)


async def test_retry_failed_sends_only_the_failures_and_compacts(
    server: FakeChatServer, tmp_path: Path
) -> None:
    rows = simple_rows(10)
    rows[4] = {"custom_id": "boom4", "prompt": "boom4"}
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    await through_the_actor(options_for(server, inp, out, retries=0), lines(inp, 4), text_rows=True)
    rows[4] = {"custom_id": "boom4", "prompt": "healed4"}
    write_jsonl(inp, rows)
    server.started.clear()
    options = options_for(server, inp, out, retries=0, retry_failed=True)
    _, result = await through_the_actor(options, lines(inp, 4), text_rows=True)
    assert server.started == ["healed4"]
    assert result.compacted == 1 and result.stats.total == 1
    final = read_output(out)
    assert len(final) == 10 and all(r["error"] is None for r in final)


async def test_a_shard_takes_its_ids_and_the_first_reports_unreadable_rows(
    server: FakeChatServer, tmp_path: Path
) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", simple_rows(40))
    with open(inp, "ab") as f:
        f.write(b"{broken\n")
    seen: list[str | None] = []
    for index in range(2):
        out = tmp_path / f"out{index}.jsonl"
        options = options_for(server, inp, out, shard=(index, 2))
        await through_the_actor(options, lines(inp, 16), text_rows=True)
        seen += [r["custom_id"] for r in read_output(out)]
    assert sorted(seen, key=str) == sorted([f"r{i}" for i in range(40)] + [None], key=str)


async def test_empty_and_unreadable_answers_are_retried_and_counted(
    server: FakeChatServer, tmp_path: Path
) -> None:
    """retry_on_empty on the actors as in one process: the same lines, the same counts
    (the actor's client counts them; the driver adds them up)."""
    rows = [{"custom_id": t, "prompt": t} for t in ("hollow", "void", "garbled", "mangled", "ok")]
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    one = await run_single(server, inp, tmp_path / "one.jsonl", retries=1)
    server.attempts.clear()
    options = options_for(server, inp, tmp_path / "ray.jsonl", retries=1)
    _, result = await through_the_actor(options, lines(inp, 2), text_rows=True)
    a, b = one.stats, result.stats
    assert (b.empty_retries, b.unreadable_retries, b.retries) == (2, 2, 4)
    assert (a.empty_retries, a.unreadable_retries, a.retries) == (2, 2, 4)
    assert b.failures == a.failures
    assert b.failures == {"empty_response (HTTP 200)": 1, "invalid_response (HTTP 200)": 1}
    assert comparable(read_output(tmp_path / "ray.jsonl")) == comparable(
        read_output(tmp_path / "one.jsonl")
    )
    server.attempts.clear()
    off = options_for(server, inp, tmp_path / "off.jsonl", retries=1, retry_on_empty=False)
    _, result = await through_the_actor(off, lines(inp, 2), text_rows=True)
    assert (result.stats.empty_retries, result.stats.unreadable_retries) == (0, 0)
    assert server.attempts["void"] == 1


async def test_fold_reasoning_reaches_the_actors(server: FakeChatServer, tmp_path: Path) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [{"custom_id": "thinker", "prompt": "thinker"}])
    options = options_for(server, inp, tmp_path / "out.jsonl", fold_reasoning=True)
    await through_the_actor(options, lines(inp, 1), text_rows=True)
    (row,) = read_output(tmp_path / "out.jsonl")
    text = row["response"]["body"]["choices"][0]["message"]["content"]
    assert text == "<think>\nthought about thinker\n</think>\n\necho: thinker"


async def test_a_reported_duplicate_is_not_reported_again(
    server: FakeChatServer, tmp_path: Path
) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", [*simple_rows(3), {"custom_id": "r0", "prompt": "x"}])
    out = tmp_path / "out.jsonl"
    options = options_for(server, inp, out)
    _, first = await through_the_actor(options, lines(inp, 4), text_rows=True)
    assert first.stats.failures == {"duplicate_custom_id": 1}
    # The same results again (as a run that resumed before it had seen its output would
    # get them): the duplicate is in the output already.
    batch = RayBatch(options, stream=io.StringIO())
    batch.open()
    record = success_record("r0", 200, None, b'{"text": "again"}')
    row = {"custom_id": "r0", "record": record, "failure": None, "tokens_in": 0,
           "tokens_out": 0, "latency": None, "retries": 0, "empty_retries": 0,
           "unreadable_retries": 0, "skipped": 0}  # fmt: skip
    batch.consume([pa.Table.from_pylist([row, row])])
    batch.finish()
    assert len(read_output(out)) == 5  # the first r0 once more, no second duplicate line


async def test_stop_ends_the_run_after_the_batch_in_hand(
    server: FakeChatServer, tmp_path: Path
) -> None:
    inp = write_jsonl(tmp_path / "in.jsonl", simple_rows(8))
    options = options_for(server, inp, tmp_path / "out.jsonl")
    batch = RayBatch(options, stream=io.StringIO())
    batch.open()
    actor = RequestActor(options, skip=IdSet(), text_rows=True)
    try:
        tables = [out for table in lines(inp, 3) async for out in actor(table)]
    finally:
        await actor.aclose()

    def stopped_after_the_first() -> Iterator[pa.Table]:
        yield tables[0]
        batch.stop()  # (as a Ctrl-C while the driver waits for the next batch)
        yield from tables[1:]

    batch.consume(stopped_after_the_first())
    result = batch.finish()
    assert result.interrupted and result.stats.ok == 6  # the batch in hand, not the third
    assert len(read_output(tmp_path / "out.jsonl")) == 6


def test_the_keeper_counts_one_window_for_everyone() -> None:
    keeper = LimitKeeper(3, None, speed=60.0)  # a minute lasts one second
    leases = [keeper.acquire(0) for _ in range(3)]
    assert leases == [0, 1, 2]
    wait = keeper.acquire(0)
    assert isinstance(wait, float) and 0 < wait <= 1.0  # in real seconds
    keeper.settle(0, 10)
    keeper.release(0)
    keeper.release(0)  # (twice: no harm)
    assert keeper.usage()[0] == 2 and keeper.admitted() == 3
    time.sleep(wait + 0.05)
    assert keeper.acquire(0) == 3


@pytest.mark.parametrize("text", ["[1, 2]", '{"custom_id": 7, "prompt": "x"}'])
async def test_rows_without_a_string_id_are_unreadable(
    server: FakeChatServer, tmp_path: Path, text: str
) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text(text + "\n")
    options = options_for(server, inp, tmp_path / "out.jsonl")
    _, result = await through_the_actor(options, lines(inp, 1), text_rows=True)
    (record,) = read_output(tmp_path / "out.jsonl")
    assert record["custom_id"] is None and record["error"]["code"] == "invalid_line"
    assert orjson.loads(record["error"]["message"].split(": ", 2)[-1].strip("'")) is not None
    assert result.stats.failures == {"invalid_line": 1}
