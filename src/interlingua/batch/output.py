"""The output file: append-only, crash-safe, resumable.

Writing: one ``os.write`` per finished line on an ``O_APPEND`` descriptor, so a line goes
to the kernel whole the moment it is finished (no user-space buffer a ``kill -9`` could
lose), and ``fsync`` at least once a second and at close, so a power loss costs at most
the last second. Every line ends in ``\\n``; a line without one can only be the tail of a
write the machine did not finish.

Opening: the existing file is scanned once. Its custom ids become the *done* set (the
runner skips them), the ids whose latest line is an error become the *failed* set (for
``--retry-failed``), and a torn tail -- bytes after the last newline, or a last line that
is not valid JSON -- is truncated away before anything new is appended.

Several lines for one id (``--retry-failed`` appends the new attempt) are read as "the
latest line wins"; :func:`compact` rewrites such a file to one line per id, each at the
position of the id's first line, so an ``--ordered`` file stays in input order.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from .idset import IdSet
from .records import OutputState, read_output_line

__all__ = ["FSYNC_INTERVAL", "OutputScan", "OutputWriter", "compact"]

FSYNC_INTERVAL = 1.0
"""Seconds between two fsyncs while lines are being written."""


@dataclass(slots=True)
class OutputScan:
    """What an existing output file holds (empty for a new file).

    ``done``: ids with a result line; ``failed``: ids whose latest result line is an error;
    ``bad_lines``: input line numbers already reported as unreadable; ``duplicates``: how
    many duplicate-id lines each id already has; ``lines``: complete lines kept;
    ``repaired``: bytes of torn tail cut away; ``unreadable``: complete lines (not the
    last) that are not records, left in place and ignored.
    """

    done: IdSet = field(default_factory=IdSet)
    failed: IdSet = field(default_factory=IdSet)
    bad_lines: set[int] = field(default_factory=set)
    duplicates: dict[str, int] = field(default_factory=dict)
    lines: int = 0
    repaired: int = 0
    unreadable: int = 0


def _lines(f: BinaryIO) -> Iterator[tuple[int, bytes]]:
    """(offset, line) for every line of ``f``; the last may lack its newline."""
    offset = 0
    for line in f:
        yield offset, line
        offset += len(line)


def scan(path: Path) -> tuple[OutputScan, int]:
    """Scan ``path``: (what it holds, the byte length to keep)."""
    result = OutputScan()
    keep = last_start = 0
    last_bad = False
    with open(path, "rb") as f:
        for offset, line in _lines(f):
            if not line.endswith(b"\n"):
                break  # a torn tail: the write that would have ended it never happened
            state = read_output_line(line)
            keep, last_start, last_bad = offset + len(line), offset, state is None
            if state is None:
                result.unreadable += 1
            else:
                _note(result, state)
        size = f.seek(0, os.SEEK_END)
    if last_bad:
        # The last complete line does not parse: a torn write that happened to end on a
        # newline. Cut it too; its request is simply redone.
        keep = last_start
        result.unreadable -= 1
    result.repaired = size - keep
    return result, keep


def _note(result: OutputScan, state: OutputState) -> None:
    """Fold one readable line into ``result`` (the latest line of an id wins)."""
    result.lines += 1
    cid = state.custom_id
    if cid is None:
        if state.line_no is not None:
            result.bad_lines.add(state.line_no)
    elif not state.counts:
        result.duplicates[cid] = result.duplicates.get(cid, 0) + 1
    else:
        result.done.add(cid)
        if state.failed:
            result.failed.add(cid)
        else:
            result.failed.discard(cid)


class OutputWriter:
    """Appends finished lines to the output file (see the module docstring).

    >>> w = OutputWriter(Path("out.jsonl"))  # doctest: +SKIP
    >>> scan = w.open(); w.write(line); w.close()  # doctest: +SKIP
    """

    def __init__(
        self,
        path: Path,
        *,
        fsync_interval: float = FSYNC_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self.fsync_interval = fsync_interval
        self._clock = clock
        self._fd: int | None = None
        self._dirty = False
        self._last_sync = 0.0
        self.lines_written = 0
        self.fsyncs = 0

    def open(self) -> OutputScan:
        """Scan and repair an existing file, then open it for appending."""
        result = OutputScan()
        if self.path.exists():
            result, keep = scan(self.path)
            if result.repaired:
                os.truncate(self.path, keep)
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if result.repaired:
            os.fsync(self._fd)  # the repair must be durable before new lines follow it
        self._last_sync = self._clock()
        return result

    def write(self, line: bytes) -> None:
        """Append one whole line (ending in ``\\n``) with one ``write``."""
        fd = self._fd
        if fd is None:
            raise RuntimeError("the output file is not open")
        view = memoryview(line)
        while view:  # a regular file takes it in one go; loop for the pathological case
            written = os.write(fd, view)
            view = view[written:]
        self._dirty = True
        self.lines_written += 1
        self.maybe_sync()

    def maybe_sync(self) -> None:
        """fsync when something was written and the interval has passed."""
        if self._dirty and self._clock() - self._last_sync >= self.fsync_interval:
            self.sync()

    def sync(self) -> None:
        """fsync now if anything was written since the last one."""
        if self._fd is not None and self._dirty:
            os.fsync(self._fd)
            self.fsyncs += 1
            self._dirty = False
        self._last_sync = self._clock()

    def close(self) -> None:
        """fsync and close (idempotent)."""
        if self._fd is None:
            return
        try:
            self.sync()
        finally:
            os.close(self._fd)
            self._fd = None


def compact(path: Path) -> int:
    """Rewrite ``path`` to one line per custom id (its latest), atomically.

    Each id keeps the position of its first line (input order survives); duplicate-id and
    unreadable-input lines are kept as they are. Returns the number of lines dropped.
    """
    counts: dict[str, int] = {}
    latest: dict[str, bytes] = {}
    with open(path, "rb") as f:
        for _, line in _lines(f):
            state = read_output_line(line)
            if state is None or state.custom_id is None or not state.counts:
                continue
            n = counts.get(state.custom_id, 0) + 1
            counts[state.custom_id] = n
            if n > 1:
                latest[state.custom_id] = line
    if not latest:
        return 0
    dropped = 0
    tmp = path.with_name(path.name + ".compact.tmp")
    with open(path, "rb") as src, open(tmp, "wb") as dst:
        for _, line in _lines(src):
            state = read_output_line(line)
            cid = state.custom_id if state is not None and state.counts else None
            if cid is None or cid not in latest:
                dst.write(line)
            elif counts[cid] > 0:
                dst.write(latest[cid])
                counts[cid] = 0  # later lines of this id were folded into this position
            else:
                dropped += 1
        dst.flush()
        os.fsync(dst.fileno())
    os.replace(tmp, path)
    with contextlib.suppress(OSError):  # make the rename durable (not on every platform)
        dirfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dirfd)
        finally:
            os.close(dirfd)
    return dropped
