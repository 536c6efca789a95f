"""Llama-3.2-Vision (``MllamaForConditionalGeneration``): Llama-3 header prompts, images
read through cross-attention, not as prompt tokens.

Each image is one ``<|image|>`` token in the text. The vision tower's output is not
scattered into the token sequence: every few decoder layers a cross-attention layer lets
each text token attend to the image tiles named by ``cross_attention_mask``
[B, P, n_images, n_tiles] (1 = this token sees this tile of this image). The processor
writes it so a token sees the images at or before it (the last image group onward
attends to the end of the sequence), so a completion token sees what the last prompt
token sees: a training batch repeats the mask's last row over the completion
(:meth:`MllamaAdapter.extend_per_token`), exactly as ``generate`` grows it per new token.

Image rule (``MllamaImageProcessor``): among the tile grids rows x cols with
rows x cols <= ``max_image_tiles`` (4), canvas = (rows x tile, cols x tile) with ``tile``
= 560 px in real checkpoints; each canvas's scale is min(canvas_h / H, canvas_w / W).
If some canvas needs no downscaling (scale >= 1) the smallest such scale wins, else the
largest scale below 1; ties go to the smallest canvas area. The image is resized into
that canvas (aspect kept), zero-padded to it and cut into rows x cols tiles, padded to
``max_image_tiles`` per image. ``aspect_ratio_ids`` (index + 1 of (rows, cols) in the
supported list [(1,1), (1,2), (1,3), (1,4), (2,1), (2,2), (3,1), (4,1)]) and
``aspect_ratio_mask`` (1 on real tiles) go to the vision tower per image.

Template limit: the published template refuses a system message in a conversation with
images ("Prompting with images is incompatible with system messages"); this adapter
folds the system prompt into the start of the user turn then, and gives the template the
system message as a string (its ``|trim`` does not take a content list). With images
apart in the text (``<image1> ... <image2> ...``), a token sees only the last image before
it (the processor's rule), so the answer sees the last image; images together see all.

vLLM: ``vllm_request`` has the documented form, but vLLM removed its encoder-decoder
models other than Whisper with the V0 engine (vllm-project/vllm#24907, Sept. 2025), Mllama
included: serve this family with the ``hf`` rollout engine.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .base import DEFAULT_SYSTEM_PROMPT, Adapter, PromptBatch
from .family import FamilyFacts, register_adapter, tiny_builder


def supported_grids(max_tiles: int) -> list[tuple[int, int]]:
    """The tile grids (rows, cols) with rows x cols <= ``max_tiles``, in Mllama's order
    (the order ``aspect_ratio_ids`` index and canvas ties are broken in)."""
    return [(r, c) for r in range(1, max_tiles + 1) for c in range(1, max_tiles + 1)
            if r * c <= max_tiles]


def mllama_grid(width: int, height: int, max_tiles: int, tile: int) -> tuple[int, int]:
    """(rows, cols) of tiles one image is cut into, by the rule in the module docstring."""
    grids = supported_grids(max_tiles)
    scales = {g: min(g[0] * tile / height, g[1] * tile / width) for g in grids}
    up = [s for s in scales.values() if s >= 1]
    chosen = min(up) if up else max(scales.values())
    return min((g for g, s in scales.items() if s == chosen), key=lambda g: g[0] * g[1])


@register_adapter
class MllamaAdapter(Adapter):
    family = "Llama-3.2-Vision"
    model_types = ("mllama",)
    placeholder_tokens = ("<|image|>",)
    stop_tokens = ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>")
    per_token_keys = ("cross_attention_mask",)
    shared_prefix = True  # tests/test_shared_prefix.py: shared = unshared, cross-attention rows laid out

    @property
    def _ip(self):
        return self.processor.image_processor

    def tile_grid(self, width: int, height: int) -> tuple[int, int]:
        """(rows, cols) of tiles for an image, with the checkpoint's tile size and limit."""
        return mllama_grid(width, height, int(self._ip.max_image_tiles), int(self._ip.size["height"]))

    def tiles_for(self, width: int, height: int) -> int:
        rows, cols = self.tile_grid(width, height)
        return rows * cols

    def aspect_ratio_id(self, width: int, height: int) -> int:
        """The ``aspect_ratio_ids`` entry of an image: 1 + index of its grid."""
        grids = supported_grids(int(self._ip.max_image_tiles))
        return grids.index(self.tile_grid(width, height)) + 1

    def image_token_count(self, width: int, height: int) -> int:
        """One ``<|image|>`` per image, whatever its size: the pixels reach the decoder
        through cross-attention (:meth:`tiles_for` says how many tiles they are)."""
        return 1

    def messages(self, problem, system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
                 instruction: str | None = None) -> list[dict]:
        """The base messages, made acceptable to the published template: the system text
        as a string, and folded into the user turn when the problem has images."""
        msgs = super().messages(problem, system_prompt, instruction)
        if msgs[0]["role"] != "system":
            return msgs
        system = msgs[0]["content"][0]["text"]
        if not problem.images:
            return [{"role": "system", "content": system}, *msgs[1:]]
        user = msgs[1]
        return [{"role": "user", "content": [{"type": "text", "text": system + "\n\n"},
                                             *user["content"]]}]

    def encode_prompts(self, rendered):
        """The base batch, made to work when some prompts have no image.

        Upstream (transformers 5.24, ``MllamaImageProcessor._preprocess``) drops the
        prompts without images from ``aspect_ratio_ids`` / ``aspect_ratio_mask`` while
        ``pixel_values`` keeps a (zero) row for them, and ``pad_batches_and_tiles`` fails
        when the first prompt has no image. So the batch is encoded with an image-bearing
        prompt first, the aspect-ratio rows are put back at their prompts' places (the
        others filled as the processor pads a missing image: id 0, first tile on), and
        every tensor is returned in the caller's order."""
        rendered = list(rendered)
        first = next((i for i, r in enumerate(rendered) if r.images), 0)
        order = [first] + [i for i in range(len(rendered)) if i != first]
        batch = super().encode_prompts([rendered[i] for i in order])
        inputs = batch.inputs
        ids = inputs.get("aspect_ratio_ids")
        if ids is not None and ids.shape[0] != len(rendered):
            rows = [k for k, i in enumerate(order) if rendered[i].images]
            mask = inputs["aspect_ratio_mask"]  # [n_with_images, I, tiles]
            full_ids = ids.new_zeros((len(rendered), *ids.shape[1:]))  # [N, I]
            full_mask = mask.new_zeros((len(rendered), *mask.shape[1:]))  # [N, I, tiles]
            full_mask[:, :, 0] = 1
            full_ids[rows], full_mask[rows] = ids, mask
            inputs["aspect_ratio_ids"], inputs["aspect_ratio_mask"] = full_ids, full_mask
        back = sorted(range(len(order)), key=order.__getitem__)  # inverse permutation
        return PromptBatch(inputs={k: v[back] for k, v in inputs.items()},
                           problem_ids=[batch.problem_ids[k] for k in back],
                           image_token_counts=[batch.image_token_counts[k] for k in back])

    def extend_per_token(self, key: str, tensor: torch.Tensor, n_completion: int) -> torch.Tensor:
        """``cross_attention_mask`` [N, P, images, tiles] -> [N, P + T, images, tiles] by
        repeating its last row (what ``generate`` does per decoded token); other keys as
        the base."""
        if key != "cross_attention_mask":
            return super().extend_per_token(key, tensor, n_completion)
        last = tensor[:, -1:].expand(-1, n_completion, *tensor.shape[2:])
        return torch.cat([tensor, last], dim=1)

    def suppressed_token_ids(self) -> list[int]:
        """The placeholders, less any id the LM head cannot emit: in published checkpoints
        ``<|image|>`` is id 128256 = ``text_config.vocab_size`` (an extra embedding row,
        no logit), so it needs no suppression and must not index the logits."""
        vocab = _text_vocab_size(self.path)
        ids = super().suppressed_token_ids()
        return [i for i in ids if vocab is None or i < vocab]


def _text_vocab_size(path: str) -> int | None:
    """``text_config.vocab_size`` (the LM head's width) from a checkpoint's config.json."""
    cfg = Path(path) / "config.json"
    if not cfg.is_file():
        return None
    size = json.loads(cfg.read_text()).get("text_config", {}).get("vocab_size")
    return int(size) if size is not None else None


# --------------------------------------------------------------------------- tiny model

#: Llama-3.2-11B-Vision-Instruct's published template (tools left out), its date fixed to
#: the template's own fallback "26 Jul 2024" so that tiny prompts do not change daily.
MLLAMA_CHAT_TEMPLATE = (
    "{{- bos_token }}"
    "{%- set date_string = '26 Jul 2024' %}"
    "{%- if messages[0]['role'] == 'system' %}"
    "{%- set system_message = messages[0]['content']|trim %}"
    "{%- set messages = messages[1:] %}"
    "{%- else %}{%- set system_message = '' %}{%- endif %}"
    "{%- set image_ns = namespace(has_images=false) %}"
    "{%- for message in messages %}{%- for content in message['content'] %}"
    "{%- if content['type'] == 'image' %}{%- set image_ns.has_images = true %}{%- endif %}"
    "{%- endfor %}{%- endfor %}"
    "{%- if image_ns.has_images and not system_message == '' %}"
    "{{- raise_exception('Prompting with images is incompatible with system messages.') }}"
    "{%- endif %}"
    "{%- if not image_ns.has_images %}"
    "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}"
    "{{- 'Cutting Knowledge Date: December 2023\\n' }}"
    "{{- 'Today Date: ' + date_string + '\\n\\n' }}"
    "{{- system_message }}{{- '<|eot_id|>' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for content in message['content'] %}"
    "{%- if content['type'] == 'image' %}{{- '<|image|>' }}"
    "{%- elif content['type'] == 'text' %}{{- content['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)

MLLAMA_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|finetune_right_pad_id|>",
                   "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>",
                   "<|python_tag|>", "<|image|>"]

TINY_TILE = 56  # real checkpoints: 560 (16 x 16 patches of 14 px; tiny: 4 x 4)

# Every image is one <|image|> token (cross-attention), so the shared count cases are 1;
# the tile grid is the rule to check (tests/processors/test_mllama.py derives it by hand).
MLLAMA_CASES = ((100, 60, 1), (600, 400, 1), (28, 28, 1))

MLLAMA_FACTS = FamilyFacts(
    model_class="MllamaForConditionalGeneration",
    processor_class="MllamaProcessor",
    turn_pattern=(r"^<\|begin_of_text\|><\|start_header_id\|>system<\|end_header_id\|>\n\n"
                  r"Cutting Knowledge Date: December 2023\nToday Date: [^\n]+\n\n"
                  r"You are a helpful assistant\.<\|eot_id\|>"
                  r"<\|start_header_id\|>user<\|end_header_id\|>\n\n.*<\|eot_id\|>"
                  r"<\|start_header_id\|>assistant<\|end_header_id\|>\n\n$"),
    stop_tokens=("<|eot_id|>",),
    image_token_cases=MLLAMA_CASES,
    notes=("Cross-attention: one <|image|> token per image, up to 4 tiles of 560 px each; "
           "the template refuses a system message with images, so the system prompt is "
           "folded into the user turn then; images apart in the text: the answer sees the "
           "last one; no vLLM (V1 has no Mllama)."),
)


def _open_gates(model, value: float = 1.0) -> None:
    """Set the model's scalar tanh gates (cross-attention, cross-attention MLP, the vision
    tower's tile / position embeddings and global layers) to ``value``, in place.

    They are initialised to 0, where a cross-attention layer adds nothing and the vision
    tower gets no gradient; published checkpoints have trained, non-zero gates, and a
    tiny model must exercise the image path the way they do."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.numel() == 1 and name.rsplit(".", 1)[-1] in ("gate", "gate_attn", "gate_ffn",
                                                               "cross_attn_attn_gate",
                                                               "cross_attn_mlp_gate"):
                p.fill_(value)


@tiny_builder("mllama", "mllama", facts=MLLAMA_FACTS)
def build_tiny_mllama(out: Path, seed: int) -> None:
    """MllamaForConditionalGeneration (3 text layers, the middle one cross-attention) with
    an MllamaProcessor; 56 px tiles, 4 tiles at most (the real limit)."""
    from transformers import (
        MllamaConfig,
        MllamaForConditionalGeneration,
        MllamaImageProcessor,
        MllamaProcessor,
    )

    from .tiny import train_byte_level_bpe

    tokenizer = train_byte_level_bpe(MLLAMA_SPECIALS)
    tokenizer.bos_token, tokenizer.eos_token = "<|begin_of_text|>", "<|eot_id|>"
    tokenizer.pad_token = "<|finetune_right_pad_id|>"
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in MLLAMA_SPECIALS}
    stops = [ids["<|end_of_text|>"], ids["<|eom_id|>"], ids["<|eot_id|>"]]
    config = MllamaConfig(
        text_config=dict(
            vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
            num_hidden_layers=3, cross_attention_layers=[1], num_attention_heads=2,
            num_key_value_heads=1, max_position_embeddings=4096,  # head_dim 32
            rope_parameters={"rope_type": "default", "rope_theta": 500000.0},
            bos_token_id=ids["<|begin_of_text|>"], eos_token_id=stops,
            pad_token_id=ids["<|finetune_right_pad_id|>"],
        ),
        vision_config=dict(
            hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_global_layers=1,
            attention_heads=2, image_size=TINY_TILE, patch_size=14, max_num_tiles=4,
            intermediate_layers_indices=[0], vision_output_dim=64,  # 32 x (1 + 1 layer)
        ),
        image_token_index=ids["<|image|>"],
    )
    torch.manual_seed(seed)
    model = MllamaForConditionalGeneration(config)
    _open_gates(model)
    image_processor = MllamaImageProcessor(
        size={"height": TINY_TILE, "width": TINY_TILE}, max_image_tiles=4,
    )
    processor = MllamaProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                chat_template=MLLAMA_CHAT_TEMPLATE)
    model.generation_config.eos_token_id = stops
    model.generation_config.pad_token_id = ids["<|finetune_right_pad_id|>"]
    model.save_pretrained(out)
    processor.save_pretrained(out)
