"""Neutral content parts: the pieces a message or a response is made of.

Every dialect converts its own content blocks to and from these. Anything a dialect
carries that has no neutral meaning (Anthropic ``cache_control``, thinking signatures,
OpenAI ``detail``) rides in ``meta`` so that it survives a round trip through the same
dialect; a block type we do not know at all becomes an :class:`UnknownPart` that keeps
the raw JSON.

Parts are frozen values. ``meta`` is a plain dict by convention and is never mutated
after construction.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from .frozen import quick_init

Meta: TypeAlias = dict[str, Any]


def _no_meta() -> Meta:
    return {}


@quick_init
@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """One generated token's log probability, in OpenAI's shape.

    That shape: docs/protocols.md, "Chat Completions: response body".

    ``bytes`` is the token's UTF-8 bytes (None when the server did not say);
    ``top_logprobs`` the most likely alternatives at that position, each a TokenLogprob
    without alternatives of its own.

    >>> TokenLogprob("Hi", -0.01, (72, 105)).logprob
    -0.01
    """

    token: str
    logprob: float
    bytes: tuple[int, ...] | None = None
    top_logprobs: tuple[TokenLogprob, ...] = ()


@quick_init
@dataclass(frozen=True, slots=True)
class TextPart:
    """Plain text. ``meta`` may hold e.g. ``{"cache_control": {...}}``.

    ``logprobs`` holds the log probability of each token of an answer's text when the
    request asked for them and the upstream returned them (None otherwise).
    """

    text: str
    meta: Meta = field(default_factory=_no_meta, compare=False)
    logprobs: tuple[TokenLogprob, ...] | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image, either inline (``data`` is base64, ``media_type`` set) or by ``url``.

    >>> ImagePart(media_type="image/png", data="iVBOR...")
    """

    media_type: str | None = None
    data: str | None = None
    url: str | None = None
    detail: str | None = None
    meta: Meta = field(default_factory=_no_meta, compare=False)

    @property
    def data_uri(self) -> str:
        """The image as a ``data:`` URI, or its URL when it is a remote image."""
        if self.data is not None:
            return f"data:{self.media_type or 'application/octet-stream'};base64,{self.data}"
        return self.url or ""


@quick_init
@dataclass(frozen=True, slots=True)
class DocumentPart:
    """A document (PDF as base64, plain text, or URL) with an optional title/filename."""

    media_type: str | None = None
    data: str | None = None
    url: str | None = None
    text: str | None = None
    title: str | None = None
    meta: Meta = field(default_factory=_no_meta, compare=False)


@quick_init
@dataclass(frozen=True, slots=True)
class AudioPart:
    """Audio: a user's input (``input_audio``) or a model's spoken answer (``message.audio``).

    ``data`` is base64; ``format`` is ``wav`` / ``mp3`` for input, the requested output
    format (``wav``, ``mp3``, ``flac``, ``opus``, ``pcm16``...) for an answer when known.
    An answer also carries its ``transcript``, its ``id`` (which an assistant turn of a
    later request quotes to refer to it) and ``expires_at`` (Unix seconds).
    """

    data: str = ""
    format: str | None = None
    transcript: str = ""
    id: str | None = None
    expires_at: int | None = None
    meta: Meta = field(default_factory=_no_meta, compare=False)


@quick_init
@dataclass(frozen=True, slots=True)
class ReasoningPart:
    """Model reasoning ("thinking").

    ``signature`` is Anthropic's opaque integrity token; ``redacted`` holds the opaque
    payload of a ``redacted_thinking`` block (then ``text`` is empty). Both only round-trip
    within the dialect that produced them.
    """

    text: str = ""
    signature: str | None = None
    redacted: str | None = None
    meta: Meta = field(default_factory=_no_meta, compare=False)


@quick_init
@dataclass(frozen=True, slots=True)
class ToolCallPart:
    """A call the model makes to a client tool.

    ``arguments`` is the JSON text exactly as the model produced it (it may be invalid
    JSON; converting to a dialect that needs an object is where that is checked). For a
    call of a ``custom`` tool (see :class:`~.request.ToolSpec`) ``kind`` is ``custom``
    and ``arguments`` is the raw input text, not JSON.
    """

    id: str
    name: str
    arguments: str = ""
    meta: Meta = field(default_factory=_no_meta, compare=False)
    kind: Literal["function", "custom"] = "function"


@quick_init
@dataclass(frozen=True, slots=True)
class ToolResultPart:
    """The result of a tool call, sent back by the client in a user turn."""

    tool_call_id: str
    content: tuple[TextPart | ImagePart | DocumentPart, ...] = ()
    is_error: bool = False
    meta: Meta = field(default_factory=_no_meta, compare=False)

    @property
    def text(self) -> str:
        """All text content joined; non-text content is skipped."""
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


@quick_init
@dataclass(frozen=True, slots=True)
class UnknownPart:
    """A block type we do not model; kept verbatim so the same dialect can re-emit it."""

    dialect: str
    raw: dict[str, Any]


Part: TypeAlias = (
    TextPart
    | ImagePart
    | AudioPart
    | DocumentPart
    | ReasoningPart
    | ToolCallPart
    | ToolResultPart
    | UnknownPart
)
