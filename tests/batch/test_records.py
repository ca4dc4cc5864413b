"""Input lines and output records (no I/O)."""

from __future__ import annotations

import orjson
import pytest

from interlingua.batch.records import (
    DUPLICATE,
    LineError,
    error_record,
    in_shard,
    parse_line,
    parse_shard,
    read_output_line,
    success_record,
)


def test_openai_batch_lines_take_their_dialect_from_the_url() -> None:
    chat = parse_line(
        b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {"x": 1}}',
        1,
    )
    assert (chat.custom_id, chat.dialect, chat.body) == ("a", "openai", {"x": 1})
    messages = parse_line(b'{"custom_id": "b", "url": "/v1/messages", "body": {}}', 2)
    assert messages.dialect == "anthropic" and messages.line_no == 2


def test_simple_lines_keep_prompt_images_and_settings() -> None:
    item = parse_line(
        b'{"custom_id": "s", "prompt": ["hi"], "images": ["a.png"], "max_tokens": 5, '
        b'"temperature": 0.5}',
        3,
    )
    assert item.dialect is None
    assert item.prompt == ["hi"] and item.images == ["a.png"]
    assert item.settings == {"max_tokens": 5, "temperature": 0.5}
    messages = parse_line({"custom_id": "m", "messages": [{"role": "user", "content": "x"}]}, 4)
    assert messages.prompt == [{"role": "user", "content": "x"}]
    sampled = {"logprobs": True, "top_logprobs": 2, "min_p": 0.1, "repetition_penalty": 1.1}
    assert parse_line({"custom_id": "l", "prompt": "x", **sampled}, 5).settings == sampled


@pytest.mark.parametrize(
    ("line", "code", "fragment"),
    [
        (b"{nope", "invalid_line", "line 7: not valid JSON"),
        (b"[1, 2]", "invalid_line", "expected a JSON object"),
        (b'{"prompt": "x"}', "invalid_line", '"custom_id" must be a non-empty string'),
        (b'{"custom_id": 5, "prompt": "x"}', "invalid_line", "custom_id"),
        (b'{"custom_id": "a"}', "invalid_request", 'exactly one of "prompt" or "messages"'),
        (b'{"custom_id": "a", "prompt": "x", "messages": []}', "invalid_request", "exactly one"),
        (b'{"custom_id": "a", "prompt": "x", "colour": 1}', "invalid_request", "['colour']"),
        (b'{"custom_id": "a", "prompt": "x", "images": "a.png"}', "invalid_request", "a list"),
        (b'{"custom_id": "a", "url": "/v1/moderations", "body": {}}', "invalid_request", "url"),
        (b'{"custom_id": "a", "method": "GET", "url": "/v1/messages", "body": {}}',
         "invalid_request", "POST"),
        (b'{"custom_id": "a", "url": "/v1/messages", "body": []}', "invalid_request", "body"),
    ],
)  # fmt: skip
def test_bad_lines_say_what_is_wrong(line: bytes, code: str, fragment: str) -> None:
    with pytest.raises(LineError) as info:
        parse_line(line, 7)
    assert info.value.code == code
    assert fragment in info.value.message
    if code == "invalid_request":
        assert info.value.custom_id == "a"


def test_success_record_splices_the_body_bytes() -> None:
    body = b'{"z":1,"a":[1,2]}'  # key order kept: the bytes are not re-encoded
    line = success_record('id "q"', 200, "req_1", body)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert body in line
    record = orjson.loads(line)
    assert list(record) == ["id", "custom_id", "response", "error"]
    assert record["custom_id"] == 'id "q"'
    assert record["response"] == {
        "status_code": 200,
        "request_id": "req_1",
        "body": {"z": 1, "a": [1, 2]},
    }
    assert record["error"] is None
    assert record["id"].startswith("batch_req_") and len(record["id"]) == len("batch_req_") + 24
    assert orjson.loads(success_record("x", 200, None, body))["id"] != record["id"]


def test_error_records() -> None:
    with_answer = orjson.loads(
        error_record("a", "rate_limit", "slow down", status=429, request_id="r", body={"e": 1})
    )
    assert with_answer["response"] == {"status_code": 429, "request_id": "r", "body": {"e": 1}}
    assert with_answer["error"] == {"code": "rate_limit", "message": "slow down"}
    no_answer = orjson.loads(error_record("a", "timeout", "no data"))
    assert no_answer["response"] is None
    unreadable = orjson.loads(error_record(None, "invalid_line", "line 3: bad", line_no=3))
    assert unreadable["custom_id"] is None and unreadable["error"]["line"] == 3


def test_read_output_line() -> None:
    ok = read_output_line(success_record("a", 200, None, b"{}"))
    assert ok is not None and (ok.custom_id, ok.failed, ok.counts) == ("a", False, True)
    failed = read_output_line(error_record("a", "timeout", "x"))
    assert failed is not None and failed.failed
    dup = read_output_line(error_record("a", DUPLICATE, "x"))
    assert dup is not None and not dup.counts
    bad = read_output_line(error_record(None, "invalid_line", "x", line_no=9))
    assert bad is not None and bad.custom_id is None and bad.line_no == 9
    assert read_output_line(b'{"custom_id": "a", "respo') is None
    assert read_output_line(b'{"other": 1}') is None


def test_shards() -> None:
    assert parse_shard("0/1") == (0, 1) and parse_shard("3/4") == (3, 4)
    for text in ("4/4", "-1/2", "1", "a/b", "0/0"):
        with pytest.raises(ValueError, match="shard"):
            parse_shard(text)
    ids = [f"id-{i}" for i in range(1000)]
    owners = [[i for i in range(4) if in_shard(cid, (i, 4))] for cid in ids]
    assert all(len(o) == 1 for o in owners)  # every id in exactly one shard
    sizes = [sum(o == [i] for o in owners) for i in range(4)]
    assert min(sizes) > 200  # and the split is roughly even
    # Stable across processes and machines: a fixed value, not Python's salted hash().
    assert [i for i in range(4) if in_shard("request-1", (i, 4))] == [
        __import__("zlib").crc32(b"request-1") % 4
    ]
    assert in_shard("anything", None)
