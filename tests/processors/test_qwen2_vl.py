"""Qwen2-VL's own rules: 28 px cells and its pixel budget, the default system turn of its
template, its vision tower, greedy decoding and a short cohort run (shared tests:
test_adapters.py, driven by the facts in processors/qwen2_vl.py)."""

from __future__ import annotations

import re

import pytest

from tests.helpers.adapters import count_image_tokens, greedy_agrees_with_logprob_pass
from tests.helpers.cohort import assert_cohort_ran, cohort_run
from vlcohort.processors import AdapterOptions, adapter_for

from .helpers import image, problem

NAME = "qwen2_vl"

# Tiny Qwen2-VL: factor 28 (patch 14 x merge 2); tokens = (H' / 28) * (W' / 28).
#  default budget (4 to 64 cells): 100 x 60 -> 56 x 112 -> 2 * 4 = 8 tokens
#  with max_pixels = 16*28*28 = 12544: 600 x 400 -> beta = sqrt(240000/12544) = 4.374
#            H' = floor(400/4.374/28) = floor(3.27) = 3 cells, W' = floor(600/4.374/28)
#            = floor(4.90) = 4 cells -> 12 tokens
#  with min_pixels = 16*28*28: 100 x 60 (rounded 56 x 112 = 6272 < 12544) -> beta =
#            sqrt(12544/6000) = 1.446; H' = ceil(60*1.446/28) = ceil(3.10) = 4 cells,
#            W' = ceil(100*1.446/28) = ceil(5.16) = 6 cells -> 24 tokens
CASES = [((100, 60), {}, 8), ((600, 400), {"max_pixels": 16 * 28 * 28}, 12),
         ((100, 60), {"min_pixels": 16 * 28 * 28}, 24)]


@pytest.mark.parametrize("size,budget,expected", CASES)
def test_pixel_budget_and_the_28px_grid(tiny_paths, size, budget, expected):
    adapter = adapter_for(tiny_paths[NAME], AdapterOptions(**budget))
    assert adapter.factor == 28
    n, batch = count_image_tokens(adapter, image(*size))
    assert n == expected == batch.image_token_counts[0][0]
    t, h, w = batch.inputs["image_grid_thw"][0].tolist()
    assert (t, h * w // 4) == (1, expected)
    assert tuple(batch.inputs["pixel_values"].shape) == (h * w, 3 * 2 * 14 * 14)


def test_turn_structure_with_image_options_and_instruction(loaded):
    adapter, _ = loaded[NAME]
    p = problem(text="Q?", images=[image(60, 60)], options=["x", "y"])
    text = adapter.render(p, system_prompt="SYS", instruction="INSTR").text
    assert re.match(r"^<\|im_start\|>system\nSYS<\|im_end\|>\n<\|im_start\|>user\n"
                    r"<\|vision_start\|><\|image_pad\|><\|vision_end\|>Q\?\nChoices:\nA\. x\nB\. y\n"
                    r"INSTR<\|im_end\|>\n<\|im_start\|>assistant\n$", text), text


def test_template_inserts_its_default_system_turn(loaded):
    """Qwen2-VL's published template writes "You are a helpful assistant." when the
    conversation has no system message (Qwen3-VL's does not)."""
    adapter, _ = loaded[NAME]
    text = adapter.render(problem(text="Q?"), system_prompt=None).text
    assert text == ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                    "<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n")


def test_vision_tower_is_qwen2_vls(loaded):
    """Qwen2-VL's tower: full attention in every block, no window list (Qwen2.5-VL has
    ``fullatt_block_indexes``), 14 px patches."""
    adapter, model = loaded[NAME]
    vision = model.model.visual
    assert type(vision).__name__ == "Qwen2VisionTransformerPretrainedModel"
    assert not hasattr(model.config.vision_config, "fullatt_block_indexes")
    assert adapter.processor.image_processor.patch_size == 14


def test_greedy_generation_agrees_with_the_logprob_pass(loaded):
    adapter, model = loaded[NAME]
    rendered = [adapter.render(problem("a", images=[image(100, 60)])),
                adapter.render(problem("b", text="Solve 2+2.", images=[image(60, 130), image(28, 28)])),
                adapter.render(problem("c", text="No image, and a longer question than the others."))]
    assert greedy_agrees_with_logprob_pass(adapter, model, adapter.encode_prompts(rendered)) >= 3


def test_cohort_with_qwen3_5_runs_two_steps(tmp_path, tiny_cache):
    assert_cohort_ran(cohort_run(tmp_path / "run", NAME, "qwen3_5"), "AB")
