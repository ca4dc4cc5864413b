"""OpenAI Responses error bodies <-> the neutral error tree.

Wire facts: docs/protocols.md, "Responses: errors" and "Errors and statuses".

The Responses API answers HTTP errors with the Chat Completions body
``{"error": {"message", "type", "param", "code"}}`` and the same status codes, so this
module is the Chat codec's functions under the Responses dialect's name: ``parse_error``
classifies an upstream's non-2xx answer, ``render_error`` gives ``(status, body)`` for a
client, ``client_status`` turns 529 into 503 (OpenAI clients know 503 as "overloaded").
The in-band stream error (a ``type: "error"`` event with a ``sequence_number``) is the
stream encoder's business, not this module's.

>>> from interlingua.errors import OverloadedError
>>> render_error(OverloadedError("busy", status=529))
(503, {'error': {'message': 'busy', 'type': 'server_error', 'param': None, 'code': 'overloaded'}})
"""

from __future__ import annotations

from ..openai_chat.errors import (
    client_status,
    error_from_payload,
    parse_error,
    render_error,
    render_error_body,
)

__all__ = [
    "client_status",
    "error_from_payload",
    "parse_error",
    "render_error",
    "render_error_body",
]
