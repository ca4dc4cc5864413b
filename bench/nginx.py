"""The mock upstream: nginx serving fixed answers from static files on a loopback port.

nginx is the physical floor the gateway is compared with: it answers in well under a
millisecond, so what the gateway adds is what the harness measures. Everything it needs
lives in a temp dir (config, pid, logs, temp paths): no root-owned path is written and a
system nginx, if any, is not touched. One process (``master_process off``), access log
off, keep-alive connections reused for as long as the run lasts.

POST to a static file is refused by nginx with 405; ``error_page 405 =200 $uri`` turns
that into an internal GET of the same URI answered 200 -- the usual trick for serving a
fixed body to POSTs without a scripting module.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Collection
from pathlib import Path

from . import mock
from .procs import BenchError, Process, free_port, start, wait_ready

# Temp paths nginx opens at start for each module compiled in; a directive for a module
# left out (nginx-light drops several) is a config error, so only those built are set.
_TEMP_PATHS = {
    "client_body_temp_path": None,  # core: always built
    "proxy_temp_path": "http_proxy",
    "fastcgi_temp_path": "http_fastcgi",
    "uwsgi_temp_path": "http_uwsgi",
    "scgi_temp_path": "http_scgi",
}


def built_modules_without(version_output: str) -> set[str]:
    """Modules ``nginx -V`` says were left out (``--without-http_proxy_module`` -> ``http_proxy``)."""
    return set(re.findall(r"--without-([a-z0-9_]+?)_module", version_output))


def temp_path_directives(tmp: Path, without: Collection[str]) -> list[str]:
    """The ``*_temp_path`` lines for the modules this nginx has, all under ``tmp``."""
    lines = []
    for directive, module in _TEMP_PATHS.items():
        if module is None or module not in without:
            name = directive.removesuffix("_temp_path")
            lines.append(f"{directive} {tmp / ('temp_' + name)};")
    return lines


def render_config(tmp: Path, port: int, without: Collection[str] = ()) -> str:
    """The nginx.conf serving :func:`bench.mock.site` from ``tmp/www`` on ``port``."""
    locations = []
    for path, (filename, content_type, _) in mock.site().items():
        locations.append(
            f"        location = {path} {{\n"
            f"            default_type {content_type};\n"
            f"            alias {tmp / 'www' / filename};\n"
            "            error_page 405 =200 $uri;\n"
            "        }"
        )
    temp_paths = "\n    ".join(temp_path_directives(tmp, without))
    return f"""daemon off;
master_process off;
worker_processes 1;
pid {tmp / "nginx.pid"};
error_log {tmp / "error.log"} warn;

events {{
    worker_connections 4096;
}}

http {{
    access_log off;
    sendfile on;
    tcp_nopush off;
    tcp_nodelay on;
    keepalive_timeout 300s;
    keepalive_requests 10000000;
    client_max_body_size 64m;
    client_body_buffer_size 1m;
    etag off;
    {temp_paths}

    server {{
        listen 127.0.0.1:{port} backlog=4096;
        server_tokens off;
{chr(10).join(locations)}
        location / {{
            return 404;
        }}
    }}
}}
"""


def write_site(tmp: Path) -> None:
    """The static answer files under ``tmp/www``."""
    www = tmp / "www"
    www.mkdir(parents=True, exist_ok=True)
    for filename, _, body in mock.site().values():
        (www / filename).write_bytes(body)


class Nginx:
    """A running mock upstream; use as a context manager."""

    def __init__(self, binary: str, tmp: Path) -> None:
        self.binary = binary
        self.tmp = tmp / "nginx"
        self.port = 0
        self.process: Process | None = None

    @property
    def base(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Nginx:
        self.tmp.mkdir(parents=True, exist_ok=True)
        version = subprocess.run(
            [self.binary, "-V"], capture_output=True, text=True, timeout=30
        ).stderr
        self.port = free_port()
        write_site(self.tmp)
        conf = self.tmp / "nginx.conf"
        conf.write_text(render_config(self.tmp, self.port, built_modules_without(version)))
        # -e: the error log before the config is read (else nginx opens the compiled-in
        # /var/log path first); -p: the prefix for any relative path.
        command = [self.binary, "-p", str(self.tmp), "-e", str(self.tmp / "error.log")]
        command += ["-c", str(conf)]
        check = subprocess.run([*command, "-t"], capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            raise BenchError(f"nginx rejected the generated config:\n{check.stderr}")
        self.process = start(command, self.tmp / "stdout.log")
        try:
            # GET works too: the same static file, no 405 detour.
            wait_ready(f"{self.base}/v1/chat/completions", self.process.proc, 15, "nginx")
        except BaseException:
            self.process.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.stop()
