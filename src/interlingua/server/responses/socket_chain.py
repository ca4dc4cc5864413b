"""What one Responses WebSocket connection remembers of its own responses.

Over a socket, a turn names the response it continues (``previous_response_id``) and
sends only the new input items, **whether or not** the responses were stored
(``store: false`` is what Codex sends): the API keeps the previous responses of the
connection in memory for the connection's life. :class:`ChainMemory` is that memory for
one connection: for each response it keeps the context a continuation starts from -- the
response's whole input (itself expanded, if it continued another) followed by its output
items -- and :meth:`ChainMemory.expand` turns a continuation of a remembered response
into a self-contained request, so the rest of the gateway never sees the id.

It is bounded: at most ``max_responses`` responses (the API's clients continue the last
one or two; Codex only ever the last) and ``max_bytes`` of context, where each
response's context is counted whole (its own frame and answer plus its predecessor's
context), so the sum over the responses kept is an upper bound of the memory held even
though successive contexts share their items. The oldest response goes first; a
response whose context alone is over the budget is not kept (continuing it then takes
the gateway's ordinary path, as an id it never saw would).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_BYTES", "MAX_RESPONSES", "ChainMemory", "input_items"]

log = logging.getLogger("interlingua.server")

#: responses one connection remembers
MAX_RESPONSES = 8
#: bytes of context one connection remembers (each response counted with its whole context)
MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class _Context:
    """A remembered response: the items a continuation of it starts with, and their size."""

    items: tuple[Any, ...]
    size: int


class ChainMemory:
    """The responses of one connection, newest last (see the module docstring)."""

    __slots__ = ("_contexts", "_total", "max_bytes", "max_responses")

    def __init__(self, max_responses: int = MAX_RESPONSES, max_bytes: int = MAX_BYTES) -> None:
        self.max_responses = max_responses
        self.max_bytes = max_bytes
        self._contexts: OrderedDict[str, _Context] = OrderedDict()
        self._total = 0

    def __contains__(self, response_id: object) -> bool:
        return response_id in self._contexts

    def __len__(self) -> int:
        return len(self._contexts)

    @property
    def total_bytes(self) -> int:
        """The bytes counted against ``max_bytes`` (an upper bound of what is held)."""
        return self._total

    def expand(self, body: dict[str, Any]) -> int:
        """Rewrite a continuation of a remembered response as a whole request, in place.

        ``input`` becomes the remembered context followed by the new items and
        ``previous_response_id`` goes. Returns the size counted for the context it
        continues (0 when nothing was expanded: no id, an id this connection does not
        hold, or an ``input`` of a type the API refuses, left for validation to name).
        Like the API, nothing else is inherited: instructions, tools and settings come
        from this request alone.
        """
        previous = body.get("previous_response_id")
        context = self._contexts.get(previous) if isinstance(previous, str) else None
        if context is None:
            return 0
        items = input_items(body.get("input"))
        if items is None:
            return 0
        body["input"] = [*context.items, *items]
        del body["previous_response_id"]
        return context.size

    def remember(self, response_id: str, items: list[Any], output: list[Any], size: int) -> bool:
        """Keep ``response_id``'s context: its whole ``items`` (input) then ``output``.

        ``size`` is the context's counted size. Returns whether it was kept; older
        responses are forgotten to make room.
        """
        if not response_id:
            return False
        self._forget(response_id)
        if size > self.max_bytes:
            log.info(
                "response %s not kept for previous_response_id on this socket: its context "
                "(%d bytes) is over the per-connection budget (%d bytes)",
                response_id,
                size,
                self.max_bytes,
            )
            return False
        self._contexts[response_id] = _Context((*items, *output), size)
        self._total += size
        while len(self._contexts) > self.max_responses or self._total > self.max_bytes:
            _, oldest = self._contexts.popitem(last=False)
            self._total -= oldest.size
        return True

    def _forget(self, response_id: str) -> None:
        old = self._contexts.pop(response_id, None)
        if old is not None:
            self._total -= old.size


def input_items(value: Any) -> list[Any] | None:
    """A request's ``input`` as a list of items (a string is one user message; absent is
    none), or None for a type the API refuses."""
    if value is None:
        return []
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if isinstance(value, list):
        return value
    return None
