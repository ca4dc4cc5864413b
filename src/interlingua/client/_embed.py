"""Embeddings through the client: one vector per text, in input order.

::

    with Client("http://127.0.0.1:8400/v1", model="embed") as client:
        vectors = client.embed(["first text", "second text"], dimensions=256)

The texts go to the server's OpenAI-style ``/embeddings`` (beside the client's generation
endpoint, with the same key and connections) ``batch_size`` at a time: one request
carries many inputs, which is how embedding servers reach their throughput. The batches
run through :mod:`._generate`'s engine (``concurrency`` in flight, the input read as
requests free up) and the client's :class:`~._policy.Policy` (rate-limit slots, retries),
so an ``embed`` shares its limiter with every other call of the client: a request counts
one against ``requests_per_minute`` and its inputs' estimated tokens against
``tokens_per_minute`` (settled with the usage the server reports).

Vectors are asked for as ``encoding_format: "base64"`` (little-endian float32, a quarter
of the bytes of JSON floats and no float parsing) and decoded; a server that ignores the
field and answers JSON floats is read as it is.

A batch that fails for good fails every text in it: each of those texts' places holds
the batch's :class:`~._generate.Failure` (with ``on_error="raise"``, its error is raised),
never a shorter or shifted list. An answer whose vectors do not match the inputs (count,
indices) is an :class:`~._errors.UnreadableAnswerError`, retried once like any
unreadable answer.
"""

from __future__ import annotations

import array
import binascii
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from typing import Any

import orjson

from ..core.tokens import estimate_text
from ._errors import UnreadableAnswerError
from ._generate import Batch, Failure, generate_list
from ._inputs import InputError
from ._policy import Policy
from ._transport import Transport, request_id

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "MAX_BATCH_SIZE",
    "Embedder",
    "Texts",
    "decode_vector",
    "embed_all",
    "embed_settings",
    "embeddings_url",
    "texts_for",
]

#: texts per request unless told: large enough that a request's overhead is shared,
#: small enough for servers with a low batch limit (Hugging Face TEI's default is 32... it
#: answers 413 past it; pass ``batch_size=32`` there)
DEFAULT_BATCH_SIZE = 128
#: the OpenAI API's limit on inputs in one embeddings request
MAX_BATCH_SIZE = 2048
#: how much of an unreadable body an error quotes
_QUOTE = 500
_FLOAT32 = "f"
_SWAP = sys.byteorder == "big"  # base64 vectors are little-endian float32

#: one input: a text, or a list of token ids (as the API takes them)
Text = str | list[int]


class Texts:
    """The texts in batches of ``size`` (lists), read as the batch engine takes them.

    ``sizes`` records each batch's length as it is read, so a failed batch can fill
    exactly its own texts' places. ``len()`` is the number of batches when the texts
    know their length (the progress bar's total).
    """

    __slots__ = ("size", "sizes", "texts")

    def __init__(self, texts: Iterable[Text], size: int) -> None:
        if isinstance(texts, str | bytes):
            raise TypeError("embed takes a list of texts; for one text: embed([text])[0]")
        if not 1 <= size <= MAX_BATCH_SIZE:
            raise ValueError(
                f"batch_size must be between 1 and {MAX_BATCH_SIZE} (the API's limit on "
                f"inputs per request), got {size}"
            )
        self.texts, self.size = texts, size
        self.sizes: list[int] = []

    def __iter__(self) -> Iterator[list[Text]]:
        batch: list[Text] = []
        for text in self.texts:
            batch.append(text)
            if len(batch) == self.size:
                self.sizes.append(len(batch))
                yield batch
                batch = []
        if batch:
            self.sizes.append(len(batch))
            yield batch


class SizedTexts(Texts):
    """:class:`Texts` over a sized input: the number of batches is known."""

    __slots__ = ()

    def __len__(self) -> int:
        return -(-len(self.texts) // self.size)  # type: ignore[arg-type]


def embed_settings(
    model: str | None,
    dimensions: int | None,
    encoding_format: str,
    user: str | None,
    extra_body: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The settings every batch of one ``embed`` sends (checked)."""
    if not model:
        raise ValueError("model is required: pass model=... to the call or to the client")
    if encoding_format not in ("base64", "float"):
        raise ValueError(f'encoding_format must be "base64" or "float", not {encoding_format!r}')
    return {
        "model": model, "dimensions": dimensions, "user": user,
        "encoding_format": encoding_format, "extra_body": extra_body,
    }  # fmt: skip


def embeddings_url(dialect: str, base_url: str, endpoint: str = "embeddings") -> str:
    """Where a client of ``dialect`` at ``base_url`` asks for embeddings (or another
    ``endpoint`` of the OpenAI API): beside its OpenAI-style generation endpoint. The
    Anthropic API has none of them."""
    if dialect == "anthropic":
        raise ValueError(
            f"/{endpoint} needs an OpenAI-compatible server: the Anthropic API has no "
            f'{endpoint} (use a client with dialect="openai" and a base URL ending in /v1)'
        )
    return f"{base_url}/{endpoint}"


def texts_for(texts: Iterable[Text], size: int) -> Texts:
    """The batches of ``texts`` (sized when the input is)."""
    return SizedTexts(texts, size) if isinstance(texts, Sized) else Texts(texts, size)


def decode_vector(value: Any) -> list[float]:
    """One ``embedding`` of an answer: base64 float32 decoded, a list of floats as it is."""
    if isinstance(value, str):
        values: array.array[float] = array.array(_FLOAT32)
        values.frombytes(binascii.a2b_base64(value))  # ValueError: not whole floats
        if _SWAP:
            values.byteswap()
        return values.tolist()
    if isinstance(value, list):
        return value
    raise ValueError(f"an embedding is a list of floats or a base64 string, not {value!r:.40}")


class Embedder:
    """A client's embeddings requests: the body, the URL, the estimate, the reading."""

    __slots__ = ("policy", "transport", "url")

    def __init__(self, transport: Transport, policy: Policy, dialect: str, base_url: str) -> None:
        self.transport, self.policy = transport, policy
        self.url = embeddings_url(dialect, base_url)

    def body(self, texts: list[Text], model: str, settings: Mapping[str, Any]) -> bytes:
        """The request body: ``settings`` are ``dimensions``, ``encoding_format``,
        ``user`` (None: left out) and ``extra_body`` (added as it is)."""
        for text in texts:
            if not (isinstance(text, str) and text) and not _token_ids(text):
                raise InputError(
                    f"cannot embed {text!r:.60}: an input is a non-empty string or a "
                    "non-empty list of token ids"
                )
        body: dict[str, Any] = {"model": model, "input": texts}
        for key in ("encoding_format", "dimensions", "user"):
            if settings.get(key) is not None:
                body[key] = settings[key]
        body.update(settings.get("extra_body") or {})
        return orjson.dumps(body)

    async def call(self, texts: list[Text], **settings: Any) -> list[list[float]]:
        """The vectors of one batch, in its order (retried and rate-limited as a call);
        ``settings``: ``model`` and :meth:`body`'s."""
        data = self.body(texts, settings["model"], settings)
        policy, transport, url = self.policy, self.transport, self.url
        estimate = 0
        if policy.limiter.limits.tokens_per_minute is not None:
            estimate = sum(estimate_text(t) if isinstance(t, str) else len(t) for t in texts)

        async def attempt() -> list[list[float]]:
            async with policy.slot(estimate) as slot:
                raw, headers = await transport.post_to(url, data)
                vectors, used = read_vectors(raw, len(texts), url, request_id(headers))
                slot.settle(estimate if used is None else used)
            return vectors

        return await policy.retrying(attempt, "embeddings")


def _token_ids(text: Any) -> bool:
    return isinstance(text, list) and bool(text) and all(type(t) is int for t in text)


def read_vectors(
    raw: bytes, count: int, url: str, rid: str | None
) -> tuple[list[list[float]], int | None]:
    """(the ``count`` vectors in input order, the tokens the server counted) of an
    embeddings answer, or :class:`UnreadableAnswerError` (retried once)."""
    try:
        body = orjson.loads(raw)
        items = body["data"]
        if len(items) != count:
            raise ValueError(f"{len(items)} embeddings for {count} inputs")
        vectors = _in_order(items, decode_vector)
        usage = body.get("usage") or {}
        used = usage.get("total_tokens", usage.get("prompt_tokens"))
    except Exception as exc:  # orjson's, a missing key, a malformed shape
        raise UnreadableAnswerError(
            f"{url} answered 2xx with a body that is not the embeddings asked for: {exc}",
            retry=True,
            body=raw[:_QUOTE].decode("utf-8", "replace"),
            request_id=rid,
            kind="invalid_response",
        ) from exc
    return vectors, used if isinstance(used, int) else None


def _in_order(items: list[Any], decode: Callable[[Any], list[float]]) -> list[list[float]]:
    """The decoded vectors placed by their ``index`` (servers may answer out of order;
    one without indices is taken in order), each input once."""
    vectors: list[Any] = [None] * len(items)
    for position, item in enumerate(items):
        index = item.get("index", position)
        if not (type(index) is int and 0 <= index < len(items)) or vectors[index] is not None:
            raise ValueError(f"embedding index {index!r} is out of range or repeated")
        vectors[index] = decode(item["embedding"])
    return vectors


async def embed_all(
    embedder: Embedder,
    inputs: Iterable[Text],
    batch_size: int,
    settings: Mapping[str, Any],
    width: int,
    progress: bool = False,
    raise_first: bool = False,
) -> list[list[float] | Failure]:
    """Every text's vector (or its batch's :class:`Failure`) in input order: the batches
    through :func:`~._generate.generate_list`, ``width`` requests in flight."""
    texts = texts_for(inputs, batch_size)
    batch: Batch[list[list[float]]] = Batch(
        embedder.call, texts, settings, width, frozenset(), progress, raise_first,
        retries=lambda: embedder.policy.retries, unit="batch", label="embed",
    )  # fmt: skip
    out: list[list[float] | Failure] = []
    results = await generate_list(batch)
    for size, result in zip(texts.sizes, results, strict=True):
        if isinstance(result, Failure):
            out.extend([result] * size)  # each text of the batch keeps its place
        else:
            out.extend(result)
    return out
