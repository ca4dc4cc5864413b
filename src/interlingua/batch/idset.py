"""A compact set of custom ids: 64-bit digests in an open-addressing table.

The runner must remember every custom_id it has seen (duplicates) and every one already in
the output (resume), so this is its only per-line memory. A ``set[str]`` costs ~100 bytes
an id (the string object plus the set slot): ~100 MB per million lines. Here an id costs
one 8-byte slot at a load factor of at most 1/2 -- 16 MB per million -- which is what lets
RSS stay flat from 10,000 to 1,000,000 lines.

Ids are stored as the first 8 bytes of their BLAKE2b digest. Two different ids sharing a
digest would be taken for one: among a million ids that has a probability of about 3e-8
(n^2 / 2^65), far below the odds of a disk error in the output file.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from hashlib import blake2b

__all__ = ["IdSet", "digest"]

_EMPTY = 0
_DELETED = 1
_MIN_SLOTS = 1024


def digest(custom_id: str) -> int:
    """The 64-bit key of ``custom_id`` (never 0 or 1, which mark empty/deleted slots)."""
    key = int.from_bytes(blake2b(custom_id.encode(), digest_size=8).digest(), "little")
    return key if key > _DELETED else key + 2


class IdSet:
    """A set of strings by digest: ``add`` / ``discard`` / ``in`` / ``len``.

    >>> ids = IdSet(["a", "b"])
    >>> "a" in ids, "c" in ids, ids.add("a"), ids.add("c"), len(ids)
    (True, False, False, True, 3)
    """

    __slots__ = ("_mask", "_size", "_slots", "_used")

    def __init__(self, items: Iterable[str] = ()) -> None:
        self._slots = array("Q", bytes(8 * _MIN_SLOTS))
        self._mask = _MIN_SLOTS - 1
        self._size = 0  # live keys
        self._used = 0  # live keys + deleted markers (what probing walks over)
        for item in items:
            self.add(item)

    def __len__(self) -> int:
        return self._size

    def __contains__(self, custom_id: object) -> bool:
        if not isinstance(custom_id, str):
            return False
        return self._find(digest(custom_id)) >= 0

    def _find(self, key: int) -> int:
        """The slot holding ``key``, or -1."""
        slots, mask = self._slots, self._mask
        i = key & mask
        while True:
            value = slots[i]
            if value == key:
                return i
            if value == _EMPTY:
                return -1
            i = (i + 1) & mask  # linear probing: neighbours share cache lines

    def add(self, custom_id: str) -> bool:
        """Add ``custom_id``; True if it was not there yet."""
        key = digest(custom_id)
        if self._find(key) >= 0:
            return False
        if (self._used + 1) * 2 > len(self._slots):
            self._resize()
        slots, mask = self._slots, self._mask
        i = key & mask
        while slots[i] > _DELETED:
            i = (i + 1) & mask
        if slots[i] == _EMPTY:
            self._used += 1
        slots[i] = key
        self._size += 1
        return True

    def discard(self, custom_id: str) -> None:
        """Remove ``custom_id`` if present (its slot becomes a deleted marker)."""
        i = self._find(digest(custom_id))
        if i >= 0:
            self._slots[i] = _DELETED
            self._size -= 1

    def _resize(self) -> None:
        old = self._slots
        count = _MIN_SLOTS
        while count < self._size * 4:  # after a resize the table is at most 1/4 full
            count *= 2
        self._slots = slots = array("Q", bytes(8 * count))
        self._mask = mask = count - 1
        for key in old:
            if key > _DELETED:
                i = key & mask
                while slots[i] != _EMPTY:
                    i = (i + 1) & mask
                slots[i] = key
        self._used = self._size
