"""``--fold-reasoning``: an output body's reasoning written into its text.

Data pipelines built on datastudio's BaseAPI read one string per answer, the reasoning in
front of it as ``<think>\\n{reasoning}\\n</think>\\n\\n{text}``, both parts stripped
(:func:`~interlingua.client.fold_reasoning`, the same as the client's ``think_tags``). With ``--fold-reasoning`` the runner writes
each successful body so: the text of the answer, in the body's own dialect, becomes the
folded text; everything else (the reasoning fields themselves, usage, ids) stays as the
server sent it. A body without reasoning is left byte for byte. Where each dialect keeps
the text (and adds it when an answer has none) is the dialect's own business
(:meth:`~interlingua.dialects.Dialect.rewrite_text`, :mod:`interlingua.dialects.answers`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from ..client import fold_reasoning
from ..dialects import get_dialect

__all__ = ["fold_body"]


def fold_body(dialect: str, body: Any, reasoning: str) -> bool:
    """Fold ``reasoning`` into ``body``'s text in place; whether anything changed."""
    if not reasoning or not isinstance(body, dict):
        return False
    return get_dialect(dialect).rewrite_text(body, partial(fold_reasoning, reasoning))
