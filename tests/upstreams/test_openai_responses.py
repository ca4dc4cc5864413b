"""Kind ``responses`` without sockets: stop sequences cut by :class:`StopCut`, the body a
translated request renders (the end-to-end SDK tests are tests/server/responses/test_upstream.py)."""

from __future__ import annotations

import pytest

from interlingua.core import (
    BlockStart,
    BlockStop,
    Message,
    Request,
    Response,
    StopReason,
    StreamEnd,
    StreamEvent,
    StreamStart,
    TextDelta,
    TextPart,
    Usage,
    fold,
)
from interlingua.dialects import get_dialect
from interlingua.errors import InvalidRequestError
from interlingua.upstreams.openai_responses import OpenAIResponsesUpstream, StopCut

REQUEST = Request("m", (Message("user", (TextPart("hi"),)),), stop=("</a>",))
UPSTREAM_USAGE = Usage(input_tokens=30, output_tokens=12)


def _events(pieces: list[str]) -> list[StreamEvent]:
    return [
        StreamStart("resp_1", "m"),
        BlockStart(0, TextPart("")),
        *[TextDelta(0, p) for p in pieces],
        BlockStop(0),
        StreamEnd(StopReason.END_TURN, usage=UPSTREAM_USAGE),
    ]


@pytest.mark.parametrize("split", [1, 2, 3, 5, 100])
def test_a_stop_split_anywhere_ends_the_stream_at_the_match(split: int) -> None:
    text = "x = 42</a> and more"
    pieces = [text[i : i + split] for i in range(0, len(text), split)]
    events = _events(pieces)[:-2]  # the upstream would go on: no stop, no end read
    cut = StopCut(REQUEST)
    out: list[StreamEvent] = []
    for event in events:
        out += cut.feed([event])
        if cut.matched is not None:
            out += cut.end()
            break
    assert cut.ended
    response = fold(out)
    assert response.text == "x = 42"
    assert (response.stop_reason, response.stop_sequence) == (StopReason.STOP_SEQUENCE, "</a>")
    assert response.usage.estimated and response.usage.output_tokens == 2  # "x = 42"


def test_an_end_read_with_the_match_keeps_the_upstream_count() -> None:
    cut = StopCut(REQUEST)
    out = cut.feed(_events(["ok</a>", "tail"]))
    assert cut.ended  # nothing to add: the upstream's own end came in the same batch
    response = fold(out)
    assert (response.text, response.stop_sequence) == ("ok", "</a>")
    assert response.usage == UPSTREAM_USAGE


def test_no_match_passes_the_stream_through() -> None:
    cut = StopCut(REQUEST)
    out = cut.feed(_events(["<", "/b> fine <"]))
    out += cut.flush()
    assert fold(out).text == "</b> fine <"
    assert fold(out).stop_reason == StopReason.END_TURN


async def test_complete_cuts_a_whole_answer_and_keeps_its_usage(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    up = OpenAIResponsesUpstream("o", "http://127.0.0.1:9/v1")
    answer = Response("resp_1", "m", (TextPart("a</a>b"),), usage=UPSTREAM_USAGE)

    async def complete(self: object, request: Request) -> Response:
        return answer

    monkeypatch.setattr("interlingua.upstreams.http_upstream.HttpUpstream.complete", complete)
    response = await up.complete(REQUEST)
    assert (response.text, response.stop_reason) == ("a", StopReason.STOP_SEQUENCE)
    assert response.stop_sequence == "</a>" and response.usage == UPSTREAM_USAGE
    plain = await up.complete(Request("m", REQUEST.messages))
    assert plain is answer


def test_translated_body_is_what_openai_accepts() -> None:
    chat = get_dialect("openai").parse_request(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "max_tokens": 1,
            "stop": ["x"],
            "seed": 1,
            "store": True,
        }
    )
    body = OpenAIResponsesUpstream("o", "http://h/v1").render(chat, stream=True)
    assert body["store"] is False
    assert body["max_output_tokens"] == 16
    assert body["tools"] == [
        {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}},
         "strict": False}
    ]  # fmt: skip
    assert not {"stop", "seed", "stream_options", "n"} & body.keys()


def test_a_responses_clients_own_fields_are_kept() -> None:
    own = get_dialect("responses").parse_request(
        {"model": "m", "input": "hi", "max_output_tokens": 5, "store": True,
         "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}]}
    )  # fmt: skip
    body = OpenAIResponsesUpstream("o", "http://h/v1").render(own, stream=False)
    assert (body["store"], body["max_output_tokens"]) == (True, 5)
    assert "strict" not in body["tools"][0]  # omitted stays omitted (true, the API's way)


def test_more_than_one_choice_is_refused() -> None:
    chat = get_dialect("openai").parse_request(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 2}
    )
    with pytest.raises(InvalidRequestError) as info:
        OpenAIResponsesUpstream("o", "http://h/v1").render(chat, stream=False)
    assert info.value.param == "n"
