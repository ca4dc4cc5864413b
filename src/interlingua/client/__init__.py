"""The interlingua client: ``Client`` / ``AsyncClient`` for OpenAI- and Anthropic-style APIs.

::

    from interlingua.client import AsyncClient, RateLimit

    async with AsyncClient("http://127.0.0.1:8400/v1", model="qwen3",
                           rate_limit=RateLimit(requests_per_minute=600, max_concurrency=64),
                           max_image_side=1024) as client:
        result = await client.chat(["What is in this picture?", Path("cat.jpg")])
        print(result.text, result.usage)

Many prompts at once (in input order; failures as :class:`Failure` values)::

    results = await client.generate(["Hi", {"prompt": "Hello", "temperature": 0}])

Modules: ``_async`` (AsyncClient), ``_sync`` (Client), ``_stream`` (ChatStream),
``_generate`` (in-process batches, Failure), ``_transport`` (the HTTP seam over
:mod:`interlingua.http_pool`'s engines: endpoint, failure mapping), ``_policy`` (retries and rate limits), ``_inputs``
(prompt forms), ``_images`` (image encoding, its cache), ``_audio`` (audio in, spoken answers out), ``_outputs``
(ChatResult, usage and its sums, JSON, reasoning folding), ``_answers`` (reading and judging a 2xx
body, RawReply), ``_settings`` (client-wide defaults), ``_tools`` (the agent loop), ``_errors``
(typed exceptions), ``_build`` (argument forms, settings a dialect lacks).
"""

from ..limits import RateLimit, RateLimiter
from ._async import AsyncClient, RawReply
from ._audio import Audio
from ._build import UnsupportedParameterError
from ._embed import decode_vector
from ._errors import (
    AnswerError,
    APIConnectionError,
    APIError,
    APIStatusError,
    APITimeoutError,
    AuthenticationError,
    BadRequestError,
    ConflictError,
    EmptyAnswerError,
    InternalServerError,
    NotFoundError,
    OverloadedError,
    PermissionDeniedError,
    RateLimitError,
    UnprocessableEntityError,
    UnreadableAnswerError,
)
from ._generate import Failure
from ._inputs import InputError, detect_image_type
from ._outputs import (
    CallOptions,
    ChatResult,
    JSONExtractionError,
    StreamedFold,
    StructuredOutputError,
    ToolArgumentsError,
    ToolCall,
    better_usage,
    extract_json,
    fold_reasoning,
    is_empty_answer,
    normalize_usage,
    sum_usage,
)
from ._stream import ChatStream
from ._sync import Client, SyncChatStream
from ._tools import MaxTurnsError, custom_tool, tool_spec

__all__ = [
    "APIConnectionError",
    "APIError",
    "APIStatusError",
    "APITimeoutError",
    "AnswerError",
    "AsyncClient",
    "Audio",
    "AuthenticationError",
    "BadRequestError",
    "CallOptions",
    "ChatResult",
    "ChatStream",
    "Client",
    "ConflictError",
    "EmptyAnswerError",
    "Failure",
    "InputError",
    "InternalServerError",
    "JSONExtractionError",
    "MaxTurnsError",
    "NotFoundError",
    "OverloadedError",
    "PermissionDeniedError",
    "RateLimit",
    "RateLimitError",
    "RateLimiter",
    "RawReply",
    "StreamedFold",
    "StructuredOutputError",
    "SyncChatStream",
    "ToolArgumentsError",
    "ToolCall",
    "UnprocessableEntityError",
    "UnreadableAnswerError",
    "UnsupportedParameterError",
    "better_usage",
    "custom_tool",
    "decode_vector",
    "detect_image_type",
    "extract_json",
    "fold_reasoning",
    "is_empty_answer",
    "normalize_usage",
    "sum_usage",
    "tool_spec",
]
