"""Qwen3.5: natively multimodal (text + image + video in one checkpoint), hybrid decoder
(Gated DeltaNet linear attention in 3 of every 4 layers, gated full attention in the 4th).

The published checkpoints (``Qwen/Qwen3.5-*``, ``model_type: qwen3_5``,
``Qwen3_5ForConditionalGeneration``) are vision-language models: transformers 5.24 serves
them with ``Qwen3VLProcessor`` (auto mapping ``qwen3_5 -> Qwen3VLProcessor``), the Qwen2-VL
image processor with 16 px patches merged 2 x 2 (32 px cells, the Qwen3-VL rule, see
``processors/qwen3_vl.py``) and ``Qwen3_5Tokenizer`` (a byte-level BPE with its own
pre-tokenizer; transformers ignores the hub's ``tokenizer_class`` for this model type). So
the adapter is the Qwen3-VL one with Qwen3.5's chat template behaviour:

- The published template opens a thinking block in the generation prompt by default
  (``<|im_start|>assistant\\n<think>\\n``) and writes an empty one when
  ``enable_thinking`` is false (``<|im_start|>assistant\\n<think>\\n\\n</think>\\n\\n``).
  The adapter renders the non-thinking turn unless ``agents.N.processor:
  {enable_thinking: true}`` says otherwise: the cohort's answer instruction asks for the
  reasoning in the visible answer, and a thinking turn's ``</think>`` would be part of
  every completion the answer extractor reads.
- Contents are trimmed (``|trim``) and no default system turn is inserted.

The linear-attention layers on CPU: transformers picks, per kernel, the hub kernel when
asked for, else ``flash-linear-attention`` / ``causal-conv1d`` when installed, else its
own torch functions (``torch_chunk_gated_delta_rule`` for prefill and training,
``torch_recurrent_gated_delta_rule`` for one-token decode steps, a depthwise ``conv1d``
for the short convolution). Without those packages the torch path runs, exactly (the
tests compare generation's log-probs with a fresh forward pass over the whole sequence,
which takes the chunked path, to 1e-4). Left padding is safe: the padding positions'
hidden states are zeroed before the layer (``apply_mask_to_padding_states``), so their
keys and values are 0 and the recurrent state they leave is 0. Packed sequences
(``cu_seqlens``) need ``flash-linear-attention``; the project never packs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .family import FamilyFacts, register_adapter, tiny_builder
from .qwen3_vl import (
    QWEN3_IMAGE_CASES,
    QWEN3_THINK_TOKENS,
    QWEN3_VL_SPECIALS,
    Qwen3VLAdapter,
    save_qwen3_vl_family,
    special_ids,
    tiny_vision_config,
)


@dataclass
class Qwen3_5Settings(Qwen3VLAdapter.settings):
    """Qwen3.5's ``agents.N.processor`` keys: Qwen3-VL's (pixel budget) and the chat
    template's thinking switch."""

    enable_thinking: bool = False
    """Open a thinking block in the generation prompt (the published template's default);
    off: the empty block of a non-thinking turn."""


@register_adapter
class Qwen3_5Adapter(Qwen3VLAdapter):
    """Qwen3-VL's image rules; the chat template's thinking switch from the settings."""

    family = "Qwen3.5"
    model_types = ("qwen3_5", "qwen3_5_moe")
    vllm_tested = False  # the request form is inherited, not yet run on a real vLLM
    settings = Qwen3_5Settings
    packing = False  # its linear-attention (Gated DeltaNet) layers would run across packed sequences
    shared_prefix = False  # the same layers take no attention mask: siblings would mix

    def apply_prompt_format(self, msgs: list[dict]) -> str:
        """The chat template (a VLM is always prompted through it), with
        ``enable_thinking`` from the settings; the base rendering does the rest."""
        thinking = bool(self.family_settings.enable_thinking)
        return self.processor.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True,
                                                  enable_thinking=thinking)


# ------------------------------------------------------------------------- tiny models


#: Qwen3.5's published chat template, byte for byte, in its thinking-by-default form (as
#: TRL keeps it for its identity checks): ``render_content`` (images
#: ``<|vision_start|><|image_pad|><|vision_end|>``, none in a system message), contents
#: trimmed, a system turn only when given, tool calls, assistant turns after the last user
#: query with their reasoning in a ``<think>`` block, and a generation prompt that opens
#: ``<think>\n`` unless ``enable_thinking`` is false (then an empty block). The published
#: non-thinking form differs only in that default; the adapter always passes
#: ``enable_thinking``, so both render the same prompts.
#: Lines longer than the linter's limit continue in adjacent raw literals (same text).
QWEN3_5_CHAT_TEMPLATE = (r"""{%- set image_count = namespace(value=0) %}
{%- set video_count = namespace(value=0) %}
{%- macro render_content(content, do_vision_count, is_system_content=false) %}
    {%- if content is string %}
        {{- content }}
    {%- elif content is iterable and content is not mapping %}
        {%- for item in content %}
            {%- if 'image' in item or 'image_url' in item or item.type == 'image' %}
                {%- if is_system_content %}
                    {{- raise_exception('System message cannot contain images.') }}
                {%- endif %}
                {%- if do_vision_count %}
                    {%- set image_count.value = image_count.value + 1 %}
                {%- endif %}
                {%- if add_vision_id %}
                    {{- 'Picture ' ~ image_count.value ~ ': ' }}
                {%- endif %}
                {{- '<|vision_start|><|image_pad|><|vision_end|>' }}
            {%- elif 'video' in item or item.type == 'video' %}
                {%- if is_system_content %}
                    {{- raise_exception('System message cannot contain videos.') }}
                {%- endif %}
                {%- if do_vision_count %}
                    {%- set video_count.value = video_count.value + 1 %}
                {%- endif %}
                {%- if add_vision_id %}
                    {{- 'Video ' ~ video_count.value ~ ': ' }}
                {%- endif %}
                {{- '<|vision_start|><|video_pad|><|vision_end|>' }}
            {%- elif 'text' in item %}
                {{- item.text }}
            {%- else %}
                {{- raise_exception('Unexpected item type in content.') }}
            {%- endif %}
        {%- endfor %}
    {%- elif content is none or content is undefined %}
        {{- '' }}
    {%- else %}
        {{- raise_exception('Unexpected content type.') }}
    {%- endif %}
{%- endmacro %}
{%- if not messages %}
    {{- raise_exception('No messages provided.') }}
{%- endif %}
{%- if tools and tools is iterable and tools is not mapping %}
    {{- '<|im_start|>system\n' }}
    {{- "# Tools\n\nYou have access to the following functions:\n\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>" }}
    {{- '\n\nIf you choose to call a function ONLY reply in the following format with NO """
    r"""suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</paramet"""
    r"""er>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple """
    r"""lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the """
    r"""specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML """
    r"""tags\n- Required parameters MUST be specified\n- You may provide optional reasoning for your function call """
    r"""in natural language BEFORE the function call, but NOT after\n- If there is no function call available, """
    r"""answer the question like normal with your current knowledge and do not tell the user about function """
    r"""calls\n</IMPORTANT>' }}
    {%- if messages[0].role == 'system' %}
        {%- set content = render_content(messages[0].content, false, true)|trim %}
        {%- if content %}
            {{- '\n\n' + content }}
        {%- endif %}
    {%- endif %}
    {{- '<|im_end|>\n' }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {%- set content = render_content(messages[0].content, false, true)|trim %}
        {{- '<|im_start|>system\n' + content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" %}
        {%- set content = render_content(message.content, false)|trim %}
        {%- if not(content.startswith('<tool_response>') and content.endswith('</tool_response>')) %}
            {%- set ns.multi_step_tool = false %}
            {%- set ns.last_query_index = index %}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if ns.multi_step_tool %}
    {{- raise_exception('No user query found in messages.') }}
{%- endif %}
{%- for message in messages %}
    {%- set content = render_content(message.content, true)|trim %}
    {%- if message.role == "system" %}
        {%- if not loop.first %}
            {{- raise_exception('System message must be at the beginning.') }}
        {%- endif %}
    {%- elif message.role == "user" %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n"""
    r"""') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- set reasoning_content = reasoning_content|trim %}
        {%- if loop.index0 > ns.last_query_index %}
            {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content + '\n</think>\n\n' + content }}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls and message.tool_calls is iterable and message.tool_calls is not mapping %}
            {%- for tool_call in message.tool_calls %}
                {%- if tool_call.function is defined %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {%- if loop.first %}
                    {%- if content|trim %}
                        {{- '\n\n<tool_call>\n<function=' + tool_call.name + '>\n' }}
                    {%- else %}
                        {{- '<tool_call>\n<function=' + tool_call.name + '>\n' }}
                    {%- endif %}
                {%- else %}
                    {{- '\n<tool_call>\n<function=' + tool_call.name + '>\n' }}
                {%- endif %}
                {%- if tool_call.arguments is defined %}
                    {%- for args_name, args_value in tool_call.arguments|items %}
                        {{- '<parameter=' + args_name + '>\n' }}
                        {%- set args_value = args_value | tojson | safe if args_value is mapping or (args_value is """
    r"""sequence and args_value is not string) else args_value | string %}
                        {{- args_value }}
                        {{- '\n</parameter>\n' }}
                    {%- endfor %}
                {%- endif %}
                {{- '</function>\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.previtem and loop.previtem.role != "tool" %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if not loop.last and loop.nextitem.role != "tool" %}
            {{- '<|im_end|>\n' }}
        {%- elif loop.last %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- else %}
        {{- raise_exception('Unexpected message role.') }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- else %}
        {{- '<think>\n' }}
    {%- endif %}
{%- endif %}""")


def qwen3_5_chat_template() -> str:
    """Qwen3.5's published template (:data:`QWEN3_5_CHAT_TEMPLATE`)."""
    return QWEN3_5_CHAT_TEMPLATE


def qwen3_5_tokenizer():
    """A real ``Qwen3_5Tokenizer`` holding the vocabulary and merges of the project's
    tiny byte-level BPE (``train_byte_level_bpe``), with Qwen3.5's specials; ``<think>`` /
    ``</think>`` are plain added tokens, as published."""
    from transformers import Qwen3_5Tokenizer

    from .tiny import train_byte_level_bpe

    trained = train_byte_level_bpe(QWEN3_VL_SPECIALS)
    model = json.loads(trained.backend_tokenizer.to_str())["model"]
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in model["merges"]]
    tokenizer = Qwen3_5Tokenizer(vocab=dict(model["vocab"]), merges=merges)
    tokenizer.add_special_tokens({"additional_special_tokens": QWEN3_VL_SPECIALS})
    tokenizer.add_tokens(QWEN3_THINK_TOKENS)
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|endoftext|>"
    return tokenizer


@tiny_builder("qwen3_5", "qwen3_5", facts=FamilyFacts(
    model_class="Qwen3_5ForConditionalGeneration", processor_class="Qwen3VLProcessor",
    turn_pattern=(r"^<\|im_start\|>system\nYou are a helpful assistant\.<\|im_end\|>\n"
                  r"<\|im_start\|>user\n.+<\|im_end\|>\n<\|im_start\|>assistant\n"
                  r"<think>\n\n</think>\n\n$"),
    stop_tokens=("<|im_end|>", "<|endoftext|>"),
    image_token_cases=QWEN3_IMAGE_CASES,
    notes="Non-thinking turns by default (processor: {enable_thinking: true} for the "
          "published default); linear-attention layers run transformers' torch path "
          "without flash-linear-attention (slower, exact)."))
def build_qwen3_5(out: Path, seed: int) -> None:
    """Tiny Qwen3.5: hidden 64, layer 0 Gated DeltaNet (1 key head, 2 value heads of 32),
    layer 1 gated full attention (head_dim 32, a quarter of it rotary: M-RoPE sections
    2 / 1 / 1, published 11 / 11 / 10 of 64 rotary dims); a 2-block vision tower."""
    _build(out, seed, moe=False)


def build_qwen3_5_moe(out: Path, seed: int) -> None:
    """Tiny Qwen3.5-MoE (``qwen3_5_moe``): as :func:`build_qwen3_5` with every MLP 4
    experts of width 32, top-2, plus a shared expert (published 35B-A3B: 256, top-8).
    Not a ``tiny:`` spec (the issue names ``tiny:qwen3_5`` only); its test builds it."""
    _build(out, seed, moe=True)


def _build(out: Path, seed: int, moe: bool) -> None:
    import torch
    import transformers

    tokenizer = qwen3_5_tokenizer()
    ids = special_ids(tokenizer)
    text = dict(
        vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2,
        layer_types=["linear_attention", "full_attention"],
        num_attention_heads=2, num_key_value_heads=1, head_dim=32,
        linear_conv_kernel_dim=4, linear_key_head_dim=32, linear_value_head_dim=32,
        linear_num_key_heads=1, linear_num_value_heads=2, max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 10000000.0,
                         "partial_rotary_factor": 0.25, "mrope_section": [2, 1, 1],
                         "mrope_interleaved": True},
        bos_token_id=None, eos_token_id=ids["<|im_end|>"], pad_token_id=tokenizer.pad_token_id,
    )
    if moe:
        text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                    shared_expert_intermediate_size=32)
    else:
        text.update(intermediate_size=128)
    prefix = "Qwen3_5Moe" if moe else "Qwen3_5"
    config = getattr(transformers, f"{prefix}Config")(
        text_config=text, vision_config=tiny_vision_config(),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = getattr(transformers, f"{prefix}ForConditionalGeneration")(config)
    save_qwen3_vl_family(out, model, tokenizer, qwen3_5_chat_template())
