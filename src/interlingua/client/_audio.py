"""Audio in and out: input clips -> :class:`~interlingua.core.AudioPart`, spoken answers
-> :class:`Audio`.

Input (what guidance's OpenAI interpreter takes too): a prompt item
``{"type": "audio", "value": ...}`` whose value is a file path (``str`` or
``pathlib.Path``), the file's ``bytes``, a ``data:audio/...;base64,`` URI or an
AudioPart, with an optional ``"format"`` (``wav`` | ``mp3``; read from the bytes, else
the file name, when left out); OpenAI's own ``{"type": "input_audio", "input_audio":
{"data", "format"}}`` passes as it is. In a prompt list a ``Path`` ending in ``.wav`` /
``.mp3`` and WAV or MP3 ``bytes`` are audio too. The OpenAI Chat dialect sends it as an
``input_audio`` part; the gateway refuses it (400 naming the part) toward a model that
cannot hear.

Output: with ``modalities=["text", "audio"], audio={"voice": "alloy", "format": "wav"}``
the answer's ``ChatResult.audio`` is an :class:`Audio` (decoded bytes, transcript, id,
format) whether the call streamed or not; ``.save("answer.wav")`` writes it (raw
``pcm16`` gets a WAV header when the file name asks for one).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import wave
from dataclasses import dataclass, replace
from typing import Any

from ..core import AudioPart, Request, Response
from ..dialects import parse_data_uri

__all__ = [
    "AUDIO_SUFFIXES",
    "Audio",
    "audio_part",
    "detect_audio_format",
    "input_audio_dict",
    "is_audio_bytes",
    "looks_like_audio",
    "with_audio_format",
]

#: file name endings read as audio in a prompt list (OpenAI takes these two formats)
AUDIO_SUFFIXES = {".wav": "wav", ".mp3": "mp3"}
#: OpenAI's ``pcm16`` output: 24 kHz, mono, 16-bit little-endian samples
PCM16_RATE = 24_000


def detect_audio_format(data: bytes) -> str | None:
    """``wav`` / ``mp3`` / ``flac`` / ``opus`` / ``aac`` from the first bytes, or None.

    >>> detect_audio_format(b"RIFF\\x00\\x00\\x00\\x00WAVEfmt ")
    'wav'
    """
    head = bytes(data[:12])
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav"
    if head[:3] == b"ID3" or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE6 == 0xE2):
        return "mp3"  # an ID3 tag, or an MPEG audio layer III frame sync
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "opus"
    if len(head) > 1 and head[0] == 0xFF and head[1] & 0xF6 == 0xF0:
        return "aac"  # ADTS
    return None


def is_audio_bytes(data: bytes) -> bool:
    """Whether ``data`` starts like a WAV or MP3 file (the formats OpenAI takes as input)."""
    return detect_audio_format(data) in ("wav", "mp3")


def looks_like_audio(item: Any) -> bool:
    """A ``Path`` named ``.wav``/``.mp3`` or bytes that start like WAV/MP3, in a prompt list."""
    if isinstance(item, os.PathLike):
        return os.path.splitext(os.fspath(item))[1].lower() in AUDIO_SUFFIXES
    return isinstance(item, bytes | bytearray | memoryview) and is_audio_bytes(bytes(item[:12]))


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _encode(data: bytes, fmt: str | None, what: str) -> AudioPart:
    fmt = fmt or detect_audio_format(data)
    if fmt is None:
        raise ValueError(
            f"{what} is not audio this client recognises (first bytes {data[:8]!r}); "
            "give WAV or MP3, or say its format: {'type': 'audio', 'value': ..., 'format': 'wav'}"
        )
    return AudioPart(data=base64.b64encode(data).decode("ascii"), format=fmt)


async def audio_part(value: Any, fmt: str | None = None) -> AudioPart:
    """Any accepted audio source (module docstring) -> an inline AudioPart.

    File reads and base64 run in a worker thread, as image encoding does. A source that
    cannot be used raises ValueError (the prompt reader adds where it was).
    """
    if isinstance(value, AudioPart):
        return value if fmt is None else replace(value, format=fmt)
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        return await asyncio.to_thread(_encode, data, fmt, "the audio bytes")
    if isinstance(value, str) and value.startswith("data:"):
        parsed = parse_data_uri(value)
        if parsed is None:
            raise ValueError(f"not a base64 data: URI: {value[:40]!r}...")
        declared, payload = parsed
        try:
            head = base64.b64decode(payload[:24] + "=" * (-len(payload[:24]) % 4))
        except (binascii.Error, ValueError):
            raise ValueError("invalid base64 in data: URI") from None
        subtype = declared.split("/", 1)[-1].lower()
        declared_fmt = {"wav": "wav", "x-wav": "wav", "mpeg": "mp3", "mp3": "mp3"}.get(subtype)
        return AudioPart(data=payload, format=fmt or detect_audio_format(head) or declared_fmt)
    if isinstance(value, str | os.PathLike):
        path = os.fspath(value)
        try:
            data = await asyncio.to_thread(_read, path)
        except OSError as exc:
            raise ValueError(f"cannot read audio file {path!r}: {exc.strerror or exc}") from None
        suffix = AUDIO_SUFFIXES.get(os.path.splitext(path)[1].lower())
        return await asyncio.to_thread(
            _encode, data, fmt or detect_audio_format(data) or suffix, f"audio file {path!r}"
        )
    raise ValueError(
        f"cannot use a {type(value).__name__} as audio; give a file path, "
        "pathlib.Path, bytes or a data: URI"
    )


def input_audio_dict(item: dict[str, Any]) -> AudioPart:
    """OpenAI's ``{"type": "input_audio", "input_audio": {"data", "format"}}`` item."""
    spec = item.get("input_audio")
    if not isinstance(spec, dict) or not isinstance(spec.get("data"), str):
        raise ValueError("an input_audio item needs 'input_audio': {'data': ...}")
    fmt = spec.get("format")
    return AudioPart(data=spec["data"], format=fmt if isinstance(fmt, str) else None)


@dataclass(frozen=True, slots=True)
class Audio:
    """A spoken answer: the decoded ``data``, its ``transcript``, the server's ``id`` (an
    assistant turn of a later request refers to it by this id) and ``expires_at``, and
    ``format`` (the one requested, else read from the bytes; None when unknown).
    """

    data: bytes
    transcript: str = ""
    id: str | None = None
    format: str | None = None
    expires_at: int | None = None

    @classmethod
    def from_part(cls, part: AudioPart) -> Audio:
        """From the neutral part (base64 decoded)."""
        data = base64.b64decode(part.data + "=" * (-len(part.data) % 4)) if part.data else b""
        fmt = part.format or detect_audio_format(data)
        return cls(data, part.transcript, part.id, fmt, part.expires_at)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the audio to ``path``. Raw ``pcm16`` is wrapped in a WAV header (24 kHz,
        mono, 16-bit) when ``path`` ends in ``.wav``; any other format is written as it
        came."""
        target = os.fspath(path)
        if self.format == "pcm16" and target.lower().endswith(".wav"):
            with wave.open(target, "wb") as out:
                out.setnchannels(1)
                out.setsampwidth(2)
                out.setframerate(PCM16_RATE)
                out.writeframes(self.data)
            return
        with open(target, "wb") as f:
            f.write(self.data)

    def __len__(self) -> int:
        return len(self.data)


def with_audio_format(response: Response, request: Request) -> Response:
    """``response`` with its audio parts' ``format`` set to the one ``request`` asked for
    (the wire does not repeat it in the answer)."""
    fmt = (request.output_audio or {}).get("format")
    if not isinstance(fmt, str) or not any(isinstance(p, AudioPart) for p in response.parts):
        return response
    parts = tuple(
        replace(p, format=fmt) if isinstance(p, AudioPart) and p.format is None else p
        for p in response.parts
    )
    return replace(response, parts=parts)
