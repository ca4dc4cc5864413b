"""Batch lines with ``url: /v1/responses``: sent as they are to a Responses server,
translated for the others, answered in the OpenAI Batch output shape with the Responses
``response`` object as ``response.body``, and resumable like any line.

Against the fake server of conftest.py, then end to end through a live gateway whose
upstreams are scripted fakes speaking the Responses API (passthrough) and Chat
Completions (translation).
"""

from __future__ import annotations

import io
import signal
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from interlingua.batch import BatchOptions, BatchRunner
from interlingua.batch.runner import make_client
from interlingua.config import parse_config
from interlingua.server import create_app
from interlingua.upstreams.fake import FakeUpstream

from ..live_server import live_server
from .conftest import FakeChatServer, read_output, responses_answer, write_jsonl
from .test_command import N, assert_exactly_once, command, start, wait_for_lines
from .test_runner import run


def responses_line(cid: str, text: str | None = None, **body: Any) -> dict[str, Any]:
    body = {"model": "m", "input": text if text is not None else cid, **body}
    return {"custom_id": cid, "method": "POST", "url": "/v1/responses", "body": body}


async def test_responses_lines_are_sent_as_they_are_to_a_responses_server(
    server: FakeChatServer, tmp_path: Path
) -> None:
    rows = [
        responses_line("r1", stream=True, instructions="be brief", store=True),
        responses_line("r2", [{"role": "user", "content": [{"type": "input_text", "text": "r2"}]}]),
    ]
    await run(server, tmp_path, rows, dialect="responses", max_tokens=40, concurrency=1)
    assert server.paths == ["/v1/responses", "/v1/responses"]
    first, second = server.bodies
    # As written, but not streamed (batch output is one body per line), and the default
    # limit in the Responses field; the line's own `store` is its business.
    assert first == {
        "model": "m", "input": "r1", "instructions": "be brief", "store": True,
        "max_output_tokens": 40,
    }  # fmt: skip
    assert second["input"][0]["content"][0]["text"] == "r2"
    raw = (tmp_path / "out.jsonl").read_bytes()
    assert orjson.dumps(responses_answer("echo: r1")) in raw  # the server's body, byte for byte
    out = read_output(tmp_path / "out.jsonl")
    assert [r["response"]["status_code"] for r in out] == [200, 200]
    assert all(r["error"] is None and r["id"].startswith("batch_req_") for r in out)


async def test_other_lines_are_translated_for_a_responses_server(
    server: FakeChatServer, tmp_path: Path
) -> None:
    chat = {
        "custom_id": "c1",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": "g", "messages": [{"role": "user", "content": "c1"}], "max_tokens": 30},
    }
    rows = [chat, {"custom_id": "s1", "prompt": "s1"}]
    await run(server, tmp_path, rows, dialect="responses", concurrency=1)
    assert server.paths == ["/v1/responses", "/v1/responses"]
    sent = server.bodies[0]
    assert sent["input"] == [{"type": "message", "role": "user", "content": "c1"}]
    assert sent["max_output_tokens"] == 30
    assert sent["store"] is False  # nobody asked the server to keep a copy
    out = {r["custom_id"]: r for r in read_output(tmp_path / "out.jsonl")}
    body = out["c1"]["response"]["body"]  # answered by a Responses server...
    assert body["object"] == "chat.completion"  # ...rendered as the line's dialect
    assert body["choices"][0]["message"]["content"] == "echo: c1"
    assert body["usage"]["prompt_tokens"] == 6 and body["usage"]["completion_tokens"] == 4
    assert out["s1"]["response"]["body"]["object"] == "response"  # a prompt: --dialect's shape


async def test_responses_lines_are_translated_for_a_chat_server(
    server: FakeChatServer, tmp_path: Path
) -> None:
    rows = [responses_line("r1", instructions="be brief", max_output_tokens=20)]
    _, result = await run(server, tmp_path, rows)
    assert server.paths == ["/v1/chat/completions"]
    assert server.bodies[0]["messages"][0] == {"role": "system", "content": "be brief"}
    (record,) = read_output(tmp_path / "out.jsonl")
    body = record["response"]["body"]
    assert body["object"] == "response" and body["status"] == "completed"
    assert body["output"][0]["content"][0]["text"] == "echo: r1"
    assert body["usage"]["input_tokens"] == 5 and body["usage"]["output_tokens"] == 2
    assert result.stats.tokens_in == 5 and result.stats.tokens_out == 2


async def test_failures_retries_and_resume_with_responses_lines(
    server: FakeChatServer, tmp_path: Path
) -> None:
    rows = [responses_line(f"r{i}") for i in range(30)]
    rows += [responses_line("bad1"), responses_line("flaky1")]
    _, result = await run(server, tmp_path, rows, dialect="responses", concurrency=4)
    out = {r["custom_id"]: r for r in read_output(tmp_path / "out.jsonl")}
    assert out["bad1"]["error"]["code"] == "invalid_request"
    assert out["bad1"]["response"]["status_code"] == 400
    assert out["flaky1"]["error"] is None  # a 500 retried, then answered
    assert result.stats.failed == 1 and len(out) == 32
    # Crash after 20 lines (the last one torn): the same command finishes the rest only.
    out_path = tmp_path / "out.jsonl"
    lines = out_path.read_bytes().splitlines(keepends=True)
    out_path.write_bytes(b"".join(lines[:20]) + lines[20][:15])
    server.started.clear()
    _, again = await run(server, tmp_path, None, dialect="responses", concurrency=4)
    redone = sorted(orjson.loads(line)["custom_id"] for line in lines[20:])
    assert sorted(server.started) == redone
    final = read_output(out_path)
    assert sorted(r["custom_id"] for r in final) == sorted(r["custom_id"] for r in rows)
    assert again.stats.skipped == 20


# --- end to end: runner -> live gateway -> Responses / Chat upstreams ----------------------


@pytest.fixture(scope="module")
def gateway() -> Any:
    config = parse_config(
        {
            "upstreams": {"resp": {"kind": "fake"}, "chat": {"kind": "fake"}},
            "models": [
                {"name": "via-responses", "upstream": "resp"},
                {"name": "via-chat", "upstream": "chat"},
            ],
        }
    )
    upstreams = {
        "resp": FakeUpstream("resp", wire="responses", chunk_size=3),
        "chat": FakeUpstream("chat", wire="openai", chunk_size=3),
    }
    with live_server(create_app(config, upstreams=upstreams)) as url:
        yield url


@pytest.mark.parametrize("model", ["via-responses", "via-chat"])
async def test_through_a_live_gateway(gateway: str, tmp_path: Path, model: str) -> None:
    rows = [
        responses_line("a", "say a", model=model),
        responses_line("b", "say b", model=model, tools=[{"type": "web_search"}])
        if model == "via-responses"
        else responses_line("b", "say b", model=model),
    ]
    write_jsonl(tmp_path / "in.jsonl", rows)
    options = BatchOptions(
        tmp_path / "in.jsonl", output=tmp_path / "out.jsonl", base_url=gateway + "/v1",
        dialect="responses", progress="off",
    )  # fmt: skip
    client = make_client(options)
    try:
        result = await BatchRunner(options, client=client, stream=io.StringIO()).run()
    finally:
        await client.aclose()
    out = {r["custom_id"]: r for r in read_output(tmp_path / "out.jsonl")}
    assert result.stats.failed == 0, out
    for cid in ("a", "b"):
        body = out[cid]["response"]["body"]
        assert body["object"] == "response" and body["status"] == "completed"
        texts = [c["text"] for item in body["output"] if item["type"] == "message"
                 for c in item["content"]]  # fmt: skip
        assert texts and f"say {cid}" in "".join(texts)  # the fake echoes the prompt
        assert out[cid]["response"]["request_id"]


def test_cli_resume_after_kill_9_with_responses_lines(tmp_path: Path) -> None:
    """``interlingua batch run --dialect responses`` killed mid-run, then run again."""
    slow = FakeChatServer(0.02, 0.05)
    slow.start()
    try:
        write_jsonl(tmp_path / "in.jsonl", [responses_line(f"r{i}") for i in range(N)])
        args = command(slow, tmp_path, "--dialect", "responses")
        proc = start(args)
        wait_for_lines(tmp_path / "out.jsonl", 40, proc)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=10)
        before = read_output(tmp_path / "out.jsonl")
        assert 40 <= len(before) < N
        again = subprocess.run(args, capture_output=True, text=True, timeout=60)
        assert again.returncode == 0, again.stderr
        assert_exactly_once(tmp_path / "out.jsonl")
        assert f"{len(before)} skipped" in again.stderr
        assert set(slow.paths) == {"/v1/responses"}
        bodies = read_output(tmp_path / "out.jsonl")
        assert {r["response"]["body"]["object"] for r in bodies} == {"response"}
    finally:
        slow.stop()
