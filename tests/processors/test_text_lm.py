"""The text-only adapter's own behaviour (tiny:qwen2): images refused, plain-string chat
contents, options such as dtype, the plain vLLM request (shared tests: test_adapters.py)."""

from __future__ import annotations

import re

import pytest
import torch

from vlcohort.processors import AdapterOptions, ProblemInputError, adapter_for
from vlcohort.processors.base import FamilySettingsError

from .helpers import image, problem

NAME = "qwen2"


def test_text_model_refuses_images(loaded):
    adapter, _ = loaded[NAME]
    with pytest.raises(ProblemInputError, match=r"problem 'i1'.*text-only"):
        adapter.render(problem("i1", images=[image(60, 60)]))


def test_turn_structure_with_options_and_instruction(loaded):
    adapter, _ = loaded[NAME]
    text = adapter.render(problem(text="Q?", options=["x", "y"]), system_prompt="SYS",
                          instruction="INSTR").text
    assert re.match(r"^<\|im_start\|>system\nSYS<\|im_end\|>\n<\|im_start\|>user\nQ\?\nChoices:\n"
                    r"A\. x\nB\. y\nINSTR<\|im_end\|>\n<\|im_start\|>assistant\n$", text), text


def test_no_image_token(loaded):
    adapter, _ = loaded[NAME]
    assert adapter.image_token_id is None and adapter.image_token_count(60, 60) == 0


def test_vllm_request_is_the_prompt_alone(loaded):
    adapter, _ = loaded[NAME]
    r = adapter.render(problem())
    assert adapter.vllm_request(r) == {"prompt": r.text}


def test_dtype_option(tiny_paths):
    adapter = adapter_for(tiny_paths[NAME], AdapterOptions(dtype="bfloat16"))
    assert next(adapter.load_model().parameters()).dtype == torch.bfloat16


def test_no_processor_settings(tiny_paths):
    with pytest.raises(FamilySettingsError, match=r"processor\.x: unknown setting.*accepts: none"):
        adapter_for(tiny_paths[NAME], AdapterOptions(processor={"x": 1}))
