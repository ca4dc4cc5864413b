"""Parquet for the batch runner: rows in, results out as a directory of parts.

**Input**: a ``.parquet`` file or a directory of them (any Parquet dataset), read in
batches of rows with only the columns a batch row may have (:mod:`.files` says which and
how a row becomes a request).

**Output**: a Parquet file cannot be appended to, and a crash must cost at most the
requests in flight, as with JSONL. So an output ``out.parquet`` is a *directory*::

    out.parquet/
      part-00000.parquet      sealed parts, in the order their results finished
      part-00001.parquet
      _journal.jsonl          finished results not yet in a part (the JSONL output file)

Every finished result is appended to ``_journal.jsonl`` at once, exactly as the JSONL
output is written (one ``write`` per record, ``fsync`` once a second:
:class:`~.output.OutputWriter`); every :data:`PART_ROWS` records, and at the end of the
run, the journal is *sealed* into the next part:

1. the journal is closed and renamed ``_journal-NNNNN.jsonl`` (its part's number), and a
   new, empty journal takes its place;
2. its records are written to ``.part-NNNNN.parquet.tmp``, fsynced, and renamed
   ``part-NNNNN.parquet`` (atomic: a part is whole or absent);
3. the renamed journal is deleted.

Opening the directory finishes whatever a crash interrupted: a renamed journal whose part
exists is deleted, one whose part is missing is converted; a torn last journal line is cut
(as in a JSONL output); a journal with records is sealed. Only then are the parts scanned
for the ids already done. So a ``kill -9`` at any moment loses only the requests in flight.
Readers of the directory -- ``pyarrow.dataset``, pandas, Spark, ``ray.data.read_parquet``
-- skip the ``_``- and ``.``-prefixed files, so they see exactly the sealed parts.

**Columns** (the fields of a JSONL output line, and the vector of an embeddings one)::

    id          string
    custom_id   string (null: an input row that could not be read)
    response    struct<status_code: int32, request_id: string, body: string> (null: no answer)
    error       struct<code: string, message: string, line: int64> (null: success)
    embedding   list<float32> (null: not a one-input embeddings answer)

``response.body`` is the JSON text of the answer's body (its shape depends on the dialect,
so it is kept as text, byte for byte as the JSONL output holds it): ``json.loads`` it, or
:func:`read_records` gives back the JSONL output's dicts. The vector of an
``/v1/embeddings`` line with one input (base64 or floats in the answer) is in
``embedding``, ready for a vector store, and only there: the body holds ``"embedding":
null`` in its place (:func:`read_records` puts it back, as floats). A line with several
inputs keeps its vectors in its body.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from ..client import decode_vector
from .output import OutputScan, OutputWriter, _note
from .records import DUPLICATE, OutputState, output_record

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "JOURNAL",
    "PART_ROWS",
    "ParquetOutput",
    "column_names",
    "compact_parts",
    "count_input",
    "read_records",
    "read_rows",
    "record_row",
    "scan_parts",
]

PART_ROWS = 10_000
"""Records per sealed part (the last part of a run holds the rest)."""
JOURNAL = "_journal.jsonl"
"""The journal of records not yet sealed into a part."""
_PART = "part-{:05d}.parquet"
_ROTATED = "_journal-{:05d}.jsonl"
_READ_BATCH = 1024


def pyarrow() -> Any:
    """The ``pyarrow`` module, or an ImportError that says which extra brings it."""
    try:
        import pyarrow as pa
    except ImportError as exc:  # pragma: no cover - the dev extra installs it
        raise ImportError(
            "Parquet input or output needs pyarrow: pip install 'interlingua[parquet]'"
        ) from exc
    return pa


def schema() -> pa.Schema:
    """The output parts' schema (see the module docstring)."""
    pa = pyarrow()
    return pa.schema(
        [
            ("id", pa.string()),
            ("custom_id", pa.string()),
            (
                "response",
                pa.struct(
                    [
                        ("status_code", pa.int32()),
                        ("request_id", pa.string()),
                        ("body", pa.string()),
                    ]
                ),
            ),
            (
                "error",
                pa.struct([("code", pa.string()), ("message", pa.string()), ("line", pa.int64())]),
            ),
            ("embedding", pa.list_(pa.float32())),
        ]
    )


# --- input --------------------------------------------------------------------------------


def _dataset(path: Path) -> Any:
    import pyarrow.dataset as ds

    pyarrow()
    return ds.dataset(os.fspath(path), format="parquet")


def column_names(path: Path) -> list[str]:
    """The columns of the Parquet file or directory ``path`` (from its schema)."""
    return list(_dataset(path).schema.names)


def read_rows(path: Path, wanted: Collection[str]) -> Iterator[dict[str, Any]]:
    """Every row of the Parquet file or directory ``path`` as a dict, in order, with the
    ``wanted`` columns it has (nulls kept: :func:`.files.plain_row` drops them)."""
    dataset = _dataset(path)
    names = [name for name in dataset.schema.names if name in wanted]
    for batch in dataset.to_batches(columns=names, batch_size=_READ_BATCH, use_threads=False):
        yield from batch.to_pylist()


def count_input(path: Path) -> int:
    """Rows in the Parquet file or directory ``path`` (from the files' metadata)."""
    return int(_dataset(path).count_rows())


# --- output records -------------------------------------------------------------------------


def record_row(line: bytes) -> dict[str, Any] | None:
    """One JSONL output record as a row of :func:`schema` (None: not a record)."""
    obj = output_record(line)
    if obj is None:
        return None
    response = obj.get("response")
    vector = None
    if isinstance(response, dict):
        body = response.get("body")
        vector, body = _take_vector(body)
        response = {
            "status_code": response.get("status_code"),
            "request_id": response.get("request_id"),
            "body": orjson.dumps(body).decode(),
        }
    error = obj.get("error")
    if isinstance(error, dict):
        error = {
            "code": error.get("code"),
            "message": error.get("message"),
            "line": error.get("line"),
        }
    return {
        "id": obj.get("id"),
        "custom_id": obj["custom_id"],
        "response": response,
        "error": error,
        "embedding": vector,
    }


def _take_vector(body: Any) -> tuple[list[float] | None, Any]:
    """(the vector, the body without it) of a one-input embeddings answer; (None, body)
    for any other body. The vector goes to the ``embedding`` column, stored once."""
    if not (isinstance(body, dict) and body.get("object") == "list"):
        return None, body
    data = body.get("data")
    if not (isinstance(data, list) and len(data) == 1 and isinstance(data[0], dict)):
        return None, body
    try:
        vector = decode_vector(data[0].get("embedding"))
    except ValueError:  # not a vector: the body is kept whole
        return None, body
    return vector, {**body, "data": [{**data[0], "embedding": None}]}


def _as_record(row: dict[str, Any]) -> dict[str, Any]:
    """A row of :func:`schema` back as the JSONL output's record (an ``embedding`` put
    back into its answer, as floats)."""
    response = row["response"]
    if response is not None:
        body = response["body"]
        body = None if body is None else orjson.loads(body)
        vector = row.get("embedding")
        if vector is not None and isinstance(body, dict):
            body["data"][0]["embedding"] = vector
        response = {**response, "body": body}
    error = row["error"]
    if error is not None:
        error = {k: v for k, v in error.items() if v is not None or k != "line"}
    return {"id": row["id"], "custom_id": row["custom_id"], "response": response, "error": error}


def _parts(directory: Path) -> list[Path]:
    """The sealed parts of ``directory``, in order."""
    return sorted(directory.glob("part-*.parquet"))


def read_records(path: Path) -> Iterator[dict[str, Any]]:
    """The records of a Parquet output directory as the JSONL output has them (``body``
    decoded, ``error.line`` only when set), part after part.

    >>> [r["custom_id"] for r in read_records(Path("out.parquet"))]  # doctest: +SKIP
    ['a', 'b']
    """
    pq = _pq()
    for part in _parts(Path(path)):
        for row in pq.read_table(part).to_pylist():
            yield _as_record(row)


def _pq() -> Any:
    pyarrow()
    import pyarrow.parquet as pq

    return pq


# --- the output directory -------------------------------------------------------------------


def _fsync_dir(directory: Path) -> None:
    """Make renames and deletions in ``directory`` durable (not on every platform)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_part(directory: Path, number: int, rows: list[dict[str, Any]]) -> None:
    """Write ``rows`` as part ``number``: a temporary file, fsynced, renamed."""
    pa, pq = pyarrow(), _pq()
    table = pa.Table.from_pylist(rows, schema=schema())
    final = directory / _PART.format(number)
    tmp = directory / f".{final.name}.tmp"
    with open(tmp, "wb") as f:
        pq.write_table(table, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    _fsync_dir(directory)


def _seal_journal(directory: Path, journal: Path, number: int) -> None:
    """Turn a renamed journal into part ``number`` (unless it already is), then delete it."""
    if not (directory / _PART.format(number)).exists():
        rows = []
        with open(journal, "rb") as f:
            for line in f:
                if line.endswith(b"\n") and (row := record_row(line)) is not None:
                    rows.append(row)
        if rows:
            _write_part(directory, number, rows)
    journal.unlink()
    _fsync_dir(directory)


def _number(path: Path) -> int:
    """The part number in ``part-00003.parquet`` or ``_journal-00003.jsonl``."""
    return int(path.name.split("-")[1].split(".")[0])


def scan_parts(directory: Path) -> OutputScan:
    """What the sealed parts hold: done and failed ids, reported rows (see
    :class:`~.output.OutputScan`); the latest record of an id wins, as in JSONL."""
    result = OutputScan()
    pq = _pq()
    for part in _parts(directory):
        table = pq.read_table(part, columns=["custom_id", "error"])
        for cid, error in zip(
            table.column("custom_id").to_pylist(), table.column("error").to_pylist(), strict=True
        ):
            _note(result, _state(cid, error))
    return result


def _state(cid: str | None, error: dict[str, Any] | None) -> OutputState:
    """What one part row says (as :func:`~.records.read_output_line` for a JSONL line)."""
    if cid is None:
        line = error.get("line") if error else None
        return OutputState(None, True, line_no=line)
    code = error.get("code") if error else None
    return OutputState(cid, error is not None, counts=code != DUPLICATE)


class ParquetOutput:
    """The Parquet output directory (see the module docstring); the interface of
    :class:`~.output.OutputWriter`, which it uses for its journal.

    >>> out = ParquetOutput(Path("out.parquet"))  # doctest: +SKIP
    >>> scan = out.open(); out.write(line); out.close()  # doctest: +SKIP
    """

    def __init__(self, path: Path, *, part_rows: int | None = None) -> None:
        part_rows = PART_ROWS if part_rows is None else part_rows
        if part_rows < 1:
            raise ValueError("part_rows must be at least 1")
        self.path = Path(path)
        self.part_rows = part_rows
        self.parts_written = 0
        self._journal: OutputWriter | None = None
        self._rows = 0  # records in the journal
        self._next = 0  # the next part's number

    @property
    def _journal_path(self) -> Path:
        return self.path / JOURNAL

    def open(self) -> OutputScan:
        """Finish what a crash interrupted, scan the parts, open a fresh journal."""
        directory = self.path
        if directory.exists() and not directory.is_dir():
            raise NotADirectoryError(
                f"{directory} is a file: Parquet output is a directory of parts (choose "
                "another name, or move the file away)"
            )
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob(".part-*.parquet.tmp"):
            stale.unlink()  # a part whose rename never happened: its journal still exists
        numbers = [_number(p) for p in _parts(directory)]
        rotated = sorted(directory.glob("_journal-*.jsonl"))
        numbers += [_number(p) for p in rotated]
        self._next = max(numbers, default=-1) + 1
        for journal in rotated:
            _seal_journal(directory, journal, _number(journal))
        repaired = self._recover_journal()
        scan = scan_parts(directory)
        scan.repaired = repaired
        self._journal = OutputWriter(self._journal_path)
        self._journal.open()
        return scan

    def _recover_journal(self) -> int:
        """Repair the journal a crash left (torn tail) and seal its records; bytes cut."""
        path = self._journal_path
        if not path.exists():
            return 0
        writer = OutputWriter(path)
        found = writer.open()  # scans and cuts a torn tail, as for a JSONL output
        writer.close()
        if found.lines or found.unreadable:
            self._rotate_and_seal()
        else:
            path.unlink()
        return found.repaired

    def _rotate_and_seal(self) -> None:
        """Steps 1-3 of the module docstring for the current journal (closed)."""
        number, self._next = self._next, self._next + 1
        rotated = self.path / _ROTATED.format(number)
        os.replace(self._journal_path, rotated)
        _fsync_dir(self.path)
        if self._journal is not None:
            self._journal = OutputWriter(self._journal_path)
            self._journal.open()
        _seal_journal(self.path, rotated, number)
        self.parts_written += 1

    def write(self, line: bytes) -> None:
        """Journal one finished record; seal a part every ``part_rows`` records."""
        journal = self._journal
        if journal is None:
            raise RuntimeError("the output is not open")
        journal.write(line)
        self._rows += 1
        if self._rows >= self.part_rows:
            self.seal()

    def seal(self) -> None:
        """Seal the journal's records into the next part now (nothing to do if empty)."""
        journal = self._journal
        if journal is None or not self._rows:
            return
        journal.close()
        self._rows = 0
        self._rotate_and_seal()

    def maybe_sync(self) -> None:
        """fsync the journal when due (see :class:`~.output.OutputWriter`)."""
        if self._journal is not None:
            self._journal.maybe_sync()

    def sync(self) -> None:
        """fsync the journal now."""
        if self._journal is not None:
            self._journal.sync()

    def close(self) -> None:
        """Seal what the journal holds and remove it (idempotent)."""
        journal = self._journal
        if journal is None:
            return
        self.seal()
        journal = self._journal
        self._journal = None
        assert journal is not None
        journal.close()
        with contextlib.suppress(FileNotFoundError):
            self._journal_path.unlink()
            _fsync_dir(self.path)


def compact_parts(directory: Path) -> int:
    """Rewrite the parts of ``directory`` to one record per custom id (its latest, at the
    position of its first), as :func:`~.output.compact` does for JSONL; records dropped.

    The compacted records go into one new part, fsynced, before the old parts are
    deleted: a crash in between leaves both, which reads the same (the latest wins) and
    is compacted by the next ``--retry-failed`` run.
    """
    pq = _pq()
    parts = _parts(directory)
    rows: list[dict[str, Any]] = []
    for part in parts:
        rows.extend(pq.read_table(part).to_pylist())
    counts: dict[str, int] = {}
    latest: dict[str, dict[str, Any]] = {}
    for row in rows:
        cid, error = row["custom_id"], row["error"]
        if cid is None or not _state(cid, error).counts:
            continue
        counts[cid] = counts.get(cid, 0) + 1
        latest[cid] = row
    if all(n == 1 for n in counts.values()):
        return 0
    kept: list[dict[str, Any]] = []
    placed: set[str] = set()
    for row in rows:
        cid = row["custom_id"]
        if cid is None or cid not in counts or not _state(cid, row["error"]).counts:
            kept.append(row)
        elif cid not in placed:
            placed.add(cid)
            kept.append(latest[cid])
    _write_part(directory, max(_number(p) for p in parts) + 1, kept)
    for part in parts:
        part.unlink()
    _fsync_dir(directory)
    return len(rows) - len(kept)
