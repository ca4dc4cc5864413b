"""Install the pinned npm clients of pins.py into pins.clients_dir(), if not there yet.

``python -m tests.real_clients.install`` from the repo root; ``.ci/run`` calls it before the
tests. Idempotent and quiet: it runs npm only when a pinned version is missing. Without
npm it says so and exits 0 (the client tests then skip, naming the reason); a failed npm
install exits non-zero.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

from .pins import NPM_CLIENTS, clients_dir, installed_version


def main() -> int:
    missing = [
        f"{package}@{version}"
        for package, (version, _) in NPM_CLIENTS.items()
        if installed_version(package) != version
    ]
    if not missing:
        return 0
    npm = shutil.which("npm")
    if npm is None:
        print(f"tests/real_clients: npm not found; not installing {' '.join(missing)}")
        return 0
    target = clients_dir()
    target.mkdir(parents=True, exist_ok=True)
    args = [npm, "install", "--prefix", str(target), "--no-audit", "--no-fund", "--loglevel=error"]
    done = subprocess.run([*args, *missing], stdout=subprocess.DEVNULL, check=False, timeout=900)
    return done.returncode


if __name__ == "__main__":
    sys.exit(main())
