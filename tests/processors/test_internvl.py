"""InternVL3.5's own rules: ``max_tiles`` (option and processor setting), one pixel row per
tile, the exact turn structure, placeholder numbering (shared tests: test_adapters.py)."""

from __future__ import annotations

import re

import pytest

from tests.helpers.adapters import count_image_tokens
from vlcohort.processors import AdapterOptions, ProblemInputError, adapter_for

from .helpers import image, problem

NAME = "internvl3_5"

# Tiny InternVL3.5: 56 px tiles, 4 tokens per tile; thumbnail added over one tile.
#  100 x 60, max_tiles 2: grids 1x1 (1.0), 2x1 (2.0), 1x2 (0.5) -> 2x1 -> 2 + 1 -> 12 tokens
#  100 x 60, default (12): 3x2 + 1 thumbnail = 7 tiles -> 28 tokens
CASES = [((100, 60), None, 28), ((100, 60), 2, 12)]


@pytest.mark.parametrize("size,max_tiles,expected", CASES)
def test_max_tiles_and_one_pixel_row_per_tile(tiny_paths, size, max_tiles, expected):
    adapter = adapter_for(tiny_paths[NAME], AdapterOptions(max_tiles=max_tiles))
    n, batch = count_image_tokens(adapter, image(*size))
    assert n == expected == batch.image_token_counts[0][0]
    assert batch.inputs["pixel_values"].shape[0] == expected // 4  # one row per tile


def test_max_tiles_as_a_processor_setting(tiny_paths):
    adapter = adapter_for(tiny_paths[NAME], AdapterOptions(processor={"max_tiles": 2}))
    assert count_image_tokens(adapter, image(100, 60))[0] == 12
    assert adapter.vllm_processor_kwargs() == {"max_patches": 2}


def test_turn_structure_with_image_options_and_instruction(loaded):
    adapter, _ = loaded[NAME]
    p = problem(text="Q?", images=[image(60, 60)], options=["x", "y"])
    text = adapter.render(p, system_prompt="SYS", instruction="INSTR").text
    assert re.match(r"^<\|im_start\|>system\nSYS<\|im_end\|>\n<\|im_start\|>user\n<IMG_CONTEXT>\n"
                    r"Q\?\nChoices:\nA\. x\nB\. y\nINSTR<\|im_end\|>\n<\|im_start\|>assistant\n$",
                    text), text


def test_first_stop_token_is_im_end(loaded):
    adapter, _ = loaded[NAME]
    assert adapter.tokenizer.convert_ids_to_tokens(adapter.stop_token_ids())[0] == "<|im_end|>"


def test_misnumbered_placeholders(loaded):
    adapter, _ = loaded[NAME]
    p = problem("q11", text="<image1> vs <image3>", images=[image(60, 60), image(60, 60)])
    with pytest.raises(ProblemInputError, match="q11"):
        adapter.render(p)
