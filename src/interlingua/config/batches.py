"""The sections of the Files and Batch APIs' store: ``files`` and ``batches``.

The shape is a contract (docs/config.md, "Files and batches")::

    files:
      max_bytes: 200MB         # largest upload (bytes, or with KB / MB / GB: powers of 1024)
      expire_after: 30d        # how long an uploaded file is kept (s, m, h, d; or seconds)
    batches:
      url: postgresql://...    # where files and batches are kept; default SQLite in the
                               # user data dir, the bytes in a directory beside it
      share: 0.5               # the part of a limited upstream's max_concurrency, rpm
                               # and tpm that batch requests may use (0 < share <= 1)
      concurrency: 32          # lines of one batch in flight at once
      max_concurrency: 128     # lines of all batches in flight in one process
      lease: 30s               # a running batch's lease; a dead holder's batches are
                               # taken over once it runs out
      completion_window: 24h   # how long the API's "24h" window lasts here (tests
                               # shorten it to see a batch expire)

Both are optional; the defaults serve a gateway on one machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ._values import (
    ConfigError,
    database_url,
    describe,
    expect_positive_int,
    mapping,
    positive,
    reject_unknown,
)

__all__ = [
    "DEFAULT_SHARE",
    "BatchesConfig",
    "FilesConfig",
    "batches_doc",
    "duration_text",
    "expect_duration",
    "expect_size",
    "files_doc",
    "parse_batches",
    "parse_files",
    "size_text",
]

_DAY = 24 * 3600
_MIB = 1024 * 1024
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": _DAY}
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]?B?)\s*$", re.IGNORECASE)
_BYTES = {"": 1, "B": 1, "K": 1024, "KB": 1024, "M": _MIB, "MB": _MIB, "G": 1024 * _MIB}
_BYTES["GB"] = _BYTES["G"]

DEFAULT_SHARE = 0.5
"""The part of an upstream's limits batch requests may use unless ``batches.share`` says."""


@dataclass(frozen=True)
class FilesConfig:
    """Uploads through ``POST /v1/files``: the largest accepted, and how long one is
    kept before the store deletes its bytes and its row."""

    #: bytes; a larger upload is refused with a 413 as soon as it passes this
    max_bytes: int = 200 * _MIB
    #: seconds a file is kept (the API's ``expires_after`` on upload overrides it)
    expire_after: float = 30 * _DAY


@dataclass(frozen=True)
class BatchesConfig:
    """Where uploaded files (and batches) are kept: None, SQLite in the user data dir
    with the bytes in a directory beside it; a PostgreSQL URL keeps the bytes there too,
    so that every replica serves every file. ``share``: the part of each limited
    upstream's max_concurrency, rpm and tpm batch requests may use (live traffic first)."""

    url: str | None = None
    share: float = DEFAULT_SHARE
    #: lines of one batch in flight at once
    concurrency: int = 32
    #: lines of all batches in flight at once in one process
    max_concurrency: int = 128
    #: seconds a holder's lease on a running batch lasts unless renewed (every third of
    #: it): a process that died has its batches taken over this long after
    lease: float = 30.0
    #: seconds the API's ``"24h"`` completion window lasts
    completion_window: float = float(_DAY)


def expect_duration(value: Any, where: str) -> float:
    """Seconds from a number or a text such as ``30d``, ``12h``, ``90m``, ``45s``; above
    0, else ConfigError naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ConfigError(f"{where}: expected a duration such as 30d or 12h, got {describe(value)}")
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match is None:
            raise ConfigError(
                f"{where}: expected a duration such as 30d, 12h, 90m or 45s, got {value!r}"
            )
        seconds = float(match.group(1)) * _SECONDS[match.group(2)]
    else:
        seconds = float(value)
    if seconds <= 0:
        raise ConfigError(f"{where}: expected a duration above 0, got {value!r}")
    return seconds


def expect_size(value: Any, where: str) -> int:
    """Bytes from an integer or a text such as ``200MB`` (K, M, G: powers of 1024, as
    ``server.max_body_mb``); above 0, else ConfigError naming ``where``."""
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif isinstance(value, str) and (match := _SIZE.match(value)) is not None:
        size = int(match.group(1)) * _BYTES[match.group(2).upper()]
    else:
        got = repr(value) if isinstance(value, str) else describe(value)
        raise ConfigError(f"{where}: expected a size such as 200MB or 1GB, got {got}")
    if size <= 0:
        raise ConfigError(f"{where}: expected a size above 0, got {value!r}")
    return size


def duration_text(seconds: float) -> str | float:
    """``seconds`` as the config writes it: ``30d``, ``12h``, ``90m``, ``45s`` when whole,
    else the number."""
    for unit in ("d", "h", "m", "s"):
        count = seconds / _SECONDS[unit]
        if count >= 1 and count == int(count):
            return f"{int(count)}{unit}"
    return seconds


def size_text(size: int) -> str | int:
    """``size`` as the config writes it: ``200MB``, ``1GB``, ``64KB`` when whole, else
    the number of bytes."""
    for unit in ("GB", "MB", "KB"):
        if size % _BYTES[unit] == 0:
            return f"{size // _BYTES[unit]}{unit}"
    return size


def parse_files(data: Any) -> FilesConfig:
    """The ``files`` section (None: the defaults)."""
    if data is None:
        return FilesConfig()
    raw = mapping(data, "files")
    reject_unknown(raw, ("max_bytes", "expire_after"), "files")
    defaults = FilesConfig()
    return FilesConfig(
        max_bytes=expect_size(raw.get("max_bytes", defaults.max_bytes), "files.max_bytes"),
        expire_after=expect_duration(
            raw.get("expire_after", defaults.expire_after), "files.expire_after"
        ),
    )


def parse_batches(data: Any) -> BatchesConfig:
    """The ``batches`` section (None: the defaults)."""
    if data is None:
        return BatchesConfig()
    raw = mapping(data, "batches")
    reject_unknown(
        raw,
        ("url", "share", "concurrency", "max_concurrency", "lease", "completion_window"),
        "batches",
    )
    d = BatchesConfig()
    return BatchesConfig(
        url=database_url(raw.get("url"), "batches.url"),
        share=_share(raw.get("share", DEFAULT_SHARE)),
        concurrency=expect_positive_int(
            raw.get("concurrency", d.concurrency), "batches.concurrency"
        ),
        max_concurrency=expect_positive_int(
            raw.get("max_concurrency", d.max_concurrency), "batches.max_concurrency"
        ),
        lease=expect_duration(raw.get("lease", d.lease), "batches.lease"),
        completion_window=expect_duration(
            raw.get("completion_window", d.completion_window), "batches.completion_window"
        ),
    )


def _share(value: Any) -> float:
    """``batches.share``: a number in (0, 1]."""
    share = positive(value, "batches.share")
    if share > 1:
        raise ConfigError(f"batches.share: expected a number in (0, 1], got {value!r}")
    return share


def files_doc(files: FilesConfig) -> dict[str, Any]:
    """The ``files`` section as ``--print-config`` writes it."""
    return {
        "max_bytes": size_text(files.max_bytes),
        "expire_after": duration_text(files.expire_after),
    }


def batches_doc(batches: BatchesConfig) -> dict[str, Any]:
    """The ``batches`` section as ``--print-config`` writes it (``url`` only when set:
    the default path is resolved where the gateway runs)."""
    doc: dict[str, Any] = {"url": batches.url} if batches.url else {}
    doc.update(
        share=batches.share,
        concurrency=batches.concurrency,
        max_concurrency=batches.max_concurrency,
        lease=duration_text(batches.lease),
        completion_window=duration_text(batches.completion_window),
    )
    return doc
