""":class:`~.record.Record` s as the rows the usage log writes, every value made one its
column accepts; and which database errors are about the values written.

A row that no database would take (a count past 64 bits, a NaN duration, a number where
text goes) would fail its flush, and every flush after it; so the rows are checked on
the way in and a value out of its column's type or range is mended. The check is one C
pass over a batch (:func:`rows_of`: ``msgspec.convert`` against each column's type,
with its bounds); only a batch it refuses is mended, value by value (:func:`mended`).
Text is cut at :data:`MAX_TEXT` characters: the model name is whatever the client sent,
and the queue's memory bound counts rows.

Two faults of text only a database finds cheaply: a NUL (PostgreSQL text cannot hold
one; SQLite can) and a lone surrogate (no UTF-8: neither driver binds it). Looking for
them in every row cost more than the rest of the check, and neither comes from the
gateway's own values, so the writer mends a flush the database refused for its values
(:func:`is_data_error`) and writes it again (usage/log.py).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Annotated, Any

import msgspec
from msgspec.structs import astuple

from .record import Record
from .schema import COLUMNS

__all__ = ["MAX_TEXT", "Row", "is_data_error", "mended", "rows_of"]

#: characters kept of a text field
MAX_TEXT = 256
_MAX_BIGINT = 2**63 - 1
_MAX_INTEGER = 2**31 - 1
_MAX_REAL = 1.7976931348623157e308  # (the largest finite double: the bounds refuse inf, NaN)

Row = tuple[Any, ...]


def _text(value: object) -> str:
    text = value if type(value) is str else str(value)
    if len(text) > MAX_TEXT:
        text = text[:MAX_TEXT]
    if text.isascii():
        # PostgreSQL text cannot hold NUL (SQLite can): the one ASCII character to mend
        return text.replace("\x00", "\ufffd") if "\x00" in text else text
    # A lone surrogate (from a lenient JSON parser) has no UTF-8: neither driver binds it.
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")


def _optional_text(value: object) -> str | None:
    return None if value is None else _text(value)


def _count(value: Any, limit: int = _MAX_BIGINT) -> int:
    number = int(value)
    return number if 0 <= number <= limit else min(max(number, 0), limit)


def _status(value: Any) -> int:
    return _count(value, _MAX_INTEGER)


def _real(value: Any) -> float:
    number = float(value)
    # SQLite stores NaN as NULL (refused by NOT NULL); neither is a duration or a time
    return number if math.isfinite(number) else 0.0


def _optional_real(value: Any) -> float | None:
    return None if value is None else _real(value)


def _optional_decimal(value: Any) -> Decimal | None:
    if value is None:
        return None
    number = value if type(value) is Decimal else Decimal(str(value))
    return number if number.is_finite() else None


_Text = Annotated[str, msgspec.Meta(max_length=MAX_TEXT)]
_Count = Annotated[int, msgspec.Meta(ge=0, le=_MAX_BIGINT)]
_Real = Annotated[float, msgspec.Meta(ge=-_MAX_REAL, le=_MAX_REAL)]
_Status = Annotated[int, msgspec.Meta(ge=0, le=_MAX_INTEGER)]

#: each column's type (what the check accepts) and its mending (a value of that type
#: from anything close enough; raises for what is not), in :data:`~.schema.COLUMNS` order
_COLUMN_TYPES: dict[str, tuple[Any, Callable[[Any], Any]]] = {
    "at": (_Real, _real),
    "request_id": (_Text, _text),
    "key_name": (_Text | None, _optional_text),
    "dialect": (_Text, _text),
    "model": (_Text, _text),
    "upstream": (_Text | None, _optional_text),
    "upstream_model": (_Text | None, _optional_text),
    "status": (_Status, _status),
    "error_kind": (_Text | None, _optional_text),
    "input_tokens": (_Count, _count),
    "output_tokens": (_Count, _count),
    "cached_tokens": (_Count, _count),
    "cache_write_tokens": (_Count, _count),
    "cache_write_1h_tokens": (_Count, _count),
    "reasoning_tokens": (_Count, _count),
    "cost_usd": (Decimal | None, _optional_decimal),
    "latency": (_Real, _real),
    "ttft": (_Real | None, _optional_real),
    "stream": (bool, bool),
    "batch_id": (_Text | None, _optional_text),
    "endpoint": (_Text | None, _optional_text),
}
assert tuple(_COLUMN_TYPES) == COLUMNS, "usage/rows.py: a column without its type"
# astuple(record) is the row: a Record field out of the columns' order would shift values
assert (
    tuple({"key": "key_name", "error": "error_kind"}.get(f, f) for f in Record.__struct_fields__)
    == COLUMNS
), "usage/record.py: Record's fields must follow the usage table's columns"
#: a row as the check sees it (a Struct, not a ``tuple[...]`` alias: msgspec keeps a
#: Struct's type analysis, where it would redo an alias's at every call, ~40 µs)
_Row = msgspec.defstruct(
    "_Row", [(name, kind) for name, (kind, _) in _COLUMN_TYPES.items()], array_like=True, gc=False
)
_ROWS = list[_Row]  # type: ignore[valid-type]
_MENDERS = tuple(mend for _, mend in _COLUMN_TYPES.values())


def rows_of(records: Sequence[Record]) -> list[Row]:
    """The rows of :data:`~.schema.INSERT` for ``records`` (a Record's fields are in the
    columns' order), checked in one pass; each value of a batch the check refuses is
    mended (:func:`mended`). Raises what a value that cannot be mended raises (a bug
    upstream of the log); nothing is then taken."""
    rows = list(map(astuple, records))
    try:
        checked = msgspec.convert(rows, _ROWS)
    except msgspec.ValidationError:
        return [mended(row) for row in rows]
    return list(map(astuple, checked))


def mended(row: Row) -> Row:
    """``row`` (of :data:`~.schema.COLUMNS`) with every value of its column's type and
    range: text cut at :data:`MAX_TEXT` without NUL or lone surrogates, counts within
    0..2**63-1, times finite. Raises ValueError, TypeError or OverflowError for a value
    that is no such thing at all (a count of ``"abc"``, a time of ``10**400``)."""
    return tuple(mend(value) for mend, value in zip(_MENDERS, row, strict=True))


def is_data_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or the driver error it wraps) is about the values written, not
    about reaching the database: writing the same rows again would fail again."""
    data_errors: tuple[type[BaseException], ...] = (
        sqlite3.IntegrityError,
        sqlite3.DataError,
        sqlite3.InterfaceError,  # (a value sqlite3 cannot bind)
        ValueError,  # (asyncpg's client-side DataError is one; a lone surrogate's
        # UnicodeEncodeError too)
        TypeError,
        OverflowError,
        *_asyncpg_data_errors(),
    )
    return isinstance(exc, data_errors) or isinstance(exc.__cause__, data_errors)


def _asyncpg_data_errors() -> tuple[type[BaseException], ...]:
    try:
        from asyncpg.exceptions import DataError, IntegrityConstraintViolationError
    except ImportError:
        return ()
    return (DataError, IntegrityConstraintViolationError)
