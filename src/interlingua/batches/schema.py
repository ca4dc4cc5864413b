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

``interlingua_batches``: one row per Batch API batch, its lifecycle's timestamps (Unix
seconds, NULL until reached), its counts once it ended, ``errors`` and ``metadata`` as
JSON text, and its lease: ``holder`` (the process running it, NULL for none) and
``lease_until`` (Unix seconds; past it, any process may take the batch over).

``interlingua_batch_results``: the journal of a running batch, one row per finished
input line (``line``: 1-based), its Batch output line whole (``record``) and its tokens.
The primary key makes a line's result unique: a resumed batch skips the lines it holds
and can never write one twice. Once the output and error files are made from it, the
batch's rows are deleted.
"""

from __future__ import annotations

from ..usage.schema import Migration

__all__ = ["BATCHES", "CHUNKS", "CHUNK_BYTES", "FILES", "MIGRATIONS", "RESULTS", "VERSION_TABLE"]

FILES = "interlingua_files"
CHUNKS = "interlingua_file_chunks"
BATCHES = "interlingua_batches"
RESULTS = "interlingua_batch_results"
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
    Migration(
        2,
        "Batch API batches, their leases and their results' journal",
        (
            f"""CREATE TABLE {BATCHES} (
                seq {{id}},
                id TEXT NOT NULL UNIQUE,
                owner TEXT NOT NULL,
                endpoint TEXT NOT NULL,
                input_file_id TEXT NOT NULL,
                completion_window TEXT NOT NULL,
                status TEXT NOT NULL,
                model TEXT,
                created_at BIGINT NOT NULL,
                expires_at BIGINT NOT NULL,
                in_progress_at BIGINT,
                finalizing_at BIGINT,
                completed_at BIGINT,
                failed_at BIGINT,
                expired_at BIGINT,
                cancelling_at BIGINT,
                cancelled_at BIGINT,
                output_file_id TEXT,
                error_file_id TEXT,
                total BIGINT NOT NULL DEFAULT 0,
                completed BIGINT NOT NULL DEFAULT 0,
                failed BIGINT NOT NULL DEFAULT 0,
                input_tokens BIGINT NOT NULL DEFAULT 0,
                output_tokens BIGINT NOT NULL DEFAULT 0,
                cached_tokens BIGINT NOT NULL DEFAULT 0,
                reasoning_tokens BIGINT NOT NULL DEFAULT 0,
                errors TEXT,
                metadata TEXT,
                holder TEXT,
                lease_until DOUBLE PRECISION
            )""",
            # A list is one owner's batches in seq order; the executors look for work
            # by status.
            f"CREATE INDEX {BATCHES}_owner ON {BATCHES} (owner, seq)",
            f"CREATE INDEX {BATCHES}_status ON {BATCHES} (status)",
            f"""CREATE TABLE {RESULTS} (
                batch_id TEXT NOT NULL,
                line INTEGER NOT NULL,
                failed INTEGER NOT NULL,
                input_tokens BIGINT NOT NULL DEFAULT 0,
                output_tokens BIGINT NOT NULL DEFAULT 0,
                cached_tokens BIGINT NOT NULL DEFAULT 0,
                reasoning_tokens BIGINT NOT NULL DEFAULT 0,
                record {{blob}} NOT NULL,
                PRIMARY KEY (batch_id, line)
            )""",
        ),
    ),
)
