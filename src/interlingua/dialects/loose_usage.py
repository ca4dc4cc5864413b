"""Token usage written oddly, read anyway: the slow path behind every usage reader.

Servers, and the proxies in front of them, write usage in more ways than the APIs
document: counts as numeric strings (``"prompt_tokens": "12"``) or floats, reasoning
tokens at the top level (``"reasoning_tokens": 4`` beside ``completion_tokens``),
Anthropic's ``cache_read_input_tokens`` / ``cache_creation_input_tokens`` inside an
OpenAI Chat usage (LiteLLM and other proxies). Each reader -- a dialect's parser, the
gateway's counters of relayed bytes, the client's :func:`normalize_usage` -- reads the
usual shape fast (ints where its API puts them) and hands a usage object holding
anything else to :func:`loose_usage`, which reads every shape:

* a Chat usage (``prompt_tokens`` / ``completion_tokens``, or Ollama's
  ``prompt_eval_count`` / ``eval_count``): the prompt count is the whole input, cache
  included, as the Chat API means it (a proxy that adds Anthropic's cache fields keeps
  that meaning: LiteLLM adds the cache to ``prompt_tokens``); the cached part is
  ``prompt_tokens_details.cached_tokens``, else DeepSeek's ``prompt_cache_hit_tokens``,
  else ``cache_read_input_tokens``; cache writes ``cache_write_tokens`` or
  ``cache_creation_input_tokens``; the details in ``prompt_tokens_details`` /
  ``completion_tokens_details``;
* otherwise ``input_tokens``, plus Anthropic's cache fields, which its ``input_tokens``
  leaves out (a Responses usage has none, and counts its cache inside), the details in
  ``input_tokens_details`` / ``output_tokens_details``;
* reasoning: the details' ``reasoning_tokens`` (``thinking_tokens``), else a top-level
  ``reasoning_tokens``.

Each value is read by :func:`loose_count`. Pure: no I/O.
"""

from __future__ import annotations

import math
from typing import Any

from ..core import Usage

__all__ = ["CHAT_COUNT_KEYS", "loose_count", "loose_usage"]

#: keys whose presence makes a usage object a Chat Completions one (Ollama's too)
CHAT_COUNT_KEYS = ("prompt_tokens", "completion_tokens", "prompt_eval_count", "eval_count")


def loose_count(value: object) -> int:
    """A token count however it was written: an int, a float (truncated), a string of a
    number (``"12"``, ``" 12 "``, ``"12.0"``); never negative; anything else (a null,
    a bool, text, a NaN or infinity, a number beyond any real count) 0.

    >>> [loose_count(v) for v in (12, "12", 12.7, "x", True, -1)]
    [12, 12, 12, 0, 0, 0]
    """
    if type(value) is int:  # the usual case first (a bool is not one)
        return value if value > 0 else 0
    return _number(value) or 0


#: No real count comes near it (the largest integer JavaScript's JSON keeps exactly). A
#: float or string beyond it would become an int no JSON encoder here writes (orjson
#: refuses integers beyond 64 bits): one odd field would fail the whole answer.
_MAX_COUNT = 2**53


def _number(value: object) -> int | None:
    """``value`` as a count if it is a number at all (an int, a finite float, a string
    of one; 0 when negative), else None (also for one beyond :data:`_MAX_COUNT`)."""
    number: float
    if type(value) is int:
        return value if value > 0 else 0
    if isinstance(value, str):
        try:
            count = int(value)
        except ValueError:
            pass
        else:
            return None if count > _MAX_COUNT else max(0, count)
        try:
            number = float(value)
        except ValueError:
            return None
    elif isinstance(value, float):
        number = value
    else:
        return None
    if math.isfinite(number) and number <= _MAX_COUNT:
        return int(number) if number > 0 else 0
    return None


def _first(obj: object, *keys: str) -> int:
    """The count of the first of ``keys`` in ``obj`` (a dict) that holds a number (0
    included: a count of 0 is a count), else 0."""
    if type(obj) is not dict:
        return 0
    for key in keys:
        count = _number(obj.get(key))
        if count is not None:
            return count
    return 0


def loose_usage(raw: dict[str, Any]) -> Usage:
    """The neutral usage of a usage object of any shape, each count read by
    :func:`loose_count` (the module docstring says which key means what; of several keys
    for one count, the first that holds a number wins).

    >>> loose_usage({"prompt_tokens": "12", "completion_tokens": 3, "reasoning_tokens": 2})
    Usage(input_tokens=12, output_tokens=3, cache_read_tokens=0, cache_write_tokens=0, reasoning_tokens=2, estimated=False)
    """
    read = _first(raw, "cache_read_input_tokens")
    write = _first(raw, "cache_creation_input_tokens")
    if any(key in raw for key in CHAT_COUNT_KEYS):
        inputs, outputs = raw.get("prompt_tokens_details"), raw.get("completion_tokens_details")
        tokens_in = _first(raw, "prompt_tokens", "prompt_eval_count", "input_tokens")
        tokens_out = _first(raw, "completion_tokens", "eval_count", "output_tokens")
        cached = _first(inputs, "cached_tokens") or _first(raw, "prompt_cache_hit_tokens") or read
        written = _first(inputs, "cache_write_tokens") or write
    else:
        inputs, outputs = raw.get("input_tokens_details"), raw.get("output_tokens_details")
        tokens_in = _first(raw, "input_tokens") + read + write
        tokens_out = _first(raw, "output_tokens")
        cached = read or _first(inputs, "cached_tokens")
        written = write or _first(inputs, "cache_write_tokens")
    return Usage(
        input_tokens=tokens_in,
        output_tokens=tokens_out,
        cache_read_tokens=cached,
        cache_write_tokens=written,
        reasoning_tokens=_first(outputs, "reasoning_tokens", "thinking_tokens")
        or _first(raw, "reasoning_tokens"),
    )
