"""Image input: every source form and mode becomes RGB; bad images are clear errors."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from vlcohort.processors.images import ImageInputError, ImageLimits, open_image, to_rgb


def _png_bytes(image: Image.Image, fmt: str = "PNG") -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt)
    return buf.getvalue()


@pytest.mark.parametrize("mode", ["RGBA", "LA", "P", "L", "1", "CMYK", "I;16", "F", "YCbCr"])
def test_every_mode_becomes_rgb(mode):
    image = Image.new(mode, (8, 6))
    assert to_rgb(image).mode == "RGB"
    assert to_rgb(image).size == (8, 6)


def test_transparent_pixels_become_white_not_black():
    image = Image.new("RGBA", (4, 4), (0, 0, 0, 0))  # fully transparent "black"
    image.putpixel((0, 0), (255, 0, 0, 255))
    rgb = to_rgb(image)
    assert rgb.getpixel((1, 1)) == (255, 255, 255)
    assert rgb.getpixel((0, 0)) == (255, 0, 0)


def test_palette_with_transparency_is_composited():
    image = Image.new("P", (4, 4), 0)
    image.putpalette([0, 0, 0, 10, 200, 10] + [0] * 762)
    image.info["transparency"] = 0
    image.putpixel((2, 2), 1)
    rgb = to_rgb(image)
    assert rgb.getpixel((0, 0)) == (255, 255, 255)
    assert rgb.getpixel((2, 2)) == (10, 200, 10)


def test_sixteen_bit_grey_is_rescaled_not_clipped():
    image = Image.new("I;16", (2, 1))
    image.putpixel((0, 0), 0)
    image.putpixel((1, 0), 60000)
    rgb = to_rgb(image)
    assert rgb.getpixel((0, 0)) == (0, 0, 0)
    assert rgb.getpixel((1, 0)) == (255, 255, 255)


def test_sources_path_bytes_pil_dict(tmp_path):
    image = Image.new("RGBA", (10, 7), (1, 2, 3, 255))
    path = tmp_path / "a.png"
    image.save(path)
    data = path.read_bytes()
    for src in (path, str(path), data, image, {"bytes": data, "path": None},
                {"bytes": None, "path": str(path)}):
        out = open_image(src, problem_id="p", index=0)
        assert out.mode == "RGB" and out.size == (10, 7)
    # relative paths resolve against the data file's folder
    assert open_image("a.png", problem_id="p", index=0, base_dir=tmp_path).size == (10, 7)


def test_cmyk_jpeg_bytes():
    data = _png_bytes(Image.new("CMYK", (9, 9), (0, 255, 255, 0)), "JPEG")
    out = open_image(data, problem_id="p", index=0)
    r, g, b = out.getpixel((4, 4))
    assert out.mode == "RGB" and r > 200 and g < 60 and b < 60


def test_missing_file_names_problem_index_and_path(tmp_path):
    with pytest.raises(ImageInputError) as e:
        open_image(tmp_path / "nope.png", problem_id="q17", index=2)
    msg = str(e.value)
    assert "q17" in msg and "images[2]" in msg and "nope.png" in msg and "not found" in msg


def test_corrupt_bytes():
    with pytest.raises(ImageInputError, match=r"problem 'q1', images\[0\].*not a readable image"):
        open_image(b"\x89PNG\r\n\x1a\n garbage", problem_id="q1", index=0)


def test_truncated_image_data_is_corrupt():
    data = _png_bytes(Image.effect_noise((64, 64), 50).convert("RGB"))
    with pytest.raises(ImageInputError, match="corrupt"):
        open_image(data[: len(data) // 2], problem_id="q1", index=0)


def test_empty_bytes():
    with pytest.raises(ImageInputError, match="empty"):
        open_image(b"", problem_id="q1", index=0)


def test_pixel_budget_refuses_before_decoding():
    # A 20000 x 20000 PNG header costs a few KB on disk but 400 MP decoded.
    data = _png_bytes(Image.new("1", (20000, 20000)))
    assert len(data) < 200_000
    with pytest.raises(ImageInputError, match="decompression-bomb guard"):
        open_image(data, problem_id="big", index=0)
    # The budget is the user's to set: a 3000 x 3000 image passes by default and is
    # refused under a 1 MP budget.
    mid = _png_bytes(Image.new("1", (3000, 3000)))
    assert open_image(mid, problem_id="mid", index=0).size == (3000, 3000)
    with pytest.raises(ImageInputError, match="9,000,000 pixels, over the budget of 1,000,000"):
        open_image(mid, problem_id="mid", index=0, limits=ImageLimits(max_source_pixels=1_000_000))


def test_one_pixel_image_is_refused():
    with pytest.raises(ImageInputError, match="1x1"):
        open_image(Image.new("RGB", (1, 1)), problem_id="tiny", index=0)


def test_unsupported_type():
    with pytest.raises(ImageInputError, match="unsupported image type int"):
        open_image(42, problem_id="p", index=0)
