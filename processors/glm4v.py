"""GLM-4.1V (``Glm4vForConditionalGeneration``): ``[gMASK]<sop>`` prompts, Qwen2-VL-like
native-resolution images, 3-D (M-)RoPE over text / image rows / image columns.

Image rule (``Glm4vImageProcessor``'s ``smart_resize``): each side is rounded to a multiple
of ``factor = patch_size x merge_size`` (14 x 2 = 28), then, with ``t = temporal_patch_size``
(2: a still image is its own two frames), the image is scaled so that ``t x H x W`` lies in
[``size.shortest_edge``, ``size.longest_edge``] (so the per-image pixel budget is *half* the
configured numbers; sides below 28 px are first scaled up to 28). The tower cuts 14 px
patches and merges 2 x 2 into one token: an image of H' x W' costs (H'/28) x (W'/28)
``<|image|>`` tokens, wrapped in ``<|begin_of_image|>`` ... ``<|end_of_image|>``.

The options' ``min_pixels`` / ``max_pixels`` are per-image budgets, as for the Qwen
families (the adapter doubles them into the processor's units). The processor applies the
rule itself and it is idempotent (a resized image is already
on the grid and in budget), so the adapter does not resize; vLLM, re-applying it, sees the
same grid. ``mm_token_type_ids`` (1 on image tokens) feed the 3-D position ids; completion
tokens are text (0), the zero-extension ``per_token_keys`` gives them.
"""

from __future__ import annotations

from pathlib import Path

from .base import Adapter, mrope_packed_position_ids
from .family import FamilyFacts, register_adapter, tiny_builder


@register_adapter
class Glm4vAdapter(Adapter):
    family = "GLM-4.1V"
    model_types = ("glm4v",)
    vllm_tested = True  # requests, weight push and generation run on vLLM's CPU build
    placeholder_tokens = ("<|image|>", "<|begin_of_image|>", "<|end_of_image|>", "<|video|>",
                          "<|begin_of_video|>", "<|end_of_video|>")
    stop_tokens = ("<|user|>", "<|observation|>", "<|endoftext|>")
    per_token_keys = ("mm_token_type_ids",)
    takes_video = True
    packing = True  # tests/test_packing.py: packed = padded, with and without images
    shared_prefix = True  # tests/test_shared_prefix.py: shared = unshared, 3-D RoPE and images

    @property
    def _ip(self):
        return self.processor.image_processor

    def packed_position_ids(self, model, batch):
        """3-D RoPE: text positions plus the model's temporal / height / width ids, per
        sequence (``base.mrope_packed_position_ids``)."""
        return mrope_packed_position_ids(model, batch)

    def processor_size(self) -> dict:
        """The image processor's ``size`` (``shortest_edge`` / ``longest_edge``: its
        budget on t x H x W) with the options' per-image ``min_pixels`` / ``max_pixels``
        put in its units (times ``temporal_patch_size``), so ``max_pixels`` means the
        same per-image budget as for the Qwen families."""
        size = {k: int(self._ip.size[k]) for k in ("shortest_edge", "longest_edge")}
        t = int(self._ip.temporal_patch_size)
        if self.options.min_pixels:
            size["shortest_edge"] = t * int(self.options.min_pixels)
        if self.options.max_pixels:
            size["longest_edge"] = t * int(self.options.max_pixels)
        if size["shortest_edge"] > size["longest_edge"]:
            raise ValueError(f"min_pixels={size['shortest_edge'] // t} is larger than "
                             f"max_pixels={size['longest_edge'] // t}; set model.min_pixels "
                             "<= model.max_pixels")
        return size

    def processor_image_kwargs(self) -> dict:
        return {"size": self.processor_size()}

    def vllm_processor_kwargs(self) -> dict:
        return {"size": self.processor_size()}

    def image_token_count(self, width: int, height: int) -> int:
        """``<|image|>`` tokens: patches of the smart-resized image (the image processor's
        own arithmetic, with :meth:`processor_size`) over merge_size^2."""
        patches = int(self._ip.get_number_of_image_patches(height, width,
                                                            {"size": self.processor_size()}))
        return patches // int(self._ip.merge_size) ** 2


# --------------------------------------------------------------------------- tiny model

#: GLM-4.1V-9B-Thinking's published template, as rendered (the Jinja there relies on
#: trim_blocks / lstrip_blocks; this is the same output written without layout), and with
#: content lists accepted for the system message too.
GLM4V_CHAT_TEMPLATE = (
    "[gMASK]<sop>"
    "{%- for msg in messages %}"
    "{%- if msg.role == 'system' %}<|system|>{{ '\\n' }}"
    "{%- if msg.content is string %}{{ msg.content }}"
    "{%- else %}{%- for item in msg.content %}{%- if item.type == 'text' %}{{ item.text }}"
    "{%- endif %}{%- endfor %}{%- endif %}"
    "{%- elif msg.role == 'user' %}<|user|>{{ '\\n' }}"
    "{%- if msg.content is string %}{{ msg.content }}"
    "{%- else %}{%- for item in msg.content %}"
    "{%- if item.type == 'video' or 'video' in item %}<|begin_of_video|><|video|><|end_of_video|>"
    "{%- elif item.type == 'image' or 'image' in item %}<|begin_of_image|><|image|><|end_of_image|>"
    "{%- elif item.type == 'text' %}{{ item.text }}"
    "{%- endif %}{%- endfor %}{%- endif %}"
    "{%- elif msg.role == 'assistant' %}<|assistant|>{{ '\\n' }}"
    "{%- if msg.content is string %}{{ msg.content }}"
    "{%- else %}{{ msg.content[0].text }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>{{ '\\n' }}{%- endif %}"
)

GLM4V_SPECIALS = ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>",
                  "<|system|>", "<|user|>", "<|assistant|>", "<|observation|>",
                  "<|begin_of_image|>", "<|end_of_image|>", "<|begin_of_video|>",
                  "<|end_of_video|>", "<|image|>", "<|video|>"]

# Tiny: patch 14, merge 2, temporal patch 2 (as real); size.shortest_edge = 2 x 4 x 784 =
# 6272 and size.longest_edge = 2 x 64 x 784 = 100352, i.e. 4..64 tokens per image (the
# budget is on t x H x W with t = 2). Tokens = (H'/28) x (W'/28):
#   100 x 60 : round(60/28) = 2 -> 56, round(100/28) = 4 -> 112; 2*56*112 = 12544 in range
#              -> 2 x 4 = 8
#    28 x 28 : 2*28*28 = 1568 < 6272 -> beta = sqrt(6272 / (2*784)) = 2
#              -> ceil(28*2/28) = 2 per side -> 4
#   600 x 400: round -> 392 x 588, 2*392*588 = 460992 > 100352 ->
#              beta = sqrt(2*400*600 / 100352) = 2.187 -> floor(400/2.187/28) = floor(6.53) = 6,
#              floor(600/2.187/28) = floor(9.80) = 9 -> 54
#    60 x 130: round(130/28) = round(4.64) = 5, round(60/28) = 2; 2*56*140 = 15680 in range
#              -> 5 x 2 = 10
GLM4V_CASES = ((100, 60, 8), (28, 28, 4), (600, 400, 54), (60, 130, 10))
TINY_MIN_PIXELS, TINY_MAX_PIXELS = 2 * 4 * 28 * 28, 2 * 64 * 28 * 28

GLM4V_FACTS = FamilyFacts(
    model_class="Glm4vForConditionalGeneration",
    processor_class="Glm4vProcessor",
    turn_pattern=(r"^\[gMASK\]<sop><\|system\|>\nYou are a helpful assistant\.<\|user\|>\n"
                  r".*<\|assistant\|>\n$"),
    stop_tokens=("<|user|>", "<|observation|>", "<|endoftext|>"),
    image_token_cases=GLM4V_CASES,
    notes=("Qwen2-VL-like 28 px cells; the processor's budget is on 2 x H x W (the "
           "temporal patch): min_pixels / max_pixels are per image and doubled for it; "
           "3-D RoPE; the Thinking template adds no <think> (the model writes it)."),
)


@tiny_builder("glm4v", "glm4v", facts=GLM4V_FACTS)
def build_tiny_glm4v(out: Path, seed: int) -> None:
    """Glm4vForConditionalGeneration with a Glm4vProcessor; tiny dims (head_dim 32 with
    GLM's partial rotary 0.5 -> 16 rotary dims split 2 / 3 / 3 over t / h / w)."""
    import torch
    from transformers import (
        Glm4vConfig,
        Glm4vForConditionalGeneration,
        Glm4vImageProcessor,
        Glm4vProcessor,
        Glm4vVideoProcessor,
    )

    from .tiny import train_byte_level_bpe

    tokenizer = train_byte_level_bpe(GLM4V_SPECIALS)
    tokenizer.eos_token = tokenizer.pad_token = "<|endoftext|>"
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in GLM4V_SPECIALS}
    stops = [ids["<|endoftext|>"], ids["<|user|>"], ids["<|observation|>"]]
    config = Glm4vConfig(
        text_config=dict(
            vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
            num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
            max_position_embeddings=4096,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                             "partial_rotary_factor": 0.5,
                             "mrope_section": [2, 3, 3]},  # real: 8, 12, 12 (of 32)
            eos_token_id=stops, pad_token_id=tokenizer.pad_token_id,
        ),
        vision_config=dict(
            depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
            patch_size=14, spatial_merge_size=2, temporal_patch_size=2, image_size=56,
        ),
        image_token_id=ids["<|image|>"], video_token_id=ids["<|video|>"],
        image_start_token_id=ids["<|begin_of_image|>"], image_end_token_id=ids["<|end_of_image|>"],
        video_start_token_id=ids["<|begin_of_video|>"], video_end_token_id=ids["<|end_of_video|>"],
    )
    torch.manual_seed(seed)
    model = Glm4vForConditionalGeneration(config)
    image_processor = Glm4vImageProcessor(
        patch_size=14, merge_size=2, temporal_patch_size=2,
        size={"shortest_edge": TINY_MIN_PIXELS, "longest_edge": TINY_MAX_PIXELS},
    )
    processor = Glm4vProcessor(
        image_processor=image_processor, tokenizer=tokenizer,
        video_processor=Glm4vVideoProcessor(), chat_template=GLM4V_CHAT_TEMPLATE,
    )
    model.generation_config.eos_token_id = stops
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    processor.save_pretrained(out)
