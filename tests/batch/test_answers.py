"""The batch runner and answers that are not answers (retried, counted in the summary),
and --fold-reasoning (reasoning written into each output body's text, BaseAPI's way):
against the fake server of conftest.py, then through a live gateway in both dialects."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from interlingua.batch import BatchOptions, BatchRunner, format_summary
from interlingua.batch.command import _command_line
from interlingua.batch.fold import fold_body
from interlingua.batch.runner import make_client
from interlingua.cli import build_parser
from interlingua.config import fake_config
from interlingua.core import ReasoningPart, Response, TextPart, Usage
from interlingua.server import create_app
from interlingua.upstreams.fake import FakeUpstream

from ..live_server import live_server
from .conftest import FakeChatServer, read_output, write_jsonl
from .test_runner import run

FOLDED = "<think>\nthought about {0}\n</think>\n\necho: {0}"


def simple(*texts: str) -> list[dict[str, Any]]:
    return [{"custom_id": t, "prompt": t} for t in texts]


def by_id(path: Path) -> dict[str, dict[str, Any]]:
    return {r["custom_id"]: r for r in read_output(path)}


async def test_empty_and_unreadable_answers_are_retried_and_counted(
    server: FakeChatServer, tmp_path: Path
) -> None:
    rows = simple("hollow", "void", "garbled", "mangled", "plain")
    _, result = await run(server, tmp_path, rows, concurrency=2, retries=3)
    out = by_id(tmp_path / "out.jsonl")
    for cid in ("hollow", "garbled", "plain"):
        assert out[cid]["error"] is None
        assert out[cid]["response"]["body"]["choices"][0]["message"]["content"] == f"echo: {cid}"
    void, mangled = out["void"], out["mangled"]
    assert void["error"]["code"] == "empty_response"
    assert void["response"]["status_code"] == 200  # the server's answer is kept
    assert "no text, no tool call and no refusal" in void["error"]["message"]
    assert mangled["error"]["code"] == "invalid_response"
    assert "<html>oops</html>" in mangled["response"]["body"]
    assert server.attempts["void"] == 4 and server.attempts["mangled"] == 2  # retried once
    assert server.attempts["hollow"] == 2 and server.attempts["garbled"] == 2
    stats = result.stats
    assert (stats.ok, stats.failed) == (3, 2)
    assert (stats.empty_retries, stats.unreadable_retries, stats.retries) == (4, 2, 6)
    assert "empty_response (HTTP 200) 1" in format_summary(stats)
    assert "retries: 6 (empty answers 4, unreadable bodies 2)" in format_summary(stats)


async def test_without_retry_on_empty_answers_are_written_as_they_came(
    server: FakeChatServer, tmp_path: Path
) -> None:
    rows = simple("hollow", "garbled")
    _, result = await run(server, tmp_path, rows, concurrency=2, retry_on_empty=False)
    out = by_id(tmp_path / "out.jsonl")
    assert out["hollow"]["error"] is None
    assert out["hollow"]["response"]["body"]["choices"][0]["message"]["content"] == ""
    assert out["garbled"]["error"]["code"] == "invalid_response"
    assert server.attempts["hollow"] == 1 and server.attempts["garbled"] == 1
    assert result.stats.retries == 0


def batch_line(cid: str, url: str) -> dict[str, Any]:
    if url == "/v1/responses":
        body: dict[str, Any] = {"model": "m", "input": cid}
    else:
        body = {"model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": cid}]}
    return {"custom_id": cid, "method": "POST", "url": url, "body": body}


def text_of(body: dict[str, Any]) -> str:
    """The answer text of an output body of any dialect."""
    if "choices" in body:
        return str(body["choices"][0]["message"]["content"])
    if body.get("type") == "message":
        return "".join(b["text"] for b in body["content"] if b["type"] == "text")
    parts = [c for i in body["output"] if i["type"] == "message" for c in i["content"]]
    return "".join(c["text"] for c in parts if c["type"] == "output_text")


@pytest.mark.parametrize("dialect", ["openai", "anthropic", "responses"])
async def test_fold_reasoning_in_every_output_dialect(
    server: FakeChatServer, tmp_path: Path, dialect: str
) -> None:
    rows = [
        {"custom_id": "thinker-simple", "prompt": "thinker-simple"},
        batch_line("thinker-chat", "/v1/chat/completions"),
        batch_line("thinker-messages", "/v1/messages"),
        batch_line("thinker-responses", "/v1/responses"),
        {"custom_id": "no-reasoning", "prompt": "no-reasoning"},
    ]
    _, result = await run(
        server, tmp_path, rows, dialect=dialect, fold_reasoning=True, concurrency=2
    )
    out = by_id(tmp_path / "out.jsonl")
    assert result.stats.failed == 0, out
    for cid in ("thinker-simple", "thinker-chat", "thinker-messages", "thinker-responses"):
        assert text_of(out[cid]["response"]["body"]) == FOLDED.format(cid), (cid, out[cid])
    assert text_of(out["no-reasoning"]["response"]["body"]) == "echo: no-reasoning"
    chat = out["thinker-chat"]["response"]["body"]
    if dialect == "openai":  # the reasoning field stays as the server sent it
        assert chat["choices"][0]["message"]["reasoning_content"] == "thought about thinker-chat"


async def test_without_fold_the_body_is_the_servers(server: FakeChatServer, tmp_path: Path) -> None:
    await run(server, tmp_path, simple("thinker"), concurrency=1)
    body = read_output(tmp_path / "out.jsonl")[0]["response"]["body"]
    assert body["choices"][0]["message"]["content"] == "echo: thinker"


def test_fold_body_adds_the_text_an_answer_lacks() -> None:
    anthropic = {"content": [{"type": "thinking", "thinking": "t", "signature": "s"}]}
    assert fold_body("anthropic", anthropic, "t")
    assert anthropic["content"][1] == {"type": "text", "text": "<think>\nt\n</think>\n\n"}
    responses: dict[str, Any] = {"output": [{"type": "reasoning", "summary": []}]}
    assert fold_body("responses", responses, "t")
    assert text_of(responses) == "<think>\nt\n</think>\n\n"
    chat = {"choices": [{"message": {"content": None, "reasoning": "t"}}]}
    assert fold_body("openai", chat, "t") and text_of(chat) == "<think>\nt\n</think>\n\n"
    untouched = {"choices": [{"message": {"content": "x"}}]}
    assert not fold_body("openai", untouched, "")
    assert untouched == {"choices": [{"message": {"content": "x"}}]}


def test_the_flags_and_the_resume_command() -> None:
    parser = build_parser()
    args = parser.parse_args(["batch", "run", "in.jsonl", "-o", "out.jsonl"])
    assert args.retry_on_empty and not args.fold_reasoning
    args = parser.parse_args(
        ["batch", "run", "in.jsonl", "-o", "out.jsonl", "--fold-reasoning", "--no-retry-empty"]
    )
    assert not args.retry_on_empty and args.fold_reasoning
    assert _command_line(args).endswith("--fold-reasoning --no-retry-empty")


# --- through a live gateway -------------------------------------------------------------


@pytest.fixture(scope="module")
def gateway() -> Iterator[tuple[str, FakeUpstream]]:
    fake = FakeUpstream("fake", chunk_size=3)
    with live_server(create_app(fake_config(), upstreams={"fake": fake})) as url:
        yield url, fake


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
async def test_through_a_live_gateway(
    gateway: tuple[str, FakeUpstream], tmp_path: Path, dialect: str
) -> None:
    url, fake = gateway
    fake.enqueue(Response("r0", "fake", (), usage=Usage(3, 0)))  # empty: retried
    fake.enqueue(Response("r1", "fake", (ReasoningPart("hm"), TextPart("yes")), usage=Usage(3, 2)))
    write_jsonl(tmp_path / "in.jsonl", simple("first", "second"))
    options = BatchOptions(
        tmp_path / "in.jsonl", output=tmp_path / "out.jsonl", dialect=dialect, progress="off",
        base_url=url + "/v1" if dialect == "openai" else url, model="fake", concurrency=1,
        fold_reasoning=True, max_tokens=50,
    )  # fmt: skip
    client = make_client(options)
    client.retry_base = 0.0
    try:
        result = await BatchRunner(options, client=client, stream=io.StringIO()).run()
    finally:
        await client.aclose()
    out = by_id(tmp_path / "out.jsonl")
    assert result.stats.failed == 0 and result.stats.empty_retries == 1
    assert text_of(out["first"]["response"]["body"]) == "<think>\nhm\n</think>\n\nyes"
    assert text_of(out["second"]["response"]["body"]) == "echo: second"
    raw = (tmp_path / "out.jsonl").read_bytes()
    assert raw.count(b"\n") == 2 and orjson.loads(raw.splitlines()[1])["error"] is None
