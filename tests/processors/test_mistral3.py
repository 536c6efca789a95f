"""Mistral-3 / Pixtral's own rules: the longest-edge cap and the 28 px grid written row by
row ([IMG] x cols + [IMG_BREAK], the last row ending [IMG_END]), the template's
[SYSTEM_PROMPT] / [INST] turns without a generation prompt, greedy decoding and a short
cohort run (shared tests: test_adapters.py, driven by the facts in processors/mistral3.py)."""

from __future__ import annotations

import pytest
import torch

from tests.helpers.adapters import count_image_tokens, greedy_agrees_with_logprob_pass
from tests.helpers.cohort import assert_cohort_ran, cohort_run
from vlcohort.processors import AdapterOptions, adapter_for

from .helpers import image, problem

NAME = "mistral3"

# Tiny: patch 14 x spatial merge 2 = 28 px per token, longest edge 112 px (real: 1540).
# (rows, cols) after "scale to the longest edge (floor each side), ceil sides to 28 px":
#   100 x 60 : fits -> rows ceil(60/28) = 3, cols ceil(100/28) = 4
#   600 x 400: ratio 600/112 = 5.357 -> 112 x floor(400/5.357) = 74 -> rows ceil(74/28) = 3,
#              cols 4
#    60 x 250: ratio 250/112 = 2.232 -> floor(60/2.232) = 26 x 112 -> rows 4, cols 1
#    28 x 28 : rows 1, cols 1
# The prompt holds rows x cols [IMG], rows - 1 [IMG_BREAK] and one [IMG_END]; the image
# the tower sees is (rows x 28) x (cols x 28) px.
GRIDS = [((100, 60), (3, 4)), ((600, 400), (3, 4)), ((60, 250), (4, 1)), ((28, 28), (1, 1))]


@pytest.mark.parametrize("size,grid", GRIDS)
def test_image_is_written_row_by_row(loaded, size, grid):
    adapter, _ = loaded[NAME]
    rows, cols = grid
    batch = adapter.encode_prompts([adapter.render(problem(images=[image(*size)]))])
    tokens = adapter.tokenizer.convert_ids_to_tokens(batch.inputs["input_ids"][0])
    start = tokens.index("[IMG]")
    row = ["[IMG]"] * cols
    want = (row + ["[IMG_BREAK]"]) * (rows - 1) + row + ["[IMG_END]"]
    assert tokens[start: start + len(want)] == want
    assert tokens.count("[IMG]") == rows * cols == batch.image_token_counts[0][0]
    assert batch.inputs["image_sizes"][0].tolist() == [rows * 28, cols * 28]
    assert adapter.image_grid(*size) == grid


# processor: {longest_edge: 56} (below the checkpoint's 112): 600 x 400 -> ratio
# 600/56 = 10.71 -> 56 x floor(37.33) = 37 -> rows ceil(37/28) = 2, cols 2 -> 4 [IMG]
# (12 with the checkpoint's cap, above); 100 x 60 -> ratio 1.786 -> 56 x floor(33.6) = 33
# -> rows 2, cols 2 -> 4; 28 x 28 fits -> 1
@pytest.mark.parametrize("size,tokens", [((600, 400), 4), ((100, 60), 4), ((28, 28), 1)])
def test_longest_edge_setting(tiny_paths, size, tokens):
    adapter = adapter_for(tiny_paths[NAME], AdapterOptions(processor={"longest_edge": 56}))
    n, batch = count_image_tokens(adapter, image(*size))
    assert n == tokens == batch.image_token_counts[0][0] == adapter.image_token_count(*size)
    # a cap above the checkpoint's changes nothing
    wide = adapter_for(tiny_paths[NAME], AdapterOptions(processor={"longest_edge": 4000}))
    assert wide.longest_edge() == 112


def test_template_has_system_block_and_no_generation_prompt(loaded):
    adapter, _ = loaded[NAME]
    p = problem(text="Q?", images=[image(60, 60)], options=["x", "y"])
    text = adapter.render(p, system_prompt="SYS", instruction="INSTR").text
    assert text == ("<s>[SYSTEM_PROMPT]SYS[/SYSTEM_PROMPT][INST][IMG]Q?\nChoices:\nA. x\nB. y\n"
                    "INSTR[/INST]")
    # no system message: the template writes its own default block
    text = adapter.render(problem(text="Q?"), system_prompt=None).text
    assert text == "<s>[SYSTEM_PROMPT]You are a helpful assistant.[/SYSTEM_PROMPT][INST]Q?[/INST]"


def test_row_delimiters_are_never_generated(loaded):
    adapter, _ = loaded[NAME]
    tokens = set(adapter.tokenizer.convert_ids_to_tokens(adapter.suppressed_token_ids()))
    assert tokens == {"[IMG]", "[IMG_BREAK]", "[IMG_END]"}
    assert adapter.tokenizer.convert_ids_to_tokens(adapter.stop_token_ids())[0] == "</s>"


def test_two_images_of_different_sizes_pad_into_one_pixel_batch(loaded):
    """Pixtral pads images to the largest H and W of the batch; ``image_sizes`` keeps each
    one's own size so the tower reads only its patches."""
    adapter, model = loaded[NAME]
    p = problem(text="Is <image1> bigger than <image2>?", images=[image(100, 60), image(60, 250)])
    batch = adapter.encode_prompts([adapter.render(p)])
    assert batch.image_token_counts == [[12, 4]]
    assert batch.inputs["image_sizes"].tolist() == [[84, 112], [112, 28]]
    assert tuple(batch.inputs["pixel_values"].shape) == (2, 3, 112, 112)
    with torch.no_grad():
        feats = model.model.get_image_features(batch.inputs["pixel_values"],
                                               batch.inputs["image_sizes"]).pooler_output
    assert [f.shape[0] for f in feats] == [12, 4]


def test_greedy_generation_agrees_with_the_logprob_pass(loaded):
    adapter, model = loaded[NAME]
    rendered = [adapter.render(problem("a", images=[image(100, 60)])),
                adapter.render(problem("b", text="Solve 2+2.", images=[image(60, 130), image(28, 28)])),
                adapter.render(problem("c", text="No image, and a longer question than the others."))]
    assert greedy_agrees_with_logprob_pass(adapter, model, adapter.encode_prompts(rendered)) >= 3


def test_cohort_with_glm4v_runs_two_steps(tmp_path, tiny_cache):
    assert_cohort_ran(cohort_run(tmp_path / "run", NAME, "glm4v"), "AB")
