"""Any causal LM that no VLM family claims is a text agent (the registry's fallback), and
base models without a chat template get a plain prompt format instead of an error.

The checkpoints are random tiny bodies of the real transformers classes (Phi-3, OLMo-2,
Granite, SmolLM3, Gemma-3 text), saved with ``save_pretrained`` beside the tiny Qwen2's
real tokenizer, so the whole ``from_pretrained`` path a user's checkpoint takes runs.
The real pretrained checkpoints (SmolLM2, Gemma-3-270M) are in ``tests/real/``.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from vlcohort.processors import AdapterOptions, UnknownFamilyError, adapter_for, tiny_model_path
from vlcohort.processors.prompt_formats import R1_ZERO_PREAMBLE, PromptFormatError
from vlcohort.processors.registry import adapter_class_for, adapter_class_for_type
from vlcohort.processors.text_lm import TextLMAdapter

from .helpers import assert_logprobs_match, problem

#: model_type -> the transformers config class of a family the adapter list never names.
UNCLAIMED = {
    "phi3": "Phi3Config",
    "olmo2": "Olmo2Config",
    "granite": "GraniteConfig",
    "smollm3": "SmolLM3Config",
    "gemma3_text": "Gemma3TextConfig",
}


def _tiny_causal_lm(folder, model_type: str, chat_template: bool = True):
    """A random 2-layer ``model_type`` model with the tiny Qwen2 tokenizer (template kept
    or removed), saved like a published checkpoint."""
    import transformers
    from transformers import AutoModelForCausalLM

    src = tiny_model_path("tiny:qwen2")
    for f in src.iterdir():
        if "token" in f.name or f.name in ("chat_template.jinja", "special_tokens_map.json"):
            shutil.copy(f, folder / f.name)
    if not chat_template:
        (folder / "chat_template.jinja").unlink(missing_ok=True)
        cfg_file = folder / "tokenizer_config.json"
        tok_cfg = json.loads(cfg_file.read_text())
        tok_cfg.pop("chat_template", None)
        cfg_file.write_text(json.dumps(tok_cfg))
    src_cfg = json.loads((src / "config.json").read_text())
    config = getattr(transformers, UNCLAIMED[model_type])(
        vocab_size=src_cfg["vocab_size"], hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
        max_position_embeddings=512, eos_token_id=src_cfg["eos_token_id"],
        pad_token_id=src_cfg["pad_token_id"], bos_token_id=src_cfg["bos_token_id"])
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("model_type", sorted(UNCLAIMED))
def test_unclaimed_causal_lm_is_a_text_agent(tmp_path, model_type):
    folder = _tiny_causal_lm(tmp_path, model_type)
    assert adapter_class_for(folder) is TextLMAdapter
    adapter = adapter_for(folder)
    model = adapter.load_model()
    assert json.loads((folder / "config.json").read_text())["model_type"] == model_type
    batch = adapter.encode_prompts([adapter.render(problem(text="What is 2 + 3?"))])
    assert_logprobs_match(adapter, model, batch)


def test_registered_vlm_families_keep_priority():
    from vlcohort.processors.family import ADAPTERS

    # gemma3 and the Qwen VLMs are also in AutoModelForCausalLM's map; their family wins
    for model_type in ("gemma3", "qwen2_5_vl", "mllama"):
        assert adapter_class_for_type(model_type) is ADAPTERS[model_type]
        assert adapter_class_for_type(model_type) is not TextLMAdapter


def test_a_type_no_causal_lm_class_loads_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "clip_vision_model"}))
    assert adapter_class_for_type("clip_vision_model") is None
    with pytest.raises(UnknownFamilyError, match=r"'clip_vision_model' has no adapter and "
                       r"AutoModelForCausalLM cannot load it"):
        adapter_for(tmp_path)


# --------------------------------------------------------------------------- base models


@pytest.fixture(scope="module")
def base_folder(tmp_path_factory):
    """A base model: no chat template anywhere in the folder."""
    return _tiny_causal_lm(tmp_path_factory.mktemp("base"), "olmo2", chat_template=False)


def test_base_model_auto_format_is_r1_zero(base_folder):
    adapter = adapter_for(base_folder)
    assert adapter.prompt_format == "r1_zero"
    assert "auto: the checkpoint has no chat template" in adapter.prompt_format_description()
    text = adapter.render(problem(text="What is 2 + 3?"), system_prompt="SYS",
                          instruction="Put the answer in \\boxed{}.").text
    # the tiny tokenizer adds no BOS of its own, so the format writes none
    assert text == (R1_ZERO_PREAMBLE + " User: What is 2 + 3?\nPut the answer in \\boxed{}."
                    " Assistant:")


def test_plain_format_keeps_the_system_prompt(base_folder):
    adapter = adapter_for(base_folder, AdapterOptions(prompt_format="plain"))
    text = adapter.render(problem(text="Q?"), system_prompt="SYS", instruction=None).text
    assert text == "SYS\n\nQuestion: Q?\nAnswer:"


def test_own_jinja_file(base_folder, tmp_path):
    jinja = tmp_path / "mine.jinja"
    jinja.write_text("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}=>")
    adapter = adapter_for(base_folder, AdapterOptions(prompt_format=str(jinja)))
    assert adapter.render(problem(text="Q?"), system_prompt="S").text == "<system>S<user>Q?=>"


def test_chat_format_without_a_template_names_the_fix(base_folder):
    with pytest.raises(PromptFormatError, match=r"has no chat template \(a base model\).*"
                       r"set prompt.format to auto, r1_zero, plain or a .jinja file"):
        adapter_for(base_folder, AdapterOptions(prompt_format="chat"))


def test_plain_format_writes_the_bos_the_tokenizer_would_add(base_folder, tmp_path):
    """A tokenizer that adds BOS itself (Gemma, Llama) gets it written by the format,
    since prompts are tokenized with add_special_tokens=False."""
    from transformers import AutoTokenizer

    folder = tmp_path / "bos"
    shutil.copytree(base_folder, folder)
    tok = AutoTokenizer.from_pretrained(folder)
    tok.bos_token = "<|endoftext|>"
    tok.add_bos_token = True
    tok.save_pretrained(folder)
    adapter = adapter_for(folder, AdapterOptions(prompt_format="plain"))
    if adapter.tokenizer.bos_token_id not in adapter.tokenizer("x")["input_ids"]:
        pytest.skip("this tokenizer class ignores add_bos_token")
    text = adapter.render(problem(text="Q?"), system_prompt=None).text
    assert text == "<|endoftext|>Question: Q?\nAnswer:"
    ids = adapter.encode_prompts([adapter.render(problem(text="Q?"), system_prompt=None)])
    assert int(ids.inputs["input_ids"][0, 0]) == adapter.tokenizer.bos_token_id
    assert int((ids.inputs["input_ids"][0] == adapter.tokenizer.bos_token_id).sum()) == 1


def test_an_instruct_model_keeps_its_template(tmp_path):
    adapter = adapter_for(_tiny_causal_lm(tmp_path, "granite"))
    assert adapter.prompt_format == "chat"
    assert adapter.render(problem(text="Q?")).text.startswith("<|im_start|>system\n")


def test_a_vlm_refuses_a_plain_format():
    with pytest.raises(PromptFormatError, match=r"writes text only.*use prompt format chat"):
        adapter_for("tiny:qwen2_5_vl", AdapterOptions(prompt_format="plain"))
