"""A :class:`~.record.Record` as the row the usage log writes, every value made one its
column accepts; and which database errors are about the values written.

A row that no database would take (a NUL in a model name for PostgreSQL, a lone
surrogate, a count past 64 bits, a NaN duration) would fail its flush, and every flush
after it; so each value is mended here, on the way in, at the cost of a few type checks.
Text is cut at :data:`MAX_TEXT` characters: the model name is whatever the client sent,
and the queue's memory bound counts rows.
"""

from __future__ import annotations

import math
import sqlite3
from typing import Any

from .record import Record

__all__ = ["MAX_TEXT", "Row", "is_data_error", "row_values"]

#: characters kept of a text field
MAX_TEXT = 256
_MAX_BIGINT = 2**63 - 1
_MAX_INTEGER = 2**31 - 1

Row = tuple[Any, ...]


def row_values(row: Record) -> Row:
    """The row of :data:`~.schema.INSERT` for ``row``, with every value of the type its
    column takes: a value no database would accept could otherwise fail every flush."""
    values = (
        row.at,
        row.request_id,
        row.key,
        row.dialect,
        row.model,
        row.upstream,
        row.upstream_model,
        row.status,
        row.error,
        row.input_tokens,
        row.output_tokens,
        row.cached_tokens,
        row.reasoning_tokens,
        row.latency,
        row.ttft,
        row.stream,
    )
    # Nearly every row is fine as it is: checked at once (one string of the texts, one
    # sum of the counts, of the times) rather than value by value (~4x the cost).
    try:
        texts = "".join(
            (
                row.request_id,
                row.key or "",
                row.dialect,
                row.model,
                row.upstream or "",
                row.upstream_model or "",
                row.error or "",
            )
        )
        counts = (row.input_tokens, row.output_tokens, row.cached_tokens, row.reasoning_tokens)
        plain = (
            len(texts) <= MAX_TEXT
            and texts.isascii()
            and "\x00" not in texts
            and type(row.status) is int
            and 0 <= row.status <= _MAX_INTEGER
            and type(counts[0]) is int
            and type(counts[1]) is int
            and type(counts[2]) is int
            and type(counts[3]) is int
            and min(counts) >= 0
            and max(counts) <= _MAX_BIGINT
            and type(row.at) is float
            and type(row.latency) is float
            and (row.ttft is None or type(row.ttft) is float)
            and math.isfinite(row.at + row.latency + (row.ttft or 0.0))
            and type(row.stream) is bool
        )
    except TypeError:  # (a text that is not a str: mended below)
        plain = False
    return values if plain else _mended(row)


def _mended(row: Record) -> Row:
    return (
        _real(row.at),
        _text(row.request_id),
        _optional_text(row.key),
        _text(row.dialect),
        _text(row.model),
        _optional_text(row.upstream),
        _optional_text(row.upstream_model),
        _count(row.status, _MAX_INTEGER),
        _optional_text(row.error),
        _count(row.input_tokens),
        _count(row.output_tokens),
        _count(row.cached_tokens),
        _count(row.reasoning_tokens),
        _real(row.latency),
        None if row.ttft is None else _real(row.ttft),
        bool(row.stream),
    )


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


def _real(value: Any) -> float:
    number = float(value)
    # SQLite stores NaN as NULL (refused by NOT NULL); neither is a duration or a time
    return number if math.isfinite(number) else 0.0


def is_data_error(exc: BaseException) -> bool:
    """Whether ``exc`` (or the driver error it wraps) is about the values written, not
    about reaching the database: writing the same rows again would fail again."""
    data_errors: tuple[type[BaseException], ...] = (
        sqlite3.IntegrityError,
        sqlite3.DataError,
        sqlite3.InterfaceError,  # (a value sqlite3 cannot bind)
        ValueError,  # (asyncpg's client-side DataError is one)
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
