"""Batch JSONL records: input lines in, output lines out.

Two input forms, told apart line by line:

* **OpenAI Batch** -- ``{"custom_id", "method": "POST", "url", "body"}`` where ``url`` is
  ``/v1/chat/completions`` (the body is an OpenAI Chat request), ``/v1/responses`` (an
  OpenAI Responses request) or ``/v1/messages`` (an Anthropic Messages request). The
  line's dialect is the dialect of its ``url``. ``/v1/embeddings`` and
  ``/v1/completions`` (an OpenAI embeddings or text completions request) are sent as
  they are to the server's endpoint of that name.
* **Simple** -- ``{"custom_id", "prompt" | "messages", "images"?, ...}``: a prompt in any
  form the client accepts (a string, a list of text and images, full messages), images as
  file paths (relative to the working directory), ``data:`` URIs or URLs, plus optional
  per-line settings (:data:`SIMPLE_FIELDS`); missing settings come from the command-line
  defaults (``--model``, ``--max-tokens``, ``--system``).

Output lines have the OpenAI Batch output shape, one per input line::

    {"id": "batch_req_...", "custom_id": "...",
     "response": {"status_code": 200, "request_id": "...", "body": {...}} | null,
     "error": {"code": "...", "message": "..."} | null}

One deliberate difference from OpenAI's files: a failed request *always* has ``error``
set -- also when the server answered (then ``response`` carries its status and error
body too), so "did this line fail?" is ``error is not None`` for every line. Input lines
that cannot be read at all (not JSON, no ``custom_id``) get ``custom_id: null`` and their
1-based line number in ``error.line``.

The keys are written in a fixed order (``id``, ``custom_id``, ``response``, ``error``) and
a successful body is spliced in as the server's bytes when they hold no newline, so a
2xx answer reaches the file byte for byte without a decode/encode round trip.

Every failed line of a run is made by :func:`failed_line`, which logs it at WARNING to
``interlingua.batch``: whoever watches the log sees each failure once, by its id.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import zlib
from dataclasses import dataclass, field
from typing import Any

import orjson

log = logging.getLogger("interlingua.batch")

__all__ = [
    "DUPLICATE",
    "INVALID_LINE",
    "SIMPLE_FIELDS",
    "URL_DIALECTS",
    "URL_ENDPOINTS",
    "BatchItem",
    "LineError",
    "OutputState",
    "error_record",
    "failed_line",
    "in_shard",
    "parse_line",
    "parse_shard",
    "read_output_line",
    "success_record",
]

URL_DIALECTS = {
    "/v1/chat/completions": "openai",
    "/v1/responses": "responses",
    "/v1/messages": "anthropic",
}
"""OpenAI Batch ``url`` -> the dialect of its body (and of the output body)."""

URL_ENDPOINTS = {"/v1/embeddings": "embeddings", "/v1/completions": "completions"}
"""OpenAI Batch ``url`` with no chat dialect -> the endpoint of the server it is sent to
(the body goes as it is, the answer comes back byte for byte)."""

SIMPLE_FIELDS = frozenset(
    {
        "model",
        "system",
        "max_tokens",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "repetition_penalty",
        "logprobs",
        "top_logprobs",
        "seed",
        "stop",
        "tools",
        "tool_choice",
        "response_format",
        "reasoning",
        "extra_body",
    }
)
"""Per-line settings a simple line may carry (``AsyncClient.prepare`` keywords)."""

INVALID_LINE = "invalid_line"
"""``error.code`` of an input line that could not be read (no usable ``custom_id``)."""
DUPLICATE = "duplicate_custom_id"
"""``error.code`` of a line whose ``custom_id`` an earlier line already used. Such lines
never count as the id's result when an output file is scanned (see :func:`read_output_line`)."""

_SIMPLE_KEYS = SIMPLE_FIELDS | {"custom_id", "prompt", "messages", "images"}
_BATCH_KEYS = frozenset({"custom_id", "method", "url", "body"})


class LineError(ValueError):
    """An input line that cannot become a request; ``custom_id`` is None when unknown."""

    def __init__(self, message: str, custom_id: str | None = None, code: str = INVALID_LINE):
        super().__init__(message)
        self.message = message
        self.custom_id = custom_id
        self.code = code


@dataclass(slots=True)
class BatchItem:
    """One input line, read. ``dialect`` is set for OpenAI Batch lines (from the url).

    For OpenAI Batch lines ``body`` is the request body; for simple lines ``prompt``,
    ``images`` and ``settings`` (the per-line fields of :data:`SIMPLE_FIELDS`) are set.
    An OpenAI Batch line for another endpoint (:data:`URL_ENDPOINTS`) has ``body`` and
    ``endpoint``, no dialect.
    """

    custom_id: str
    line_no: int
    dialect: str | None = None
    body: dict[str, Any] | None = None
    prompt: Any = None
    images: list[Any] | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    endpoint: str | None = None


def parse_line(data: bytes | str | dict[str, Any], line_no: int) -> BatchItem:
    """Read one input line (raw bytes or already decoded); raise :class:`LineError`.

    >>> parse_line(b'{"custom_id": "a", "prompt": "hi"}', 1).prompt
    'hi'
    """
    if isinstance(data, dict):
        obj: Any = data
    else:
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise LineError(f"line {line_no}: not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise LineError(f"line {line_no}: expected a JSON object, got {type(obj).__name__}")
    cid = obj.get("custom_id")
    if not isinstance(cid, str) or not cid:
        raise LineError(f'line {line_no}: "custom_id" must be a non-empty string')
    if "url" in obj or "body" in obj:
        return _batch_item(obj, cid, line_no)
    return _simple_item(obj, cid, line_no)


def _batch_item(obj: dict[str, Any], cid: str, line_no: int) -> BatchItem:
    where = f"line {line_no} ({cid})"
    unknown = set(obj) - _BATCH_KEYS
    if unknown:
        raise LineError(f"{where}: unknown fields {sorted(unknown)}", cid, "invalid_request")
    method = obj.get("method", "POST")
    if method != "POST":
        raise LineError(f'{where}: "method" must be "POST", got {method!r}', cid, "invalid_request")
    url = obj.get("url")
    dialect = URL_DIALECTS.get(url) if isinstance(url, str) else None
    endpoint = URL_ENDPOINTS.get(url) if isinstance(url, str) else None
    if dialect is None and endpoint is None:
        raise LineError(
            f'{where}: "url" must be one of {sorted(URL_DIALECTS | URL_ENDPOINTS)}, got {url!r}',
            cid,
            "invalid_request",
        )
    body = obj.get("body")
    if not isinstance(body, dict):
        raise LineError(f'{where}: "body" must be a JSON object', cid, "invalid_request")
    return BatchItem(cid, line_no, dialect=dialect, body=body, endpoint=endpoint)


def _simple_item(obj: dict[str, Any], cid: str, line_no: int) -> BatchItem:
    where = f"line {line_no} ({cid})"
    unknown = set(obj) - _SIMPLE_KEYS
    if unknown:
        raise LineError(
            f"{where}: unknown fields {sorted(unknown)}; a simple line may have "
            f"custom_id, prompt or messages, images, and {sorted(SIMPLE_FIELDS)} "
            '(or use the OpenAI Batch form {"custom_id", "method", "url", "body"})',
            cid,
            "invalid_request",
        )
    has_prompt, has_messages = "prompt" in obj, "messages" in obj
    if has_prompt == has_messages:
        raise LineError(
            f'{where}: give exactly one of "prompt" or "messages"', cid, "invalid_request"
        )
    images = obj.get("images")
    if images is not None and not isinstance(images, list):
        raise LineError(f'{where}: "images" must be a list', cid, "invalid_request")
    settings = {k: v for k, v in obj.items() if k in SIMPLE_FIELDS}
    prompt = obj["prompt"] if has_prompt else obj["messages"]
    return BatchItem(cid, line_no, prompt=prompt, images=images, settings=settings)


# --- sharding ----------------------------------------------------------------------------


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` -> ``(i, n)`` with ``0 <= i < n``; ValueError otherwise.

    >>> parse_shard("1/4")
    (1, 4)
    """
    try:
        left, right = text.split("/")
        index, count = int(left), int(right)
    except ValueError:
        raise ValueError(f"--shard must look like i/n (e.g. 0/4), got {text!r}") from None
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"--shard i/n needs 0 <= i < n, got {text!r}")
    return index, count


def in_shard(custom_id: str, shard: tuple[int, int] | None) -> bool:
    """Whether ``custom_id`` belongs to ``shard``: CRC-32 of its UTF-8 bytes mod n.

    CRC-32 rather than ``hash()``: Python salts string hashes per process, and every shard
    (on every machine) must agree on the split.
    """
    if shard is None:
        return True
    index, count = shard
    return zlib.crc32(custom_id.encode()) % count == index


# --- output records ----------------------------------------------------------------------


_ID_PREFIX = b'"batch_req_' + secrets.token_hex(8).encode()
_id_counter = itertools.count()


def _record_id() -> bytes:
    """A unique record id: 16 random hex digits per process, then a counter (8 digits).

    The same shape as OpenAI's ``batch_req_`` + 24 characters, without a ``urandom``
    system call per line.
    """
    return b'%s%08x"' % (_ID_PREFIX, next(_id_counter) & 0xFFFFFFFF)


def success_record(custom_id: str, status: int, request_id: str | None, body: bytes) -> bytes:
    """A finished line (with its newline) embedding ``body``: JSON bytes with no newline."""
    return b"".join(
        (
            b'{"id":',
            _record_id(),
            b',"custom_id":',
            orjson.dumps(custom_id),
            b',"response":{"status_code":',
            str(status).encode(),
            b',"request_id":',
            orjson.dumps(request_id),
            b',"body":',
            body,
            b'},"error":null}\n',
        )
    )


def error_record(
    custom_id: str | None,
    code: str,
    message: str,
    *,
    status: int | None = None,
    request_id: str | None = None,
    body: Any = None,
    line_no: int | None = None,
) -> bytes:
    """A failed line (with its newline). ``status`` set -> ``response`` keeps the answer."""
    response = None
    if status is not None:
        response = {"status_code": status, "request_id": request_id, "body": body}
    error: dict[str, Any] = {"code": code, "message": message}
    if custom_id is None and line_no is not None:
        error["line"] = line_no
    tail = orjson.dumps({"response": response, "error": error})
    return b"".join(
        (b'{"id":', _record_id(), b',"custom_id":', orjson.dumps(custom_id), b",", tail[1:], b"\n")
    )


def failed_line(
    custom_id: str | None, code: str, message: str, *, attempts: int | None = None, **record: Any
) -> bytes:
    """:func:`error_record` (``record``: its keyword arguments), logged at WARNING once;
    ``attempts``, the calls made, is for the log line only."""
    if log.isEnabledFor(logging.WARNING):
        line_no, status = record.get("line_no"), record.get("status")
        who = f"line {line_no}" if line_no is not None else "an unreadable line"
        if custom_id is not None:
            who = f"custom_id {custom_id!r}"
        facts = [code]
        if status is not None:
            facts.append(f"HTTP {status}, request id {record.get('request_id') or 'none'}")
        if attempts is not None:
            facts.append(f"{attempts} attempt" + ("s" if attempts != 1 else ""))
        log.warning("batch: %s failed (%s): %s", who, ", ".join(facts), message)
    return error_record(custom_id, code, message, **record)


@dataclass(frozen=True, slots=True)
class OutputState:
    """What one output line says: whose it is and whether it failed.

    ``custom_id`` None -> an unreadable input line, identified by ``line_no``.
    ``counts`` is False for duplicate-id lines, which never stand for their id's result.
    """

    custom_id: str | None
    failed: bool
    line_no: int | None = None
    counts: bool = True


def output_record(line: bytes) -> dict[str, Any] | None:
    """One output line as its JSON object, or None if it is not a record (no JSON object
    with a ``custom_id``)."""
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) and "custom_id" in obj else None


def read_output_line(line: bytes) -> OutputState | None:
    """The state of one complete output line, or None if it is not a record we can read."""
    obj = output_record(line)
    if obj is None:
        return None
    cid = obj["custom_id"]
    error = obj.get("error")
    failed = error is not None
    if not isinstance(cid, str):
        line_no = error.get("line") if isinstance(error, dict) else None
        if cid is None and isinstance(line_no, int):
            return OutputState(None, True, line_no=line_no)
        return None
    code = error.get("code") if isinstance(error, dict) else None
    return OutputState(cid, failed, counts=code != DUPLICATE)
