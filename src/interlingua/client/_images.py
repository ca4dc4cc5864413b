"""Images from anywhere -> inline ``ImagePart`` values: the MIME type read from the
content's magic bytes, optional downscaling with Pillow, and a per-client cache (LRU,
bounded in bytes) so one image used in many requests costs one encoding (see
:mod:`._inputs`, which reads prompts and calls these)."""

from __future__ import annotations

import asyncio
import base64
import binascii
import ctypes
import hashlib
import io
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from ..core import ImagePart

__all__ = [
    "DEFAULT_IMAGE_CACHE_BYTES",
    "HASH_IN_THREAD",
    "ImageCache",
    "InputError",
    "b64decode_uri",
    "detect_image_type",
    "encode_image",
    "image_digest",
    "is_pil_image",
    "read_file",
    "release_memory",
]

DEFAULT_IMAGE_CACHE_BYTES = 64 * 1024 * 1024
"""Encoded images kept for reuse per client (base64 bytes; least recently used go first)."""
HASH_IN_THREAD = 256 * 1024  # hashing bigger byte strings moves off the event loop


class InputError(ValueError):
    """A prompt or image the client cannot turn into a request (the message says why)."""


# --- content sniffing -----------------------------------------------------------------


def detect_image_type(data: bytes) -> str | None:
    """The MIME type from an image's first bytes, or None when not recognised.

    >>> detect_image_type(b"\\x89PNG\\r\\n\\x1a\\n...")
    'image/png'
    """
    head = bytes(data[:32])
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head.startswith(b"BM"):
        return "image/bmp"
    if head.startswith((b"II*\x00", b"MM\x00*")):
        return "image/tiff"
    if head.startswith(b"\x00\x00\x01\x00"):
        return "image/x-icon"
    if head[4:8] == b"ftyp":
        brand = head[8:12]
        if brand in (b"avif", b"avis"):
            return "image/avif"
        if brand in (b"heic", b"heix", b"hevc", b"heim", b"heis", b"mif1", b"msf1"):
            return "image/heic"
    stripped = head.lstrip()
    if stripped.startswith(b"<svg") or (stripped.startswith(b"<?xml") and b"<svg" in data[:1024]):
        return "image/svg+xml"
    return None


def _require_type(data: bytes, what: str) -> str:
    mime = detect_image_type(data)
    if mime is None:
        raise InputError(
            f"{what} is not an image this client recognises (first bytes {bytes(data[:8])!r}); "
            "supported: PNG, JPEG, GIF, WEBP, BMP, TIFF, ICO, AVIF, HEIC, SVG"
        )
    return mime


# --- encoding (runs in a worker thread) -------------------------------------------------


def _pillow() -> Any:
    try:
        from PIL import Image
    except ImportError:
        raise InputError(
            "this needs Pillow (downscaling with max_image_side, or PIL image inputs): "
            "pip install 'interlingua[images]'"
        ) from None
    return Image


def _downscale(data: bytes, mime: str, max_side: int) -> tuple[bytes, str]:
    """``data`` re-encoded no larger than ``max_side`` on its longer side (if it was)."""
    image_mod = _pillow()
    with image_mod.open(io.BytesIO(data)) as img:
        if max(img.size) <= max_side:
            return data, mime
        img.load()
        small = img.copy()
    small.thumbnail((max_side, max_side))
    return _save(small, "JPEG" if mime == "image/jpeg" else "PNG")


def _save(img: Any, fmt: str) -> tuple[bytes, str]:
    buf = io.BytesIO()
    if fmt == "JPEG":
        if img.mode not in ("RGB", "L"):
            img = img.convert("RGB")
        img.save(buf, format="JPEG", quality=90)
        return buf.getvalue(), "image/jpeg"
    if img.mode not in ("RGB", "RGBA", "L", "LA", "P", "1"):
        img = img.convert("RGBA")
    img.save(buf, format="PNG")
    return buf.getvalue(), "image/png"


def encode_image(load: Callable[[], Any], what: str, max_side: int | None) -> ImagePart:
    """Load an image (bytes, or a PIL image), sniff its type, downscale, base64 it.

    Blocking: the client calls it through ``asyncio.to_thread``.
    """
    source = load()
    if isinstance(source, bytes | bytearray | memoryview):
        data = bytes(source)
        mime = _require_type(data, what)
        if max_side is not None and mime not in ("image/svg+xml",):
            data, mime = _downscale(data, mime, max_side)
    else:  # a PIL image: PNG keeps it lossless whatever it was loaded from
        img = source
        if max_side is not None and max(img.size) > max_side:
            img = img.copy()
            img.thumbnail((max_side, max_side))
        data, mime = _save(img, "PNG")
    return ImagePart(media_type=mime, data=base64.b64encode(data).decode("ascii"))


def is_pil_image(value: Any) -> bool:
    return any(
        cls.__module__.startswith("PIL.") and cls.__name__ == "Image" for cls in type(value).__mro__
    )


def read_file(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


# --- the per-client cache ---------------------------------------------------------------


class ImageCache:
    """LRU of finished encodings bounded in bytes, plus encodings in progress."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._done: OrderedDict[Hashable, ImagePart] = OrderedDict()
        self._size = 0
        self._pending: dict[Hashable, asyncio.Future[ImagePart]] = {}

    def __len__(self) -> int:
        """Finished encodings kept."""
        return len(self._done)

    @property
    def size(self) -> int:
        """Their base64 bytes."""
        return self._size

    def clear(self) -> None:
        """Drop every finished encoding (one in progress still finishes, and is kept)."""
        self._done.clear()
        self._size = 0

    def get(self, key: Hashable) -> ImagePart | asyncio.Future[ImagePart] | None:
        part = self._done.get(key)
        if part is not None:
            self._done.move_to_end(key)
            return part
        return self._pending.get(key)

    def put(self, key: Hashable, part: ImagePart) -> None:
        size = len(part.data or "")
        if size > self.max_bytes:
            return
        self._done[key] = part
        self._size += size
        while self._size > self.max_bytes:
            _, old = self._done.popitem(last=False)
            self._size -= len(old.data or "")

    def forget(self, key: Hashable) -> None:
        old = self._done.pop(key, None)
        if old is not None:
            self._size -= len(old.data or "")

    async def get_or_make(
        self, key: Hashable, make: Callable[[], Awaitable[ImagePart]]
    ) -> ImagePart:
        found = self.get(key)
        if isinstance(found, ImagePart):
            return found
        if found is not None:
            return await asyncio.shield(found)
        future: asyncio.Future[ImagePart] = asyncio.get_running_loop().create_future()
        self._pending[key] = future
        try:
            part = await make()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: waiters may be none
            raise
        finally:
            del self._pending[key]
        future.set_result(part)
        self.put(key, part)
        return part


def release_memory() -> None:
    """Ask the C allocator to hand memory freed since back to the system.

    Freed encodings leave glibc's heaps (the encoding threads' arenas among them) holding
    pages the process no longer uses, and the resident size stays where the batch took it
    (measured: bench/client_memory.py, a plateau ~10 MiB lower and steadier with this).
    glibc's ``malloc_trim`` returns them; elsewhere (musl, macOS) this does nothing.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _malloc_trim() -> Any:
    global _TRIM
    if _TRIM is _UNKNOWN:
        try:
            _TRIM = ctypes.CDLL(None).malloc_trim
        except (AttributeError, OSError):  # not glibc
            _TRIM = None
    return _TRIM


_UNKNOWN: Any = object()
_TRIM: Any = _UNKNOWN


# --- the converter ----------------------------------------------------------------------


def image_digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def b64decode_uri(payload: str, uri: str) -> bytes:
    try:
        return base64.b64decode(payload + "=" * (-len(payload) % 4))
    except (binascii.Error, ValueError):
        raise InputError(f"invalid base64 in data: URI {uri[:40]!r}...") from None
