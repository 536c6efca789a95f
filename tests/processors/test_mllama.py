"""Llama-3.2-Vision's own rules: one <|image|> per image read through cross-attention, the
tile grid / aspect-ratio ids of its image processor, the 4-D ``cross_attention_mask`` and
its extension over a completion, the template's refusal of a system message with images
(folded into the user turn), greedy decoding and a short cohort run (shared tests:
test_adapters.py, driven by the facts in processors/mllama.py)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from tests.helpers.adapters import greedy_agrees_with_logprob_pass
from tests.helpers.cohort import assert_cohort_ran, cohort_run
from vlcohort.processors import adapter_for

from .helpers import image, problem

NAME = "mllama"

# Tiny tiles: 56 px (real: 560), at most 4 per image. Grids (rows, cols), rows x cols <= 4,
# in Mllama's order: (1,1) (1,2) (1,3) (1,4) (2,1) (2,2) (3,1) (4,1) -> aspect_ratio_ids
# 1..8. Scale of a grid = min(56 rows / H, 56 cols / W); the smallest scale >= 1 wins,
# else the largest; ties -> the smallest area.
#   56 x 56  (W x H): (1,1) scale 1, as do (1,2)...(4,1) -> smallest area (1,1) -> 1 tile, id 1
#  100 x 60 : (1,x) min(0.933, ..) <= 0.933; (2,2) min(1.867, 1.12) = 1.12; (2,1), (3,1),
#             (4,1) 0.56 -> only (2,2) >= 1 -> 4 tiles, id 6
#  120 x 50 : (1,3) min(1.12, 1.4) = 1.12, (1,4) min(1.12, 1.867) = 1.12, (2,2) 0.933,
#             (1,2) 0.933 -> tie (1,3) / (1,4) -> smaller area (1,3) -> 3 tiles, id 3
#  600 x 400: all below 1: (2,2) min(0.28, 0.187) = 0.187 is the largest ((1,2) 0.14,
#             (1,1) 0.093) -> 4 tiles, id 6
#   60 x 250: all below 1: (4,1) min(0.896, 0.933) = 0.896 the largest ((3,1) 0.672)
#             -> 4 tiles, id 8
#   30 x 30 : every grid scales >= 1.867; the smallest, 1.867, for (1,1) and the 1 x n /
#             n x 1 grids -> (1,1) -> 1 tile, id 1
TILES = [((56, 56), (1, 1), 1), ((100, 60), (2, 2), 6), ((120, 50), (1, 3), 3),
         ((600, 400), (2, 2), 6), ((60, 250), (4, 1), 8), ((30, 30), (1, 1), 1)]


@pytest.mark.parametrize("size,grid,ratio_id", TILES)
def test_tiles_and_aspect_ratio_ids(loaded, size, grid, ratio_id):
    adapter, _ = loaded[NAME]
    batch = adapter.encode_prompts([adapter.render(problem(images=[image(*size)]))])
    inputs = batch.inputs
    tiles = grid[0] * grid[1]
    assert adapter.tile_grid(*size) == grid and adapter.aspect_ratio_id(*size) == ratio_id
    assert inputs["aspect_ratio_ids"].tolist() == [[ratio_id]]
    assert inputs["aspect_ratio_mask"].tolist() == [[[1] * tiles + [0] * (4 - tiles)]]
    assert tuple(inputs["pixel_values"].shape) == (1, 1, 4, 3, 56, 56)  # padded to 4 tiles
    # one <|image|> token in the text, whatever the size
    assert int((inputs["input_ids"] == adapter.image_token_id).sum()) == 1
    assert batch.image_token_counts == [[1]]


def test_cross_attention_mask_and_its_completion_rows(loaded):
    """Tokens before the image see no tile; from the <|image|> token on, the image's real
    tiles; completion tokens repeat the last prompt row (what ``generate`` appends)."""
    adapter, _ = loaded[NAME]
    batch = adapter.encode_prompts([adapter.render(problem(images=[image(120, 50)]))])
    mask = batch.inputs["cross_attention_mask"]  # [1, P, 1, 4]
    P = batch.prompt_len
    at = batch.inputs["input_ids"][0].tolist().index(adapter.image_token_id)
    assert tuple(mask.shape) == (1, P, 1, 4)
    assert mask[0, :at].sum() == 0
    assert mask[0, at:, 0].tolist() == [[1, 1, 1, 0]] * (P - at)  # 3 tiles
    train = adapter.encode_training(batch, [[5, 6, 7]])
    ext = train.inputs["cross_attention_mask"]
    assert tuple(ext.shape) == (1, P + 3, 1, 4)
    assert torch.equal(ext[:, :P], mask) and ext[0, P:, 0].tolist() == [[1, 1, 1, 0]] * 3


def test_two_images_masks(loaded):
    """Images together before the text: every later token sees both. Images apart: a
    token sees the last image before it (Mllama's rule), so the completion sees image 2."""
    adapter, _ = loaded[NAME]
    together = adapter.encode_prompts([adapter.render(problem(images=[image(100, 60), image(30, 30)]))])
    m = together.inputs["cross_attention_mask"][0, -1]  # [2 images, 4 tiles]
    assert m.tolist() == [[1, 1, 1, 1], [1, 0, 0, 0]]
    apart = adapter.encode_prompts([adapter.render(problem(
        text="Is <image1> bigger than <image2>?", images=[image(100, 60), image(30, 30)]))])
    ids = apart.inputs["input_ids"][0].tolist()
    first = ids.index(adapter.image_token_id)
    second = ids.index(adapter.image_token_id, first + 1)
    mask = apart.inputs["cross_attention_mask"][0]  # [P, 2, 4]
    assert mask[first + 1].tolist() == [[1, 1, 1, 1], [0, 0, 0, 0]]
    assert mask[-1].tolist() == [[0, 0, 0, 0], [1, 0, 0, 0]]
    assert second > first + 1


def test_system_prompt_is_folded_in_with_images(loaded):
    adapter, _ = loaded[NAME]
    p = problem(text="Q?", images=[image(60, 60)], options=["x", "y"])
    text = adapter.render(p, system_prompt="SYS", instruction="INSTR").text
    assert text == ("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nSYS\n\n<|image|>"
                    "Q?\nChoices:\nA. x\nB. y\nINSTR<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n")
    text = adapter.render(problem(text="Q?"), system_prompt="SYS").text
    assert text == ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
                    "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nSYS<|eot_id|>"
                    "<|start_header_id|>user<|end_header_id|>\n\nQ?<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n")
    # the published template itself refuses the combination the fold avoids
    msgs = [{"role": "system", "content": "SYS"},
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Q?"}]}]
    with pytest.raises(Exception, match="incompatible with system messages"):
        adapter.processor.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)


def test_mixed_batch_gives_every_prompt_an_aspect_ratio_row(loaded):
    """Upstream drops image-less prompts from ``aspect_ratio_ids`` / ``_mask``; the
    adapter puts the rows back, so such a batch runs (and matches the prompts alone)."""
    adapter, model = loaded[NAME]
    rendered = [adapter.render(problem("a", text="No image here.")),
                adapter.render(problem("b", images=[image(100, 60)]))]
    batch = adapter.encode_prompts(rendered)
    assert batch.inputs["aspect_ratio_ids"].tolist() == [[0], [6]]
    assert batch.inputs["aspect_ratio_mask"].tolist() == [[[1, 0, 0, 0]], [[1, 1, 1, 1]]]
    with torch.no_grad():
        out = model(**batch.inputs).logits[:, -1]
        alone = model(**adapter.encode_prompts(rendered[1:]).inputs).logits[:, -1]
    assert torch.allclose(out[1], alone[0], atol=1e-4)


def test_image_token_outside_the_lm_head_is_not_suppressed(tiny_paths, tmp_path):
    """Published checkpoints put <|image|> at id 128256 = text vocab_size (an extra
    embedding row, no logit): it must not index the logits."""
    folder = tmp_path / "published-layout"
    shutil.copytree(tiny_paths[NAME], folder)
    cfg = json.loads((folder / "config.json").read_text())
    image_id = cfg["image_token_index"]
    cfg["text_config"]["vocab_size"] = image_id
    (folder / "config.json").write_text(json.dumps(cfg))
    adapter = adapter_for(folder)
    assert adapter.image_token_id == image_id
    assert image_id not in adapter.suppressed_token_ids()
    assert image_id in adapter_for(tiny_paths[NAME]).suppressed_token_ids()


def test_greedy_generation_agrees_with_the_logprob_pass(loaded):
    adapter, model = loaded[NAME]
    rendered = [adapter.render(problem("a", images=[image(100, 60)])),
                adapter.render(problem("b", text="Solve 2+2.", images=[image(60, 130), image(28, 28)])),
                adapter.render(problem("c", text="No image, and a longer question than the others."))]
    assert greedy_agrees_with_logprob_pass(adapter, model, adapter.encode_prompts(rendered)) >= 3


def test_cohort_with_gemma3_runs_two_steps(tmp_path, tiny_cache):
    assert_cohort_ran(cohort_run(tmp_path / "run", NAME, "gemma3"), "AB")
