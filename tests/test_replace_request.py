"""core.replace_request: dataclasses.replace for a Request, generated straight-line code."""

from __future__ import annotations

import dataclasses

import pytest

from interlingua.core import Message, Request, TextPart, ToolSpec, replace_request


def _request() -> Request:
    return Request(
        "m",
        (Message("user", (TextPart("hi"),)),),
        max_tokens=5,
        temperature=0.2,
        tools=(ToolSpec("f", "d", {"type": "object"}),),
        stream=True,
        extra={"a": 1},
        min_p=0.1,
    )


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"model": "other"},
        {"stream": False, "extra": {"b": 2}},
        {"output_audio": {"voice": "alloy", "format": "wav"}, "top_k": 3},
        {"messages": (), "tools": (), "tool_choice": None, "max_tokens": None},
    ],
)
def test_equals_dataclasses_replace(changes: dict[str, object]) -> None:
    request = _request()
    got = replace_request(request, **changes)
    assert got == dataclasses.replace(request, **changes)
    assert got is not request and type(got) is Request
    for field in dataclasses.fields(Request):  # the same objects, not copies
        assert getattr(got, field.name) is changes.get(field.name, getattr(request, field.name))


def test_every_field_can_be_replaced_and_unknown_ones_are_refused() -> None:
    request = _request()
    for field in dataclasses.fields(Request):
        marker = object()
        assert getattr(replace_request(request, **{field.name: marker}), field.name) is marker
    with pytest.raises(TypeError):
        replace_request(request, no_such_field=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        replace_request(request).model = "x"  # type: ignore[misc]
