"""Token usage of every dialect, read from the bytes the gateway relays, without parsing
the answer.

The usage log counts each request, and a limited upstream with ``tpm`` settles each
token reservation with what the answer says it used. On the passthrough path the answer
is bytes the gateway does not parse, so this module reads only what it must:
:func:`body_counts` / :func:`body_tokens` decode only the ``usage`` member of a whole
body; :class:`StreamUsage` looks for ``"usage": {`` in a relayed stream and parses just
the events that carry one; :func:`usage_chunk` picks out the usage-only chunk the gateway
asked a Chat stream for (and cuts from it). Every dialect's shape is understood:

* Chat Completions: ``usage`` of the body or of the last chunk: ``prompt_tokens``
  (cached ones included), ``completion_tokens``, ``prompt_tokens_details.cached_tokens``
  (and ``.cache_write_tokens``, which a proxy in front of Anthropic may add),
  ``completion_tokens_details.reasoning_tokens`` (and ``total_tokens``);
* Messages: ``usage`` of the body, of ``message_start``'s ``message`` (input) and of
  ``message_delta`` (output, cumulative). ``input_tokens`` excludes the cache: the input
  is ``input_tokens`` + ``cache_creation_input_tokens`` + ``cache_read_input_tokens``,
  the cached part the reads, the cache writes ``cache_creation_input_tokens``;
* Responses: ``usage`` of the body or of the terminal event's ``response``:
  ``input_tokens``, ``output_tokens``, ``input_tokens_details.cached_tokens``,
  ``output_tokens_details.reasoning_tokens`` (and ``total_tokens``).

Counts are totals, cache reads and writes included (the core's ``Usage.total_tokens``
meaning). Usage written otherwise -- counts as strings or floats, a top-level
``reasoning_tokens``, Anthropic's cache fields in a Chat usage (some proxies), DeepSeek's
``prompt_cache_hit_tokens`` -- is read as :mod:`.loose_usage` reads it, only once the
fast reading of the usual shape has found something else in it. Cost, per relayed response: one substring (else regular-expression) scan per
relayed read (``"usage": null``, which OpenAI writes into every chunk, does not match),
a msgspec decode of the few events that match, and for a whole body a typed msgspec
decode of its ``usage`` alone.

The same module holds the other half of a token reservation: what a request is
estimated at before any answer (:func:`estimate_tokens`, :func:`estimate_body_tokens`:
its bytes / 4 plus the output limit it sets, in whichever dialect's field).
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec
from msgspec import UNSET, UnsetType

from ..core.tokens import CHARS_PER_TOKEN
from .loose_usage import loose_count, loose_usage

__all__ = [
    "OUTPUT_LIMIT_FIELDS",
    "USAGE_MARK",
    "Counts",
    "StreamUsage",
    "body_counts",
    "body_tokens",
    "body_usage",
    "estimate_body_tokens",
    "estimate_tokens",
    "event_usage",
    "usage_chunk",
    "usage_counts",
    "usage_tokens",
]

_USAGE = re.compile(rb'"usage"\s*:\s*\{')
#: how compact JSON writes the start of a usage object (what _USAGE matches, unspaced)
_COMPACT = b'"usage":{'
#: the longest unfinished line kept while looking for usage (as the relay check's bound)
_MAX_LINE = 16 * 1024 * 1024

#: where a relayed SSE read holds a ``usage`` object (``"usage": null`` does not match)
USAGE_MARK = _USAGE


# --- one usage object -------------------------------------------------------------------


#: (input, output, cache read, reasoning, cache write, one-hour cache write) tokens: input
#: counts all of the input, the cache's reads and writes included; output counts the
#: reasoning; cache writes count the one-hour ones (Anthropic reports them apart, in
#: ``cache_creation.ephemeral_1h_input_tokens``, and bills them at 2x input, not 1.25x)
Counts = tuple[int, int, int, int, int, int]


def usage_counts(usage: dict[str, object]) -> Counts:
    """(input, output, cached, reasoning, cache write, 1-hour write) tokens of one ``usage`` object of any dialect
    (the module docstring says where each dialect keeps them; a value that is no count,
    a null, a negative or a bool, counts 0; one written oddly is read by :mod:`.loose_usage`).

    >>> usage_counts({"input_tokens": 10, "cache_read_input_tokens": 90,
    ...               "cache_creation_input_tokens": 20, "output_tokens": 5})
    (120, 5, 90, 0, 20, 0)
    >>> usage_counts({"prompt_tokens": 7, "completion_tokens": 3,
    ...               "completion_tokens_details": {"reasoning_tokens": 2}})
    (7, 3, 0, 2, 0, 0)
    """
    # (inline, not helper calls: this runs for every request the gateway counts)
    get = usage.get
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        prompt, completion = get("prompt_tokens"), get("completion_tokens")
        details = get("prompt_tokens_details")
        cached = details.get("cached_tokens") if type(details) is dict else None
        # (no OpenAI model reports cache writes; a proxy in front of Anthropic may)
        written = details.get("cache_write_tokens") if type(details) is dict else None
        details = get("completion_tokens_details")
        reasoning = details.get("reasoning_tokens") if type(details) is dict else None
        if (
            type(prompt) is int
            and type(completion) is int
            and (cached is None or type(cached) is int)
            and (written is None or type(written) is int)
            and (reasoning is None or type(reasoning) is int)
            and "reasoning_tokens" not in usage
            and "cache_read_input_tokens" not in usage
            and "cache_creation_input_tokens" not in usage
            and "prompt_cache_hit_tokens" not in usage
        ):
            return (
                prompt if prompt > 0 else 0,
                completion if completion > 0 else 0,
                cached if cached and cached > 0 else 0,
                reasoning if reasoning and reasoning > 0 else 0,
                written if written and written > 0 else 0,
                0,
            )
        return _loose_counts(usage)
    tokens_in, tokens_out = get("input_tokens"), get("output_tokens")
    read, write = get("cache_read_input_tokens"), get("cache_creation_input_tokens")
    cached = _detail(usage, "input_tokens_details", "cached_tokens")
    reasoning = _detail(usage, "output_tokens_details", "reasoning_tokens")
    if (
        (tokens_in is None or type(tokens_in) is int)
        and (tokens_out is None or type(tokens_out) is int)
        and (read is None or type(read) is int)
        and (write is None or type(write) is int)
        and (cached is None or type(cached) is int)
        and (reasoning is None or type(reasoning) is int)
        and "reasoning_tokens" not in usage
    ):
        read = read if read and read > 0 else 0
        write = write if write and write > 0 else 0
        return (
            (tokens_in if tokens_in and tokens_in > 0 else 0) + read + write,
            tokens_out if tokens_out and tokens_out > 0 else 0,
            read or (cached if cached and cached > 0 else 0),
            reasoning if reasoning and reasoning > 0 else 0,
            write,
            _hour_writes(usage, write),
        )
    return _loose_counts(usage)


def _loose_counts(usage: dict[str, Any]) -> Counts:
    """:func:`usage_counts` of a usage object the fast reading found odd."""
    read = loose_usage(usage)
    return (
        read.input_tokens,
        read.output_tokens,
        read.cache_read_tokens,
        read.reasoning_tokens,
        read.cache_write_tokens,
        _hour_writes(usage, read.cache_write_tokens),
    )


def _hour_writes(usage: dict[str, Any], writes: int) -> int:
    """The one-hour cache writes among ``writes`` (Anthropic's
    ``cache_creation.ephemeral_1h_input_tokens``; 0 when not reported apart)."""
    split = usage.get("cache_creation")
    if type(split) is not dict:
        return 0
    hour = split.get("ephemeral_1h_input_tokens")
    return min(hour, writes) if type(hour) is int and hour > 0 else 0


def usage_tokens(usage: dict[str, Any]) -> int:
    """Total tokens of one ``usage`` object of any dialect (0 when it counts none): its
    ``total_tokens`` when it says, else input + output of :func:`usage_counts`."""
    total = usage.get("total_tokens")
    if type(total) is int and total > 0:
        return total
    tokens_in, tokens_out = usage_counts(usage)[:2]
    return tokens_in + tokens_out


def _detail(usage: dict[str, object], holder: str, key: str) -> Any:
    inner = usage.get(holder)
    return inner.get(key) if isinstance(inner, dict) else None


# --- the usage of a whole answer, read without building it -------------------------------

_Count = Annotated[int, msgspec.Meta(ge=0)]


class _Details(msgspec.Struct):
    cached_tokens: _Count = 0
    cache_write_tokens: _Count = 0  # (a proxy's, in front of Anthropic)
    reasoning_tokens: _Count = 0


class _Counts(msgspec.Struct):
    """Every dialect's count fields (see :func:`usage_counts`), each a count or absent;
    any other value (a null, a negative, a float) fails the decode."""

    prompt_tokens: _Count | UnsetType = UNSET
    completion_tokens: _Count | UnsetType = UNSET
    prompt_tokens_details: _Details | None = None
    completion_tokens_details: _Details | None = None
    input_tokens: _Count = 0
    output_tokens: _Count = 0
    cache_read_input_tokens: _Count = 0
    cache_creation_input_tokens: _Count = 0
    input_tokens_details: _Details | None = None
    output_tokens_details: _Details | None = None
    reasoning_tokens: _Count = 0  # (a proxy's, beside completion_tokens)
    prompt_cache_hit_tokens: _Count = 0  # (DeepSeek's)
    cache_creation: _CacheCreation | None = None  # (Anthropic's split of the writes)


class _CacheCreation(msgspec.Struct):
    ephemeral_1h_input_tokens: _Count = 0


class _CountsBody(msgspec.Struct):
    usage: _Counts | None = None


class _Body(msgspec.Struct):
    usage: dict[str, Any] | None = None


_COUNTS_BODY = msgspec.json.Decoder(_CountsBody)
_BODY = msgspec.json.Decoder(_Body)


def body_counts(body: bytes) -> Counts | None:
    """:func:`usage_counts` of a whole JSON answer's ``usage`` (None: it has none, or is
    no JSON), decoding nothing else.

    Every API puts ``usage`` last, or nearly: the last ``"usage":`` of the body is looked
    for, and what follows it decoded as an object of its own (``{`` + the rest). That
    decodes only when the key sits at the top level: one ``{`` balances one level, a key
    nested deeper leaves closers over (trailing characters), and no ``"usage":`` can lie
    inside a string (its quotes would be escaped; a match right after a backslash is not
    trusted). Anything else -- no such key, a nested one, odd values -- decodes the whole
    body, as the answer is: the same counts either way, the first way without reading
    the answer's text (its cost no longer grows with the answer).

    A well-formed usage is decoded straight into its counts (typed fields, in C); one with
    odd values (a null, a negative, a bool, a float) is decoded as a dict and read by
    :func:`usage_counts`, which makes each of those 0.
    """
    at = body.rfind(b'"usage":')
    if at > 0 and body[at - 1] != 0x5C:  # (a backslash)
        try:
            return _counts(_COUNTS_BODY.decode(b"{" + body[at:]).usage)
        except msgspec.DecodeError:  # (a ValidationError too: the whole body decides)
            pass
    try:
        usage = _COUNTS_BODY.decode(body).usage
    except msgspec.ValidationError:
        loose = body_usage(body)
        return usage_counts(loose) if loose is not None else None
    except msgspec.DecodeError:
        return None
    return _counts(usage)


def _counts(usage: _Counts | None) -> Counts | None:
    if usage is None:
        return None
    if usage.prompt_tokens is not UNSET or usage.completion_tokens is not UNSET:
        details = usage.prompt_tokens_details
        reasoning = usage.completion_tokens_details
        return (
            usage.input_tokens if usage.prompt_tokens is UNSET else usage.prompt_tokens,
            usage.output_tokens if usage.completion_tokens is UNSET else usage.completion_tokens,
            (details.cached_tokens if details is not None else 0)
            or usage.prompt_cache_hit_tokens
            or usage.cache_read_input_tokens,
            (reasoning.reasoning_tokens if reasoning is not None else 0) or usage.reasoning_tokens,
            (details.cache_write_tokens if details is not None else 0)
            or usage.cache_creation_input_tokens,
            0,
        )
    read = usage.cache_read_input_tokens
    details = usage.input_tokens_details
    reasoning = usage.output_tokens_details
    return (
        usage.input_tokens + read + usage.cache_creation_input_tokens,
        usage.output_tokens,
        read or (details.cached_tokens if details is not None else 0),
        (reasoning.reasoning_tokens if reasoning is not None else 0) or usage.reasoning_tokens,
        usage.cache_creation_input_tokens,
        min(split.ephemeral_1h_input_tokens, usage.cache_creation_input_tokens)
        if (split := usage.cache_creation) is not None
        else 0,
    )


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


# --- what a request is reserved at, before its answer ------------------------------------

#: the request fields that set the output limit, every dialect's (Chat's
#: ``max_completion_tokens`` or older ``max_tokens``, Messages' ``max_tokens``, Responses'
#: ``max_output_tokens``: each dialect's ``output_limit_fields``), the first set wins
OUTPUT_LIMIT_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")

# A body's output limit fields and nothing else, decoded in C (the rest is skipped).
_MaxOutput = msgspec.defstruct("_MaxOutput", [(f, Any, None) for f in OUTPUT_LIMIT_FIELDS])
_MAX_OUTPUT = msgspec.json.Decoder(_MaxOutput)


def estimate_tokens(size: int, body: dict[str, Any]) -> int:
    """The tokens a token limit reserves for a request of ``size`` bytes whose decoded
    body is ``body``: the bytes / 4 as its input, plus the output limit it sets (the
    output it may use: what OpenAI and Anthropic reserve against their own limits too),
    before the answer says what it cost."""
    tokens = size // CHARS_PER_TOKEN
    for field in OUTPUT_LIMIT_FIELDS:
        limit = body.get(field)
        if type(limit) is int and limit > 0:
            return tokens + limit
    return tokens


def estimate_body_tokens(body: bytes) -> tuple[int, int]:
    """(input estimate, input + output limit) of a request body of any dialect, unparsed
    (the passthrough path's): :func:`estimate_tokens`' rule, its output limit fields
    decoded alone."""
    try:
        limits = msgspec.structs.astuple(_MAX_OUTPUT.decode(body))
    except msgspec.DecodeError:
        limits = ()
    tokens_in = len(body) // CHARS_PER_TOKEN
    output = next((n for n in limits if type(n) is int and n > 0), 0)
    return tokens_in, tokens_in + output


# --- streams ------------------------------------------------------------------------------


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


class _Chunk(msgspec.Struct):
    choices: Any = None
    usage: Any = None


_CHUNK = msgspec.json.Decoder(_Chunk)


def usage_chunk(event: bytes) -> dict[str, Any] | None:
    """The usage of one whole SSE event of a Chat Completions stream when that event is
    the usage-only chunk (``choices: []`` and a ``usage`` object: what
    ``stream_options.include_usage`` adds before ``[DONE]``); None for any other event."""
    if not event.startswith(b"data:") or USAGE_MARK.search(event) is None:
        return None
    try:
        chunk = _CHUNK.decode(event[5:])
    except msgspec.DecodeError:
        return None
    usage = chunk.usage
    return usage if chunk.choices == [] and type(usage) is dict else None


def _merge(counts: dict[str, Any], usage: dict[str, Any]) -> None:
    """Keep in ``counts`` the largest int per key of ``usage`` (detail objects too).
    ``counts`` holds only what this put there: ints and dicts (a bool is neither)."""
    for key, value in usage.items():
        kind = type(value)
        if kind is str or kind is float:  # a count written oddly: kept as the int it says
            value, kind = loose_count(value), int
        if kind is int:
            old = counts.get(key, 0)
            if type(old) is int and value > old:
                counts[key] = value
        elif kind is dict:
            inner = counts.get(key)
            if type(inner) is not dict:
                inner = counts[key] = {}
            _merge(inner, value)
