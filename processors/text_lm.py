"""Text-only causal LMs: the degenerate no-image case.

Serves the text families it names (Qwen2 / Qwen3 / Llama / Mistral) and, as the registry's
fallback, any ``model_type`` no VLM family claims that ``AutoModelForCausalLM`` loads
(Gemma-3 text, Phi-3/4, OLMo-2, Granite, SmolLM3, ...). Same interface as the VLM
adapters; a problem with images is an error, not a silent drop. The prompt is rendered
with the tokenizer's own chat template, or, for a base model that has none, with a plain
prompt format (``processors/prompt_formats.py``).
"""

from __future__ import annotations

from pathlib import Path

from .base import DEFAULT_SYSTEM_PROMPT, Adapter, unwrap
from .family import FamilyFacts, register_adapter, tiny_builder
from .tiny import train_byte_level_bpe


@register_adapter
class TextLMAdapter(Adapter):
    family = "text-only LM"
    model_types = ("qwen2", "qwen3", "llama", "mistral")
    serves_any_causal_lm = True
    is_multimodal = False
    stop_tokens = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>")
    vllm_tested = True
    packing = True
    shared_prefix = True

    #: model types whose shared-prefix batches are tested equal to the unshared ones
    #: (tiny Qwen2, the real SmolLM2 as a Llama, the real Gemma-3-270M: sliding windows
    #: in 5 layers of 6): tests/test_shared_prefix.py
    shared_prefix_model_types = ("qwen2", "qwen3", "llama", "mistral", "gemma3_text")

    @classmethod
    def shares_prefix_for(cls, model_type: str) -> bool:
        """Only :attr:`shared_prefix_model_types`: any other model type it serves as the
        causal-LM fallback keeps the unshared path."""
        return model_type in cls.shared_prefix_model_types

    def can_pack(self, model) -> bool:
        """Packed only for the model types this adapter names (their transformers models
        read packed sequences from position ids; tested on Qwen2): a model type it serves
        as the causal-LM fallback keeps the padded path."""
        return getattr(unwrap(model).config, "model_type", None) in self.model_types

    def _model_class(self):
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM

    def image_token_count(self, width: int, height: int) -> int:
        return 0

    def messages(self, problem, system_prompt=DEFAULT_SYSTEM_PROMPT, instruction=None):
        """Plain-string contents: text-only chat templates (Qwen2.5, Llama 3) print
        ``message['content']`` as is and do not understand content lists."""
        msgs = super().messages(problem, system_prompt, instruction)
        return [{"role": m["role"], "content": "".join(p["text"] for p in m["content"])}
                for m in msgs]


# --------------------------------------------------------------------------- tiny model

def chatml_text_template() -> str:
    """Qwen2.5-Instruct's ChatML template, without tools (string contents only)."""
    return (
        "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
        "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )


QWEN2_FACTS = FamilyFacts(
    model_class="Qwen2ForCausalLM",
    processor_class="Qwen2Tokenizer",
    turn_pattern=(r"^<\|im_start\|>system\nYou are a helpful assistant\.<\|im_end\|>\n"
                  r"<\|im_start\|>user\n.*<\|im_end\|>\n<\|im_start\|>assistant\n$"),
    stop_tokens=("<|im_end|>",),
    vision=False,
    multi_image=False,
    notes="tested on Qwen2 only",
)


@tiny_builder("qwen2", "qwen2", facts=QWEN2_FACTS)
def build_tiny_qwen2(out: Path, seed: int) -> None:
    """Qwen2ForCausalLM + its ChatML tokenizer, tiny dims (head_dim 32), tied embeddings."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = train_byte_level_bpe(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tokenizer.eos_token = "<|im_end|>"
    tokenizer.pad_token = "<|endoftext|>"
    tokenizer.chat_template = chatml_text_template()
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,  # head_dim 32
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = [tokenizer.eos_token_id]
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
