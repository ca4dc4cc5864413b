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


def _record(
    rid: str, question: str, answer: str, previous: str | None = None, owner: str = ""
) -> StoredResponse:
    return StoredResponse(
        id=rid,
        created_at=1,
        response=_response(rid, answer),
        input_items=[_user(question)],
        input_ids=[f"msg_in_{rid}"],
        previous_response_id=previous,
        status="completed",
        owner=owner,
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


# -- owners: a response is its key's alone ------------------------------------------------


async def test_only_the_owner_gets_lists_or_deletes_a_response(
    store: tuple[ResponseStore, Clock],
) -> None:
    s, _ = store
    record = _record("resp_a", "q", "a", owner="team-a")
    await s.put(record)
    for other in ("team-b", ""):  # another key, and no key / a server.api_keys key
        assert await s.get("resp_a", owner=other) is None
        assert await s.chain("resp_a", owner=other) is None
        assert await s.delete("resp_a", owner=other) is False
    assert await s.get("resp_a", owner="team-a") == record.response  # still there
    chain = await s.chain("resp_a", owner="team-a")
    assert chain is not None and [link.id for link in chain.links] == ["resp_a"]
    assert await s.delete("resp_a", owner="team-a") is True
    assert await s.get("resp_a", owner="team-a") is None


async def test_a_chain_stops_at_an_ancestor_of_another_owner(
    store: tuple[ResponseStore, Clock],
) -> None:
    s, _ = store
    # (the gateway never chains across owners; a row naming another's as its previous
    # stands for one put there by other means, e.g. by hand or by an older gateway)
    await s.put(_record("resp_a", "q1", "a1", owner="team-a"))
    await s.put(_record("resp_b", "q2", "a2", previous="resp_a", owner="team-b"))
    await s.put(_record("resp_c", "q3", "a3", previous="resp_b", owner="team-b"))
    chain = await s.chain("resp_c", owner="team-b")
    assert chain is not None and chain.missing == "resp_a"  # as if resp_a were deleted
    assert [link.id for link in chain.links] == ["resp_b", "resp_c"]
    assert [item["content"][0]["text"] for item in chain.context()] == ["q2", "a2", "q3", "a3"]
    assert await s.chain("resp_c", owner="team-a") is None


async def test_a_put_renews_only_its_owners_ancestors(
    store: tuple[ResponseStore, Clock],
) -> None:
    s, clock = store
    await s.put(_record("resp_mine", "q1", "a1", owner="team-a"))
    await s.put(_record("resp_theirs", "q1", "a1", owner="team-b"))
    clock.now += 20 * DAY
    await s.put(_record("resp_a2", "q2", "a2", previous="resp_mine", owner="team-a"))
    await s.put(_record("resp_b2", "q2", "a2", previous="resp_theirs", owner="team-a"))
    clock.now += 20 * DAY  # both roots are 40 days old
    assert await s.get("resp_mine", owner="team-a") is not None  # renewed by its owner
    assert await s.get("resp_theirs", owner="team-b") is None  # not by team-a's put


async def test_a_put_replaces_only_its_owners_row(store: tuple[ResponseStore, Clock]) -> None:
    s, clock = store
    await s.put(_record("resp_1", "q", "original", owner="team-a"))
    await s.put(_record("resp_1", "q", "hijacked", owner="team-b"))  # refused: no error
    assert b"original" in (await s.get("resp_1", owner="team-a") or b"")
    assert await s.get("resp_1", owner="team-b") is None
    await s.put(_record("resp_1", "q", "rewritten", owner="team-a"))
    assert b"rewritten" in (await s.get("resp_1", owner="team-a") or b"")
    clock.now += 31 * DAY  # expired (invisible to all): its id is free again
    await s.put(_record("resp_1", "q", "new", owner="team-b"))
    assert b"new" in (await s.get("resp_1", owner="team-b") or b"")
    assert await s.get("resp_1", owner="team-a") is None


async def test_held_by_another(store: tuple[ResponseStore, Clock]) -> None:
    s, clock = store
    await s.put(_record("resp_a", "q", "a", owner="team-a"))
    assert await s.held_by_another("resp_a", "team-b") is True
    assert await s.held_by_another("resp_a", "") is True
    assert await s.held_by_another("resp_a", "team-a") is False
    assert await s.held_by_another("resp_nope", "team-b") is False
    clock.now += 31 * DAY  # expired but not yet purged: still not team-b's to hand on
    assert await s.held_by_another("resp_a", "team-b") is True


# The table as interlingua made it before ``owner`` (56b8539, usage/responses.py).
_OLD_SCHEMA = (
    """CREATE TABLE interlingua_responses (
        id TEXT PRIMARY KEY,
        created_at BIGINT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL,
        previous_response_id TEXT,
        status TEXT,
        response TEXT NOT NULL,
        input_items TEXT NOT NULL,
        input_ids TEXT NOT NULL
    )""",
    "CREATE INDEX interlingua_responses_expires_at ON interlingua_responses (expires_at)",
)
_OLD_ROW = (
    "INSERT INTO interlingua_responses (id, created_at, expires_at, previous_response_id, "
    "status, response, input_items, input_ids) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
)


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
async def test_opening_a_table_made_before_owners_adds_the_column(
    request: pytest.FixtureRequest, tmp_path: Path, engine: str
) -> None:
    if engine == "sqlite":
        url = f"sqlite://{tmp_path}/old.db"
    else:
        url = request.getfixturevalue("postgres")
    old = connect(url)
    await old.open()
    await old.execute("DROP TABLE IF EXISTS interlingua_responses")  # (a shared server)
    for statement in _OLD_SCHEMA:
        await old.execute(statement)
    now = time.time()
    for rid, previous in (("resp_old1", None), ("resp_old2", "resp_old1")):
        body = _response(rid, "kept").decode()
        items = orjson.dumps([_user("q")]).decode()
        ids = orjson.dumps([f"msg_{rid}"]).decode()
        await old.execute(_OLD_ROW, rid, 1, now + DAY, previous, "completed", body, items, ids)
    await old.aclose()
    # Two gateways (workers, replicas) start on it at once: both add it, one of them wins.
    stores = [ResponseStore(connect(url), expire_after=DAY) for _ in range(2)]
    try:
        await asyncio.gather(*(s.open() for s in stores))
        s = stores[0]
        # the rows kept before owners are the keyless callers' (owner ''), as they were
        assert b"kept" in (await s.get("resp_old1") or b"")
        assert await s.get("resp_old1", owner="team-a") is None
        chain = await s.chain("resp_old2")
        assert chain is not None and [link.id for link in chain.links] == [
            "resp_old1",
            "resp_old2",
        ]
        await s.put(_record("resp_new", "q", "a", previous="resp_old2", owner=""))
        await s.put(_record("resp_team", "q", "a", owner="team-a"))
        assert await s.get("resp_team", owner="team-a") is not None
        owners = await s.db.fetch("SELECT id, owner FROM interlingua_responses ORDER BY id")
        assert owners == [
            ("resp_new", ""), ("resp_old1", ""), ("resp_old2", ""), ("resp_team", "team-a")
        ]  # fmt: skip
        await stores[1].aclose()  # a second open finds the column and changes nothing
        await stores[1].open()
        assert await stores[1].get("resp_team", owner="team-a") is not None
    finally:
        for s in stores:
            await s.aclose()


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
