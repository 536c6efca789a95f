"""LLaVA-OneVision (transformers-native ``-hf`` format): ChatML prompts, SigLIP tiles, anyres.

Image rule (LLaVA-NeXT "anyres", as ``LlavaOnevisionProcessor`` counts it). With a tile of
``S`` px (the SigLIP canvas, 384 in real checkpoints) and ``p = S / patch`` features per
tile side (27, so ``p^2 = num_image_tokens`` = 729):

- **one image in the prompt**: pick the best grid resolution among ``image_grid_pinpoints``
  (``select_best_resolution``: the most of the image's pixels kept after an aspect-keeping
  downscale, then the least waste), i.e. ``rows x cols`` tiles. The high-res feature grid
  is ``(rows p) x (cols p)``; the padding the aspect-keeping resize added is cut off
  ("unpadding": the short side becomes ``int(side x current_long / original_long)``, the
  cut split evenly); when the rest is larger than ``anyres_max_N`` tiles' worth
  (``ratio = sqrt(h w / (N p^2)) > 1.1``) it is shrunk to ``int(h / ratio) x int(w /
  ratio)``. Tokens = ``p^2`` (the base tile, the whole image at ``S x S``) + ``h x w``
  (high-res) + ``h`` (one ``image_newline`` per row).
- **several images in one prompt**: no tiling at all; each image is padded to a square,
  resized to ``S x S`` and costs ``p^2 + 1`` tokens (base features + one newline).

That second rule is why this family counts a whole prompt's images at once
(:meth:`LlavaOnevisionAdapter.prompt_image_token_counts`). Every token is an ``<image>``
pad token (the newline is a learned embedding, not a text token).

The published template writes every image of a turn first (``<image>\\n`` each), then the
turn's text: placeholders inside a question (``<image1>``) cannot place an image mid-text.
"""

from __future__ import annotations

import math
from pathlib import Path

from .base import Adapter
from .family import FamilyFacts, register_adapter, tiny_builder


def anyres_features(width: int, height: int, tile: int, per_side: int,
                    pinpoints, max_tiles: int) -> int:
    """Features of one image tiled alone (base tile + unpadded high-res grid + newlines):
    the rule of the module docstring. ``per_side``: features per tile side (``p``)."""
    from transformers.image_processing_utils import select_best_resolution

    best_h, best_w = select_best_resolution([height, width], pinpoints)
    cur_h, cur_w = per_side * (best_h // tile), per_side * (best_w // tile)
    if width / height > cur_w / cur_h:  # wider than the grid: rows of padding were added
        new_h = int(round(height * (cur_w / width), 7))
        cur_h -= 2 * ((cur_h - new_h) // 2)
    else:
        new_w = int(round(width * (cur_h / height), 7))
        cur_w -= 2 * ((cur_w - new_w) // 2)
    high, newlines = cur_h * cur_w, cur_h
    ratio = math.sqrt(cur_h * cur_w / (max_tiles * per_side ** 2))
    if ratio > 1.1:
        high, newlines = int(cur_h // ratio) * int(cur_w // ratio), int(cur_h // ratio)
    return per_side ** 2 + high + newlines


@register_adapter
class LlavaOnevisionAdapter(Adapter):
    family = "LLaVA-OneVision"
    model_types = ("llava_onevision",)
    vllm_tested = True  # requests, weight push and generation run on vLLM's CPU build
    packing = True  # tests/test_packing.py: packed = padded (per-image tensors kept in order)
    shared_prefix = True  # tests/test_shared_prefix.py: shared = unshared, images included
    placeholder_tokens = ("<image>", "<video>")
    stop_tokens = ("<|im_end|>", "<|endoftext|>")
    image_token = "<image>"
    takes_video = True

    @property
    def _ip(self):
        return self.processor.image_processor

    def _tile(self) -> int:
        size = self._ip.size
        return int(size["height"] if size.get("height") else size["shortest_edge"])

    def _base_tokens(self) -> int:
        """Features of the base tile (``num_image_tokens``), less the CLS row when the
        checkpoint selects features with the "default" strategy."""
        return int(self.processor.num_image_tokens)

    def _strategy_offset(self) -> int:
        return 1 if self.processor.vision_feature_select_strategy == "default" else 0

    def image_token_count(self, width: int, height: int) -> int:
        """``<image>`` tokens of an image that is the only one in its prompt (anyres)."""
        per_side = int(math.isqrt(self._base_tokens()))
        max_tiles = int(str(self.processor.vision_aspect_ratio).removeprefix("anyres_max_"))
        n = anyres_features(width, height, self._tile(), per_side,
                            self._ip.image_grid_pinpoints, max_tiles)
        return n - self._strategy_offset()

    def prompt_image_token_counts(self, images) -> list[int]:
        """One image: anyres tiling; several: ``num_image_tokens + 1`` each (no tiling)."""
        if len(images) == 1:
            return [self.image_token_count(*images[0].size)]
        return [self._base_tokens() + 1 - self._strategy_offset() for _ in images]


# ------------------------------------------------------------------------- tiny model

TILE = 28  # real checkpoints: 384 (SigLIP so400m/14: 27 x 27 = 729 features per tile)
PATCH = 14
#: the published grid (1..6 tiles per side), in tiny tiles
PINPOINTS = [[TILE * r, TILE * c] for r in range(1, 7) for c in range(1, 7)]
# (``<video>`` before ``<image>``: the lowest suppressed id is then one a text forward
# may carry without a video, which the shared "never generated" test feeds the model)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<video>", "<image>"]


def chat_template() -> str:
    """llava-hf/llava-onevision-qwen2-*-ov-hf's template: ChatML, each turn's images
    first (``<image>\\n``), then its videos, then its text; no default system turn."""
    return (
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n'}}"
        "{# Render all images first #}"
        "{% for content in message['content'] | selectattr('type', 'equalto', 'image') %}"
        "{{ '<image>\n' }}{% endfor %}"
        "{# Render all video then #}"
        "{% for content in message['content'] | selectattr('type', 'equalto', 'video') %}"
        "{{ '<video>\n' }}{% endfor %}"
        "{# Render all text next #}"
        "{% if message['role'] != 'assistant' %}"
        "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
        "{{ content['text'] }}{% endfor %}"
        "{% else %}"
        "{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
        "{% generation %}{{ content['text'] }}{% endgeneration %}{% endfor %}"
        "{% endif %}{{'<|im_end|>' + '\n'}}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    )


# Token counts of the tiny model (S = 28 px tiles, p = 2 features per tile side, base 4,
# anyres_max_9: at most 9 * 4 = 36 high-res features), derived by hand:
#  100 x 60 alone: grids that keep all 6000 px need cols >= 4 (112 px) and rows >= 3
#     (84 px); (84 x 112) scales by min(112/100, 84/60) = 1.12 and wastes 9408 - 6000 =
#     3408 px, the least -> 3 x 4 tiles -> 6 x 8 features; 100/60 = 1.67 > 8/6 -> new_h =
#     int(60 * 8/100) = 4, cut (6 - 4) // 2 = 1 row each side -> 4 x 8 = 32 features,
#     ratio sqrt(32/36) < 1.1 -> 4 + 32 + 4 newlines = 40
#  28 x 28 alone: (28 x 28) keeps all 784 px with no waste -> 1 x 1 tile -> 2 x 2, ratio
#     1 -> no cut -> 4 + 4 + 2 = 10
#  200 x 200 alone: the largest grid (168 x 168) keeps 168 x 168 of it -> 6 x 6 tiles ->
#     12 x 12 = 144 features, square -> no cut; ratio sqrt(144/36) = 2 > 1.1 -> 6 x 6 = 36
#     -> 4 + 36 + 6 = 46
#  60 x 130 alone: all 7800 px kept needs cols >= 3 (84 px: 60 * s, s = 140/130) and rows
#     >= 5 (140 px): (140 x 84) scales by min(84/60, 140/130) = 1.077, wastes 11760 -
#     7800 = 3960 -> 5 x 3 tiles -> 10 x 6 features; 60/130 = 0.46 < 0.6 -> new_w =
#     int(60 * 10/130) = 4, cut (6 - 4) // 2 = 1 column each side -> 10 x 4 = 40 features,
#     ratio sqrt(40/36) = 1.054 < 1.1 -> 4 + 40 + 10 = 54
#  two images in one prompt: each 4 base + 1 newline = 5, whatever its size
IMAGE_TOKEN_CASES = ((100, 60, 40), (28, 28, 10), (200, 200, 46), (60, 130, 54))


@tiny_builder("llava_onevision", "llava_onevision", facts=FamilyFacts(
    model_class="LlavaOnevisionForConditionalGeneration",
    processor_class="LlavaOnevisionProcessor",
    turn_pattern=(r"^<\|im_start\|>system\nYou are a helpful assistant\.<\|im_end\|>\n"
                  r"<\|im_start\|>user\n.+<\|im_end\|>\n<\|im_start\|>assistant\n$"),
    stop_tokens=("<|im_end|>",),
    image_token_cases=IMAGE_TOKEN_CASES,
    notes=("anyres tiling for a single image; several images in one prompt are not tiled "
           "(base tile + newline each, the processor's rule); the template puts a turn's "
           "images before its text"),
))
def build(out: Path, seed: int) -> None:
    """Tiny LLaVA-OneVision: SigLIP tower (28 px tiles, patch 14), Qwen2 text model, the
    published 6 x 6 pinpoint grid and ``anyres_max_9``, in tiny tiles."""
    import torch
    from transformers import (
        LlavaOnevisionConfig,
        LlavaOnevisionForConditionalGeneration,
        LlavaOnevisionImageProcessor,
        LlavaOnevisionProcessor,
        LlavaOnevisionVideoProcessor,
    )

    from .tiny import publish_siglip_layout, train_byte_level_bpe

    tokenizer = train_byte_level_bpe(SPECIALS)  # the processor defaults to "<image>" / "<video>"
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|endoftext|>"
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIALS}
    per_tile = (TILE // PATCH) ** 2
    config = LlavaOnevisionConfig(
        vision_config=dict(
            model_type="siglip_vision_model", hidden_size=32, intermediate_size=64,
            num_hidden_layers=2, num_attention_heads=2, image_size=TILE, patch_size=PATCH,
            vision_use_head=False,
        ),
        text_config=dict(
            model_type="qwen2", vocab_size=len(tokenizer), hidden_size=64,
            intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, max_position_embeddings=4096,  # head_dim 32
            bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
            pad_token_id=tokenizer.pad_token_id,
        ),
        image_token_index=ids["<image>"], video_token_index=ids["<video>"],
        image_grid_pinpoints=PINPOINTS, vision_feature_select_strategy="full",
        vision_feature_layer=-1, vision_aspect_ratio="anyres_max_9",
    )
    torch.manual_seed(seed)
    model = LlavaOnevisionForConditionalGeneration(config)
    image_processor = LlavaOnevisionImageProcessor(
        size={"height": TILE, "width": TILE}, image_grid_pinpoints=PINPOINTS,
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
    )
    video_processor = LlavaOnevisionVideoProcessor(
        size={"height": TILE, "width": TILE}, image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5])
    processor = LlavaOnevisionProcessor(
        image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor,
        num_image_tokens=per_tile, vision_feature_select_strategy="full",
        vision_aspect_ratio="anyres_max_9", chat_template=chat_template(),
    )
    model.generation_config.eos_token_id = [ids["<|im_end|>"]]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    publish_siglip_layout(out)  # the published (and vLLM's) tensor names
    processor.save_pretrained(out)
