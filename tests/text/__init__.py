"""Tests of interlingua.text; ``chunks`` splits a string at arbitrary cut points."""

from __future__ import annotations


def chunks(text: str, cuts: list[int]) -> list[str]:
    """Split ``text`` at the given cut points (taken modulo len+1, sorted, may repeat).

    Repeated cuts produce empty chunks on purpose: processors must accept ``feed("")``.
    """
    points = sorted(c % (len(text) + 1) for c in cuts)
    pieces: list[str] = []
    last = 0
    for p in points:
        pieces.append(text[last:p])
        last = p
    pieces.append(text[last:])
    return pieces
