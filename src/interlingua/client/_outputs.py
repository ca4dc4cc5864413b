"""What a call returns: :class:`ChatResult`, usage normalization, JSON extraction.

``ChatResult`` wraps the neutral :class:`~interlingua.core.Response` with conveniences:
``.text`` (optionally with the reasoning folded in as ``<think>…</think>``, see
:func:`fold_reasoning`), ``.refusal`` (apart from the text), ``.reasoning``,
``.tool_calls`` whose ``.arguments`` are parsed JSON (a :class:`ToolArgumentsError` naming
the tool when the model wrote invalid JSON), ``.usage``, ``.stop_reason``, ``.raw`` (the
decoded body), ``.parsed`` for structured output, and the call's timings ``.ttft`` and
``.latency``.

:func:`normalize_usage` reads token counts from any backend's shape -- OpenAI
(``prompt_tokens``…), Anthropic (``input_tokens`` + cache counts), Ollama
(``prompt_eval_count``/``eval_count``), vLLM (OpenAI's, details often null), the Responses
API (``input_tokens_details``), and the odd ones proxies write (counts as strings,
reasoning at the top level, Anthropic's cache fields in an OpenAI usage) -- into one
:class:`~interlingua.core.Usage`, where ``input_tokens`` counts *all* input, cache
included (the neutral convention).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import orjson

from ..core import (
    AudioPart,
    Message,
    ReasoningPart,
    Response,
    StopReason,
    TextPart,
    TokenLogprob,
    ToolCallPart,
    Usage,
)
from ..dialects.loose_usage import loose_usage
from ._audio import Audio

__all__ = [
    "CallOptions",
    "ChatResult",
    "JSONExtractionError",
    "StreamedFold",
    "StructuredOutputError",
    "ToolArgumentsError",
    "ToolCall",
    "extract_json",
    "fold_reasoning",
    "is_empty_answer",
    "normalize_usage",
    "sum_usage",
]

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_THINK = re.compile(r"^\s*<think>.*?</think>", re.DOTALL)
_QUOTE_CHARS = 80


class JSONExtractionError(ValueError):
    """The answer held no parseable JSON object or array."""


class ToolArgumentsError(ValueError):
    """A tool call's arguments are not a valid JSON object."""

    def __init__(self, message: str, *, tool: str, arguments: str) -> None:
        super().__init__(message)
        self.tool = tool
        self.arguments = arguments


class StructuredOutputError(ValueError):
    """The answer's JSON does not validate against the requested pydantic model."""


@dataclass(frozen=True, slots=True)
class CallOptions:
    """Per-call result handling: ``think_tags``, structured parsing (+ pydantic class),
    ``retry_on_empty``."""

    think_tags: bool = False
    structured: bool = False
    model_class: Any = None
    retry_on_empty: bool = False


def call_options(think: bool, structured: bool, model_class: Any, retry: bool) -> CallOptions:
    """The :class:`CallOptions` of a call (without a pydantic class: one of eight shared
    values, not one built per call)."""
    if model_class is None:
        return _PLAIN_OPTIONS[think, structured, retry]
    return CallOptions(think, structured, model_class, retry)


#: CallOptions without a pydantic class, by (think_tags, structured, retry_on_empty)
_PLAIN_OPTIONS = {
    (t, s, r): CallOptions(t, s, None, r)
    for t in (False, True)
    for s in (False, True)
    for r in (False, True)
}


# --- usage -------------------------------------------------------------------------------


def normalize_usage(raw: Any) -> Usage:
    """Token counts from a response body or a ``usage`` object of any backend.

    Read as every usage reader of the package reads an odd one
    (:func:`~interlingua.dialects.loose_usage.loose_usage`): counts written as strings
    or floats, reasoning tokens at the top level, Anthropic's cache fields in an OpenAI
    usage (a proxy's: ``prompt_tokens`` stays the whole input) are all read.

    >>> normalize_usage({"prompt_eval_count": 12, "eval_count": 5}).total_tokens
    17
    >>> normalize_usage({"input_tokens": 10, "cache_read_input_tokens": 90,
    ...                  "output_tokens": 3}).input_tokens
    100
    >>> normalize_usage({"usage": {"prompt_tokens": "12", "completion_tokens": "3"}}).total_tokens
    15
    """
    if not isinstance(raw, dict):
        return Usage()
    usage = raw.get("usage")
    if isinstance(usage, dict) and not _has_counts(raw):
        raw = usage
    return loose_usage(raw)


def _has_counts(obj: dict[str, Any]) -> bool:
    """Whether a body carries counts at top level (Ollama's native ``/api/chat``)."""
    return "prompt_eval_count" in obj or "eval_count" in obj


# --- JSON extraction ---------------------------------------------------------------------


def _balanced_end(text: str, start: int) -> int:
    """Index just past the bracket matching ``text[start]``, or -1 (strings respected)."""
    depth = 0
    in_string = escaped = False
    for i in range(start, len(text)):
        c = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return -1


def _first_json(text: str) -> tuple[bool, Any]:
    """(found, value) for the first balanced object/array in ``text`` that parses."""
    for match in re.finditer(r"[{\[]", text):
        end = _balanced_end(text, match.start())
        if end < 0:
            continue
        try:
            return True, orjson.loads(text[match.start() : end])
        except orjson.JSONDecodeError:
            continue
    return False, None


def extract_json(text: str) -> Any:
    """The JSON object or array in a model's text answer.

    Tried in order: the whole text; fenced blocks (```json first, then any fence); the
    first balanced ``{…}`` / ``[…]`` that parses. A leading ``<think>…</think>`` block is
    skipped (models that inline their reasoning often mention braces in it).

    >>> extract_json('Sure! ```json\\n{"a": 1}\\n``` Done.')
    {'a': 1}
    """
    body = _THINK.sub("", text, count=1).strip()
    try:
        value = orjson.loads(body)
        if isinstance(value, dict | list):
            return value
    except orjson.JSONDecodeError:
        pass
    fences = _FENCE.findall(body)
    fences.sort(key=lambda f: f[0].lower() != "json")  # stable: ```json blocks first
    for _, inner in fences:
        found, value = _first_json(inner)
        if found:
            return value
    found, value = _first_json(body)
    if found:
        return value
    start = text[:_QUOTE_CHARS] + ("…" if len(text) > _QUOTE_CHARS else "")
    raise JSONExtractionError(
        f"no JSON object or array found in the answer (it starts: {start!r}); "
        "ask for JSON explicitly or pass response_format=<schema or pydantic model>"
    )


# --- results -----------------------------------------------------------------------------


def fold_reasoning(reasoning: str, text: str) -> str:
    """``text`` with ``reasoning`` in front as a ``<think>`` block, byte for byte as
    datastudio BaseAPI writes it (data pipelines parse it):
    ``"<think>\\n" + reasoning.strip() + "\\n</think>\\n\\n" + text.strip()``.

    Without reasoning (``""``) the formula does not apply and ``text`` is returned as it
    is, unstripped: a pipeline whose model gave no reasoning sees the server's text.
    Reasoning of whitespace alone is reasoning: an empty think block.

    >>> fold_reasoning("\\n2 + 2 is 4\\n", "\\n\\n4")
    '<think>\\n2 + 2 is 4\\n</think>\\n\\n4'
    >>> fold_reasoning("", " 4 ")
    ' 4 '
    """
    if not reasoning:
        return text
    return f"{_THINK_OPEN}{reasoning.strip()}{THINK_CLOSE}{text.strip()}"


_THINK_OPEN = "<think>\n"
#: what ends the think block, before the answer
THINK_CLOSE = "\n</think>\n\n"


class StreamedFold:
    """:func:`fold_reasoning`, piece by piece: the pieces returned join to the fold of the
    joined parts, byte for byte.

    Stripping a part's ends means not knowing, while it streams, whether whitespace is
    padding or lies between words: trailing whitespace is held until more text of the
    part comes (then released in place) or the part ends (then dropped). Reasoning opens
    the think block with its first non-empty piece; an answer that started before any
    reasoning is an answer without reasoning and is passed through untouched, and
    reasoning arriving after the answer began is left out (a stream cannot go back to put
    it in front; ``result.text`` has it).

    >>> f = StreamedFold()
    >>> [f.reasoning("\\nhm \\n"), f.text("\\n\\nok "), f.text("then\\n"), f.end()]
    ['<think>\\nhm', '\\n</think>\\n\\nok', ' then', '']
    """

    __slots__ = ("_held", "_lead", "_state")

    def __init__(self) -> None:
        self._state = _BEFORE
        self._lead = True  # the current part has not shown a non-space character yet
        self._held = ""  # whitespace at the current part's end, so far

    def reasoning(self, piece: str) -> str:
        """The text to show for a piece of reasoning."""
        if not piece or self._state > _THINKING:
            return ""
        head = ""
        if self._state == _BEFORE:
            self._state, head = _THINKING, _THINK_OPEN
        return head + self._stripped(piece)

    def text(self, piece: str) -> str:
        """The text to show for a piece of the answer."""
        if not piece:
            return ""
        if self._state == _BEFORE:
            self._state = _VERBATIM
        if self._state == _VERBATIM:
            return piece
        head = ""
        if self._state == _THINKING:
            self._state, self._lead, self._held, head = _ANSWER, True, "", THINK_CLOSE
        return head + self._stripped(piece)

    def end(self) -> str:
        """What is left to show once the stream ended (held whitespace is dropped)."""
        self._held = ""
        return THINK_CLOSE if self._state == _THINKING else ""

    def _stripped(self, piece: str) -> str:
        if self._lead:
            piece = piece.lstrip()
            if not piece:
                return ""
            self._lead = False
        body = piece.rstrip()
        if not body:
            self._held += piece
            return ""
        out = self._held + body if self._held else body
        self._held = piece[len(body) :]
        return out


# StreamedFold's states, in the order a stream goes through them.
_BEFORE, _THINKING, _ANSWER, _VERBATIM = 0, 1, 2, 3


def is_empty_answer(response: Response) -> bool:
    """Whether a 2xx answer is not an answer: no text, no tool call, no refusal.

    Reasoning alone does not count (a model that spent its ``max_tokens`` thinking said
    nothing); any other part (audio, a hosted tool's output) does.
    """
    if response.stop_reason is StopReason.REFUSAL:
        return False
    for part in response.parts:
        if isinstance(part, TextPart):
            if part.text:
                return False
        elif not isinstance(part, ReasoningPart):
            return False
    return True


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call from the model; ``arguments`` parses ``raw_arguments`` on access.

    ``kind`` is ``"function"`` (JSON arguments) or ``"custom"``: a call of a custom
    (free-form) tool, whose ``input`` is the raw text the model wrote (a patch, a shell
    line), not JSON. ``input`` is that text for either kind (a function call's JSON
    arguments as written).
    """

    id: str
    name: str
    raw_arguments: str
    kind: Literal["function", "custom"] = "function"

    @property
    def input(self) -> str:
        """The text the model wrote for the call: a custom call's raw input, a function
        call's JSON arguments."""
        return self.raw_arguments

    @property
    def arguments(self) -> dict[str, Any]:
        """The arguments as a dict; raises :class:`ToolArgumentsError` on invalid JSON, and
        for a custom call (its input is raw text: read :attr:`input`)."""
        if self.kind == "custom":
            raise ToolArgumentsError(
                f"tool {self.name!r} is a custom tool: its input is raw text, not JSON "
                "arguments; read the call's .input",
                tool=self.name,
                arguments=self.raw_arguments,
            )
        text = self.raw_arguments.strip() or "{}"
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise ToolArgumentsError(
                f"the model called tool {self.name!r} with invalid JSON arguments "
                f"({exc}): {self.raw_arguments[:200]!r}",
                tool=self.name,
                arguments=self.raw_arguments,
            ) from None
        if not isinstance(value, dict):
            raise ToolArgumentsError(
                f"the model called tool {self.name!r} with arguments that are not a JSON "
                f"object: {self.raw_arguments[:200]!r}",
                tool=self.name,
                arguments=self.raw_arguments,
            )
        return value

    @classmethod
    def from_part(cls, part: ToolCallPart) -> ToolCall:
        """From the neutral tool call part."""
        return cls(part.id, part.name, part.arguments, part.kind)


@dataclass(slots=True)
class ChatResult:
    """One model answer. ``response`` is the neutral value; the rest are conveniences.

    ``think_tags=True`` makes ``.text`` start with ``<think>\\n{reasoning}\\n</think>\\n\\n``
    when there is reasoning (:func:`fold_reasoning`). ``parsed`` holds the structured
    output (a dict/list, or the pydantic model instance) when ``parse_json`` or
    ``response_format`` was requested. ``messages`` is the whole transcript for results
    of ``run_tools``, and ``turns`` each of its calls' own result, in order (the last
    being this answer); ``round_trips``, ``total_usage`` and ``total_latency`` add them
    up (for any other call: one round trip, its own usage and latency).

    ``ttft`` and ``latency`` are seconds from the moment the call began sending (the
    request built, images encoded; rate-limit waits and retries count) to the first token
    and to the whole answer. A stream's first token is its first text, reasoning or tool
    call; a plain call's answer arrives all at once, so its ``ttft`` is when the body had
    arrived, and ``latency`` adds the parsing.
    """

    response: Response
    raw: Any = None
    request_id: str | None = None
    think_tags: bool = False
    parsed: Any = None
    messages: tuple[Message, ...] = field(default=())
    ttft: float | None = None
    latency: float | None = None
    turns: tuple[ChatResult, ...] = field(default=(), repr=False, compare=False)

    @property
    def text(self) -> str:
        """The answer text, refusals apart (reasoning folded in as ``<think>`` when asked)."""
        text = "".join(
            p.text
            for p in self.response.parts
            if isinstance(p, TextPart) and not p.meta.get("refusal")
        )
        if self.think_tags:
            return fold_reasoning(self.response.reasoning, text)
        return text

    @property
    def refusal(self) -> str | None:
        """Why the model refused, or None when it did not.

        OpenAI's ``message.refusal`` (and the Responses API's ``refusal`` parts) hold the
        model's words, kept out of ``.text``. A refusal without words -- Anthropic's
        ``stop_reason: "refusal"``, OpenAI's ``content_filter`` -- is ``""``: refused,
        nothing said (whatever text came before the cut stays in ``.text``).
        """
        words = [
            p.text for p in self.response.parts if isinstance(p, TextPart) and p.meta.get("refusal")
        ]
        if words:
            return "".join(words)
        return "" if self.response.stop_reason is StopReason.REFUSAL else None

    @property
    def reasoning(self) -> str:
        """The model's reasoning text (empty when none was returned)."""
        return self.response.reasoning

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        """The tool calls the model made, in order."""
        return tuple(ToolCall.from_part(p) for p in self.response.tool_calls)

    @property
    def usage(self) -> Usage:
        """Normalized token counts."""
        return self.response.usage

    @property
    def stop_reason(self) -> StopReason:
        """Why generation stopped (neutral vocabulary: end_turn, max_tokens, tool_use…)."""
        return self.response.stop_reason

    @property
    def model(self) -> str:
        """The model name the server reported."""
        return self.response.model

    @property
    def id(self) -> str:
        """The response id the server reported."""
        return self.response.id

    @property
    def logprobs(self) -> tuple[TokenLogprob, ...] | None:
        """Each answer token's log probability (``token``, ``logprob``, ``bytes``,
        ``top_logprobs``) when the call asked for ``logprobs=True`` and the server
        returned them; None otherwise. Streamed calls gather them from every chunk."""
        found: list[TokenLogprob] | None = None
        for p in self.response.parts:
            if isinstance(p, TextPart) and p.logprobs is not None and not p.meta.get("refusal"):
                found = [*(found or ()), *p.logprobs]
        return None if found is None else tuple(found)

    @property
    def audio(self) -> Audio | None:
        """The spoken answer (``modalities=["text", "audio"]``): bytes, transcript, id,
        format, ``.save(path)``; None for a text-only answer."""
        for p in self.response.parts:
            if isinstance(p, AudioPart):
                return Audio.from_part(p)
        return None

    def json(self) -> Any:
        """The JSON object/array in ``.text`` (see :func:`extract_json`)."""
        return extract_json(self.response.text)

    @property
    def round_trips(self) -> int:
        """Calls made to the model for this answer: ``run_tools``' turns, else 1 (retries
        of one call are not round trips: ``client.retries`` counts those)."""
        return len(self.turns) or 1

    @property
    def total_usage(self) -> Usage:
        """Token counts summed over every call of a ``run_tools`` loop (``usage`` is the
        last call's own); for any other call, ``usage``."""
        if not self.turns:
            return self.usage
        return sum_usage(t.usage for t in self.turns)

    @property
    def total_latency(self) -> float | None:
        """Seconds spent waiting on the model, summed over every call of a ``run_tools``
        loop (the tools' own run time apart); for any other call, ``latency``."""
        if not self.turns:
            return self.latency
        known = [t.latency for t in self.turns if t.latency is not None]
        return sum(known) if known else None

    def __str__(self) -> str:
        return self.text


def sum_usage(usages: Iterable[Usage]) -> Usage:
    """Token counts added up, field by field (estimated when any of them was).

    >>> sum_usage([Usage(10, 2), Usage(5, 1, cache_read_tokens=4)]).input_tokens
    15
    """
    total = Usage()
    for u in usages:
        total = Usage(
            total.input_tokens + u.input_tokens,
            total.output_tokens + u.output_tokens,
            total.cache_read_tokens + u.cache_read_tokens,
            total.cache_write_tokens + u.cache_write_tokens,
            total.reasoning_tokens + u.reasoning_tokens,
            total.estimated or u.estimated,
        )
    return total


def validate_structured(text: str, model: Any) -> Any:
    """Extract JSON from ``text``; validate it into ``model`` (a pydantic class) if given."""
    value = extract_json(text)
    if model is None:
        return value
    try:
        return model.model_validate(value)
    except Exception as exc:  # pydantic.ValidationError, without importing pydantic
        raise StructuredOutputError(
            f"the answer's JSON does not match {model.__name__}: {exc}"
        ) from exc


def better_usage(response: Response, raw: Any) -> Response:
    """``response`` with usage read from ``raw`` when the codec found none (estimated)."""
    if not response.usage.estimated or not isinstance(raw, dict):
        return response
    usage = normalize_usage(raw)
    if usage.input_tokens or usage.output_tokens:
        return replace(response, usage=usage)
    return response
