"""Text-only causal LMs (Qwen2 / Qwen3 / Llama-style): the degenerate no-image case.

Same interface as the VLM adapters; a problem with images is an error, not a silent drop.
The prompt is rendered with the tokenizer's own chat template.
"""

from __future__ import annotations

from .base import DEFAULT_SYSTEM_PROMPT, Adapter


class TextLMAdapter(Adapter):
    family = "text-only LM"
    model_types = ("qwen2", "qwen3", "llama", "mistral")
    is_multimodal = False
    stop_tokens = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>")

    def _load_processor(self):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(self.path,
                                             trust_remote_code=self.options.trust_remote_code)

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
