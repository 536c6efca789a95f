"""Gemma-3: turn-based prompts (``<start_of_turn>user`` / ``model``), fixed 896 px canvas.

Image rule: every image is resized (no aspect kept) to the SigLIP canvas (896 x 896 in
real checkpoints) and average-pooled to ``mm_tokens_per_image`` soft tokens (256), written
as ``\\n\\n<start_of_image>`` + 256 ``<image_soft_token>`` + ``<end_of_image>\\n\\n``. With
pan-and-scan on, a sufficiently elongated image (ratio >= 1.2) is also cut into 2..4 crops
along its long side, each crop another 256 tokens.

Gemma-3's template has no system role: the system prompt is folded into the first user
turn, as the published template does. ``token_type_ids`` (1 on image tokens) must reach
the model in training batches: image tokens attend bidirectionally to each other.
"""

from __future__ import annotations

import math

from .base import Adapter


def pan_and_scan_crops(width: int, height: int, min_crop: int, max_crops: int,
                       min_ratio: float) -> int:
    """Number of extra crops pan-and-scan adds for one image (0 when it does not apply)."""
    long, short = max(width, height), min(width, height)
    if long / short < min_ratio:
        return 0
    n = int(math.floor(long / short + 0.5))  # round half up
    n = min(int(math.floor(long / min_crop)), n)
    n = min(max_crops, max(2, n))
    crop_long, crop_short = int(math.ceil(long / n)), short
    if min(crop_long, crop_short) < min_crop:
        return 0
    return n


class Gemma3Adapter(Adapter):
    family = "Gemma-3"
    model_types = ("gemma3",)
    placeholder_tokens = ("<image_soft_token>", "<start_of_image>", "<end_of_image>")
    stop_tokens = ("<end_of_turn>", "<eos>")
    per_token_keys = ("token_type_ids",)

    def pan_and_scan_settings(self) -> dict:
        """The checkpoint image processor's pan-and-scan constants, passed explicitly.

        ``Gemma3Processor`` has its own call defaults for these (min crop 256 px...) that
        would otherwise override the values saved in the image processor's config.
        """
        defaults = type(self.processor).images_kwargs
        ip = self.processor.image_processor
        keys = ("pan_and_scan_min_crop_size", "pan_and_scan_max_num_crops",
                "pan_and_scan_min_ratio_to_activate")
        return {k: getattr(ip, k, None) or defaults[k] for k in keys}

    def processor_image_kwargs(self) -> dict:
        if not self.options.pan_and_scan:
            return {"do_pan_and_scan": False}
        return {"do_pan_and_scan": True, **self.pan_and_scan_settings()}

    def crops_for(self, width: int, height: int) -> int:
        if not self.options.pan_and_scan:
            return 0
        s = self.pan_and_scan_settings()
        return pan_and_scan_crops(width, height, int(s["pan_and_scan_min_crop_size"]),
                                  int(s["pan_and_scan_max_num_crops"]),
                                  float(s["pan_and_scan_min_ratio_to_activate"]))

    def image_token_count(self, width: int, height: int) -> int:
        return int(self.processor.image_seq_length) * (1 + self.crops_for(width, height))

    @property
    def image_token_id(self) -> int:
        return int(self.tokenizer.image_token_id)

    def vllm_processor_kwargs(self) -> dict:
        return self.processor_image_kwargs() if self.options.pan_and_scan else {}
