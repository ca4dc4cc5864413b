"""Token usage read from relayed bytes (the passthrough path), without parsing the answer.

A limited upstream with ``tpm`` settles each request's token reservation with what the
answer says it used. On the passthrough path the answer is bytes the gateway does not
parse, so :func:`body_tokens` decodes only the ``usage`` member of a whole body and
:class:`StreamUsage` looks for ``"usage": {`` in a relayed stream and parses just the
events that carry one. Every dialect's shape is understood:

* Chat Completions: ``usage`` of the body or of the last chunk (``prompt_tokens`` +
  ``completion_tokens``, or ``total_tokens``);
* Messages: ``usage`` of the body, of ``message_start``'s ``message`` (input) and of
  ``message_delta`` (output, cumulative): ``input_tokens`` + the cache counts +
  ``output_tokens``;
* Responses: ``usage`` of the body or of the terminal event's ``response``.

Counts are totals, cache reads and writes included (the core's ``Usage.total_tokens``
meaning). Cost: one regular-expression scan per relayed read (``"usage": null``, which
OpenAI writes into every chunk, does not match), and a JSON parse of the few events that
match.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

from ..core.tokens import CHARS_PER_TOKEN

__all__ = [
    "USAGE_MARK",
    "StreamUsage",
    "body_tokens",
    "body_usage",
    "estimate_body_tokens",
    "usage_tokens",
]

_USAGE = re.compile(rb'"usage"\s*:\s*\{')
#: how compact JSON writes the start of a usage object (what _USAGE matches, unspaced)
_COMPACT = b'"usage":{'
#: the longest unfinished line kept while looking for usage (as the relay check's bound)
_MAX_LINE = 16 * 1024 * 1024
_INPUT_KEYS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


class _Body(msgspec.Struct):
    usage: dict[str, Any] | None = None


_BODY = msgspec.json.Decoder(_Body)


def usage_tokens(usage: dict[str, Any]) -> int:
    """Total tokens of one ``usage`` object of any dialect (0 when it counts none)."""
    total = usage.get("total_tokens")
    if isinstance(total, int) and total > 0:
        return total
    chat = _count(usage, "prompt_tokens") + _count(usage, "completion_tokens")
    if chat:
        return chat
    # Messages: input_tokens excludes the cache counts; Responses has no cache keys here.
    return sum(_count(usage, key) for key in _INPUT_KEYS) + _count(usage, "output_tokens")


#: where a relayed SSE read holds a ``usage`` object (``"usage": null`` does not match)
USAGE_MARK = _USAGE


def body_usage(body: bytes) -> dict[str, Any] | None:
    """The ``usage`` object of a whole JSON answer, decoding nothing else (None when it
    has none or is no JSON)."""
    try:
        return _BODY.decode(body).usage
    except msgspec.DecodeError:  # (ValidationError included: no usable usage)
        return None


def body_tokens(body: bytes) -> int:
    """Total tokens a whole JSON answer reports (0 when it has no usage or is no JSON)."""
    usage = body_usage(body)
    return usage_tokens(usage) if usage else 0


class _MaxOutput(msgspec.Struct):
    """The output limit of a passthrough body, whichever dialect's field holds it."""

    max_tokens: Any = None
    max_completion_tokens: Any = None
    max_output_tokens: Any = None


_MAX_OUTPUT = msgspec.json.Decoder(_MaxOutput)


def estimate_body_tokens(body: bytes) -> tuple[int, int]:
    """(input estimate, input + max output) of a request body of any dialect, unparsed:
    its bytes / 4 as the input, plus the output limit it sets (what a token limit
    reserves on admission, before the answer says what it cost)."""
    try:
        fields = _MAX_OUTPUT.decode(body)
    except msgspec.DecodeError:
        fields = _MaxOutput()
    limits = (fields.max_tokens, fields.max_completion_tokens, fields.max_output_tokens)
    output = next((n for n in limits if isinstance(n, int) and n > 0), 0)
    tokens_in = len(body) // CHARS_PER_TOKEN
    return tokens_in, tokens_in + output


def _count(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and value > 0 else 0


class StreamUsage:
    """Feed the relayed reads of one SSE stream; :attr:`tokens` is the total reported.

    Events are LF-framed whole events on the passthrough path (the relay check normalizes
    them), but a read may end mid-line: the unfinished line is kept for the next read.
    The largest value seen per key is kept, since Messages streams report input tokens
    in ``message_start`` and cumulative output tokens in each ``message_delta``; the
    objects are kept as found and merged when asked for (most streams report one, which
    needs no merge).
    """

    __slots__ = ("_found", "_held")

    def __init__(self) -> None:
        self._held: list[bytes] = []  # the unfinished line, in pieces
        self._found: list[dict[str, Any]] = []  # the usage objects seen, oldest first

    @property
    def counts(self) -> dict[str, Any]:
        """The usage reported so far, merged: the largest value per key (nested detail
        objects merged the same way). Not to be changed by the caller."""
        found = self._found
        if len(found) == 1:
            return found[0]
        counts: dict[str, Any] = {}
        for usage in found:
            _merge(counts, usage)
        if found:
            self._found = [counts]
        return counts

    @property
    def tokens(self) -> int:
        """Total tokens the stream reported so far (0: none)."""
        return usage_tokens(self.counts) if self._found else 0

    def feed(self, chunk: bytes) -> None:
        """Look at one relayed read (every read: a line may run on into the next)."""
        end = chunk.rfind(b"\n")
        if end < 0:
            if sum(map(len, self._held)) + len(chunk) <= _MAX_LINE:
                self._held.append(chunk)
            else:
                self._held.clear()  # an endless line: no usage event is that large
            return
        if self._held:
            data = b"".join((*self._held, chunk[:end]))
            self._held.clear()
            self._scan(data, len(data))
        elif chunk.find(b'"usage"', 0, end) >= 0:
            # (a plain substring search first: the pattern's own search is ~2x slower,
            # and most reads of most streams carry no usage at all)
            self._scan(chunk, end)
        if end + 1 < len(chunk):
            self._held.append(chunk[end + 1 :])

    def scan(self, events: bytes) -> None:
        """Look at whole events (``events`` ends at an event's end): for a reader that
        knows where usage can be and looks only there (server/accounting.py Meter)."""
        if events.find(b'"usage"') >= 0:
            self._scan(events, len(events))

    def _scan(self, data: bytes, end: int) -> None:
        # Compact JSON (OpenAI, Anthropic, vLLM...) first: a plain substring search is
        # several times cheaper than the pattern's, which the rest still get.
        at = data.find(_COMPACT, 0, end)
        if at < 0:
            match = _USAGE.search(data, 0, end)
            at = -1 if match is None else match.start()
            compact = False
        else:
            compact = True
        while at >= 0:
            start = data.rfind(b"\n", 0, at) + 1
            stop = data.find(b"\n", at, end)
            stop = end if stop < 0 else stop
            if data.startswith(b"data:", start):
                usage = event_usage(data[start + 5 : stop])
                if usage is not None:
                    self._found.append(usage)
            if compact:
                at = data.find(_COMPACT, stop, end)
            else:
                match = _USAGE.search(data, stop, end)
                at = -1 if match is None else match.start()


class _Holder(msgspec.Struct):
    usage: Any = None


class _Event(msgspec.Struct):
    """The members of a stream event that may hold its usage; the rest is skipped
    unparsed (a ``response.completed`` event carries the whole response)."""

    usage: Any = None
    # (raw, and empty when absent: a Raw cannot be one member of a union)
    message: msgspec.Raw = msgspec.Raw()  # Messages' message_start
    response: msgspec.Raw = msgspec.Raw()  # Responses' terminal events


_EVENT = msgspec.json.Decoder(_Event)
_HOLDER = msgspec.json.Decoder(_Holder)


def event_usage(data: bytes) -> dict[str, Any] | None:
    """The usage object of one event's JSON data, wherever its dialect puts it (None:
    none, or no JSON object)."""
    try:
        event = _EVENT.decode(data)
    except msgspec.DecodeError:
        return None
    usage = event.usage
    if type(usage) is dict:
        return usage
    for holder in (event.message, event.response):
        if holder:
            try:
                usage = _HOLDER.decode(holder).usage
            except msgspec.DecodeError:
                continue
            if type(usage) is dict:
                return usage
    return None


def _merge(counts: dict[str, Any], usage: dict[str, Any]) -> None:
    """Keep in ``counts`` the largest int per key of ``usage`` (detail objects too).
    ``counts`` holds only what this put there: ints and dicts (a bool is neither)."""
    for key, value in usage.items():
        kind = type(value)
        if kind is int:
            old = counts.get(key, 0)
            if type(old) is int and value > old:
                counts[key] = value
        elif kind is dict:
            inner = counts.get(key)
            if type(inner) is not dict:
                inner = counts[key] = {}
            _merge(inner, value)
