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

from dataclasses import dataclass
from pathlib import Path

from .base import Adapter, distinct_image_batch
from .family import FamilyFacts, register_adapter, tiny_builder
from .tiny import INTERNVL_SPECIALS, internvl_chat_template, train_byte_level_bpe


@dataclass
class InternVLSettings:
    """``agents.N.processor`` keys of InternVL (the same as the top-level ``max_tiles``;
    a top-level value wins)."""

    max_tiles: int | None = None
    """Most tiles per image; None: the checkpoint's."""


@register_adapter
class InternVLAdapter(Adapter):
    family = "InternVL3.5"
    model_types = ("internvl",)
    placeholder_tokens = ("<IMG_CONTEXT>", "<img>", "</img>", "<video>")
    stop_tokens = ("<|im_end|>", "<|endoftext|>")
    takes_video = True
    settings = InternVLSettings
    vllm_tested = True
    packing = True  # tests/test_packing.py: packed = padded (tiles concatenated in order)
    shared_prefix = True  # tests/test_shared_prefix.py: shared = unshared, tiles once per prompt
    vision_per_distinct_image = True  # share_images: tests/test_packing.py

    @property
    def _ip(self):
        return self.processor.image_processor

    def max_tiles(self) -> int:
        return int(self.options.max_tiles or self.family_settings.max_tiles
                   or self._ip.max_patches)

    def processor_image_kwargs(self) -> dict:
        return {"max_patches": self.max_tiles()}

    def tiles_for(self, width: int, height: int) -> int:
        """Tiles one image is cut into (thumbnail included), by the processor's own rule."""
        return int(self._ip.get_number_of_image_patches(
            height, width, {"max_patches": self.max_tiles()}))

    def image_token_count(self, width: int, height: int) -> int:
        return self.tiles_for(width, height) * int(self.processor.image_seq_length)

    def image_tiles(self, input_ids) -> list[int]:
        """Tiles of each image of a batch, in order (row-major over ``input_ids`` [N, L],
        the order ``pixel_values`` holds their tiles in): each image is ``<img>``, then
        ``image_seq_length`` ``<IMG_CONTEXT>`` per tile, then ``</img>``."""
        tok = self.tokenizer
        flat = input_ids.flatten()  # an image never spans two rows
        starts = (flat == tok.convert_tokens_to_ids("<img>")).nonzero().flatten()
        ends = (flat == tok.convert_tokens_to_ids("</img>")).nonzero().flatten()
        if starts.numel() != ends.numel():
            return []
        return ((ends - starts - 1) // int(self.processor.image_seq_length)).tolist()

    def share_images(self, batch, copies):
        """``pixel_values`` of the distinct images' tiles only, with ``image_copies``
        [images] naming the distinct image each batch image repeats and ``image_tiles``
        [distinct images] their tile counts."""
        inputs = batch.inputs
        if (not self.vision_per_distinct_image or "pixel_values" not in inputs
                or len(set(copies)) == len(copies)):
            return batch
        import torch

        tiles = self.image_tiles(inputs["input_ids"])
        if len(tiles) != len(copies) or sum(tiles) != inputs["pixel_values"].shape[0]:
            return batch  # not the layout this hook knows: every row keeps its own pass
        shared, keep = distinct_image_batch(batch, copies, tiles)
        shared.inputs["image_tiles"] = torch.as_tensor([tiles[k] for k in keep], dtype=torch.long)
        return shared

    def decoder_hidden_states(self, model, inputs):
        """The base model's hidden states; with shared images (:meth:`share_images`) the
        vision tower and projector run on the distinct images' tiles and each copy gets
        its image's tile features (the model's ``mm_encoder_outputs`` input)."""
        if "image_copies" not in inputs:
            return super().decoder_hidden_states(model, inputs)
        import torch
        from transformers.modeling_outputs import BaseModelOutputWithPooling

        inputs = dict(inputs)
        copies = inputs.pop("image_copies").tolist()
        tiles = inputs.pop("image_tiles").tolist()
        base = model.model
        feats = base.get_image_features(pixel_values=inputs.pop("pixel_values"),
                                        return_dict=True).pooler_output  # [tiles, tokens, H]
        per_image = torch.split(feats, tiles)
        image = BaseModelOutputWithPooling(pooler_output=torch.cat([per_image[j] for j in copies]))
        return base(**inputs, mm_encoder_outputs={"image": image}, use_cache=False).last_hidden_state

    def vllm_processor_kwargs(self) -> dict:
        """vLLM serves the ``-HF`` format (``InternVLForConditionalGeneration``) with
        transformers' own ``InternVLProcessor``, so the kwarg is the HF image processor's
        ``max_patches`` (``max_dynamic_patch`` is the remote-code format's name)."""
        return {"max_patches": self.max_tiles()}


# --------------------------------------------------------------------------- tiny model

# Tiny InternVL3.5 (56 px tiles, 4 tokens per tile = (56/14)^2 * 0.5^2; real: 448 px, 256).
# Grid = the cols x rows with 1 <= cols*rows <= max_tiles (12) whose ratio is nearest the
# image's; a thumbnail tile is added when the grid has more than one tile.
#   56 x 56  : ratio 1 -> 1x1 -> 1 tile, no thumbnail -> 4 tokens
#  100 x 60  : ratio 1.667 -> 3x2 (1.5, off by 0.167; 5x3 = 15 tiles is over 12; 2x1 is
#              off by 0.333) -> 6 + 1 thumbnail = 7 tiles -> 28 tokens
#   60 x 250 : ratio 0.24 -> 1x4 (0.25, off by 0.01) -> 4 + 1 = 5 tiles -> 20 tokens
INTERNVL3_5_FACTS = FamilyFacts(
    model_class="InternVLForConditionalGeneration",
    processor_class="InternVLProcessor",
    turn_pattern=(r"^<\|im_start\|>system\nYou are a helpful assistant\.<\|im_end\|>\n"
                  r"<\|im_start\|>user\n.*<\|im_end\|>\n<\|im_start\|>assistant\n$"),
    stop_tokens=("<|im_end|>",),
    image_token_cases=((56, 56, 4), (100, 60, 28), (60, 250, 20)),
    notes=("only the transformers-native `-HF` checkpoints; the remote-code "
           "`InternVLChatModel` format is not supported"),
)


@tiny_builder("internvl3_5", "internvl", facts=INTERNVL3_5_FACTS)
def build_tiny_internvl3_5(out: Path, seed: int) -> None:
    """InternVLForConditionalGeneration (Qwen3 text model) + InternVLProcessor with
    GotOcr2 tiling on 56 px tiles, tiny dims."""
    import torch
    from transformers import (
        GotOcr2ImageProcessor,
        InternVLConfig,
        InternVLForConditionalGeneration,
        InternVLProcessor,
        InternVLVideoProcessor,
    )

    tile = 56  # real checkpoints: 448 (see module docstring)
    # The names InternVLProcessor reads off the tokenizer (as in the -HF checkpoints).
    named = {
        "start_image_token": "<img>", "end_image_token": "</img>",
        "context_image_token": "<IMG_CONTEXT>", "video_token": "<video>",
    }
    tokenizer = train_byte_level_bpe(["<|endoftext|>"] + INTERNVL_SPECIALS, named)
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|endoftext|>"
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in INTERNVL_SPECIALS}
    image_seq_length = (tile // 14) ** 2 // 4  # patches per tile, pixel-shuffled by 0.5
    config = InternVLConfig(
        vision_config=dict(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            image_size=[tile, tile], patch_size=[14, 14], use_mean_pooling=True,
        ),
        text_config=dict(
            model_type="qwen3", vocab_size=len(tokenizer), hidden_size=64,
            intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=32, max_position_embeddings=4096,
            bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
            eos_token_id=ids["<|im_end|>"], pad_token_id=tokenizer.pad_token_id,
        ),
        image_token_id=ids["<IMG_CONTEXT>"], image_seq_length=image_seq_length,
        downsample_ratio=0.5, tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = InternVLForConditionalGeneration(config)
    image_processor = GotOcr2ImageProcessor(
        size={"height": tile, "width": tile}, crop_to_patches=True, min_patches=1,
        max_patches=12, image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225],
    )
    processor = InternVLProcessor(
        image_processor=image_processor, tokenizer=tokenizer,
        video_processor=InternVLVideoProcessor(), image_seq_length=image_seq_length,
        chat_template=internvl_chat_template(),
    )
    model.generation_config.eos_token_id = [ids["<|im_end|>"]]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    processor.save_pretrained(out)
