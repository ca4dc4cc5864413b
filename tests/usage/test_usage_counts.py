"""usage/record.py usage_counts: every dialect's usage object, and values that are no count."""

from __future__ import annotations

import pytest

from interlingua.usage.record import usage_counts


@pytest.mark.parametrize(
    ("usage", "counts"),
    [
        # Chat Completions, with details
        (
            {
                "prompt_tokens": 58,
                "completion_tokens": 17,
                "prompt_tokens_details": {"cached_tokens": 8},
                "completion_tokens_details": {"reasoning_tokens": 5},
            },
            (58, 17, 8, 5),
        ),
        ({"completion_tokens": 3}, (0, 3, 0, 0)),
        # values that are no count: bools, negatives, text, floats, details not objects
        (
            {
                "prompt_tokens": True,
                "completion_tokens": -4,
                "prompt_tokens_details": [1],
                "completion_tokens_details": {"reasoning_tokens": "7"},
            },
            (0, 0, 0, 0),
        ),
        ({"prompt_tokens": 2.5, "completion_tokens": None}, (0, 0, 0, 0)),
        # Messages: input excludes the cache; cached is the reads
        (
            {
                "input_tokens": 10,
                "cache_read_input_tokens": 90,
                "cache_creation_input_tokens": 5,
                "output_tokens": 4,
            },
            (105, 4, 90, 0),
        ),
        # Responses
        (
            {
                "input_tokens": 20,
                "output_tokens": 5,
                "input_tokens_details": {"cached_tokens": 8},
                "output_tokens_details": {"reasoning_tokens": 2},
            },
            (20, 5, 8, 2),
        ),
        ({"input_tokens": False, "output_tokens_details": None}, (0, 0, 0, 0)),
        ({}, (0, 0, 0, 0)),
    ],
)
def test_usage_counts(usage: dict[str, object], counts: tuple[int, int, int, int]) -> None:
    assert usage_counts(usage) == counts
