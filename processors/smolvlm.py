"""SmolVLM2 (model_type ``smolvlm``): Idefics3's prompts and sub-image rule, plus videos.

``SmolVLMImageProcessor`` is Idefics3's image processor under another name (the same
longest-edge resize, ``M x M`` sub-images and global image, ``image_seq_len`` tokens
each: see :mod:`processors.idefics3`), so the adapter is Idefics3's with SmolVLM2's
class names, its ``<video>`` token, and one extra dependency: transformers'
``SmolVLMProcessor`` refuses to load without the ``num2words`` package (it spells out
video frame counts), even for image-only prompts. Install it with ``pip install
num2words`` (or the ``vlcohort[smolvlm]`` extra).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from .family import FamilyFacts, register_adapter, tiny_builder
from .idefics3 import (
    IMAGE_TOKEN_CASES,
    TINY_SEQ_LEN,
    Idefics3Adapter,
    save_tiny,
    tiny_parts,
)
from .idefics3 import (
    SPECIALS as IDEFICS3_SPECIALS,
)

INSTALL = "pip install num2words  (or: pip install 'vlcohort[smolvlm]')"


def require_num2words(what: str) -> None:
    """A clear error, with the install line, when ``num2words`` is missing."""
    if importlib.util.find_spec("num2words") is None:
        raise ImportError(f"{what} needs the num2words package (transformers' SmolVLMProcessor "
                          f"will not load without it): {INSTALL}")


@register_adapter
class SmolVLMAdapter(Idefics3Adapter):
    family = "SmolVLM2"
    model_types = ("smolvlm",)
    placeholder_tokens = (*Idefics3Adapter.placeholder_tokens, "<video>")
    takes_video = True

    def _load_processor(self):
        require_num2words(f"{self.family} ({self.path})")
        return super()._load_processor()


# ------------------------------------------------------------------------- tiny model

SPECIALS = [*IDEFICS3_SPECIALS, "<video>"]


def chat_template() -> str:
    """SmolVLM2's published template (Idefics3's, plus videos and string contents)."""
    return (
        "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
        "{% if message['content'] is string %}{{': ' + message['content']}}{% else %}"
        "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
        "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
        "{% elif line['type'] == 'image' %}{{ '<image>' }}"
        "{% elif line['type'] == 'video' %}{{ '<video>' }}{% endif %}{% endfor %}{% endif %}"
        "<end_of_utterance>\n{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
    )


@tiny_builder("smolvlm", "smolvlm", facts=FamilyFacts(
    model_class="SmolVLMForConditionalGeneration",
    processor_class="SmolVLMProcessor",
    turn_pattern=(r"^<\|im_start\|>System: You are a helpful assistant\.<end_of_utterance>\n"
                  r"User: .+<end_of_utterance>\nAssistant:$"),
    stop_tokens=("<end_of_utterance>",),
    image_token_cases=IMAGE_TOKEN_CASES,  # the same tiny shapes and rule as tiny:idefics3
    optional_modules=("num2words",),
    notes=("needs num2words (pip install num2words, extra vlcohort[smolvlm]); images as "
           "Idefics3 (scaled to processor.longest_edge, up or down, then cut)"),
))
def build(out: Path, seed: int) -> None:
    """Tiny SmolVLM2: the tiny Idefics3 shapes (56 px canvas, patch 14, pixel shuffle 2,
    Llama text model) in SmolVLM2's classes, with its video processor and template."""
    require_num2words("tiny:smolvlm")
    import torch
    from transformers import (
        SmolVLMConfig,
        SmolVLMForConditionalGeneration,
        SmolVLMImageProcessor,
        SmolVLMProcessor,
        SmolVLMVideoProcessor,
    )

    tokenizer, config_kwargs, ip_kwargs = tiny_parts(SPECIALS)
    torch.manual_seed(seed)
    model = SmolVLMForConditionalGeneration(SmolVLMConfig(**config_kwargs))
    video_processor = SmolVLMVideoProcessor(
        size=ip_kwargs["size"], max_image_size=ip_kwargs["max_image_size"],
        image_mean=ip_kwargs["image_mean"], image_std=ip_kwargs["image_std"])
    processor = SmolVLMProcessor(image_processor=SmolVLMImageProcessor(**ip_kwargs),
                                 tokenizer=tokenizer, video_processor=video_processor,
                                 image_seq_len=TINY_SEQ_LEN, chat_template=chat_template())
    save_tiny(out, model, processor, tokenizer)
