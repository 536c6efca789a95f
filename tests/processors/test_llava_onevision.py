"""LLaVA-OneVision on its tiny real model (LlavaOnevisionForConditionalGeneration /
LlavaOnevisionProcessor, built offline): anyres token counts, the multi-image rule, and
the adapter contract end to end (generation vs the core's log-prob pass, padding,
gradients, a 2-step cohort run)."""

from __future__ import annotations

import re

import pytest
import torch

from vlcohort.processors.llava_onevision import LlavaOnevisionAdapter
from vlcohort.training.logprobs import completion_logprobs

from .helpers import assert_logprobs_match, image, image_tokens, problem

NAME = "llava_onevision"


@pytest.fixture(scope="module")
def ov(loaded):
    return loaded[NAME]


# ------------------------------------------------------------------ loading


def test_real_classes(ov):
    adapter, model = ov
    assert type(adapter) is LlavaOnevisionAdapter
    assert type(model).__name__ == "LlavaOnevisionForConditionalGeneration"
    assert type(adapter.processor).__name__ == "LlavaOnevisionProcessor"
    assert type(adapter.processor.image_processor).__name__ == "LlavaOnevisionImageProcessor"
    assert adapter.tokenizer.convert_ids_to_tokens(adapter.stop_token_ids())[0] == "<|im_end|>"


# ------------------------------------------------------------------ token counts

# Tiny model: 28 px tiles, patch 14 -> p = 2 features per tile side, base tile p^2 = 4,
# pinpoints = 1..6 tiles per side (28..168 px), anyres_max_9 -> at most 9 * 4 = 36
# high-res features. One image alone = 4 + h * w (unpadded high-res) + h (newlines).
#  100 x 60: keeping all 6000 px needs >= 4 tiles across (112) and >= 3 down (84);
#            84 x 112 wastes 9408 - 6000 = 3408 px (least) -> 3 x 4 tiles = 13 tiles in
#            pixel_values (base included) -> 6 x 8 features; 100/60 > 8/6 -> new_h =
#            int(60 * 8/100) = 4, (6 - 4) // 2 = 1 row cut each side -> 4 x 8 = 32,
#            sqrt(32/36) < 1.1 -> 4 + 32 + 4 = 40
#   28 x 28: 1 x 1 tile (2 in pixel_values), 2 x 2 features, no cut -> 4 + 4 + 2 = 10
#  200 x 200: 6 x 6 tiles (37), 12 x 12 = 144 features; sqrt(144/36) = 2 > 1.1 ->
#            int(12 / 2) = 6 -> 6 x 6 = 36 -> 4 + 36 + 6 = 46
#   60 x 130: all 7800 px kept by 140 x 84 (5 x 3 tiles, 16) wasting 3960 -> 10 x 6;
#            60/130 < 6/10 -> new_w = int(60 * 10/130) = 4, 1 column cut each side ->
#            10 x 4 = 40, sqrt(40/36) = 1.05 -> 4 + 40 + 10 = 54
SINGLE = [((100, 60), 40, 13), ((28, 28), 10, 2), ((200, 200), 46, 37), ((60, 130), 54, 16)]


@pytest.mark.parametrize("size,expected,tiles", SINGLE)
def test_single_image_token_count(ov, size, expected, tiles):
    adapter, _ = ov
    batch = adapter.encode_prompts([adapter.render(problem(images=[image(*size)]))])
    assert image_tokens(adapter, batch) == expected == batch.image_token_counts[0][0]
    assert adapter.image_token_count(*size) == expected
    assert batch.inputs["pixel_values"].shape[1] == tiles  # base tile + rows x cols


# Two images in one prompt: no tiling (each padded to a square, resized to one 28 px
# tile): 4 base features + 1 newline = 5 each, whatever the sizes; a one-image prompt in
# the same batch keeps the anyres count (40 for 100 x 60), a text-only one costs 0.
def test_two_images_in_one_prompt_use_the_multi_image_rule(ov):
    adapter, model = ov
    imgs = [image(100, 60), image(60, 130, "blue")]
    assert adapter.prompt_image_token_counts(imgs) == [5, 5]
    rendered = [adapter.render(problem("two", "Is the first bigger?", imgs)),
                adapter.render(problem("one", images=[image(100, 60)])),
                adapter.render(problem("none", "What is 3 + 4?"))]
    batch = adapter.encode_prompts(rendered)
    assert batch.image_token_counts == [[5, 5], [40], []]
    assert [image_tokens(adapter, batch, i) for i in range(3)] == [10, 40, 0]
    assert batch.inputs["batch_num_images"].tolist() == [2, 1]
    with torch.no_grad():  # the model's features fill exactly those slots
        model(**batch.inputs)


def test_two_images_generate_and_logprobs_agree(ov):
    adapter, model = ov
    p = problem(text="Is <image1> bigger than <image2>?", images=[image(100, 60), image(60, 130, "blue")])
    assert_logprobs_match(adapter, model, adapter.encode_prompts([adapter.render(p)]))


# ------------------------------------------------------------------ rendering


def test_turn_structure_puts_images_first(ov):
    adapter, _ = ov
    p = problem(text="Q?", images=[image(60, 60)], options=["x", "y"])
    text = adapter.render(p, system_prompt="SYS", instruction="INSTR").text
    assert re.fullmatch(r"<\|im_start\|>system\nSYS<\|im_end\|>\n<\|im_start\|>user\n<image>\n"
                        r"Q\?\nChoices:\nA\. x\nB\. y\nINSTR<\|im_end\|>\n"
                        r"<\|im_start\|>assistant\n", text), text
    # the published template writes a turn's images before its text, whatever the order
    two = adapter.render(problem(text="Compare <image1> with <image2>.",
                                 images=[image(60, 60), image(90, 60)]), system_prompt=None).text
    assert two.startswith("<|im_start|>user\n<image>\n<image>\nCompare  with .")


# ------------------------------------------------------------------ generation and log-probs


def test_generation_and_logprobs_agree(ov):
    adapter, model = ov
    probs = [problem("a", images=[image(100, 60)]),
             problem("b", text="Solve 2+2.", images=[image(60, 130)])]
    assert_logprobs_match(adapter, model, adapter.encode_prompts([adapter.render(p) for p in probs]))


def test_no_image_prompt(ov):
    adapter, model = ov
    batch = adapter.encode_prompts([adapter.render(problem(text="What is 3 + 4?"))])
    assert "pixel_values" not in batch.inputs and batch.image_token_counts == [[]]
    assert_logprobs_match(adapter, model, batch)


def test_padding_and_neighbours_do_not_change_logprobs(ov):
    adapter, model = ov
    target = adapter.render(problem("t", images=[image(100, 60)]))
    others = [adapter.render(problem("o1", "A much longer question " * 6, [image(200, 200)])),
              adapter.render(problem("o2", "Two here.", [image(60, 60), image(90, 60)])),
              adapter.render(problem("o3", "No image here."))]
    completion = adapter.tokenizer.encode("The answer is B.", add_special_tokens=False)
    completion += adapter.stop_token_ids()[:1]
    alone = adapter.encode_prompts([target])
    mixed = adapter.encode_prompts(others + [target])
    assert mixed.prompt_len > alone.prompt_len
    with torch.no_grad():
        lp_alone = completion_logprobs(adapter, model, adapter.encode_training(alone, [completion]))
        lp_mixed = completion_logprobs(adapter, model, adapter.encode_training(
            mixed, [completion[:3], completion[:2], completion, completion]))
    assert torch.allclose(lp_alone[0], lp_mixed[3], atol=1e-4)


def test_gradient_reaches_the_vision_tower(ov):
    adapter, model = ov
    batch = adapter.encode_prompts([adapter.render(problem(images=[image(100, 60)]))])
    train = adapter.encode_training(batch, [adapter.tokenizer.encode("B", add_special_tokens=False)])
    model.zero_grad()
    completion_logprobs(adapter, model, train).sum().backward()
    grads = [p.grad for n, p in model.named_parameters() if "vision_tower" in n and p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)
    assert model.model.image_newline.grad.abs().sum() > 0  # the newline embeddings too
    model.zero_grad()


def test_image_tokens_are_suppressed(ov):
    adapter, _ = ov
    vocab = adapter.tokenizer.get_vocab()
    assert {vocab["<image>"], vocab["<video>"]} <= set(adapter.suppressed_token_ids())


def test_vllm_request_has_one_placeholder_per_image(ov):
    adapter, _ = ov
    r = adapter.render(problem(images=[image(60, 60), image(90, 60)]))
    req = adapter.vllm_request(r)
    assert req["prompt"].count("<image>") == 2 and len(req["multi_modal_data"]["image"]) == 2


# ------------------------------------------------------------------ cohort run


def test_two_step_cohort_run(tmp_path, monkeypatch):
    """Two agents of two families through the cohort trainer. Ground-truth reward on
    multiple-choice questions (answers read as the last capital letter): a random tiny
    model gets some right by chance, so the LLaVA-OneVision agent really updates."""
    from vlcohort.cli import main
    from vlcohort.config import DEMO_RECIPE
    from vlcohort.monitoring.metrics import read_metrics

    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    # on the demo's settings (its prompt, 56 px pictures), with this test's agents
    assert main(["train", str(DEMO_RECIPE), "method=gt_reward",
                 "agents=[{name: A, path: 'tiny:llava_onevision'}, "
                 "{name: B, path: 'tiny:qwen2_5_vl'}]",
                 "reward.answer_style=last_letter", "data.tasks=[shape_colour, shape_kind]",
                 "data.num_problems=4", "rollout.prompts_per_step=2",
                 "rollout.rollouts_per_prompt=8", "rollout.max_new_tokens=16",
                 "grpo.micro_batch_seqs=8", "optim.lr=1e-3", "optim.warmup_ratio=0",
                 "log.plot=false", "log.tensorboard=false", "arms=[]", "eval.every=0",
                 "reward.min_share=0", "run.seed=4", "run.steps=2",
                 f"run.output_dir={run}"]) == 0
    records = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2]
    assert all("agent/A/reward/mean" in r and "agent/B/reward/mean" in r for r in records)
    assert any(abs(r.get("agent/A/loss", 0.0)) > 0 for r in records), "no update: weak test"
