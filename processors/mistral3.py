"""Mistral-3 (Mistral-Small-3.1 / 3.2, Pixtral vision): ``[INST]`` prompts, row-broken images.

Image rule (``PixtralImageProcessor`` + ``PixtralProcessor``): an image whose longer side
exceeds ``longest_edge`` (1540 px in real checkpoints) is scaled down by
``ratio = max(H, W) / longest_edge`` with each side floored; then each side is rounded *up*
to a multiple of ``step = patch_size x spatial_merge_size`` (14 x 2 = 28: the vision tower
cuts 14 px patches and the projector merges 2 x 2 of them into one token). An image of
H' x W' (after that) is written as H'/28 rows of W'/28 ``[IMG]`` tokens, each row ended by
``[IMG_BREAK]`` and the last row by ``[IMG_END]``, so it costs (H'/28) x (W'/28) ``[IMG]``
tokens (what :meth:`Mistral3Adapter.image_token_count` counts) plus H'/28 row delimiters.
``agents.N.processor: {longest_edge: N}`` lowers the cap (fewer tokens per image); the
adapter resizes the image itself then, so vLLM, whose cap is the checkpoint's, sees the
same image.

The published template always writes a ``[SYSTEM_PROMPT]`` block (a long built-in
default when the conversation has no system message), then ``[INST]`` ... ``[/INST]``
per user turn, and has no generation prompt: the assistant's text follows ``[/INST]``
directly and ends with ``</s>``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from .base import Adapter
from .family import FamilyFacts, register_adapter, tiny_builder


def pixtral_grid(width: int, height: int, longest_edge: int, step: int) -> tuple[int, int]:
    """(rows, cols) of image tokens for one image, by the Pixtral rule (module docstring):
    scale down to ``longest_edge`` (floor), then ceil each side to ``step`` px cells."""
    ratio = max(height / longest_edge, width / longest_edge)
    if ratio > 1:
        height, width = int(math.floor(height / ratio)), int(math.floor(width / ratio))
    return (height - 1) // step + 1, (width - 1) // step + 1


def capped_size(width: int, height: int, longest_edge: int) -> tuple[int, int]:
    """(W, H) after Pixtral's cap: scaled down by max(W, H) / longest_edge, sides floored."""
    ratio = max(height / longest_edge, width / longest_edge)
    if ratio <= 1:
        return width, height
    return int(math.floor(width / ratio)), int(math.floor(height / ratio))


@dataclass
class Mistral3Settings:
    """``agents.N.processor`` keys of Mistral-3 (Pixtral images)."""

    longest_edge: int | None = None
    """Cap on an image's longer side in px, below the checkpoint's (real: 1540): fewer
    image tokens per image. None: the checkpoint's."""


@register_adapter
class Mistral3Adapter(Adapter):
    family = "Mistral-3 (Pixtral)"
    model_types = ("mistral3",)
    vllm_tested = True  # requests, weight push and generation run on vLLM's CPU build
    packing = True  # tests/test_packing.py: packed = padded (per-image tensors kept in order)
    shared_prefix = True  # tests/test_shared_prefix.py: shared = unshared, images included
    placeholder_tokens = ("[IMG]", "[IMG_BREAK]", "[IMG_END]")
    stop_tokens = ("</s>",)
    settings = Mistral3Settings

    @property
    def step(self) -> int:
        """Pixels per image token side: the processor's patch size x spatial merge."""
        return int(self.processor.patch_size) * int(self.processor.spatial_merge_size)

    def longest_edge(self) -> int:
        """The cap in force: the setting's, when below the checkpoint's."""
        own = int(self.processor.image_processor.size["longest_edge"])
        cap = self.family_settings.longest_edge
        if cap is not None and cap < 1:
            raise ValueError(f"processor.longest_edge={cap}: must be a positive number of px")
        return min(own, int(cap)) if cap else own

    def resize_image(self, image, *, problem_id: str, index: int):
        """Apply the cap here, so the processor (and vLLM's, whose cap is the
        checkpoint's) finds the image within its limit and only rounds it to 28 px."""
        size = capped_size(*image.size, self.longest_edge())
        return image if size == image.size else image.resize(size, Image.BICUBIC)

    def image_grid(self, width: int, height: int) -> tuple[int, int]:
        return pixtral_grid(width, height, self.longest_edge(), self.step)

    def image_token_count(self, width: int, height: int) -> int:
        rows, cols = self.image_grid(width, height)
        return rows * cols


# --------------------------------------------------------------------------- tiny model

#: Mistral-Small-3.1-24B-Instruct-2503's published template (content-list form), with its
#: long built-in default system message shortened and the date dropped (tiny models are
#: built offline and must render the same text on every day).
MISTRAL3_CHAT_TEMPLATE = (
    "{%- set default_system_message = 'You are a helpful assistant.' %}"
    "{{- bos_token }}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- if messages[0]['content'] is string %}{%- set system_message = messages[0]['content'] %}"
    "{%- else %}{%- set system_message = messages[0]['content'][0]['text'] %}{%- endif %}"
    "{%- set loop_messages = messages[1:] %}"
    "{%- else %}{%- set system_message = default_system_message %}"
    "{%- set loop_messages = messages %}{%- endif %}"
    "{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}"
    "{%- for message in loop_messages %}"
    "{%- if message['role'] == 'user' %}"
    "{%- if message['content'] is string %}{{- '[INST]' + message['content'] + '[/INST]' }}"
    "{%- else %}{{- '[INST]' }}"
    "{%- for block in message['content'] %}"
    "{%- if block['type'] == 'text' %}{{- block['text'] }}"
    "{%- elif block['type'] in ['image', 'image_url'] %}{{- '[IMG]' }}"
    "{%- else %}{{- raise_exception('Only text and image blocks are supported in message content!') }}"
    "{%- endif %}{%- endfor %}{{- '[/INST]' }}{%- endif %}"
    "{%- elif message['role'] == 'system' %}"
    "{{- '[SYSTEM_PROMPT]' + (message['content'] if message['content'] is string"
    " else message['content'][0]['text']) + '[/SYSTEM_PROMPT]' }}"
    "{%- elif message['role'] == 'assistant' %}"
    "{%- if message['content'] is string %}{{- message['content'] + eos_token }}"
    "{%- else %}{{- message['content'][0]['text'] + eos_token }}{%- endif %}"
    "{%- else %}{{- raise_exception('Only user, system and assistant roles are supported!') }}"
    "{%- endif %}{%- endfor %}"
)

#: (the row delimiters come before [IMG] here, unlike the published ids 10 / 12 / 13: a
#: test that scores a suppressed id as a completion token takes the lowest one, and an
#: [IMG] in a completion would be read as an image slot by the model)
MISTRAL3_SPECIALS = ["<unk>", "<s>", "</s>", "<pad>", "[INST]", "[/INST]", "[SYSTEM_PROMPT]",
                     "[/SYSTEM_PROMPT]", "[IMG_BREAK]", "[IMG_END]", "[IMG]"]

# Tiny: patch 14, merge 2 (as real) -> 28 px per token; longest edge 112 px (real: 1540).
# Tokens = rows x cols [IMG] after "scale to longest edge (floor), ceil sides to 28":
#   100 x 60 : fits -> rows ceil(60/28) = 3, cols ceil(100/28) = 4 -> 12
#    28 x 28 : 1 x 1 -> 1
#   600 x 400: ratio 600/112 = 5.357 -> 112 x floor(74.67) = 74 -> rows ceil(74/28) = 3,
#              cols 112/28 = 4 -> 12
#    60 x 250: ratio 250/112 = 2.232 -> floor(26.88) = 26 x 112 -> rows 4, cols 1 -> 4
#    57 x 29 : rows ceil(29/28) = 2, cols ceil(57/28) = 3 -> 6
MISTRAL3_CASES = ((100, 60, 12), (28, 28, 1), (600, 400, 12), (60, 250, 4), (57, 29, 6))
TINY_LONGEST_EDGE = 112

MISTRAL3_FACTS = FamilyFacts(
    model_class="Mistral3ForConditionalGeneration",
    processor_class="PixtralProcessor",
    turn_pattern=(r"^<s>\[SYSTEM_PROMPT\]You are a helpful assistant\.\[/SYSTEM_PROMPT\]"
                  r"\[INST\].*\[/INST\]$"),
    stop_tokens=("</s>",),
    image_token_cases=MISTRAL3_CASES,
    notes=("Images cost rows x cols [IMG] (28 px cells, longest edge capped) plus one "
           "[IMG_BREAK] / [IMG_END] per row; processor: {longest_edge: N} lowers the cap; "
           "the template has no generation prompt (the answer follows [/INST])."),
)


@tiny_builder("mistral3", "mistral3", facts=MISTRAL3_FACTS)
def build_tiny_mistral3(out: Path, seed: int) -> None:
    """Mistral3ForConditionalGeneration (Pixtral vision tower, Mistral text model) with a
    PixtralProcessor; tiny dims, the family's patch / merge rule, a 112 px longest edge."""
    import torch
    from transformers import (
        Mistral3Config,
        Mistral3ForConditionalGeneration,
        PixtralImageProcessor,
        PixtralProcessor,
    )

    from .tiny import train_byte_level_bpe

    tokenizer = train_byte_level_bpe(MISTRAL3_SPECIALS)
    tokenizer.bos_token, tokenizer.eos_token = "<s>", "</s>"
    tokenizer.unk_token, tokenizer.pad_token = "<unk>", "<pad>"
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in MISTRAL3_SPECIALS}
    config = Mistral3Config(
        text_config=dict(
            model_type="mistral", vocab_size=len(tokenizer), hidden_size=64,
            intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=32, max_position_embeddings=4096,
            sliding_window=None, bos_token_id=ids["<s>"], eos_token_id=ids["</s>"],
            pad_token_id=ids["<pad>"],
        ),
        vision_config=dict(
            model_type="pixtral", hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=2, head_dim=16, patch_size=14, image_size=TINY_LONGEST_EDGE,
        ),
        image_token_index=ids["[IMG]"], spatial_merge_size=2, vision_feature_layer=-1,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = Mistral3ForConditionalGeneration(config)
    image_processor = PixtralImageProcessor(
        size={"longest_edge": TINY_LONGEST_EDGE}, patch_size={"height": 14, "width": 14},
    )
    processor = PixtralProcessor(
        image_processor=image_processor, tokenizer=tokenizer, patch_size=14,
        spatial_merge_size=2, chat_template=MISTRAL3_CHAT_TEMPLATE,
    )
    model.generation_config.eos_token_id = [ids["</s>"]]
    model.generation_config.pad_token_id = ids["<pad>"]
    model.save_pretrained(out)
    processor.save_pretrained(out)
