"""The bundled SmolLM2 loaded in this process, for the tests of the embedded engine."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from interlingua.upstreams.local import LlamaEngine, bundled_model_path


@contextmanager
def loaded_engine(n_ctx: int, **options: Any) -> Iterator[LlamaEngine]:
    """A :class:`LlamaEngine` on the bundled model (``options``: its keyword arguments),
    loaded, and closed after the block."""
    engine = LlamaEngine(bundled_model_path("smollm2"), n_ctx=n_ctx, **options)
    engine.load()
    try:
        yield engine
    finally:
        engine.close()
