"""Qwen3.5's own rules: its tokenizer class, the thinking switch of its template, trimmed
contents, the hybrid decoder (Gated DeltaNet + full attention) on transformers' torch
path, left padding past one delta-rule chunk, and a short cohort run (shared tests:
test_adapters.py, driven by the facts in processors/qwen3_5.py)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from tests.helpers.adapters import count_image_tokens, greedy_agrees_with_logprob_pass
from tests.helpers.cohort import assert_cohort_ran, cohort_run
from vlcohort.processors import AdapterOptions, adapter_for
from vlcohort.processors.base import FamilySettingsError
from vlcohort.training.logprobs import completion_logprobs

from .helpers import image, problem

NAME = "qwen3_5"


def test_tokenizer_and_image_processor_classes(loaded):
    adapter, _ = loaded[NAME]
    assert type(adapter.tokenizer).__name__ == "Qwen3_5Tokenizer"
    ip = adapter.processor.image_processor
    assert type(ip).__name__ == "Qwen2VLImageProcessor" and (ip.patch_size, ip.merge_size) == (16, 2)


# Tiny Qwen3.5 (the Qwen3-VL rule): factor 32; with max_pixels = 16*32*32 = 16384,
# 600 x 400 -> beta = sqrt(240000/16384) = 3.827; H' = floor(3.27) = 3 cells,
# W' = floor(4.90) = 4 cells -> 12 tokens
def test_pixel_budget_setting(tiny_paths):
    adapter = adapter_for(tiny_paths[NAME], AdapterOptions(processor={"max_pixels": 16 * 32 * 32}))
    n, batch = count_image_tokens(adapter, image(600, 400))
    assert n == 12 == batch.image_token_counts[0][0]


# ------------------------------------------------------------------ rendering


def test_non_thinking_turn_by_default(loaded):
    """The published template's non-thinking turn: an empty think block opens the answer;
    no default system turn; contents trimmed."""
    adapter, _ = loaded[NAME]
    text = adapter.render(problem(text="  Q?\n"), system_prompt=None).text
    assert text == "<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def test_enable_thinking_setting_opens_the_think_block(tiny_paths):
    adapter = adapter_for(tiny_paths[NAME], AdapterOptions(processor={"enable_thinking": True}))
    p = problem(text="Q?", images=[image(60, 60)], options=["x", "y"])
    text = adapter.render(p, system_prompt="SYS", instruction="INSTR").text
    assert text == ("<|im_start|>system\nSYS<|im_end|>\n<|im_start|>user\n"
                    "<|vision_start|><|image_pad|><|vision_end|>Q?\nChoices:\nA. x\nB. y\nINSTR"
                    "<|im_end|>\n<|im_start|>assistant\n<think>\n")
    ids = adapter.tokenizer.convert_tokens_to_ids(["<think>", "</think>"])
    assert adapter.tokenizer.encode("<think>\n", add_special_tokens=False)[0] == ids[0]


def test_settings_are_checked(tiny_paths):
    with pytest.raises(FamilySettingsError, match=r"processor\.enable_thinking: expected bool"):
        adapter_for(tiny_paths[NAME], AdapterOptions(processor={"enable_thinking": "yes"}))
    with pytest.raises(FamilySettingsError, match=r"processor\.thinking.*enable_thinking") as e:
        adapter_for(tiny_paths[NAME], AdapterOptions(processor={"thinking": True}))
    assert "max_pixels" in str(e.value)


# ------------------------------------------------------------------ the hybrid decoder


def test_decoder_is_hybrid(loaded):
    _, model = loaded[NAME]
    layers = model.model.language_model.layers
    assert list(model.config.text_config.layer_types) == ["linear_attention", "full_attention"]
    assert type(layers[0].linear_attn).__name__ == "Qwen3_5GatedDeltaNet"
    assert type(layers[1].self_attn).__name__ == "Qwen3_5Attention"


def test_torch_delta_rule_paths_agree():
    """Without flash-linear-attention transformers runs its own torch functions: the
    chunked rule (prefill, training) and the recurrent one (decode) compute the same thing,
    which is why generation and the training pass agree on CPU."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m

    if importlib.util.find_spec("fla") is not None:
        pytest.skip("flash-linear-attention is installed: the torch path is not the one used")
    gen = torch.Generator().manual_seed(0)
    B, L, H, D = 2, 70, 2, 16  # 70 tokens: more than one chunk of 64
    q, k, v = (torch.randn(B, L, H, D, generator=gen) for _ in range(3))
    g = -torch.rand(B, L, H, generator=gen)
    beta = torch.rand(B, L, H, generator=gen)
    chunk, s1 = m.torch_chunk_gated_delta_rule(q, k, v, g=g, beta=beta, output_final_state=True,
                                               use_qk_l2norm_in_kernel=True)
    rec, s2 = m.torch_recurrent_gated_delta_rule(q, k, v, g=g, beta=beta, initial_state=None,
                                                 output_final_state=True,
                                                 use_qk_l2norm_in_kernel=True)
    assert torch.allclose(chunk, rec, atol=1e-4) and torch.allclose(s1, s2, atol=1e-4)


def test_left_padding_longer_than_a_chunk(loaded):
    """A prompt left-padded by more than one 64-token chunk of the delta rule gives the
    same completion log-probs as alone: padding leaves the recurrent state at zero."""
    adapter, model = loaded[NAME]
    target = adapter.render(problem("t", images=[image(100, 60)]))
    long = adapter.render(problem("o", text="A much longer question " * 30))
    completion = adapter.tokenizer.encode("The answer is B.", add_special_tokens=False)
    alone = adapter.encode_prompts([target])
    mixed = adapter.encode_prompts([long, target])
    assert mixed.prompt_len - alone.prompt_len > 64
    with torch.no_grad():
        lp_alone = completion_logprobs(adapter, model, adapter.encode_training(alone, [completion]))
        lp_mixed = completion_logprobs(adapter, model,
                                       adapter.encode_training(mixed, [completion, completion]))
    assert torch.allclose(lp_alone[0], lp_mixed[1], atol=1e-4)


def test_greedy_generation_agrees_with_the_logprob_pass(loaded):
    """Generation decodes with the recurrent rule after a chunked prefill; the log-prob
    pass runs the chunked rule over the whole sequence."""
    adapter, model = loaded[NAME]
    rendered = [adapter.render(problem("a", images=[image(100, 60)])),
                adapter.render(problem("b", text="Solve 2+2.", images=[image(60, 130), image(32, 32)])),
                adapter.render(problem("c", text="No image, and a longer question than the others."))]
    assert greedy_agrees_with_logprob_pass(adapter, model, adapter.encode_prompts(rendered),
                                           max_new_tokens=12) >= 3


def test_gradient_reaches_the_linear_attention(loaded):
    adapter, model = loaded[NAME]
    batch = adapter.encode_prompts([adapter.render(problem(images=[image(100, 60)]))])
    train = adapter.encode_training(batch, [adapter.tokenizer.encode("B", add_special_tokens=False)])
    model.zero_grad()
    completion_logprobs(adapter, model, train).sum().backward()
    delta = model.model.language_model.layers[0].linear_attn
    assert all(p.grad is not None and p.grad.abs().sum() > 0
               for p in (delta.A_log, delta.in_proj_qkv.weight, delta.conv1d.weight))
    model.zero_grad()


def test_cohort_with_qwen3_vl_runs_two_steps(tmp_path, tiny_cache):
    assert_cohort_ran(cohort_run(tmp_path / "run", NAME, "qwen3_vl"), "AB")


def test_moe_form_is_served_by_the_same_adapter(tmp_path):
    """``qwen3_5_moe`` checkpoints (Qwen3.5's MoE models) load through the same adapter:
    the real MoE class, Qwen3.5's prompt, generation agreeing with the log-prob pass."""
    from vlcohort.processors.qwen3_5 import Qwen3_5Adapter, build_qwen3_5_moe
    from vlcohort.processors.tiny import sharpen

    build_qwen3_5_moe(tmp_path, seed=0)
    adapter = adapter_for(tmp_path)
    assert type(adapter) is Qwen3_5Adapter
    model = sharpen(adapter.load_model(), seed=1)
    assert type(model).__name__ == "Qwen3_5MoeForConditionalGeneration"
    assert "SparseMoeBlock" in type(model.model.language_model.layers[0].mlp).__name__
    rendered = [adapter.render(problem("a", images=[image(100, 60)])),
                adapter.render(problem("b", text="No image, and a longer question."))]
    assert rendered[1].text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert greedy_agrees_with_logprob_pass(adapter, model, adapter.encode_prompts(rendered)) >= 2
