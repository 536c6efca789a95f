"""InternVL3.5 (transformers-native ``-HF`` format): ChatML prompts, dynamic 448 px tiling.

Image rule (InternVL's dynamic preprocessing, ``GotOcr2ImageProcessor`` with
``crop_to_patches``): among all tile grids (cols x rows) with ``min_patches`` <= cols x rows
<= ``max_tiles``, pick the one whose aspect ratio is closest to the image's (ties go to the
larger grid when the image has enough pixels); resize the image to (cols x tile, rows x
tile) and cut it into tiles; when there is more than one tile, append a thumbnail (the
whole image at tile x tile). Each tile becomes ``(tile / 14)^2 x 0.5^2`` tokens after pixel
shuffle (256 for 448 px tiles), written as ``<img>`` + that many ``<IMG_CONTEXT>`` per tile
+ ``</img>``.

Checkpoints in the original remote-code format (``InternVLChatModel``) are not supported:
convert them or use the ``-HF`` repositories (e.g. ``OpenGVLab/InternVL3_5-1B-HF``).
"""

from __future__ import annotations

from .base import Adapter


class InternVLAdapter(Adapter):
    family = "InternVL3.5"
    model_types = ("internvl",)
    placeholder_tokens = ("<IMG_CONTEXT>", "<img>", "</img>", "<video>")
    stop_tokens = ("<|im_end|>", "<|endoftext|>")
    takes_video = True

    @property
    def _ip(self):
        return self.processor.image_processor

    def max_tiles(self) -> int:
        return int(self.options.max_tiles or self._ip.max_patches)

    def processor_image_kwargs(self) -> dict:
        return {"max_patches": self.max_tiles()}

    def tiles_for(self, width: int, height: int) -> int:
        """Tiles one image is cut into (thumbnail included), by the processor's own rule."""
        return int(self._ip.get_number_of_image_patches(
            height, width, {"max_patches": self.max_tiles()}))

    def image_token_count(self, width: int, height: int) -> int:
        return self.tiles_for(width, height) * int(self.processor.image_seq_length)

    @property
    def image_token_id(self) -> int:
        return int(self.processor.image_token_id)

    def vllm_processor_kwargs(self) -> dict:
        """vLLM serves the ``-HF`` format (``InternVLForConditionalGeneration``) with
        transformers' own ``InternVLProcessor``, so the kwarg is the HF image processor's
        ``max_patches`` (``max_dynamic_patch`` is the remote-code format's name)."""
        return {"max_patches": self.max_tiles()}
