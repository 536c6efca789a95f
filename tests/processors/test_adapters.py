"""The adapters, on tiny real models of each family (built offline, loaded by from_pretrained)."""

from __future__ import annotations

import json
import re

import pytest
import torch
from PIL import Image

from processors import (
    AdapterOptions,
    ProblemInputError,
    UnknownFamilyError,
    adapter_for,
    cut_at_stop,
)
from processors.gemma3 import Gemma3Adapter
from processors.internvl import InternVLAdapter
from processors.qwen2_5_vl import Qwen2_5_VLAdapter
from processors.text_lm import TextLMAdapter
from vlcohort.data.problems import Problem
from vlcohort.training.logprobs import completion_logprobs

from .conftest import FAMILIES, VLM_FAMILIES


def image(w, h, colour="red"):
    return Image.new("RGB", (w, h), colour)


def problem(pid="p", text="What colour is the shape?", images=(), options=None):
    return Problem(pid, text, list(images), options=options)


def images_for(name, *sizes):
    return [] if name == "qwen2" else [image(w, h) for w, h in sizes]


# ------------------------------------------------------------------ registry and loading


def test_registry_picks_the_family_adapter(tiny_paths):
    expected = {"qwen2_5_vl": Qwen2_5_VLAdapter, "internvl3_5": InternVLAdapter,
                "gemma3": Gemma3Adapter, "qwen2": TextLMAdapter}
    for name, cls in expected.items():
        assert type(adapter_for(tiny_paths[name])) is cls


def test_model_classes_are_the_real_ones(loaded):
    names = {n: type(m).__name__ for n, (_, m) in loaded.items()}
    assert names == {
        "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
        "internvl3_5": "InternVLForConditionalGeneration",
        "gemma3": "Gemma3ForConditionalGeneration",
        "qwen2": "Qwen2ForCausalLM",
    }
    procs = {n: type(a.processor).__name__ for n, (a, _) in loaded.items()}
    assert procs == {"qwen2_5_vl": "Qwen2_5_VLProcessor", "internvl3_5": "InternVLProcessor",
                     "gemma3": "Gemma3Processor", "qwen2": "Qwen2Tokenizer"}


def test_unknown_model_type_lists_supported_and_how_to_add(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "blip-2"}))
    with pytest.raises(UnknownFamilyError) as e:
        adapter_for(tmp_path)
    msg = str(e.value)
    assert "'blip-2'" in msg and "qwen2_5_vl" in msg and "internvl" in msg and "gemma3" in msg
    assert "processors/registry.py" in msg


def test_folder_without_config_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        adapter_for(tmp_path)


def test_unknown_tiny_spec_lists_available():
    with pytest.raises(ValueError, match="tiny:qwen2_5_vl"):
        adapter_for("tiny:nonexistent")


def test_dtype_option(tiny_paths):
    adapter = adapter_for(tiny_paths["qwen2"], AdapterOptions(dtype="bfloat16"))
    model = adapter.load_model()
    assert next(model.parameters()).dtype == torch.bfloat16


# ------------------------------------------------------------------ image token counts


def _count_image_tokens(adapter, img):
    batch = adapter.encode_prompts([adapter.render(problem(images=[img]))])
    return int((batch.inputs["input_ids"] == adapter.image_token_id).sum()), batch


# Qwen2.5-VL (tiny: patch 14, merge 2 -> factor 28; min_pixels 4*28*28 = 3136,
# max_pixels 64*28*28 = 50176). Tokens = (H' / 28) * (W' / 28) after smart_resize.
#  100 x 60: H' = round(60/28)*28 = 56, W' = round(100/28)*28 = 112; 6272 px in range
#            -> 2 * 4 = 8 tokens
#   28 x 28: 784 px < 3136 -> beta = sqrt(3136/784) = 2 -> H' = W' = ceil(56/28)*28 = 56
#            -> 2 * 2 = 4 tokens
#  600 x 400: rounded 392 x 588 = 230496 px > 50176 -> beta = sqrt(240000/50176) = 2.187
#            H' = floor(400/2.187/28)*28 = 6*28, W' = floor(600/2.187/28)*28 = 9*28 -> 54 tokens
#  with max_pixels = 16*28*28: 600 x 400 -> beta = sqrt(240000/12544) = 4.374
#            H' = floor(91.4/28) = 3 cells, W' = floor(137.2/28) = 4 cells -> 12 tokens
QWEN_CASES = [((100, 60), None, 8), ((28, 28), None, 4), ((600, 400), None, 54),
              ((600, 400), 16 * 28 * 28, 12)]


@pytest.mark.parametrize("size,max_pixels,expected", QWEN_CASES)
def test_qwen_image_tokens(tiny_paths, size, max_pixels, expected):
    adapter = adapter_for(tiny_paths["qwen2_5_vl"], AdapterOptions(max_pixels=max_pixels))
    n, batch = _count_image_tokens(adapter, image(*size))
    assert n == expected == batch.image_token_counts[0][0]
    t, h, w = batch.inputs["image_grid_thw"][0].tolist()
    assert h * w // 4 == expected  # the grid the vision tower sees agrees


# InternVL3.5 (tiny: 56 px tiles, 4 tokens per tile = (56/14)^2 * 0.5^2; real: 448 px, 256).
# Grid = the cols x rows with 1 <= cols*rows <= max_tiles whose ratio is nearest the image's;
# a thumbnail tile is added when the grid has more than one tile.
#   56 x 56  : ratio 1 -> 1x1 -> 1 tile, no thumbnail -> 4 tokens
#  100 x 60  : ratio 1.667 -> 3x2 (1.5, off by 0.167; 5x3 = 15 tiles is over 12; 2x1 is
#              off by 0.333) -> 6 + 1 thumbnail = 7 tiles -> 28 tokens
#   60 x 250 : ratio 0.24 -> 1x4 (0.25, off by 0.01) -> 4 + 1 = 5 tiles -> 20 tokens
#  100 x 60, max_tiles 2: grids 1x1 (1.0), 2x1 (2.0), 1x2 (0.5) -> 2x1 -> 2 + 1 -> 12 tokens
INTERNVL_CASES = [((56, 56), None, 4), ((100, 60), None, 28), ((60, 250), None, 20),
                  ((100, 60), 2, 12)]


@pytest.mark.parametrize("size,max_tiles,expected", INTERNVL_CASES)
def test_internvl_image_tokens(tiny_paths, size, max_tiles, expected):
    adapter = adapter_for(tiny_paths["internvl3_5"], AdapterOptions(max_tiles=max_tiles))
    n, batch = _count_image_tokens(adapter, image(*size))
    assert n == expected == batch.image_token_counts[0][0]
    assert batch.inputs["pixel_values"].shape[0] == expected // 4  # one row per tile


# Gemma-3 (tiny: 56 px canvas pooled to 4 tokens; real: 896 px, 256 tokens). Without
# pan-and-scan every image costs 4 tokens. Pan-and-scan (min crop 28 px, at most 4 crops,
# ratio >= 1.2): n = clamp(min(floor(long/short + 0.5), floor(long/28)), 2, 4) crops.
#  100 x 60: ratio 1.67 -> n = min(2, 3) = 2 crops of 50 x 60 -> 4 * (1 + 2) = 12
#   56 x 56: ratio 1 < 1.2 -> no crops -> 4
#  250 x 60: ratio 4.17 -> n = min(4, 8) = 4 crops of 63 x 60 -> 4 * (1 + 4) = 20
GEMMA_CASES = [((100, 60), False, 4), ((250, 60), False, 4), ((100, 60), True, 12),
               ((56, 56), True, 4), ((250, 60), True, 20)]


@pytest.mark.parametrize("size,pas,expected", GEMMA_CASES)
def test_gemma_image_tokens(tiny_paths, size, pas, expected):
    adapter = adapter_for(tiny_paths["gemma3"], AdapterOptions(pan_and_scan=pas))
    n, batch = _count_image_tokens(adapter, image(*size))
    assert n == expected == batch.image_token_counts[0][0]


# ------------------------------------------------------------------ rendering


TURN_PATTERNS = {
    "qwen2_5_vl": r"^<\|im_start\|>system\nSYS<\|im_end\|>\n<\|im_start\|>user\n"
                  r"<\|vision_start\|><\|image_pad\|><\|vision_end\|>Q\?\nChoices:\nA\. x\nB\. y\n"
                  r"INSTR<\|im_end\|>\n<\|im_start\|>assistant\n$",
    "internvl3_5": r"^<\|im_start\|>system\nSYS<\|im_end\|>\n<\|im_start\|>user\n<IMG_CONTEXT>\n"
                   r"Q\?\nChoices:\nA\. x\nB\. y\nINSTR<\|im_end\|>\n<\|im_start\|>assistant\n$",
    "gemma3": r"^<bos><start_of_turn>user\nSYS\n\n<start_of_image>Q\?\nChoices:\nA\. x\nB\. y\n"
              r"INSTR<end_of_turn>\n<start_of_turn>model\n$",
    "qwen2": r"^<\|im_start\|>system\nSYS<\|im_end\|>\n<\|im_start\|>user\nQ\?\nChoices:\n"
             r"A\. x\nB\. y\nINSTR<\|im_end\|>\n<\|im_start\|>assistant\n$",
}


@pytest.mark.parametrize("name", FAMILIES)
def test_prompt_has_family_turn_structure(loaded, name):
    adapter, _ = loaded[name]
    p = problem(text="Q?", images=images_for(name, (60, 60)), options=["x", "y"])
    text = adapter.render(p, system_prompt="SYS", instruction="INSTR").text
    assert re.match(TURN_PATTERNS[name], text), text


def test_placeholders_put_images_in_place(loaded):
    adapter, _ = loaded["qwen2_5_vl"]
    p = problem(text="Compare <image1> with <image2>.", images=[image(60, 60), image(90, 60)])
    text = adapter.render(p, system_prompt=None).text
    assert ("Compare <|vision_start|><|image_pad|><|vision_end|> with "
            "<|vision_start|><|image_pad|><|vision_end|>.") in text


# ------------------------------------------------------------------ generation and log-probs


def _generate(adapter, model, batch, max_new_tokens=8, seed=0):
    torch.manual_seed(seed)
    out = model.generate(
        **batch.inputs, max_new_tokens=max_new_tokens, do_sample=True, temperature=1.0,
        top_k=0, top_p=1.0, output_logits=True, return_dict_in_generate=True,
        eos_token_id=adapter.stop_token_ids(), pad_token_id=adapter.pad_token_id(),
        suppress_tokens=adapter.suppressed_token_ids() or None,
    )
    new = out.sequences[:, batch.prompt_len:]  # [B, C]
    logits = torch.stack(out.logits, dim=1).float()  # [B, C, V], raw (before processors)
    logits[..., adapter.suppressed_token_ids()] = float("-inf")  # what was sampled from
    gen_lp = torch.log_softmax(logits, -1).gather(-1, new[..., None]).squeeze(-1)
    completions = [cut_at_stop(row, adapter.stop_token_ids()) for row in new.tolist()]
    return completions, gen_lp


@pytest.mark.parametrize("name", FAMILIES)
def test_logprobs_match_generation(loaded, name):
    adapter, model = loaded[name]
    probs = [problem("a", images=images_for(name, (100, 60))),
             problem("b", text="Solve 2+2.", images=images_for(name, (60, 130)))]
    batch = adapter.encode_prompts([adapter.render(p) for p in probs])
    completions, gen_lp = _generate(adapter, model, batch)
    train = adapter.encode_training(batch, completions)
    with torch.no_grad():
        lp = completion_logprobs(adapter, model, train)
    assert lp.dtype == torch.float32 and lp.shape == train.completion_mask.shape
    mask = train.completion_mask.bool()
    assert mask.sum() >= 2
    assert torch.allclose(lp[mask], gen_lp[:, : lp.shape[1]][mask], atol=1e-4)


@pytest.mark.parametrize("name", FAMILIES)
def test_same_prompt_alone_and_in_padded_batch(loaded, name):
    """Left padding and neighbours with other image sizes must not change log-probs."""
    adapter, model = loaded[name]
    target = adapter.render(problem("t", images=images_for(name, (100, 60))))
    others = [
        adapter.render(problem("o1", text="A much longer question " * 6,
                               images=images_for(name, (250, 60)))),
        adapter.render(problem("o2", text="No image here.")),
    ]
    completion = adapter.tokenizer.encode("The answer is B.", add_special_tokens=False)
    completion += adapter.stop_token_ids()[:1]

    alone = adapter.encode_prompts([target])
    mixed = adapter.encode_prompts(others + [target])
    assert mixed.prompt_len > alone.prompt_len  # the target really is left-padded
    with torch.no_grad():
        lp_alone = completion_logprobs(adapter, model, adapter.encode_training(alone, [completion]))
        lp_mixed = completion_logprobs(
            adapter, model, adapter.encode_training(mixed, [completion[:3], completion, completion]))
    assert torch.allclose(lp_alone[0], lp_mixed[2], atol=1e-4)


@pytest.mark.parametrize("name", FAMILIES)
def test_chunking_does_not_change_logprobs(loaded, name):
    adapter, model = loaded[name]
    batch = adapter.encode_prompts([adapter.render(problem(images=images_for(name, (60, 60))))])
    completion = adapter.tokenizer.encode("Let me think. The answer is 42.", add_special_tokens=False)
    train = adapter.encode_training(batch, [completion])
    with torch.no_grad():
        whole = completion_logprobs(adapter, model, train, chunk_tokens=10_000)
        chunked = completion_logprobs(adapter, model, train, chunk_tokens=1)
    assert torch.allclose(whole, chunked, atol=1e-6)


@pytest.mark.parametrize("name", VLM_FAMILIES)
def test_gradient_reaches_the_vision_tower(loaded, name):
    adapter, model = loaded[name]
    batch = adapter.encode_prompts([adapter.render(problem(images=[image(100, 60)]))])
    train = adapter.encode_training(batch, [adapter.tokenizer.encode("B", add_special_tokens=False)])
    model.zero_grad()
    completion_logprobs(adapter, model, train).sum().backward()
    vision = [p for n, p in model.named_parameters() if ("vision" in n or "visual" in n) and p.grad is not None]
    assert vision and any(p.grad.abs().sum() > 0 for p in vision)
    model.zero_grad()


@pytest.mark.parametrize("name", VLM_FAMILIES)
def test_two_images_in_one_prompt(loaded, name):
    adapter, model = loaded[name]
    p = problem(text="Is <image1> bigger than <image2>?", images=[image(100, 60), image(60, 130, "blue")])
    batch = adapter.encode_prompts([adapter.render(p)])
    counts = batch.image_token_counts[0]
    assert len(counts) == 2
    assert int((batch.inputs["input_ids"] == adapter.image_token_id).sum()) == sum(counts)
    completions, gen_lp = _generate(adapter, model, batch, max_new_tokens=4)
    with torch.no_grad():
        lp = completion_logprobs(adapter, model, adapter.encode_training(batch, completions))
    n = len(completions[0])
    assert torch.allclose(lp[0, :n], gen_lp[0, :n], atol=1e-4)


@pytest.mark.parametrize("name", VLM_FAMILIES)
def test_problem_without_image_through_vlm(loaded, name):
    adapter, model = loaded[name]
    batch = adapter.encode_prompts([adapter.render(problem(text="What is 3 + 4?"))])
    assert "pixel_values" not in batch.inputs and batch.image_token_counts == [[]]
    completions, gen_lp = _generate(adapter, model, batch, max_new_tokens=4)
    with torch.no_grad():
        lp = completion_logprobs(adapter, model, adapter.encode_training(batch, completions))
    n = len(completions[0])
    assert torch.allclose(lp[0, :n], gen_lp[0, :n], atol=1e-4)


def test_training_batch_extends_family_tensors(loaded):
    adapter, _ = loaded["gemma3"]
    batch = adapter.encode_prompts([adapter.render(problem(images=[image(60, 60)]))])
    train = adapter.encode_training(batch, [[5, 6, 7]])
    P = batch.prompt_len
    assert train.inputs["token_type_ids"].shape == (1, P + 3)
    assert train.inputs["token_type_ids"][0, P:].tolist() == [0, 0, 0]
    assert train.inputs["token_type_ids"][0, :P].sum() == 4  # the 4 image soft tokens
    assert train.inputs["attention_mask"][0, P:].tolist() == [1, 1, 1]


@pytest.mark.parametrize("name", VLM_FAMILIES)
def test_image_placeholders_are_never_generated(loaded, name):
    adapter, model = loaded[name]
    ids = adapter.suppressed_token_ids()
    assert adapter.image_token_id in ids
    batch = adapter.encode_prompts([adapter.render(problem(images=[image(60, 60)]))])
    completion = [ids[0]] + adapter.tokenizer.encode("B", add_special_tokens=False)
    with torch.no_grad():
        lp = completion_logprobs(adapter, model, adapter.encode_training(batch, [completion]))
    assert lp[0, 0] == float("-inf") and torch.isfinite(lp[0, 1])


def test_stop_tokens_are_end_of_turn(loaded):
    tokens = {n: a.tokenizer.convert_ids_to_tokens(a.stop_token_ids()) for n, (a, _) in loaded.items()}
    assert tokens["qwen2_5_vl"][0] == "<|im_end|>" and "<|endoftext|>" in tokens["qwen2_5_vl"]
    assert tokens["internvl3_5"][0] == "<|im_end|>"
    assert tokens["gemma3"][:2] == ["<end_of_turn>", "<eos>"]
    assert tokens["qwen2"][0] == "<|im_end|>"


# ------------------------------------------------------------------ vLLM request form


def test_vllm_request_form(loaded):
    adapter, _ = loaded["qwen2_5_vl"]
    r = adapter.render(problem(images=[image(100, 60)]))
    req = adapter.vllm_request(r)
    assert req["prompt"] == r.text and req["prompt"].count("<|image_pad|>") == 1
    assert isinstance(req["multi_modal_data"]["image"], Image.Image)
    assert req["mm_processor_kwargs"] == {"min_pixels": 3136, "max_pixels": 50176}
    two = adapter.render(problem(images=[image(60, 60), image(90, 60)]))
    assert len(adapter.vllm_request(two)["multi_modal_data"]["image"]) == 2
    text_adapter, _ = loaded["qwen2"]
    assert text_adapter.vllm_request(text_adapter.render(problem())) == {
        "prompt": text_adapter.render(problem()).text}


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize("name", VLM_FAMILIES)
def test_placeholder_count_mismatch(loaded, name):
    adapter, _ = loaded[name]
    p = problem("q9", text="Look at <image1> and <image2>.", images=[image(60, 60)])
    with pytest.raises(ProblemInputError, match=r"problem 'q9'.*2 image placeholder.*holds 1"):
        adapter.render(p)
    p = problem("q10", text="Look at <image>.", images=[])
    with pytest.raises(ProblemInputError, match=r"problem 'q10'.*1 image placeholder.*holds 0"):
        adapter.render(p)


def test_misnumbered_placeholders(loaded):
    adapter, _ = loaded["internvl3_5"]
    p = problem("q11", text="<image1> vs <image3>", images=[image(60, 60), image(60, 60)])
    with pytest.raises(ProblemInputError, match="q11"):
        adapter.render(p)


@pytest.mark.parametrize("name", FAMILIES)
def test_empty_question(loaded, name):
    adapter, _ = loaded[name]
    with pytest.raises(ProblemInputError, match=r"problem 'e1'.*'text' is empty"):
        adapter.render(problem("e1", text="   "))


def test_missing_image_file_through_adapter(loaded, tmp_path):
    adapter, _ = loaded["gemma3"]
    with pytest.raises(ProblemInputError, match=r"problem 'm1', images\[0\].*not found"):
        adapter.render(problem("m1", images=[tmp_path / "missing.png"]))


def test_text_model_refuses_images(loaded):
    adapter, _ = loaded["qwen2"]
    with pytest.raises(ProblemInputError, match=r"problem 'i1'.*text-only"):
        adapter.render(problem("i1", images=[image(60, 60)]))


def test_qwen_extreme_aspect_ratio(loaded):
    adapter, _ = loaded["qwen2_5_vl"]
    with pytest.raises(ProblemInputError, match=r"problem 'r1'.*aspect ratio"):
        adapter.render(problem("r1", images=[image(2000, 4)]))


def test_min_pixels_above_max_pixels(tiny_paths):
    adapter = adapter_for(tiny_paths["qwen2_5_vl"], AdapterOptions(min_pixels=10_000, max_pixels=5_000))
    with pytest.raises(ValueError, match="min_pixels"):
        adapter.render(problem(images=[image(60, 60)]))
