"""Qwen2-VL: Qwen2.5-VL's predecessor, with the same prompt and image rules.

Image rule: ``smart_resize`` with ``factor = patch_size x merge_size = 14 x 2 = 28``, each
side a multiple of 28 and the pixel count in [``min_pixels``, ``max_pixels``] (the
published preprocessor config: 3,136 to 12,845,056 px, 4 to 16,384 tokens), aspect ratio
over 200 refused; an image of H x W after resizing costs (H / 28) x (W / 28) ``<|image_pad|>``
tokens between ``<|vision_start|>`` and ``<|vision_end|>``. The chat template is the one
Qwen2.5-VL later reused (ChatML, a default system turn "You are a helpful assistant."
when the conversation has none). So the Qwen2.5-VL adapter is reused as is (subclassed).

What differs is inside the model, where no adapter code reaches: the vision tower has full
attention in every block (no windows) with a LayerNorm'd MLP merger, and M-RoPE's temporal
ids do not scale with the frame rate (videos only).
"""

from __future__ import annotations

from pathlib import Path

from .family import FamilyFacts, register_adapter, tiny_builder
from .qwen2_5_vl import Qwen2_5_VLAdapter


@register_adapter
class Qwen2VLAdapter(Qwen2_5_VLAdapter):
    """Qwen2.5-VL's rules: 28 px cells, ChatML, ``mm_token_type_ids`` for M-RoPE."""

    family = "Qwen2-VL"
    model_types = ("qwen2_vl",)
    vllm_tested = True  # requests, weight push and generation run on vLLM's CPU build


# ------------------------------------------------------------------------- tiny models

QWEN2_VL_SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]


def qwen2_vl_chat_template() -> str:
    """Qwen2-VL-Instruct's published template: the same text as Qwen2.5-VL's (ChatML with a
    default system turn, images as ``<|vision_start|><|image_pad|><|vision_end|>``,
    ``Picture n:`` with ``add_vision_id``, videos likewise), so it is that one."""
    from .tiny import qwen_chat_template

    return qwen_chat_template()


# Tiny Qwen2-VL image rule (patch 14, merge 2 -> factor 28; min_pixels 4*28*28 = 3136,
# max_pixels 64*28*28 = 50176). Tokens = (H' / 28) * (W' / 28) after smart_resize:
#  100 x 60 : H' = round(60/28)*28 = 56, W' = round(100/28 = 3.57)*28 = 112; 6272 px in
#             range -> 2 * 4 = 8 tokens
#   28 x 28 : 784 px < 3136 -> beta = sqrt(3136/784) = 2 -> H' = W' = ceil(56/28)*28 = 56
#             -> 2 * 2 = 4 tokens
#  600 x 400: rounded 392 x 588 = 230496 px > 50176 -> beta = sqrt(240000/50176) = 2.187;
#             H' = floor(400/2.187/28) = floor(6.53) = 6 cells, W' = floor(600/2.187/28)
#             = floor(9.80) = 9 cells -> 54 tokens
#   60 x 130: H' = round(4.64) = 5 cells, W' = round(2.14) = 2 cells; 7840 px -> 10 tokens
QWEN2_VL_IMAGE_CASES = ((100, 60, 8), (28, 28, 4), (600, 400, 54), (60, 130, 10))


@tiny_builder("qwen2_vl", "qwen2_vl", facts=FamilyFacts(
    model_class="Qwen2VLForConditionalGeneration", processor_class="Qwen2VLProcessor",
    turn_pattern=(r"^<\|im_start\|>system\nYou are a helpful assistant\.<\|im_end\|>\n"
                  r"<\|im_start\|>user\n.+<\|im_end\|>\n<\|im_start\|>assistant\n$"),
    stop_tokens=("<|im_end|>", "<|endoftext|>"),
    image_token_cases=QWEN2_VL_IMAGE_CASES,
    notes="Same prompt and image rules as Qwen2.5-VL; videos not used."))
def build_qwen2_vl(out: Path, seed: int) -> None:
    """Tiny Qwen2-VL: hidden 64, 2 decoder layers (head_dim 32, M-RoPE sections 4 / 6 / 6,
    published 16 / 24 / 24 for head_dim 128), a 2-block vision tower of width 32."""
    import torch
    from transformers import (
        Qwen2VLConfig,
        Qwen2VLForConditionalGeneration,
        Qwen2VLImageProcessor,
        Qwen2VLProcessor,
        Qwen2VLVideoProcessor,
    )

    from .tiny import train_byte_level_bpe

    tokenizer = train_byte_level_bpe(QWEN2_VL_SPECIALS)
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|endoftext|>"
    ids = {t: int(tokenizer.convert_tokens_to_ids(t)) for t in QWEN2_VL_SPECIALS}
    config = Qwen2VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,  # head_dim 32
            max_position_embeddings=4096,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                             "mrope_section": [4, 6, 6]},
            bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
            pad_token_id=tokenizer.pad_token_id,
        ),
        vision_config=dict(depth=2, embed_dim=32, hidden_size=64, mlp_ratio=2, num_heads=2,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
    )
    torch.manual_seed(seed)
    model = Qwen2VLForConditionalGeneration(config)
    image_processor = Qwen2VLImageProcessor(
        patch_size=14, merge_size=2, temporal_patch_size=2,
        min_pixels=4 * 28 * 28, max_pixels=64 * 28 * 28,
    )
    processor = Qwen2VLProcessor(
        image_processor=image_processor, tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(), chat_template=qwen2_vl_chat_template(),
    )
    model.generation_config.eos_token_id = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    processor.save_pretrained(out)
