"""Helpers shared by the dialect codecs (pure functions, no dialect knowledge)."""

from __future__ import annotations

import hashlib
import os
import re
import string
from collections.abc import Callable, Mapping
from typing import Any, TypeGuard

import orjson

from ..core import AudioPart, TextPart
from ..core.tokens import estimate_text as estimate_tokens  # noqa: F401 - re-exported for codecs
from ..errors import InvalidRequestError, MalformedToolCallError

_TOOL_ID_OK = re.compile(r"^[a-zA-Z0-9_-]+$")
_TOOL_ID_BAD_CHARS = re.compile(r"[^a-zA-Z0-9_-]")
_DATA_URI = re.compile(r"^data:([^;,]+)((?:;[^;,]*)*);base64,(.*)$", re.DOTALL)
_ALPHABET = string.ascii_letters + string.digits
# Random bytes -> id characters in one C call (``secrets.choice`` per character cost
# ~85 µs per id, on every translated answer). ``b % 62`` favours the first 8 characters
# by 5/256 against 4/256: about 5.95 bits per character instead of 5.954, immaterial
# for ids that are opaque and never the only secret.
_ID_CHARS = "".join(_ALPHABET[b % len(_ALPHABET)] for b in range(256)).encode("ascii")

SOURCE_INDEX = "source_index"
"""``Message.meta`` key: the index, in the client's own ``messages`` array, of the (first)
client message a neutral message came from. Set by parsers whose neutral messages do not
map one-to-one to the client's (OpenAI ``tool`` messages merge); renderers name that index
in a 400's ``param`` and fall back to the neutral index when it is absent."""
SOURCE_PARAM = "source_param"
"""Tool-call part ``meta`` key: the client's ``param`` for the call's arguments
(``messages[3].tool_calls[1].function.arguments``), for the same purpose."""


def sanitize_tool_id(tool_id: str) -> str:
    """Make a tool call id match ``^[a-zA-Z0-9_-]+$`` (Anthropic's rule), deterministically.

    Ids that already match are returned unchanged. Others (``functions.Bash:0`` from some
    backends) have bad characters replaced by ``_`` plus a short hash of the original, so
    two ids that differ only in bad characters stay distinct, and the same input always
    maps to the same output -- which is what keeps a call and its result paired when both
    pass through here separately.
    """
    if tool_id and _TOOL_ID_OK.match(tool_id):
        return tool_id
    digest = hashlib.sha1(tool_id.encode("utf-8")).hexdigest()[:8]
    return f"{_TOOL_ID_BAD_CHARS.sub('_', tool_id)}_{digest}"


def parse_data_uri(uri: str) -> tuple[str, str] | None:
    """``data:<media_type>[;params];base64,<data>`` -> (media_type, data), else None.

    The media type comes back lower-cased: MIME types are case-insensitive (RFC 2045
    §5.1), and ``data:image/PNG;base64,...`` must not fail a renderer's allow-list.

    >>> parse_data_uri("data:image/PNG;base64,iVBO")
    ('image/png', 'iVBO')
    """
    m = _DATA_URI.match(uri)
    if m is None:
        return None
    return m.group(1).lower(), m.group(3)


def random_id(prefix: str, length: int = 24) -> str:
    """A fresh id like ``msg_01AbC...`` (vendor ids are opaque; only the prefix matters)."""
    return prefix + os.urandom(length).translate(_ID_CHARS).decode("ascii")


def expect_type(value: Any, kind: type | tuple[type, ...], param: str, what: str) -> Any:
    """Return ``value`` if it is an instance of ``kind``, else raise a 400 naming ``param``.

    ``bool`` is rejected where ``int``/``float`` is expected (JSON ``true`` is not a number).
    """
    if isinstance(value, kind) and not (isinstance(value, bool) and bool not in _as_tuple(kind)):
        return value
    raise InvalidRequestError(
        f"Invalid type for '{param}': expected {what}, but got {_json_type(value)}.",
        param=param,
        code="invalid_type",
    )


def optional(body: dict[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    """An optional field of ``body``: None when absent or null, else type-checked."""
    value = body.get(key)
    return None if value is None else expect_type(value, kind, key, what)


def _as_tuple(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def call_name(value: Any, where: str, call_id: object = None) -> str:
    """An upstream's tool call's name; :class:`MalformedToolCallError` when it has none
    (nothing could answer a call to no tool)."""
    if isinstance(value, str) and value:
        return value
    problem = "no name" if value is None or value == "" else f"a name that is {_json_type(value)}"
    raise MalformedToolCallError(problem, where, call_id)


def call_arguments(
    value: Any, where: str, call_id: object = None, field: str = "arguments", text: bool = False
) -> str:
    """An upstream's tool call's ``field`` (its arguments, a custom call's ``input``) as
    text: a string as it came, nothing (absent, null) as ``""``, an object as its JSON (a
    few servers send one) unless ``text`` (a custom call's input is raw text); anything
    else is a :class:`MalformedToolCallError`."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, dict) and not text:
        return orjson.dumps(value).decode()
    wanted = "a string" if text else "a string or an object"
    raise MalformedToolCallError(f"{field} is {_json_type(value)}, not {wanted}", where, call_id)


def call_input(value: Any, where: str, call_id: object = None) -> dict[str, Any]:
    """An upstream's Anthropic ``tool_use`` input: an object (absent: ``{}``); anything
    else is a :class:`MalformedToolCallError`."""
    if isinstance(value, dict):
        return value
    if value is None:
        return {}
    raise MalformedToolCallError(f"input is {_json_type(value)}, not an object", where, call_id)


def ask_stream(body: dict[str, Any], stream: bool) -> bool:
    """``body`` asking for a stream of events or for one whole answer, in place, said
    either way with ``stream``; a whole answer without ``stream_options``, which the APIs
    that have it take only with ``stream: true``. What :class:`~.base.Dialect` asks of
    ``ask_stream`` where the usage needs no asking (Messages and Responses streams always
    report it): False, nothing was asked for the gateway."""
    body["stream"] = stream
    if not stream:
        body.pop("stream_options", None)
    return False


def drop_stream(body: dict[str, Any]) -> None:
    """``body`` without ``stream`` and ``stream_options`` (in place): one whole answer, the
    API's default, said by leaving the fields out. (Messages has no ``stream_options``; a
    body that carries one anyway meant it for a stream too.)"""
    body.pop("stream", None)
    body.pop("stream_options", None)


def missing(param: str) -> InvalidRequestError:
    """The error for a required field that is absent."""
    return InvalidRequestError(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )


def encode_body(body: Any, param: str | None = None) -> bytes:
    """``orjson.dumps(body)``, or a 400 when it cannot be written back.

    orjson reads JSON nested up to 1,024 levels but writes at most 254, so a body it
    decoded may still fail to encode (a tool schema 300 levels deep): that is the
    client's body being unreasonable, not a gateway failure. Call it before a body is
    converted or re-serialized; it costs about 0.2 µs per KB. ``param`` names the field
    when ``body`` is one value inside a request (a tool call's arguments).
    """
    try:
        return orjson.dumps(body)
    except TypeError:  # orjson.JSONEncodeError; from a decoded body only depth can fail
        where = "Request body" if param is None else f"'{param}'"
        raise InvalidRequestError(
            f"{where} is nested too deeply (at most 254 levels).",
            param=param,
            code="too_deeply_nested",
        ) from None


def opt_str(v: Any) -> bool:
    """Absent (None) or a string: the passthrough validators' commonest check."""
    return v is None or type(v) is str


def top_level_ok(
    body: dict[str, Any],
    scalars: Mapping[str, tuple[type, ...]],
    checks: Mapping[str, Callable[[Any], bool]],
) -> bool:
    """Whether every top-level value of ``body`` has an allowed exact type (``scalars``)
    or passes its check (``checks``); unknown keys and nulls pass. For the passthrough
    validators' allocation-free walk (``dialects/*/validate.py``)."""
    for key, value in body.items():
        if value is None:
            continue  # null means absent to the parsers
        kinds = scalars.get(key)
        if kinds is not None:
            if type(value) not in kinds:
                return False
            continue
        check = checks.get(key)
        if check is not None and not check(value):
            return False
    return True


#: a neutral Request's settings that some APIs have no field for, by the parameter name
#: a refusal names (audio output is asked for with ``modalities``)
_SETTINGS: dict[str, Callable[[Any], object]] = {
    "logprobs": lambda r: r.logprobs or None,
    "top_logprobs": lambda r: r.top_logprobs,
    "top_k": lambda r: r.top_k,
    "min_p": lambda r: r.min_p,
    "repetition_penalty": lambda r: r.repetition_penalty,
    "modalities": lambda r: r.output_audio,
}


def refuse_unsupported(request: Any, params: tuple[str, ...], api: str) -> None:
    """InvalidRequestError naming the first of ``params`` that ``request`` sets: settings
    a caller asked for by name that ``api`` has no field for would not be honoured, so
    they are refused, not dropped (a model's ``drop_params`` clears them first when they
    should be dropped instead)."""
    for param in params:
        if _SETTINGS[param](request) is not None:
            what = "audio output" if param == "modalities" else f"'{param}'"
            raise InvalidRequestError(
                f"{what} is not supported by the upstream API ({api})", param=param
            )


def spoken_answer(part: object) -> TypeGuard[AudioPart]:
    """Whether ``part`` is an assistant's earlier spoken answer (an ``AudioPart`` with the
    id OpenAI Chat quotes it by, or its transcript), not audio input."""
    return isinstance(part, AudioPart) and bool(part.id or part.transcript)


def spoken_answer_text(part: AudioPart, param: str, api: str) -> TextPart:
    """An earlier spoken answer toward an API that cannot quote OpenAI's stored audio by
    its id: what was said, its transcript, as text. Without a transcript the turn would
    lose what it said, so it is refused (400 naming it) rather than dropped."""
    if part.transcript:
        return TextPart(part.transcript)
    raise InvalidRequestError(
        f"{param}: an earlier spoken answer (audio id {part.id!r}) cannot be sent to the "
        f"{api} API, which cannot refer to stored audio by its id; give the message's audio "
        "'transcript' to send what was said as text",
        param=param,
    )
