"""The tiny checkpoints carry their families' published chat templates, byte for byte.

The published templates are the shared data's ``chat_templates/`` (the copies TRL keeps
for identity checks against ``tokenizer.chat_template``). Each tiny builder writes its
family's template from a string constant in the family module (the shared folder is not
shipped); here the saved ``chat_template.jinja`` of each built tiny checkpoint, and the
template its processor and tokenizer load back, must equal the shared file exactly.
"""

from __future__ import annotations

import pytest
from transformers import AutoProcessor, AutoTokenizer

from vlcohort.processors import adapter_for

from .helpers import image, problem

#: tiny spec -> the published template it carries.
CARRIED = {
    "qwen2_5_vl": "qwen2_5_vl.jinja",
    "qwen2_vl": "qwen2_5_vl.jinja",  # Qwen2-VL-Instruct publishes the same template
    "qwen3_vl": "qwen3_vl.jinja",
    "qwen3_vl_moe": "qwen3_vl.jinja",
    "qwen3_5": "qwen3_5_think.jinja",  # the thinking-by-default form
    "gemma3": "gemma3.jinja",
}


@pytest.mark.parametrize("name", list(CARRIED))
def test_tiny_template_is_the_published_one_byte_for_byte(name, tiny_paths, published_path):
    published = published_path(f"chat_templates/{CARRIED[name]}").read_bytes()
    folder = tiny_paths[name]
    assert (folder / "chat_template.jinja").read_bytes() == published
    text = published.decode()
    assert AutoProcessor.from_pretrained(folder).chat_template == text
    assert AutoTokenizer.from_pretrained(folder).chat_template == text


def test_qwen2_5_vl_template_is_the_published_checkpoints(published_path):
    """The shared template file is the one the published Qwen2.5-VL-7B-Instruct ships."""
    import json

    shipped = json.loads(published_path("qwen2_5_vl_7b_instruct/chat_template.json").read_text())
    assert shipped["chat_template"] == published_path("chat_templates/qwen2_5_vl.jinja").read_text()


def test_qwen3_5_both_published_forms_render_the_adapters_prompts(tiny_paths, published_path):
    """The tiny Qwen3.5 carries the thinking-by-default form; the non-thinking form differs
    only in the default of the generation prompt, and the adapter always passes
    ``enable_thinking``: with either form, either setting renders the same prompt."""
    from vlcohort.processors import AdapterOptions

    nothink = published_path("chat_templates/qwen3_5_nothink.jinja").read_text()
    p = problem(text="Q?", images=[image(64, 64)])
    for thinking in (False, True):
        adapter = adapter_for(tiny_paths["qwen3_5"],
                              AdapterOptions(processor={"enable_thinking": thinking}))
        rendered = adapter.render(p).text
        msgs = adapter.messages(p)
        other = adapter.processor.apply_chat_template(
            msgs, chat_template=nothink, tokenize=False, add_generation_prompt=True,
            enable_thinking=thinking)
        assert rendered == other
        assert rendered.endswith("<think>\n" if thinking else "<think>\n\n</think>\n\n")


def test_idefics3_differs_from_idefics3_8b_only_in_opening_and_spelling(tiny_paths, published_path):
    """Not byte-equal, and why: the tiny Idefics3 is SmolVLM-Instruct-shaped (also
    ``model_type: idefics3``, BOS ``<|im_start|>``) and carries SmolVLM-Instruct's published
    template (not in the shared data), which is Idefics3-8B-Llama3's with two edits: it
    opens with ``<|im_start|>`` where Idefics3-8B opens with Llama-3's
    ``<|begin_of_text|>``, and writes ``role | capitalize`` for ``role.capitalize()`` (the
    same output). Nothing else differs, and both render the same turns after the opening."""
    published = published_path("chat_templates/idefics3.jinja").read_text()
    tiny = (tiny_paths["idefics3"] / "chat_template.jinja").read_text()
    head = "<|begin_of_text|>"
    assert published.startswith(head)
    assert tiny == "<|im_start|>" + published[len(head):].replace(
        "{{message['role'].capitalize()}}", "{{message['role'] | capitalize}}")
    adapter = adapter_for(tiny_paths["idefics3"])
    p = problem(text="Q?", images=[image(60, 60)])
    msgs = adapter.messages(p, instruction="INSTR")
    ours = adapter.render(p, instruction="INSTR").text
    theirs = adapter.processor.apply_chat_template(msgs, chat_template=published, tokenize=False,
                                                   add_generation_prompt=True)
    assert ours.removeprefix("<|im_start|>") == theirs.removeprefix(head)
