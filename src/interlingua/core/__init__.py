"""The neutral core: every dialect translates to and from these values.

Import from here: ``from interlingua.core import Request, Message, TextPart, fold``.
"""

from .events import (
    ArgumentsDelta,
    AudioDelta,
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
    AudioPart,
    DocumentPart,
    ImagePart,
    Meta,
    Part,
    ReasoningPart,
    TextPart,
    TokenLogprob,
    ToolCallPart,
    ToolResultPart,
    UnknownPart,
)
from .request import (
    REFUSABLE_SETTINGS,
    Message,
    Reasoning,
    Request,
    ResponseFormat,
    Role,
    ToolChoice,
    ToolSpec,
    drop_settings,
)
from .response import Response, StopReason, Usage
from .unfold import unfold

__all__ = [
    "REFUSABLE_SETTINGS",
    "ArgumentsDelta",
    "AudioDelta",
    "AudioPart",
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
    "TokenLogprob",
    "ToolCallPart",
    "ToolChoice",
    "ToolResultPart",
    "ToolSpec",
    "UnknownPart",
    "Usage",
    "aclose_iterator",
    "drop_settings",
    "fold",
    "unfold",
]
