"""What counts as content for ``timeout.first_byte`` and ``timeout.idle`` per dialect,
and the phase clock (the end-to-end cases: tests/server/test_deadlines.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from interlingua.config import TimeoutConfig
from interlingua.upstreams.deadlines import PhaseTimeout, has_content, pace_of, paced

CHAT_ROLE = b'data: {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}\n\n'
CHAT_TEXT = b'data: {"choices": [{"index": 0, "delta": {"content": "Hi"}}]}\n\n'
CHAT_TOOL = b'data: {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0}]}}]}\n\n'
CHAT_STOP = b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n'
TEXT_CHUNK = b'data: {"choices": [{"index": 0, "text": "Hi", "finish_reason": null}]}\n\n'


def _typed(kind: str, name: bool = True) -> bytes:
    head = f"event: {kind}\n" if name else ""
    return f'{head}data: {{"type": "{kind}"}}\n\n'.encode()


@pytest.mark.parametrize(
    ("dialect", "data", "first", "idle"),
    [
        ("openai", b": ping\n\n", False, False),
        ("openai", CHAT_ROLE, False, True),
        ("openai", b": ping\n\n" + CHAT_TEXT, True, True),
        ("openai", CHAT_TOOL, True, True),
        ("openai", CHAT_STOP, True, True),
        ("openai", TEXT_CHUNK, True, True),  # (a text completion's chunk: /v1/completions)
        ("openai", TEXT_CHUNK.replace(b'"Hi"', b'""'), False, True),
        ("openai", b'data: {"choices": [], "usage": {}}\n\n', True, True),
        ("openai", b"data: [DONE]\n\n", True, True),
        ("openai", b'data: {"error": {"message": "x"}}\n\n', True, True),
        ("anthropic", _typed("ping"), False, False),
        ("anthropic", _typed("message_start") + _typed("content_block_start"), False, True),
        ("anthropic", _typed("content_block_delta"), True, True),
        ("anthropic", _typed("error"), True, True),
        ("responses", _typed("response.created") + _typed("response.in_progress"), False, True),
        ("responses", _typed("response.output_item.added"), False, True),
        ("responses", _typed("keepalive"), False, False),
        ("responses", _typed("response.output_text.delta", name=False), True, True),
        ("responses", _typed("response.failed"), True, True),
    ],
)
def test_what_counts_as_content(dialect: str, data: bytes, first: bool, idle: bool) -> None:
    assert has_content(dialect, data, first=True) is first
    assert has_content(dialect, data, first=False) is idle


def test_no_limits_no_pace() -> None:
    assert pace_of(TimeoutConfig()) is None


async def _drip(gaps: list[float]) -> AsyncIterator[bytes]:
    for gap in gaps:
        await asyncio.sleep(gap)
        yield b"x"


async def test_the_phases_in_turn() -> None:
    pace = pace_of(TimeoutConfig(first_byte=0.2, idle=0.05))
    assert pace is not None and not pace.started
    got = []
    with pytest.raises(PhaseTimeout) as caught:
        async for chunk in paced(_drip([0.0, 0.02, 0.02, 1.0]), pace):
            got.append(chunk)
            pace.heard()
    assert (len(got), caught.value.phase) == (3, "idle")
    # Within first_byte reads that bring no content do not start the idle clock.
    pace = pace_of(TimeoutConfig(first_byte=0.05))
    assert pace is not None
    with pytest.raises(PhaseTimeout) as caught:
        async for _ in paced(_drip([0.0, 0.02, 0.02, 0.02]), pace):
            pass
    assert caught.value.phase == "first_byte"
