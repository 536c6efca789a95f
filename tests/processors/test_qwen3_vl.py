"""Qwen3-VL's own rules (dense and MoE): 32 px cells, its pixel budget, no default system
turn, DeepStack, the MoE decoder, the cross-family demo recipe and short cohort runs
(shared tests: test_adapters.py, driven by the facts in processors/qwen3_vl.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tests.helpers.adapters import count_image_tokens, greedy_agrees_with_logprob_pass
from tests.helpers.cohort import assert_cohort_ran, cohort_run
from vlcohort.cli import main
from vlcohort.config import load_config
from vlcohort.monitoring.metrics import read_metrics
from vlcohort.processors import AdapterOptions, adapter_for
from vlcohort.training.logprobs import completion_logprobs

from .helpers import image, problem

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "configs" / "demo_qwen3vl_internvl.yaml"


# ------------------------------------------------------------------ image rule


# Tiny Qwen3-VL: factor 32 (patch 16 x merge 2); tokens = (H' / 32) * (W' / 32).
#  with max_pixels = 16*32*32 = 16384: 600 x 400 -> beta = sqrt(240000/16384) = 3.827
#            H' = floor(400/3.827/32) = floor(3.27) = 3 cells, W' = floor(600/3.827/32)
#            = floor(4.90) = 4 cells -> 12 tokens
#  with min_pixels = 16*32*32: 100 x 60 (rounded 64 x 96 = 6144 < 16384) -> beta =
#            sqrt(16384/6000) = 1.652; H' = ceil(60*1.652/32) = ceil(3.10) = 4 cells,
#            W' = ceil(100*1.652/32) = ceil(5.16) = 6 cells -> 24 tokens
#  default budget: 100 x 60 -> 64 x 96 -> 2 * 3 = 6 tokens
BUDGET_CASES = [((100, 60), {}, 6), ((600, 400), {"max_pixels": 16 * 32 * 32}, 12),
                ((100, 60), {"min_pixels": 16 * 32 * 32}, 24)]


@pytest.mark.parametrize("name", ["qwen3_vl", "qwen3_vl_moe"])
@pytest.mark.parametrize("size,budget,expected", BUDGET_CASES)
def test_pixel_budget_and_the_32px_grid(tiny_paths, name, size, budget, expected):
    adapter = adapter_for(tiny_paths[name], AdapterOptions(**budget))
    assert adapter.factor == 32
    n, batch = count_image_tokens(adapter, image(*size))
    assert n == expected == batch.image_token_counts[0][0]
    t, h, w = batch.inputs["image_grid_thw"][0].tolist()
    assert (t, h * w // 4) == (1, expected)  # the grid of 16 px patches the tower sees
    # one row per 16 px patch, 3 channels x 2 frames x 16 x 16 values
    assert tuple(batch.inputs["pixel_values"].shape) == (h * w, 3 * 2 * 16 * 16)


def test_pixel_budget_as_a_processor_setting(tiny_paths):
    adapter = adapter_for(tiny_paths["qwen3_vl"],
                          AdapterOptions(processor={"max_pixels": 16 * 32 * 32}))
    assert count_image_tokens(adapter, image(600, 400))[0] == 12


def test_image_processor_is_the_published_one(loaded):
    adapter, _ = loaded["qwen3_vl"]
    ip = adapter.processor.image_processor
    assert type(ip).__name__ == "Qwen2VLImageProcessor"  # what Qwen3VLProcessor uses in 5.24
    assert (ip.patch_size, ip.merge_size, ip.temporal_patch_size) == (16, 2, 2)
    assert list(ip.image_mean) == [0.5, 0.5, 0.5] and list(ip.image_std) == [0.5, 0.5, 0.5]


# ------------------------------------------------------------------ rendering


def test_turn_structure_with_image_options_and_instruction(loaded):
    adapter, _ = loaded["qwen3_vl"]
    p = problem(text="Q?", images=[image(60, 60)], options=["x", "y"])
    text = adapter.render(p, system_prompt="SYS", instruction="INSTR").text
    assert re.match(r"^<\|im_start\|>system\nSYS<\|im_end\|>\n<\|im_start\|>user\n"
                    r"<\|vision_start\|><\|image_pad\|><\|vision_end\|>Q\?\nChoices:\nA\. x\nB\. y\n"
                    r"INSTR<\|im_end\|>\n<\|im_start\|>assistant\n$", text), text


def test_no_default_system_turn(loaded):
    """Unlike Qwen2.5-VL's template, Qwen3-VL's inserts no system turn of its own."""
    adapter, _ = loaded["qwen3_vl"]
    text = adapter.render(problem(text="Q?"), system_prompt=None).text
    assert text == "<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n"


def test_images_in_place_and_no_video_timestamps(loaded):
    adapter, _ = loaded["qwen3_vl"]
    p = problem(text="Compare <image1> with <image2>.", images=[image(60, 60), image(90, 60)])
    text = adapter.render(p, system_prompt=None).text
    assert ("Compare <|vision_start|><|image_pad|><|vision_end|> with "
            "<|vision_start|><|image_pad|><|vision_end|>.") in text
    assert "seconds>" not in text  # timestamps belong to video frames only


def test_mm_token_type_ids_mark_the_image_tokens(loaded):
    adapter, _ = loaded["qwen3_vl"]
    batch = adapter.encode_prompts([adapter.render(problem(images=[image(100, 60)]))])
    types = batch.inputs["mm_token_type_ids"]
    assert torch.equal(types.bool(), batch.inputs["input_ids"] == adapter.image_token_id)
    train = adapter.encode_training(batch, [[5, 6, 7]])
    assert train.inputs["mm_token_type_ids"][0, batch.prompt_len:].tolist() == [0, 0, 0]


# ------------------------------------------------------------------ model details


def _logprobs(adapter, model, batch, completion):
    return completion_logprobs(adapter, model, adapter.encode_training(batch, [completion]))


def test_deepstack_features_reach_the_decoder(loaded):
    """The DeepStack merger of vision block 0 feeds decoder layer 0: the log-probs depend
    on it and the gradient reaches it (through the core's log-prob pass)."""
    adapter, model = loaded["qwen3_vl"]
    assert list(model.config.vision_config.deepstack_visual_indexes) == [0]
    batch = adapter.encode_prompts([adapter.render(problem(images=[image(100, 60)]))])
    completion = adapter.tokenizer.encode("The answer is B.", add_special_tokens=False)
    merger = model.model.visual.deepstack_merger_list[0]
    model.zero_grad()
    lp = _logprobs(adapter, model, batch, completion)
    lp.sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in merger.parameters())
    model.zero_grad()
    saved = {k: v.clone() for k, v in merger.state_dict().items()}
    try:
        with torch.no_grad():
            for p in merger.parameters():
                p.zero_()
            without = _logprobs(adapter, model, batch, completion)
    finally:
        merger.load_state_dict(saved)
    assert not torch.allclose(lp.detach(), without, atol=1e-5)


def test_moe_decoder_routes_over_tiny_experts(loaded):
    adapter, model = loaded["qwen3_vl_moe"]
    text_cfg = model.config.text_config
    assert (text_cfg.num_experts, text_cfg.num_experts_per_tok) == (4, 2)
    mlps = [layer.mlp for layer in model.model.language_model.layers]
    assert all("SparseMoeBlock" in type(m).__name__ for m in mlps), [type(m).__name__ for m in mlps]
    batch = adapter.encode_prompts([adapter.render(problem(images=[image(100, 60)]))])
    model.zero_grad()
    _logprobs(adapter, model, batch, adapter.tokenizer.encode("B", add_special_tokens=False)).sum().backward()
    expert_grads = [p.grad for n, p in model.named_parameters() if ".experts." in n]
    assert expert_grads and any(g is not None and g.abs().sum() > 0 for g in expert_grads)
    model.zero_grad()


@pytest.mark.parametrize("name", ["qwen3_vl", "qwen3_vl_moe"])
def test_greedy_generation_agrees_with_the_logprob_pass(loaded, name):
    adapter, model = loaded[name]
    rendered = [adapter.render(problem("a", images=[image(100, 60)])),
                adapter.render(problem("b", text="Solve 2+2.", images=[image(60, 130), image(32, 32)])),
                adapter.render(problem("c", text="No image, and a longer question than the others."))]
    assert greedy_agrees_with_logprob_pass(adapter, model, adapter.encode_prompts(rendered)) >= 3


# ------------------------------------------------------------------ runs


def test_demo_recipe_validates_and_runs_two_steps(tmp_path, tiny_cache):
    cfg = load_config(DEMO)
    assert [a.path for a in cfg.agents] == ["tiny:qwen3_vl", "tiny:internvl3_5"]
    assert cfg.arms == ["co_rl", "ttrl"] and cfg.method == "co_rl"
    run = tmp_path / "demo"
    # the recipe itself, shrunk: short warm-ups, 2 RL steps, one arm, no held-out eval
    shrink = [str(DEMO), "arms=[]", "run.steps=2", "eval.every=0", "log.plot=false",
              "data.num_problems=16", "rollout.prompts_per_step=2",
              "rollout.rollouts_per_prompt=4", "grpo.micro_batch_seqs=8",
              f"run.output_dir={run}"]
    for i in (0, 1):
        shrink += [f"agents.{i}.warmup.steps=2", f"agents.{i}.warmup.uniform_steps=1",
                   f"agents.{i}.warmup.batch_size=4"]
    assert main(["train", *shrink]) == 0
    assert_cohort_ran(read_metrics(run / "metrics.jsonl"), "AB")


def test_moe_and_dense_cohort_runs_two_steps(tmp_path, tiny_cache):
    assert_cohort_ran(cohort_run(tmp_path / "run", "qwen3_vl_moe", "qwen3_vl"), "AB")
