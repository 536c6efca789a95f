"""Qwen2.5-VL: ChatML prompts, native-resolution images in 28 px cells, M-RoPE.

Image rule (qwen-vl-utils ``smart_resize``): each side is rounded to a multiple of
``factor = patch_size x merge_size`` (14 x 2 = 28), then the whole image is scaled so its
pixel count lies in [``min_pixels``, ``max_pixels``]; an aspect ratio over 200 is refused.
The vision tower cuts the result into 14 px patches and merges 2 x 2 of them into one
token, so an image of H x W (after resizing) costs (H / 28) x (W / 28) ``<|image_pad|>``
tokens, wrapped in ``<|vision_start|>`` ... ``<|vision_end|>``.

We resize with qwen-vl-utils ourselves and hand the processor a size range that contains
the result, so the rule is applied exactly once and vLLM (which re-applies it) sees the
same grid.
"""

from __future__ import annotations

from PIL import Image

from .base import Adapter
from .images import ImageInputError


class Qwen2_5_VLAdapter(Adapter):
    family = "Qwen2.5-VL"
    model_types = ("qwen2_5_vl",)
    placeholder_tokens = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>",
                          "<|vision_pad|>")
    stop_tokens = ("<|im_end|>", "<|endoftext|>")
    per_token_keys = ("mm_token_type_ids", "token_type_ids")
    takes_video = True

    @property
    def _ip(self):
        return self.processor.image_processor

    @property
    def factor(self) -> int:
        return int(self._ip.patch_size) * int(self._ip.merge_size)

    def pixel_budget(self) -> tuple[int, int]:
        """(min_pixels, max_pixels): the options' values, else the checkpoint processor's."""
        size = self._ip.size
        lo = self.options.min_pixels or size.get("shortest_edge") or size.get("min_pixels")
        hi = self.options.max_pixels or size.get("longest_edge") or size.get("max_pixels")
        if lo > hi:
            raise ValueError(f"min_pixels={lo} is larger than max_pixels={hi}; "
                             "set model.min_pixels <= model.max_pixels")
        return int(lo), int(hi)

    def resize_image(self, image, *, problem_id: str, index: int):
        from qwen_vl_utils.vision_process import MAX_RATIO, smart_resize

        w, h = image.size
        if max(w, h) / min(w, h) > MAX_RATIO:
            raise ImageInputError.of("image_aspect_ratio", 
                f"problem {problem_id!r}, images[{index}]: aspect ratio {max(w, h) / min(w, h):.0f}"
                f" is over {MAX_RATIO}, which {self.family} refuses (qwen-vl-utils rule). Pad or "
                "crop the image, or drop the record."
            )
        lo, hi = self.pixel_budget()
        new_h, new_w = smart_resize(h, w, factor=self.factor, min_pixels=lo, max_pixels=hi)
        if (new_w, new_h) == (w, h):
            return image
        return image.resize((new_w, new_h), Image.BICUBIC)

    def processor_image_kwargs(self) -> dict:
        lo, hi = self.pixel_budget()
        return {"size": {"shortest_edge": lo, "longest_edge": hi}}

    def image_token_count(self, width: int, height: int) -> int:
        merge = int(self._ip.merge_size)
        patch = int(self._ip.patch_size)
        return (height // patch) * (width // patch) // (merge * merge)

    @property
    def image_token_id(self) -> int:
        return int(self.processor.image_token_id)

    def vllm_processor_kwargs(self) -> dict:
        lo, hi = self.pixel_budget()
        return {"min_pixels": lo, "max_pixels": hi}
