"""Hostile clients against a real ``interlingua serve`` process (server/process/guard.py).

Slow heads and bodies are cut after their timeouts, oversized heads get 431, a flood of
slow connections beyond the connection cap evicts the slowest instead of locking out
fast clients (under a 256-descriptor limit), and when every connection is busy a new
one gets a clean 503 with Retry-After.
"""

from __future__ import annotations

import contextlib
import select
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from ..gateway_process import limit_fds, serve
from ..mock_upstream import endless, mock_openai

FAKE: dict[str, Any] = {
    "upstreams": {"fake": {"kind": "fake"}},
    "models": [{"name": "*", "upstream": "fake"}],
}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "ping"}]}
SLOW_HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\n"


def _config(**server: Any) -> dict[str, Any]:
    return {"server": server, **FAKE}


def _chat(url: str) -> httpx.Response:
    """One request on a fresh connection."""
    return httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=10)


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _read_until_closed(sock: socket.socket, timeout: float) -> bytes:
    """Everything the server sends until it closes the connection (or ``timeout``)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except (TimeoutError, ConnectionResetError):
        pass
    return data


def _read_answer(sock: socket.socket) -> bytes:
    """One whole response with a Content-Length body (its parts may arrive apart)."""
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has answered or closed ``sock`` (without waiting)."""
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


def _error(answer: bytes) -> dict[str, Any]:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"connection: close" in head.lower(), head
    parsed: dict[str, Any] = orjson.loads(body)
    return parsed


def test_a_slow_head_is_cut_after_header_timeout_while_others_are_served(
    tmp_path: Path,
) -> None:
    with serve(tmp_path, _config(header_timeout=1)) as gw, _connect(gw.port) as drip:
        silent = _connect(gw.port)  # connects and never sends a byte
        started = time.monotonic()
        served = 0
        for i in range(len(SLOW_HEAD)):
            if _closed_by_server(drip) or time.monotonic() - started > 8:
                break
            drip.sendall(SLOW_HEAD[i : i + 1])  # a byte every ~0.1 s: never a whole head
            assert _chat(gw.url).status_code == 200
            served += 1
            time.sleep(0.1)
        elapsed = time.monotonic() - started
        answer = _read_until_closed(drip, 5)
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert _error(answer)["error"]["code"] == "request_timeout"
        assert 0.8 < elapsed < 5, elapsed
        assert served >= 3  # fast clients were answered all along
        assert _read_until_closed(silent, 5) == b""  # closed without an answer
        silent.close()
        assert _chat(gw.url).status_code == 200


def test_a_body_shorter_than_declared_gets_408_after_body_timeout(tmp_path: Path) -> None:
    with serve(tmp_path, _config(body_timeout=1)) as gw, _connect(gw.port) as sock:
        head = SLOW_HEAD + b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        sock.sendall(head + b'{"model": "m", ')  # 15 of the 100 bytes promised
        started = time.monotonic()
        answer = _read_until_closed(sock, 10)
        elapsed = time.monotonic() - started
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert "body" in _error(answer)["error"]["message"]
        assert 0.8 < elapsed < 6, elapsed
        assert _chat(gw.url).status_code == 200


def test_an_idle_keep_alive_connection_is_closed_after_keep_alive_timeout(
    tmp_path: Path,
) -> None:
    with serve(tmp_path, _config(keep_alive_timeout=1)) as gw, _connect(gw.port) as sock:
        for _ in range(2):  # the timeout restarts after each answer
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: gw\r\n\r\n")
            assert _read_answer(sock).startswith(b"HTTP/1.1 200 ")
            time.sleep(0.5)
        started = time.monotonic()
        assert _read_until_closed(sock, 10) == b""
        assert 0.3 < time.monotonic() - started < 4


def test_a_body_still_dripping_after_an_early_answer_is_not_waited_for(
    tmp_path: Path,
) -> None:
    """A 1 GB Content-Length is refused (413) before the body is read; a client that
    keeps sending it a byte at a time is closed after keep_alive_timeout."""
    config = _config(keep_alive_timeout=1, body_timeout=60)
    with serve(tmp_path, config) as gw, _connect(gw.port) as sock:
        sock.sendall(SLOW_HEAD + b"Content-Length: 1000000000\r\n\r\n{")
        assert _read_answer(sock).startswith(b"HTTP/1.1 413 ")
        started = time.monotonic()
        with contextlib.suppress(OSError):
            while not _closed_by_server(sock) and time.monotonic() - started < 8:
                sock.sendall(b" ")
                time.sleep(0.2)
        assert _read_until_closed(sock, 5) == b""
        assert time.monotonic() - started < 5


def test_a_head_too_large_or_with_too_many_headers_gets_431(tmp_path: Path) -> None:
    with serve(tmp_path, _config(max_header_bytes=16384, max_headers=64)) as gw:
        # Within the limits: served.
        fine = {f"x-h{i}": "v" * 100 for i in range(50)}
        resp = httpx.post(gw.url + "/v1/chat/completions", json=CHAT, headers=fine, timeout=10)
        assert resp.status_code == 200, resp.text
        many = {f"x-h{i}": "v" for i in range(100)}
        resp = httpx.post(gw.url + "/v1/chat/completions", json=CHAT, headers=many, timeout=10)
        assert resp.status_code == 431
        assert resp.json()["error"]["code"] == "too_many_headers"
        resp = httpx.get(gw.url + "/health", headers={"x-big": "v" * 20000}, timeout=10)
        assert resp.status_code == 431
        assert resp.json()["error"]["code"] == "headers_too_large"
        # One endless header value, sent in pieces: refused once the limit is passed,
        # not buffered until the client stops.
        with _connect(gw.port) as sock:
            sock.sendall(SLOW_HEAD + b"x-endless: ")
            sent = 0
            try:
                while sent < 1 << 20 and not _closed_by_server(sock):
                    sock.sendall(b"v" * 4096)
                    sent += 4096
                    time.sleep(0.001)
            except (BrokenPipeError, ConnectionResetError):
                pass
            assert sent < 1 << 19, sent
            assert _read_until_closed(sock, 5).startswith(b"HTTP/1.1 431 ")


def test_a_flood_of_slow_connections_evicts_the_slowest_not_fast_clients(
    tmp_path: Path,
) -> None:
    """256 descriptors -> a cap of 90 connections; 300 slow clients send half a head and
    wait; fast clients keep getting answers and the gateway never runs out of files."""
    config = _config(header_timeout=60)
    with serve(tmp_path, config, preexec=limit_fds(256), log_level="warning") as gw:
        slow: list[socket.socket] = []
        try:
            for i in range(300):
                sock = _connect(gw.port)
                sock.sendall(SLOW_HEAD)
                slow.append(sock)
                if i % 25 == 24:
                    assert _chat(gw.url).status_code == 200, i
            for _ in range(10):
                assert _chat(gw.url).status_code == 200
            time.sleep(0.2)
            evicted = [sock for sock in slow if _closed_by_server(sock)]
            assert len(evicted) >= 300 - 90, len(evicted)
            # The oldest went first, with a 503 that says when to come back.
            assert slow[0] in evicted
            answer = _read_until_closed(slow[0], 5)
            assert answer.startswith(b"HTTP/1.1 503 "), answer
            assert b"retry-after: 1" in answer.lower()
        finally:
            for sock in slow:
                sock.close()
        assert _chat(gw.url).status_code == 200
        log = gw.stderr()
        assert "Too many open files" not in log and "Traceback" not in log, log[-2000:]


def test_beyond_the_cap_with_every_connection_busy_a_new_one_gets_503(
    tmp_path: Path,
) -> None:
    with mock_openai() as mock:
        config = {
            "server": {"max_connections": 2},
            "upstreams": {"mock": {"kind": "openai", "base_url": mock.base_url}},
            "models": [{"name": "*", "upstream": "mock"}],
        }
        mock.enqueue(endless(interval=0.05), endless(interval=0.05))
        with (
            serve(tmp_path, config) as gw,
            httpx.Client(timeout=10) as a,
            httpx.Client(timeout=10) as b,
        ):
            body = {**CHAT, "stream": True}
            url = gw.url + "/v1/chat/completions"
            with a.stream("POST", url, json=body) as s1, b.stream("POST", url, json=body) as s2:
                # Keep the iterators: httpx closes a response whose iterator is dropped.
                chunks1, chunks2 = s1.iter_raw(), s2.iter_raw()
                next(chunks1)
                next(chunks2)  # both connections are busy streaming
                resp = _chat(gw.url)
                assert resp.status_code == 503
                assert resp.headers["retry-after"] == "1"
                assert resp.headers["connection"] == "close"
                assert resp.json()["error"]["code"] == "too_many_connections"
                next(chunks1)
                next(chunks2)  # the busy ones were not touched
            # Once the streams are gone, new connections are served again.
            deadline = time.monotonic() + 5
            while (status := _chat(gw.url).status_code) != 200 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert status == 200
