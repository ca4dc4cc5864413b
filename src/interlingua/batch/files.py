"""Which file a batch reads and writes: JSONL or Parquet, by the path's suffix.

A path ending in ``.parquet`` (or ``.pq``) is Parquet, anything else JSONL. Parquet input
is a file or a directory of files; Parquet output is always a directory of part files
(:mod:`.parquet` says why). pyarrow is imported only when a Parquet path is used, so a
JSONL-only install never needs it.

**Columns.** A simple row carries its id, prompt and images under ``custom_id``,
``prompt`` and ``images``; :class:`Columns` names other keys for them (the
``--id-column``, ``--prompt-column`` and ``--image-column`` flags), for JSONL lines and
Parquet rows alike. A Parquet row is also freed of what a table imposes and a JSON line
would not have:

* columns a row leaves empty (null) are absent, as a key a JSON line leaves out;
* only the columns a batch row may have are read (:data:`ROW_KEYS`): a table's other
  columns (labels, metadata) are not loaded at all, where a JSON line with an unknown key
  is an error;
* an integer id is taken as its decimal string; ``body``, ``messages``, ``tools``,
  ``response_format`` and ``extra_body`` written as JSON text are decoded;
* an image is a path, URL or ``data:`` URI (a string), raw bytes, or a Hugging Face
  ``{"bytes", "path"}`` struct; one image alone counts as a list of one.

Rows are numbered from 1 in file order (Parquet: across the dataset's files), and that
number stands for the line number in messages and in ``error.line``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

from .output import OutputScan, OutputWriter, compact
from .records import SIMPLE_FIELDS

__all__ = [
    "DEFAULT_COLUMNS",
    "JSON_TEXT_KEYS",
    "PARQUET_SUFFIXES",
    "ROW_KEYS",
    "BatchOutput",
    "Columns",
    "compact_output",
    "count_rows",
    "input_rows",
    "is_parquet",
    "open_output",
    "plain_row",
]

PARQUET_SUFFIXES = (".parquet", ".pq")
"""Suffixes of a Parquet path (input file or directory, output directory)."""

ROW_KEYS = frozenset(
    SIMPLE_FIELDS | {"custom_id", "prompt", "messages", "images", "method", "url", "body"}
)
"""The keys a batch row may have: the simple form's and the OpenAI Batch form's."""

JSON_TEXT_KEYS = frozenset({"body", "messages", "tools", "response_format", "extra_body"})
"""Keys whose value is an object or a list: a string there is JSON text to decode."""


def is_parquet(path: Path | str) -> bool:
    """Whether ``path`` names Parquet (by its suffix)."""
    return str(path).lower().endswith(PARQUET_SUFFIXES)


@dataclass(frozen=True, slots=True)
class Columns:
    """Where a row keeps its id, prompt and images (see the module docstring).

    >>> Columns(prompt="question").rename({"custom_id": "a", "question": "hi"})
    {'custom_id': 'a', 'prompt': 'hi'}
    """

    id: str = "custom_id"
    prompt: str = "prompt"
    images: str = "images"

    @property
    def default(self) -> bool:
        """True when every column has its usual name (nothing to rename)."""
        return self == DEFAULT_COLUMNS

    def source(self, key: str) -> str:
        """The column a row's canonical ``key`` is read from."""
        return {"custom_id": self.id, "prompt": self.prompt, "images": self.images}.get(key, key)

    def wanted(self) -> set[str]:
        """The columns a table row is read from (:data:`ROW_KEYS`, as configured)."""
        return {self.source(key) for key in ROW_KEYS}

    def rename(self, row: dict[str, Any]) -> dict[str, Any]:
        """``row`` with the configured columns under their canonical keys."""
        if self.default:
            return row
        out = {k: v for k, v in row.items() if k not in (self.id, self.prompt, self.images)}
        for key, column in (
            ("custom_id", self.id),
            ("prompt", self.prompt),
            ("images", self.images),
        ):
            if column in row:
                out[key] = row[column]
        return out


DEFAULT_COLUMNS = Columns()
"""``custom_id``, ``prompt``, ``images``: the keys of a JSON line."""


# --- rows of a table (Parquet, Ray) -------------------------------------------------------


def plain_row(row: dict[str, Any], columns: Columns) -> dict[str, Any]:
    """A table row (column -> value, nulls included) as the dict a JSON line would be."""
    out: dict[str, Any] = {}
    for key, value in columns.rename(row).items():
        if value is None or key not in ROW_KEYS:
            continue
        if key == "custom_id" and isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        elif key == "images":
            value = _images(value)
        elif key in JSON_TEXT_KEYS and isinstance(value, str | bytes):
            # (JSON that does not decode is left as it is: the line's check names the field)
            with contextlib.suppress(orjson.JSONDecodeError):
                value = orjson.loads(value)
        out[key] = value
    return out


def _images(value: Any) -> Any:
    """A table's image cell as the list the client takes (see the module docstring)."""
    if isinstance(value, str | bytes | dict):
        value = [value]
    if not isinstance(value, list):
        return value  # (the line's check says "images must be a list")
    return [_image(v) for v in value]


def _image(value: Any) -> Any:
    if isinstance(value, dict) and ("bytes" in value or "path" in value):
        return value.get("bytes") or value.get("path")  # a Hugging Face Image struct
    return value


# --- reading ------------------------------------------------------------------------------


def input_rows(path: Path, columns: Columns) -> Iterator[tuple[int, bytes | dict[str, Any]]]:
    """(row number, row) for every row of ``path``: raw JSON bytes for a JSONL line when
    nothing needs renaming (the runner decodes it once), else the row as a dict."""
    if is_parquet(path):
        from .parquet import read_rows

        for number, row in enumerate(read_rows(path, columns.wanted()), 1):
            yield number, plain_row(row, columns)
        return
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]  # a UTF-8 byte order mark, as some Windows tools write
            if not raw.strip():
                continue
            if columns.default:
                yield number, raw
                continue
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                yield number, raw  # unreadable either way: the runner reports it
                continue
            yield number, columns.rename(obj) if isinstance(obj, dict) else raw


def count_rows(path: Path, count_lines: Callable[[Path], int | None]) -> int | None:
    """Rows of ``path`` for the progress bar (``count_lines`` counts a JSONL file)."""
    if is_parquet(path):
        from .parquet import count_input

        return count_input(path)
    return count_lines(path)


# --- writing ------------------------------------------------------------------------------


class BatchOutput(Protocol):
    """Where the runner writes finished records: :class:`~.output.OutputWriter` (JSONL)
    or :class:`~.parquet.ParquetOutput`."""

    def open(self) -> OutputScan:
        """Scan (and repair) what is there; what it holds decides what is skipped."""
        ...

    def write(self, line: bytes) -> None:
        """Keep one finished record (a JSONL line with its newline)."""
        ...

    def maybe_sync(self) -> None:
        """Make what was written durable when it is time to."""
        ...

    def close(self) -> None:
        """Make everything durable and close (idempotent)."""
        ...


def open_output(path: Path) -> BatchOutput:
    """The writer of ``path``: Parquet parts or the append-only JSONL file."""
    if is_parquet(path):
        from .parquet import ParquetOutput

        return ParquetOutput(path)
    return OutputWriter(path)


def compact_output(path: Path) -> int:
    """One record per id in ``path`` (after ``--retry-failed``); records dropped."""
    if is_parquet(path):
        from .parquet import compact_parts

        return compact_parts(path)
    return compact(path)
