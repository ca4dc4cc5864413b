"""Reasoning the gateway hands a Responses client as ``encrypted_content``.

A Responses client keeps a model's reasoning only as an opaque ``encrypted_content``
string that it sends back on the next turn (Codex does, with ``include:
["reasoning.encrypted_content"]`` and ``store: false``). When the reasoning came from an
upstream that needs it back to continue (an Anthropic ``thinking`` block and its
signature, a ``redacted_thinking`` payload, a Chat model's ``reasoning_content`` or
OpenRouter's ``reasoning_details``), the gateway packs it into such a string: a
:class:`Sealer` turns the neutral part into a token and back.

The token is authenticated (HMAC-SHA256 under the gateway's key), so a client cannot
forge one: a forged or altered token, or one another server issued (OpenAI's own, which
clients carry across providers), does not open and is treated as foreign reasoning (kept
for a Responses upstream, dropped elsewhere), never as an error. It is not encrypted:
what it carries (the reasoning text, the upstream's own opaque signature) is what the
client was shown or could not read anyway.

>>> sealer = Sealer(b"k" * 32)
>>> token = sealer.seal(ReasoningPart("2+2=4", signature="sig"))
>>> token.startswith(PREFIX)
True
>>> sealer.open(token)
ReasoningPart(text='2+2=4', signature='sig', redacted=None, meta={})
>>> Sealer(b"another key 32 bytes long.......").open(token) is None
True
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from typing import Any

import orjson

from ...core import ReasoningPart

__all__ = ["DEFAULT_SEALER", "PREFIX", "Sealer"]

#: every token starts with this (the version: a new format gets a new prefix)
PREFIX = "ilg1."
_MAC_SIZE = 32
# Meta entries a token carries: what another dialect needs to replay the reasoning.
_CARRIED_META = ("reasoning_details", "openai_field")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Sealer:
    """Seals reasoning into tokens and opens tokens it sealed (see the module docstring).

    ``key`` should be 32 random bytes, the same on every replica and worker that may see
    the next turn (server config ``responses.secret_env``, else a key file in the user's
    data directory); ``Sealer()`` makes a random one, good for one process only.
    """

    __slots__ = ("_key",)

    def __init__(self, key: bytes | None = None) -> None:
        if key is not None and len(key) < 16:
            raise ValueError("a sealing key needs at least 16 bytes")
        self._key = key if key is not None else os.urandom(32)

    def _mac(self, payload: str) -> bytes:
        return hmac.new(self._key, payload.encode("ascii"), hashlib.sha256).digest()

    def seal(self, part: ReasoningPart) -> str | None:
        """``part`` as a token, or None when it holds nothing to carry."""
        fields: dict[str, Any] = {}
        if part.text:
            fields["t"] = part.text
        if part.signature:
            fields["s"] = part.signature
        if part.redacted is not None:
            fields["r"] = part.redacted
        meta = {key: part.meta[key] for key in _CARRIED_META if key in part.meta}
        if meta:
            fields["m"] = meta
        if not fields:
            return None
        payload = _b64(orjson.dumps(fields))
        return f"{PREFIX}{payload}.{_b64(self._mac(payload))}"

    def open(self, token: str) -> ReasoningPart | None:
        """The part a token of ours holds; None for anything else (foreign, forged,
        altered or malformed), which the caller treats as foreign reasoning."""
        if not token.startswith(PREFIX):
            return None
        payload, dot, mac = token[len(PREFIX) :].partition(".")
        if not dot:
            return None
        try:
            given = _unb64(mac)
            if len(given) != _MAC_SIZE or not hmac.compare_digest(given, self._mac(payload)):
                return None
            fields = orjson.loads(_unb64(payload))
        except (ValueError, binascii.Error, UnicodeEncodeError):
            return None
        if not isinstance(fields, dict):
            return None
        text, signature, redacted = fields.get("t", ""), fields.get("s"), fields.get("r")
        meta = fields.get("m") or {}
        if not (
            isinstance(text, str)
            and isinstance(signature, str | None)
            and isinstance(redacted, str | None)
            and isinstance(meta, dict)
        ):
            return None  # (signed by us, so never expected: a key reused by another tool)
        return ReasoningPart(text, signature=signature, redacted=redacted, meta=meta)


#: the sealer of codecs used without one (a random key: tokens open in this process only)
DEFAULT_SEALER = Sealer()
