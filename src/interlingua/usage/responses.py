"""The stored Responses API objects: put, get, delete, and a conversation's chain.

One row per response: its id, ``created_at``, ``expires_at``, the rendered response
object (JSON text, byte for byte what a client got), this request's **own** input items
(JSON, normalized by the caller) with their ids, and ``previous_response_id``. A
conversation is the chain of ``previous_response_id`` links; :meth:`ResponseStore.chain`
walks it in one query (a recursive CTE, the same text on SQLite and PostgreSQL) and
returns it oldest first, so the caller's context is, per ancestor, its input items then
its output items, then the new input. Storing only a response's own items keeps the
table linear in the conversation's length (a full copy per turn would be quadratic).

Expiry: a row is kept ``expire_after`` seconds. Extending a conversation extends its
ancestors too (a live conversation does not lose its first turns under it); expired
rows are never returned and are deleted lazily, at most every ``purge_every`` seconds,
by the next write.

Owner: every row names the client key that stored it (``owner``: the key's name; ``''``
when the gateway has no named keys, and for ``server.api_keys`` keys). Every read, delete,
walk and renewal takes an owner and sees only that owner's rows, and a chain stops at an
ancestor of another owner as it does at a deleted one: a response of another key is
indistinguishable from a missing one (docs/decisions.md, "Stored responses belong to their
key"). A ``put`` replaces a row of the same id only when the owner matches (or the row
has expired).

JSON is stored as text, not PostgreSQL ``jsonb``: nothing queries inside it, and text
gives back the exact bytes (``jsonb`` reorders keys) on both engines.

Schema changes: ``owner`` came after the table. :meth:`ResponseStore.open` adds it to a
table made before it (``ALTER TABLE ... ADD COLUMN``, with the default ``''``: the rows of
a gateway that had no owners belong to keyless and ``server.api_keys`` callers, as they
did). Two processes adding it at once: the loser's error is retried once, and the retry
finds the column there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from .db import Database, Statement, StoreError, WriteBatcher

__all__ = ["Chain", "Link", "ResponseStore", "StoredResponse"]

#: the longest chain walked (a guard: a chain never loops, since a response names one
#: stored before it, but a row replaced under the same id could make one)
MAX_CHAIN = 100_000

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS interlingua_responses (
        id TEXT PRIMARY KEY,
        created_at BIGINT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL,
        previous_response_id TEXT,
        status TEXT,
        response TEXT NOT NULL,
        input_items TEXT NOT NULL,
        input_ids TEXT NOT NULL,
        owner TEXT NOT NULL DEFAULT ''
    )""",
    "CREATE INDEX IF NOT EXISTS interlingua_responses_expires_at "
    "ON interlingua_responses (expires_at)",
)

# Whether the table has the column ``owner`` (a table made before it has not).
_HAS_OWNER = {
    "sqlite": "SELECT COUNT(*) FROM pragma_table_info('interlingua_responses') "
    "WHERE name = 'owner'",
    # (regclass resolves the name through search_path, as the unqualified statements do)
    "postgresql": "SELECT COUNT(*) FROM pg_attribute "
    "WHERE attrelid = 'interlingua_responses'::regclass AND attname = 'owner' "
    "AND NOT attisdropped",
}
_ADD_OWNER = "ALTER TABLE interlingua_responses ADD COLUMN owner TEXT NOT NULL DEFAULT ''"

# The ancestors of $1 (itself included) that have not expired at $2 and belong to owner
# $4, nearest first: the walk stops at a row of another owner as at a missing one.
_CHAIN_CTE = """
    WITH RECURSIVE chain(id, previous_response_id, depth) AS (
        SELECT id, previous_response_id, 0 FROM interlingua_responses
        WHERE id = $1 AND expires_at > $2 AND owner = $4
        UNION ALL
        SELECT r.id, r.previous_response_id, c.depth + 1
        FROM interlingua_responses r JOIN chain c ON r.id = c.previous_response_id
        WHERE r.expires_at > $2 AND r.owner = $4 AND c.depth < $3
    )"""

_CHAIN = (
    _CHAIN_CTE
    + """
    SELECT r.id, r.previous_response_id, r.response, r.input_items, r.input_ids
    FROM chain c JOIN interlingua_responses r ON r.id = c.id
    ORDER BY c.depth DESC"""
)

_EXTEND = (
    "UPDATE interlingua_responses SET expires_at = $5 WHERE expires_at < $5 AND id IN ("
    + _CHAIN_CTE
    + " SELECT id FROM chain)"
)

# A row of the same id is replaced only by its owner, or once it has expired at $10
# (then it is invisible to everyone and its id free again); else the put does nothing.
_PUT = """
    INSERT INTO interlingua_responses
        (id, created_at, expires_at, previous_response_id, status, response, input_items,
         input_ids, owner)
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
    ON CONFLICT (id) DO UPDATE SET
        created_at = excluded.created_at, expires_at = excluded.expires_at,
        previous_response_id = excluded.previous_response_id, status = excluded.status,
        response = excluded.response, input_items = excluded.input_items,
        input_ids = excluded.input_ids, owner = excluded.owner
    WHERE interlingua_responses.owner = excluded.owner
        OR interlingua_responses.expires_at <= $10"""


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One response to keep. ``response`` is the rendered object's JSON; ``input_items``
    this request's own input items as the caller normalized them, ``input_ids`` their
    ids (same length); ``owner`` the name of the key that stored it ('' for none)."""

    id: str
    created_at: int
    response: bytes
    input_items: list[dict[str, Any]] = field(default_factory=list)
    input_ids: list[str] = field(default_factory=list)
    previous_response_id: str | None = None
    status: str | None = None
    owner: str = ""


@dataclass(frozen=True, slots=True)
class Link:
    """One response of a chain: its own input items (and their ids) and its object."""

    id: str
    previous_response_id: str | None
    input_items: list[dict[str, Any]]
    input_ids: list[str]
    response: dict[str, Any]

    @property
    def output(self) -> list[dict[str, Any]]:
        """The response's output items (what the model said)."""
        output = self.response.get("output")
        return (
            [item for item in output if isinstance(item, dict)] if isinstance(output, list) else []
        )


@dataclass(frozen=True, slots=True)
class Chain:
    """A conversation up to one response, oldest first. ``missing`` names the nearest
    ancestor that is gone (deleted, expired, or another owner's), in which case ``links``
    starts after it."""

    links: list[Link]
    missing: str | None = None

    def context(self) -> list[dict[str, Any]]:
        """Every item of the conversation in order: per response, input then output."""
        items: list[dict[str, Any]] = []
        for link in self.links:
            items.extend(link.input_items)
            items.extend(link.output)
        return items


class ResponseStore:
    """Stored responses on a :class:`~.db.Database`. See the module docstring.

    ``clock`` returns the time in seconds (tests move it to expire rows).
    """

    def __init__(
        self,
        db: Database,
        expire_after: float,
        *,
        purge_every: float = 3600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.expire_after = expire_after
        self.purge_every = min(purge_every, expire_after)
        self.clock = clock
        self._ready = False
        self._next_purge = 0.0
        self._writes = WriteBatcher(db)

    async def open(self) -> None:
        """Connect and create the table if needed (idempotent); StoreError on failure."""
        if self._ready:
            return
        await self.db.open()
        try:
            await self._create()
        except StoreError:
            # Two processes creating the table at once can collide in PostgreSQL's
            # catalog ("IF NOT EXISTS" is not atomic there); the second try sees it.
            await self._create()
        self._ready = True

    async def _create(self) -> None:
        for statement in _SCHEMA:
            await self.db.execute(statement)
        # A table made before ``owner`` existed gets it (module docstring).
        has_owner = await self.db.fetch(_HAS_OWNER[self.db.engine])
        if not has_owner[0][0]:
            await self.db.execute(_ADD_OWNER)

    async def aclose(self) -> None:
        """Close the database connection(s)."""
        self._ready = False
        await self._writes.flush()
        await self.db.aclose()

    async def put(self, record: StoredResponse) -> None:
        """Store ``record`` (replacing a row of its id only when it has the same owner,
        or has expired), and extend the life of its ancestors of the same owner."""
        await self.open()
        now = self.clock()
        expires = now + self.expire_after
        row = (
            record.id,
            record.created_at,
            expires,
            record.previous_response_id,
            record.status,
            record.response.decode(),
            orjson.dumps(record.input_items).decode(),
            orjson.dumps(record.input_ids).decode(),
            record.owner,
            now,
        )
        statements: list[Statement] = [(_PUT, row)]
        if record.previous_response_id is not None:
            extend = (record.previous_response_id, now, MAX_CHAIN, record.owner, expires)
            statements.append((_EXTEND, extend))
        # Committed with the other answers' rows of the moment (usage/db.py WriteBatcher).
        await self._writes.submit(statements)
        if now >= self._next_purge:
            await self.purge()

    async def get(self, response_id: str, *, owner: str = "") -> bytes | None:
        """The stored response object's JSON, or None (unknown, deleted, expired, or
        another owner's)."""
        await self.open()
        rows = await self.db.fetch(
            "SELECT response FROM interlingua_responses "
            "WHERE id = $1 AND expires_at > $2 AND owner = $3",
            response_id,
            self.clock(),
            owner,
        )
        return rows[0][0].encode() if rows else None

    async def delete(self, response_id: str, *, owner: str = "") -> bool:
        """Delete one response of ``owner``; False if there was none (or it had expired,
        or is another owner's: then it stays)."""
        await self.open()
        deleted = await self.db.execute(
            "DELETE FROM interlingua_responses WHERE id = $1 AND expires_at > $2 AND owner = $3",
            response_id,
            self.clock(),
            owner,
        )
        return deleted > 0

    async def held_by_another(self, response_id: str, owner: str) -> bool:
        """Whether a row of ``response_id`` belongs to an owner other than ``owner``
        (expired or not, until it is purged). For the one caller that must tell "not
        held here" from "not yours": an id it would otherwise hand on to an upstream
        (server/responses/state.py); never for an answer to a client."""
        await self.open()
        rows = await self.db.fetch(
            "SELECT 1 FROM interlingua_responses WHERE id = $1 AND owner <> $2",
            response_id,
            owner,
        )
        return bool(rows)

    async def chain(self, response_id: str, *, owner: str = "") -> Chain | None:
        """The conversation ending at ``response_id``, of ``owner``'s responses only;
        None if that response is unknown (or another owner's). An ancestor of another
        owner ends the chain as a deleted one does (``missing``)."""
        await self.open()
        rows = await self.db.fetch(_CHAIN, response_id, self.clock(), MAX_CHAIN, owner)
        if not rows:
            return None
        links = [
            Link(
                id=row[0],
                previous_response_id=row[1],
                response=orjson.loads(row[2]),
                input_items=orjson.loads(row[3]),
                input_ids=orjson.loads(row[4]),
            )
            for row in rows
        ]
        first = links[0].previous_response_id
        return Chain(links, missing=first)  # the oldest link's previous is gone, if any

    async def purge(self) -> int:
        """Delete every expired row now; how many."""
        await self.open()
        now = self.clock()
        self._next_purge = now + self.purge_every
        return await self.db.execute(
            "DELETE FROM interlingua_responses WHERE expires_at <= $1", now
        )
