"""Deadlines per phase of a streamed answer: ``timeout.first_byte`` and ``timeout.idle``.

The transport's own limits (``connect``, ``read``, ``total``) count bytes: a keep-alive
comment every few seconds keeps a stream alive for as long as ``total`` allows, however
long the model takes to say anything. These two count *content*:

* ``first_byte`` runs from sending the request to the first event with content. A stream
  that has not produced one by then is abandoned with a :class:`SilentTimeoutError`
  before any byte reached the client, so the attempt loop can give the request to the
  next candidate (at once: the silent one may still be working on it).
* ``idle`` is the longest silence allowed between two events once content has come; a
  stream that stalls longer ends with the typed in-band timeout error, like a cut.

What is not content, per dialect (:func:`has_content`): comments (``: ping``), Messages
``ping``, ``message_start`` and ``content_block_start``, a Chat chunk whose choices say
nothing but a role (the empty first delta servers send at once), the Responses events that
only announce (``response.created``, ``.in_progress``, ``.queued``,
``.output_item.added``, ``.content_part.added``) and its ``keepalive``. Mid-stream
(``idle``) every event counts except comments, ``ping`` and ``keepalive``.

While ``first_byte`` waits, the events before the first content are held back and go out
with it: the gateway sends its status line after the first events it is handed, and
once that is gone the request can no longer move to another candidate.

Nothing here runs when neither limit is set (:func:`pace_of` is None): the request path
is then exactly what it was.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import orjson

from ..config import TimeoutConfig
from ..errors import UpstreamTimeoutError
from ..http_pool import ReadTimeout

__all__ = [
    "Pace",
    "PhaseTimeout",
    "SilentTimeoutError",
    "has_content",
    "pace_of",
    "paced",
]


class SilentTimeoutError(UpstreamTimeoutError):
    """The upstream said nothing in time (no answer, or no content within
    ``first_byte``) and nothing reached the client: the attempt loop does not try the
    same deployment again (the upstream may still be working on the request; repeating
    it doubles its load and the client's wait) but the next candidate, at once."""


class PhaseTimeout(ReadTimeout):
    """A phase deadline passed while waiting for the upstream's next bytes; ``phase`` is
    ``"first_byte"`` or ``"idle"``."""

    def __init__(self, phase: str, seconds: float) -> None:
        super().__init__(f"no content for {seconds}s ({phase})")
        self.phase = phase
        self.seconds = seconds


class Pace:
    """The phase clock of one streamed answer.

    ``deadline`` (the event loop's time) is when the wait for content ends: the
    ``first_byte`` deadline until :meth:`heard` is first called, then ``idle`` seconds
    after each call; None when the phase has no limit.
    """

    __slots__ = ("_idle", "_loop", "deadline", "first_byte", "started")

    def __init__(self, timeout: TimeoutConfig) -> None:
        self._loop = asyncio.get_running_loop()
        self.first_byte = timeout.first_byte
        self._idle = timeout.idle
        #: content has come (the first-byte phase is over)
        self.started = self.first_byte is None
        first = self.first_byte
        self.deadline = None if first is None else self._loop.time() + first

    def heard(self) -> None:
        """Content came now: the first-byte phase is over, the idle clock restarts."""
        self.started = True
        idle = self._idle
        self.deadline = None if idle is None else self._loop.time() + idle

    def expired(self) -> PhaseTimeout:
        """The error for the current phase's deadline having passed."""
        if not self.started:
            return PhaseTimeout("first_byte", self.first_byte or 0.0)
        return PhaseTimeout("idle", self._idle or 0.0)


def pace_of(timeout: TimeoutConfig) -> Pace | None:
    """A new :class:`Pace` for one stream, or None when no phase has a limit."""
    if timeout.first_byte is None and timeout.idle is None:
        return None
    return Pace(timeout)


async def paced(chunks: AsyncIterator[bytes], pace: Pace) -> AsyncIterator[bytes]:
    """``chunks``, each awaited until ``pace.deadline`` at most; past it
    :class:`PhaseTimeout` (a transport error, so it ends the stream as a read timeout
    does). The caller calls ``pace.heard()`` when a chunk brought content."""
    while True:
        deadline = pace.deadline
        try:
            if deadline is None:
                chunk = await anext(chunks)
            else:
                async with asyncio.timeout_at(deadline) as limit:
                    chunk = await anext(chunks)
        except StopAsyncIteration:
            return
        except TimeoutError:
            if deadline is None or not limit.expired():
                raise  # the transport's own read timeout
            raise pace.expired() from None
        yield chunk


#: Responses events that announce and say nothing yet
_RESPONSES_ANNOUNCE = frozenset(
    {
        "response.created",
        "response.in_progress",
        "response.queued",
        "response.output_item.added",
        "response.content_part.added",
        "keepalive",
    }
)
#: Messages events that say nothing yet
_MESSAGES_ANNOUNCE = frozenset({"message_start", "content_block_start", "ping"})
#: events that are keep-alives, mid-stream as before the first content
_KEEP_ALIVES = frozenset({"ping", "keepalive"})


def has_content(dialect: str | None, data: bytes, first: bool) -> bool:
    """Whether ``data`` (whole SSE events, LF line ends) holds an event with content:
    before the first content (``first``) by the per-dialect rule of the module
    docstring, after it any event but a comment or keep-alive."""
    for event in data.split(b"\n\n"):
        name, payload = _read_event(event)
        if payload is None:
            continue  # a comment, or no JSON object: nothing said
        kind = payload.get("type")
        if not isinstance(kind, str):
            kind = name
        if kind in _KEEP_ALIVES:
            continue
        if not first or _says_something(dialect, kind, payload):
            return True
    return False


def _read_event(event: bytes) -> tuple[str, dict[str, object] | None]:
    """(event name, data as a JSON object or None) of one SSE event."""
    name = ""
    data: list[bytes] = []
    for line in event.split(b"\n"):
        if line[:5] == b"data:":
            data.append(line[5:])
        elif line[:6] == b"event:":
            name = line[6:].strip().decode("latin-1")
    if not data:
        return name, None
    joined = b"\n".join(data).strip()
    if joined[:1] != b"{":
        # a literal end (Chat's [DONE]) is something; an empty data line is not
        return name, {"type": "end"} if joined else None
    try:
        payload = orjson.loads(joined)
    except orjson.JSONDecodeError:
        return name, {"type": "unreadable"}  # the relay check will say what is wrong
    return name, payload if isinstance(payload, dict) else {"type": "unreadable"}


def _says_something(dialect: str | None, kind: str, payload: dict[str, object]) -> bool:
    """Whether an event before the first content is content (module docstring)."""
    if dialect == "anthropic":
        return kind not in _MESSAGES_ANNOUNCE
    if dialect == "responses":
        return kind not in _RESPONSES_ANNOUNCE
    choices = payload.get("choices")
    if payload.get("error") or not isinstance(choices, list) or not choices:
        return True  # an error, or the usage chunk at the end
    for choice in choices:
        if not isinstance(choice, dict) or choice.get("finish_reason") or choice.get("text"):
            return True  # (``text``: a text completion's chunk, /v1/completions)
        delta = choice.get("delta")
        if isinstance(delta, dict) and any(v for k, v in delta.items() if k != "role"):
            return True
    return False
