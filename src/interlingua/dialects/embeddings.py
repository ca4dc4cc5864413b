"""The OpenAI Embeddings API (``POST /v1/embeddings``): its request checks, its answer,
and the two encodings of a vector. Pure: no I/O.

A request (the openai SDK's ``EmbeddingCreateParams``)::

    {"model": "m", "input": "text" | ["a", "b"] | [1, 2, 3] | [[1, 2], [3]],
     "encoding_format": "float" | "base64", "dimensions": 256, "user": "u"}

An answer (``CreateEmbeddingResponse``)::

    {"object": "list", "model": "m",
     "data": [{"object": "embedding", "index": 0, "embedding": [0.1, ...] | "<base64>"}],
     "usage": {"prompt_tokens": 3, "total_tokens": 3}}

``base64`` is the vector's little-endian float32 bytes, base64-encoded: what the openai
SDK asks for when its caller did not set ``encoding_format`` (it decodes the vectors
itself), and a quarter of the JSON floats' size. An upstream that answers in the other
encoding than the client asked is converted (:func:`converted`).

The API's limits, checked before any upstream is asked (:func:`check_request`): at most
:data:`MAX_INPUTS` inputs in one request; no empty string and no empty token list; at most
:data:`MAX_TOTAL_TOKENS` token ids summed over a request's token inputs. The per-input
token limit is the model's (8,192 for OpenAI's models): the upstream enforces it, by its
own tokenizer, and the embedded engine by its context size.
"""

from __future__ import annotations

import base64
import sys
from array import array
from collections.abc import Sequence
from typing import Any

import orjson

from ..errors import InvalidRequestError

__all__ = [
    "ENCODINGS",
    "MAX_INPUTS",
    "MAX_TOTAL_TOKENS",
    "Inputs",
    "check_request",
    "converted",
    "decode_vector",
    "encode_vector",
    "render_embeddings",
]

#: the API's bound on the inputs of one request ("any array must be 2048 dimensions or less")
MAX_INPUTS = 2048
#: the API's bound on the tokens summed over one request's inputs
MAX_TOTAL_TOKENS = 300_000
#: the encodings a client may ask for; ``float`` when it names none
ENCODINGS = ("float", "base64")

#: a request's inputs, normalized: every input a string, or every input a list of token ids
Inputs = list[str] | list[list[int]]


def _invalid(message: str, param: str) -> InvalidRequestError:
    return InvalidRequestError(message, param=param, code="invalid_value")


def check_request(body: dict[str, Any]) -> Inputs:
    """``body``'s inputs, one list (a single string or token list is a list of one),
    after the API's checks of ``input``, ``encoding_format``, ``dimensions`` and ``user``
    (a 400 naming the parameter otherwise; ``model`` is the gateway's to check)."""
    inputs = _inputs(body.get("input"))
    encoding = body.get("encoding_format")
    if encoding is not None and encoding not in ENCODINGS:
        raise _invalid(
            f"Invalid value for 'encoding_format': {encoding!r}. Supported values are: "
            "'float' and 'base64'.",
            "encoding_format",
        )
    dimensions = body.get("dimensions")
    if dimensions is not None and (type(dimensions) is not int or dimensions < 1):
        raise _invalid(
            f"Invalid value for 'dimensions': {dimensions!r}; expected a positive integer.",
            "dimensions",
        )
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise _invalid("Invalid type for 'user': expected a string.", "user")
    return inputs


def _inputs(value: Any) -> Inputs:
    if value is None:
        raise InvalidRequestError("Missing required parameter: 'input'.", param="input")
    if isinstance(value, str):
        if not value:
            raise _invalid("'input' cannot be an empty string.", "input")
        return [value]
    if not isinstance(value, list) or not value:
        raise _invalid(
            "Invalid value for 'input': expected a non-empty string, a non-empty array of "
            "strings, an array of token ids, or an array of arrays of token ids.",
            "input",
        )
    if len(value) > MAX_INPUTS:
        raise _invalid(
            f"'input' has {len(value)} items; at most {MAX_INPUTS} inputs are allowed in "
            "one request.",
            "input",
        )
    first = value[0]
    if type(first) is int:  # one input, as token ids
        return _token_inputs([value])
    if isinstance(first, str):
        for i, text in enumerate(value):
            if not isinstance(text, str):
                raise _invalid(f"Invalid type for 'input[{i}]': expected a string.", "input")
            if not text:
                raise _invalid(f"'input[{i}]' cannot be an empty string.", "input")
        return value
    return _token_inputs(value)


def _token_inputs(lists: list[Any]) -> list[list[int]]:
    total = 0
    for i, tokens in enumerate(lists):
        if not isinstance(tokens, list) or not tokens:
            raise _invalid(
                f"Invalid value for 'input[{i}]': expected a non-empty array of token ids.",
                "input",
            )
        for token in tokens:
            if type(token) is not int or token < 0:
                raise _invalid(
                    f"Invalid value for 'input[{i}]': token ids are non-negative integers.",
                    "input",
                )
        total += len(tokens)
    if total > MAX_TOTAL_TOKENS:
        raise _invalid(
            f"'input' holds {total} tokens; at most {MAX_TOTAL_TOKENS} tokens summed over "
            "all inputs are allowed in one request.",
            "input",
        )
    return lists


# --- vectors ------------------------------------------------------------------------------

_SWAP = sys.byteorder != "little"  # (the wire's float32 is little-endian)


def encode_vector(vector: Sequence[float]) -> str:
    """``vector`` as the API's base64: little-endian float32 bytes.

    >>> encode_vector([1.0, -2.0])
    'AACAPwAAAMA='
    """
    packed = array("f", vector)
    if _SWAP:
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


def decode_vector(text: str) -> list[float]:
    """The floats of a base64 vector (:func:`encode_vector`'s inverse).

    >>> decode_vector('AACAPwAAAMA=')
    [1.0, -2.0]
    """
    packed = array("f", base64.b64decode(text))
    if _SWAP:
        packed.byteswap()
    return packed.tolist()


def render_embeddings(
    vectors: Sequence[Sequence[float]], model: str, prompt_tokens: int, encoding: str
) -> dict[str, Any]:
    """The API's answer for ``vectors`` (in input order), in ``encoding``."""
    data = [
        {
            "object": "embedding",
            "index": i,
            "embedding": encode_vector(v) if encoding == "base64" else list(v),
        }
        for i, v in enumerate(vectors)
    ]
    usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}
    return {"object": "list", "data": data, "model": model, "usage": usage}


def _first_vector_kind(data: bytes) -> bytes:
    """The first byte of the first ``embedding`` value (``[``: floats, ``"``: base64; b""
    when there is none), found without parsing the answer."""
    at = data.find(b'"embedding"')
    while at >= 0:
        rest = data[at + 11 : at + 64].lstrip()
        if rest[:1] == b":":
            return rest[1:].lstrip()[:1]
        at = data.find(b'"embedding"', at + 11)  # (the word inside a string: look on)
    return b""


def converted(data: bytes, encoding: str) -> bytes | None:
    """An upstream's 2xx answer ``data`` with its vectors in ``encoding``, when they came
    in the other one (None: they are already as asked, relay ``data`` as it came).

    Servers that know only floats (many OpenAI-compatible ones ignore
    ``encoding_format``) still serve the openai SDK, which asks for base64 by default and
    would otherwise be handed floats where it expects a string, or the reverse."""
    kind = _first_vector_kind(data)
    if (kind == b"[" and encoding == "float") or (kind == b'"' and encoding == "base64"):
        return None
    if kind not in (b"[", b'"'):
        return None  # (no vector to convert: relayed for the client to judge)
    answer = orjson.loads(data)
    for item in answer.get("data") or ():
        vector = item.get("embedding") if isinstance(item, dict) else None
        if encoding == "base64" and isinstance(vector, list):
            item["embedding"] = encode_vector(vector)
        elif encoding == "float" and isinstance(vector, str):
            item["embedding"] = decode_vector(vector)
    return orjson.dumps(answer)
