"""What the Ray tests compare: the single-process runner's output, less what differs by design."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import orjson

from interlingua.batch import BatchOptions, BatchResult, BatchRunner
from interlingua.batch.runner import make_client

from .conftest import FakeChatServer, simple_rows


async def run_single(server: FakeChatServer, inp: Path, out: Path, **kw: Any) -> BatchResult:
    """The single-process runner over ``inp`` (instant retries)."""
    options = BatchOptions(inp, out, base_url=server.v1, model="m", progress="off", **kw)
    client = make_client(options)
    client.retry_base = 0.0
    try:
        return await BatchRunner(options, client=client, stream=io.StringIO()).run()
    finally:
        await client.aclose()


def single(server: FakeChatServer, inp: Path, out: Path, **kw: Any) -> BatchResult:
    """:func:`run_single` outside an event loop."""
    return asyncio.run(run_single(server, inp, out, **kw))


def comparable(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records less what differs by design: the random record id, and where a message
    names a line (a line number in one process; Ray rows have none: the id or an excerpt)."""
    out = []
    for record in records:
        record = {k: v for k, v in record.items() if k != "id"}
        error = record["error"]
        if error and error["code"] in ("invalid_line", "duplicate_custom_id"):
            record["error"] = {"code": error["code"]}
        elif error and record["response"] is None:  # "line 12 (x): why" / "x: why"
            record["error"] = {**error, "message": error["message"].split(": ", 1)[1]}
        out.append(record)
    return sorted(out, key=lambda r: orjson.dumps(r, option=orjson.OPT_SORT_KEYS))


def mixed_rows() -> list[dict[str, Any]]:
    """Simple rows, failures of each kind, both OpenAI Batch dialects, a duplicate id."""
    rows: list[dict[str, Any]] = simple_rows(40)
    rows[3] = {"custom_id": "bad3", "prompt": "bad3"}
    rows[5] = {"custom_id": "boom5", "prompt": "boom5"}
    rows[7] = {"custom_id": "flaky7", "prompt": "flaky7"}
    rows[9] = {"custom_id": "m9", "messages": [{"role": "user", "content": "m9"}], "max_tokens": 5}
    rows[11] = {"custom_id": "nofield", "prompt": "x", "colour": "red"}
    rows.append({"custom_id": "a1", "method": "POST", "url": "/v1/messages",
                 "body": {"model": "c", "max_tokens": 50,
                          "messages": [{"role": "user", "content": "a1"}]}})  # fmt: skip
    rows.append({"custom_id": "o1", "method": "POST", "url": "/v1/chat/completions",
                 "body": {"model": "g", "messages": [{"role": "user", "content": "o1"}]}})  # fmt: skip
    rows.append({"custom_id": "r1", "prompt": "the same id again"})
    return rows
