"""The response store's behaviour, the same suite on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import pytest

from interlingua.usage import ResponseStore, StoredResponse, StoreError, connect
from interlingua.usage.db import PostgresDatabase, sqlite_path

DAY = 86400.0


class Clock:
    """A settable clock, so expiry needs no sleeping."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "postgresql"])
async def store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[ResponseStore, Clock]]:
    if request.param == "sqlite":
        url = f"sqlite://{tmp_path}/responses.db"
    else:
        url = request.getfixturevalue("postgres")
    clock = Clock()
    store = ResponseStore(connect(url), expire_after=30 * DAY, clock=clock)
    await store.open()
    await store.db.execute("DELETE FROM interlingua_responses")  # (one server per session)
    try:
        yield store, clock
    finally:
        await store.aclose()


def _response(rid: str, *texts: str, status: str = "completed") -> bytes:
    output = [
        {"id": f"msg_{rid}_{i}", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": t, "annotations": []}]}
        for i, t in enumerate(texts)
    ]  # fmt: skip
    return orjson.dumps({"id": rid, "object": "response", "status": status, "output": output})


def _user(text: str) -> dict[str, object]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _record(rid: str, question: str, answer: str, previous: str | None = None) -> StoredResponse:
    return StoredResponse(
        id=rid,
        created_at=1,
        response=_response(rid, answer),
        input_items=[_user(question)],
        input_ids=[f"msg_in_{rid}"],
        previous_response_id=previous,
        status="completed",
    )


async def test_put_then_get_gives_back_the_same_bytes(store: tuple[ResponseStore, Clock]) -> None:
    s, _ = store
    record = _record("resp_1", "hi", "hello")
    await s.put(record)
    assert await s.get("resp_1") == record.response
    assert await s.get("resp_unknown") is None


async def test_put_replaces_a_row_with_the_same_id(store: tuple[ResponseStore, Clock]) -> None:
    s, _ = store
    await s.put(_record("resp_1", "hi", "hello"))
    await s.put(_record("resp_1", "hi", "hello again"))
    assert b"hello again" in (await s.get("resp_1") or b"")


async def test_delete(store: tuple[ResponseStore, Clock]) -> None:
    s, _ = store
    await s.put(_record("resp_1", "hi", "hello"))
    assert await s.delete("resp_1") is True
    assert await s.get("resp_1") is None
    assert await s.delete("resp_1") is False


async def test_chain_is_oldest_first_inputs_then_outputs(
    store: tuple[ResponseStore, Clock],
) -> None:
    s, _ = store
    await s.put(_record("resp_a", "q1", "a1"))
    await s.put(_record("resp_b", "q2", "a2", previous="resp_a"))
    await s.put(_record("resp_c", "q3", "a3", previous="resp_b"))
    chain = await s.chain("resp_c")
    assert chain is not None and chain.missing is None
    assert [link.id for link in chain.links] == ["resp_a", "resp_b", "resp_c"]
    texts = [item["content"][0]["text"] for item in chain.context()]
    assert texts == ["q1", "a1", "q2", "a2", "q3", "a3"]
    assert chain.links[1].input_ids == ["msg_in_resp_b"]
    middle = await s.chain("resp_b")
    assert middle is not None and [link.id for link in middle.links] == ["resp_a", "resp_b"]
    assert await s.chain("resp_unknown") is None


async def test_a_deleted_ancestor_is_reported_missing(store: tuple[ResponseStore, Clock]) -> None:
    s, _ = store
    await s.put(_record("resp_a", "q1", "a1"))
    await s.put(_record("resp_b", "q2", "a2", previous="resp_a"))
    await s.put(_record("resp_c", "q3", "a3", previous="resp_b"))
    await s.delete("resp_a")
    chain = await s.chain("resp_c")
    assert chain is not None and chain.missing == "resp_a"
    assert [link.id for link in chain.links] == ["resp_b", "resp_c"]


async def test_expired_rows_are_not_returned_and_are_purged(
    store: tuple[ResponseStore, Clock],
) -> None:
    s, clock = store
    await s.put(_record("resp_old", "q", "a"))
    clock.now += 29 * DAY
    await s.put(_record("resp_new", "q", "a"))
    clock.now += 2 * DAY  # resp_old is 31 days old, resp_new 2
    assert await s.get("resp_old") is None
    assert await s.chain("resp_old") is None
    assert await s.delete("resp_old") is False
    assert await s.get("resp_new") is not None
    assert await s.purge() == 1
    rows = await s.db.fetch("SELECT id FROM interlingua_responses")
    assert rows == [("resp_new",)]


async def test_a_write_purges_lazily(store: tuple[ResponseStore, Clock]) -> None:
    s, clock = store
    await s.put(_record("resp_old", "q", "a"))
    clock.now += 31 * DAY
    await s.put(_record("resp_new", "q", "a"))  # the first write past purge_every purges
    rows = await s.db.fetch("SELECT id FROM interlingua_responses")
    assert rows == [("resp_new",)]


async def test_continuing_a_conversation_keeps_its_ancestors_alive(
    store: tuple[ResponseStore, Clock],
) -> None:
    s, clock = store
    await s.put(_record("resp_a", "q1", "a1"))
    clock.now += 20 * DAY
    await s.put(_record("resp_b", "q2", "a2", previous="resp_a"))
    clock.now += 20 * DAY  # resp_a is 40 days old, but its conversation went on 20 days ago
    chain = await s.chain("resp_b")
    assert chain is not None and [link.id for link in chain.links] == ["resp_a", "resp_b"]


async def test_concurrent_writes_all_land(store: tuple[ResponseStore, Clock]) -> None:
    s, _ = store
    await s.put(_record("resp_root", "q", "a"))
    records = [_record(f"resp_{i}", f"q{i}", f"a{i}", previous="resp_root") for i in range(40)]
    await asyncio.gather(*(s.put(r) for r in records))
    got = await asyncio.gather(*(s.get(r.id) for r in records))
    assert got == [r.response for r in records]
    chains = await asyncio.gather(*(s.chain(r.id) for r in records))
    assert all(c is not None and len(c.links) == 2 for c in chains)


async def test_a_long_chain_is_walked_in_one_query(store: tuple[ResponseStore, Clock]) -> None:
    s, _ = store
    previous = None
    for i in range(200):
        await s.put(_record(f"resp_{i:03}", f"q{i}", f"a{i}", previous=previous))
        previous = f"resp_{i:03}"
    chain = await s.chain("resp_199")
    assert chain is not None and len(chain.links) == 200
    assert chain.links[0].id == "resp_000" and chain.missing is None


def test_sqlite_urls() -> None:
    assert sqlite_path("sqlite:///var/lib/x.db") == "/var/lib/x.db"
    assert sqlite_path("sqlite://rel.db") == "rel.db"
    assert sqlite_path("sqlite://:memory:") == ":memory:"
    assert sqlite_path("sqlite://~/x.db").endswith("/x.db")
    assert not sqlite_path("sqlite://~/x.db").startswith("~")
    with pytest.raises(ValueError, match="unsupported database URL"):
        connect("mysql://h/db")


async def test_an_unreachable_database_raises_store_error(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    store = ResponseStore(connect(f"sqlite://{blocked}/sub/responses.db"), expire_after=60)
    with pytest.raises(StoreError):
        await store.open()
    await store.aclose()


async def test_an_unreachable_postgres_raises_store_error() -> None:
    from ..live_server import free_port

    db = PostgresDatabase(f"postgresql://nobody:secret@127.0.0.1:{free_port()}/x")
    with pytest.raises(StoreError) as caught:
        await ResponseStore(db, expire_after=60).open()
    assert "secret" not in str(caught.value)
    # within RETRY_AFTER the failure is given back at once, not tried again
    started = time.monotonic()
    with pytest.raises(StoreError) as again:
        await db.open()
    assert again.value is caught.value and time.monotonic() - started < 0.5
    await db.aclose()
