"""What the gateway keeps: the stored Responses API objects and the usage log, in SQLite
by default or PostgreSQL by URL.

:mod:`.db` turns a URL into a small async SQL backend; :mod:`.responses` is the
response store on top; :mod:`.log` the usage log's batched writer (its tables and
migrations in :mod:`.schema`), :mod:`.report` its summary, :mod:`.cost` each row's price. This package imports nothing
of ours but the config's plain values: the server builds a store with
:func:`open_store` and the usage log with :func:`open_usage_log`.

>>> store = open_store("sqlite://:memory:", expire_after=60)
>>> store.db.engine
'sqlite'
"""

from __future__ import annotations

from .db import Database, StoreError, connect, default_sqlite_url
from .log import UsageLog, default_usage_url, open_usage_log
from .record import Record, RecordSink
from .report import summarize
from .responses import Chain, Link, ResponseStore, StoredResponse

__all__ = [
    "Chain",
    "Database",
    "Link",
    "Record",
    "RecordSink",
    "ResponseStore",
    "StoreError",
    "StoredResponse",
    "UsageLog",
    "connect",
    "default_sqlite_url",
    "default_usage_url",
    "open_store",
    "open_usage_log",
    "summarize",
]


def open_store(url: str | None, expire_after: float) -> ResponseStore:
    """A response store on ``url`` (None: SQLite in the user's data directory). Nothing
    is connected yet: :meth:`ResponseStore.open` does that (and every call, lazily)."""
    return ResponseStore(connect(url or default_sqlite_url()), expire_after)
