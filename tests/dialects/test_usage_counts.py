"""dialects/relay_usage.py usage_counts: every dialect's usage object, and values that are no count."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import orjson
import pytest

from interlingua.dialects.relay_usage import body_counts, usage_counts


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
            (58, 17, 8, 5, 0, 0),
        ),
        ({"completion_tokens": 3}, (0, 3, 0, 0, 0, 0)),
        # values that are no count: bools, negatives, text, details not objects
        (
            {
                "prompt_tokens": True,
                "completion_tokens": -4,
                "prompt_tokens_details": [1],
                "completion_tokens_details": {"reasoning_tokens": "seven"},
            },
            (0, 0, 0, 0, 0, 0),
        ),
        # counts written oddly are read: numbers as strings, floats
        (
            {
                "prompt_tokens": 2.5,
                "completion_tokens": None,
                "completion_tokens_details": {"reasoning_tokens": "7"},
            },
            (2, 0, 0, 7, 0, 0),
        ),
        # Messages: input excludes the cache; cached is the reads
        (
            {
                "input_tokens": 10,
                "cache_read_input_tokens": 90,
                "cache_creation_input_tokens": 5,
                "output_tokens": 4,
            },
            (105, 4, 90, 0, 5, 0),
        ),
        # Responses
        (
            {
                "input_tokens": 20,
                "output_tokens": 5,
                "input_tokens_details": {"cached_tokens": 8},
                "output_tokens_details": {"reasoning_tokens": 2},
            },
            (20, 5, 8, 2, 0, 0),
        ),
        ({"input_tokens": False, "output_tokens_details": None}, (0, 0, 0, 0, 0, 0)),
        ({}, (0, 0, 0, 0, 0, 0)),
    ],
)
def test_usage_counts(
    usage: dict[str, object], counts: tuple[int, int, int, int, int, int]
) -> None:
    assert usage_counts(usage) == counts


def _random_usage(pick: random.Random) -> object:
    """A usage object of any dialect's fields, each a count or something that is not."""
    odd = [None, True, False, -1, 1.5, "7", " 12 ", "x", [], {}, 2**63]
    value = lambda: pick.randrange(0, 10**6) if pick.random() < 0.8 else pick.choice(odd)  # noqa: E731
    detail = lambda: (  # noqa: E731
        {k: value() for k in ("cached_tokens", "reasoning_tokens", "audio_tokens")
         if pick.random() < 0.6}
        if pick.random() < 0.85 else pick.choice(odd)
    )  # fmt: skip
    fields = {
        "prompt_tokens": value, "completion_tokens": value, "total_tokens": value,
        "input_tokens": value, "output_tokens": value, "cache_read_input_tokens": value,
        "cache_creation_input_tokens": value, "prompt_tokens_details": detail,
        "completion_tokens_details": detail, "input_tokens_details": detail,
        "output_tokens_details": detail, "service_tier": lambda: "standard",
        "reasoning_tokens": value, "prompt_cache_hit_tokens": value,
    }  # fmt: skip
    chosen = pick.sample(sorted(fields), pick.randrange(0, len(fields) + 1))
    return {name: fields[name]() for name in chosen} if pick.random() < 0.95 else pick.choice(odd)


def test_a_body_is_counted_as_its_usage_object_is() -> None:
    """body_counts (typed fields for a well-formed usage, the dict path otherwise) gives
    what usage_counts gives for the body's usage object, over every dialect's shapes and
    values that are no count; None when the body has no usage or is no JSON."""
    pick = random.Random(12)
    for _ in range(3000):
        usage = _random_usage(pick)
        body = orjson.dumps(
            {"id": "x", "choices": [{"message": {"content": 'a "usage": {}'}}], "usage": usage}
        )
        want = usage_counts(usage) if isinstance(usage, dict) else None
        assert body_counts(body) == want, usage
    assert body_counts(b'{"id": "x"}') is None
    assert body_counts(b'{"usage": null}') is None
    assert body_counts(b"not json") is None
    assert body_counts(b'{"usage": {"prompt_tokens": 3}, "usage_note": 1}') == (3, 0, 0, 0, 0, 0)


def _reference_counts(body: bytes) -> tuple[int, int, int, int, int, int] | None:
    """What a full parse of ``body`` says (the top-level ``usage``, read by usage_counts)."""
    try:
        answer = json.loads(body)
    except ValueError:
        return None
    usage = answer.get("usage") if isinstance(answer, dict) else None
    return usage_counts(usage) if isinstance(usage, dict) else None


def test_the_last_usage_key_is_trusted_only_at_the_top_level() -> None:
    """body_counts decodes what follows the body's last ``"usage":`` first: a nested
    one, one in a text or in another key, one before other members or none at all must
    all give what a full parse gives."""
    pick = random.Random(7)
    decoys: list[Callable[[], object]] = [
        lambda: {"usage": _random_usage(pick)},  # nested: a tool's arguments, metadata...
        lambda: [{"usage": {"prompt_tokens": 9}}],
        lambda: 'text with "usage": {"prompt_tokens": 1} in it',
        lambda: "ends in a backslash \\",
        lambda: {'a"usage': {"prompt_tokens": 4}},  # a key that holds the quote
        lambda: pick.randrange(10),
    ]
    for n in range(3000):
        members: list[tuple[str, object]] = [
            (f"k{i}", pick.choice(decoys)()) for i in range(pick.randrange(0, 4))
        ]
        if pick.random() < 0.85:
            members.insert(pick.randrange(len(members) + 1), ("usage", _random_usage(pick)))
        if pick.random() < 0.1:
            members.append(('x"usage', {"prompt_tokens": 5}))
        answer = dict(members)
        spaced = n % 3 == 0
        body = (
            json.dumps(answer).encode() if spaced else orjson.dumps(answer)
        )  # (json.dumps puts a space after each colon: no compact key to find)
        assert body_counts(body) == _reference_counts(body), body
    nested_last = b'{"usage": {"prompt_tokens": 3}, "meta": {"usage": {"prompt_tokens": 8}}}'
    assert body_counts(nested_last) == (3, 0, 0, 0, 0, 0)
    assert body_counts(b'{"x": "a\\"usage":{"prompt_tokens": 8}}') is None
