"""Token logprobs, audio parts and the samplers in the core and every codec: the shapes
each dialect gives them, stream and not, and the refusals where a dialect has none."""

from __future__ import annotations

import base64

import openai.types.chat
import openai.types.responses
import orjson
import pytest

from interlingua.core import (
    AudioDelta,
    AudioPart,
    BlockStart,
    Message,
    Request,
    Response,
    StopReason,
    StreamEnd,
    StreamStart,
    TextDelta,
    TextPart,
    TokenLogprob,
    drop_settings,
    fold,
    unfold,
)
from interlingua.dialects import EventDecoder, get_dialect
from interlingua.dialects.anthropic import render_request as render_anthropic
from interlingua.dialects.openai_chat import (
    OpenAIChatStreamEncoder,
    parse_request,
    parse_response,
    render_response,
)
from interlingua.dialects.openai_responses import parse_request as parse_responses
from interlingua.dialects.openai_responses import render_request as render_responses
from interlingua.errors import InvalidRequestError

HI = TokenLogprob("Hi", -0.25, (72, 105), (TokenLogprob("Hi", -0.25, (72, 105)),))
# "é" split over two byte-level tokens: the first spells no text of its own
E1 = TokenLogprob("\\xc3", -1.0, (195,))
E2 = TokenLogprob("\\xa9", -0.5, (169,))


def user(*parts: object) -> Message:
    return Message("user", tuple(TextPart(p) if isinstance(p, str) else p for p in parts))  # type: ignore[misc]


def ask(**kw: object) -> Request:
    return Request("m", (user("hi"),), **kw)  # type: ignore[arg-type]


def chat_chunk(
    delta: dict[str, object], logprobs: object = None, finish: str | None = None
) -> bytes:
    choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
    payload = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
               "choices": [choice]}  # fmt: skip
    return b"data: " + orjson.dumps(payload) + b"\n\n"


# --- core -------------------------------------------------------------------------------------


def test_fold_joins_audio_pieces_as_bytes_and_logprobs_in_order() -> None:
    audio = b"\x00\x01\x02\x03\x04\x05\x06"
    pieces = [base64.b64encode(audio[:1]).decode(), base64.b64encode(audio[1:]).decode()]
    assert pieces[0].endswith("==")  # each piece padded: text concatenation would break
    events = [
        StreamStart("r", "m"),
        BlockStart(0, TextPart("")),
        TextDelta(0, "", (E1,)),  # tokens with no text yet
        TextDelta(0, "é", (E2,)),
        BlockStart(1, AudioPart(id="a1")),
        AudioDelta(1, transcript="Hel"),
        AudioDelta(1, data=pieces[0], transcript="lo"),
        AudioDelta(1, data=pieces[1]),
        AudioDelta(1, expires_at=9),
        StreamEnd(StopReason.END_TURN),
    ]
    text, spoken = fold(events).parts
    assert text == TextPart("é", logprobs=(E1, E2))
    assert spoken == AudioPart(
        data=base64.b64encode(audio).decode(), transcript="Hello", id="a1", expires_at=9
    )


@pytest.mark.parametrize("chunk_size", [None, 2])
def test_unfold_is_folds_inverse_with_logprobs_and_audio(chunk_size: int | None) -> None:
    response = Response(
        "r",
        "m",
        (
            TextPart("Hi!", logprobs=(HI, TokenLogprob("!", -0.1, (33,)))),  # spells the text
            TextPart("é", logprobs=(E1, E2)),  # does not: all on one delta
            AudioPart(data="AAAA", format="wav", transcript="Hi", id="a", expires_at=3),
        ),
    )
    events = list(unfold(response, chunk_size))
    assert fold(events) == response
    first = [e for e in events if isinstance(e, TextDelta) and e.index == 0]
    assert [(d.text, d.logprobs) for d in first] == [
        ("Hi", (HI,)),
        ("!", response.parts[0].logprobs[1:]),
    ]  # type: ignore[union-attr]


def test_drop_settings_clears_only_what_it_names() -> None:
    request = ask(logprobs=True, top_logprobs=2, min_p=0.1, top_k=3, output_audio={})
    assert drop_settings(request, ["seed", "metadata"]) is request
    dropped = drop_settings(request, ["logprobs", "modalities"])
    assert (dropped.logprobs, dropped.top_logprobs, dropped.output_audio) == (False, None, None)
    assert (dropped.min_p, dropped.top_k) == (0.1, 3)


# --- OpenAI Chat --------------------------------------------------------------------------------


def test_chat_stream_decoder_reads_logprobs_audio_and_refusal_logprobs() -> None:
    request = parse_request({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    wire = b"".join(
        [
            chat_chunk({"role": "assistant", "content": ""}),
            chat_chunk({"content": ""}, {"content": [{"token": "\\xc3", "logprob": -1.0,
                                                      "bytes": [195], "top_logprobs": []}]}),
            chat_chunk({"content": "é"}, {"content": [{"token": "\\xa9", "logprob": -0.5,
                                                       "bytes": [169], "top_logprobs": []}]}),
            chat_chunk({"refusal": "No."}, {"content": None, "refusal": [
                {"token": "No.", "logprob": -0.1, "bytes": None, "top_logprobs": []}]}),
            chat_chunk({}, None, "stop"),
            b"data: [DONE]\n\n",
        ]
    )  # fmt: skip
    decoder = EventDecoder(get_dialect("openai"), request)
    text, refusal = fold(decoder.decode(wire) + decoder.flush()).parts
    assert text == TextPart("é", logprobs=(E1, E2))
    assert refusal == TextPart("No.", logprobs=(TokenLogprob("No.", -0.1),))
    assert refusal.meta == {"refusal": True}  # type: ignore[union-attr]


def test_chat_encoder_puts_each_deltas_logprobs_in_its_chunk() -> None:
    request = parse_request(
        {"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": True}
    )
    encoder = OpenAIChatStreamEncoder(request)
    response = Response("r", "m", (TextPart("Hi", logprobs=(HI,)), AudioPart(data="AAAA", id="a")))
    raw = b"".join(encoder.encode(e) for e in unfold(response))
    chunks = [orjson.loads(line[6:]) for line in raw.split(b"\n\n") if line.startswith(b"data: {")]
    for chunk in chunks:
        openai.types.chat.ChatCompletionChunk.model_validate(chunk)
    with_logprobs = [c for c in chunks if c["choices"] and c["choices"][0]["logprobs"]]
    assert len(with_logprobs) == 1
    choice = with_logprobs[0]["choices"][0]
    assert choice["delta"] == {"content": "Hi"}
    assert choice["logprobs"]["content"][0]["top_logprobs"] == [
        {"token": "Hi", "logprob": -0.25, "bytes": [72, 105]}
    ]
    decoder = EventDecoder(get_dialect("openai"), request)
    assert fold(decoder.decode(raw) + decoder.flush()).parts == response.parts


def test_chat_response_round_trip_with_logprobs_and_audio() -> None:
    request = parse_request({"model": "m", "messages": [{"role": "user", "content": "x"}]})
    response = Response(
        "chatcmpl-1",
        "m",
        (
            TextPart("Hi", logprobs=(HI,)),
            AudioPart(data="AAAA", transcript="Hi", id="a", expires_at=5),
        ),
    )
    body = render_response(response, request)
    openai.types.chat.ChatCompletion.model_validate(body)
    assert body["choices"][0]["message"]["audio"] == {
        "id": "a", "data": "AAAA", "expires_at": 5, "transcript": "Hi"
    }  # fmt: skip
    assert parse_response(body).parts == response.parts
    no_logprobs = render_response(Response("c", "m", (TextPart("Hi"),)), request)
    assert no_logprobs["choices"][0]["logprobs"] is None


def test_chat_audio_history_and_malformed_input_audio() -> None:
    parsed = parse_request(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": 1}}]},
                {"role": "assistant", "audio": {"id": "audio_1"}},
            ],
        }
    )
    # not ours to judge: kept for the upstream, which answers its own 400
    assert parsed.messages[0].parts[0].raw["input_audio"] == {"data": 1}  # type: ignore[union-attr]
    body = get_dialect("openai").render_request(parsed)
    assert body["messages"][1] == {"role": "assistant", "content": None, "audio": {"id": "audio_1"}}
    spoken = Request("m", (Message("assistant", (AudioPart(id="audio_2", transcript="Hi"),)),))
    assert get_dialect("openai").render_request(spoken)["messages"][0]["audio"] == {"id": "audio_2"}


# --- OpenAI Responses ---------------------------------------------------------------------------


def test_responses_logprobs_request_both_ways() -> None:
    body = {"model": "m", "input": "hi", "top_logprobs": 2,
            "include": ["message.output_text.logprobs"]}  # fmt: skip
    parsed = parse_responses(body)
    assert (parsed.logprobs, parsed.top_logprobs) == (True, 2)
    assert render_responses(parsed) == body  # a Responses client's own body, unchanged
    from_chat = render_responses(ask(logprobs=True, top_logprobs=3))
    assert from_chat["include"] == ["message.output_text.logprobs"]
    assert from_chat["top_logprobs"] == 3
    chat = get_dialect("openai").render_request(parsed)
    assert (chat["logprobs"], chat["top_logprobs"]) == (True, 2)


@pytest.mark.parametrize(
    ("kw", "param"),
    [
        ({"top_k": 5}, "top_k"),
        ({"min_p": 0.1}, "min_p"),
        ({"repetition_penalty": 1.1}, "repetition_penalty"),
        ({"output_audio": {"voice": "alloy"}}, "modalities"),
    ],
)
def test_responses_refuses_settings_it_has_no_field_for(kw: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        render_responses(ask(**kw))
    assert info.value.param == param
    assert "OpenAI Responses" in info.value.message


def test_responses_refuses_audio_input_naming_the_part() -> None:
    request = Request("m", (user("hear", AudioPart(data="AAAA", format="wav")),))
    with pytest.raises(InvalidRequestError) as info:
        render_responses(request)
    assert info.value.param == "messages[0].content[1]"
    assert "input_audio" in info.value.message


def test_responses_stream_and_body_carry_logprobs() -> None:
    codec = get_dialect("responses")
    request = parse_responses({"model": "m", "input": "hi", "stream": True, "top_logprobs": 1,
                               "include": ["message.output_text.logprobs"]})  # fmt: skip
    response = Response("resp_1", "m", (TextPart("Hi", logprobs=(HI,)),))
    encoder = codec.stream_encoder(request)
    raw = b"".join(encoder.encode(e) for e in unfold(response))
    adapter = openai.types.responses.ResponseStreamEvent
    events = [orjson.loads(line[6:]) for line in raw.split(b"\n") if line.startswith(b"data: ")]
    from pydantic import TypeAdapter

    for event in events:
        TypeAdapter(adapter).validate_python(event)
    delta = next(e for e in events if e["type"] == "response.output_text.delta")
    assert delta["logprobs"][0]["token"] == "Hi"
    done = next(e for e in events if e["type"] == "response.output_text.done")
    assert done["logprobs"] == delta["logprobs"]
    decoder = EventDecoder(codec, request)
    assert fold(decoder.decode(raw) + decoder.flush()).parts == response.parts
    body = codec.render_response(response, request)
    openai.types.responses.Response.model_validate(body)
    assert codec.parse_response(body, request).parts == response.parts


# --- Anthropic ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "param"),
    [
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"min_p": 0.1}, "min_p"),
        ({"repetition_penalty": 1.1}, "repetition_penalty"),
        ({"output_audio": {}}, "modalities"),
    ],
)
def test_anthropic_refuses_settings_it_has_no_field_for(kw: dict[str, object], param: str) -> None:
    with pytest.raises(InvalidRequestError) as info:
        render_anthropic(ask(**kw))
    assert info.value.param == param
    assert "Anthropic Messages" in info.value.message
    assert render_anthropic(ask(top_k=3))["top_k"] == 3  # its own sampler goes through


def test_anthropic_refuses_audio_input_naming_the_part() -> None:
    request = Request(
        "m", (Message("system", (TextPart("s"),)), user("hear", AudioPart(data="AA")))
    )
    with pytest.raises(InvalidRequestError) as info:
        render_anthropic(request)
    assert info.value.param == "messages[1].content[1]"
    assert "audio input is not supported" in info.value.message
