"""Tests of interlingua.text; ``chunks`` splits a string at arbitrary cut points,
``parse`` runs :class:`~interlingua.text.ToolCallTextParser` over chunks."""

from __future__ import annotations

from typing import Any

from interlingua.text import Segment, ToolCallTextParser


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


def merge(segments: list[Segment]) -> list[Segment]:
    """Adjacent text segments joined (a parser may split text anywhere); none empty."""
    out: list[Segment] = []
    for seg in segments:
        if seg[0] == "text":
            assert seg[1], "no empty text segments"
            last = out[-1] if out else None
            if last is not None and last[0] == "text":
                out[-1] = ("text", last[1] + seg[1])
                continue
        out.append(seg)
    return out


def parse(pieces: list[str], names: Any = None, **kw: Any) -> list[Segment]:
    """Feed ``pieces`` to a fresh parser (``names`` and ``kw`` its arguments), then flush."""
    p = ToolCallTextParser(names, **kw)
    out: list[Segment] = []
    for piece in pieces:
        out.extend(p.feed(piece))
    out.extend(p.flush())
    return merge(out)
