"""One request, as the usage log, the metrics and the status page see it.

The server fills a :class:`Record` while it answers (server/accounting.py): who asked
(the key's *name*, never the key), in which dialect, for which model; where it went (the
upstream and its model name, of the attempt that answered or failed last); how it ended
(the HTTP status, the error kind when it failed, before or during a stream); what it
cost (tokens as the upstream reported them, and dollars: usage/cost.py) and how long it took (``latency`` to the
last byte, ``ttft`` to the first streamed byte). When the answer has ended it is handed,
once, to every :class:`RecordSink` (with the others that ended about then); a sink must
neither block nor raise nor change the record (it is finished).

>>> row = Record(at=0.0, request_id="req_1", key="team-a", dialect="openai", model="m")
>>> row.status, row.input_tokens, row.ttft
(0, 0, None)
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal
from typing import Protocol

import msgspec

__all__ = [
    "CANCELLED",
    "CLIENT_CLOSED_STATUS",
    "CLIENT_DISCONNECT",
    "CONTINUED",
    "NOT_FAILURES",
    "Record",
    "RecordSink",
    "failed",
    "nothing_to_catch_up",
]

#: the ``error`` of a request whose client hung up before the last byte of its answer
#: was handed over (a stream's end event, a body): its own outcome, not a failure; a
#: client that hangs up after it changes nothing (server/asgi_io.py, ``StreamOutcome``)
CLIENT_DISCONNECT = "client_disconnect"
#: the ``error`` of a request cancelled by the server itself (not its client, not the
#: upstream: a task cancelled under it)
CANCELLED = "cancelled"
#: the ``error`` of the row of an attempt whose stream broke after its first byte and
#: was continued by another attempt: its tokens were spent (the row carries them), but
#: the client got its answer (the request's own row, with the finishing attempt's
#: tokens), and the attempt's fault is counted where attempts are (the router, the
#: metrics' continuations): not a failure, and not a request of its own
CONTINUED = "continued"
#: the ``error`` values that do not make a request a failure
NOT_FAILURES = frozenset({CLIENT_DISCONNECT, CONTINUED})
#: the status a request gets when its client left before its answer began (nginx's
#: "client closed request": no client ever reads it)
CLIENT_CLOSED_STATUS = 499


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
    #: the HTTP status the client got (a stream that failed mid-way keeps its 200; 499
    #: when the client left before its answer began)
    status: int = 0
    #: the error kind (errors.ErrorKind value) when the request failed, before or
    #: during the answer (a stream that broke after its 200 keeps the status and has
    #: one); :data:`CLIENT_DISCONNECT` when its client left before the answer ended;
    #: :data:`CONTINUED` on the row of an attempt whose broken stream another attempt
    #: continued; None when it succeeded
    error: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    #: input tokens read from the provider's prompt cache (a part of input_tokens)
    cached_tokens: int = 0
    #: input tokens written to the provider's prompt cache (a part of input_tokens;
    #: Anthropic's ``cache_creation_input_tokens``, billed above plain input)
    cache_write_tokens: int = 0
    #: the one-hour cache writes among them, when the upstream reports them apart
    #: (Anthropic's ``cache_creation.ephemeral_1h_input_tokens``: billed at 2x input)
    cache_write_1h_tokens: int = 0
    #: output tokens spent on reasoning (a part of output_tokens)
    reasoning_tokens: int = 0
    #: what the request cost in US dollars, exact (usage/cost.py), set when the record is
    #: finished: None when the deployment that answered has no price (unknown, not 0)
    cost_usd: Decimal | None = None
    #: seconds from arrival to the answer's last byte
    latency: float = 0.0
    #: seconds from arrival to the first streamed byte (None: not a stream)
    ttft: float | None = None
    stream: bool = False
    #: the Batch API batch the request was a line of (None: an interactive request)
    batch_id: str | None = None
    #: the API endpoint the request was made to: "chat/completions", "messages",
    #: "responses", "embeddings" or "completions" (None: a row written by a version without the column,
    #: or by a writer that does not say)
    endpoint: str | None = None

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def failed(row: Record) -> bool:
    """Whether ``row`` is a failure: an error before the answer (a status of 400 or
    more) or during it (an error kind with a 200), but not a client that left."""
    error = row.error
    if error is not None:
        return error not in NOT_FAILURES
    return row.status >= 400 and row.status != CLIENT_CLOSED_STATUS


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
