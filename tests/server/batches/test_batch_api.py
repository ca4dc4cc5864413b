"""The Batch API through the official openai SDK against a live gateway (in process, on a
real socket), over a fake upstream: create -> completed with one Batch output line per
input line; /v1/messages and /v1/responses batches (translated to the upstream's
dialect); a batch with bad lines (failed, each line named, nothing run); cancel mid-run
(cancelled, finished lines kept); expiry with a short window (``batches.completion_window``);
pagination; another key's batch is a 404; the usage rows carry the batch id.

The kill -9 and two-process tests are in test_batch_durability.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from interlingua.config import parse_config
from interlingua.server import create_app
from interlingua.upstreams.fake import FakeUpstream

from ...live_server import live_server

KEY_A = "sk-batches-team-a-0123456789"
KEY_B = "sk-batches-team-b-abcdefghij"
#: the fields of the API's ``batch`` object (openai/types/batch.py)
BATCH_FIELDS = {
    "id", "object", "endpoint", "model", "errors", "input_file_id", "completion_window",
    "status", "output_file_id", "error_file_id", "created_at", "in_progress_at",
    "expires_at", "finalizing_at", "completed_at", "failed_at", "expired_at",
    "cancelling_at", "cancelled_at", "request_counts", "usage", "metadata",
}  # fmt: skip
ENDED = ("completed", "failed", "expired", "cancelled")


@dataclass
class Served:
    url: str
    fake: FakeUpstream
    tmp: Path

    def client(self, key: str = KEY_A) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key=key, max_retries=0)


@contextlib.contextmanager
def gateway(
    tmp: Path, *, delay: float = 0.0, limits: dict[str, Any] | None = None, **batches: Any
) -> Iterator[Served]:
    fake = FakeUpstream("fake", wire="openai", delay=delay)
    raw: dict[str, Any] = {
        "upstreams": {"fake": {"kind": "fake"}},
        "models": [{"name": "m", "upstream": "fake"}, {"name": "secret", "upstream": "fake"}],
        "keys": [
            {"name": "team-a", "key_sha256": hashlib.sha256(KEY_A.encode()).hexdigest(),
             "models": ["m"], **({"limits": limits} if limits else {})},
            {"name": "team-b", "key_sha256": hashlib.sha256(KEY_B.encode()).hexdigest()},
        ],
        "usage": {"url": f"sqlite://{tmp}/usage.db"},
        "batches": {"url": f"sqlite://{tmp}/batches.db", "lease": "3s", **batches},
    }  # fmt: skip
    app = create_app(parse_config(raw), upstreams={"fake": fake})
    with live_server(app) as url:
        yield Served(url, fake, tmp)


def chat_line(i: int, url: str = "/v1/chat/completions", **extra: Any) -> dict[str, Any]:
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": f"q{i}"}]}
    return {"custom_id": f"r{i}", "method": "POST", "url": url, "body": body, **extra}


def upload(client: openai.OpenAI, lines: list[Any]) -> str:
    data = b"".join(
        (line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines
    )
    return client.files.create(file=("in.jsonl", io.BytesIO(data)), purpose="batch").id


def wait(client: openai.OpenAI, batch_id: str, until: tuple[str, ...] = ENDED) -> Any:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if batch.status in until:
            return batch
        time.sleep(0.05)
    raise AssertionError(f"batch still {batch.status}")


def output(client: openai.OpenAI, file_id: str | None) -> list[dict[str, Any]]:
    if file_id is None:
        return []
    return [json.loads(line) for line in client.files.content(file_id).text.splitlines()]


def test_a_chat_batch_completes_with_one_line_per_request(tmp_path: Path) -> None:
    with gateway(tmp_path) as served:
        client = served.client()
        file_id = upload(client, [chat_line(i) for i in range(25)])
        created = client.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h",
            metadata={"job": "nightly"},
        )  # fmt: skip
        assert created.id.startswith("batch_") and created.object == "batch"
        assert created.status == "validating" and created.metadata == {"job": "nightly"}
        assert set(created.model_dump()) == BATCH_FIELDS
        batch = wait(client, created.id)
        assert batch.status == "completed", batch
        assert batch.request_counts.model_dump() == {"total": 25, "completed": 25, "failed": 0}
        assert batch.in_progress_at and batch.finalizing_at and batch.completed_at
        assert batch.expires_at == batch.created_at + 24 * 3600
        assert batch.error_file_id is None and batch.model == "m"
        assert batch.usage is not None and batch.usage.output_tokens > 0
        lines = output(client, batch.output_file_id)
        assert [line["custom_id"] for line in lines] == [f"r{i}" for i in range(25)]
        for i, line in enumerate(lines):
            assert line["error"] is None and line["response"]["status_code"] == 200
            assert line["response"]["body"]["object"] == "chat.completion"
            assert line["response"]["body"]["choices"][0]["message"]["content"] == f"echo: q{i}"
        meta = client.files.retrieve(batch.output_file_id)
        assert meta.purpose == "batch_output"
    # the usage log: one row per line, under the batch's key, naming the batch
    rows = (
        sqlite3.connect(tmp_path / "usage.db")
        .execute("SELECT key_name, batch_id, status FROM interlingua_usage")
        .fetchall()
    )
    assert sorted(rows) == [("team-a", created.id, 200)] * 25


@pytest.mark.parametrize(
    ("endpoint", "make"),
    [
        ("/v1/messages", lambda i: {"model": "m", "max_tokens": 8,
                                     "messages": [{"role": "user", "content": f"q{i}"}]}),
        ("/v1/responses", lambda i: {"model": "m", "max_output_tokens": 16, "input": f"q{i}"}),
    ],
)  # fmt: skip
def test_messages_and_responses_batches_are_translated(
    tmp_path: Path, endpoint: str, make: Any
) -> None:
    with gateway(tmp_path) as served:
        client = served.client()
        lines = [{"custom_id": f"r{i}", "method": "POST", "url": endpoint, "body": make(i)}
                 for i in range(3)]  # fmt: skip
        batch = client.batches.create(
            input_file_id=upload(client, lines), endpoint=endpoint, completion_window="24h"
        )
        batch = wait(client, batch.id)
        assert batch.status == "completed"
        got = output(client, batch.output_file_id)
        kind = "message" if endpoint == "/v1/messages" else "response"
        assert [line["response"]["body"]["type" if kind == "message" else "object"]
                for line in got] == [kind] * 3  # fmt: skip
        # the fake spoke Chat Completions: each line was translated there and back
        assert len(served.fake.wire_requests) == 3
        assert all("messages" in body for body in served.fake.wire_requests)


def test_a_batch_with_bad_lines_fails_naming_each_and_runs_nothing(tmp_path: Path) -> None:
    with gateway(tmp_path) as served:
        client = served.client()
        lines: list[Any] = [
            chat_line(0),
            b"{not json",
            {"method": "POST", "url": "/v1/chat/completions", "body": {"model": "m"}},
            chat_line(0),  # the same custom_id again
            chat_line(4, method="GET"),
            chat_line(5, url="/v1/embeddings"),
            chat_line(6, url="/v1/messages"),
            {**chat_line(7), "body": {"model": "secret", "messages": []}},
        ]
        batch = client.batches.create(
            input_file_id=upload(client, lines), endpoint="/v1/chat/completions",
            completion_window="24h",
        )  # fmt: skip
        batch = wait(client, batch.id)
        assert batch.status == "failed" and batch.failed_at
        errors = batch.errors.data
        assert [e.line for e in errors] == [2, 3, 4, 5, 6, 7, 8]
        codes = {e.line: e.code for e in errors}
        assert codes[2] == "invalid_json" and codes[4] == "duplicate_custom_id"
        assert codes[7] == "mismatched_endpoint" and codes[8] == "model_not_allowed"
        assert served.fake.wire_requests == []  # nothing ran
        assert batch.output_file_id is None


def test_refused_creates_name_what_is_accepted(tmp_path: Path) -> None:
    with gateway(tmp_path) as served:
        client = served.client()
        file_id = upload(client, [chat_line(0)])
        for params, param in [
            ({"completion_window": "1h"}, "completion_window"),
            ({"endpoint": "/v1/embeddings"}, "endpoint"),
            ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
            ({"metadata": {"k": "v" * 513}}, "metadata"),
        ]:
            args = {"input_file_id": file_id, "endpoint": "/v1/chat/completions",
                    "completion_window": "24h", **params}  # fmt: skip
            with pytest.raises(openai.BadRequestError) as refused:
                client.batches.create(**args)
            assert refused.value.body["param"] == param  # type: ignore[index]
        with pytest.raises(openai.NotFoundError):
            client.batches.create(
                input_file_id="file-nope", endpoint="/v1/chat/completions",
                completion_window="24h",
            )  # fmt: skip


def test_cancel_mid_run_keeps_what_finished(tmp_path: Path) -> None:
    with gateway(tmp_path, delay=0.2, concurrency=2) as served:
        client = served.client()
        batch = client.batches.create(
            input_file_id=upload(client, [chat_line(i) for i in range(40)]),
            endpoint="/v1/chat/completions", completion_window="24h",
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while client.batches.retrieve(batch.id).request_counts.completed < 4:  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            time.sleep(0.05)
        cancelling = client.batches.cancel(batch.id)
        assert cancelling.status == "cancelling" and cancelling.cancelling_at
        batch = wait(client, batch.id)
        assert batch.status == "cancelled" and batch.cancelled_at
        done = batch.request_counts.completed
        assert 4 <= done < 40
        lines = output(client, batch.output_file_id)
        assert len(lines) == done and len({line["custom_id"] for line in lines}) == done
        failed = client.batches.create(
            input_file_id=upload(client, [b"oops"]), endpoint="/v1/chat/completions",
            completion_window="24h",
        )  # fmt: skip
        assert wait(client, failed.id).status == "failed"
        with pytest.raises(openai.ConflictError):  # (it ended otherwise)
            client.batches.cancel(failed.id)


def test_a_batch_expires_at_its_windows_end_keeping_what_finished(tmp_path: Path) -> None:
    with gateway(tmp_path, delay=0.3, concurrency=1, completion_window="2s") as served:
        client = served.client()
        batch = client.batches.create(
            input_file_id=upload(client, [chat_line(i) for i in range(30)]),
            endpoint="/v1/chat/completions", completion_window="24h",
        )  # fmt: skip
        assert batch.expires_at == batch.created_at + 2
        batch = wait(client, batch.id)
        assert batch.status == "expired" and batch.expired_at
        done = batch.request_counts.completed
        assert 1 <= done < 30
        finished = output(client, batch.output_file_id)
        expired = output(client, batch.error_file_id)
        assert len(finished) == done
        assert {line["error"]["code"] for line in expired} == {"batch_expired"}
        ids = [line["custom_id"] for line in finished + expired]
        assert sorted(ids) == sorted(f"r{i}" for i in range(30))


def test_pages_and_owners(tmp_path: Path) -> None:
    with gateway(tmp_path) as served:
        client = served.client()
        file_id = upload(client, [chat_line(0)])
        made = [
            client.batches.create(
                input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
            ).id
            for _ in range(5)
        ]
        first = client.batches.list(limit=2)
        assert [b.id for b in first.data] == made[::-1][:2] and first.has_more
        rest = client.batches.list(limit=2, after=first.data[-1].id)
        assert [b.id for b in rest.data] == made[::-1][2:4]
        assert [b.id for b in client.batches.list(limit=2)] == made[::-1]  # (auto-paging)
        other = served.client(KEY_B)
        for call in (lambda: other.batches.retrieve(made[0]),
                     lambda: other.batches.cancel(made[0])):  # fmt: skip
            with pytest.raises(openai.NotFoundError):
                call()
        assert other.batches.list().data == []
        with pytest.raises(openai.NotFoundError):
            other.batches.create(
                input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
            )
        for batch_id in made:
            wait(client, batch_id)


def test_a_batch_over_the_bundled_local_model(tmp_path: Path) -> None:
    raw = {
        "upstreams": {"local": {"kind": "local", "bundled": "smollm2"}},
        "models": [{"name": "smollm2", "upstream": "local"}],
        "usage": False,
        "batches": {"url": f"sqlite://{tmp_path}/batches.db"},
    }
    with live_server(create_app(parse_config(raw))) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
        lines = [
            {"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions",
             "body": {"model": "smollm2", "max_tokens": 4,
                      "messages": [{"role": "user", "content": f"Say {i}."}]}}
            for i in range(3)
        ]  # fmt: skip
        batch = client.batches.create(
            input_file_id=upload(client, lines), endpoint="/v1/chat/completions",
            completion_window="24h",
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while (batch := client.batches.retrieve(batch.id)).status not in ENDED:
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert batch.status == "completed"
        assert batch.request_counts.model_dump() == {"total": 3, "completed": 3, "failed": 0}
        got = output(client, batch.output_file_id)
        assert sorted(line["custom_id"] for line in got) == ["q0", "q1", "q2"]
        for line in got:  # (sampled text is never asserted: only its shape)
            body = line["response"]["body"]
            assert body["object"] == "chat.completion" and body["usage"]["completion_tokens"] > 0


def test_the_cli_lists_shows_and_cancels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from interlingua.cli import main

    config = tmp_path / "gateway.yaml"
    config.write_text(json.dumps({"batches": {"url": f"sqlite://{tmp_path}/batches.db"}}))
    with gateway(tmp_path, delay=0.5, concurrency=1) as served:
        client = served.client()
        file_id = upload(client, [chat_line(i) for i in range(20)])
        done = client.batches.create(
            input_file_id=upload(client, [chat_line(0)]), endpoint="/v1/chat/completions",
            completion_window="24h",
        )  # fmt: skip
        wait(client, done.id)
        running = client.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        wait(client, running.id, until=("in_progress",))
        capsys.readouterr()
        assert main(["batches", "list", "-c", str(config), "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)
        assert [(b["id"], b["owner"]) for b in listed] == [
            (running.id, "team-a"), (done.id, "team-a"),
        ]  # fmt: skip
        assert main(["batches", "list", "-c", str(config)]) == 0
        table = capsys.readouterr().out
        assert running.id in table and "in_progress" in table and "1/0/1" in table
        assert main(["batches", "show", done.id, "-c", str(config), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["status"] == "completed"
        assert main(["batches", "cancel", running.id, "-c", str(config)]) == 0
        assert "cancelling" in capsys.readouterr().out
        assert wait(client, running.id).status == "cancelled"  # (the executor's next turn)
        assert main(["batches", "cancel", done.id, "-c", str(config)]) == 1
        assert main(["batches", "show", "batch_nope", "-c", str(config)]) == 1


def test_a_keys_limit_makes_lines_wait_not_fail(tmp_path: Path) -> None:
    # one request of the key's at a time, four lines of the batch at once: three of every
    # four tries are refused with 429 (Retry-After 1 s), and wait their turn
    with gateway(tmp_path, delay=0.1, limits={"max_concurrency": 1}, concurrency=4) as served:
        client = served.client()
        batch = client.batches.create(
            input_file_id=upload(client, [chat_line(i) for i in range(4)]),
            endpoint="/v1/chat/completions", completion_window="24h",
        )  # fmt: skip
        batch = wait(client, batch.id)
        assert batch.status == "completed"
        assert batch.request_counts.model_dump() == {"total": 4, "completed": 4, "failed": 0}
        assert served.fake.max_in_flight == 1
    rows = (
        sqlite3.connect(tmp_path / "usage.db")
        .execute("SELECT status, batch_id FROM interlingua_usage")
        .fetchall()
    )
    assert sorted(r[0] for r in rows if r[0] == 200) == [200] * 4
    assert {r[0] for r in rows} == {200, 429} and {r[1] for r in rows} == {batch.id}


def test_batch_lines_are_background_work_and_interactive_requests_are_not(
    tmp_path: Path,
) -> None:
    from interlingua.limits import BACKGROUND
    from interlingua.upstreams.fake import echo_response

    seen: list[bool] = []

    def noting(request: Any) -> Any:
        seen.append(BACKGROUND.get())  # (what the upstream limiter reads)
        return echo_response(request)

    with gateway(tmp_path) as served:
        client = served.client()
        served.fake.enqueue(noting)
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        served.fake.enqueue(noting)
        batch = client.batches.create(
            input_file_id=upload(client, [chat_line(0)]), endpoint="/v1/chat/completions",
            completion_window="24h",
        )  # fmt: skip
        assert wait(client, batch.id).status == "completed"
    assert seen == [False, True]


def test_a_stopped_gateways_batch_resumes_and_one_whose_input_was_deleted_fails(
    tmp_path: Path,
) -> None:
    import asyncio

    from interlingua.batches import open_batch_store

    with gateway(tmp_path, delay=0.2, concurrency=1) as served:
        client = served.client()
        file_id = upload(client, [chat_line(i) for i in range(30)])
        batch = client.batches.create(
            input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        deadline = time.monotonic() + 20
        while client.batches.retrieve(batch.id).request_counts.completed < 2:  # type: ignore[union-attr]
            assert time.monotonic() < deadline
            time.sleep(0.05)
    # stopped cleanly (its lease given up); the input deleted before the next one starts

    async def delete() -> None:
        store = open_batch_store(f"sqlite://{tmp_path}/batches.db")
        await store.open()
        assert await store.files.delete(file_id, "team-a")
        await store.aclose()

    asyncio.run(delete())
    with gateway(tmp_path) as served:
        client = served.client()
        ended = wait(client, batch.id)
        assert ended.status == "failed" and ended.failed_at
        assert [e.code for e in ended.errors.data] == ["file_not_found"]  # type: ignore[union-attr]
        kept = output(client, ended.output_file_id)
        assert 2 <= len(kept) == ended.request_counts.completed < 30  # type: ignore[union-attr]


def test_a_retryable_upstream_failure_is_tried_again_and_a_lasting_one_is_the_lines_result(
    tmp_path: Path,
) -> None:
    from interlingua.errors import InvalidRequestError, UpstreamError

    with gateway(tmp_path, concurrency=1) as served:
        client = served.client()
        # the first line: two 502s (tried again, after 0.5 s then 1 s), then a 400 (its
        # result: not worth another try); the second line: an answer
        for _ in range(2):
            served.fake.enqueue(UpstreamError("the upstream is having a moment", status=502))
        served.fake.enqueue(InvalidRequestError("no such thing", param="messages"))
        batch = client.batches.create(
            input_file_id=upload(client, [chat_line(0), chat_line(1)]),
            endpoint="/v1/chat/completions", completion_window="24h",
        )  # fmt: skip
        batch = wait(client, batch.id)
        assert batch.status == "completed"
        assert batch.request_counts.model_dump() == {"total": 2, "completed": 1, "failed": 1}
        (ok,) = output(client, batch.output_file_id)
        (failed,) = output(client, batch.error_file_id)
        assert failed["custom_id"] == "r0" and failed["response"]["status_code"] == 400
        assert failed["error"]["message"] == "no such thing"
        assert ok["custom_id"] == "r1" and ok["response"]["status_code"] == 200
        assert len(served.fake.wire_requests) == 4
