"""A broken stream continued on the next candidate, through a live gateway over fakes.

Every client dialect x both paths (passthrough: the fakes speak the client's dialect;
translated: another one): the client reads one complete answer, the prefix followed by
the continuation exactly once, and the candidate was asked with the prefix as its
assistant prefill.
"""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest

from interlingua.core import (
    BlockStart,
    Request,
    StreamError,
    StreamStart,
    TextDelta,
    TextPart,
    Usage,
)
from interlingua.errors import UpstreamError

from ...conformance.cases import reply
from ..test_routing_gateway import CLIENTS, WIRE, ask, counts, gateway

pytestmark = pytest.mark.filterwarnings("ignore:The model .* is deprecated:DeprecationWarning")

CONTINUED = [
    {"name": "main", "upstream": "a", "fallbacks": ["backup"], "on_stream_break": "continue"},
    {"name": "backup", "upstream": "b"},
]


def _broken(text: str, error: UpstreamError) -> list[Any]:
    return [
        StreamStart("resp_1", "m", 1_700_000_000, Usage(input_tokens=5)),
        BlockStart(0, TextPart("")),
        TextDelta(0, text),
        StreamError(error),
    ]


def _prefix(request: Request) -> str:
    last = request.messages[-1]
    assert last.role == "assistant", request.messages
    return "".join(p.text for p in last.parts if isinstance(p, TextPart))


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("path", ["translated", "passthrough"])
def test_a_cut_stream_is_finished_by_the_fallback(client: str, path: str) -> None:
    seen: list[str] = []

    def rest(request: Request) -> Any:
        seen.append(_prefix(request))
        return reply("wer, whole.")

    with gateway(CONTINUED, WIRE[client, path]) as (url, fakes):
        fakes["a"].enqueue(_broken("Half an ans", UpstreamError("cut", status=502)))
        fakes["b"].enqueue(rest)
        assert ask(url, client, "main", stream=True) == "Half an answer, whole."
        assert counts(fakes) == {"a": 1, "b": 1}
        assert seen == ["Half an ans"]


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("path", ["translated", "passthrough"])
def test_without_a_candidate_the_original_fault_reaches_the_client(client: str, path: str) -> None:
    models = [{"name": "main", "upstream": "a", "on_stream_break": "continue"}]
    with gateway(models, WIRE[client, path], retries={"a": {"max": 1}}) as (url, fakes):
        fakes["a"].enqueue(_broken("Half", UpstreamError("the original cut", status=502)))
        fakes["a"].enqueue(UpstreamError("refused", status=400))
        base = anthropic.APIError if client == "anthropic" else openai.APIError
        with pytest.raises(base) as raised:
            ask(url, client, "main", stream=True)
        assert "refused" not in str(raised.value)
        assert counts(fakes) == {"a": 2}
