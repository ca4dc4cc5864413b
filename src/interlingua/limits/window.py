"""The sliding one-minute window behind ``rpm`` and ``tpm`` (pure: time is passed in).

The window is a *log* of admissions over the last :data:`WINDOW` seconds, not a token
bucket: a bucket of capacity N refilling at N/minute lets 2N through in some 60 s span, a
log never lets more than N through, which is what "N per minute" promises. Each admission
reserves the caller's token estimate; :meth:`Window.settle` later replaces it with the
actual count, so the window tracks reality. A request whose estimate alone exceeds the
whole token limit is admitted when the window is empty rather than never.

>>> window = Window(requests_per_minute=2)
>>> window.wait_needed(0.0, 0), window.admit(0.0, 0) is not None
(0.0, True)
>>> _ = window.admit(1.0, 0); window.wait_needed(2.0, 0)   # full until the first expires
58.0
"""

from __future__ import annotations

from array import array

__all__ = ["WINDOW", "Entry", "Window"]

WINDOW = 60.0
"""The per-minute window in seconds."""

Entry = int
"""An admission's handle: its number among the window's admissions (0, 1, 2...)."""

# A token count the log can hold (a signed 64-bit slot); an upstream's absurd count is cut.
_MAX_TOKENS = 2**62
# The cap of a limit that is not set: no count reaches it (one comparison per admission
# instead of a None test and a comparison).
_UNCAPPED = 2**64


class Window:
    """Admissions of the last minute against a request and a token limit (None: none).

    The log is two flat arrays (times, token counts), not an object per admission: a
    limit nobody reaches at thousands of requests a second keeps a minute of admissions
    -- hundreds of thousands -- and objects that many made every garbage collection walk
    them (measured: tens of µs a request). Expired admissions are dropped from the front
    in bulk, once they are half the arrays.
    """

    __slots__ = (
        "_at",
        "_cost",
        "_first",
        "_head",
        "_rpm",
        "_tokens",
        "_tpm",
        "limited",
        "requests_per_minute",
        "tokens_per_minute",
    )

    def __init__(
        self, requests_per_minute: int | None = None, tokens_per_minute: int | None = None
    ) -> None:
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        #: False when neither limit is set (then nothing needs recording); an attribute,
        #: not a property: read on every admission
        self.limited = requests_per_minute is not None or tokens_per_minute is not None
        self._rpm = _UNCAPPED if requests_per_minute is None else requests_per_minute
        self._tpm = _UNCAPPED if tokens_per_minute is None else tokens_per_minute
        self._at = array("d")  # admission times, oldest first
        self._cost = array("q")  # the tokens each admission counts for
        self._head = 0  # index of the oldest admission still in the window
        self._first = 0  # the number (Entry) of the admission at index 0
        self._tokens = 0  # tokens of the admissions in the window

    def usage(self, now: float) -> tuple[int, int]:
        """(requests, tokens) counted in the window at ``now``."""
        self._expire(now)
        return len(self._at) - self._head, self._tokens

    def wait_needed(self, now: float, tokens: int) -> float:
        """Seconds until an admission of ``tokens`` would fit, or 0.0 if it fits now."""
        self._expire(now)
        at, head = self._at, self._head
        count = len(at) - head
        rpm, tpm = self.requests_per_minute, self.tokens_per_minute
        wait = 0.0
        if rpm is not None and count >= rpm:
            # The (count - rpm + 1)-th oldest admission must leave the window first.
            wait = at[head + count - rpm] + WINDOW - now
        if tpm is not None and count and self._tokens + tokens > tpm:
            excess = self._tokens + tokens - tpm
            freed = 0
            cost = self._cost
            for i in range(head, len(at)):
                freed += cost[i]
                if freed >= excess:
                    wait = max(wait, at[i] + WINDOW - now)
                    break
            else:
                wait = max(wait, at[-1] + WINDOW - now)
        # A small floor so float rounding cannot spin on a wait of 1e-12.
        return wait if wait <= 0 else max(wait, 1e-6)

    def admit(self, now: float, tokens: int) -> Entry | None:
        """Record an admission of ``tokens`` at ``now`` (the caller checked
        :meth:`wait_needed`); None when nothing is limited, so nothing is recorded."""
        if not self.limited:
            return None
        tokens = min(tokens, _MAX_TOKENS)
        entry = self._first + len(self._at)
        self._at.append(now)
        self._cost.append(tokens)
        self._tokens += tokens
        return entry

    def take(self, now: float, tokens: int) -> Entry | float:
        """:meth:`wait_needed` and :meth:`admit` in one call, for a limited window: the
        admission's entry (an int) when ``tokens`` fit now, else the seconds to wait (a
        float, never 0: nothing was admitted).

        One call instead of four per request on the hot path (a key whose limits are
        never reached still logs every admission): the expiry walk only when the oldest
        admission has left the window, the exact wait only when the request is refused,
        and no tuple to build.
        """
        at, head = self._at, self._head
        if head < len(at) and at[head] <= now - WINDOW:
            self._expire(now)
            head = self._head
        count = len(at) - head
        if count >= self._rpm or (count and self._tokens + tokens > self._tpm):
            wait = self.wait_needed(now, tokens)
            if wait > 0:
                return wait
        if tokens > _MAX_TOKENS:  # (not min(): a builtin call on every admission)
            tokens = _MAX_TOKENS
        entry = self._first + len(at)
        at.append(now)
        self._cost.append(tokens)
        self._tokens += tokens
        return entry

    def settle(self, entry: Entry, actual: int) -> None:
        """Let ``entry`` count for ``actual`` tokens from now on (its estimate was wrong);
        nothing once it has left the window."""
        index = entry - self._first
        if index >= self._head:
            if actual > _MAX_TOKENS:
                actual = _MAX_TOKENS
            cost = self._cost
            self._tokens += actual - cost[index]
            cost[index] = actual

    def _expire(self, now: float) -> None:
        at, cost = self._at, self._cost
        head, end, horizon = self._head, len(at), now - WINDOW
        tokens = self._tokens
        while head < end and at[head] <= horizon:
            tokens -= cost[head]
            head += 1
        self._tokens = tokens
        if head > 1024 and head * 2 > end:
            del at[:head]
            del cost[:head]
            self._first += head
            head = 0
        self._head = head
