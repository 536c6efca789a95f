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
from dataclasses import dataclass
from pathlib import Path

from .base import Adapter
from .family import FamilyFacts, register_adapter, tiny_builder
from .tiny import publish_siglip_layout, train_gemma_bpe


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


@dataclass
class Gemma3Settings:
    """``agents.N.processor`` keys of Gemma-3 (``pan_and_scan`` is also a top-level key;
    either one true turns it on)."""

    pan_and_scan: bool = False
    """Extra crops (2-4) for elongated images (ratio >= the checkpoint's minimum)."""


@register_adapter
class Gemma3Adapter(Adapter):
    family = "Gemma-3"
    model_types = ("gemma3",)
    placeholder_tokens = ("<image_soft_token>", "<start_of_image>", "<end_of_image>")
    stop_tokens = ("<end_of_turn>", "<eos>")
    per_token_keys = ("token_type_ids",)
    image_token = "<image_soft_token>"  # the processor's image_token_id is <start_of_image>
    settings = Gemma3Settings
    vllm_tested = True
    # Padded only: with packed sequences transformers (5.24) reads the image-block
    # bidirectional mask (token_type_ids) at per-sequence positions instead of row indices
    # (masking_utils.remap_positions_for_packed_sequence), so image tokens would attend
    # wrongly; tests/test_packing.py measures the difference.
    packing = False
    # tests/test_shared_prefix.py: shared = unshared, its image blocks' two-way attention
    # (bidirectional_blocks) and sliding windows rebuilt in the layout's masks
    shared_prefix = True

    @property
    def pan_and_scan(self) -> bool:
        """Pan-and-scan is on (the top-level option or ``processor.pan_and_scan``)."""
        return bool(self.options.pan_and_scan or self.family_settings.pan_and_scan)

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
        if not self.pan_and_scan:
            return {"do_pan_and_scan": False}
        return {"do_pan_and_scan": True, **self.pan_and_scan_settings()}

    def crops_for(self, width: int, height: int) -> int:
        if not self.pan_and_scan:
            return 0
        s = self.pan_and_scan_settings()
        return pan_and_scan_crops(width, height, int(s["pan_and_scan_min_crop_size"]),
                                  int(s["pan_and_scan_max_num_crops"]),
                                  float(s["pan_and_scan_min_ratio_to_activate"]))

    def image_token_count(self, width: int, height: int) -> int:
        return int(self.processor.image_seq_length) * (1 + self.crops_for(width, height))

    def bidirectional_blocks(self, model, inputs):
        """An image's tokens attend to each other both ways: the model's own block ids
        (``get_block_sequence_ids_for_mask``) of the laid-out ``token_type_ids``."""
        from transformers.models.gemma3.modeling_gemma3 import get_block_sequence_ids_for_mask

        types = inputs.get("token_type_ids")
        return None if types is None else get_block_sequence_ids_for_mask(types)

    def vllm_processor_kwargs(self) -> dict:
        return self.processor_image_kwargs() if self.pan_and_scan else {}


# --------------------------------------------------------------------------- tiny model

#: Gemma-3's published chat template, byte for byte (as TRL keeps it for its identity
#: checks): ``{{ bos_token }}`` first, the system text folded into the first user turn,
#: turns ``<start_of_turn>user`` / ``<start_of_turn>model``, texts trimmed, an image as
#: ``<start_of_image>`` (the processor expands it).
GEMMA3_CHAT_TEMPLATE = r"""{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '

' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '

' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '
' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>
' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model
'}}
{%- endif -%}
"""


def gemma3_chat_template() -> str:
    """Gemma-3's published template (:data:`GEMMA3_CHAT_TEMPLATE`)."""
    return GEMMA3_CHAT_TEMPLATE


GEMMA3_SPECIALS = ["<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>",
                   "<image_soft_token>"]



# Tiny Gemma-3 (56 px canvas pooled to 4 tokens; real: 896 px, 256 tokens). Without
# pan-and-scan every image is resized to the canvas and costs 4 tokens, whatever its size:
#  100 x 60 -> 4;  250 x 60 -> 4;  56 x 56 -> 4
GEMMA3_FACTS = FamilyFacts(
    model_class="Gemma3ForConditionalGeneration",
    processor_class="Gemma3Processor",
    turn_pattern=(r"^<bos><start_of_turn>user\nYou are a helpful assistant\.\n\n.*"
                  r"<end_of_turn>\n<start_of_turn>model\n$"),
    stop_tokens=("<end_of_turn>", "<eos>"),
    image_token_cases=((100, 60, 4), (250, 60, 4), (56, 56, 4)),
    notes=("no system role: the system prompt is folded into the first user turn "
           "(as the published template does)"),
)


@tiny_builder("gemma3", "gemma3", facts=GEMMA3_FACTS)
def build_tiny_gemma3(out: Path, seed: int) -> None:
    """Gemma3ForConditionalGeneration (SigLIP tower) + Gemma3Processor on a 56 px canvas
    pooled to 4 tokens, a Gemma BPE tokenizer with byte fallback, tiny dims."""
    import torch
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3ImageProcessor,
        Gemma3Processor,
    )

    canvas = 56  # real checkpoints: 896 (see module docstring)
    tokenizer = train_gemma_bpe(GEMMA3_SPECIALS, {
        "boi_token": "<start_of_image>", "eoi_token": "<end_of_image>",
        "image_token": "<image_soft_token>",
    })
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in GEMMA3_SPECIALS}
    mm_tokens = 4  # real: 256 = 16 x 16 pooled from 64 x 64 patches
    config = Gemma3Config(
        text_config=dict(
            vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
            max_position_embeddings=4096, sliding_window=512,
            bos_token_id=tokenizer.bos_token_id, eos_token_id=[tokenizer.eos_token_id, ids["<end_of_turn>"]],
            pad_token_id=tokenizer.pad_token_id,
        ),
        vision_config=dict(
            model_type="siglip_vision_model", hidden_size=32, intermediate_size=64,
            num_hidden_layers=2, num_attention_heads=2, image_size=canvas, patch_size=14,
        ),
        mm_tokens_per_image=mm_tokens,
        boi_token_index=ids["<start_of_image>"], eoi_token_index=ids["<end_of_image>"],
        image_token_index=ids["<image_soft_token>"],
    )
    torch.manual_seed(seed)
    model = Gemma3ForConditionalGeneration(config)
    image_processor = Gemma3ImageProcessor(
        size={"height": canvas, "width": canvas}, image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5], pan_and_scan_min_crop_size=28,
    )
    processor = Gemma3Processor(
        image_processor=image_processor, tokenizer=tokenizer,
        chat_template=gemma3_chat_template(), image_seq_length=mm_tokens,
    )
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, ids["<end_of_turn>"]]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    publish_siglip_layout(out)
    processor.save_pretrained(out)
