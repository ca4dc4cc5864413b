"""Every error the gateway writes ends its message with its request id,
`` (request id: req_...)``, once: tests that compare a message across requests (or with
a literal) compare it without that note, after checking it is there."""

from __future__ import annotations

import re

_NOTE = re.compile(r" \(request id: req_[0-9a-f]+\)$")


def without_request_id(message: str) -> str:
    """``message`` without the request id the gateway appended (asserting it did)."""
    assert _NOTE.search(message), f"no request id in {message!r}"
    assert message.count("(request id:") == 1, message
    return _NOTE.sub("", message)
