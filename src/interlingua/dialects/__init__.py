"""Wire dialects: pure codecs between each API's JSON and the neutral core.

``get_dialect("openai")`` / ``get_dialect("anthropic")`` / ``get_dialect("responses")``
return the codec object; see :mod:`interlingua.dialects.base` for the contract.
"""

from __future__ import annotations

from importlib import import_module

from ._common import encode_body, parse_data_uri, random_id
from .base import Dialect, EventDecoder, RawEventDecoder, StreamDecoder, StreamEncoder

_MODULES = {"openai": "openai_chat", "anthropic": "anthropic", "responses": "openai_responses"}
#: every dialect's name
DIALECT_NAMES = tuple(_MODULES)


def get_dialect(name: str) -> Dialect:
    """The codec for ``name`` (``openai`` or ``anthropic``)."""
    try:
        module = _MODULES[name]
    except KeyError:
        raise ValueError(f"unknown dialect {name!r}; known: {sorted(_MODULES)}") from None
    dialect: Dialect = import_module(f"{__name__}.{module}").DIALECT
    return dialect


__all__ = [
    "DIALECT_NAMES",
    "Dialect",
    "EventDecoder",
    "RawEventDecoder",
    "StreamDecoder",
    "StreamEncoder",
    "encode_body",
    "get_dialect",
    "parse_data_uri",
    "random_id",
]
