"""core.frozen.quick_init: the generated __init__ of the neutral values builds exactly
what the dataclass-generated one builds, with the same signature and the same errors."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest

import interlingua.core as core
from interlingua.core.frozen import quick_init

#: every frozen dataclass the core exports (all built with quick_init)
VALUES = sorted(
    (
        v
        for v in vars(core).values()
        if isinstance(v, type)
        and dataclasses.is_dataclass(v)
        and v.__module__.startswith("interlingua.core")
    ),
    key=lambda c: c.__name__,
)


def reference(cls: type) -> type:
    """The same fields as a plain frozen, slotted dataclass (the dataclass __init__)."""
    spec = []
    for f in dataclasses.fields(cls):
        kwargs: dict[str, Any] = {}
        if f.default is not dataclasses.MISSING:
            kwargs["default"] = f.default
        if f.default_factory is not dataclasses.MISSING:
            kwargs["default_factory"] = f.default_factory
        spec.append((f.name, Any, dataclasses.field(**kwargs)))
    return dataclasses.make_dataclass(cls.__name__, spec, frozen=True, slots=True)


def values(cls: type) -> list[object]:
    """A distinct object per field."""
    return [object() for _ in dataclasses.fields(cls)]


def test_every_core_value_uses_quick_init() -> None:
    assert len(VALUES) > 20
    for cls in VALUES:
        names = cls.__init__.__code__.co_names
        assert names and all(n.startswith(("_set_", "_factory_", "_FACTORY")) for n in names)


@pytest.mark.parametrize("cls", VALUES, ids=lambda c: c.__name__)
def test_same_signature_values_and_errors(cls: type) -> None:
    ref = reference(cls)
    ours, theirs = inspect.signature(cls), inspect.signature(ref)
    assert [(p.name, p.kind) for p in ours.parameters.values()] == [
        (p.name, p.kind) for p in theirs.parameters.values()
    ]
    assert [str(p.default) for p in ours.parameters.values()] == [
        str(p.default) for p in theirs.parameters.values()
    ]
    names = [f.name for f in dataclasses.fields(cls)]
    required = [n for n, p in ours.parameters.items() if p.default is inspect.Parameter.empty]
    given = values(cls)
    # positional, keyword, and only the required ones (the defaults filled in)
    for args, kwargs in (
        (given, {}),
        ([], dict(zip(names, given, strict=True))),
        (given[: len(required)], {}),
    ):
        a, b = cls(*args, **kwargs), ref(*args, **kwargs)
        for name in names:
            assert getattr(a, name) == getattr(b, name), name
    for bad_args, bad_kwargs in (
        ([*given, 1], {}),
        (given, {"no_such_field": 1}),
        (given[: len(required) - 1], {}) if required else ([], {"no_such_field": 1}),
    ):
        with pytest.raises(TypeError):
            cls(*bad_args, **bad_kwargs)
        with pytest.raises(TypeError):
            ref(*bad_args, **bad_kwargs)


def test_default_factories_make_a_new_value_each_time_and_values_stay_frozen() -> None:
    a, b = core.TextPart("x"), core.TextPart("y")
    assert a.meta == {} and a.meta is not b.meta
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.text = "z"  # type: ignore[misc]
    assert core.TextPart("x") == a and hash(core.Usage(1, 2)) == hash(core.Usage(1, 2))


def test_only_frozen_slotted_dataclasses_without_post_init() -> None:
    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class PostInit:
        a: int

        def __post_init__(self) -> None:
            pass

    for cls in (NoSlots, PostInit):
        with pytest.raises(TypeError):
            quick_init(cls)
