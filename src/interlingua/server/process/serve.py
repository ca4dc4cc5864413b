"""Run the gateway under uvicorn with the connection guard and the graceful drain.

``interlingua serve`` calls :func:`run`. It builds a :class:`GatewayServerConfig` -- a
uvicorn ``Config`` that carries the gateway's config and, once loaded in the process
that serves (the only process, or each ``--workers`` worker), that process's
:class:`~.guard.Guard` and the app built around the same :class:`~.drain.Drain`. uvicorn
pickles its config into each worker, so the guard and app are made in ``load()``, which
every worker calls for itself; nothing is shared between processes.

uvicorn's own shutdown stays in charge (stop accepting, ask each connection to shut
down, wait, then cancel): :class:`~.guard.GuardedProtocol` turns "shut down" into the
drain, and uvicorn's ``timeout_graceful_shutdown`` is only a backstop a few seconds after
``shutdown_timeout``, by when the drain has ended every request itself.
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import signal
import sys
from dataclasses import replace
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess

from ...config import Config
from ...upstreams.base import Upstream
from ..app import create_app
from ..drain import Drain
from ..reload import ConfigSource
from ..views.multiproc import shared_dir
from .factory import configure_logging
from .guard import Guard, GuardedProtocol, derive_max_connections, raise_fd_limit
from .socket_guard import GuardedWebSocket

__all__ = ["GatewayServerConfig", "build_guard", "run"]

#: seconds uvicorn waits beyond ``shutdown_timeout`` before cancelling on its own
BACKSTOP_SECONDS = 5


def build_guard(config: Config, drain: Drain) -> Guard:
    """This process's guard: raises the open-file limit and sizes the connection cap."""
    nofile = raise_fd_limit()
    cap = config.server.max_connections or derive_max_connections(nofile)
    return Guard(config.server, drain, cap)


class GatewayServerConfig(uvicorn.Config):
    """uvicorn's config for ``config``, serving with :class:`GuardedProtocol`.

    ``upstreams`` replaces building them from the config (tests serve scripted fakes
    through the same protocols as ``interlingua serve``; one process only).
    ``freeze_gc``: once the app is built, move everything there is out of the cyclic
    garbage collector's sight (``gc.freeze``) -- for a process that only serves
    (:func:`run` sets it; a test process keeps its collector whole).
    """

    def __init__(
        self,
        config: Config,
        *,
        log_level: str = "info",
        upstreams: dict[str, Upstream] | None = None,
        freeze_gc: bool = False,
        source: ConfigSource | None = None,
        **overrides: Any,
    ) -> None:
        self.gateway_config = config
        #: where the config came from, read again on SIGHUP (server/reload.py)
        self.gateway_source = source
        self.freeze_gc = freeze_gc
        self.gateway_log_level = log_level
        self.gateway_upstreams = upstreams
        self.guard: Guard | None = None
        server = config.server
        options: dict[str, Any] = {
            "host": server.host,
            "port": server.port,
            "loop": "auto",  # uvloop when installed
            "http": GuardedProtocol,
            # The Responses API's socket mode (server/responses/websocket.py), in the guard's
            # registry too; a frame may be as large as a request body.
            "ws": GuardedWebSocket,
            "ws_max_size": int(server.max_body_mb * 1024 * 1024),
            "log_level": log_level,
            "access_log": False,  # our front layer writes one access line with the request id
            # Unused by GuardedProtocol (its sweep closes idle connections), given for
            # anything else that reads it.
            "timeout_keep_alive": max(1, math.ceil(server.keep_alive_timeout)),
            "timeout_graceful_shutdown": math.ceil(server.shutdown_timeout) + BACKSTOP_SECONDS,
        }
        options.update(overrides)
        # The app is built in load(), in the serving process; this placeholder names it.
        super().__init__("interlingua.server.app:create_app", **options)

    def load(self) -> None:
        """Build this process's guard and app, then let uvicorn load them."""
        configure_logging(self.gateway_log_level)  # again in each worker process
        if self.gateway_source is not None:
            # A SIGHUP's default kills the process: until the app listens for it (in its
            # lifespan, in the running loop), one that arrives is ignored.
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
        drain = Drain()
        self.guard = build_guard(self.gateway_config, drain)
        self.app = create_app(
            self.gateway_config,
            upstreams=self.gateway_upstreams,
            drain=drain,
            source=self.gateway_source,
        )
        super().load()
        if self.freeze_gc:
            # The modules, the config, the routes and the app live as long as the process;
            # left in the collector's oldest generation, every full collection walked
            # them all again (~5 % of a passthrough request's CPU: gc_collect_main in a
            # perf profile under load). Frozen, a collection walks what requests made.
            # Measured with `python -m bench.ab --together`: +4-6 % requests/s.
            gc.collect()
            gc.freeze()


def run(
    config: Config,
    *,
    workers: int = 1,
    log_level: str = "info",
    source: ConfigSource | None = None,
) -> int:
    """Serve ``config`` until SIGTERM/SIGINT, then drain; the exit status (0 when clean).
    With ``source``, SIGHUP reads the config again and serves it (server/reload.py)."""
    if source is not None:
        source = replace(source, workers=workers)
    server_config = GatewayServerConfig(
        config, log_level=log_level, workers=workers, freeze_gc=True, source=source
    )
    if workers > 1:
        # Each worker process gets this config pickled, loads it (its own guard and app)
        # and drains on the SIGTERM the supervisor sends it.
        sock = server_config.bind_socket()
        # One /metrics and /ui view across the workers: they share a directory (multiproc.py).
        with shared_dir(), contextlib.suppress(KeyboardInterrupt):
            _Workers(server_config, sockets=[sock]).run()
        return 0
    server = uvicorn.Server(server_config)
    # uvicorn re-raises the signal it caught once it has shut down, to exit "as killed":
    # a drained shutdown is a clean exit, so that second SIGTERM must not kill us, and
    # the KeyboardInterrupt of a second SIGINT must not print a traceback.
    previous = signal.signal(signal.SIGTERM, _ignore)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not server.started:
        sys.exit(STARTUP_FAILURE)
    return 0


class _Workers(Multiprocess):
    """uvicorn's supervisor, but a SIGHUP is passed on to every worker, each of which
    reloads its config in place (server/reload.py), instead of uvicorn's own: replacing
    every worker process. A replacement would drop nothing in flight (the old worker
    drains), but would serve the config the supervisor was started with, not the file
    as it is now, and would start with its key and deployment counts at zero; a worker
    that reloads itself keeps them and is the same code path as a single process."""

    def handle_hup(self) -> None:
        for process in self.processes:
            if process.pid is not None and process.exitcode is None:
                os.kill(process.pid, signal.SIGHUP)


def _ignore(signum: int, frame: Any) -> None:
    """A no-op handler (see :func:`run`)."""
