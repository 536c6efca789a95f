"""Turning whatever a dataset holds into a checked RGB PIL image.

Datasets hand us images as file paths, raw bytes, PIL images or HF ``Image`` feature
dicts, in every mode PIL knows (RGBA, P, LA, L, I;16, CMYK...). Family preprocessing
(resizing, tiling) happens later, in each adapter; this module only makes sure the image
is real, small enough to decode safely, large enough to mean something, and RGB.

Every failure is an :class:`ImageInputError` naming the problem id and the image's index,
saying what is wrong and what to do.
"""

from __future__ import annotations

import io
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image, ImageOps, UnidentifiedImageError


class ProblemInputError(ValueError):
    """Bad input in one problem. The message names the problem id and the field;
    ``reason`` is a short key (``image_not_found``, ``empty_question``...) by which a
    trainer or loader counts skipped records."""

    reason: str = "bad_record"

    @classmethod
    def of(cls, reason: str, message: str) -> "ProblemInputError":
        err = cls(message)
        err.reason = reason
        return err


class ImageInputError(ProblemInputError):
    """An image of a problem that cannot be used (missing, corrupt, too large, too small)."""


@dataclass(frozen=True)
class ImageLimits:
    """User-facing guards applied to every image before any family preprocessing.

    Attributes:
        max_source_pixels: decompression-bomb guard: an image whose *header* declares more
            pixels than this is refused before it is decoded (default 64 MP; PIL's own guard
            is 89 MP and only warns).
        min_side: an image whose shorter side is below this many pixels is refused (a 1x1
            image is almost always a broken export, not content).
    """

    max_source_pixels: int = 64_000_000
    min_side: int = 2


def _where(problem_id: str, index: int) -> str:
    return f"problem {problem_id!r}, images[{index}]"


def open_image(src: Any, *, problem_id: str, index: int, limits: ImageLimits = ImageLimits(),
               base_dir: str | os.PathLike | None = None) -> Image.Image:
    """Open ``src`` (path, bytes, PIL image or ``{"bytes", "path"}`` dict) as an RGB image.

    Relative paths are resolved against ``base_dir`` when given (the data file's folder).
    """
    where = _where(problem_id, index)
    if isinstance(src, dict):  # HF datasets Image feature, decode=False
        if src.get("bytes"):
            src = src["bytes"]
        elif src.get("path"):
            src = src["path"]
        else:
            raise ImageInputError.of("image_missing", f"{where}: image dict has neither 'bytes' nor 'path'; "
                                  "fix the record or drop it.")
    if isinstance(src, Image.Image):
        image = src
    elif isinstance(src, (bytes, bytearray, memoryview)):
        if len(src) == 0:
            raise ImageInputError.of("image_unreadable", f"{where}: image bytes are empty; fix the record or drop it.")
        image = _open_lazily(io.BytesIO(bytes(src)), where, "image bytes", limits)
    elif isinstance(src, (str, os.PathLike)):
        path = Path(src)
        if not path.is_absolute() and base_dir is not None:
            path = Path(base_dir) / path
        if not path.is_file():
            raise ImageInputError.of("image_not_found",
                f"{where}: image file not found: {path}. Check the path (relative paths are "
                f"resolved against the data file's folder) or drop the record."
            )
        image = _open_lazily(path, where, f"image file {path}", limits)
    else:
        raise ImageInputError.of("image_unsupported_type",
            f"{where}: unsupported image type {type(src).__name__}; give a path, bytes, a PIL "
            "image or a {'bytes': ..., 'path': ...} dict."
        )
    _check_size(image, where, limits)
    try:
        image.load()
    except (OSError, ValueError, SyntaxError) as e:  # truncated / corrupt pixel data
        raise ImageInputError.of("image_corrupt", f"{where}: image data is corrupt ({e}); re-export the image "
                              "or drop the record.") from e
    return to_rgb(image)


def _open_lazily(fp, where: str, what: str, limits: ImageLimits) -> Image.Image:
    """Read only the header: size checks happen before any pixel is decoded.

    Our ``max_source_pixels`` is the guard. PIL's own (a warning at 89 MP, an error at
    179 MP) is raised to it when a user raises the budget above PIL's default.
    """
    if Image.MAX_IMAGE_PIXELS is not None and Image.MAX_IMAGE_PIXELS < limits.max_source_pixels:
        Image.MAX_IMAGE_PIXELS = limits.max_source_pixels
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            return Image.open(fp)
    except Image.DecompressionBombError as e:
        raise ImageInputError.of("image_too_large",
            f"{where}: {what} declares more pixels than the decompression-bomb guard allows "
            f"({e}). Downscale it, or raise `max_source_pixels` if it is genuine."
        ) from e
    except (UnidentifiedImageError, OSError) as e:
        raise ImageInputError.of("image_unreadable", f"{where}: {what} is not a readable image ({e}); re-export it "
                              "as PNG or JPEG, or drop the record.") from e


def _check_size(image: Image.Image, where: str, limits: ImageLimits) -> None:
    w, h = image.size
    if w * h > limits.max_source_pixels:
        raise ImageInputError.of("image_too_large",
            f"{where}: image is {w}x{h} = {w * h:,} pixels, over the budget of "
            f"{limits.max_source_pixels:,} (decompression-bomb guard). Downscale it, or raise "
            "`max_source_pixels` in the model's image settings if it is genuine."
        )
    if min(w, h) < limits.min_side:
        raise ImageInputError.of("image_too_small",
            f"{where}: image is {w}x{h}, smaller than {limits.min_side} px on a side; it is "
            "almost certainly a broken export. Fix or drop the record."
        )


def to_rgb(image: Image.Image) -> Image.Image:
    """Any PIL mode -> RGB, the way a person would see the image.

    - EXIF orientation is applied (phone photos are stored rotated).
    - Transparent images (RGBA, LA, P with transparency) are composited on white: most
      transparent math figures are black lines on nothing, and dropping alpha would turn
      "nothing" into black and hide the lines.
    - 16-bit and float greyscale are rescaled to 8 bits instead of being clipped.
    - CMYK, YCbCr, L, 1 convert through PIL.
    """
    try:
        image = ImageOps.exif_transpose(image)
    except Exception:  # malformed EXIF must not cost the image
        pass
    mode = image.mode
    if mode == "RGB":
        return image
    if mode == "P":
        image = image.convert("RGBA" if "transparency" in image.info else "RGB")
        mode = image.mode
    if mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    if mode in ("I", "I;16", "I;16B", "I;16L", "I;16N", "F"):
        import numpy as np

        arr = np.asarray(image, dtype=np.float64)
        lo, hi = float(arr.min()), float(arr.max())
        scaled = np.zeros_like(arr) if hi <= lo else (arr - lo) / (hi - lo) * 255.0
        return Image.fromarray(scaled.round().astype("uint8"), mode="L").convert("RGB")
    return image.convert("RGB")
