"""Window.take (the hot path's one call) against wait_needed + admit (the reference)."""

from __future__ import annotations

import random

import pytest

from interlingua.limits.window import Window


def reference_take(window: Window, now: float, tokens: int) -> int | float:
    wait = window.wait_needed(now, tokens)
    if wait > 0:
        return wait
    entry = window.admit(now, tokens)
    assert entry is not None
    return entry


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize(("rpm", "tpm"), [(5, None), (None, 300), (7, 500), (1, 1)])
def test_take_is_wait_needed_then_admit(seed: int, rpm: int | None, tpm: int | None) -> None:
    rng = random.Random(seed)
    fast, slow = Window(rpm, tpm), Window(rpm, tpm)
    now = 0.0
    admitted: list[int] = []
    for _ in range(3000):  # long enough for the arrays to be cut from the front
        now += rng.choice((0.0, 0.01, 0.5, 3.0, 20.0, 61.0))
        tokens = rng.choice((0, 1, 40, 120, 400))
        got = fast.take(now, tokens)
        expected = reference_take(slow, now, tokens)
        assert got == expected and type(got) is type(expected)  # (an int entry, a float wait)
        if type(got) is int:
            admitted.append(got)
        if admitted and rng.random() < 0.3:  # an answer settles its actual count
            entry, actual = rng.choice(admitted), rng.choice((0, 5, 90, 700))
            fast.settle(entry, actual)
            slow.settle(entry, actual)
        assert fast.usage(now) == slow.usage(now)


def test_an_estimate_over_the_whole_limit_passes_an_empty_window() -> None:
    window = Window(None, 100)
    first = window.take(0.0, 500)
    assert first == 0 and type(first) is int  # (the first entry)
    wait = window.take(1.0, 1)
    assert wait == pytest.approx(59.0) and type(wait) is float
    second = window.take(61.0, 500)
    assert second == 1 and type(second) is int
