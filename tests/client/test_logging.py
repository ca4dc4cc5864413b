"""What the client logs: the first retry at DEBUG (routine), every later one and a call
that fails for good at WARNING, naming the request id, the status and the attempts; to
the ``logger=`` given, by default ``interlingua.client``."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from interlingua.client import AsyncClient, BadRequestError, Client, InternalServerError

from .conftest import FakeServer, Reply, error_body, openai_body


async def instant(_: float) -> None:
    """No waiting between retries."""


def client(server: FakeServer, **kwargs: Any) -> AsyncClient:
    c = AsyncClient(server.url + "/v1", model="m", **kwargs)
    c._sleep = instant
    return c


def failing(status: int = 503) -> Reply:
    return Reply(error_body("busy", "overloaded_error"), status=status)


def lines(
    caplog: pytest.LogCaptureFixture, name: str = "interlingua.client"
) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == name]


async def test_the_first_retry_is_routine_later_ones_warn(
    server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "interlingua.client")
    server.push(failing(), failing(), failing(), Reply(openai_body("ok")))
    async with client(server, max_retries=3) as c:
        assert (await c.chat("q")).text == "ok"
    logged = lines(caplog)
    assert [level for level, _ in logged] == [logging.DEBUG, logging.WARNING, logging.WARNING]
    second = logged[1][1]
    assert "retry 2 of 3" in second and "HTTP 503" in second and "req_2" in second
    assert "req_3" in logged[2][1]


async def test_a_call_that_fails_for_good_warns_once(
    server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, "interlingua.client")
    server.push(failing(), failing(), failing())
    async with client(server, max_retries=2) as c:
        with pytest.raises(InternalServerError):
            await c.chat("q")
    warnings = [m for level, m in lines(caplog) if level == logging.WARNING]
    assert len(warnings) == 2  # the second retry, then the failure
    final = warnings[-1]
    assert "failed after 3 attempts" in final and "HTTP 503" in final and "req_3" in final


async def test_an_error_not_retried_warns_with_one_attempt(
    server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.push(Reply(error_body("no such field"), status=400))
    async with client(server) as c:
        with pytest.raises(BadRequestError):
            await c.chat("q")
    (level, message), *rest = lines(caplog)
    assert level == logging.WARNING and not rest
    assert "failed after 1 attempt " in message and "HTTP 400" in message
    assert "req_1" in message and "no such field" in message


async def test_a_caller_that_logs_its_own_failures_can_say_so(
    server: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.push(Reply(error_body("nope"), status=400))
    async with client(server) as c:
        with pytest.raises(BadRequestError):
            await c.send_raw({"model": "m", "messages": []}, log_failure=False)
    assert lines(caplog) == []


async def test_the_logger_argument(server: FakeServer, caplog: pytest.LogCaptureFixture) -> None:
    mine = logging.getLogger("my.pipeline")
    server.push(Reply(error_body("bad"), status=400))
    async with client(server, logger=mine) as c:
        with pytest.raises(BadRequestError):
            await c.chat("q")
    assert lines(caplog) == []
    assert [level for level, _ in lines(caplog, "my.pipeline")] == [logging.WARNING]


def test_the_sync_client_takes_it_too(server: FakeServer, caplog: pytest.LogCaptureFixture) -> None:
    server.push(Reply(error_body("bad"), status=400))
    mine = logging.getLogger("my.sync")
    with Client(server.url + "/v1", model="m", logger=mine) as c, pytest.raises(BadRequestError):
        c.chat("q")
    assert len(lines(caplog, "my.sync")) == 1
