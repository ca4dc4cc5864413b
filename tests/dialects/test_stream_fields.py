"""Each dialect's ``ask_stream`` / ``drop_stream``: the one way a body is made to ask for a
stream (with its usage) or for one whole answer, whoever sends it."""

from __future__ import annotations

from typing import Any

import pytest

from interlingua.dialects import get_dialect

DIALECTS = ["openai", "anthropic", "responses"]


@pytest.mark.parametrize("name", DIALECTS)
def test_a_whole_answer_says_so_and_carries_no_stream_field(name: str) -> None:
    body: dict[str, Any] = {"model": "m", "stream": True, "stream_options": {"x": 1}}
    assert get_dialect(name).ask_stream(body, False) is False
    assert body == {"model": "m", "stream": False}


@pytest.mark.parametrize("name", DIALECTS)
def test_drop_stream_leaves_the_api_default(name: str) -> None:
    body: dict[str, Any] = {"model": "m", "stream": True, "stream_options": {"x": 1}}
    get_dialect(name).drop_stream(body)
    assert body == {"model": "m"}


@pytest.mark.parametrize(
    ("options", "asked", "after"),
    [
        (None, True, {"include_usage": True}),
        ({"x": 1}, True, {"x": 1, "include_usage": True}),
        ({"include_usage": True}, False, {"include_usage": True}),
        ({"include_usage": False}, True, {"include_usage": True}),
        ("odd", False, "odd"),  # (not an object: the request's validation answers it)
    ],
)
def test_a_chat_stream_asks_for_its_usage(options: Any, asked: bool, after: Any) -> None:
    body: dict[str, Any] = {"model": "m", "stream_options": options}
    assert get_dialect("openai").ask_stream(body, True) is asked
    assert body == {"model": "m", "stream_options": after, "stream": True}


def test_the_clients_own_options_are_copied_not_changed() -> None:
    options = {"x": 1}
    body: dict[str, Any] = {"stream_options": options}
    get_dialect("openai").ask_stream(body, True)
    assert options == {"x": 1}


@pytest.mark.parametrize("name", ["anthropic", "responses"])
def test_other_streams_report_usage_unasked(name: str) -> None:
    body: dict[str, Any] = {"model": "m"}
    assert get_dialect(name).ask_stream(body, True) is False
    assert body == {"model": "m", "stream": True}
