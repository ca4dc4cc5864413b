"""The neutral core: every dialect translates to and from these values.

Import from here: ``from interlingua.core import Request, Message, TextPart, fold``.
"""

from .events import (
    ArgumentsDelta,
    BlockStart,
    BlockStop,
    Delta,
    ReasoningDelta,
    SignatureDelta,
    StreamEnd,
    StreamError,
    StreamEvent,
    StreamStart,
    TextDelta,
    aclose_iterator,
)
from .fold import Folder, fold
from .parts import (
    DocumentPart,
    ImagePart,
    Meta,
    Part,
    ReasoningPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    UnknownPart,
)
from .request import Message, Reasoning, Request, ResponseFormat, Role, ToolChoice, ToolSpec
from .response import Response, StopReason, Usage
from .unfold import unfold

__all__ = [
    "ArgumentsDelta",
    "BlockStart",
    "BlockStop",
    "Delta",
    "DocumentPart",
    "Folder",
    "ImagePart",
    "Message",
    "Meta",
    "Part",
    "Reasoning",
    "ReasoningDelta",
    "ReasoningPart",
    "Request",
    "Response",
    "ResponseFormat",
    "Role",
    "SignatureDelta",
    "StopReason",
    "StreamEnd",
    "StreamError",
    "StreamEvent",
    "StreamStart",
    "TextDelta",
    "TextPart",
    "ToolCallPart",
    "ToolChoice",
    "ToolResultPart",
    "ToolSpec",
    "UnknownPart",
    "Usage",
    "aclose_iterator",
    "fold",
    "unfold",
]
