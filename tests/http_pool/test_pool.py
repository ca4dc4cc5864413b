"""The lean HTTP/1.1 client (``http_pool/_pool.py``) over a scripted fake network.

No sockets: :class:`FakeNet` is the pool's ``opener``; each connection is a
:class:`FakeTransport` whose "server" side is a handler called with every request written.
The HTTP upstream tests (tests/upstreams/test_http_upstreams.py and each kind's own
file) and the client's run the same pool against real local servers.
"""

from __future__ import annotations

import asyncio
import gc
import gzip
from collections.abc import Callable

import httptools
import pytest

from interlingua.http_pool import (
    HIGH_WATER,
    MAX_HEAD,
    ConnectFailed,
    ConnectionLost,
    ConnectTimeout,
    DeadlineExceeded,
    Pool,
    PooledResponse,
    ReadTimeout,
    Target,
)

URL = "http://upstream.test:8000/v1/chat/completions"
KEY = ("upstream.test", 8000)
OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{"a":1}'


class FakeTransport:
    """One fake connection: records writes, pause state and closing."""

    def __init__(self, net: FakeNet, protocol: asyncio.Protocol) -> None:
        self.net = net
        self.protocol = protocol
        self.written: list[bytes] = []
        self.paused = False
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(data)
        self.net.requests.append(data)
        asyncio.get_running_loop().call_soon(self.net.handler, self, data)

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def abort(self) -> None:
        if not self.closed:
            self.closed = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    close = abort

    # --- the server's side ---

    def reply(self, data: bytes) -> None:
        if not self.closed:
            self.protocol.data_received(data)

    def hang_up(self, exc: Exception | None = None) -> None:
        if not self.closed:
            self.closed = True
            self.protocol.connection_lost(exc)


Handler = Callable[[FakeTransport, bytes], None]


class FakeNet:
    """The pool's opener: hands out FakeTransports, or fails as told."""

    def __init__(self, handler: Handler | None = None) -> None:
        self.handler: Handler = handler or (lambda t, data: t.reply(OK))
        self.transports: list[FakeTransport] = []
        self.requests: list[bytes] = []
        self.refuse: OSError | None = None
        self.hang = False

    async def open(
        self, factory: Callable[[], asyncio.Protocol], host: str, port: int
    ) -> tuple[FakeTransport, asyncio.Protocol]:
        assert (host, port) == KEY
        if self.refuse is not None:
            raise self.refuse
        if self.hang:
            await asyncio.sleep(3600)
        protocol = factory()
        transport = FakeTransport(self, protocol)
        protocol.connection_made(transport)  # type: ignore[arg-type]
        self.transports.append(transport)
        return transport, protocol


def make(handler: Handler | None = None, **pool_args: float) -> tuple[Pool, FakeNet, Target]:
    net = FakeNet(handler)
    pool = Pool(opener=net.open, **pool_args)  # type: ignore[arg-type]
    return pool, net, Target(URL, {"Authorization": "Bearer k", "content-type": "application/json"})


async def post(
    pool: Pool, target: Target, body: bytes = b"{}", read: float = 5.0
) -> PooledResponse:
    return await pool.post(target, body, connect_timeout=5.0, read_timeout=read)


async def drain(resp: PooledResponse) -> list[bytes]:
    return [chunk async for chunk in resp.iter_any()]


# --- the request bytes ----------------------------------------------------------------


def test_request_is_one_buffer_with_head_length_and_body() -> None:
    target = Target(URL, {"Authorization": "Bearer k"})
    assert target.request(b'{"x":1}') == (
        b"POST /v1/chat/completions HTTP/1.1\r\n"
        b"host: upstream.test:8000\r\n"
        b"user-agent: interlingua/0.1.0\r\n"
        b"accept-encoding: identity\r\n"
        b"authorization: Bearer k\r\n"
        b"content-length: 7\r\n\r\n"
        b'{"x":1}'
    )


def test_extra_headers_are_added_or_replace_ours_without_duplicates() -> None:
    target = Target("http://h/v1/messages?beta=true", {"anthropic-version": "2023-06-01"})
    added = target.request(b"", {"Anthropic-Beta": "b1"})
    assert added.startswith(b"POST /v1/messages?beta=true HTTP/1.1\r\nhost: h\r\n")
    assert added.endswith(b"anthropic-version: 2023-06-01\r\nanthropic-beta: b1\r\n"
                          b"content-length: 0\r\n\r\n")  # fmt: skip
    replaced = target.request(b"", {"anthropic-version": "2099-01-01"})
    assert replaced.count(b"anthropic-version") == 1
    assert b"anthropic-version: 2099-01-01\r\n" in replaced


@pytest.mark.parametrize(
    ("url", "headers"),
    [
        ("http://h/x", {"x-evil": "a\r\nhost: other"}),
        ("http://h/x", {"bad\nname": "v"}),
        ("https://h/x", {}),
        ("http:///nohost", {}),
    ],
)
def test_bad_headers_and_non_http_urls_are_refused(url: str, headers: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        Target(url, headers)


# --- answers --------------------------------------------------------------------------


async def test_answer_is_read_and_the_connection_reused() -> None:
    pool, net, target = make()
    for _ in range(3):
        resp = await post(pool, target)
        assert (resp.status, resp.headers["content-type"]) == (200, "application/json")
        assert await resp.read() == b'{"a":1}'
        assert resp.at_eof()
        resp.release()
    assert len(net.transports) == 1 and len(net.requests) == 3
    assert pool.idle_count(KEY) == 1


def _holds_its_parser(resp: object) -> bool:
    """Whether ``resp`` still refers to an httptools parser (which refers back to it:
    a reference cycle only the garbage collector would free)."""
    return any(isinstance(x, httptools.HttpResponseParser) for x in gc.get_referents(resp))


async def test_a_whole_answer_leaves_no_reference_cycle() -> None:
    pool, _net, target = make()
    resp = await post(pool, target)
    assert await resp.read() == b'{"a":1}'
    resp.release()
    assert not _holds_its_parser(resp)


async def test_idle_connections_are_reused_last_in_first_out() -> None:
    pool, net, target = make()
    first, second = await asyncio.gather(post(pool, target), post(pool, target))
    for resp in (first, second):
        await resp.read()
        resp.release()
    assert pool.idle_count(KEY) == 2
    again = await post(pool, target)
    await again.read()
    again.release()
    # the connection released last took the request
    assert [len(t.written) for t in net.transports] == [1, 2]


async def test_chunked_answer_streams_chunk_by_chunk() -> None:
    def handler(t: FakeTransport, data: bytes) -> None:
        t.reply(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, t.reply, b"6\r\n world\r\n")
        loop.call_later(0.02, t.reply, b"0\r\n\r\n")

    pool, _net, target = make(handler)
    resp = await post(pool, target)
    assert await drain(resp) == [b"hello", b" world"]
    resp.release()
    assert pool.idle_count(KEY) == 1


async def test_connection_close_answer_is_not_reused() -> None:
    pool, net, target = make(
        lambda t, d: t.reply(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
    )
    resp = await post(pool, target)
    assert await resp.read() == b"ok"
    resp.release()
    assert net.transports[0].closed and pool.idle_count(KEY) == 0
    resp = await post(pool, target)
    await resp.read()
    assert len(net.transports) == 2


async def test_answer_released_before_its_end_closes_the_connection() -> None:
    pool, net, target = make(
        lambda t, d: t.reply(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
    )
    resp = await post(pool, target)
    assert not resp.at_eof()
    resp.release()
    assert net.transports[0].closed and pool.idle_count(KEY) == 0


async def test_interim_1xx_answer_is_skipped() -> None:
    def handler(t: FakeTransport, data: bytes) -> None:
        t.reply(b"HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\n")
        asyncio.get_running_loop().call_later(0.01, t.reply, OK)

    pool, _net, target = make(handler)
    resp = await post(pool, target)
    assert "x-interim" not in resp.headers
    assert resp.status == 200 and await resp.read() == b'{"a":1}'


async def test_body_delimited_by_close_ends_at_the_close() -> None:
    def handler(t: FakeTransport, data: bytes) -> None:
        t.reply(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: 1\n\n")
        asyncio.get_running_loop().call_later(0.01, t.hang_up)

    pool, _net, target = make(handler)
    resp = await post(pool, target)
    assert await drain(resp) == [b"data: 1\n\n"]
    resp.release()
    assert pool.idle_count(KEY) == 0
    assert not _holds_its_parser(resp)


async def test_hang_up_mid_body_yields_what_came_then_fails() -> None:
    def handler(t: FakeTransport, data: bytes) -> None:
        t.reply(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
        asyncio.get_running_loop().call_later(0.01, t.hang_up, ConnectionResetError("reset"))

    pool, _net, target = make(handler)
    resp = await post(pool, target)
    got: list[bytes] = []
    with pytest.raises(ConnectionLost, match="mid-answer"):
        async for chunk in resp.iter_any():
            got.append(chunk)
    assert got == [b"abc"]


async def test_gzip_answer_is_decoded() -> None:
    packed = gzip.compress(b'{"hello":"world"}')
    head = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(packed)
    pool, _net, target = make(lambda t, d: t.reply(head + packed))
    resp = await post(pool, target)
    assert await resp.read() == b'{"hello":"world"}'


async def test_garbage_answer_is_connection_lost() -> None:
    pool, net, target = make(lambda t, d: t.reply(b"SSH-2.0-OpenSSH_9.6\r\n"))
    with pytest.raises(ConnectionLost, match="invalid HTTP answer"):
        await post(pool, target)
    assert net.transports[0].closed


async def test_bytes_after_the_answer_poison_the_connection() -> None:
    pool, net, target = make(lambda t, d: t.reply(OK + b"HTTP/1.1 200 OK\r\n"))
    resp = await post(pool, target)
    await resp.read()
    await asyncio.sleep(0)
    resp.release()
    assert net.transports[0].closed and pool.idle_count(KEY) == 0


# --- backpressure ---------------------------------------------------------------------


async def test_reading_pauses_above_the_high_water_mark_and_resumes_when_drained() -> None:
    piece = b"x" * 65536
    pieces = HIGH_WATER // len(piece) + 2
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (len(piece) * pieces)

    def handler(t: FakeTransport, data: bytes) -> None:
        t.reply(head)
        for _ in range(pieces - 1):
            t.reply(piece)

    pool, net, target = make(handler)
    resp = await post(pool, target)
    transport = net.transports[0]
    assert transport.paused
    first = await anext(resp.iter_any())
    assert len(first) == len(piece) * (pieces - 1) and not transport.paused
    transport.reply(piece)
    assert await resp.read() == piece


async def test_a_whole_body_larger_than_the_high_water_mark_is_read() -> None:
    # Reading pauses above HIGH_WATER; a whole-body read must drain as it waits or the
    # rest never arrives (it used to wait out the read timeout).
    piece = b"y" * 65536
    pieces = 4 * HIGH_WATER // len(piece)
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (len(piece) * pieces)

    def handler(t: FakeTransport, data: bytes) -> None:
        t.reply(head)

        def more(left: int) -> None:
            if t.paused:  # a real socket delivers nothing while paused
                asyncio.get_running_loop().call_later(0.001, more, left)
            elif left:
                t.reply(piece)
                asyncio.get_running_loop().call_soon(more, left - 1)

        more(pieces)

    pool, _net, target = make(handler)
    resp = await post(pool, target, read=2.0)
    body = await asyncio.wait_for(resp.read(), 5)
    assert len(body) == len(piece) * pieces
    resp.release()
    assert pool.idle_count(KEY) == 1


# --- stale connections ----------------------------------------------------------------


async def test_reused_connection_closed_without_an_answer_is_not_resent() -> None:
    # RFC 9112 9.3.1: the server may have read the POST and acted on it before closing;
    # re-sending it could run the same generation twice (docs/decisions.md).
    answered: list[FakeTransport] = []

    def handler(t: FakeTransport, data: bytes) -> None:
        if answered and t is answered[0]:
            t.hang_up()  # read the request, then closed without a byte
            return
        answered.append(t)
        t.reply(OK)

    pool, net, target = make(handler)
    resp = await post(pool, target)
    await resp.read()
    resp.release()
    with pytest.raises(ConnectionLost, match="not re-sent"):
        await post(pool, target)
    assert len(net.transports) == 1 and len(net.requests) == 2
    resp = await post(pool, target)  # the dead connection was not pooled again
    assert await resp.read() == b'{"a":1}' and len(net.transports) == 2


async def test_connection_closed_while_idle_is_skipped_not_written_to() -> None:
    pool, net, target = make()
    resp = await post(pool, target)
    await resp.read()
    resp.release()
    net.transports[0].hang_up()  # the server's keep-alive timeout, seen before we send
    resp = await post(pool, target)
    assert await resp.read() == b'{"a":1}'
    assert len(net.transports) == 2 and len(net.transports[0].written) == 1


def test_idle_connections_expire_before_common_servers_drop_them() -> None:
    # gunicorn closes idle connections after 2 s, uvicorn and Node after 5 s.
    assert Pool().idle_ttl < 2.0


async def test_reused_connection_failing_after_some_bytes_is_not_retried() -> None:
    calls: list[FakeTransport] = []

    def handler(t: FakeTransport, data: bytes) -> None:
        calls.append(t)
        if len(calls) == 1:
            t.reply(OK)
        else:
            t.reply(b"HTTP/1.1 200")
            t.hang_up()

    pool, net, target = make(handler)
    resp = await post(pool, target)
    await resp.read()
    resp.release()
    with pytest.raises(ConnectionLost):
        await post(pool, target)
    assert len(net.requests) == 2


async def test_idle_connections_past_their_ttl_are_not_reused() -> None:
    pool, net, target = make(idle_ttl=0.0)
    for _ in range(2):
        resp = await post(pool, target)
        await resp.read()
        resp.release()
    assert len(net.transports) == 2 and net.transports[0].closed


async def test_idle_connections_beyond_max_idle_are_closed() -> None:
    pool, net, target = make(max_idle=1)
    answers = await asyncio.gather(post(pool, target), post(pool, target))
    for resp in answers:
        await resp.read()
        resp.release()
    assert pool.idle_count(KEY) == 1
    assert [t.closed for t in net.transports] == [False, True]
    await pool.aclose()
    assert net.transports[0].closed


# --- timeouts and connect failures -------------------------------------------------


async def test_silence_before_the_answer_is_a_read_timeout() -> None:
    pool, net, target = make(lambda t, d: None)
    with pytest.raises(ReadTimeout):
        await post(pool, target, read=0.05)
    assert net.transports[0].closed


async def test_silence_mid_stream_is_a_read_timeout() -> None:
    def handler(t: FakeTransport, data: bytes) -> None:
        t.reply(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n")

    pool, _net, target = make(handler)
    resp = await post(pool, target, read=0.05)
    chunks = resp.iter_any()
    assert await anext(chunks) == b"a"
    with pytest.raises(ReadTimeout):
        await anext(chunks)


async def test_a_drip_fed_answer_ends_at_the_total_timeout() -> None:
    def handler(t: FakeTransport, data: bytes) -> None:
        t.reply(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")

        def drip() -> None:
            if not t.closed:
                t.reply(b"1\r\na\r\n")
                asyncio.get_running_loop().call_later(0.01, drip)

        drip()

    pool, net, target = make(handler)
    resp = await pool.post(target, b"{}", connect_timeout=1, read_timeout=1, total_timeout=0.2)
    with pytest.raises(DeadlineExceeded):
        await asyncio.wait_for(drain(resp), 5)
    assert net.transports[0].closed


async def test_slow_connect_is_a_connect_timeout() -> None:
    pool, net, target = make()
    net.hang = True
    with pytest.raises(ConnectTimeout):
        await pool.post(target, b"", connect_timeout=0.05, read_timeout=5)


async def test_refused_connect_carries_the_os_error() -> None:
    pool, net, target = make()
    net.refuse = ConnectionRefusedError(111, "Connection refused")
    with pytest.raises(ConnectFailed) as info:
        await post(pool, target)
    assert isinstance(info.value.os_error, ConnectionRefusedError)


async def test_endless_upstream_headers_are_cut_off() -> None:
    def handler(t: FakeTransport, data: bytes) -> None:
        t.reply(b"HTTP/1.1 200 OK\r\nx-big: ")
        for _ in range(MAX_HEAD // 65536 + 2):
            t.reply(b"a" * 65536)

    pool, net, target = make(handler)
    with pytest.raises(ConnectionLost, match="headers passed"):
        await post(pool, target)
    assert net.transports[0].closed
