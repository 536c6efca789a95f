"""GLM-4.1V's own rules: its smart resize (28 px cells, a budget checked on the two-frame
temporal patch, short sides scaled up to 28), ``mm_token_type_ids`` and the 3-D position
ids they drive, the ``[gMASK]<sop>`` template and greedy decoding (its 2-step cohort run, with
Mistral-3, is in test_mistral3.py; shared tests: test_adapters.py, driven by the facts in
processors/glm4v.py)."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.adapters import count_image_tokens, greedy_agrees_with_logprob_pass
from vlcohort.processors import AdapterOptions, adapter_for

from .helpers import image, problem

NAME = "glm4v"

# Tiny budget: t x H x W in [6272, 100352] with t = temporal_patch_size = 2 (see the
# module): per image 3136..50176 px, i.e. 4..64 cells of 28 x 28. Tokens = (H'/28) x (W'/28).
#  252 x 252: round -> 252 x 252, 2*252*252 = 127008 > 100352 -> beta = sqrt(127008/100352)
#             = 1.125 -> floor(252/1.125/28) = 8 per side -> 64 (a budget on H x W alone,
#             as Qwen2-VL's, would keep 9 x 9 = 81)
#   14 x 100 (W x H): a side under 28 -> scale max(28/14, 28/100) = 2 -> W 28, H 200 ->
#             round(200/28) = 7 -> 2*196*28 = 10976 in range -> 7 rows x 1 col = 7
#  100 x 14 : the same, transposed -> 1 row x 7 cols = 7
#  (grid_thw is (1, 2 rows, 2 cols) in 14 px patches: one temporal patch for a still image)
CASES = [((252, 252), (8, 8)), ((14, 100), (7, 1)), ((100, 14), (1, 7))]


@pytest.mark.parametrize("size,cells", CASES)
def test_smart_resize_with_the_temporal_patch(loaded, size, cells):
    adapter, _ = loaded[NAME]
    n, batch = count_image_tokens(adapter, image(*size))
    rows, cols = cells
    assert n == rows * cols == batch.image_token_counts[0][0]
    assert batch.inputs["image_grid_thw"][0].tolist() == [1, 2 * rows, 2 * cols]
    # 14 x 14 patches of 3 channels x 2 frames, one row per patch
    assert tuple(batch.inputs["pixel_values"].shape) == (4 * rows * cols, 3 * 2 * 14 * 14)


# Per-image budget from the options, as for Qwen2-VL (the adapter passes 2x to the
# processor): max_pixels = 16*28*28 = 12544 -> processor longest_edge 25088; 600 x 400
# rounded 392 x 588, 2*392*588 > 25088 -> beta = sqrt(2*240000/25088) = 4.374 ->
# floor(400/4.374/28) = floor(3.27) = 3 rows, floor(600/4.374/28) = floor(4.90) = 4 cols -> 12
# min_pixels = 16*28*28: 100 x 60 (2*56*112 = 12544 < 25088) -> beta = sqrt(25088/(2*6000))
# = 1.446 -> ceil(60*1.446/28) = ceil(3.10) = 4 rows, ceil(100*1.446/28) = ceil(5.16) = 6 -> 24
BUDGET_CASES = [((600, 400), {"max_pixels": 16 * 28 * 28}, 12),
                ((100, 60), {"min_pixels": 16 * 28 * 28}, 24)]


@pytest.mark.parametrize("size,budget,expected", BUDGET_CASES)
def test_per_image_pixel_budget_from_the_options(tiny_paths, size, budget, expected):
    adapter = adapter_for(tiny_paths[NAME], AdapterOptions(**budget))
    n, batch = count_image_tokens(adapter, image(*size))
    assert n == expected == batch.image_token_counts[0][0]
    key = "longest_edge" if "max_pixels" in budget else "shortest_edge"
    assert adapter.vllm_processor_kwargs()["size"][key] == 2 * 16 * 28 * 28
    with pytest.raises(ValueError, match="min_pixels"):
        adapter_for(tiny_paths[NAME], AdapterOptions(min_pixels=9000, max_pixels=5000)).processor_size()


def test_image_is_wrapped_and_typed(loaded):
    adapter, _ = loaded[NAME]
    batch = adapter.encode_prompts([adapter.render(problem(images=[image(100, 60)]))])
    ids = batch.inputs["input_ids"][0]
    tokens = adapter.tokenizer.convert_ids_to_tokens(ids)
    start = tokens.index("<|begin_of_image|>")
    assert tokens[start: start + 10] == ["<|begin_of_image|>"] + ["<|image|>"] * 8 + ["<|end_of_image|>"]
    types = batch.inputs["mm_token_type_ids"][0]
    assert torch.equal(types == 1, ids == adapter.image_token_id) and int(types.sum()) == 8
    train = adapter.encode_training(batch, [[5, 6, 7]])
    assert train.inputs["mm_token_type_ids"][0, -3:].tolist() == [0, 0, 0]  # completion: text


def test_3d_position_ids_follow_the_image_grid(loaded):
    """GLM's 3-D RoPE: an image's tokens share the temporal index and count rows / columns
    of the merged grid from where the image starts; the text after it resumes at that
    start + max(rows, cols)."""
    adapter, model = loaded[NAME]
    batch = adapter.encode_prompts([adapter.render(problem(text="Q?", images=[image(100, 60)]),
                                                   system_prompt=None)])
    inputs = batch.inputs
    pos, _ = model.model.get_rope_index(inputs["input_ids"], inputs["mm_token_type_ids"],
                                        inputs["image_grid_thw"], None, inputs["attention_mask"])
    t, h, w = pos[:, 0].tolist()  # each [L]
    first = inputs["input_ids"][0].tolist().index(adapter.image_token_id)
    img = slice(first, first + 8)  # a 2 x 4 grid of merged cells
    assert t[img] == [first] * 8
    assert h[img] == [first] * 4 + [first + 1] * 4
    assert w[img] == [first + c for c in range(4)] * 2
    assert (t[first + 8], h[first + 8], w[first + 8]) == (first + 4,) * 3  # <|end_of_image|>


def test_template_turns(loaded):
    adapter, _ = loaded[NAME]
    p = problem(text="Q?", images=[image(60, 60)], options=["x", "y"])
    text = adapter.render(p, system_prompt="SYS", instruction="INSTR").text
    assert text == ("[gMASK]<sop><|system|>\nSYS<|user|>\n<|begin_of_image|><|image|><|end_of_image|>"
                    "Q?\nChoices:\nA. x\nB. y\nINSTR<|assistant|>\n")
    assert adapter.render(problem(text="Q?"), system_prompt=None).text == (
        "[gMASK]<sop><|user|>\nQ?<|assistant|>\n")
    stops = adapter.tokenizer.convert_ids_to_tokens(adapter.stop_token_ids())
    assert {"<|user|>", "<|observation|>", "<|endoftext|>"} <= set(stops)


def test_greedy_generation_agrees_with_the_logprob_pass(loaded):
    adapter, model = loaded[NAME]
    rendered = [adapter.render(problem("a", images=[image(100, 60)])),
                adapter.render(problem("b", text="Solve 2+2.", images=[image(60, 130), image(28, 28)])),
                adapter.render(problem("c", text="No image, and a longer question than the others."))]
    assert greedy_agrees_with_logprob_pass(adapter, model, adapter.encode_prompts(rendered)) >= 3
