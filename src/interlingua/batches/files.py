"""Uploaded files: their rows, their bytes, their owners and their expiry.

An upload is begun (:meth:`FileStore.begin`: a row in ``uploading`` state, invisible to
every read), fed its bytes as they arrive (:meth:`Upload.write`), then finished (the row
becomes ``processed`` with its size, name, purpose and expiry) or aborted (row and bytes
deleted). A process killed mid-upload leaves an ``uploading`` row whose ``expires_at`` is
a day away: the sweep deletes it and its bytes then.

Owner: every row names the key that uploaded it (``owner``: the key's name; ``''`` when
the gateway has no named keys), and every read and delete takes an owner and sees only
that owner's rows, so another key's file is indistinguishable from a missing one -- as
for the stored responses (usage/responses.py).

Expiry: a row past its ``expires_at`` is never returned; :meth:`FileStore.sweep` deletes
the bytes and rows of expired files (the serving process runs it in the background:
:meth:`FileStore.sweeping`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import string
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ..usage import Database, StoreError
from .blobs import Blobs, BlobWriter
from .schema import FILES

__all__ = ["FileStore", "ListPage", "StoredFile", "Upload", "new_file_id"]

log = logging.getLogger("interlingua.batches")

#: seconds an unfinished upload's row lives before the sweep takes it for abandoned
UPLOAD_WINDOW = 24 * 3600
#: rows one sweep deletes at most (the next sweep takes the rest)
SWEEP_ROWS = 500
_ALPHABET = string.ascii_letters + string.digits
_COLUMNS = "id, purpose, filename, bytes, created_at, expires_at, seq"


def new_file_id() -> str:
    """``file-`` and 24 random letters and digits (the API's ids look alike)."""
    return "file-" + "".join(secrets.choice(_ALPHABET) for _ in range(24))


@dataclass(frozen=True, slots=True)
class StoredFile:
    """One file as the API shows it (:meth:`as_object`)."""

    id: str
    purpose: str
    filename: str
    bytes: int
    created_at: int
    expires_at: int | None

    def as_object(self) -> dict[str, Any]:
        """The API's ``file`` object."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "status_details": None,
        }


@dataclass(frozen=True, slots=True)
class ListPage:
    """One page of a list, and whether more follow it."""

    files: list[StoredFile]
    has_more: bool


class Upload:
    """One file on its way in (:meth:`FileStore.begin`)."""

    def __init__(self, store: FileStore, file_id: str, owner: str, created_at: int) -> None:
        self.store = store
        self.id = file_id
        self.owner = owner
        self.created_at = created_at
        #: bytes written so far
        self.size = 0
        self._writer: BlobWriter = store.blobs.writer(file_id)

    async def write(self, data: bytes) -> None:
        """Append ``data`` to the file."""
        self.size += len(data)
        await self._writer.write(data)

    async def finish(self, purpose: str, filename: str, expire_after: float | None) -> StoredFile:
        """The file is whole: make it visible; it expires ``expire_after`` seconds after
        its creation (None: never)."""
        await self._writer.close()
        expires_at = None if expire_after is None else self.created_at + int(expire_after)
        await self.store.db.execute(
            f"UPDATE {FILES} SET status = 'processed', purpose = $2, filename = $3, "
            "bytes = $4, expires_at = $5 WHERE id = $1",
            self.id, purpose, filename, self.size, expires_at,
        )  # fmt: skip
        return StoredFile(self.id, purpose, filename, self.size, self.created_at, expires_at)

    async def abort(self) -> None:
        """Delete what was written, and the row."""
        try:
            await self._writer.discard()
        finally:
            await self.store.db.execute(f"DELETE FROM {FILES} WHERE id = $1", self.id)


class FileStore:
    """The files of one database (``db``) and their bytes (``blobs``)."""

    def __init__(self, db: Database, blobs: Blobs) -> None:
        self.db = db
        self.blobs = blobs

    async def begin(self, owner: str) -> Upload:
        """A new upload of ``owner``'s (its row made, invisible until finished)."""
        now = int(time.time())
        file_id = new_file_id()
        await self.db.execute(
            f"INSERT INTO {FILES} (id, owner, purpose, filename, bytes, created_at, "
            "expires_at, status) VALUES ($1, $2, '', '', 0, $3, $4, 'uploading')",
            file_id, owner, now, now + UPLOAD_WINDOW,
        )  # fmt: skip
        return Upload(self, file_id, owner, now)

    async def get(self, file_id: str, owner: str) -> StoredFile | None:
        """``owner``'s file ``file_id``; None when it is not there for them."""
        rows = await self.db.fetch(
            f"SELECT {_COLUMNS} FROM {FILES} WHERE id = $1 AND owner = $2 "
            "AND status = 'processed' AND (expires_at IS NULL OR expires_at > $3)",
            file_id, owner, int(time.time()),
        )  # fmt: skip
        return _file(rows[0]) if rows else None

    async def page(
        self,
        owner: str,
        *,
        purpose: str | None = None,
        limit: int = 10_000,
        after: str | None = None,
        order: str = "desc",
    ) -> ListPage | None:
        """A page of ``owner``'s files, newest first (``order="desc"``) or oldest first,
        after the file ``after`` (None: from the start); None when ``after`` is not one
        of ``owner``'s files."""
        args: list[Any] = [owner, int(time.time())]
        where = ["owner = $1", "status = 'processed'", "(expires_at IS NULL OR expires_at > $2)"]
        if purpose is not None:
            args.append(purpose)
            where.append(f"purpose = ${len(args)}")
        if after is not None:
            rows = await self.db.fetch(
                f"SELECT seq FROM {FILES} WHERE id = $1 AND owner = $2", after, owner
            )
            if not rows:
                return None
            args.append(rows[0][0])
            where.append(f"seq {'<' if order == 'desc' else '>'} ${len(args)}")
        args.append(limit + 1)
        rows = await self.db.fetch(
            f"SELECT {_COLUMNS} FROM {FILES} WHERE {' AND '.join(where)} "
            f"ORDER BY seq {'DESC' if order == 'desc' else 'ASC'} LIMIT ${len(args)}",
            *args,
        )
        return ListPage([_file(row) for row in rows[:limit]], len(rows) > limit)

    async def content(self, file_id: str) -> AsyncIterator[bytes]:
        """The bytes of a file (after :meth:`get` found it for its caller)."""
        async for chunk in self.blobs.read(file_id):
            yield chunk

    async def delete(self, file_id: str, owner: str) -> bool:
        """Delete ``owner``'s file ``file_id``; False when it is not there for them."""
        deleted = await self.db.execute(
            f"DELETE FROM {FILES} WHERE id = $1 AND owner = $2 AND status = 'processed' "
            "AND (expires_at IS NULL OR expires_at > $3)",
            file_id, owner, int(time.time()),
        )  # fmt: skip
        if deleted:
            await self.blobs.delete([file_id])
        return bool(deleted)

    async def discard(self, file_ids: list[str]) -> None:
        """Delete these files whatever their state and owner (a batch's output files
        that a process died making: the batch makes them again)."""
        await self.blobs.delete(file_ids)
        await self.db.execute_many([(f"DELETE FROM {FILES} WHERE id = $1", (i,)) for i in file_ids])

    async def sweep(self, now: float | None = None) -> int:
        """Delete the bytes and rows of files expired at ``now`` (and of uploads
        abandoned for a day); how many."""
        cutoff = int(time.time() if now is None else now)
        rows = await self.db.fetch(
            f"SELECT id FROM {FILES} WHERE expires_at <= $1 LIMIT $2", cutoff, SWEEP_ROWS
        )
        ids = [row[0] for row in rows]
        if ids:
            # Bytes first: a sweep killed in between leaves rows that the next one finds
            # again, never bytes that nothing names.
            await self.blobs.delete(ids)
            await self.db.execute_many([(f"DELETE FROM {FILES} WHERE id = $1", (i,)) for i in ids])
        return len(ids)

    @contextlib.asynccontextmanager
    async def sweeping(self, every: float) -> AsyncIterator[None]:
        """Sweep every ``every`` seconds while the block runs (a failure is logged and
        tried again at the next turn)."""
        task = asyncio.create_task(self._sweep_forever(every), name="interlingua-file-sweep")
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _sweep_forever(self, every: float) -> None:
        while True:
            try:
                while await self.sweep() == SWEEP_ROWS:
                    pass
            except StoreError as exc:
                log.warning("expired files not swept (tried again in %gs): %s", every, exc)
            await asyncio.sleep(every)


def _file(row: tuple[Any, ...]) -> StoredFile:
    file_id, purpose, filename, size, created_at, expires_at = row[:6]
    return StoredFile(
        file_id,
        purpose,
        filename,
        int(size),
        int(created_at),
        None if expires_at is None else int(expires_at),
    )
