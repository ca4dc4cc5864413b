"""What the gateway keeps: the stored Responses API objects (and, with issue 12, the
usage log), in SQLite by default or PostgreSQL by URL.

:mod:`.db` turns a URL into a small async SQL backend; :mod:`.responses` is the
response store on top. This package imports nothing of ours but the config's plain
values' shape (none yet): the server builds a store with :func:`open_store`.

>>> store = open_store("sqlite://:memory:", expire_after=60)
>>> store.db.engine
'sqlite'
"""

from __future__ import annotations

from .db import Database, StoreError, connect, default_sqlite_url
from .responses import Chain, Link, ResponseStore, StoredResponse

__all__ = [
    "Chain",
    "Database",
    "Link",
    "ResponseStore",
    "StoreError",
    "StoredResponse",
    "connect",
    "default_sqlite_url",
    "open_store",
]


def open_store(url: str | None, expire_after: float) -> ResponseStore:
    """A response store on ``url`` (None: SQLite in the user's data directory). Nothing
    is connected yet: :meth:`ResponseStore.open` does that (and every call, lazily)."""
    return ResponseStore(connect(url or default_sqlite_url()), expire_after)
