"""The store of the Files API (and of the Batch API to come): uploaded files' rows and
bytes, in SQLite with a directory by default or in PostgreSQL by URL.

Not the batch runner (interlingua/batch: JSONL in, JSONL out, on the command line): this
package keeps what the gateway's ``/v1/files`` routes are given, owned by the key that
gave it, until it expires. :mod:`.schema` holds its tables and migrations (a version
table of its own, so that it may share a database with the usage log), :mod:`.blobs`
where the bytes go, :mod:`.files` the files themselves, :mod:`.jobs` the batches run
over them.

>>> store = open_batch_store(None)
>>> store.db.engine
'sqlite'
"""

from __future__ import annotations

from pathlib import Path

from ..config import user_data_dir
from ..usage import Database, connect
from ..usage.db import sqlite_path
from ..usage.schema import migrate
from .blobs import Blobs, DatabaseBlobs, DirectoryBlobs
from .files import FileStore, ListPage, StoredFile, Upload
from .jobs import Job, JobStore
from .schema import MIGRATIONS, VERSION_TABLE

__all__ = [
    "BatchStore",
    "FileStore",
    "Job",
    "JobStore",
    "ListPage",
    "StoredFile",
    "Upload",
    "default_batches_url",
    "files_directory",
    "open_batch_store",
]


def default_batches_url() -> str:
    """``sqlite:///<user data dir>/batches.db``."""
    return "sqlite://" + str(user_data_dir() / "batches.db")


def files_directory(url: str) -> Path:
    """Where a SQLite store's file bytes go: ``files/`` beside its database file (the
    user data dir for an in-memory database)."""
    path = sqlite_path(url)
    base = user_data_dir() if path == ":memory:" else Path(path).absolute().parent
    return base / "files"


class BatchStore:
    """One database and the bytes beside it; :attr:`files` the uploaded files,
    :attr:`jobs` the Batch API's batches."""

    def __init__(self, db: Database, blobs: Blobs) -> None:
        self.db = db
        self.files = FileStore(db, blobs)
        self.jobs = JobStore(db)
        self._migrated = False

    async def open(self) -> None:
        """Connect and bring the tables to this version (idempotent); StoreError when
        the database cannot be reached."""
        if not self._migrated:
            await self.db.open()
            await migrate(self.db, MIGRATIONS, version_table=VERSION_TABLE)
            self._migrated = True

    async def aclose(self) -> None:
        """Close the database."""
        await self.db.aclose()


def open_batch_store(url: str | None) -> BatchStore:
    """The store at ``url`` (None: SQLite in the user data dir), not yet connected."""
    url = url or default_batches_url()
    db = connect(url)
    # (PostgreSQL keeps the bytes too: every replica then serves every file)
    blobs: Blobs = (
        DirectoryBlobs(files_directory(url)) if db.engine == "sqlite" else DatabaseBlobs(db)
    )
    return BatchStore(db, blobs)
