"""Which Chat Completions field carries the output limit, and moving it there.

OpenAI renamed ``max_tokens`` to ``max_completion_tokens`` (2024-09); its reasoning
models (the o-series: ``o1``, ``o3-mini``, ``o4-mini``...; and ``gpt-5`` and later)
refuse ``max_tokens`` with a 400 ("Unsupported parameter: 'max_tokens' ... Use
'max_completion_tokens' instead"), while many OpenAI-compatible servers (older llama.cpp,
some hosted APIs) know only ``max_tokens``. So the field is chosen per upstream model:

* configured (``max_tokens_field`` on an ``openai`` upstream, ``max_tokens_field=`` on the
  client): always that field;
* otherwise by the model's name: ``max_completion_tokens`` for the models known to refuse
  the old name, and for every other model the field the body already has (a Chat client
  that wrote ``max_completion_tokens`` meant it; a body rendered from another dialect
  has ``max_tokens``, which every server takes).

Shared by the gateway's upstreams and :mod:`interlingua.client` (pure: no I/O).
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MAX_TOKENS_FIELDS", "default_max_tokens_field", "place_max_tokens"]

#: where a Chat upstream takes the output limit
MAX_TOKENS_FIELDS = ("max_tokens", "max_completion_tokens")

# o1, o1-mini, o3, o3-mini-2025-01-31, o4-mini ... (not "omni-x" or "olmo")
_O_SERIES = re.compile(r"o\d+(?:-|$)")
_GPT = re.compile(r"gpt-(\d+)")
# Model names seen so far -> their default field (a gateway sees a handful of names).
_DEFAULTS: dict[str, str] = {}
_MAX_CACHED = 4096


def default_max_tokens_field(model: str) -> str:
    """The field a Chat upstream serving ``model`` takes when nothing is configured.

    A provider prefix (``openai/o3`` on OpenRouter, say) is ignored.

    >>> default_max_tokens_field("o3-mini"), default_max_tokens_field("openai/gpt-5-mini")
    ('max_completion_tokens', 'max_completion_tokens')
    >>> default_max_tokens_field("gpt-4o"), default_max_tokens_field("Qwen/Qwen3-8B")
    ('max_tokens', 'max_tokens')
    """
    field = _DEFAULTS.get(model)
    if field is None:
        name = model.rsplit("/", 1)[-1].lower()
        gpt = _GPT.match(name)
        reasoning = _O_SERIES.match(name) is not None or (gpt is not None and int(gpt[1]) >= 5)
        field = "max_completion_tokens" if reasoning else "max_tokens"
        if len(_DEFAULTS) >= _MAX_CACHED:
            _DEFAULTS.clear()
        _DEFAULTS[model] = field
    return field


def place_max_tokens(body: dict[str, Any], configured: str | None = None) -> None:
    """Move a Chat body's output limit to the field its upstream takes (in place).

    ``configured`` is the upstream's (or client's) explicit choice, else None: then the
    limit moves only toward ``max_completion_tokens``, for a model that needs it (module
    docstring). With both fields present (a client's and a config default), the one
    already in the target field is kept.

    >>> body = {"model": "o3", "max_tokens": 64}
    >>> place_max_tokens(body); body
    {'model': 'o3', 'max_completion_tokens': 64}
    >>> body = {"model": "llama", "max_completion_tokens": 64}
    >>> place_max_tokens(body); body
    {'model': 'llama', 'max_completion_tokens': 64}
    >>> place_max_tokens(body, "max_tokens"); body
    {'model': 'llama', 'max_tokens': 64}
    """
    if configured is None:
        if "max_tokens" not in body:
            return  # nothing to move (the hot path: most bodies, or already right)
        model = body.get("model")
        target = default_max_tokens_field(model) if isinstance(model, str) else "max_tokens"
        if target == "max_tokens":
            return
    else:
        target = configured
    other = "max_tokens" if target == "max_completion_tokens" else "max_completion_tokens"
    if other in body:
        value = body.pop(other)
        if body.get(target) is None:
            body[target] = value
