"""A local OTLP/HTTP collector for the benches: 200 to every ``POST /v1/traces``.

The ``on-traced`` team variant (scenarios.team_sections) points the gateway's
``telemetry.otlp_endpoint`` here, so that the price of traces is measured with the
exporter really posting its batches (a collector that is away costs a dropped batch and a
log line, not the work of a delivered one). It reads each body and throws it away; it runs
on a daemon thread of the bench's own process, started once, on a free port.

    python -m bench.otlp_sink      # alone, to point a gateway at by hand
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["OtlpSink", "sink_url"]


class OtlpSink:
    """The collector (module docstring): ``url`` is its base, ``posts`` what it was sent."""

    def __init__(self, port: int = 0) -> None:
        self.posts = 0
        self.bytes = 0
        sink = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # (the exporter's session keeps its connection)

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                sink.bytes += len(self.rfile.read(length))
                sink.posts += 1
                self.send_response(200 if self.path == "/v1/traces" else 404)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


_SINK: OtlpSink | None = None


def sink_url() -> str:
    """The base URL of this process's collector, started on first use."""
    global _SINK
    if _SINK is None:
        _SINK = OtlpSink()
    return _SINK.url


if __name__ == "__main__":
    import time

    sink = OtlpSink(4318)
    print(f"OTLP/HTTP sink on {sink.url}")
    while True:
        time.sleep(10)
        print(f"{sink.posts} posts, {sink.bytes} bytes")
