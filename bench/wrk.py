"""Run ``wrk`` with the POST script and read its result.

The numbers come from the ``done()`` hook of ``bench/lua/post.lua``, which prints one
``BENCH_JSON {...}`` line (exact percentiles, in microseconds, straight from wrk's
histogram) instead of the rounded human summary. The human summary is still read for the
``Non-2xx or 3xx responses`` line as a cross-check of the error count.

wrk counts an answer with status > 399 as a status error and a failed connect, read,
write or timeout as a socket error: the harness insists that all of them are zero.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import orjson

LUA_POST = Path(__file__).resolve().parent / "lua" / "post.lua"
_MARK = "BENCH_JSON "
_NON_2XX = re.compile(r"Non-2xx or 3xx responses:\s*(\d+)")


@dataclass(frozen=True, slots=True)
class WrkResult:
    """One wrk run. Latencies in milliseconds."""

    requests: int
    duration_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    max_ms: float
    socket_errors: int
    status_errors: int

    @property
    def rps(self) -> float:
        """Completed requests per second."""
        return self.requests / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def errors(self) -> int:
        """Every failed request: bad statuses plus socket errors."""
        return self.socket_errors + self.status_errors


def parse_output(text: str) -> WrkResult:
    """The :class:`WrkResult` in wrk's stdout; ValueError when the JSON line is missing."""
    data = None
    for line in text.splitlines():
        if line.startswith(_MARK):
            data = orjson.loads(line[len(_MARK) :])
    if data is None:
        raise ValueError("wrk printed no BENCH_JSON line (did the Lua script run?)")
    status = int(data["status_errors"])
    match = _NON_2XX.search(text)
    if match:
        status = max(status, int(match.group(1)))
    sockets = sum(int(data[k]) for k in ("connect_errors", "read_errors", "write_errors"))
    sockets += int(data["timeout_errors"])
    return WrkResult(
        requests=int(data["requests"]),
        duration_s=int(data["duration_us"]) / 1e6,
        p50_ms=data["p50_us"] / 1000,
        p90_ms=data["p90_us"] / 1000,
        p99_ms=data["p99_us"] / 1000,
        mean_ms=data["mean_us"] / 1000,
        max_ms=data["max_us"] / 1000,
        socket_errors=sockets,
        status_errors=status,
    )


def threads_for(connections: int) -> int:
    """wrk threads: one for a single connection, else two (the machine has two cores)."""
    return 1 if connections < 2 else 2


def command(
    binary: str,
    url: str,
    body_file: Path,
    connections: int,
    duration: float,
    headers: tuple[str, ...] = (),
    timeout_s: int = 30,
) -> list[str]:
    """The wrk command line for one run (``headers`` as ``"Name: value"``)."""
    return [
        binary,
        f"-t{threads_for(connections)}",
        f"-c{connections}",
        f"-d{max(1, round(duration))}s",
        # Long enough that a slow peer (seconds per request at 50 connections) is
        # measured, not counted as timed out.
        f"--timeout={timeout_s}s",
        "-s",
        str(LUA_POST),
        url,
        "--",
        str(body_file),
        *headers,
    ]


def run(
    binary: str,
    url: str,
    body_file: Path,
    connections: int,
    duration: float,
    headers: tuple[str, ...] = (),
) -> WrkResult:
    """Run wrk once and parse it; a failing wrk is a RuntimeError with its output."""
    cmd = command(binary, url, body_file, connections, duration, headers)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 120)
    if proc.returncode != 0:
        raise RuntimeError(f"wrk failed ({proc.returncode}): {proc.stderr or proc.stdout}")
    try:
        return parse_output(proc.stdout)
    except (ValueError, KeyError) as exc:
        raise RuntimeError(f"{exc}\n{proc.stdout}\n{proc.stderr}") from None
