"""What this process may use: CPU cores (affinity and cgroup quota) and memory for KV caches.

Light (no llama-cpp): the defaults of a ``local`` upstream are computed here so that they
can be tested, and printed, without loading a model.

* :func:`available_cpus` -- the cores the process may actually run on: the CPU affinity
  mask (``taskset``, a container's cpuset) and the cgroup CPU quota (``docker --cpus``,
  Kubernetes limits), whichever is smaller. ``os.cpu_count()`` reports the machine's
  cores, which inside a container limited to 2 CPUs of a 64-core host is 64.
* :func:`default_threads` -- llama.cpp threads when the config does not say
  (docs/decisions.md has the measurement).
* :func:`kv_budget` and :func:`fit_parallel` -- how many sequences fit in memory at the
  configured context: ``parallel`` defaults to 4 when 4 KV caches of ``n_ctx`` tokens fit
  in a quarter of the memory available, else as many as fit (at least 1).
"""

from __future__ import annotations

import math
import os

__all__ = [
    "DEFAULT_PARALLEL",
    "available_cpus",
    "available_memory",
    "default_threads",
    "fit_parallel",
    "kv_budget",
]

#: Sequences decoded side by side when the config does not say and they fit.
DEFAULT_PARALLEL = 4
#: The share of the available memory that the KV caches of the default ``parallel`` may take.
KV_MEMORY_SHARE = 0.25

_CGROUP = "/sys/fs/cgroup"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def cgroup_cpu_limit(root: str = _CGROUP) -> float | None:
    """CPUs allowed by the cgroup quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), or None."""
    v2 = _read(os.path.join(root, "cpu.max"))
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        if quota != "max" and quota.isdigit() and period.isdigit() and int(period) > 0:
            return int(quota) / int(period)
        return None
    quota_v1 = _read(os.path.join(root, "cpu", "cpu.cfs_quota_us"))
    period_v1 = _read(os.path.join(root, "cpu", "cpu.cfs_period_us"))
    if quota_v1 and period_v1 and quota_v1.lstrip("-").isdigit() and period_v1.isdigit():
        quota_us, period_us = int(quota_v1), int(period_v1)
        if quota_us > 0 and period_us > 0:
            return quota_us / period_us
    return None


def available_cpus(root: str = _CGROUP) -> int:
    """Cores this process may use: the affinity mask, capped by the cgroup quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cpus = os.cpu_count() or 1
    limit = cgroup_cpu_limit(root)
    if limit is not None:
        # A quota of 1.5 CPUs keeps two threads busy part of the time: round up, the
        # scheduler throttles the rest.
        cpus = min(cpus, max(1, math.ceil(limit)))
    return max(1, cpus)


def default_threads(cpus: int | None = None) -> int:
    """llama.cpp threads by default: half the available cores (at least one).

    llama.cpp's threads meet at a barrier on every step, so one thread that another
    process preempts stalls them all; a spare core for the event loop, the HTTP server
    and neighbours keeps generation steady. Measured: docs/decisions.md, "Local engine
    threads".
    """
    cpus = available_cpus() if cpus is None else cpus
    return max(1, cpus // 2)


def available_memory(root: str = _CGROUP) -> int | None:
    """Bytes this process may still allocate: the cgroup limit less its use, or the
    kernel's MemAvailable, whichever is smaller (None when neither is known)."""
    found: list[int] = []
    limit = _read(os.path.join(root, "memory.max"))
    used = _read(os.path.join(root, "memory.current"))
    if limit and limit.isdigit() and used and used.isdigit():
        found.append(max(0, int(limit) - int(used)))
    meminfo = _read("/proc/meminfo")
    if meminfo:
        for line in meminfo.splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
                break
    return min(found) if found else None


def kv_budget() -> int:
    """Bytes the KV caches of the default ``parallel`` may take (1 GiB when unknown)."""
    memory = available_memory()
    return int(memory * KV_MEMORY_SHARE) if memory is not None else 1 << 30


def fit_parallel(requested: int | None, n_ctx: int, kv_bytes_per_token: int, budget: int) -> int:
    """Sequences to run side by side: ``requested`` when the config says, else
    :data:`DEFAULT_PARALLEL` when that many caches of ``n_ctx`` tokens fit in ``budget``
    bytes, else as many as fit, at least 1.

    >>> fit_parallel(None, 8192, 23040, 6 << 30)   # SmolLM2-135M: 4 x 189 MB
    4
    >>> fit_parallel(None, 8192, 23040, 400 << 20)
    2
    """
    if requested is not None:
        return requested
    per_sequence = max(1, n_ctx * kv_bytes_per_token)
    return max(1, min(DEFAULT_PARALLEL, budget // per_sequence))
