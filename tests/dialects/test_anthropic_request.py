"""Anthropic request parsing: wire body -> neutral Request.

The body: docs/protocols.md, "Messages: request body", "Messages: content blocks" and
"Messages: tools, tool_choice and thinking".
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from interlingua.core import (
    DocumentPart,
    ImagePart,
    Message,
    Reasoning,
    ReasoningPart,
    ResponseFormat,
    TextPart,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
    UnknownPart,
)
from interlingua.dialects import get_dialect
from interlingua.dialects.anthropic import DIALECT
from interlingua.dialects.base import Dialect
from interlingua.errors import InvalidRequestError

PNG = "iVBORw0KGgo="


def body(*messages: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"model": "claude-x", "max_tokens": 100, "messages": list(messages), **kw}


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def assistant(content: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def parse_error(raw: Any) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as info:
        DIALECT.parse_request(raw)
    assert info.value.status == 400
    return info.value


def test_dialect_satisfies_protocol_and_registry() -> None:
    codec: Dialect = DIALECT
    assert codec.name == "anthropic"
    assert get_dialect("anthropic") is DIALECT


def test_minimal_request() -> None:
    req = DIALECT.parse_request(body(user("hi")))
    assert req.model == "claude-x"
    assert req.max_tokens == 100
    assert req.messages == (Message("user", (TextPart("hi"),)),)
    assert req.source_dialect == "anthropic"
    assert req.stream is False
    assert req.extra == {}


@pytest.mark.parametrize(
    ("raw", "param", "message"),
    [
        ({"model": "m", "messages": [user("x")]}, "max_tokens", "max_tokens: Field required"),
        ({"max_tokens": 5, "messages": [user("x")]}, "model", "model: Field required"),
        ({"model": "m", "max_tokens": 5}, "messages", "messages: Field required"),
    ],
)
def test_required_fields(raw: dict[str, Any], param: str, message: str) -> None:
    err = parse_error(raw)
    assert err.param == param
    assert str(err) == message


def test_messages_must_be_non_empty() -> None:
    assert parse_error(body()).param == "messages"


def test_body_must_be_object() -> None:
    assert parse_error([1, 2]).param == "body"


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (body(user("x"), max_tokens="10"), "max_tokens"),
        (body(user("x"), max_tokens=True), "max_tokens"),
        (body(user("x"), max_tokens=-1), "max_tokens"),
        (body(user("x"), temperature="hot"), "temperature"),
        (body(user("x"), top_k=1.5), "top_k"),
        (body(user("x"), stream="yes"), "stream"),
        (body(user("x"), stop_sequences=["a", 3]), "stop_sequences[1]"),
        (body({"role": "tool", "content": "x"}), "messages[0].role"),
        (body({"content": "x"}), "messages[0].role"),
        (body(user("x"), {"role": "user"}), "messages[1].content"),
        (body(user("x"), user([{"text": "hi"}])), "messages[1].content[0].type"),
        (body(user("x"), user([{"type": "text"}])), "messages[1].content[0].text"),
        (body(user([{"type": "text", "text": 5}])), "messages[0].content[0].text"),
        (body(user(["plain"])), "messages[0].content[0]"),
        (body(user(5)), "messages[0].content"),
        (
            body(user([{"type": "image", "source": {"type": "base64", "data": PNG}}])),
            "messages[0].content[0].source.media_type",
        ),
        (
            body(assistant([{"type": "tool_use", "id": "t", "name": "f", "input": [1]}])),
            "messages[0].content[0].input",
        ),
        (
            body(user([{"type": "tool_result", "content": "x"}])),
            "messages[0].content[0].tool_use_id",
        ),
        (body(user("x"), system=[{"type": "image"}]), "system[0].type"),
        (body(user("x"), tools=[{"name": "f"}]), "tools[0].input_schema"),
        (body(user("x"), tools=[{"input_schema": {}}]), "tools[0].name"),
        (body(user("x"), tool_choice={"type": "sometimes"}), "tool_choice.type"),
        (body(user("x"), tool_choice={"type": "tool"}), "tool_choice.name"),
        (body(user("x"), thinking={"type": "enabled"}), "thinking.budget_tokens"),
        (body(user("x"), metadata={"user_id": 7}), "metadata.user_id"),
        (body(user("x"), output_config={"format": {"type": "xml"}}), "output_config.format.type"),
    ],
)
def test_validation_names_the_field(raw: dict[str, Any], param: str) -> None:
    assert parse_error(raw).param == param


def test_missing_nested_field_uses_anthropic_wording() -> None:
    err = parse_error(body(user("x"), assistant([{"type": "tool_use", "name": "f"}])))
    assert str(err) == "messages[1].content[0].id: Field required"


def test_top_level_system_string_becomes_leading_system_message() -> None:
    req = DIALECT.parse_request(body(user("hi"), system="Be brief."))
    assert req.messages[0] == Message("system", (TextPart("Be brief."),))
    assert req.system_text == "Be brief."


def test_system_blocks_keep_cache_control() -> None:
    cc = {"type": "ephemeral", "ttl": "1h"}
    req = DIALECT.parse_request(
        body(
            user("hi"),
            system=[
                {"type": "text", "text": "A"},
                {"type": "text", "text": "B", "cache_control": cc},
            ],
        )
    )
    system = req.messages[0]
    assert system.role == "system"
    assert [p.text for p in system.parts] == ["A", "B"]  # type: ignore[union-attr]
    assert system.parts[1].meta == {"cache_control": cc}  # type: ignore[union-attr]


def test_system_role_inside_messages_stays_in_place() -> None:
    req = DIALECT.parse_request(
        body(user("a"), {"role": "system", "content": "mid"}, assistant("b"))
    )
    assert [m.role for m in req.messages] == ["user", "system", "assistant"]
    assert req.messages[1].parts == (TextPart("mid"),)


def test_mid_conv_system_block_splits_the_message() -> None:
    content = [
        {"type": "text", "text": "before"},
        {"type": "mid_conv_system", "content": [{"type": "text", "text": "rule"}]},
        {"type": "text", "text": "after"},
    ]
    req = DIALECT.parse_request(body(user(content)))
    assert [(m.role, m.parts) for m in req.messages] == [
        ("user", (TextPart("before"),)),
        ("system", (TextPart("rule"),)),
        ("user", (TextPart("after"),)),
    ]


def test_text_block_meta_keeps_cache_control_and_citations() -> None:
    block = {"type": "text", "text": "t", "cache_control": {"type": "ephemeral"}, "citations": []}
    part = DIALECT.parse_request(body(user([block]))).messages[0].parts[0]
    assert part == TextPart("t")
    assert part.meta == {"cache_control": {"type": "ephemeral"}, "anthropic": {"citations": []}}  # type: ignore[union-attr]


def test_images_base64_and_url() -> None:
    blocks = [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
        {"type": "image", "source": {"type": "file", "file_id": "file_1"}},
    ]
    parts = DIALECT.parse_request(body(user(blocks))).messages[0].parts
    assert parts[0] == ImagePart(media_type="image/png", data=PNG)
    assert parts[1] == ImagePart(url="https://x/y.png")
    assert parts[2] == UnknownPart("anthropic", blocks[2])


def test_documents() -> None:
    blocks = [
        {
            "type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBER"},
            "title": "a.pdf",
        },
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "hi"}},
        {"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}},
    ]
    parts = DIALECT.parse_request(body(user(blocks))).messages[0].parts
    assert parts[0] == DocumentPart(media_type="application/pdf", data="JVBER", title="a.pdf")
    assert parts[1] == DocumentPart(media_type="text/plain", text="hi")
    assert parts[2] == DocumentPart(url="https://x/a.pdf")


def test_tool_use_and_tool_result() -> None:
    req = DIALECT.parse_request(
        body(
            user("weather?"),
            assistant(
                [{"type": "tool_use", "id": "toolu_1", "name": "get", "input": {"city": "Paris"}}]
            ),
            user(
                [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_2",
                        "is_error": True,
                        "content": [
                            {"type": "text", "text": "boom"},
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": PNG,
                                },
                            },
                        ],
                    },
                    {"type": "tool_result", "tool_use_id": "toolu_3"},
                ]
            ),
        )
    )
    call = req.messages[1].parts[0]
    assert call == ToolCallPart("toolu_1", "get", '{"city":"Paris"}')
    assert orjson.loads(call.arguments) == {"city": "Paris"}  # type: ignore[union-attr]
    first, second, third = req.messages[2].parts
    assert first == ToolResultPart("toolu_1", (TextPart("18C"),))
    assert second == ToolResultPart(
        "toolu_2", (TextPart("boom"), ImagePart(media_type="image/png", data=PNG)), is_error=True
    )
    assert third == ToolResultPart("toolu_3", ())


def test_tool_result_with_search_result_keeps_raw_content() -> None:
    content = [
        {"type": "text", "text": "intro"},
        {"type": "search_result", "source": "s", "title": "t", "content": []},
    ]
    req = DIALECT.parse_request(
        body(user([{"type": "tool_result", "tool_use_id": "t1", "content": content}]))
    )
    part = req.messages[0].parts[0]
    assert isinstance(part, ToolResultPart)
    assert part.content == (TextPart("intro"),)
    assert part.meta["anthropic"]["content"] == content


def test_thinking_blocks() -> None:
    req = DIALECT.parse_request(
        body(
            user("q"),
            assistant(
                [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "answer"},
                ]
            ),
        )
    )
    assert req.messages[1].parts == (
        ReasoningPart("hmm", signature="sig"),
        ReasoningPart(redacted="opaque"),
        TextPart("answer"),
    )


@pytest.mark.parametrize(
    "block",
    [
        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"q": 1}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
        {"type": "container_upload", "file_id": "f"},
    ],
)
def test_other_blocks_are_unknown_parts(block: dict[str, Any]) -> None:
    part = DIALECT.parse_request(body(assistant([block]))).messages[0].parts[0]
    assert part == UnknownPart("anthropic", block)


def test_tools_client_and_server() -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    server = {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}
    req = DIALECT.parse_request(
        body(
            user("x"),
            tools=[
                {"name": "get", "description": "d", "input_schema": schema, "strict": True},
                {"type": "custom", "name": "other", "input_schema": {"type": "object"}},
                server,
            ],
        )
    )
    assert [t.name for t in req.tools] == ["get", "other"]
    assert req.tools[0].parameters == schema
    assert req.tools[0].description == "d" and req.tools[0].strict is True
    assert req.extra["server_tools"] == [server]


@pytest.mark.parametrize(
    ("choice", "expected", "parallel"),
    [
        ({"type": "auto"}, ToolChoice("auto"), None),
        ({"type": "any"}, ToolChoice("required"), None),
        ({"type": "tool", "name": "get"}, ToolChoice("tool", "get"), None),
        ({"type": "none"}, ToolChoice("none"), None),
        ({"type": "any", "disable_parallel_tool_use": True}, ToolChoice("required"), False),
    ],
)
def test_tool_choice(choice: dict[str, Any], expected: ToolChoice, parallel: bool | None) -> None:
    req = DIALECT.parse_request(body(user("x"), tool_choice=choice))
    assert req.tool_choice == expected
    assert req.parallel_tool_calls is parallel


@pytest.mark.parametrize(
    ("thinking", "output_config", "expected"),
    [
        ({"type": "enabled", "budget_tokens": 1024}, None, Reasoning(True, "low", 1024)),
        ({"type": "enabled", "budget_tokens": 10000}, None, Reasoning(True, "medium", 10000)),
        ({"type": "enabled", "budget_tokens": 30000}, None, Reasoning(True, "high", 30000)),
        ({"type": "adaptive"}, None, Reasoning(True, "medium")),
        ({"type": "adaptive"}, {"effort": "high"}, Reasoning(True, "high")),
        ({"type": "disabled"}, None, Reasoning(False)),
    ],
)
def test_thinking_config(
    thinking: dict[str, Any], output_config: dict[str, Any] | None, expected: Reasoning
) -> None:
    extra = {"output_config": output_config} if output_config else {}
    req = DIALECT.parse_request(body(user("x"), thinking=thinking, **extra))
    assert req.reasoning == expected


def test_output_config_format_and_effort() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    req = DIALECT.parse_request(
        body(
            user("x"),
            output_config={"effort": "low", "format": {"type": "json_schema", "schema": schema}},
        )
    )
    assert req.response_format == ResponseFormat("json_schema", schema=schema)
    assert req.extra["output_config"] == {"effort": "low"}


def test_sampling_metadata_stream_and_unknown_fields() -> None:
    req = DIALECT.parse_request(
        body(
            user("x"),
            temperature=0.5,
            top_p=0.9,
            top_k=40,
            stop_sequences=["###", "END"],
            metadata={"user_id": "u-1"},
            stream=True,
            service_tier="auto",
            container="c1",
            cache_control={"type": "ephemeral"},
            inference_geo="us",
        )
    )
    assert (req.temperature, req.top_p, req.top_k) == (0.5, 0.9, 40)
    assert req.stop == ("###", "END")
    assert req.user == "u-1"
    assert req.metadata == {"user_id": "u-1"}
    assert req.stream is True
    assert req.extra == {
        "service_tier": "auto",
        "container": "c1",
        "cache_control": {"type": "ephemeral"},
        "inference_geo": "us",
    }


def test_count_tokens_body_needs_no_max_tokens() -> None:
    req = DIALECT.parse_count_tokens_request(
        {"model": "m", "messages": [user("hi")], "system": "s"}
    )
    assert req.max_tokens is None
    assert req.stream is False
    assert req.system_text == "s"
    # ...but the rest is validated as strictly as a Messages body.
    with pytest.raises(InvalidRequestError) as info:
        DIALECT.parse_count_tokens_request({"model": "m", "messages": []})
    assert info.value.param == "messages"


def test_max_tokens_zero_is_allowed() -> None:
    assert DIALECT.parse_request(body(user("x"), max_tokens=0)).max_tokens == 0
