"""A throwaway PostgreSQL server for tests: initdb into a temporary directory, start it on
a free 127.0.0.1 port (its unix socket in the same directory), stop and delete it after.

The binaries are Debian's (``/usr/lib/postgresql/<version>/bin``, package ``postgresql``);
without them :func:`postgres_url` skips, saying so. PostgreSQL refuses to run as root: as
root the server runs as the ``postgres`` system user the package creates.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator

import pytest

from ..live_server import free_port


def _bin_dir() -> str | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return os.path.dirname(found[-1]) if found else None


@contextlib.contextmanager
def postgres_url() -> Iterator[str]:
    """Start a server; yield ``postgresql://test@127.0.0.1:PORT/postgres``."""
    bin_dir = _bin_dir()
    if bin_dir is None:
        pytest.skip(
            "PostgreSQL binaries not found under /usr/lib/postgresql (apt-get install postgresql)"
        )
    as_user: list[str] = []
    root = tempfile.mkdtemp(prefix="interlingua-pg-")
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as root and runuser is missing: PostgreSQL cannot start")
        as_user = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
    data = os.path.join(root, "data")
    port = free_port()

    def run(*args: str) -> None:
        subprocess.run([*as_user, *args], check=True, capture_output=True, timeout=60)

    try:
        run(f"{bin_dir}/initdb", "-D", data, "-A", "trust", "-U", "test", "-E", "UTF8",
            "--no-sync")  # fmt: skip
        options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
        run(f"{bin_dir}/pg_ctl", "-D", data, "-o", options, "-l", f"{root}/log", "-w", "start")
        try:
            yield f"postgresql://test@127.0.0.1:{port}/postgres"
        finally:
            run(f"{bin_dir}/pg_ctl", "-D", data, "-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(root, ignore_errors=True)
