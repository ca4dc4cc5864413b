"""Where a file's bytes go: a directory (beside a SQLite store) or chunk rows (PostgreSQL).

Both take a file in pieces as it arrives and give it back in pieces, so that neither an
upload nor a download ever holds a whole file: :meth:`Blobs.writer` buffers about
:data:`~.schema.CHUNK_BYTES` before writing them out, :meth:`Blobs.read` yields one chunk
at a time.

* :class:`DirectoryBlobs` -- one file per id in a directory, written and read in a worker
  thread (the event loop never waits on the disk). Several processes of one machine
  (``--workers N``) share it; replicas on other machines do not (use PostgreSQL).
* :class:`DatabaseBlobs` -- rows of ``interlingua_file_chunks`` (batches/schema.py): every
  replica on the database reads every file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO, Protocol

from ..usage import Database
from .schema import CHUNK_BYTES, CHUNKS

__all__ = ["BlobWriter", "Blobs", "DatabaseBlobs", "DirectoryBlobs"]

#: bytes a directory read hands over at a time
_READ_BYTES = 256 * 1024


class BlobWriter(Protocol):
    """One file's bytes on their way in."""

    async def write(self, data: bytes) -> None:
        """Append ``data`` (kept in memory up to one chunk, then written out)."""

    async def close(self) -> None:
        """Write out what is buffered: the file is whole."""

    async def discard(self) -> None:
        """Drop what was written (a refused or broken upload)."""


class Blobs(Protocol):
    """Files' bytes by id."""

    def writer(self, file_id: str) -> BlobWriter:
        """A writer of a new file ``file_id``."""

    def read(self, file_id: str) -> AsyncIterator[bytes]:
        """The file's bytes, a piece at a time (nothing when it is gone)."""

    async def delete(self, file_ids: list[str]) -> None:
        """Delete these files' bytes (those already gone are skipped)."""


class _Buffered:
    """A writer's buffer: ``flush(chunk)`` is called with each chunk as it fills (the
    pieces written joined once: about :data:`~.schema.CHUNK_BYTES`, a piece more at most;
    cutting exact sizes would copy every byte once more)."""

    def __init__(self) -> None:
        self._pieces: list[bytes] = []
        self._size = 0

    async def write(self, data: bytes) -> None:
        self._pieces.append(data)
        self._size += len(data)
        if self._size >= CHUNK_BYTES:
            await self._out()

    async def _out(self) -> None:
        chunk = b"".join(self._pieces)
        self._pieces, self._size = [], 0
        await self.flush(chunk)

    async def close(self) -> None:
        if self._pieces:
            await self._out()
        await self.finished()

    async def flush(self, chunk: bytes) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    async def finished(self) -> None:
        """Called once the last chunk is out."""


class DirectoryBlobs:
    """Each file is ``<directory>/<id>`` (made on first use)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, file_id: str) -> Path:
        """Where ``file_id``'s bytes are (ids are ``file-`` and letters and digits: no
        path can be made of one)."""
        return self.directory / file_id

    def writer(self, file_id: str) -> BlobWriter:
        return _FileWriter(self.path(file_id))

    async def read(self, file_id: str) -> AsyncIterator[bytes]:
        try:
            handle = await asyncio.to_thread(open, self.path(file_id), "rb")
        except FileNotFoundError:
            return
        try:
            while chunk := await asyncio.to_thread(handle.read, _READ_BYTES):
                yield chunk
        finally:
            handle.close()

    async def delete(self, file_ids: list[str]) -> None:
        def remove() -> None:
            for file_id in file_ids:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path(file_id))

        await asyncio.to_thread(remove)


class _FileWriter(_Buffered):
    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self._handle: IO[bytes] | None = None

    def _append(self, chunk: bytes) -> None:
        if self._handle is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(self.path, "wb")  # noqa: SIM115  # (closed in finished/discard)
        self._handle.write(chunk)

    async def flush(self, chunk: bytes) -> None:
        await asyncio.to_thread(self._append, chunk)

    async def finished(self) -> None:
        if self._handle is None:  # (an empty file)
            await asyncio.to_thread(self._append, b"")
        assert self._handle is not None
        await asyncio.to_thread(self._handle.close)

    async def discard(self) -> None:
        def remove() -> None:
            if self._handle is not None:
                self._handle.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)

        self._pieces, self._size = [], 0
        await asyncio.to_thread(remove)


class DatabaseBlobs:
    """Each file is its rows of ``interlingua_file_chunks``, ``seq`` 0, 1, ..."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def writer(self, file_id: str) -> BlobWriter:
        return _ChunkWriter(self.db, file_id)

    async def read(self, file_id: str) -> AsyncIterator[bytes]:
        seq = 0
        while True:
            rows = await self.db.fetch(
                f"SELECT data FROM {CHUNKS} WHERE file_id = $1 AND seq = $2", file_id, seq
            )
            if not rows:
                return
            yield bytes(rows[0][0])
            seq += 1

    async def delete(self, file_ids: list[str]) -> None:
        if file_ids:
            await self.db.execute_many(
                [(f"DELETE FROM {CHUNKS} WHERE file_id = $1", (i,)) for i in file_ids]
            )


class _ChunkWriter(_Buffered):
    def __init__(self, db: Database, file_id: str) -> None:
        super().__init__()
        self.db = db
        self.file_id = file_id
        self._seq = 0

    async def flush(self, chunk: bytes) -> None:
        await self.db.execute(
            f"INSERT INTO {CHUNKS} (file_id, seq, data) VALUES ($1, $2, $3)",
            self.file_id,
            self._seq,
            chunk,
        )
        self._seq += 1

    async def discard(self) -> None:
        self._pieces, self._size = [], 0
        await self.db.execute(f"DELETE FROM {CHUNKS} WHERE file_id = $1", self.file_id)
