"""Padding-free (packed) updates: a packed micro-batch's log-probs and gradients equal the
padded batch's, sequences in one packed row do not see each other, and token-budget
micro-batches give the fixed split's gradient (``vlcohort/training/update.py``,
``Adapter.pack_training`` in ``processors/base.py``).

Every comparison is fp32 on tiny real models (the transformers classes of the family).
Packed and padded differ only by float rounding: the padded text models place a
left-padded prompt at positions shifted by its padding (RoPE is relative, so equal in
exact arithmetic), and the matmuls sum over different shapes."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from vlcohort.config import load_config
from vlcohort.data.problems import Problem
from vlcohort.processors import AdapterOptions, adapter_for
from vlcohort.processors.tiny import tiny_model_path
from vlcohort.rollout.base import Rollouts
from vlcohort.training.logprobs import completion_logprobs, completion_token_stats
from vlcohort.training.update import micro_batches, row_indices, token_micro_batches

ATOL = 1e-5  # fp32 log-probs of a tiny model: measured max |packed - padded| ~ 5e-7


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def _image(w: int, h: int, rgb: tuple[int, int, int]) -> Image.Image:
    img = Image.new("RGB", (w, h), rgb)
    img.paste((255 - rgb[0], rgb[1] // 2, 90), (w // 4, h // 4, w // 2, h // 2))
    return img


def _problems(multimodal: bool) -> list[Problem]:
    """Three prompts of different lengths: two images, one image, none (VLM); text only."""
    texts = ["Which colour is the larger shape, and which is smaller?", "Count it.",
             "What is 2 + 2 ? Answer briefly and show the work in two short lines."]
    images = ([[_image(100, 60, (200, 10, 30)), _image(60, 100, (10, 200, 30))],
               [_image(28, 28, (0, 0, 255))], []] if multimodal else [[], [], []])
    return [Problem(id=f"p{i}", text=t, images=im) for i, (t, im) in enumerate(zip(texts, images))]


def _completions(lengths=(5, 17, 2), seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(10, 200, (n,), generator=g).tolist() for n in lengths]


def _setup(spec: str, attn: str = "sdpa"):
    adapter = adapter_for(tiny_model_path(spec), AdapterOptions(attn_implementation=attn))
    model = adapter.load_model().eval()
    rendered = [adapter.render(p) for p in _problems(adapter.is_multimodal)]
    return adapter, model, rendered


def _batch(adapter, rendered, completions):
    return adapter.encode_training(adapter.encode_prompts(rendered), completions)


def _grads(adapter, model, batch, weights) -> dict[str, torch.Tensor]:
    """Gradients of sum(weights x log-probs) over the model's trainable parameters."""
    model.zero_grad(set_to_none=True)
    lp = completion_logprobs(adapter, model, batch)
    (lp * weights).sum().backward()
    return {n: p.grad.detach().clone() for n, p in model.named_parameters()
            if p.requires_grad and p.grad is not None}


def _assert_same_grads(a: dict, b: dict) -> None:
    assert a.keys() == b.keys() and a
    for name in a:
        scale = float(a[name].abs().max())
        diff = float((a[name] - b[name]).abs().max())
        assert diff <= ATOL + 1e-4 * scale, (name, diff, scale)


def _check_family(spec: str, attn: str = "sdpa") -> None:
    adapter, model, rendered = _setup(spec, attn)
    assert adapter.can_pack(model)
    comps = _completions((90, 5, 2))  # the first sequence the longest: the others share a row
    padded = _batch(adapter, rendered, comps)
    real = int(padded.inputs["attention_mask"].sum())
    one = adapter.pack_training(model, padded)
    assert one.packed and "attention_mask" not in one.inputs
    assert one.inputs["input_ids"].shape == (1, real) < padded.inputs["input_ids"].shape
    # rows no wider than the longest sequence: two sequences share a row, one row ends
    # in a pad run (a dummy sequence)
    lengths = padded.inputs["attention_mask"].sum(1).tolist()
    rows = adapter.pack_training(model, padded, 0)
    R, W = rows.inputs["input_ids"].shape
    assert W == max(lengths) and R == 2 and R * W > sum(lengths), (lengths, R, W)
    for packed in (one, rows):
        _check_same(adapter, model, padded, packed)


def _check_same(adapter, model, padded, packed) -> None:
    with torch.no_grad():
        a = completion_logprobs(adapter, model, padded)
        b = completion_logprobs(adapter, model, packed)
    assert a.shape == b.shape == padded.completion_ids.shape
    assert float((a - b).abs().max()) < ATOL
    assert bool((b[padded.completion_mask == 0] == 0).all())
    w = torch.randn(a.shape, generator=torch.Generator().manual_seed(1))
    _assert_same_grads(_grads(adapter, model, padded, w), _grads(adapter, model, packed, w))
    # token statistics (intrinsic rewards) of a packed batch: the padded ones
    sa = completion_token_stats(adapter, model, padded)
    sb = completion_token_stats(adapter, model, packed)
    for key in ("logprobs", "entropy", "self_certainty"):
        assert float((getattr(sa, key) - getattr(sb, key)).abs().max()) < ATOL


def _check_isolation(spec: str, attn: str) -> None:
    """Changing sequence 0's completion changes its own log-probs and no other's."""
    adapter, model, rendered = _setup(spec, attn)
    comps = _completions((5, 3, 2))  # short enough for all three to share each row
    changed = [[t + 1 for t in comps[0]], comps[1], comps[2]]
    with torch.no_grad():
        b = completion_logprobs(adapter, model, adapter.pack_training(model, _batch(adapter, rendered, comps)))
        packed2 = adapter.pack_training(model, _batch(adapter, rendered, changed))
        b2 = completion_logprobs(adapter, model, packed2)
        assert float((b2[0] - b[0]).abs().max()) > 1e-3
        assert torch.equal(b2[1:], b[1:])
        # control: the same row read as ONE sequence (positions 0..S-1) lets sequence 0
        # reach the others, so the check above can fail
        S = packed2.inputs["input_ids"].shape[1]
        pos = packed2.inputs["position_ids"]
        one = torch.arange(S)[None] if pos.dim() == 2 else torch.arange(S)[None, None].expand(pos.shape[0], 1, S)
        joined = type(packed2)(inputs={**packed2.inputs, "position_ids": one},
                               completion_ids=packed2.completion_ids,
                               completion_mask=packed2.completion_mask,
                               prompt_len=packed2.prompt_len, packed_index=packed2.packed_index)
        c = completion_logprobs(adapter, model, joined)
        assert float((c[1:] - b2[1:]).abs().max()) > 1e-4


SLOW = pytest.mark.slow


@pytest.mark.parametrize("spec", ["tiny:qwen2", "tiny:qwen2_5_vl", "tiny:qwen2_vl", "tiny:glm4v",
                                  "tiny:internvl3_5", *(pytest.param(s, marks=SLOW) for s in (
                                      "tiny:qwen3_vl", "tiny:qwen3_vl_moe", "tiny:llava_onevision",
                                      "tiny:mistral3"))])
def test_packed_logprobs_and_gradients_equal_padded(spec):
    _check_family(spec)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("spec", ["tiny:qwen2", "tiny:qwen2_5_vl", "tiny:glm4v", "tiny:internvl3_5"])
def test_packed_sequences_do_not_attend_to_each_other(spec, attn):
    _check_isolation(spec, attn)


def test_packed_mrope_positions_are_each_sequences_own():
    """Qwen2.5-VL: rows 1-3 of the packed position ids are, per sequence, exactly the
    model's M-RoPE ids of that sequence encoded alone (no padding at all)."""
    adapter, model, rendered = _setup("tiny:qwen2_5_vl")
    comps = _completions()
    packed = adapter.pack_training(model, _batch(adapter, rendered, comps))
    pos = packed.inputs["position_ids"]  # [4, 1, S]
    start = 0
    base = model.model
    for r, c in zip(rendered, comps):
        alone = _batch(adapter, [r], [c])
        n = alone.inputs["input_ids"].shape[1]
        if r.images:
            own, _ = base.get_rope_index(alone.inputs["input_ids"], alone.inputs["mm_token_type_ids"],
                                         image_grid_thw=alone.inputs["image_grid_thw"])
        else:
            own = torch.arange(n)[None, None].expand(3, 1, n)
        assert torch.equal(pos[1:, :, start: start + n], own)
        assert torch.equal(pos[0, 0, start: start + n], torch.arange(n))
        start += n
    assert start == pos.shape[-1]


def test_packed_lora_gradients_equal_padded():
    """A LoRA policy (the project's own wrapping, adapters made non-zero so every LoRA
    matrix has a gradient): packed LoRA gradients equal the padded ones."""
    from vlcohort.training.agent import build_agent

    cfg = load_config(None, ["method=gt_reward", "agents=[{name: A, path: 'tiny:qwen2_5_vl'}]",
                             "agents.0.lora_rank=4", "rollout.prompts_per_step=1",
                             "rollout.rollouts_per_prompt=3"])
    agent = build_agent(cfg.agents[0], cfg)
    adapter, model = agent.adapter, agent.model
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
    rendered = [adapter.render(p) for p in _problems(True)]
    padded = _batch(adapter, rendered, _completions())
    packed = adapter.pack_training(model, padded)
    w = torch.randn(3, 17, generator=g)
    a, b = _grads(adapter, model, padded, w), _grads(adapter, model, packed, w)
    assert a and all("lora_" in n for n in a)
    _assert_same_grads(a, b)


def _rollouts(completions, G: int) -> Rollouts:
    T = max(len(c) for c in completions)
    return Rollouts(prompts=None, completions=completions, logprobs=torch.zeros(len(completions), T),
                    texts=[""] * len(completions), finished=[True] * len(completions),
                    group_size=G)


def test_micro_batches_pack_only_when_asked_and_supported():
    from types import SimpleNamespace

    adapter, model, rendered = _setup("tiny:qwen2_5_vl")
    agent = SimpleNamespace(adapter=adapter, model=model)
    ro = _rollouts(_completions((150, 2, 3, 150, 1, 2), seed=2), G=2)  # a long one per batch
    padded = micro_batches(agent, rendered, ro, 3)  # the default: as before packing existed
    assert [rows for rows, _ in padded] == [slice(0, 3), slice(3, 6)]
    assert not any(tb.packed for _, tb in padded)
    for rows, tb in padded:  # exactly the family's own padded encoding of those rows
        own = _batch(adapter, [rendered[n // 2] for n in range(rows.start, rows.stop)],
                     ro.completions[rows])
        assert own.inputs.keys() == tb.inputs.keys()
        assert all(torch.equal(own.inputs[k], tb.inputs[k]) for k in own.inputs)
    packed = micro_batches(agent, rendered, ro, 3, packing=True)  # same rows, in layout order
    assert [sorted(row_indices(rows)) for rows, _ in packed] == [[0, 1, 2], [3, 4, 5]]
    assert all(tb.packed and tb.inputs["input_ids"].shape[0] < 3 for _, tb in packed)
    adapter.packing = False  # a family that declares it cannot pack keeps the padded path
    kept = micro_batches(agent, rendered, ro, 3, packing=True)
    assert not any(tb.packed for _, tb in kept)
    for (_, x), (_, y) in zip(padded, kept):
        assert torch.equal(x.inputs["input_ids"], y.inputs["input_ids"])


def test_a_batch_with_little_padding_stays_padded():
    """Equal prompts and completions: packing saves no position, the batch stays padded
    (``PACK_MIN_SAVING``); the same prompts with a long-tailed completion pack."""
    from types import SimpleNamespace

    adapter, model, rendered = _setup("tiny:qwen2_5_vl")
    agent = SimpleNamespace(adapter=adapter, model=model)
    same = [rendered[1]] * 3
    (_, tb), = micro_batches(agent, same, _rollouts(_completions((6, 6, 6)), G=1), 3, packing=True)
    assert not tb.packed
    (_, tb), = micro_batches(agent, same, _rollouts(_completions((90, 6, 6)), G=1), 3, packing=True)
    assert tb.packed


def test_text_adapter_packs_only_the_model_types_it_names():
    adapter, model, _ = _setup("tiny:qwen2")
    assert adapter.can_pack(model)
    model.config.model_type = "gemma3_text"  # served as the causal-LM fallback: padded
    assert not adapter.can_pack(model)


def test_token_micro_batches_are_balanced_longest_first():
    """Hand-worked: lengths 9, 1, 4, 6, 3, 7 (total 30), budget 12 -> ceil(30 / 12) = 3
    micro-batches; longest first into the least-loaded one with room:
    9 -> A(9); 7 -> B(7); 6 -> C(6); 4 -> C(10); 3 -> B(10); 1 -> A(10)."""
    out = token_micro_batches([9, 1, 4, 6, 3, 7], 12, 6)
    assert [b.tolist() for b in out] == [[0, 1], [2, 3], [4, 5]]
    # within mini-batches of 3 rows: [9, 1, 4] (14 -> 2 bins) and [6, 3, 7] (16 -> 2 bins)
    out = token_micro_batches([9, 1, 4, 6, 3, 7], 12, 3)
    assert [b.tolist() for b in out] == [[0], [1, 2], [3, 4], [5]]
    # a sequence over the budget goes alone; none fits with it
    out = token_micro_batches([20, 5, 5], 8, 3)
    assert sorted(b.tolist() for b in out) == [[0], [1], [2]]


def _update(overrides):
    """The weight change of one update from fixed rollouts, with SGD (lr 1): the change is
    the accumulated gradient itself (AdamW's first step moves every weight by ~lr
    whatever the gradient's size)."""
    from vlcohort.rollout.base import SamplingParams
    from vlcohort.training.agent import build_agent
    from vlcohort.training.update import update_agent

    base = ["method=gt_reward", "agents=[{name: A, path: 'tiny:qwen2_5_vl'}]",
            "rollout.prompts_per_step=3", "rollout.rollouts_per_prompt=4",
            "rollout.max_new_tokens=40", "optim.warmup_ratio=0",
            "optim.schedule=constant", "grpo.max_grad_norm=0"]
    cfg = load_config(None, [*base, *overrides])
    agent = build_agent(cfg.agents[0], cfg)
    rendered = [agent.adapter.render(p) for p in _problems(True)]
    torch.manual_seed(0)
    rollouts = agent.engine.generate(rendered, 4, SamplingParams(max_new_tokens=40), seed=0)
    rollouts.completions = [c[: 1 + (13 * n) % 40] for n, c in enumerate(rollouts.completions)]
    from vlcohort.training.update import update_micro_batches

    packed = [tb.packed for _, tb in update_micro_batches(agent, rendered, rollouts, cfg.grpo, None)]
    trainable = [p for p in agent.model.parameters() if p.requires_grad]
    agent.optimizer = torch.optim.SGD(trainable, lr=1.0)
    before = {n: p.detach().clone() for n, p in agent.model.named_parameters() if p.requires_grad}
    adv = torch.linspace(-1.0, 1.0, 12)
    metrics = update_agent(agent, rendered, rollouts, adv, cfg.grpo, 1.0, 40)
    return metrics, packed, {n: p.detach() - before[n] for n, p in agent.model.named_parameters()
                             if p.requires_grad}


@pytest.mark.parametrize("extra", [[], pytest.param(["grpo.ppo_epochs=2", "grpo.mini_batch_seqs=6"],
                                                    marks=SLOW)])
def test_token_budget_and_packing_give_the_fixed_split_update(extra):
    """One update from the same rollouts (completions cut to lengths 1..40): padded
    micro-batches of 3 sequences, packed ones, packed token-budget micro-batches and
    shared-prefix token-budget ones move the weights the same (the loss normaliser is the
    mini-batch's in every split)."""
    ref_m, packed, ref = _update(["grpo.packing=false", "grpo.shared_prefix=false",
                                  "grpo.micro_batch_seqs=3", *extra])
    assert not any(packed)
    for over in (["grpo.micro_batch_seqs=3", "grpo.shared_prefix=false"],
                 ["grpo.micro_batch_tokens=200", "grpo.micro_batch_seqs=3", "grpo.shared_prefix=false"],
                 # shared prefix: its token-budget split keeps a prompt's rows together
                 ["grpo.micro_batch_tokens=200", "grpo.micro_batch_seqs=3"]):
        m, packed, got = _update([*over, *extra])
        assert any(packed)
        assert abs(m["loss"] - ref_m["loss"]) < 1e-5
        for n in ref:
            scale = float(ref[n].abs().max())
            assert float((got[n] - ref[n]).abs().max()) <= ATOL + 1e-4 * scale, (over, n)


@pytest.mark.parametrize("over, match", [
    (["grpo.micro_batch_tokens=-1"], r"^grpo\.micro_batch_tokens=-1 must be 0"),
    (["grpo.micro_batch_tokens=512", "distributed.ranks_per_agent=2"],
     r"^grpo\.micro_batch_tokens with distributed\.ranks_per_agent=2: .* set grpo\.micro_batch_tokens=0"),
])
def test_bad_token_budgets_are_one_line_config_errors(over, match):
    from vlcohort.typed_yaml import ConfigError

    with pytest.raises(ConfigError, match=match):
        load_config(None, over)
    assert load_config(None, ["grpo.micro_batch_tokens=512"]).grpo.micro_batch_tokens == 512
    assert load_config(None, []).grpo.packing is True


def test_image_copies_number_distinct_images_by_first_appearance():
    from vlcohort.training.update import image_copies

    # rows from prompts 0, 0, 1, 1, 2 with 2, 1, 0 images: prompt 0's two images twice
    assert image_copies([0, 0, 1, 1, 2], [2, 1, 0]) == [0, 1, 0, 1, 2, 2]
    assert image_copies([1, 2], [2, 1, 0]) == [0]


@pytest.mark.parametrize("spec", ["tiny:qwen2_5_vl", "tiny:qwen2_vl", "tiny:qwen3_vl"])
def test_one_vision_pass_per_distinct_image(spec):
    """G = 3 rollouts of a two-image and a one-image prompt: the shared batch runs the
    vision tower on 3 images instead of 9, and its log-probs and gradients (vision tower
    included) equal the unshared batch's, padded and packed."""
    from vlcohort.training.update import image_copies

    adapter, model, rendered = _setup(spec)
    rows = [rendered[0]] * 3 + [rendered[1]] * 3
    comps = _completions((9, 4, 6, 2, 7, 3), seed=4)
    padded = _batch(adapter, rows, comps)
    copies = image_copies([0, 0, 0, 1, 1, 1], [2, 1])
    shared = adapter.share_images(padded, copies)
    seen = []
    hook = model.model.visual.register_forward_hook(lambda m, a, o: seen.append(int(a[0].shape[0])))
    w = torch.randn(padded.completion_ids.shape, generator=torch.Generator().manual_seed(5))
    patches = padded.inputs["image_grid_thw"].prod(-1)
    try:
        ref = _grads(adapter, model, padded, w)
        assert seen == [int(patches.sum())]
        for batch in (shared, adapter.pack_training(model, shared)):
            seen.clear()
            _assert_same_grads(ref, _grads(adapter, model, batch, w))
            assert seen == [int(patches[[0, 1, 6]].sum())]  # the 3 distinct images' patches
            with torch.no_grad():
                diff = completion_logprobs(adapter, model, batch) - completion_logprobs(adapter, model, padded)
            assert float(diff.abs().max()) < ATOL
    finally:
        hook.remove()
    assert any("visual" in n for n in ref)


def test_internvl_one_vision_pass_per_distinct_image():
    """InternVL3.5: images cut into tiles (100 x 60 px: 6 + a thumbnail), G = 3 rollouts
    of a two-image and a one-image prompt. The shared batch runs the vision tower on the
    3 distinct images' tiles instead of all 9 images', and its log-probs and gradients
    (tower and projector included) equal the unshared batch's, padded and packed."""
    from vlcohort.training.update import image_copies

    adapter, model, rendered = _setup("tiny:internvl3_5")
    rows = [rendered[0]] * 3 + [rendered[1]] * 3
    comps = _completions((9, 4, 6, 2, 7, 3), seed=4)
    padded = _batch(adapter, rows, comps)
    tiles = adapter.image_tiles(padded.inputs["input_ids"])
    assert len(tiles) == 9 and sum(tiles) == padded.inputs["pixel_values"].shape[0]
    assert tiles == [7, 7] * 3 + [1] * 3  # two 7-tile images per row, then the 28 px one
    shared = adapter.share_images(padded, image_copies([0, 0, 0, 1, 1, 1], [2, 1]))
    seen = []
    hook = model.model.vision_tower.register_forward_hook(
        lambda m, a, o: seen.append(int(o.last_hidden_state.shape[0])))
    w = torch.randn(padded.completion_ids.shape, generator=torch.Generator().manual_seed(5))
    try:
        ref = _grads(adapter, model, padded, w)
        assert seen == [sum(tiles)]
        for batch in (shared, adapter.pack_training(model, shared)):
            seen.clear()
            _assert_same_grads(ref, _grads(adapter, model, batch, w))
            assert seen == [tiles[0] + tiles[1] + tiles[6]]  # the 3 distinct images' tiles
            with torch.no_grad():
                diff = completion_logprobs(adapter, model, batch) - completion_logprobs(adapter, model, padded)
            assert float(diff.abs().max()) < ATOL
    finally:
        hook.remove()
    assert any("vision_tower" in n for n in ref) and any("multi_modal_projector" in n for n in ref)


def test_gemma3_declares_no_packing_and_would_differ_packed():
    """Gemma-3 keeps the padded path: its packed forward does not give the padded
    log-probs in this transformers version (the image-block mask is read at per-sequence
    positions once sequences are packed)."""
    adapter, model, rendered = _setup("tiny:gemma3")
    assert not adapter.can_pack(model)
    padded = _batch(adapter, rendered, _completions())
    with torch.no_grad():
        a = completion_logprobs(adapter, model, padded)
        b = completion_logprobs(adapter, model, adapter.pack_training(model, padded))
    assert float((a - b).abs().max()) > 1e-3
