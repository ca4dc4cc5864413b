"""Token estimates for when no tokenizer is at hand.

``POST /v1/messages/count_tokens`` asks the upstream first (an Anthropic upstream counts
exactly; the local engine will use its tokenizer); when the upstream cannot count, this
documented estimate answers instead: about 4 characters of text per token, the JSON of
tool definitions counted as text, a flat 85 tokens per image (OpenAI's low-detail tile
cost), and 4 tokens of framing per message.
"""

from __future__ import annotations

import orjson

from .parts import (
    AudioPart,
    DocumentPart,
    ImagePart,
    Part,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from .request import Request

CHARS_PER_TOKEN = 4
IMAGE_TOKENS = 85
MESSAGE_OVERHEAD = 4


def estimate_text(text: str) -> int:
    """Estimated tokens of ``text`` (0 for empty text, at least 1 otherwise)."""
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def _part_chars(part: Part) -> tuple[int, int]:
    """(characters of text, number of images) in one part."""
    if isinstance(part, TextPart):
        return len(part.text), 0
    if isinstance(part, ReasoningPart):
        return len(part.text), 0
    if isinstance(part, ToolCallPart):
        return len(part.name) + len(part.arguments), 0
    if isinstance(part, ImagePart):
        return 0, 1
    if isinstance(part, DocumentPart):
        return len(part.text or "") + len(part.data or "") // 2, 0
    if isinstance(part, AudioPart):
        # ~10 tokens a second (OpenAI's audio models); a second of 16 kHz 16-bit WAV is
        # ~43,000 base64 characters: ~1 token per 4,300, as characters of text
        return len(part.transcript) + len(part.data) * CHARS_PER_TOKEN // 4300, 0
    if isinstance(part, ToolResultPart):
        chars, images = 0, 0
        for inner in part.content:
            c, i = _part_chars(inner)
            chars, images = chars + c, images + i
        return chars, images
    return len(orjson.dumps(part.raw)), 0


def estimate_request_tokens(request: Request) -> int:
    """Estimated input tokens of a whole request (messages, tools, schema)."""
    chars = 0
    images = 0
    for message in request.messages:
        chars += MESSAGE_OVERHEAD * CHARS_PER_TOKEN
        for part in message.parts:
            c, i = _part_chars(part)
            chars, images = chars + c, images + i
    for tool in request.tools:
        chars += len(tool.name) + len(tool.description or "")
        if tool.parameters:
            chars += len(orjson.dumps(tool.parameters))
    if request.response_format is not None and request.response_format.schema:
        chars += len(orjson.dumps(request.response_format.schema))
    return (chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN + images * IMAGE_TOKENS
