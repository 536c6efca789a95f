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

from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from .base import Adapter, distinct_image_batch, mrope_packed_position_ids
from .family import FamilyFacts, register_adapter, tiny_builder
from .images import ImageInputError
from .tiny import QWEN_VL_SPECIALS, qwen_chat_template, train_byte_level_bpe


@dataclass
class Qwen2_5_VLSettings:
    """``agents.N.processor`` keys of Qwen2.5-VL (the same as the top-level
    ``min_pixels`` / ``max_pixels``; a top-level value wins)."""

    min_pixels: int | None = None
    """Per-image lower pixel budget; None: the checkpoint's."""
    max_pixels: int | None = None
    """Per-image upper pixel budget; None: the checkpoint's."""


@register_adapter
class Qwen2_5_VLAdapter(Adapter):
    family = "Qwen2.5-VL"
    model_types = ("qwen2_5_vl",)
    placeholder_tokens = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>",
                          "<|vision_pad|>")
    stop_tokens = ("<|im_end|>", "<|endoftext|>")
    per_token_keys = ("mm_token_type_ids", "token_type_ids")
    takes_video = True
    settings = Qwen2_5_VLSettings
    vllm_tested = True
    packing = True  # tests/test_packing.py: packed = padded, with and without images
    shared_prefix = True  # tests/test_shared_prefix.py: shared = unshared, M-RoPE and images
    vision_per_distinct_image = True  # share_images: tests/test_packing.py

    @property
    def _ip(self):
        return self.processor.image_processor

    @property
    def factor(self) -> int:
        return int(self._ip.patch_size) * int(self._ip.merge_size)

    def pixel_budget(self) -> tuple[int, int]:
        """(min_pixels, max_pixels): the options' values, else the checkpoint processor's."""
        size = self._ip.size
        own = self.family_settings
        lo = (self.options.min_pixels or own.min_pixels or size.get("shortest_edge")
              or size.get("min_pixels"))
        hi = (self.options.max_pixels or own.max_pixels or size.get("longest_edge")
              or size.get("max_pixels"))
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

    def vllm_processor_kwargs(self) -> dict:
        lo, hi = self.pixel_budget()
        return {"min_pixels": lo, "max_pixels": hi}

    def packed_position_ids(self, model, batch):
        """M-RoPE: text positions plus the model's temporal / height / width ids, per
        sequence (``base.mrope_packed_position_ids``)."""
        return mrope_packed_position_ids(model, batch)

    def share_images(self, batch, copies):
        """``pixel_values`` of the distinct images only (each image's patch rows, split by
        ``image_grid_thw``), with ``image_copies`` [images] naming the distinct image each
        batch image repeats and ``image_grid_thw_distinct`` their grids;
        ``image_grid_thw`` keeps every image (the M-RoPE ids need it)."""
        inputs = batch.inputs
        grid = inputs.get("image_grid_thw")
        if (not self.vision_per_distinct_image or grid is None or len(copies) != grid.shape[0]
                or len(set(copies)) == len(copies)):
            return batch
        shared, keep = distinct_image_batch(batch, copies, grid.prod(-1).tolist())
        shared.inputs["image_grid_thw_distinct"] = grid[keep]
        return shared

    def decoder_hidden_states(self, model, inputs):
        """The base model's hidden states; with shared images (:meth:`share_images`) the
        vision tower runs on the distinct images and each copy gets its image's features
        (the model's ``mm_encoder_outputs`` input), DeepStack's per-layer features too
        (Qwen3-VL: ``deepstack_features``, one per-image tuple per layer)."""
        if "image_copies" not in inputs:
            return super().decoder_hidden_states(model, inputs)
        inputs = dict(inputs)
        copies = inputs.pop("image_copies").tolist()
        grid = inputs.pop("image_grid_thw_distinct")
        base = model.model
        out = base.get_image_features(inputs.pop("pixel_values"), grid, return_dict=True)
        fields = {"pooler_output": [out.pooler_output[j] for j in copies]}  # per image
        deepstack = getattr(out, "deepstack_features", None)
        if deepstack is not None:
            fields["deepstack_features"] = [[layer[j] for j in copies] for layer in deepstack]
        image = type(out)(**fields)
        return base(**inputs, mm_encoder_outputs={"image": image}, use_cache=False).last_hidden_state


# --------------------------------------------------------------------------- tiny model

# Tiny Qwen2.5-VL (patch 14, merge 2 -> factor 28; min_pixels 4*28*28 = 3136,
# max_pixels 64*28*28 = 50176). Tokens = (H' / 28) * (W' / 28) after smart_resize.
#  100 x 60: H' = round(60/28)*28 = 56, W' = round(100/28)*28 = 112; 6272 px in range
#            -> 2 * 4 = 8 tokens
#   28 x 28: 784 px < 3136 -> beta = sqrt(3136/784) = 2 -> H' = W' = ceil(56/28)*28 = 56
#            -> 2 * 2 = 4 tokens
#  600 x 400: rounded 392 x 588 = 230496 px > 50176 -> beta = sqrt(240000/50176) = 2.187
#            H' = floor(400/2.187/28)*28 = 6*28, W' = floor(600/2.187/28)*28 = 9*28 -> 54 tokens
QWEN2_5_VL_FACTS = FamilyFacts(
    model_class="Qwen2_5_VLForConditionalGeneration",
    processor_class="Qwen2_5_VLProcessor",
    turn_pattern=(r"^<\|im_start\|>system\nYou are a helpful assistant\.<\|im_end\|>\n"
                  r"<\|im_start\|>user\n.*<\|im_end\|>\n<\|im_start\|>assistant\n$"),
    stop_tokens=("<|im_end|>", "<|endoftext|>"),
    image_token_cases=((100, 60, 8), (28, 28, 4), (600, 400, 54)),
    notes="video inputs not wired",
)


@tiny_builder("qwen2_5_vl", "qwen2_5_vl", facts=QWEN2_5_VL_FACTS)
def build_tiny_qwen2_5_vl(out: Path, seed: int) -> None:
    """Qwen2_5_VLForConditionalGeneration + Qwen2_5_VLProcessor, tiny dims (head_dim 32),
    the family's patch / merge rule and a 64-cell pixel budget."""
    import torch
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2_5_VLProcessor,
        Qwen2VLImageProcessor,
        Qwen2VLVideoProcessor,
    )

    tokenizer = train_byte_level_bpe(["<|endoftext|>"] + QWEN_VL_SPECIALS)
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|endoftext|>"
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in QWEN_VL_SPECIALS}
    config = Qwen2_5_VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,  # head_dim 32
            max_position_embeddings=4096,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                             "mrope_section": [4, 6, 6]},  # sums to head_dim / 2 (real: 16, 24, 24)
            bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
            eos_token_id=ids["<|im_end|>"], pad_token_id=tokenizer.pad_token_id,
        ),
        vision_config=dict(
            depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
            patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=56,
            fullatt_block_indexes=[1],
        ),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
    )
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config)
    image_processor = Qwen2VLImageProcessor(
        patch_size=14, merge_size=2, temporal_patch_size=2,
        min_pixels=4 * 28 * 28, max_pixels=64 * 28 * 28,
    )
    processor = Qwen2_5_VLProcessor(
        image_processor=image_processor, tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(), chat_template=qwen_chat_template(),
    )
    model.generation_config.eos_token_id = [ids["<|im_end|>"]]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    processor.save_pretrained(out)
