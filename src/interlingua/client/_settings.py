"""Client-wide default settings, merged under every call's own.

``AsyncClient(..., defaults={"temperature": 0.2, "max_tokens": 512})`` fills every call
(``chat``, ``stream``, ``prepare``, ``run_tools``, ``generate``) with these settings; the
call's own keyword arguments win. A call argument that is None counts as not given (the
default applies), so an item built from a table row with empty cells still gets the
defaults. ``extra_body`` is merged one level deep (the call's keys win), since a default
such as ``{"chat_template_kwargs": ...}`` and a call's ``{"top_k": 20}`` are meant to add
up.

The keys a default may set are the keyword arguments of
:meth:`~interlingua.client.AsyncClient.prepare` (read from its signature, so a new
request setting is a valid default at once) plus the result options of ``chat``
(:data:`RESULT_KEYS`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, ParamSpec, TypeVar

__all__ = ["RESULT_KEYS", "check_keys", "merge", "request_defaults", "with_defaults"]

RESULT_KEYS = frozenset({"parse_json", "think_tags", "retry_on_empty"})
"""Settings that shape how an answer is read, not what is sent."""

T = TypeVar("T")
P = ParamSpec("P")


def merge(defaults: Mapping[str, Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """``kwargs`` over ``defaults`` (None in ``kwargs`` = not given; ``extra_body`` merged).

    >>> merge({"temperature": 0.2, "max_tokens": 9}, {"temperature": 0.7, "max_tokens": None})
    {'temperature': 0.7, 'max_tokens': 9}
    """
    out = dict(defaults)
    for key, value in kwargs.items():
        if value is None:
            out.setdefault(key, None)
        elif key == "extra_body" and isinstance(out.get(key), Mapping):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def request_defaults(defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The defaults that go into the request (all but the result options)."""
    return {k: v for k, v in defaults.items() if k not in RESULT_KEYS}


def check_keys(keys: Iterable[str], allowed: frozenset[str], where: str) -> None:
    """Raise TypeError naming the first of ``keys`` not in ``allowed``."""
    unknown = sorted(set(keys) - allowed)
    if unknown:
        raise TypeError(
            f"{where}: unknown setting {unknown[0]!r}; the settings are {', '.join(sorted(allowed))}"
        )


def with_defaults(
    prepare: Callable[P, Coroutine[Any, Any, T]],
) -> Callable[P, Coroutine[Any, Any, T]]:
    """Decorate ``AsyncClient.prepare``: its keyword arguments are merged over the
    client's ``defaults`` (those it takes; the result options are the caller's)."""

    @functools.wraps(prepare)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        defaults = getattr(args[0], "defaults", None)
        if defaults:
            return await prepare(*args, **merge(request_defaults(defaults), kwargs))
        return await prepare(*args, **kwargs)

    return wrapper
