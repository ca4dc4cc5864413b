"""The key of the reasoning tokens the gateway hands out (dialects/openai_responses/sealed.py).

A token issued by one process must open in every process that may see the next turn:
the other ``--workers`` of this server, and the other replicas behind a load balancer.
So the key is never a per-process random one:

* ``responses.secret_env`` names a variable holding a secret (any string of 16 or more
  characters; its SHA-256 is the key): set the same on every replica;
* else a key file, ``<user data dir>/secret.key`` (32 random bytes, mode 0600), made by
  the first process that needs it and read by the others. Replicas on other machines
  need ``secret_env``; one machine works with no setup.

If the key file can be neither read nor made (a read-only home), the process logs it
and uses a random key: tokens then open only in that process, and a foreign-looking
token is dropped, never an error (the reasoning is lost, the conversation goes on).
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from ...config import ConfigError, ResponsesConfig, user_data_dir

__all__ = ["KEY_FILE", "sealing_key"]

log = logging.getLogger("interlingua.server")

KEY_FILE = "secret.key"
_KEY_BYTES = 32
_MIN_SECRET = 16


def sealing_key(cfg: ResponsesConfig, data_dir: Path | None = None) -> bytes:
    """The sealing key for ``cfg`` (see the module docstring); ConfigError when
    ``secret_env`` names a variable that is unset or too short."""
    if cfg.secret_env is not None:
        secret = os.environ.get(cfg.secret_env)
        if not secret:
            raise ConfigError(f"responses.secret_env: the variable {cfg.secret_env} is not set")
        if len(secret) < _MIN_SECRET:
            raise ConfigError(
                f"responses.secret_env: {cfg.secret_env} holds {len(secret)} characters; "
                f"use a random secret of at least {_MIN_SECRET}"
            )
        return hashlib.sha256(secret.encode()).digest()
    path = (data_dir or user_data_dir()) / KEY_FILE
    try:
        return _read_or_make(path)
    except OSError as exc:
        log.warning(
            "cannot read or make the sealing key file %s (%s): reasoning tokens will "
            "open only in this process; set responses.secret_env",
            path,
            exc,
        )
        return os.urandom(_KEY_BYTES)


def _read_or_make(path: Path) -> bytes:
    """The key in ``path``, made there first if missing. Processes starting at once may
    all make one: each writes its own temporary file and links it to ``path``, which
    succeeds for one only (a link is atomic and never replaces), and all read the same."""
    try:
        return _checked(path.read_bytes(), path)
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(os.urandom(_KEY_BYTES))
    try:
        os.link(temporary, path)
    except FileExistsError:
        pass  # another process made it first: its key is the one
    finally:
        temporary.unlink(missing_ok=True)
    return _checked(path.read_bytes(), path)


def _checked(key: bytes, path: Path) -> bytes:
    if len(key) != _KEY_BYTES:
        raise OSError(f"{path} holds {len(key)} bytes, not a {_KEY_BYTES}-byte key")
    return key
