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

from collections import deque

__all__ = ["WINDOW", "Entry", "Window"]

WINDOW = 60.0
"""The per-minute window in seconds."""


class Entry:
    """One admission in the window: when, and how many tokens it currently counts for."""

    __slots__ = ("at", "live", "tokens")

    def __init__(self, at: float, tokens: int) -> None:
        self.at = at
        self.tokens = tokens
        self.live = True  # still inside the window (counted in the running total)


class Window:
    """Admissions of the last minute against a request and a token limit (None: none)."""

    __slots__ = ("_entries", "_tokens", "requests_per_minute", "tokens_per_minute")

    def __init__(
        self, requests_per_minute: int | None = None, tokens_per_minute: int | None = None
    ) -> None:
        self.requests_per_minute = requests_per_minute
        self.tokens_per_minute = tokens_per_minute
        self._entries: deque[Entry] = deque()
        self._tokens = 0

    @property
    def limited(self) -> bool:
        """False when neither limit is set (then nothing needs recording)."""
        return self.requests_per_minute is not None or self.tokens_per_minute is not None

    def usage(self, now: float) -> tuple[int, int]:
        """(requests, tokens) counted in the window at ``now``."""
        self._expire(now)
        return len(self._entries), self._tokens

    def wait_needed(self, now: float, tokens: int) -> float:
        """Seconds until an admission of ``tokens`` would fit, or 0.0 if it fits now."""
        self._expire(now)
        entries = self._entries
        rpm, tpm = self.requests_per_minute, self.tokens_per_minute
        wait = 0.0
        if rpm is not None and len(entries) >= rpm:
            # The (len - rpm + 1)-th oldest admission must leave the window first.
            wait = entries[len(entries) - rpm].at + WINDOW - now
        if tpm is not None and entries and self._tokens + tokens > tpm:
            excess = self._tokens + tokens - tpm
            freed = 0
            for entry in entries:
                freed += entry.tokens
                if freed >= excess:
                    wait = max(wait, entry.at + WINDOW - now)
                    break
            else:
                wait = max(wait, entries[-1].at + WINDOW - now)
        # A small floor so float rounding cannot spin on a wait of 1e-12.
        return wait if wait <= 0 else max(wait, 1e-6)

    def admit(self, now: float, tokens: int) -> Entry | None:
        """Record an admission of ``tokens`` at ``now`` (the caller checked
        :meth:`wait_needed`); None when nothing is limited, so nothing is recorded."""
        if not self.limited:
            return None
        entry = Entry(now, tokens)
        self._entries.append(entry)
        self._tokens += tokens
        return entry

    def settle(self, entry: Entry, actual: int) -> None:
        """Let ``entry`` count for ``actual`` tokens from now on (its estimate was wrong)."""
        if entry.live:
            self._tokens += actual - entry.tokens
        entry.tokens = actual

    def _expire(self, now: float) -> None:
        entries = self._entries
        while entries and entries[0].at <= now - WINDOW:
            entry = entries.popleft()
            entry.live = False
            self._tokens -= entry.tokens
