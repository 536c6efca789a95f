"""Qwen3-VL, dense and MoE: ChatML prompts, native-resolution images in 32 px cells,
interleaved M-RoPE, DeepStack.

Image rule: the same ``smart_resize`` as Qwen2.5-VL (each side rounded to a multiple of
``factor``, then the whole image scaled into [``min_pixels``, ``max_pixels``]; aspect
ratio over 200 refused), but with ``factor = patch_size x merge_size = 16 x 2 = 32``: the
vision tower cuts 16 px patches (Qwen2.5-VL: 14) and merges 2 x 2 of them into one token,
so an image of H x W (after resizing) costs (H / 32) x (W / 32) ``<|image_pad|>`` tokens,
wrapped in ``<|vision_start|>`` ... ``<|vision_end|>``. transformers 5.24 gives
``Qwen3VLProcessor`` the Qwen2-VL image processor (``Qwen2VLImageProcessor``) with the
checkpoint's ``patch_size: 16``; the published checkpoints' budget is ``shortest_edge``
65,536 px (64 tokens) to ``longest_edge`` 16,777,216 px (16,384 tokens), image mean and
std 0.5. The adapter reads patch, merge and budget from the saved image processor, so the
Qwen2.5-VL adapter's rules apply unchanged (it is subclassed, not copied).

What differs from Qwen2.5-VL and matters here:

- The template inserts no default system turn (Qwen2.5-VL's does): with
  ``system_prompt=None`` the prompt starts at ``<|im_start|>user``.
- DeepStack: features of some vision layers (``deepstack_visual_indexes``) are added to
  the hidden states of the first decoder layers at the image-token positions. It happens
  inside ``Qwen3VLModel.forward``, so the core's log-prob pass (``model.model(...)``) gets
  it with no family code.
- Timestamps (``<t seconds>`` before each frame) are for videos only; a text + image
  prompt never carries them.
- ``mm_token_type_ids`` (1 on image tokens) is what the model's 3-D position ids are
  computed from; a training batch extends it with zeros over the completion.
- The MoE form (``qwen3_vl_moe``) differs only inside the decoder's MLPs; its processor is
  the same ``Qwen3VLProcessor``.
- Published Instruct checkpoints end the generation prompt at ``<|im_start|>assistant\\n``;
  the Thinking checkpoints add ``<think>\\n`` there. The tiny model is the Instruct form.
"""

from __future__ import annotations

from pathlib import Path

from .family import FamilyFacts, register_adapter, tiny_builder
from .qwen2_5_vl import Qwen2_5_VLAdapter


@register_adapter
class Qwen3VLAdapter(Qwen2_5_VLAdapter):
    """Qwen2.5-VL's rules with the checkpoint's 16 px patches (read from its processor)."""

    family = "Qwen3-VL"
    model_types = ("qwen3_vl",)
    packing = True  # tests/test_packing.py: packed = padded, DeepStack features included
    vision_per_distinct_image = True  # DeepStack features shared too: tests/test_packing.py
    vllm_tested = True  # requests, weight push and generation run on vLLM's CPU build


@register_adapter
class Qwen3VLMoeAdapter(Qwen3VLAdapter):
    """The MoE form: the same processor and rules; its own class because vLLM has not run
    it: the tiny checkpoint's fused expert tensors are in transformers 5's in-memory
    layout (``gate_up_proj`` [E, 2I, H], ``down_proj`` [E, H, I]), transposed from the
    published one vLLM's loader reads (README, "Supported model families")."""

    family = "Qwen3-VL-MoE"
    model_types = ("qwen3_vl_moe",)
    packing = True  # tests/test_packing.py: packed = padded


# ------------------------------------------------------------------------- tiny models

QWEN3_VL_SPECIALS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
    "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
]
#: Plain added tokens in the published Qwen3 vocabularies (``special: false``).
QWEN3_THINK_TOKENS = ["<think>", "</think>"]


#: Qwen3-VL-Instruct's published chat template, byte for byte (as TRL keeps it for its
#: identity checks against ``tokenizer.chat_template``): a system turn only when the
#: first message is one, user contents with ``<|vision_start|><|image_pad|><|vision_end|>``
#: per image (``Picture n:`` with ``add_vision_id``), tool calls and responses, and the
#: generation prompt ``<|im_start|>assistant\n``.
#: Lines longer than the linter's limit continue in adjacent raw literals (same text).
QWEN3_VL_CHAT_TEMPLATE = (r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with """
    r"""function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within """
    r"""<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": """
    r"""<args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' }}
        {%- if messages[0].content is string %}
            {{- messages[0].content }}
        {%- else %}
            {%- for content in messages[0].content %}
                {%- if 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set image_count = namespace(value=0) %}
{%- set video_count = namespace(value=0) %}
{%- for message in messages %}
    {%- if message.role == "user" %}
        {{- '<|im_start|>' + message.role + '\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role + '\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content_item in message.content %}
                {%- if 'text' in content_item %}
                    {{- content_item.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and message.content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {%- if message.content is string %}
            {{- message.content }}
        {%- else %}
            {%- for content in message.content %}
                {%- if content.type == 'image' or 'image' in content or 'image_url' in content %}
                    {%- set image_count.value = image_count.value + 1 %}
                    {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                    <|vision_start|><|image_pad|><|vision_end|>
                {%- elif content.type == 'video' or 'video' in content %}
                    {%- set video_count.value = video_count.value + 1 %}
                    {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                    <|vision_start|><|video_pad|><|vision_end|>
                {%- elif 'text' in content %}
                    {{- content.text }}
                {%- endif %}
            {%- endfor %}
        {%- endif %}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
""")


def qwen3_vl_chat_template() -> str:
    """Qwen3-VL-Instruct's published template (:data:`QWEN3_VL_CHAT_TEMPLATE`)."""
    return QWEN3_VL_CHAT_TEMPLATE


def qwen3_vl_tokenizer():
    """The tiny byte-level BPE with Qwen3-VL's specials; ``<think>`` / ``</think>`` are
    plain added tokens, as in the published vocabulary."""
    from .tiny import train_byte_level_bpe

    tokenizer = train_byte_level_bpe(QWEN3_VL_SPECIALS)
    tokenizer.add_tokens(QWEN3_THINK_TOKENS)
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|endoftext|>"
    return tokenizer


def special_ids(tokenizer) -> dict[str, int]:
    return {t: int(tokenizer.convert_tokens_to_ids(t)) for t in QWEN3_VL_SPECIALS}


def qwen3_image_processor():
    """The published Qwen3-VL image processor settings, with a tiny pixel budget: patch
    16, merge 2 (32 px cells), mean / std 0.5; 4 to 64 tokens per image (published: 64 to
    16,384)."""
    from transformers import Qwen2VLImageProcessor

    return Qwen2VLImageProcessor(
        patch_size=16, merge_size=2, temporal_patch_size=2,
        min_pixels=4 * 32 * 32, max_pixels=64 * 32 * 32,
        image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5],
    )


def tiny_vision_config(**extra) -> dict:
    """Two 32-wide blocks of 16 px patches; 64 learned position embeddings (an 8 x 8 grid,
    interpolated to the image's grid; published: 2,304 = 48 x 48)."""
    return dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64,
                patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
                num_position_embeddings=64, **extra)


def tiny_text_config(tokenizer, ids: dict[str, int], **extra) -> dict:
    """Hidden 64, 2 layers, head_dim 32; interleaved M-RoPE sections 6 / 5 / 5 (sum
    head_dim / 2; published 24 / 20 / 20 for head_dim 128)."""
    return dict(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 5000000.0,
                         "mrope_section": [6, 5, 5], "mrope_interleaved": True},
        bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
        pad_token_id=tokenizer.pad_token_id, **extra,
    )


def save_qwen3_vl_family(out: Path, model, tokenizer, chat_template: str) -> None:
    """Save model + ``Qwen3VLProcessor`` (Qwen3-VL, its MoE form and Qwen3.5 share it);
    generation stops at ``<|im_end|>`` / ``<|endoftext|>`` as the published
    ``generation_config.json`` says."""
    from transformers import Qwen3VLProcessor, Qwen3VLVideoProcessor

    ids = special_ids(tokenizer)
    processor = Qwen3VLProcessor(
        image_processor=qwen3_image_processor(), tokenizer=tokenizer,
        video_processor=Qwen3VLVideoProcessor(), chat_template=chat_template,
    )
    model.generation_config.eos_token_id = [ids["<|im_end|>"], ids["<|endoftext|>"]]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    processor.save_pretrained(out)


def _token_ids_kwargs(ids: dict[str, int]) -> dict:
    return dict(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                vision_start_token_id=ids["<|vision_start|>"],
                vision_end_token_id=ids["<|vision_end|>"])


# Tiny Qwen3-VL image rule (patch 16, merge 2 -> factor 32; min_pixels 4*32*32 = 4096,
# max_pixels 64*32*32 = 65536). Tokens = (H' / 32) * (W' / 32) after smart_resize:
#  100 x 60 : H' = round(60/32)*32 = 64, W' = round(100/32 = 3.125)*32 = 96; 6144 px in
#             range -> 2 * 3 = 6 tokens
#   32 x 32 : 1024 px < 4096 -> beta = sqrt(4096/1024) = 2 -> H' = W' = ceil(64/32)*32 = 64
#             -> 2 * 2 = 4 tokens
#  600 x 400: rounded 384 x 608 (400/32 = 12.5 rounds to even 12) = 233472 px > 65536 ->
#             beta = sqrt(240000/65536) = 1.914; H' = floor(400/1.914/32) = floor(6.53) = 6
#             cells, W' = floor(600/1.914/32) = floor(9.80) = 9 cells -> 54 tokens
#   60 x 130: H' = round(4.06) = 4 cells, W' = round(1.875) = 2 cells; 8192 px -> 8 tokens
QWEN3_IMAGE_CASES = ((100, 60, 6), (32, 32, 4), (600, 400, 54), (60, 130, 8))

QWEN3_TURN = (r"^<\|im_start\|>system\nYou are a helpful assistant\.<\|im_end\|>\n"
              r"<\|im_start\|>user\n.+<\|im_end\|>\n<\|im_start\|>assistant\n$")


@tiny_builder("qwen3_vl", "qwen3_vl", facts=FamilyFacts(
    model_class="Qwen3VLForConditionalGeneration", processor_class="Qwen3VLProcessor",
    turn_pattern=QWEN3_TURN, stop_tokens=("<|im_end|>", "<|endoftext|>"),
    image_token_cases=QWEN3_IMAGE_CASES,
    notes="Instruct template (no <think> in the generation prompt); DeepStack and "
          "interleaved M-RoPE inside the model; videos not used."))
def build_qwen3_vl(out: Path, seed: int) -> None:
    """Tiny Qwen3-VL: the real classes, one DeepStack layer (vision block 0 -> decoder
    layer 0; published 2B: blocks 5 / 11 / 17)."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    tokenizer = qwen3_vl_tokenizer()
    ids = special_ids(tokenizer)
    config = Qwen3VLConfig(
        text_config=tiny_text_config(tokenizer, ids),
        vision_config=tiny_vision_config(deepstack_visual_indexes=[0]),
        tie_word_embeddings=True, **_token_ids_kwargs(ids),
    )
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config)
    save_qwen3_vl_family(out, model, tokenizer, qwen3_vl_chat_template())


@tiny_builder("qwen3_vl_moe", "qwen3_vl_moe", facts=FamilyFacts(
    model_class="Qwen3VLMoeForConditionalGeneration", processor_class="Qwen3VLProcessor",
    turn_pattern=QWEN3_TURN, stop_tokens=("<|im_end|>", "<|endoftext|>"),
    image_token_cases=QWEN3_IMAGE_CASES,
    notes="As Qwen3-VL; the RL loss has no router load-balancing term (the model's aux "
          "loss is not added)."))
def build_qwen3_vl_moe(out: Path, seed: int) -> None:
    """Tiny Qwen3-VL-MoE: every decoder MLP is 4 experts of width 32, top-2 routing
    (published 30B-A3B: 128 experts, top-8)."""
    import torch
    from transformers import Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration

    tokenizer = qwen3_vl_tokenizer()
    ids = special_ids(tokenizer)
    config = Qwen3VLMoeConfig(
        text_config=tiny_text_config(tokenizer, ids, num_experts=4, num_experts_per_tok=2,
                                     moe_intermediate_size=32, decoder_sparse_step=1,
                                     # as published: the top-k weights renormalised (what
                                     # transformers' MoE block does; vLLM reads the flag)
                                     norm_topk_prob=True),
        vision_config=tiny_vision_config(deepstack_visual_indexes=[0]),
        tie_word_embeddings=True, **_token_ids_kwargs(ids),
    )
    torch.manual_seed(seed)
    model = Qwen3VLMoeForConditionalGeneration(config)
    save_qwen3_vl_family(out, model, tokenizer, qwen3_vl_chat_template())
