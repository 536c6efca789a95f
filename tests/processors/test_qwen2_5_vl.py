"""Qwen2.5-VL's own rules: the pixel budget options, the grid the vision tower sees, image
placement, the vLLM kwargs and the aspect-ratio refusal (shared tests: test_adapters.py)."""

from __future__ import annotations

import re

import pytest

from tests.helpers.adapters import count_image_tokens
from vlcohort.processors import AdapterOptions, ProblemInputError, adapter_for

from .helpers import image, problem

NAME = "qwen2_5_vl"

# Tiny Qwen2.5-VL: factor 28 (patch 14 x merge 2); tokens = (H' / 28) * (W' / 28).
#  with max_pixels = 16*28*28 = 12544: 600 x 400 -> beta = sqrt(240000/12544) = 4.374
#            H' = floor(91.4/28) = 3 cells, W' = floor(137.2/28) = 4 cells -> 12 tokens
#  default budget (max 64 cells): 100 x 60 -> 56 x 112 -> 2 * 4 = 8 tokens
CASES = [((100, 60), None, 8), ((600, 400), 16 * 28 * 28, 12)]


@pytest.mark.parametrize("size,max_pixels,expected", CASES)
def test_max_pixels_and_the_vision_grid(tiny_paths, size, max_pixels, expected):
    adapter = adapter_for(tiny_paths[NAME], AdapterOptions(max_pixels=max_pixels))
    n, batch = count_image_tokens(adapter, image(*size))
    assert n == expected == batch.image_token_counts[0][0]
    t, h, w = batch.inputs["image_grid_thw"][0].tolist()
    assert h * w // 4 == expected  # the grid the vision tower sees agrees


def test_max_pixels_as_a_processor_setting(tiny_paths):
    adapter = adapter_for(tiny_paths[NAME], AdapterOptions(processor={"max_pixels": 16 * 28 * 28}))
    assert count_image_tokens(adapter, image(600, 400))[0] == 12


def test_turn_structure_with_image_options_and_instruction(loaded):
    adapter, _ = loaded[NAME]
    p = problem(text="Q?", images=[image(60, 60)], options=["x", "y"])
    text = adapter.render(p, system_prompt="SYS", instruction="INSTR").text
    assert re.match(r"^<\|im_start\|>system\nSYS<\|im_end\|>\n<\|im_start\|>user\n"
                    r"<\|vision_start\|><\|image_pad\|><\|vision_end\|>Q\?\nChoices:\nA\. x\nB\. y\n"
                    r"INSTR<\|im_end\|>\n<\|im_start\|>assistant\n$", text), text


def test_stop_token_order(loaded):
    adapter, _ = loaded[NAME]
    tokens = adapter.tokenizer.convert_ids_to_tokens(adapter.stop_token_ids())
    assert tokens[0] == "<|im_end|>" and "<|endoftext|>" in tokens


def test_placeholders_put_images_in_place(loaded):
    adapter, _ = loaded[NAME]
    p = problem(text="Compare <image1> with <image2>.", images=[image(60, 60), image(90, 60)])
    text = adapter.render(p, system_prompt=None).text
    assert ("Compare <|vision_start|><|image_pad|><|vision_end|> with "
            "<|vision_start|><|image_pad|><|vision_end|>.") in text


def test_vllm_request_kwargs(loaded):
    adapter, _ = loaded[NAME]
    r = adapter.render(problem(images=[image(100, 60)]))
    req = adapter.vllm_request(r)
    assert req["prompt"] == r.text and req["prompt"].count("<|image_pad|>") == 1
    assert req["mm_processor_kwargs"] == {"min_pixels": 3136, "max_pixels": 50176}


def test_extreme_aspect_ratio(loaded):
    adapter, _ = loaded[NAME]
    with pytest.raises(ProblemInputError, match=r"problem 'r1'.*aspect ratio"):
        adapter.render(problem("r1", images=[image(2000, 4)]))


def test_min_pixels_above_max_pixels(tiny_paths):
    adapter = adapter_for(tiny_paths[NAME], AdapterOptions(min_pixels=10_000, max_pixels=5_000))
    with pytest.raises(ValueError, match="min_pixels"):
        adapter.render(problem(images=[image(60, 60)]))
