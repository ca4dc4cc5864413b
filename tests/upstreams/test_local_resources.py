"""The local engine's defaults from what the process may use: cores, memory."""

from __future__ import annotations

import os
from pathlib import Path

from interlingua.upstreams.local.resources import (
    available_cpus,
    cgroup_cpu_limit,
    default_threads,
    fit_parallel,
)


def test_cgroup_v2_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("150000 100000\n")
    assert cgroup_cpu_limit(str(tmp_path)) == 1.5
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert cgroup_cpu_limit(str(tmp_path)) is None


def test_cgroup_v1_quota(tmp_path: Path) -> None:
    (tmp_path / "cpu").mkdir()
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("200000")
    (tmp_path / "cpu" / "cpu.cfs_period_us").write_text("100000")
    assert cgroup_cpu_limit(str(tmp_path)) == 2.0
    (tmp_path / "cpu" / "cpu.cfs_quota_us").write_text("-1")
    assert cgroup_cpu_limit(str(tmp_path)) is None


def test_available_cpus_is_the_affinity_capped_by_the_quota(tmp_path: Path) -> None:
    affinity = len(os.sched_getaffinity(0))
    assert available_cpus(str(tmp_path)) == affinity  # no cgroup files: the affinity
    (tmp_path / "cpu.max").write_text("50000 100000")  # half a CPU: still one thread
    assert available_cpus(str(tmp_path)) == 1


def test_default_threads_is_half_the_cores() -> None:
    assert [default_threads(n) for n in (1, 2, 3, 4, 16)] == [1, 1, 1, 2, 8]


def test_parallel_is_four_when_four_caches_fit() -> None:
    per_token = 23040  # SmolLM2-135M: 30 layers x 3 KV heads x 64 x 2 (K, V) x 2 bytes
    assert fit_parallel(None, 8192, per_token, 6 << 30) == 4
    assert fit_parallel(None, 8192, per_token, 400 << 20) == 2  # two of 189 MB fit
    assert fit_parallel(None, 8192, per_token, 1 << 20) == 1  # at least one
    assert fit_parallel(3, 8192, per_token, 1 << 20) == 3  # the config's word wins
