"""Gemma-3's own rules: pan-and-scan (option and ``processor: {pan_and_scan: true}``),
``token_type_ids`` in training batches, the folded system prompt (shared tests:
test_adapters.py)."""

from __future__ import annotations

import re

import pytest

from tests.helpers.adapters import count_image_tokens
from vlcohort.processors import AdapterOptions, ProblemInputError, adapter_for
from vlcohort.processors.base import FamilySettingsError

from .helpers import image, problem

NAME = "gemma3"

# Tiny Gemma-3: 56 px canvas pooled to 4 tokens. Pan-and-scan (min crop 28 px, at most 4
# crops, ratio >= 1.2): n = clamp(min(floor(long/short + 0.5), floor(long/28)), 2, 4) crops.
#  100 x 60: ratio 1.67 -> n = min(2, 3) = 2 crops of 50 x 60 -> 4 * (1 + 2) = 12
#   56 x 56: ratio 1 < 1.2 -> no crops -> 4
#  250 x 60: ratio 4.17 -> n = min(4, 8) = 4 crops of 63 x 60 -> 4 * (1 + 4) = 20
PAN_AND_SCAN_CASES = [((100, 60), 12), ((56, 56), 4), ((250, 60), 20)]


@pytest.mark.parametrize("size,expected", PAN_AND_SCAN_CASES)
def test_pan_and_scan_tokens(tiny_paths, size, expected):
    adapter = adapter_for(tiny_paths[NAME], AdapterOptions(pan_and_scan=True))
    n, batch = count_image_tokens(adapter, image(*size))
    assert n == expected == batch.image_token_counts[0][0]


@pytest.mark.parametrize("size,expected", PAN_AND_SCAN_CASES)
def test_pan_and_scan_as_a_processor_setting(tiny_paths, size, expected):
    adapter = adapter_for(tiny_paths[NAME], AdapterOptions(processor={"pan_and_scan": True}))
    assert adapter.pan_and_scan and count_image_tokens(adapter, image(*size))[0] == expected
    assert adapter.vllm_processor_kwargs()["do_pan_and_scan"] is True


def test_processor_setting_errors_name_the_key(tiny_paths):
    with pytest.raises(FamilySettingsError) as e:
        adapter_for(tiny_paths[NAME], AdapterOptions(processor={"pan_scan": True}))
    assert str(e.value).startswith("processor.pan_scan: unknown setting for Gemma-3")
    assert "accepts: pan_and_scan (bool, default False)" in str(e.value)
    with pytest.raises(FamilySettingsError, match=r"processor\.pan_and_scan: expected bool.*'yes'"):
        adapter_for(tiny_paths[NAME], AdapterOptions(processor={"pan_and_scan": "yes"}))


def test_training_batch_extends_token_type_ids_with_zeros(loaded):
    adapter, _ = loaded[NAME]
    batch = adapter.encode_prompts([adapter.render(problem(images=[image(60, 60)]))])
    train = adapter.encode_training(batch, [[5, 6, 7]])
    P = batch.prompt_len
    assert train.inputs["token_type_ids"].shape == (1, P + 3)
    assert train.inputs["token_type_ids"][0, P:].tolist() == [0, 0, 0]
    assert train.inputs["token_type_ids"][0, :P].sum() == 4  # the 4 image soft tokens


def test_system_prompt_folded_into_the_first_user_turn(loaded):
    adapter, _ = loaded[NAME]
    p = problem(text="Q?", images=[image(60, 60)], options=["x", "y"])
    text = adapter.render(p, system_prompt="SYS", instruction="INSTR").text
    assert re.match(r"^<bos><start_of_turn>user\nSYS\n\n<start_of_image>Q\?\nChoices:\nA\. x\n"
                    r"B\. y\nINSTR<end_of_turn>\n<start_of_turn>model\n$", text), text


def test_stop_token_order(loaded):
    adapter, _ = loaded[NAME]
    tokens = adapter.tokenizer.convert_ids_to_tokens(adapter.stop_token_ids())
    assert tokens[:2] == ["<end_of_turn>", "<eos>"]


def test_missing_image_file_through_adapter(loaded, tmp_path):
    adapter, _ = loaded[NAME]
    with pytest.raises(ProblemInputError, match=r"problem 'm1', images\[0\].*not found"):
        adapter.render(problem("m1", images=[tmp_path / "missing.png"]))


COHORT = "agents=[{{name: A, path: 'tiny:gemma3', processor: {settings}}}, {{name: B, path: 'tiny:qwen2'}}]"


def test_run_config_takes_processor_settings_through_to_the_adapter():
    """``agents.N.processor`` is a free-form mapping of the run config; the agent's
    adapter options carry it, and the adapter reads it as its family settings."""
    from vlcohort.config import load_config
    from vlcohort.training.agent import adapter_options

    cfg = load_config(None, [COHORT.format(settings="{pan_and_scan: true}")])
    options = adapter_options(cfg.agents[0])
    assert options.processor == {"pan_and_scan": True} and options.pan_and_scan is False
    assert options.processor is not cfg.agents[0].processor  # a separate copy


@pytest.mark.parametrize("settings,message", [
    ("{pan_scan: true}", r"^agents\.0\.processor\.pan_scan: unknown setting for Gemma-3\. "
                         r"Gemma-3 accepts: pan_and_scan \(bool, default False\)"),
    ("{pan_and_scan: 3}", r"^agents\.0\.processor\.pan_and_scan: expected bool for Gemma-3, got 3"),
])
def test_run_config_refuses_bad_processor_settings(settings, message):
    from vlcohort.config import load_config
    from vlcohort.typed_yaml import ConfigError

    with pytest.raises(ConfigError, match=message):
        load_config(None, [COHORT.format(settings=settings)])
