"""The Files and Batch store's tables, and the migrations that make them.

The store keeps migrations of its own (the usage log's mechanism, usage/schema.py, under
the version table ``interlingua_batches_schema``), so that it may share a database with
the usage log and the stored responses while each store's versions stay its own. A
change is a new :class:`~interlingua.usage.schema.Migration` appended here, never an
edit of one released.

``interlingua_files``: one row per uploaded file. ``seq`` orders the list (insertion
order: ``created_at`` has one-second resolution, and two uploads of one second must still
page in a stable order); ``owner`` is the name of the key that uploaded it (``''`` for
none); ``status`` is ``uploading`` while its bytes arrive (then ``expires_at`` is when an
upload abandoned by a dead process is swept) and ``processed`` after; ``expires_at`` is
Unix seconds (NULL: kept until deleted).

``interlingua_file_chunks``: the bytes of a file when PostgreSQL is the store (every
replica reads them), one row per chunk of about :data:`CHUNK_BYTES`, numbered from 0,
so that a file goes in and out one chunk at a time. With SQLite the bytes are files in a
directory instead (batches/blobs.py) and this table stays empty.
"""

from __future__ import annotations

from ..usage.schema import Migration

__all__ = ["CHUNKS", "CHUNK_BYTES", "FILES", "MIGRATIONS", "VERSION_TABLE"]

FILES = "interlingua_files"
CHUNKS = "interlingua_file_chunks"
VERSION_TABLE = "interlingua_batches_schema"

#: bytes per chunk row: big enough that a 200 MB file is 200 rows (one round trip each),
#: small enough that reading or writing one holds little memory
CHUNK_BYTES = 1024 * 1024

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "uploaded files, and their bytes when the database keeps them",
        (
            f"""CREATE TABLE {FILES} (
                seq {{id}},
                id TEXT NOT NULL UNIQUE,
                owner TEXT NOT NULL,
                purpose TEXT NOT NULL,
                filename TEXT NOT NULL,
                bytes BIGINT NOT NULL DEFAULT 0,
                created_at BIGINT NOT NULL,
                expires_at BIGINT,
                status TEXT NOT NULL
            )""",
            # A list is one owner's files in seq order; the sweep reads by expiry.
            f"CREATE INDEX {FILES}_owner ON {FILES} (owner, seq)",
            f"CREATE INDEX {FILES}_expires_at ON {FILES} (expires_at)",
            f"""CREATE TABLE {CHUNKS} (
                file_id TEXT NOT NULL,
                seq INTEGER NOT NULL,
                data {{blob}} NOT NULL,
                PRIMARY KEY (file_id, seq)
            )""",
        ),
    ),
)
