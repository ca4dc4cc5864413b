"""Prompt forms -> neutral messages; images from anywhere -> inline ``ImagePart`` values.

Accepted prompts (:meth:`Inputs.messages`):

* ``"text"`` -- one user message;
* a list of content items -- one user message: strings are text; ``pathlib.Path``,
  ``bytes``, PIL images are images; BaseAPI's ``{"type": "text"|"image"|"system",
  "value": ...}`` items (an image ``value`` may be a list; ``system`` items' text, after
  ``system=``, makes the system message); OpenAI ``image_url`` parts and Anthropic image
  blocks too;
* audio items -- ``{"type": "audio", "value": path | bytes | data: URI, "format"?}``,
  OpenAI ``input_audio`` parts, and in a list a ``Path`` ending in ``.wav``/``.mp3`` or
  WAV/MP3 ``bytes`` (:mod:`._audio`);
* full messages -- a list of :class:`~interlingua.core.Message` values and/or dicts
  ``{"role", "content", ...}`` (OpenAI shape, including ``tool_calls``, an assistant's
  ``audio: {"id"}`` and ``role: tool``), whose ``content`` may use every item form above
  but ``system``.

A plain string inside a prompt is *text*, never a file name: a prompt that happens to
equal a path must not read the disk. Give images as ``Path(...)``, as ``{"type": "image",
"value": "photo.jpg"}`` or through ``images=[...]`` (paths, ``data:`` URIs, URLs), or opt
in with ``paths_as_images=True`` (BaseAPI's ``parse_file``): every plain string item that
names an existing file whose first bytes are an image is that image.

Images become base64 ``data:`` URIs whose MIME type is read from the content's magic
bytes (a PNG named ``x.jpg`` is sent as ``image/png``; servers reject a mismatch). URLs
are fetched and inlined too (``inline_urls=False`` sends them as URLs), so servers that
cannot fetch (llama.cpp, most local engines) still see the image. Encoding runs in a
thread pool (``asyncio.to_thread``) so hundreds of concurrent requests do not stall the
event loop on base64, and a per-client cache (LRU, bounded in bytes) keyed by file
path + mtime + size, by PIL object identity, or by a hash of the bytes makes the same
image used in many requests cost one encoding; concurrent requests for the same image
wait for the one encoding in progress. ``max_side`` downscales larger images with Pillow
(an optional dependency: ``pip install 'interlingua[images]'``).
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Awaitable, Callable, Hashable, Iterable
from typing import Any

import orjson

from ..core import AudioPart, ImagePart, Message, Part, TextPart, ToolCallPart, ToolResultPart
from ..dialects import parse_data_uri
from ._audio import audio_part, input_audio_dict, looks_like_audio
from ._images import (
    DEFAULT_IMAGE_CACHE_BYTES,
    HASH_IN_THREAD,
    ImageCache,
    InputError,
    b64decode_uri,
    detect_image_type,
    encode_image,
    image_digest,
    is_pil_image,
    read_file,
)

__all__ = [
    "DEFAULT_IMAGE_CACHE_BYTES",
    "InputError",
    "Inputs",
    "detect_image_type",
    "encode_image",
]

_IMAGE_DICT_TYPES = frozenset({"image", "image_url", "input_image"})

Fetch = Callable[[str], Awaitable[bytes]]


class Inputs:
    """Prompt and image conversion for one client (owns the image cache).

    ``fetch`` downloads a URL (the client passes one bound to its HTTP session).
    """

    def __init__(
        self,
        *,
        max_side: int | None = None,
        cache_bytes: int = DEFAULT_IMAGE_CACHE_BYTES,
        fetch: Fetch | None = None,
        inline_urls: bool = True,
    ) -> None:
        if max_side is not None and max_side < 1:
            raise ValueError(f"max_image_side must be a positive integer, got {max_side!r}")
        self.max_side = max_side
        self.fetch = fetch
        self.inline_urls = inline_urls
        self.cache = ImageCache(cache_bytes)

    # --- images ---

    async def image(self, value: Any, detail: str | None = None) -> ImagePart:
        """Any accepted image source -> an inline ImagePart (or a URL one, see module doc)."""
        part = await self._image(value)
        if detail is not None:
            return ImagePart(part.media_type, part.data, part.url, detail, part.meta)
        return part

    async def _image(self, value: Any) -> ImagePart:
        if isinstance(value, ImagePart):
            return value
        if isinstance(value, str):
            if value.startswith("data:"):
                return await self._data_uri(value)
            if value.startswith(("http://", "https://")):
                return await self._url(value)
            return await self._file(value)
        if isinstance(value, os.PathLike):
            return await self._file(os.fspath(value))
        if isinstance(value, bytes | bytearray | memoryview):
            return await self._bytes(bytes(value))
        if is_pil_image(value):
            return await self._pil(value)
        raise InputError(
            f"cannot use a {type(value).__name__} as an image; give a file path, pathlib.Path, "
            "bytes, a PIL image, a data: URI or an http(s) URL"
        )

    async def _encode(self, key: Hashable, load: Callable[[], Any], what: str) -> ImagePart:
        max_side = self.max_side

        async def make() -> ImagePart:
            # Looked up at call time so tests can count encodings by patching the module.
            return await asyncio.to_thread(encode_image, load, what, max_side)

        return await self.cache.get_or_make(key, make)

    async def _file(self, path: str) -> ImagePart:
        try:
            st = os.stat(path)
        except OSError as exc:
            raise InputError(f"cannot read image file {path!r}: {exc.strerror or exc}") from None
        real = os.path.realpath(path)
        key = ("file", real, st.st_mtime_ns, st.st_size)
        return await self._encode(key, lambda: read_file(real), f"image file {path!r}")

    async def _bytes(self, data: bytes) -> ImagePart:
        if len(data) > HASH_IN_THREAD:
            digest = await asyncio.to_thread(image_digest, data)
        else:
            digest = image_digest(data)
        return await self._encode(("bytes", digest), lambda: data, "image bytes")

    async def _pil(self, img: Any) -> ImagePart:
        key: Hashable = ("pil", id(img))
        if self.cache.get(key) is None:
            # id() is only unique while the object lives: drop the entry when it dies.
            try:
                weakref.finalize(img, self.cache.forget, key)
            except TypeError:
                key = ("pil-nocache", id(img), object())
        return await self._encode(key, lambda: img, "PIL image")

    async def _data_uri(self, uri: str) -> ImagePart:
        parsed = parse_data_uri(uri)
        if parsed is None:
            raise InputError(f"not a base64 data: URI: {uri[:40]!r}...")
        declared, payload = parsed
        if self.max_side is not None:
            data = b64decode_uri(payload, uri)
            return await self._bytes(data)
        # Only the first bytes are needed to check the type: no full decode.
        head = b64decode_uri(payload[:24], uri)
        mime = detect_image_type(head) or declared
        return ImagePart(media_type=mime, data=payload)

    async def _url(self, url: str) -> ImagePart:
        if not self.inline_urls or self.fetch is None:
            return ImagePart(url=url)
        fetch = self.fetch

        async def make() -> ImagePart:
            data = await fetch(url)
            return await asyncio.to_thread(
                encode_image, lambda: data, f"image {url}", self.max_side
            )

        return await self.cache.get_or_make(("url", url), make)

    # --- prompts ---

    async def messages(
        self,
        prompt: Any,
        *,
        system: str | None = None,
        images: Iterable[Any] | None = None,
        paths_as_images: bool = False,
    ) -> tuple[Message, ...]:
        """Any accepted prompt form (+ ``system``, extra ``images``) -> messages."""
        reader = _Reader(self, paths_as_images)
        if type(prompt) is str and not paths_as_images:  # the common case, without a coroutine
            out = [Message("user", (TextPart(prompt),))]
        elif _is_message_list(prompt):
            out = []
            for i, m in enumerate(prompt):
                plain = None if paths_as_images else _plain_message(m)
                out.append(plain or await reader.message(m, f"messages[{i}]"))
        elif isinstance(prompt, Message | dict) and _is_message(prompt):
            out = [await reader.message(prompt, "messages[0]")]
        else:
            items = prompt if isinstance(prompt, list | tuple) else [prompt]
            parts = await reader.parts(items, "prompt", top=True)
            if not parts:
                raise InputError("the prompt holds no text or image, only system items")
            out = [Message("user", tuple(parts))]
        if images is not None:
            extra = [await self.image(img) for img in images]
            out = _with_images(out, extra)
        if system is not None or reader.system:
            head = [TextPart(system)] if system is not None else []
            out.insert(0, Message("system", (*head, *reader.system)))
        if not out:
            raise InputError("the prompt is empty: give a string, content items or messages")
        return tuple(out)


class _Reader:
    """One prompt's conversion: its options and the system items it collected."""

    __slots__ = ("inputs", "paths_as_images", "system")

    def __init__(self, inputs: Inputs, paths_as_images: bool) -> None:
        self.inputs = inputs
        self.paths_as_images = paths_as_images
        self.system: list[TextPart] = []  # the prompt list's system items, in order

    async def parts(self, items: Iterable[Any], where: str, *, top: bool = False) -> list[Part]:
        """Content items -> parts; ``top``: the prompt list itself (system items allowed)."""
        parts: list[Part] = []
        for i, item in enumerate(items):
            at = f"{where}[{i}]"
            if isinstance(item, dict) and item.get("type") == "system":
                self.system.append(_system_item(item, at, top))
            elif isinstance(item, dict):
                parts.extend(await self._dict_parts(item, at))
            else:
                parts.append(await self._part(item, at))
        return parts

    async def _part(self, item: Any, where: str) -> Part:
        if isinstance(item, str):
            if self.paths_as_images and _names_image_file(item):
                return await self.inputs.image(item)
            return TextPart(item)
        if isinstance(item, TextPart | ImagePart | AudioPart | ToolCallPart | ToolResultPart):
            return item
        if looks_like_audio(item):
            return await _audio(item, None, where)
        try:
            return await self.inputs.image(item)
        except InputError as exc:
            raise InputError(f"{where}: {exc}") from None

    async def _dict_parts(self, item: dict[str, Any], where: str) -> list[Part]:
        kind = item.get("type")
        if kind in ("text", "input_text"):
            text = item.get("text", item.get("value"))
            if not isinstance(text, str):
                raise InputError(f"{where}: a text item needs a string 'text' or 'value'")
            return [TextPart(text)]
        if kind in _IMAGE_DICT_TYPES:
            value, detail = _image_value(item)
            if value is None:
                raise InputError(f"{where}: an image item needs 'value', 'image_url' or 'source'")
            # BaseAPI's form: one image item may hold a list of images.
            values = value if isinstance(value, list | tuple) else [value]
            out: list[Part] = []
            for j, one in enumerate(values):
                try:
                    out.append(await self.inputs.image(one, detail))
                except InputError as exc:
                    at = f"{where}.value[{j}]" if values is value else where
                    raise InputError(f"{at}: {exc}") from None
            return out
        if kind == "audio":
            value = item.get("value", item.get("path", item.get("data")))
            fmt = item.get("format")
            return [await _audio(value, fmt if isinstance(fmt, str) else None, where)]
        if kind == "input_audio":
            try:
                return [input_audio_dict(item)]
            except ValueError as exc:
                raise InputError(f"{where}: {exc}") from None
        raise InputError(
            f"{where}: unknown content item type {kind!r}; use 'text', 'image', 'audio' or "
            "'system' (or OpenAI 'image_url' / 'input_audio' parts, Anthropic 'image' blocks)"
        )

    async def message(self, m: Any, where: str) -> Message:
        if isinstance(m, Message):
            return m
        role = m.get("role")
        content = m.get("content")
        name = m.get("name") if isinstance(m.get("name"), str) else None
        if role == "tool":
            result = ToolResultPart(
                tool_call_id=str(m.get("tool_call_id") or ""),
                content=(TextPart(_as_text(content)),),
                is_error=bool(m.get("is_error", False)),
            )
            return Message("user", (result,))
        if role not in ("system", "developer", "user", "assistant"):
            raise InputError(f"{where}.role: unknown role {role!r}")
        items = [] if content is None else [content] if isinstance(content, str) else content
        parts = await self.parts(items, f"{where}.content")
        if role == "assistant":
            parts.extend(_spoken_answer(m.get("audio"), where))
            parts.extend(_tool_calls(m.get("tool_calls"), where))
        if role == "developer":
            return Message("system", tuple(parts), name, meta={"role": "developer"})
        return Message(role, tuple(parts), name)


async def _audio(value: Any, fmt: str | None, where: str) -> AudioPart:
    if value is None:
        raise InputError(f"{where}: an audio item needs 'value' (a path, bytes or data: URI)")
    try:
        return await audio_part(value, fmt)
    except ValueError as exc:
        raise InputError(f"{where}: {exc}") from None


_PLAIN_ROLES = frozenset({"system", "user", "assistant"})
_PATH_MAX = 4096


def _plain_message(m: Any) -> Message | None:
    """A ``{role, content: str}`` dict read at once (most of a batch's prompts); None:
    it needs :meth:`_Reader.message`."""
    if isinstance(m, Message):
        return m
    if len(m) != 2:
        return None
    role, content = m.get("role"), m.get("content")
    if role not in _PLAIN_ROLES or type(content) is not str:
        return None
    return Message(role, (TextPart(content),))


def _system_item(item: dict[str, Any], where: str, top: bool) -> TextPart:
    if not top:
        raise InputError(
            f"{where}: a system item belongs in a prompt list, not in a message's content "
            '(use a {"role": "system"} message)'
        )
    value = item.get("value", item.get("text"))
    if not isinstance(value, str):
        raise InputError(f"{where}: a system item needs a string 'value'")
    return TextPart(value)


def _names_image_file(text: str) -> bool:
    """Whether ``text`` is the name of an existing file holding an image (by its bytes)."""
    if not text or len(text) > _PATH_MAX or "\n" in text or "\x00" in text:
        return False
    if not os.path.isfile(text):  # (a FIFO or a device would block the read below)
        return False
    try:
        with open(text, "rb") as f:
            head = f.read(64)
    except OSError:  # not a file, a directory, unreadable: text it is
        return False
    return detect_image_type(head) is not None


def _is_message(value: Any) -> bool:
    return isinstance(value, Message) or (isinstance(value, dict) and "role" in value)


def _is_message_list(value: Any) -> bool:
    return isinstance(value, list | tuple) and bool(value) and all(_is_message(v) for v in value)


def _image_value(item: dict[str, Any]) -> tuple[Any, str | None]:
    """(source, detail) of an image dict in any of the accepted shapes."""
    detail = item.get("detail")
    for key in ("value", "path", "url", "data"):
        if item.get(key) is not None:
            return item[key], detail
    spec = item.get("image_url")
    if isinstance(spec, dict):
        return spec.get("url"), spec.get("detail", detail)
    if isinstance(spec, str):
        return spec, detail
    source = item.get("source")
    if isinstance(source, dict):  # Anthropic: base64 or url source
        if source.get("type") == "base64":
            media = source.get("media_type", "application/octet-stream")
            return f"data:{media};base64,{source.get('data', '')}", detail
        return source.get("url"), detail
    return None, detail


def _as_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(c.get("text", "") if isinstance(c, dict) else str(c) for c in content)
    return orjson.dumps(content, default=str).decode()


def _tool_calls(raw: Any, where: str) -> list[Part]:
    """OpenAI ``tool_calls`` of an assistant message dict -> ToolCallParts: function calls
    and custom calls (``{"type": "custom", "custom": {"name", "input"}}``, raw text)."""
    calls: list[Part] = []
    for i, call in enumerate(raw or ()):
        custom = isinstance(call, dict) and call.get("type") == "custom"
        fn = call.get("custom" if custom else "function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise InputError(
                f"{where}.tool_calls[{i}]: expected {{'function': {{'name': ...}}}} "
                "(or {'type': 'custom', 'custom': {'name': ..., 'input': ...}})"
            )
        args = fn.get("input" if custom else "arguments", "")
        if not isinstance(args, str):
            args = orjson.dumps(args).decode()
        call_id = str(call.get("id") or f"call_{i}")
        calls.append(
            ToolCallPart(call_id, fn["name"], args, kind="custom" if custom else "function")
        )
    return calls


def _spoken_answer(raw: Any, where: str) -> list[Part]:
    """An assistant message's ``audio`` -> an AudioPart quoting an earlier spoken answer.

    OpenAI Chat takes ``{"id": ...}`` and finds the audio it stored; the SDK's whole
    ``message.audio`` (``data``, ``transcript``, ``expires_at`` too) is accepted, its
    transcript kept for a dialect that cannot quote the id (it sends what was said as
    text) and its bytes left out (only the id goes on the wire)."""
    if raw is None:
        return []
    audio_id = raw.get("id") if isinstance(raw, dict) else None
    if not isinstance(audio_id, str) or not audio_id:
        raise InputError(
            f"{where}.audio: expected {{'id': ...}}, the id of an earlier spoken answer"
        )
    transcript, expires = raw.get("transcript"), raw.get("expires_at")
    return [
        AudioPart(
            transcript=transcript if isinstance(transcript, str) else "",
            id=audio_id,
            expires_at=expires if type(expires) is int else None,
        )
    ]


def _with_images(messages: list[Message], images: list[ImagePart]) -> list[Message]:
    """``images`` put at the start of the last user message (one is added if none)."""
    if not images:
        return messages
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "user":
            # Before the text: vision models read "image, then question" best.
            messages[i] = Message("user", (*images, *m.parts), m.name, m.meta)
            return messages
    messages.append(Message("user", tuple(images)))
    return messages
