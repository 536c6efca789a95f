"""Idefics3 / SmolVLM on its tiny real model (Idefics3ForConditionalGeneration /
Idefics3Processor, built offline): the sub-image rule and its token counts, the
``processor.longest_edge`` family setting, and the adapter contract end to end
(generation vs the core's log-prob pass, padding, gradients, a 2-step cohort run)."""

from __future__ import annotations

import re

import pytest
import torch

from vlcohort.processors import AdapterOptions, adapter_for
from vlcohort.processors.idefics3 import Idefics3Adapter
from vlcohort.training.logprobs import completion_logprobs

from .helpers import assert_logprobs_match, image, image_tokens, problem

NAME = "idefics3"


@pytest.fixture(scope="module")
def smol(loaded):
    return loaded[NAME]


# ------------------------------------------------------------------ loading


def test_real_classes(smol):
    adapter, model = smol
    assert type(adapter) is Idefics3Adapter
    assert type(model).__name__ == "Idefics3ForConditionalGeneration"
    assert type(adapter.processor).__name__ == "Idefics3Processor"
    assert type(adapter.processor.image_processor).__name__ == "Idefics3ImageProcessor"
    assert adapter.tokenizer.convert_ids_to_tokens(adapter.stop_token_ids()) == ["<end_of_utterance>"]


# ------------------------------------------------------------------ token counts

# Tiny model: sub-image side M = 56 (the vision canvas), longest edge L = 4 * 56 = 224,
# (56 / 14)^2 / 2^2 = 4 <image> tokens per sub-image. Rule: (1) long side -> L, short
# side int(L / aspect) rounded up to even; (2) sides rounded up to multiples of M; (3) a
# side over M -> rows x cols sub-images + 1 global, else 1 image.
#  100 x 60: 224 x int(134.4) = 134 -> 224 x 168 -> 3 rows x 4 cols + 1 = 13 -> 52
#  60 x 130: int(224 * 60/130) = int(103.4) = 103 -> 104 wide, 224 high -> 112 x 224 ->
#            4 rows x 2 cols + 1 = 9 -> 36
#  250 x 60: 224 x int(53.8) = 53 -> 54 -> 224 x 56 -> 1 x 4 + 1 = 5 -> 20
#   56 x 56: enlarged to 224 x 224 -> 4 x 4 + 1 = 17 -> 68
# With processor.longest_edge = 112 (L = 2 M):
#  100 x 60: 112 x int(67.2) = 67 -> 68 -> 112 x 112 -> 2 x 2 + 1 = 5 -> 20
#  60 x 130: 112 high, int(51.7) = 51 -> 52 wide -> 56 x 112 -> 2 rows x 1 col + 1 = 3 -> 12
# With processor.longest_edge = 56: every image fits one 56 px canvas -> 1 -> 4 tokens.
# With processor.image_splitting = false: one image resized to 56 x 56 -> 4 tokens.
CASES = [((100, 60), {}, 52), ((60, 130), {}, 36), ((250, 60), {}, 20), ((56, 56), {}, 68),
         ((100, 60), {"longest_edge": 112}, 20), ((60, 130), {"longest_edge": 112}, 12),
         ((100, 60), {"longest_edge": 56}, 4), ((250, 60), {"image_splitting": False}, 4)]


@pytest.mark.parametrize("size,settings,expected", CASES)
def test_image_token_count(tiny_paths, size, settings, expected):
    adapter = adapter_for(tiny_paths[NAME], AdapterOptions(processor=settings))
    batch = adapter.encode_prompts([adapter.render(problem(images=[image(*size)]))])
    assert image_tokens(adapter, batch) == expected == batch.image_token_counts[0][0]
    assert batch.inputs["pixel_values"].shape[1] == expected // 4  # one row per sub-image


def test_sub_image_markup(smol):
    """100 x 60 -> 3 rows x 4 cols: a row/col tag per sub-image, a newline per row, then
    the global image (the processor's layout, which the model was trained on)."""
    adapter, _ = smol
    batch = adapter.encode_prompts([adapter.render(problem(images=[image(100, 60)]))])
    text = adapter.tokenizer.decode(batch.inputs["input_ids"][0])
    seq = "<image>" * 4
    rows = "".join("".join(f"<fake_token_around_image><row_{r}_col_{c}>{seq}" for c in range(1, 5))
                   + "\n" for r in range(1, 4))
    assert rows + f"\n<fake_token_around_image><global-img>{seq}<fake_token_around_image>" in text


def test_unknown_setting_names_the_key_and_what_is_accepted(tiny_paths):
    with pytest.raises(ValueError) as e:
        adapter_for(tiny_paths[NAME], AdapterOptions(processor={"max_tiles": 4}))
    msg = str(e.value)
    assert "processor.max_tiles" in msg and "longest_edge" in msg and "image_splitting" in msg
    with pytest.raises(ValueError, match="processor.longest_edge"):
        adapter_for(tiny_paths[NAME], AdapterOptions(processor={"longest_edge": "big"}))


def test_two_images_in_one_prompt(smol):
    adapter, model = smol
    p = problem(text="Is <image1> bigger than <image2>?", images=[image(100, 60), image(60, 130, "blue")])
    rendered = adapter.render(p)
    assert rendered.text.count("<image>") == 2  # placeholders stay where the question puts them
    batch = adapter.encode_prompts([rendered, adapter.render(problem("n", "What is 3 + 4?"))])
    assert batch.image_token_counts == [[52, 36], []]
    assert [image_tokens(adapter, batch, i) for i in (0, 1)] == [88, 0]
    assert_logprobs_match(adapter, model, batch)


# ------------------------------------------------------------------ rendering


def test_turn_structure(smol):
    adapter, _ = smol
    p = problem(text="Q?", images=[image(60, 60)], options=["x", "y"])
    text = adapter.render(p, system_prompt="SYS", instruction="INSTR").text
    assert re.fullmatch(r"<\|im_start\|>System: SYS<end_of_utterance>\nUser:<image>Q\?\n"
                        r"Choices:\nA\. x\nB\. y\nINSTR<end_of_utterance>\nAssistant:", text), text
    # a turn that opens with text gets "User: " (the template's colon-space rule)
    assert "\nUser: Q?" in adapter.render(problem(text="Q?")).text


# ------------------------------------------------------------------ generation and log-probs


def test_generation_and_logprobs_agree(smol):
    adapter, model = smol
    probs = [problem("a", images=[image(100, 60)]),
             problem("b", text="Solve 2+2.", images=[image(60, 130)])]
    assert_logprobs_match(adapter, model, adapter.encode_prompts([adapter.render(p) for p in probs]))


def test_no_image_prompt(smol):
    adapter, model = smol
    batch = adapter.encode_prompts([adapter.render(problem(text="What is 3 + 4?"))])
    assert "pixel_values" not in batch.inputs and batch.image_token_counts == [[]]
    assert_logprobs_match(adapter, model, batch)


def test_padding_and_neighbours_do_not_change_logprobs(smol):
    """Left padding, neighbours with more sub-images (zero-padded image slots) and a
    text-only neighbour must not change a prompt's log-probs."""
    adapter, model = smol
    target = adapter.render(problem("t", images=[image(100, 60)]))
    others = [adapter.render(problem("o1", "A much longer question " * 6, [image(250, 60)])),
              adapter.render(problem("o2", "Two here.", [image(56, 56), image(60, 130)])),
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


def test_gradient_reaches_the_vision_tower(smol):
    adapter, model = smol
    batch = adapter.encode_prompts([adapter.render(problem(images=[image(100, 60)]))])
    train = adapter.encode_training(batch, [adapter.tokenizer.encode("B", add_special_tokens=False)])
    model.zero_grad()
    completion_logprobs(adapter, model, train).sum().backward()
    grads = [p.grad for n, p in model.named_parameters() if "vision_model" in n and p.grad is not None]
    assert grads and any(g.abs().sum() > 0 for g in grads)
    model.zero_grad()


def test_image_structure_tokens_are_suppressed(smol):
    adapter, _ = smol
    vocab = adapter.tokenizer.get_vocab()
    structure = ["<image>", "<fake_token_around_image>", "<global-img>", "<row_1_col_1>", "<row_6_col_6>"]
    assert {vocab[t] for t in structure} <= set(adapter.suppressed_token_ids())
    assert len(adapter.suppressed_token_ids()) == 3 + 36


def test_vllm_request_passes_the_settings(tiny_paths):
    adapter = adapter_for(tiny_paths[NAME], AdapterOptions(processor={"longest_edge": 112}))
    req = adapter.vllm_request(adapter.render(problem(images=[image(100, 60)])))
    assert req["prompt"].count("<image>") == 1
    assert req["mm_processor_kwargs"] == {"size": {"longest_edge": 112}}


# ------------------------------------------------------------------ cohort run


def test_two_step_cohort_run(tmp_path, monkeypatch):
    """Two agents of two families through the cohort trainer, the Idefics3 agent with a
    family setting from the config (``processor: {longest_edge: 112}``). Ground-truth
    reward on multiple-choice questions (last capital letter): a random tiny model gets
    some right by chance, so the Idefics3 agent really updates."""
    from vlcohort.cli import main
    from vlcohort.monitoring.metrics import read_metrics

    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    assert main(["train", "method=gt_reward",
                 "agents=[{name: A, path: 'tiny:idefics3', processor: {longest_edge: 112}}, "
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
