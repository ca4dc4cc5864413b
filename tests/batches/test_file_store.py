"""The file store (interlingua/batches) on SQLite with a directory and on PostgreSQL with
chunk rows: bytes in and out in pieces, owners, pages, expiry, aborted uploads, and its
migrations kept apart from the usage log's."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from interlingua.batches import BatchStore, open_batch_store
from interlingua.batches.blobs import DirectoryBlobs
from interlingua.batches.files import UPLOAD_WINDOW
from interlingua.batches.schema import CHUNK_BYTES, CHUNKS, FILES, VERSION_TABLE
from interlingua.usage.schema import MIGRATIONS as USAGE_MIGRATIONS
from interlingua.usage.schema import VERSION_TABLE as USAGE_VERSIONS
from interlingua.usage.schema import migrate


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BatchStore]:
    if request.param == "sqlite":
        url = f"sqlite://{tmp_path}/batches.db"
    else:
        url = request.getfixturevalue("postgres")
    opened = open_batch_store(url)
    await opened.open()
    # (one PostgreSQL for the session: each test starts from no files)
    await opened.db.execute(f"DELETE FROM {FILES}")
    await opened.db.execute(f"DELETE FROM {CHUNKS}")
    try:
        yield opened
    finally:
        await opened.aclose()


async def _read(store: BatchStore, file_id: str) -> bytes:
    return b"".join([chunk async for chunk in store.files.content(file_id)])


async def _put(
    store: BatchStore, owner: str, data: bytes, purpose: str = "batch", expire: float | None = 3600
) -> str:
    upload = await store.files.begin(owner)
    for start in range(0, len(data), 100_000):
        await upload.write(data[start : start + 100_000])
    return (await upload.finish(purpose, "in.jsonl", expire)).id


async def test_bytes_go_in_and_out_in_pieces_whole(store: BatchStore) -> None:
    data = os.urandom(2 * CHUNK_BYTES + 12345)  # two whole chunks and a part
    file_id = await _put(store, "a", data)
    pieces = [len(c) async for c in store.files.content(file_id)]
    assert max(pieces) <= CHUNK_BYTES + 100_000 and sum(pieces) == len(data)
    assert await _read(store, file_id) == data
    stored = await store.files.get(file_id, "a")
    assert stored is not None and stored.bytes == len(data) and stored.filename == "in.jsonl"
    empty = await _put(store, "a", b"")
    assert await _read(store, empty) == b""


async def test_another_owner_sees_nothing_and_deletes_nothing(store: BatchStore) -> None:
    file_id = await _put(store, "team-a", b"x")
    assert await store.files.get(file_id, "team-b") is None
    assert not await store.files.delete(file_id, "team-b")
    page = await store.files.page("team-b")
    assert page is not None and page.files == []
    assert await store.files.page("team-b", after=file_id) is None  # (as an unknown id)
    assert await store.files.delete(file_id, "team-a")
    assert await store.files.get(file_id, "team-a") is None
    assert await _read(store, file_id) == b""


async def test_pages_follow_order_purpose_and_cursor(store: BatchStore) -> None:
    ids = [await _put(store, "a", b"%d" % i, "batch" if i % 2 else "user_data") for i in range(5)]
    page = await store.files.page("a", limit=2)
    assert page is not None and [f.id for f in page.files] == ids[::-1][:2] and page.has_more
    page = await store.files.page("a", limit=2, after=ids[3])
    assert page is not None and [f.id for f in page.files] == [ids[2], ids[1]] and page.has_more
    page = await store.files.page("a", order="asc", after=ids[2])
    assert page is not None and [f.id for f in page.files] == ids[3:] and not page.has_more
    page = await store.files.page("a", purpose="batch", order="asc")
    assert page is not None and [f.id for f in page.files] == [ids[1], ids[3]]


async def test_an_aborted_upload_leaves_nothing(store: BatchStore) -> None:
    upload = await store.files.begin("a")
    await upload.write(b"y" * (CHUNK_BYTES + 1))
    await upload.abort()
    assert await store.db.fetch(f"SELECT id FROM {FILES}") == []
    assert await _read(store, upload.id) == b""


async def test_the_sweep_deletes_expired_files_and_abandoned_uploads(store: BatchStore) -> None:
    kept = await _put(store, "a", b"kept", expire=None)  # (never expires)
    expired = await _put(store, "a", b"gone" * CHUNK_BYTES)
    await store.db.execute(f"UPDATE {FILES} SET expires_at = 1 WHERE id = $1", expired)
    assert await store.files.get(expired, "a") is None  # (expired: invisible before the sweep)
    abandoned = await store.files.begin("a")
    await abandoned.write(b"z" * (CHUNK_BYTES + 5))
    await abandoned._writer.close()  # (its bytes all out, then the process died)
    assert await store.files.sweep() == 1
    assert await store.files.sweep(abandoned.created_at + UPLOAD_WINDOW) == 1
    rows = await store.db.fetch(f"SELECT id FROM {FILES}")
    assert rows == [(kept,)]
    assert await _read(store, expired) == b"" and await _read(store, abandoned.id) == b""
    if isinstance(store.files.blobs, DirectoryBlobs):
        assert sorted(os.listdir(store.files.blobs.directory)) == [kept]
    else:
        chunks = await store.db.fetch(f"SELECT DISTINCT file_id FROM {CHUNKS}")
        assert chunks == [(kept,)]


async def test_its_versions_are_its_own(tmp_path: Path) -> None:
    """One database for the usage log and the file store: each migrates by its own table."""
    store = open_batch_store(f"sqlite://{tmp_path}/shared.db")
    await store.open()
    try:
        # the usage log's, from nothing
        assert await migrate(store.db) == USAGE_MIGRATIONS[-1].version
        rows = await store.db.fetch(f"SELECT version FROM {VERSION_TABLE} ORDER BY version")
        assert rows == [(1,), (2,)]  # the store's: files, then batches
        usage_rows = await store.db.fetch(f"SELECT version FROM {USAGE_VERSIONS}")
        assert len(usage_rows) == len(USAGE_MIGRATIONS)
    finally:
        await store.aclose()
