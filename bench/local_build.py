"""llama.cpp's C++ ``llama-server``, built once from the pinned llama-cpp-python sdist.

    python -m bench.local_build          # build (or find) it and print its path

``bench.local_bench`` compares our embedded engine with llama.cpp's own server. To compare
the same llama.cpp, the server is built from the sources vendored in the sdist of the
llama-cpp-python version pyproject.toml pins (``vendor/llama.cpp``), not from whatever
llama.cpp is newest:

1. ``pip download --no-binary :all: --no-deps llama-cpp-python==<pin>`` (the tarball from
   PyPI), then only its ``vendor/llama.cpp`` tree is extracted;
2. ``cmake`` Release with :data:`PORTABLE` -- the CPU flags ``tests/engine_build.py``
   gives the installed wheel -- so both run the same kernels (a ``-march=native`` build
   died with SIGILL on this project's VMs), curl, OpenSSL and the web UI off (no
   internet, nothing to download at build time), static libraries (one file to cache);
3. only the ``llama-server`` target, ``-j2`` (2 cores, shared).

The binary lands in ``bench/.llama-server/<version>-<flags hash>/llama-server`` (ignored
by git) with a ``build.json`` beside it (version, flags, seconds the build took); a pin or
flag change gives a new directory, hence a new build. The sources and the build tree are
deleted after a successful build (~1 GB); a failed build keeps them for the next try,
which resumes where make stopped.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from .procs import BenchError, say

#: llama.cpp's CPU flags for a build that runs on any x86-64-v3 CPU: the same string as
#: ``tests/engine_build.PORTABLE`` (a test keeps the two equal)
PORTABLE = (
    "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
)

#: the rest of the configure line: no network at build or run time, no extra targets,
#: one self-contained binary
OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
)

JOBS = 2
CACHE = Path(__file__).resolve().parent / ".llama-server"
_PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
PACKAGE = "llama-cpp-python"


class BuildSkipped(Exception):
    """The build tools are missing: the llama-server peer is left out (the reason says why)."""


@dataclass(frozen=True, slots=True)
class Built:
    """A cached ``llama-server`` and how it was made."""

    path: Path
    version: str
    flags: str
    build_seconds: float
    cached: bool  # True: found from an earlier run, not built now


def pinned_version(pyproject: str | None = None) -> str:
    """The llama-cpp-python version pyproject.toml pins (``0.3.36``)."""
    text = _PYPROJECT.read_text() if pyproject is None else pyproject
    match = re.search(rf'"{re.escape(PACKAGE)}(?:\[[^\]]*\])?==([^"\s;]+)"', text)
    if match is None:
        raise BenchError(f"no {PACKAGE}==<version> pin in pyproject.toml")
    return match.group(1)


def configure_args(source: Path, build: Path, flags: str = PORTABLE) -> list[str]:
    """The ``cmake`` configure command line."""
    return ["cmake", "-S", str(source), "-B", str(build), *OPTIONS, *flags.split()]


def build_args(build: Path, jobs: int = JOBS) -> list[str]:
    """The ``cmake --build`` command line: the server target only."""
    return ["cmake", "--build", str(build), "--target", "llama-server", "-j", str(jobs)]


def cache_key(version: str, flags: str = PORTABLE) -> str:
    """``<version>-<8 hex of the configure options>``: a pin or flag change rebuilds."""
    digest = hashlib.sha256(" ".join([*OPTIONS, flags]).encode()).hexdigest()[:8]
    return f"{version}-{digest}"


def missing_tools(which: Callable[[str], str | None] | None = None) -> list[str]:
    """What the build needs and PATH lacks: cmake, a C and a C++ compiler, make or ninja."""
    which = which or shutil.which
    wanted = {
        "cmake": ("cmake",),
        "a C compiler (cc, gcc or clang)": ("cc", "gcc", "clang"),
        "a C++ compiler (c++, g++ or clang++)": ("c++", "g++", "clang++"),
        "make or ninja": ("make", "ninja"),
    }
    return [what for what, names in wanted.items() if not any(which(n) for n in names)]


def vendored_members(names: list[str], version: str) -> list[str]:
    """The tarball members under ``llama_cpp_python-<version>/vendor/llama.cpp/``."""
    prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/"
    return [name for name in names if name.startswith(prefix)]


def _run(command: list[str], log: Path, what: str) -> None:
    say(f"{what}: {' '.join(command)}")
    with log.open("ab") as out:
        out.write(f"\n$ {' '.join(command)}\n".encode())
        out.flush()
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-25:])
        raise BenchError(
            f"{what} failed (exit {done.returncode}); log {log} (run the bench with "
            f"--without llama-server to leave it out):\n{tail}"
        )


def _sdist(version: str, into: Path, log: Path) -> Path:
    found = sorted(into.glob(f"llama_cpp_python-{version}.tar.gz"))
    if not found:
        command = [sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:"]
        command += ["--no-deps", f"{PACKAGE}=={version}", "-d", str(into)]
        _run(command, log, f"downloading the {PACKAGE} {version} sdist")
        found = sorted(into.glob(f"llama_cpp_python-{version}.tar.gz"))
    if not found:
        raise BenchError(f"pip download left no llama_cpp_python-{version}.tar.gz in {into}")
    return found[0]


def _extract(tarball: Path, version: str, into: Path) -> Path:
    source = into / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if (source / "CMakeLists.txt").is_file():
        return source
    say(f"extracting vendor/llama.cpp from {tarball.name}")
    with tarfile.open(tarball) as tar:
        members = vendored_members(tar.getnames(), version)
        if not members:
            raise BenchError(f"{tarball.name} has no vendor/llama.cpp")
        tar.extractall(into, members=[tar.getmember(m) for m in members], filter="data")
    return source


def read_built(folder: Path) -> Built | None:
    """The cached build in ``folder``, if its binary and ``build.json`` are both there."""
    binary, info = folder / "llama-server", folder / "build.json"
    if not (binary.is_file() and os.access(binary, os.X_OK) and info.is_file()):
        return None
    meta = orjson.loads(info.read_bytes())
    return Built(binary, meta["version"], meta["flags"], float(meta["build_seconds"]), True)


def ensure_llama_server(version: str | None = None, cache: Path = CACHE) -> Built:
    """The cached ``llama-server`` for the pinned version, building it first if needed.

    Raises :class:`BuildSkipped` when the build tools are missing and ``BenchError`` when
    the download or the build fails.
    """
    version = version or pinned_version()
    folder = cache / cache_key(version)
    found = read_built(folder)
    if found is not None:
        return found
    missing = missing_tools()
    if missing:
        raise BuildSkipped(
            f"cannot build llama-server: {', '.join(missing)} not found "
            "(Debian: apt-get install cmake g++ make)"
        )
    work = folder / "work"
    work.mkdir(parents=True, exist_ok=True)
    log = folder / "build.log"
    say(f"building llama-server from {PACKAGE} {version}'s vendored llama.cpp (log {log})")
    started = time.monotonic()
    source = _extract(_sdist(version, work, log), version, work)
    build = work / "build"
    _run(configure_args(source, build), log, "cmake configure")
    _run(build_args(build), log, f"cmake build (-j{JOBS}, several minutes on 2 cores)")
    seconds = time.monotonic() - started
    binary = build / "bin" / "llama-server"
    if not binary.is_file():
        raise BenchError(f"the build finished without {binary}")
    shutil.copy2(binary, folder / "llama-server")
    meta: dict[str, object] = {"version": version, "flags": PORTABLE, "options": list(OPTIONS)}
    meta |= {"build_seconds": round(seconds, 1), "built": time.strftime("%Y-%m-%d %H:%M")}
    (folder / "build.json").write_bytes(orjson.dumps(meta, option=orjson.OPT_INDENT_2))
    shutil.rmtree(work)
    say(f"built {folder / 'llama-server'} in {seconds / 60:.1f} min")
    return Built(folder / "llama-server", version, PORTABLE, seconds, False)


def main() -> int:
    """Build (or find) the server and print its path."""
    try:
        built = ensure_llama_server()
    except (BuildSkipped, BenchError) as exc:
        print(f"bench.local_build: {exc}", file=sys.stderr)
        return 1
    state = "cached" if built.cached else "built"
    print(f"{built.path} ({state}; build took {built.build_seconds / 60:.1f} min)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
