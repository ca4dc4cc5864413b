"""_inputs.py: prompt forms -> messages, images from every source (no sockets)."""

from __future__ import annotations

import asyncio
import base64
import io
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from interlingua.client._inputs import InputError, Inputs, detect_image_type
from interlingua.core import ImagePart, Message, TextPart, ToolCallPart, ToolResultPart

from .conftest import GIF_1PX, jpeg_bytes, png_bytes


def decoded(part: Any) -> bytes:
    assert isinstance(part, ImagePart) and part.data is not None
    return base64.b64decode(part.data)


# --- sniffing ---


def test_detect_image_type() -> None:
    assert detect_image_type(png_bytes()) == "image/png"
    assert detect_image_type(jpeg_bytes()) == "image/jpeg"
    assert detect_image_type(GIF_1PX) == "image/gif"
    assert detect_image_type(b"RIFF\x24\x00\x00\x00WEBPVP8 ") == "image/webp"
    assert detect_image_type(b"BM6\x00\x00\x00") == "image/bmp"
    assert detect_image_type(b"\x00\x00\x00\x1cftypavif") == "image/avif"
    assert detect_image_type(b"<svg xmlns='http://www.w3.org/2000/svg'/>") == "image/svg+xml"
    assert detect_image_type(b"%PDF-1.7") is None


# --- prompt forms ---


async def test_string_prompt() -> None:
    messages = await Inputs().messages("hello", system="be brief")
    assert messages == (
        Message("system", (TextPart("be brief"),)),
        Message("user", (TextPart("hello"),)),
    )


async def test_list_of_strings_and_images(tmp_path: Path) -> None:
    path = tmp_path / "a.png"
    path.write_bytes(png_bytes())
    (m,) = await Inputs().messages(["look:", path, "and", GIF_1PX])
    assert m.role == "user"
    kinds = [type(p).__name__ for p in m.parts]
    assert kinds == ["TextPart", "ImagePart", "TextPart", "ImagePart"]
    assert m.parts[1].media_type == "image/png"  # type: ignore[union-attr]
    assert m.parts[3].media_type == "image/gif"  # type: ignore[union-attr]


async def test_plain_string_in_a_list_is_text_even_if_a_file(tmp_path: Path) -> None:
    path = tmp_path / "a.png"
    path.write_bytes(png_bytes())
    (m,) = await Inputs().messages([str(path)])
    assert m.parts == (TextPart(str(path)),)


async def test_type_value_items(tmp_path: Path) -> None:
    path = tmp_path / "b.gif"
    path.write_bytes(GIF_1PX)
    (m,) = await Inputs().messages(
        [
            {"type": "text", "value": "what is this?"},
            {"type": "image", "value": str(path), "detail": "low"},
        ]
    )
    assert m.parts[0] == TextPart("what is this?")
    image = m.parts[1]
    assert isinstance(image, ImagePart)
    assert (image.media_type, image.detail) == ("image/gif", "low")
    assert decoded(image) == GIF_1PX


async def test_openai_and_anthropic_image_items() -> None:
    uri = "data:image/png;base64," + base64.b64encode(png_bytes()).decode()
    anthropic_block = {
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": "image/gif",
            "data": base64.b64encode(GIF_1PX).decode(),
        },
    }
    (m,) = await Inputs().messages(
        [{"type": "image_url", "image_url": {"url": uri, "detail": "high"}}, anthropic_block]
    )
    first, second = m.parts
    assert isinstance(first, ImagePart) and first.media_type == "image/png"
    assert first.detail == "high"
    assert isinstance(second, ImagePart) and decoded(second) == GIF_1PX


async def test_full_message_dicts() -> None:
    messages = await Inputs().messages(
        [
            {"role": "system", "content": "sys"},
            {"role": "developer", "content": "dev"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}, GIF_1PX]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": {"x": 1}},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
        ]
    )
    assert [m.role for m in messages] == ["system", "system", "user", "assistant", "user"]
    assert messages[1].meta == {"role": "developer"}
    assert isinstance(messages[2].parts[1], ImagePart)
    assert messages[3].parts == (ToolCallPart("c1", "f", '{"x":1}'),)
    result = messages[4].parts[0]
    assert isinstance(result, ToolResultPart)
    assert (result.tool_call_id, result.text) == ("c1", "42")


async def test_message_objects_pass_through() -> None:
    given = (Message("user", (TextPart("a"),)), Message("assistant", (TextPart("b"),)))
    assert await Inputs().messages(list(given)) == given


async def test_images_keyword_goes_before_the_last_user_text(tmp_path: Path) -> None:
    path = tmp_path / "c.png"
    path.write_bytes(png_bytes())
    messages = await Inputs().messages("describe", images=[str(path), path.as_posix()])
    (m,) = messages
    assert [type(p).__name__ for p in m.parts] == ["ImagePart", "ImagePart", "TextPart"]


async def test_bad_prompts() -> None:
    with pytest.raises(InputError, match="unknown content item type 'video'"):
        await Inputs().messages([{"type": "video", "value": "x"}])
    with pytest.raises(InputError, match=r"prompt\[0\]: cannot read audio file 'x'"):
        await Inputs().messages([{"type": "audio", "value": "x"}])
    with pytest.raises(InputError, match=r"prompt\[0\]: cannot use a int as an image"):
        await Inputs().messages([42])
    with pytest.raises(InputError, match="unknown role 'robot'"):
        await Inputs().messages([{"role": "robot", "content": "x"}])
    with pytest.raises(InputError, match=r"cannot read image file 'nope\.png'"):
        await Inputs().messages("x", images=["nope.png"])


# --- datastudio BaseAPI's forms ---


async def test_system_items_become_the_system_message(tmp_path: Path) -> None:
    messages = await Inputs().messages(
        [
            {"type": "system", "value": "You are terse."},
            {"type": "text", "value": "hi"},
            {"type": "system", "value": "Answer in French."},
        ],
        system="first",
    )
    assert messages == (
        Message(
            "system",
            (TextPart("first"), TextPart("You are terse."), TextPart("Answer in French.")),
        ),
        Message("user", (TextPart("hi"),)),
    )
    (only,) = [m for m in await Inputs().messages([{"type": "system", "value": "s"}, "q"])
               if m.role == "system"]  # fmt: skip
    assert only.parts == (TextPart("s"),)


async def test_system_item_misuse() -> None:
    with pytest.raises(InputError, match="only system items"):
        await Inputs().messages([{"type": "system", "value": "s"}])
    with pytest.raises(InputError, match=r"messages\[0\]\.content\[0\]: a system item belongs"):
        await Inputs().messages([{"role": "user", "content": [{"type": "system", "value": "s"}]}])
    with pytest.raises(InputError, match="a system item needs a string 'value'"):
        await Inputs().messages([{"type": "system", "value": ["a"]}, "q"])


async def test_an_image_item_may_hold_a_list(tmp_path: Path, encodes: list[str]) -> None:
    path = tmp_path / "a.png"
    path.write_bytes(png_bytes())
    (m,) = await Inputs().messages(
        [{"type": "image", "value": [str(path), GIF_1PX, path]}, {"type": "text", "value": "q"}]
    )
    kinds = [p.media_type if isinstance(p, ImagePart) else p for p in m.parts]
    assert kinds == ["image/png", "image/gif", "image/png", TextPart("q")]
    assert len(encodes) == 2  # the same file twice: encoded once
    with pytest.raises(InputError, match=r"prompt\[0\]\.value\[1\]: cannot read image file"):
        await Inputs().messages([{"type": "image", "value": [str(path), "missing.png"]}])


async def test_paths_as_images(tmp_path: Path) -> None:
    image = tmp_path / "photo.jpg"
    image.write_bytes(png_bytes())  # the bytes decide, not the name
    notes = tmp_path / "notes.png"
    notes.write_text("not an image at all")
    prompt = [str(image), "describe it", str(notes), str(tmp_path), str(tmp_path / "gone.png")]
    (m,) = await Inputs().messages(prompt, paths_as_images=True)
    first, *rest = m.parts
    assert isinstance(first, ImagePart) and first.media_type == "image/png"
    assert rest == [TextPart(t) for t in prompt[1:]]  # text, a text file, a directory, none
    (plain,) = await Inputs().messages(prompt)  # not asked: every string is text
    assert plain.parts == tuple(TextPart(t) for t in prompt)
    (alone,) = await Inputs().messages(str(image), paths_as_images=True)
    assert isinstance(alone.parts[0], ImagePart)
    (message,) = await Inputs().messages(
        [{"role": "user", "content": str(image)}], paths_as_images=True
    )
    assert isinstance(message.parts[0], ImagePart)


# --- image sources ---


async def test_every_source_gives_the_same_inline_png(tmp_path: Path) -> None:
    data = png_bytes()
    path = tmp_path / "x.png"
    path.write_bytes(data)
    inputs = Inputs()
    for source in (str(path), path, data, bytearray(data), memoryview(data)):
        part = await inputs.image(source)
        assert part.media_type == "image/png"
        assert decoded(part) == data
    pil = await inputs.image(Image.new("RGB", (3, 2)))
    assert pil.media_type == "image/png"
    assert Image.open(io.BytesIO(decoded(pil))).size == (3, 2)


async def test_mime_comes_from_content_not_name(tmp_path: Path) -> None:
    path = tmp_path / "photo.jpg"  # a PNG under a JPEG name
    path.write_bytes(png_bytes())
    assert (await Inputs().image(path)).media_type == "image/png"
    # and a data: URI that lies about its type is corrected too
    uri = "data:image/jpeg;base64," + base64.b64encode(png_bytes()).decode()
    assert (await Inputs().image(uri)).media_type == "image/png"


async def test_not_an_image(tmp_path: Path) -> None:
    path = tmp_path / "doc.png"
    path.write_bytes(b"%PDF-1.7 not an image")
    with pytest.raises(InputError, match=r"image file .*doc.png.* is not an image.*%PDF"):
        await Inputs().image(path)


async def test_urls_are_fetched_and_inlined_or_kept() -> None:
    fetched: list[str] = []

    async def fetch(url: str) -> bytes:
        fetched.append(url)
        return GIF_1PX

    inputs = Inputs(fetch=fetch)
    part = await inputs.image("https://example.test/cat")
    assert (part.media_type, decoded(part)) == ("image/gif", GIF_1PX)
    await inputs.image("https://example.test/cat")
    assert fetched == ["https://example.test/cat"]  # cached
    kept = await Inputs(fetch=fetch, inline_urls=False).image("https://example.test/dog")
    assert kept == ImagePart(url="https://example.test/dog")


# --- dedupe and threads ---


async def test_same_file_encoded_once(tmp_path: Path, encodes: list[str]) -> None:
    path = tmp_path / "same.png"
    path.write_bytes(png_bytes())
    inputs = Inputs()
    parts = [await inputs.image(path) for _ in range(3)]
    parts += await asyncio.gather(*(inputs.image(str(path)) for _ in range(3)))
    assert len(encodes) == 1
    assert all(p == parts[0] for p in parts)
    assert encodes[0] != threading.current_thread().name  # encoded in a worker thread


async def test_changed_file_is_encoded_again(tmp_path: Path, encodes: list[str]) -> None:
    path = tmp_path / "changing.png"
    path.write_bytes(png_bytes(color=(1, 2, 3)))
    inputs = Inputs()
    first = await inputs.image(path)
    path.write_bytes(png_bytes(size=(4, 4)))
    os.utime(path, ns=(1, 1))  # a different mtime even on coarse filesystems
    second = await inputs.image(path)
    assert len(encodes) == 2
    assert first != second


async def test_bytes_and_pil_dedupe(encodes: list[str]) -> None:
    inputs = Inputs()
    data = png_bytes()
    await inputs.image(data)
    await inputs.image(bytes(bytearray(data)))  # equal content, different object
    assert len(encodes) == 1
    img = Image.new("RGB", (2, 2))
    await inputs.image(img)
    await inputs.image(img)
    assert len(encodes) == 2
    await inputs.image(Image.new("RGB", (2, 2)))  # another object: encoded on its own
    assert len(encodes) == 3


async def test_cache_is_bounded(tmp_path: Path, encodes: list[str]) -> None:
    inputs = Inputs(cache_bytes=1)  # nothing fits: every use encodes
    data = png_bytes()
    await inputs.image(data)
    await inputs.image(data)
    assert len(encodes) == 2


# --- downscaling ---


async def test_downscale_to_max_side(tmp_path: Path) -> None:
    path = tmp_path / "big.png"
    path.write_bytes(png_bytes(size=(100, 50)))
    part = await Inputs(max_side=20).image(path)
    assert part.media_type == "image/png"
    assert Image.open(io.BytesIO(decoded(part))).size == (20, 10)
    jpeg = await Inputs(max_side=10).image(jpeg_bytes(size=(40, 40)))
    assert jpeg.media_type == "image/jpeg"
    assert Image.open(io.BytesIO(decoded(jpeg))).size == (10, 10)
    small = png_bytes(size=(5, 5))
    assert decoded(await Inputs(max_side=20).image(small)) == small  # untouched


async def test_downscale_without_pillow_says_how_to_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "PIL", None)  # import PIL now fails
    with pytest.raises(InputError, match=r"needs Pillow.*pip install 'interlingua\[images\]'"):
        await Inputs(max_side=10).image(GIF_1PX)
    # without downscaling no Pillow is needed
    assert (await Inputs().image(GIF_1PX)).media_type == "image/gif"
