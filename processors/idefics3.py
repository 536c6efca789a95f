"""Idefics3 / SmolVLM (model_type ``idefics3``): ``User:`` / ``Assistant:`` turns, sub-images.

Image rule (``Idefics3ImageProcessor``, ``M`` = ``max_image_size.longest_edge``, the
vision tower's canvas, 364 px in Idefics3-8B, 384 / 512 px in SmolVLM; ``L`` =
``size.longest_edge``, 4 x M in published checkpoints):

1. the longest edge is scaled to ``L`` (up *or* down), the short side to
   ``int(L / aspect)`` rounded up to an even number (both capped at 4096 px);
2. each side is rounded up to a multiple of ``M`` (the short side from ``int(long /
   aspect)``, the processor's own float arithmetic);
3. when a side is then longer than ``M`` the image is cut into ``rows x cols`` sub-images
   of ``M x M`` plus one global image (the whole image at ``M x M``); otherwise it is a
   single image.

Each (sub-)image costs ``image_seq_len = (M / patch)^2 / scale_factor^2`` ``<image>``
tokens (169 for Idefics3-8B: 26^2 / 4; 81 or 64 for SmolVLM). The prompt writes them as
``<fake_token_around_image><row_r_col_c>`` + ``<image>`` x seq per sub-image, a newline
per row, then ``\\n<fake_token_around_image><global-img>`` + ``<image>`` x seq +
``<fake_token_around_image>``; a single image is ``<fake_token_around_image><global-img>``
+ seq ``<image>`` + ``<fake_token_around_image>``. Only the ``<image>`` tokens are counted.

Because step 1 also *enlarges* small images, every image costs the same sub-image grid
along its long side (4 with the published ``L = 4 M``): ``processor.longest_edge`` (a
family setting, ``agents.N.processor: {longest_edge: ...}``) is the knob for the cost.

The published template starts with ``<|im_start|>`` (SmolVLM; Idefics3-8B writes
``<|begin_of_text|>``), writes ``Role:`` for a turn that opens with an image and
``Role: `` otherwise, and ends every turn with ``<end_of_utterance>\\n``; the generation
prompt is ``Assistant:``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from .base import Adapter
from .family import FamilyFacts, register_adapter, tiny_builder

MAX_IMAGE_SIZE = 4096  # the image processor's absolute cap (transformers' MAX_IMAGE_SIZE)


def _even_short_side(long: int, aspect: float) -> int:
    side = int(long / aspect)
    return side + 1 if side % 2 else side


def first_resize(width: int, height: int, longest_edge: int) -> tuple[int, int]:
    """Step 1: (width, height) with the longest edge at ``longest_edge``, then capped."""
    aspect = width / height
    if width >= height:
        width, height = longest_edge, _even_short_side(longest_edge, aspect)
    else:
        height, width = longest_edge, _even_short_side(longest_edge, 1 / aspect)
    width, height = max(width, 1), max(height, 1)
    aspect = width / height
    if width >= height and width > MAX_IMAGE_SIZE:
        width, height = MAX_IMAGE_SIZE, int(MAX_IMAGE_SIZE / aspect)
    elif height > width and height > MAX_IMAGE_SIZE:
        height, width = MAX_IMAGE_SIZE, int(MAX_IMAGE_SIZE * aspect)
    return max(width, 1), max(height, 1)


def sub_image_grid(width: int, height: int, longest_edge: int, tile: int) -> tuple[int, int]:
    """(rows, cols) of ``tile`` px sub-images an image is cut into; (0, 0) when it stays a
    single image. Steps 1-3 of the module docstring."""
    width, height = first_resize(width, height, longest_edge)
    aspect = width / height
    if width >= height:
        width = math.ceil(width / tile) * tile
        height = math.ceil(int(width / aspect) / tile) * tile
    else:
        height = math.ceil(height / tile) * tile
        width = math.ceil(int(height * aspect) / tile) * tile
    if height > tile or width > tile:
        return height // tile, width // tile
    return 0, 0


@dataclass
class Idefics3Settings:
    """``agents.N.processor`` keys of Idefics3 / SmolVLM."""

    longest_edge: int | None = None
    """Longest image edge before cutting into sub-images (size.longest_edge); every image is
    scaled to it, up or down. None: the checkpoint's (4 x the sub-image side)."""
    image_splitting: bool | None = None
    """Cut images into sub-images plus a global image (do_image_splitting); False: one image
    each. None: the checkpoint's."""


@register_adapter
class Idefics3Adapter(Adapter):
    family = "Idefics3 / SmolVLM"
    model_types = ("idefics3",)
    vllm_tested = True  # requests, weight push and generation run on vLLM's CPU build
    placeholder_tokens = ("<image>", "<fake_token_around_image>", "<global-img>", *(
        f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)))
    stop_tokens = ("<end_of_utterance>",)
    image_token = "<image>"
    settings = Idefics3Settings
    shared_prefix = True  # tests/test_shared_prefix.py: shared = unshared, images included

    @property
    def _ip(self):
        return self.processor.image_processor

    def _settings(self) -> Idefics3Settings:
        return getattr(self, "family_settings", None) or Idefics3Settings()

    def longest_edge(self) -> int:
        """``size.longest_edge``: the setting, else the checkpoint's."""
        value = self._settings().longest_edge or self._ip.size["longest_edge"]
        if value < 1:
            raise ValueError(f"processor.longest_edge={value}: must be a positive number of "
                             "pixels (e.g. 4 x the sub-image side)")
        return int(value)

    def image_splitting(self) -> bool:
        value = self._settings().image_splitting
        return bool(self._ip.do_image_splitting if value is None else value)

    def tile(self) -> int:
        return int(self._ip.max_image_size["longest_edge"])

    def processor_image_kwargs(self) -> dict:
        return {"size": {"longest_edge": self.longest_edge()},
                "do_image_splitting": self.image_splitting()}

    def sub_images(self, width: int, height: int) -> int:
        """(Sub-)images one image becomes: rows x cols + the global image, or 1."""
        if not self.image_splitting():
            return 1
        rows, cols = sub_image_grid(width, height, self.longest_edge(), self.tile())
        return rows * cols + 1 if rows or cols else 1

    def image_token_count(self, width: int, height: int) -> int:
        return self.sub_images(width, height) * int(self.processor.image_seq_len)

    def vllm_processor_kwargs(self) -> dict:
        """vLLM runs transformers' own processor for this family: the same image kwargs."""
        kwargs = {}
        if self._settings().longest_edge is not None:
            kwargs["size"] = {"longest_edge": self.longest_edge()}
        if self._settings().image_splitting is not None:
            kwargs["do_image_splitting"] = self.image_splitting()
        return kwargs


# ------------------------------------------------------------------------- tiny model

TILE = 56  # max_image_size; real: 364 (Idefics3-8B), 384 / 512 (SmolVLM)
PATCH = 14
SCALE = 2  # pixel-shuffle factor: (56 / 14)^2 / 2^2 = 4 tokens per sub-image
ROW_COL = [f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<fake_token_around_image>",
            "<image>", "<end_of_utterance>", "<global-img>", *ROW_COL]


def chat_template() -> str:
    """SmolVLM-Instruct's published template (Idefics3-8B's, with ``<|im_start|>``)."""
    return (
        "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
        "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
        "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
        "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}"
        "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
    )


# Token counts of the tiny model (M = 56, L = 4 x 56 = 224, 4 <image> per sub-image),
# derived by hand from the rule of the module docstring:
#  100 x 60: step 1 -> 224 wide, int(224 / 1.667) = 134 (even) high; step 2 -> 224 x
#     ceil(134 / 56) * 56 = 168 -> 3 rows x 4 cols = 12 + 1 global = 13 -> 52 tokens
#  60 x 130: step 1 -> 224 high, int(224 * 60/130) = 103 -> 104 (even) wide; step 2 ->
#     ceil(104 / 56) * 56 = 112 wide -> 4 rows x 2 cols = 8 + 1 -> 36 tokens
#  250 x 60: step 1 -> 224 x int(224 / 4.167) = 53 -> 54; step 2 -> 224 x 56 -> 1 row x
#     4 cols = 4 + 1 -> 20 tokens
#  56 x 56: step 1 enlarges it to 224 x 224 -> 4 x 4 = 16 + 1 -> 68 tokens
IMAGE_TOKEN_CASES = ((100, 60, 52), (60, 130, 36), (250, 60, 20), (56, 56, 68))


@tiny_builder("idefics3", "idefics3", facts=FamilyFacts(
    model_class="Idefics3ForConditionalGeneration",
    processor_class="Idefics3Processor",
    turn_pattern=(r"^<\|im_start\|>System: You are a helpful assistant\.<end_of_utterance>\n"
                  r"User: .+<end_of_utterance>\nAssistant:$"),
    stop_tokens=("<end_of_utterance>",),
    image_token_cases=IMAGE_TOKEN_CASES,
    notes=("every image is scaled to processor.longest_edge (up or down) before it is cut "
           "into sub-images, so small images cost as much as large ones; SmolVLM2 "
           "(model_type smolvlm) is a separate family (needs num2words)"),
))
def build(out: Path, seed: int) -> None:
    """Tiny SmolVLM-shaped Idefics3: SigLIP-style tower (56 px canvas, patch 14, pixel
    shuffle 2), Llama text model, SmolVLM's tokens and template."""
    import torch
    from transformers import (
        Idefics3Config,
        Idefics3ForConditionalGeneration,
        Idefics3ImageProcessor,
        Idefics3Processor,
    )

    tokenizer, config_kwargs, ip_kwargs = tiny_parts(SPECIALS)
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration(Idefics3Config(**config_kwargs))
    processor = Idefics3Processor(image_processor=Idefics3ImageProcessor(**ip_kwargs),
                                  tokenizer=tokenizer, image_seq_len=TINY_SEQ_LEN,
                                  chat_template=chat_template())
    save_tiny(out, model, processor, tokenizer)


TINY_SEQ_LEN = (TILE // PATCH) ** 2 // SCALE ** 2


def tiny_parts(specials: list[str]):
    """The tokenizer, model-config kwargs and image-processor kwargs the tiny Idefics3
    and SmolVLM builders share (the two families differ in class names, not in shape)."""
    from .tiny import train_byte_level_bpe

    tokenizer = train_byte_level_bpe(specials)
    tokenizer.bos_token = "<|im_start|>"
    tokenizer.eos_token = "<end_of_utterance>"
    tokenizer.pad_token = "<|im_end|>"
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in specials}
    config = dict(
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, image_size=TILE, patch_size=PATCH),
        text_config=dict(
            model_type="llama", vocab_size=len(tokenizer), hidden_size=64,
            intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1, head_dim=32, max_position_embeddings=4096,
            rms_norm_eps=1e-5, bos_token_id=ids["<|im_start|>"],
            eos_token_id=ids["<end_of_utterance>"], pad_token_id=tokenizer.pad_token_id,
        ),
        image_token_id=ids["<image>"], scale_factor=SCALE, pad_token_id=tokenizer.pad_token_id,
    )
    image_processor = dict(
        size={"longest_edge": 4 * TILE}, max_image_size={"longest_edge": TILE},
        do_image_splitting=True, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
    )
    return tokenizer, config, image_processor


def save_tiny(out: Path, model, processor, tokenizer) -> None:
    """Generation config (stop at ``<end_of_utterance>``) and ``save_pretrained`` of both."""
    model.generation_config.eos_token_id = [tokenizer.convert_tokens_to_ids("<end_of_utterance>")]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    model.save_pretrained(out)
    processor.save_pretrained(out)
