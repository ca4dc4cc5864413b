"""Anthropic's Message Batches through the official anthropic SDK against a live gateway,
over an OpenAI-compatible fake upstream (so every request is translated): create ->
ended -> results carrying Anthropic ``message`` objects (an upstream 400 on one request:
``errored``); pagination; cancel (``canceled`` requests); delete (refused while running);
another key's batch is a 404; bad requests refused naming their index; expiry; the
batch's files stay out of the Files API and the OpenAI batches out of this one.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from interlingua.errors import InvalidRequestError

from .test_batch_api import KEY_A, KEY_B, Served, gateway


class Clients:
    """The SDK clients of one test, closed with its gateway (no socket left to the GC)."""

    def __init__(self, served: Served, stack: contextlib.ExitStack) -> None:
        self.served, self.stack = served, stack

    def __call__(self, key: str = KEY_A) -> anthropic.Anthropic:
        made = anthropic.Anthropic(base_url=self.served.url, api_key=key, max_retries=0)
        return self.stack.enter_context(made)

    def openai(self) -> openai.OpenAI:
        return self.stack.enter_context(self.served.client())


@contextlib.contextmanager
def serving(tmp: Path, **options: Any) -> Iterator[tuple[Served, Clients]]:
    with gateway(tmp, **options) as served, contextlib.ExitStack() as stack:
        yield served, Clients(served, stack)


def request(i: int, model: str = "m", **params: Any) -> dict[str, Any]:
    body = {"model": model, "max_tokens": 8, "messages": [{"role": "user", "content": f"q{i}"}]}
    return {"custom_id": f"q{i}", "params": {**body, **params}}


def ended(a: anthropic.Anthropic, batch_id: str) -> Any:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        batch = a.messages.batches.retrieve(batch_id)
        if batch.processing_status == "ended":
            return batch
        time.sleep(0.05)
    raise AssertionError(f"batch still {batch.processing_status}")


def results(a: anthropic.Anthropic, batch_id: str) -> dict[str, Any]:
    return {r.custom_id: r.result for r in a.messages.batches.results(batch_id)}


def test_a_batch_ends_with_a_message_per_request_and_an_upstream_400_errored(
    tmp_path: Path,
) -> None:
    with serving(tmp_path, concurrency=1) as (served, client):
        a = client()
        served.fake.enqueue(InvalidRequestError("no such thing", param="messages"))
        created = a.messages.batches.create(requests=[request(i) for i in range(5)])  # type: ignore[misc]
        assert created.id.startswith("msgbatch_") and created.type == "message_batch"
        assert created.processing_status == "in_progress" and created.results_url is None
        assert created.request_counts.processing == 5 and created.ended_at is None
        assert created.expires_at > created.created_at
        batch = ended(a, created.id)
        assert batch.ended_at is not None and batch.cancel_initiated_at is None
        assert batch.request_counts.model_dump() == {
            "processing": 0, "succeeded": 4, "errored": 1, "canceled": 0, "expired": 0,
        }  # fmt: skip
        assert batch.results_url == f"{served.url}/v1/messages/batches/{batch.id}/results"
        got = results(a, batch.id)
        assert sorted(got) == [f"q{i}" for i in range(5)]
        (errored,) = [r for r in got.values() if r.type == "errored"]
        assert errored.error.type == "error"
        assert errored.error.error.type == "invalid_request_error"
        assert errored.error.error.message.startswith("no such thing")
        for result in got.values():
            if result.type == "succeeded":
                message = result.message
                assert message.type == "message" and message.role == "assistant"
                assert message.content and message.content[0].type == "text"
                assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0
        # translated: the upstream heard the OpenAI dialect
        assert all("messages" in body for body in served.fake.wire_requests)
        # the batch's files are not the Files API's: not listed, and 404s there
        openai_client = client.openai()
        assert openai_client.files.list().data == []
        with sqlite3.connect(served.tmp / "batches.db") as db:
            (names,) = db.execute(
                "SELECT input_file_id, output_file_id, error_file_id FROM interlingua_batches"
            ).fetchall()
        assert all(names)
        for file_id in names:
            with pytest.raises(openai.NotFoundError):
                openai_client.files.retrieve(file_id)
            with pytest.raises(openai.NotFoundError):
                openai_client.files.content(file_id)
            with pytest.raises(openai.NotFoundError):
                openai_client.files.delete(file_id)
        with pytest.raises(openai.NotFoundError):  # (nor an OpenAI batch's input)
            openai_client.batches.create(
                input_file_id=names[0], endpoint="/v1/messages", completion_window="24h"
            )
        assert len(results(a, batch.id)) == 5  # (all still there)


def test_pages_owners_and_delete(tmp_path: Path) -> None:
    with serving(tmp_path) as (_, client):
        a, b = client(), client(KEY_B)
        ids = [a.messages.batches.create(requests=[request(i)]).id for i in range(5)]  # type: ignore[misc]
        newest_first = ids[::-1]
        page = a.messages.batches.list(limit=2)
        assert [x.id for x in page.data] == newest_first[:2] and page.has_more
        assert page.first_id == newest_first[0] and page.last_id == newest_first[1]
        assert [x.id for x in a.messages.batches.list(limit=1000)] == newest_first  # auto-paged
        after = a.messages.batches.list(limit=2, after_id=newest_first[1])
        assert [x.id for x in after.data] == newest_first[2:4] and after.has_more
        before = a.messages.batches.list(limit=2, before_id=newest_first[3])
        assert [x.id for x in before.data] == newest_first[1:3] and before.has_more
        tail = a.messages.batches.list(limit=3, after_id=newest_first[1])
        assert [x.id for x in tail.data] == newest_first[2:] and not tail.has_more
        # another key sees none of them; its id is the same 404 as an unknown one
        assert b.messages.batches.list().data == []
        for bad in (ids[0], "msgbatch_nothing"):
            with pytest.raises(anthropic.NotFoundError) as caught:
                b.messages.batches.retrieve(bad)
            assert caught.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
        with pytest.raises(anthropic.NotFoundError):
            b.messages.batches.delete(ids[0])
        # nor does the OpenAI Batch API list or show them
        assert client.openai().batches.list().data == []
        with pytest.raises(openai.NotFoundError):
            client.openai().batches.retrieve(ids[0])
        ended(a, ids[0])
        deleted = a.messages.batches.delete(ids[0])
        assert deleted.id == ids[0] and deleted.type == "message_batch_deleted"
        with pytest.raises(anthropic.NotFoundError):
            a.messages.batches.retrieve(ids[0])


def test_cancel_keeps_what_finished_and_the_rest_are_canceled(tmp_path: Path) -> None:
    with serving(tmp_path, delay=0.1, concurrency=1) as (served, client):
        a = client()
        batch = a.messages.batches.create(requests=[request(i) for i in range(40)])  # type: ignore[misc]
        with pytest.raises(anthropic.BadRequestError):  # (still running)
            a.messages.batches.delete(batch.id)
        early = httpx.get(
            f"{served.url}/v1/messages/batches/{batch.id}/results", headers={"x-api-key": KEY_A}
        )  # (no results yet)
        assert early.status_code == 400 and early.json()["type"] == "error"
        deadline = time.monotonic() + 20
        while len(served.fake.wire_requests) < 3:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        canceling = a.messages.batches.cancel(batch.id)
        assert canceling.processing_status in ("canceling", "ended")
        assert canceling.cancel_initiated_at is not None
        batch = ended(a, batch.id)
        counts = batch.request_counts
        assert counts.canceled > 0 and counts.succeeded >= 2
        assert counts.succeeded + counts.canceled == 40 and counts.processing == 0
        got = results(a, batch.id)
        assert len(got) == 40
        kinds = [r.type for r in got.values()]
        assert kinds.count("canceled") == counts.canceled
        assert kinds.count("succeeded") == counts.succeeded
        assert a.messages.batches.cancel(batch.id).processing_status == "ended"
        assert a.messages.batches.delete(batch.id).id == batch.id


def test_a_batch_expires_at_its_windows_end(tmp_path: Path) -> None:
    with serving(tmp_path, delay=0.3, concurrency=1, completion_window="2s") as (_, client):
        a = client()
        batch = ended(a, a.messages.batches.create(requests=[request(i) for i in range(30)]).id)  # type: ignore[misc]
        counts = batch.request_counts
        assert counts.expired > 0 and counts.succeeded >= 1 and counts.errored == 0
        assert counts.expired + counts.succeeded == 30
        kinds = [r.type for r in results(a, batch.id).values()]
        assert kinds.count("expired") == counts.expired


@pytest.mark.parametrize(
    ("requests", "named"),
    [
        ([], "requests"),
        ([request(0), request(0)], "requests.1: custom_id 'q0'"),
        ([request(0), {"custom_id": "bad id!", "params": request(1)["params"]}], "requests.1"),
        ([request(0), request(1), {"custom_id": "x", "params": {"model": "m"}}], "requests.2"),
        ([request(0, messages=[{"role": "bot", "content": "hi"}])], "requests.0: params."),
        ([request(0, stream=True)], "requests.0: params.stream"),
        ([request(0, model="secret")], "requests.0: params.model"),
    ],
)
def test_bad_requests_are_refused_naming_the_index(
    tmp_path: Path, requests: list[Any], named: str
) -> None:
    with serving(tmp_path) as (served, client):
        a = client()
        with pytest.raises(anthropic.BadRequestError) as caught:
            a.messages.batches.create(requests=requests)
        error = caught.value.body["error"]  # type: ignore[index]
        assert error["type"] == "invalid_request_error" and error["message"].startswith(named)
        assert a.messages.batches.list().data == [] and served.fake.wire_requests == []
        with pytest.raises(anthropic.AuthenticationError):
            client("sk-wrong").messages.batches.list()
