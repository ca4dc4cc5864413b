"""Per-model request shaping: a model entry's ``params``, ``force_params``, ``drop_params``.

The keys are *wire* keys, written in the upstream's own dialect (``chat_template_kwargs``
for vLLM, ``temperature``, ``reasoning_effort``...), and act on the body the upstream
receives, on both paths:

* ``params`` are merged into the body's top level; a key the body already has (the
  client's value, or what the codec rendered from it) keeps its value unless the key is
  listed in ``force_params``. The merge is shallow, as LiteLLM merges a deployment's
  ``litellm_params`` under the caller's arguments: a client that sends its own
  ``chat_template_kwargs`` replaces the configured object whole (a predictable rule:
  nobody gets half of each). A ``null`` from the client counts as absent. The two names
  of OpenAI's output limit count as one key (a client's ``max_completion_tokens`` wins
  over a configured ``max_tokens``).
* ``drop_params`` are removed last, whatever put them there (the client, the codec or
  the gateway: dropping ``stream_options`` helps servers that reject it).

Order: merge, the upstream's own fix-ups (:meth:`Upstream.adjust_body`: the Chat
``max_tokens_field``), drop.

On the translated path a codec refuses some settings outright toward an API that has no
such parameter (``logprobs``/``top_logprobs``, ``min_p``, ``repetition_penalty``, audio
output, and ``top_k`` toward Responses: the caller asked for them by name and would not
get them). A model whose ``drop_params`` names one of them wants it dropped instead:
:func:`drop_refused` clears the neutral field before the codec renders, so the refusal
becomes a silent drop (``logprobs`` takes ``top_logprobs`` with it; ``modalities`` or
``audio`` clears the audio output).

The same upstream object serves many models, so the shaping travels with the request:
the gateway puts the route's :class:`~interlingua.config.ModelConfig` in
``Request.extra[SHAPING]`` (:func:`for_upstream`); an HTTP upstream takes it out before
its codec renders (the marker never reaches a wire) and applies it to the rendered body;
the passthrough path applies it to the client's parsed body (:func:`shape_body`) before
it is encoded. A model with none of these keys gets no marker and its passthrough body is
untouched, so it is relayed byte-exact as before.

Upstreams with no wire (``local``, and ``fake`` without ``wire``) map what has a neutral
field (:func:`neutral_request`): ``temperature``, ``top_p``, ``top_k``, ``seed``,
``max_tokens`` (also under ``max_completion_tokens`` / ``max_output_tokens``), ``stop``
(also ``stop_sequences``), ``min_p``, ``repetition_penalty``, ``logprobs`` and
``top_logprobs``; other keys go to ``Request.extra``, where the local engine reads
``repeat_penalty``, ``frequency_penalty`` and ``presence_penalty``, and where anything
else is ignored.
"""

from __future__ import annotations

import copy
import logging
from typing import TYPE_CHECKING, Any

from ..config import ModelConfig
from ..core import Request, drop_settings, replace_request

if TYPE_CHECKING:
    from .base import Upstream

__all__ = [
    "SHAPING",
    "drop_params",
    "drop_refused",
    "for_upstream",
    "merge_params",
    "neutral_request",
    "shape_body",
    "take_shaping",
]

log = logging.getLogger("interlingua.upstreams")

#: the ``Request.extra`` key holding the route's ModelConfig (never rendered on a wire)
SHAPING = "_interlingua_shaping"

# OpenAI's two names of one setting: a body with either "has" the other.
_ALIASES = {
    "max_tokens": ("max_completion_tokens",),
    "max_completion_tokens": ("max_tokens",),
}


def for_upstream(request: Request, model: str, entry: ModelConfig | None) -> Request:
    """``request`` as an upstream gets it: its ``model`` replaced and, when ``entry``
    shapes the body, the marker that says how (module docstring)."""
    if entry is None or not entry.shapes_body:
        return replace_request(request, model=model)
    return replace_request(request, model=model, extra={**request.extra, SHAPING: entry})


def take_shaping(request: Request) -> tuple[Request, ModelConfig | None]:
    """``request`` without the marker, and the ModelConfig it held (None: no shaping)."""
    entry = request.extra.get(SHAPING) if request.extra else None
    if not isinstance(entry, ModelConfig):
        return request, None
    extra = {k: v for k, v in request.extra.items() if k != SHAPING}
    return replace_request(request, extra=extra), entry


def merge_params(body: dict[str, Any], entry: ModelConfig) -> None:
    """``entry.params`` merged into ``body`` (in place): the body's values win unless
    forced. Values are copied, so a later change to the body never reaches the config."""
    force = entry.force_params
    for key, value in entry.params.items():
        if key not in force and _has(body, key):
            continue
        for alias in _ALIASES.get(key, ()):
            body.pop(alias, None)  # forced: ours replaces the client's, under either name
        body[key] = copy.deepcopy(value) if isinstance(value, dict | list) else value


def drop_params(body: dict[str, Any], entry: ModelConfig) -> None:
    """``entry.drop_params`` removed from ``body`` (in place)."""
    for key in entry.drop_params:
        body.pop(key, None)


def drop_refused(request: Request, entry: ModelConfig | None) -> Request:
    """``request`` without the settings a codec would refuse that ``entry.drop_params``
    names (module docstring); ``request`` itself when there are none."""
    if entry is None or not entry.drop_params:
        return request
    return drop_settings(request, entry.drop_params)


def shape_body(body: dict[str, Any], entry: ModelConfig | None, upstream: Upstream) -> None:
    """The passthrough path's shaping of a client's parsed body (in place, before it is
    encoded): merge, the upstream's fix-ups, drop. With no shaping and nothing for the
    upstream to fix, ``body`` is left exactly as it was."""
    if entry is not None and entry.shapes_body:
        merge_params(body, entry)
        upstream.adjust_body(body)
        drop_params(body, entry)
    else:
        upstream.adjust_body(body)


def _has(body: dict[str, Any], key: str) -> bool:
    if body.get(key) is not None:
        return True
    return any(body.get(alias) is not None for alias in _ALIASES.get(key, ()))


# --- upstreams without a wire ------------------------------------------------------------

# wire key -> neutral Request field
_NEUTRAL = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "seed": "seed",
    "max_tokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "max_output_tokens": "max_tokens",
    "stop": "stop",
    "stop_sequences": "stop",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "logprobs": "logprobs",
    "top_logprobs": "top_logprobs",
}
_FLOATS = frozenset({"temperature", "top_p", "min_p", "repetition_penalty"})
_CLEARED: dict[str, Any] = {"stop": (), "logprobs": False}  # a dropped field's empty value


def neutral_request(request: Request) -> Request:
    """``request`` with its shaping (if any) applied to the neutral fields and ``extra``,
    and the marker removed: for upstreams that render no wire (module docstring)."""
    request, entry = take_shaping(request)
    if entry is None:
        return request
    request = drop_refused(request, entry)
    changes: dict[str, Any] = {}
    extra = dict(request.extra)
    for key in entry.drop_params:
        name = _NEUTRAL.get(key)
        if name is not None:
            changes[name] = _CLEARED.get(name)
        extra.pop(key, None)
    for key, value in entry.params.items():
        forced = key in entry.force_params
        name = _NEUTRAL.get(key)
        if name is None:
            if forced or extra.get(key) is None:
                extra[key] = copy.deepcopy(value)
            continue
        current = changes.get(name, getattr(request, name))
        if forced or current is None or current == () or current is False:
            converted = _neutral_value(name, value)
            if converted is not None:
                changes[name] = converted
            else:
                log.warning(
                    "model %s: params.%s=%r is not a valid %s; ignored",
                    entry.name,
                    key,
                    value,
                    name,
                )
    return replace_request(request, extra=extra, **changes)


def _neutral_value(name: str, value: Any) -> Any:
    """``value`` as the neutral field ``name`` holds it, or None when it cannot be."""
    if name == "stop":
        if isinstance(value, str):
            return (value,)
        if isinstance(value, list) and all(isinstance(s, str) for s in value):
            return tuple(value)
        return None
    if name == "logprobs":
        return value if isinstance(value, bool) else None
    if isinstance(value, bool):
        return None
    if name in _FLOATS:
        return float(value) if isinstance(value, int | float) else None
    return value if isinstance(value, int) else None
