"""One request, as the usage log, the metrics and the status page see it.

The server fills a :class:`Record` while it answers (server/accounting.py): who asked
(the key's *name*, never the key), in which dialect, for which model; where it went (the
upstream and its model name, of the attempt that answered or failed last); how it ended
(the HTTP status, the error kind when it failed, before or during a stream); what it
cost (tokens as the upstream reported them) and how long it took (``latency`` to the
last byte, ``ttft`` to the first streamed byte). When the answer has ended it is handed,
once, to every :class:`RecordSink` (with the others that ended about then); a sink must
neither block nor raise nor change the record (it is finished).

>>> row = Record(at=0.0, request_id="req_1", key="team-a", dialect="openai", model="m")
>>> row.status, row.input_tokens, row.ttft
(0, 0, None)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Protocol

import msgspec
from msgspec import UNSET, UnsetType

__all__ = ["Record", "RecordSink", "body_counts", "nothing_to_catch_up", "usage_counts"]


class Record(msgspec.Struct, kw_only=True, gc=False):
    """The facts of one request (see the module docstring). Times are seconds.

    A msgspec Struct without garbage-collector tracking (``gc=False``: it holds only
    strings, numbers and None, so it can be in no reference cycle): every counted request
    makes one, and the records of the last tenth of a second wait for the sinks
    (server/accounting.py), so untracked ones spare the collector its young-generation
    passes over them; building one is also ~0.3 µs cheaper than a ``__slots__`` class's
    ``__init__``, with attribute reads as fast. Its fields are in the order of the usage
    log's columns (usage/schema.py ``COLUMNS``): ``msgspec.structs.astuple`` makes its
    row in C (usage/rows.py).
    """

    #: wall-clock time the request arrived (Unix seconds)
    at: float
    request_id: str
    #: the client key's name (None: no named keys configured)
    key: str | None
    #: the client's dialect: "openai", "anthropic" or "responses"
    dialect: str
    #: the model name the client asked for
    model: str
    #: the upstream (its config name) and the model name it was sent; None when the
    #: request never reached one (refused by the gateway)
    upstream: str | None = None
    upstream_model: str | None = None
    #: the HTTP status the client got (a stream that failed mid-way keeps its 200)
    status: int = 0
    #: the error kind (errors.ErrorKind value) when the request failed, before or
    #: during the answer; None when it succeeded
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    #: input tokens read from the provider's prompt cache (a part of input_tokens)
    cached_tokens: int = 0
    #: output tokens spent on reasoning (a part of output_tokens)
    reasoning_tokens: int = 0
    #: seconds from arrival to the answer's last byte
    latency: float = 0.0
    #: seconds from arrival to the first streamed byte (None: not a stream)
    ttft: float | None = None
    stream: bool = False

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def nothing_to_catch_up() -> None:
    """The ``catch_up`` of a sink that no accounting feeds yet: a sink that shows what it
    counted calls its ``catch_up`` first, and server/accounting.py sets it to hand over
    the records that wait."""


class RecordSink(Protocol):
    """Something told of every finished request (the usage writer, the metrics, the
    status page), in batches: the accounting (server/accounting.py) hands the records
    of the last fraction of a second over together, so that each sink's code and data
    are warm for a run of records rather than cold for each one."""

    def records(self, rows: Sequence[Record]) -> None:
        """Take note of ``rows`` (oldest first; may be empty); never block, never
        raise."""
        ...


def usage_counts(usage: dict[str, object]) -> tuple[int, int, int, int]:
    """(input, output, cached, reasoning) tokens of one ``usage`` object of any dialect.

    * Chat Completions: ``prompt_tokens`` (cached ones included), ``completion_tokens``,
      ``prompt_tokens_details.cached_tokens``, ``completion_tokens_details.reasoning_tokens``;
    * Responses: ``input_tokens``, ``output_tokens``, ``input_tokens_details.cached_tokens``,
      ``output_tokens_details.reasoning_tokens``;
    * Messages: ``input_tokens`` excludes the cache: input is ``input_tokens`` +
      ``cache_creation_input_tokens`` + ``cache_read_input_tokens``, cached is the reads.

    >>> usage_counts({"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 5})
    (100, 5, 90, 0)
    >>> usage_counts({"prompt_tokens": 7, "completion_tokens": 3,
    ...               "completion_tokens_details": {"reasoning_tokens": 2}})
    (7, 3, 0, 2)
    """
    # (inline, not helper calls: this runs for every request the gateway counts)
    get = usage.get
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        prompt, completion = get("prompt_tokens"), get("completion_tokens")
        details = get("prompt_tokens_details")
        cached = details.get("cached_tokens") if type(details) is dict else 0
        details = get("completion_tokens_details")
        reasoning = details.get("reasoning_tokens") if type(details) is dict else 0
        return (
            prompt if type(prompt) is int and prompt > 0 else 0,
            completion if type(completion) is int and completion > 0 else 0,
            cached if type(cached) is int and cached > 0 else 0,
            reasoning if type(reasoning) is int and reasoning > 0 else 0,
        )
    cache_read = _int(get("cache_read_input_tokens"))
    cache_write = _int(get("cache_creation_input_tokens"))
    cached = cache_read or _int(_detail(usage, "input_tokens_details", "cached_tokens"))
    return (
        _int(get("input_tokens")) + cache_read + cache_write,
        _int(get("output_tokens")),
        cached,
        _int(_detail(usage, "output_tokens_details", "reasoning_tokens")),
    )


def _detail(usage: dict[str, object], holder: str, key: str) -> object:
    inner = usage.get(holder)
    return inner.get(key) if isinstance(inner, dict) else None


def _int(value: object) -> int:
    return value if type(value) is int and value > 0 else 0  # (a bool is no count)


# --- the usage of a whole answer, read without building it -------------------------------

_Count = Annotated[int, msgspec.Meta(ge=0)]


class _Details(msgspec.Struct):
    cached_tokens: _Count = 0
    reasoning_tokens: _Count = 0


class _Counts(msgspec.Struct):
    """Every dialect's count fields (module doc of :func:`usage_counts`), each a count
    or absent; any other value (a null, a negative, a float) fails the decode."""

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


class _CountsBody(msgspec.Struct):
    usage: _Counts | None = None


class _UsageBody(msgspec.Struct):
    usage: dict[str, Any] | None = None


_COUNTS_BODY = msgspec.json.Decoder(_CountsBody)
_USAGE_BODY = msgspec.json.Decoder(_UsageBody)


def body_counts(body: bytes) -> tuple[int, int, int, int] | None:
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
        try:
            loose = _USAGE_BODY.decode(body).usage
        except msgspec.DecodeError:
            return None
        return usage_counts(loose) if loose is not None else None
    except msgspec.DecodeError:
        return None
    return _counts(usage)


def _counts(usage: _Counts | None) -> tuple[int, int, int, int] | None:
    if usage is None:
        return None
    if usage.prompt_tokens is not UNSET or usage.completion_tokens is not UNSET:
        details = usage.prompt_tokens_details
        reasoning = usage.completion_tokens_details
        return (
            usage.prompt_tokens or 0,
            usage.completion_tokens or 0,
            details.cached_tokens if details is not None else 0,
            reasoning.reasoning_tokens if reasoning is not None else 0,
        )
    read = usage.cache_read_input_tokens
    details = usage.input_tokens_details
    reasoning = usage.output_tokens_details
    return (
        usage.input_tokens + read + usage.cache_creation_input_tokens,
        usage.output_tokens,
        read or (details.cached_tokens if details is not None else 0),
        reasoning.reasoning_tokens if reasoning is not None else 0,
    )
