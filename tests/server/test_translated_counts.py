"""A translated whole answer is counted from the neutral usage it was rendered from
(``CountedResponse``), not by decoding the rendered body again: the record holds the
upstream's counts, and the body shows the same as far as the client's dialect can
(Messages has no reasoning count: a translated stream already kept the upstream's)."""

from __future__ import annotations

import orjson
import pytest

from interlingua.core import Request, Response, TextPart, Usage
from interlingua.dialects import get_dialect
from interlingua.dialects.relay_usage import body_counts
from interlingua.server.accounting import count_usage
from interlingua.usage.record import Record

USAGES = [
    Usage(input_tokens=58, output_tokens=17),
    Usage(input_tokens=100, output_tokens=20, cache_read_tokens=60, reasoning_tokens=5),
    Usage(input_tokens=100, output_tokens=20, cache_read_tokens=30, cache_write_tokens=50),
    Usage(input_tokens=7, output_tokens=0, estimated=True),
]


@pytest.mark.parametrize("dialect", ["openai", "anthropic", "responses"])
@pytest.mark.parametrize("usage", USAGES)
def test_the_neutral_usage_counts_as_the_rendered_body_does(dialect: str, usage: Usage) -> None:
    response = Response(id="r1", model="m", parts=(TextPart("hi"),), usage=usage)
    body = orjson.dumps(get_dialect(dialect).render_response(response, Request("m", ())))
    record = Record(at=0.0, request_id="req_1", key=None, dialect=dialect, model="m")
    count_usage(record, usage)
    counted = (
        record.input_tokens,
        record.output_tokens,
        record.cached_tokens,
        record.reasoning_tokens,
        record.cache_write_tokens,
        record.cache_write_1h_tokens,
    )
    assert counted == (
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.reasoning_tokens,
        usage.cache_write_tokens,
        0,  # (the neutral usage does not split the cache writes)
    )
    shown = body_counts(body)
    assert shown is not None
    if dialect == "anthropic":  # (no reasoning count in a Messages usage)
        counted = (*counted[:3], 0, *counted[4:])
    if dialect == "responses":  # (no cache writes in a Responses usage)
        counted = (*counted[:4], 0, 0)
    assert counted == shown
