"""Where the gateway spends its time: py-spy on the live server, summarised.

``--profile SCENARIO`` runs one extra load run of that scenario (not in the table, since
sampling perturbs it) with ``py-spy record --format raw`` attached to the gateway, then
reads the collapsed stacks: the functions with the most self time, the most inclusive
time, and self time per package. py-spy is not a project dependency: ``pip install
py-spy`` first (the harness says so if it is missing).

Collapsed stacks are ``frame;frame;...;frame COUNT`` lines, outermost frame first, each
frame ``function (path)`` (``--nolineno``). Idle samples (the event loop waiting in
epoll) are left out by py-spy, so percentages are of busy time. Time in C code (orjson,
socket writes, uvloop) is charged to the Python function that called it: a large self
time for uvicorn's ``send`` is mostly the ``write`` system call, for ``Runner.run`` the
event loop itself. Frames on every stack are dropped from the inclusive list.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<path>[^()]*)\)$")


@dataclass(frozen=True, slots=True)
class Hotspots:
    """Shares (0-100, of busy samples) per function and per package."""

    samples: int
    self_time: list[tuple[str, float]]
    inclusive: list[tuple[str, float]]
    packages: list[tuple[str, float]]


def pyspy() -> str | None:
    """The py-spy executable, if installed."""
    return shutil.which("py-spy")


def record(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    """Start sampling ``pid`` for ``seconds`` into ``out`` (raw collapsed stacks)."""
    exe = pyspy()
    if exe is None:
        raise RuntimeError("py-spy is not installed (pip install py-spy)")
    command = [exe, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds)))]
    command += ["--format", "raw", "--nolineno", "--rate", "200", "--output", str(out)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def short_frame(frame: str) -> str:
    """``func (…/site-packages/pkg/mod.py)`` -> ``pkg/mod.py:func``."""
    match = _FRAME.match(frame)
    if not match:
        return frame
    return f"{_short_path(match['path'])}:{match['func']}"


def _short_path(path: str) -> str:
    for marker in ("site-packages/", "/src/", "/lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            if marker == "/lib/python3":
                path = "stdlib/" + path.split("/", 1)[-1]
            break
    return path


def package_of(frame: str) -> str:
    """The top-level package (or ``stdlib/module``) a frame's file belongs to."""
    path = short_frame(frame).rsplit(":", 1)[0]
    parts = path.split("/")
    if parts[0] == "stdlib" and len(parts) > 1:
        return "stdlib/" + parts[1].removesuffix(".py")
    return parts[0].removesuffix(".py")


def summarise(collapsed: str, top: int = 20) -> Hotspots:
    """Self, inclusive and per-package shares from collapsed stacks."""
    self_counts: Counter[str] = Counter()
    incl_counts: Counter[str] = Counter()
    pkg_counts: Counter[str] = Counter()
    total = 0
    for line in collapsed.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if f]
        if not frames:
            continue
        total += count
        leaf = frames[-1]
        self_counts[short_frame(leaf)] += count
        pkg_counts[package_of(leaf)] += count
        for name in {short_frame(f) for f in frames}:
            incl_counts[name] += count

    def shares(counter: Counter[str], n: int) -> list[tuple[str, float]]:
        return [(name, 100 * c / total) for name, c in counter.most_common(n)] if total else []

    # Frames on every busy stack (runpy, uvicorn.run, the event loop) say nothing.
    for name, count in list(incl_counts.items()):
        if count >= 0.99 * total:
            del incl_counts[name]
    return Hotspots(
        total, shares(self_counts, top), shares(incl_counts, top), shares(pkg_counts, 10)
    )


def render(spots: Hotspots, title: str) -> str:
    """The hot spots as markdown tables."""
    lines = [f"### Profile: {title} ({spots.samples} busy samples)", ""]
    for heading, rows in (
        ("self time, by function", spots.self_time),
        ("self time, by package", spots.packages),
        ("inclusive time, by function", spots.inclusive),
    ):
        lines += [f"| {heading} | % |", "|---|---:|"]
        lines += [f"| `{name}` | {share:.1f} |" for name, share in rows]
        lines.append("")
    return "\n".join(lines)
