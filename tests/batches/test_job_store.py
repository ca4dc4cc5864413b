"""The batches' store rules without HTTP, on SQLite and PostgreSQL: one holder at a time
(a claim races, a lease runs out, a takeover fences the old holder's writes), a line's
first result is its only one, owners see only their own, cancel only what runs."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from interlingua.batches import BatchStore, JobStore, open_batch_store
from interlingua.batches.jobs import LineResult
from interlingua.batches.schema import BATCHES, RESULTS


@pytest.fixture(params=["sqlite", "postgresql"])
async def jobs(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[JobStore]:
    if request.param == "sqlite":
        url = f"sqlite://{tmp_path}/batches.db"
    else:
        url = request.getfixturevalue("postgres")
    store: BatchStore = open_batch_store(url)
    await store.open()
    await store.db.execute(f"DELETE FROM {BATCHES}")
    await store.db.execute(f"DELETE FROM {RESULTS}")
    try:
        yield store.jobs
    finally:
        await store.aclose()


async def test_one_holder_at_a_time_and_a_takeover_fences_the_old_one(jobs: JobStore) -> None:
    job = await jobs.create("a", "/v1/chat/completions", "file-x", "24h", 3600, None)
    now = time.time()
    assert await jobs.claimable("p1", now) == [job.id]
    assert await jobs.claim(job.id, "p1", now, lease=30)
    assert not await jobs.claim(job.id, "p2", now + 1, lease=30)  # (held)
    assert await jobs.claimable("p2", now + 1) == []
    assert await jobs.claim(job.id, "p1", now + 1, lease=30)  # (its own: resumed)
    assert await jobs.renew([job.id], "p1", now + 40) == {job.id: "validating"}
    assert await jobs.claim(job.id, "p2", now + 41, lease=30)  # (run out: taken over)
    assert await jobs.renew([job.id], "p1", now + 50) == {}  # (p1 learns it lost it)
    assert not await jobs.advance(job.id, "p1", "in_progress", ("validating",), total=3)
    assert await jobs.advance(job.id, "p2", "in_progress", ("validating",), total=3)
    got = await jobs.get(job.id)
    assert got is not None and (got.status, got.total, got.holder) == ("in_progress", 3, "p2")


async def test_a_lines_first_result_is_its_only_one(jobs: JobStore) -> None:
    job = await jobs.create("a", "/v1/chat/completions", "file-x", "24h", 3600, None)
    first = LineResult(2, False, b'{"custom_id":"r2"}\n', input_tokens=5, output_tokens=3)
    again = LineResult(2, True, b'{"custom_id":"r2","again":true}\n')
    other = LineResult(1, True, b'{"custom_id":"r1"}\n')
    for result in (first, again, other):
        sql, args = jobs.journal(job.id, result)
        await jobs.db.execute(sql, *args)
    assert await jobs.finished_lines(job.id) == {1, 2}
    counts = await jobs.journal_counts(job.id)
    assert (counts.completed, counts.failed, counts.input_tokens) == (1, 1, 5)
    assert [r async for r in jobs.records(job.id, failed=False)] == [first.record]
    await jobs.forget_results(job.id)
    assert await jobs.finished_lines(job.id) == set()


async def test_owners_pages_and_cancel(jobs: JobStore) -> None:
    made = [
        (await jobs.create("a", "/v1/chat/completions", "file-x", "24h", 3600, {"n": str(i)})).id
        for i in range(3)
    ]
    other = await jobs.create("b", "/v1/chat/completions", "file-y", "24h", 3600, None)
    assert await jobs.get(made[0], "b") is None
    page = await jobs.page("a", limit=2)
    assert page is not None and [j.id for j in page[0]] == made[::-1][:2] and page[1]
    rest = await jobs.page("a", limit=2, after=made[1])
    assert rest is not None and [j.id for j in rest[0]] == [made[0]] and not rest[1]
    assert await jobs.page("a", limit=2, after=other.id) is None  # (another's id)
    everyone = await jobs.page(None, limit=10)
    assert everyone is not None and len(everyone[0]) == 4
    assert await jobs.cancel(made[0], "b") is None
    cancelled = await jobs.cancel(made[0], "a")
    assert cancelled is not None and cancelled.status == "cancelling"
    assert cancelled.times["cancelling_at"] and cancelled.metadata == {"n": "0"}
