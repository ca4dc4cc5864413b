"""The directory the ``serve --workers N`` processes share, for one view of them all.

The workers share one listening socket, so a request for ``/metrics`` or ``/ui/data``
reaches one of them at random. Each therefore writes what it counts into one directory,
and whichever worker answers reads them all: prometheus-client's *multiprocess mode*
(its ``PROMETHEUS_MULTIPROC_DIR``; server/views/metrics.py) and the status page's per-worker
state files (server/views/status_page.py, in ``status/`` below it). docs/decisions.md, "Metrics:
one view across workers", says why this and not a ``worker`` label.

``serve`` makes a fresh directory per run with :func:`shared_dir` before it starts the
workers (they inherit the variable, and prometheus-client reads it when first imported);
:func:`multiprocess_dir` tells a process whether it is in that mode.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import tempfile
from collections.abc import Iterator

from prometheus_client import values
from prometheus_client.multiprocess import mark_process_dead

__all__ = [
    "MULTIPROC_ENV",
    "forget_dead_workers",
    "multiprocess_dir",
    "process_alive",
    "shared_dir",
]

#: prometheus-client's variable: the directory its multiprocess mode writes into
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

_LIVE_FILE = re.compile(r"gauge_live\w*?_(\d+)\.db$")


def multiprocess_dir() -> str | None:
    """The multiprocess directory this process writes its metrics into, or None.

    None unless ``PROMETHEUS_MULTIPROC_DIR`` names a directory *and* prometheus-client
    took it into account (it reads the variable once, when first imported).
    """
    path = os.environ.get(MULTIPROC_ENV)
    if path and os.path.isdir(path) and getattr(values.ValueClass, "_multiprocess", False):
        return path
    return None


@contextlib.contextmanager
def shared_dir() -> Iterator[str]:
    """A fresh directory in ``PROMETHEUS_MULTIPROC_DIR`` for the block, removed after it.

    ``serve --workers N`` wraps its supervisor in it: the workers it spawns inherit the
    variable, and the directory, with every count of this run, is removed when the block
    ends -- a new run starts from zero, as a single process does.
    """
    path = tempfile.mkdtemp(prefix="interlingua-metrics-")
    previous = os.environ.get(MULTIPROC_ENV)
    os.environ[MULTIPROC_ENV] = path
    try:
        yield path
    finally:
        if previous is None:
            os.environ.pop(MULTIPROC_ENV, None)
        else:
            os.environ[MULTIPROC_ENV] = previous
        shutil.rmtree(path, ignore_errors=True)


def forget_dead_workers(directory: str) -> None:
    """Drop the live gauges (in flight, queue depth) of worker processes that are gone.

    A worker that crashed or was replaced leaves its last values in its files; its
    counters rightly stay in the totals, but what it had in flight is no longer there.
    """
    me = os.getpid()
    dead: set[int] = set()
    for path in glob.glob(os.path.join(directory, "gauge_live*.db")):
        match = _LIVE_FILE.search(path)
        if match is None:
            continue
        pid = int(match.group(1))
        if pid != me and pid not in dead and not process_alive(pid):
            dead.add(pid)
    for pid in dead:
        mark_process_dead(pid, directory)  # type: ignore[no-untyped-call]


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a worker that crashed or was replaced does not)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True
