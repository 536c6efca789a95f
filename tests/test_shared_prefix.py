"""Shared-prefix updates (``grpo.shared_prefix``): a group's prompt once, then each of its
completions, kept apart by a 4-D attention mask (``Adapter.encode_shared_prefix``,
``vlcohort/training/shared_prefix.py``). Per family that declares it, in fp32 on its
tiny real model: the shared batch's log-probs, token statistics and gradients (full
fine-tune; LoRA for the headline families) equal the unshared padded batch's, with
prompts of two images, one image and none; the vision tower runs once per prompt's
image; a completion never sees a sibling (with a control showing the check can fail);
Gemma-3's own mask rules (two-way image blocks, sliding windows, layers mixing full and
sliding attention) are rebuilt; models that cannot share fall back; and a 3-step training run with it
on equals one with it off, text and Qwen2.5-VL.

The real SmolLM2 (a Llama) is compared in ``bench/shared_prefix.py``."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image

from vlcohort.config import load_config
from vlcohort.data.problems import Problem
from vlcohort.processors import AdapterOptions, adapter_for
from vlcohort.processors.tiny import sharpen, tiny_model_path
from vlcohort.rollout.base import Rollouts
from vlcohort.training.logprobs import completion_logprobs, completion_token_stats
from vlcohort.training.update import micro_batches, row_indices

ATOL = 1e-5  # fp32 log-probs of a tiny model; measured max |shared - padded| ~ 5e-6

TEXTS = ["Which colour is the larger shape, and which is smaller?", "Count it.",
         "What is 2 + 2 ? Answer briefly and show the work in two short lines."]


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


#: every family that declares ``shared_prefix``, by a tiny model of it
FAMILIES = {"tiny:qwen2": "TextLMAdapter", "tiny:qwen2_5_vl": "Qwen2_5_VLAdapter",
            "tiny:qwen2_vl": "Qwen2VLAdapter", "tiny:qwen3_vl": "Qwen3VLAdapter",
            "tiny:qwen3_vl_moe": "Qwen3VLMoeAdapter", "tiny:glm4v": "Glm4vAdapter",
            "tiny:internvl3_5": "InternVLAdapter", "tiny:llava_onevision": "LlavaOnevisionAdapter",
            "tiny:mistral3": "Mistral3Adapter", "tiny:idefics3": "Idefics3Adapter",
            "tiny:smolvlm": "SmolVLMAdapter", "tiny:mllama": "MllamaAdapter",
            "tiny:gemma3": "Gemma3Adapter"}
HEADLINE = ["tiny:qwen2", "tiny:qwen2_5_vl", "tiny:internvl3_5"]
#: Families whose padded reference itself moves with left padding: a prompt padded to
#: another's length gets log-probs up to 1.1e-5 (Mistral-3; 1.3e-5 in fp64), 2.8e-5
#: (Idefics3) and 2.0e-5 (SmolVLM) from its group encoded alone, which the shared batch
#: matches within 3e-6 (test_shared_equals_each_group_encoded_alone)
REFERENCE_NOISE = {"tiny:mistral3": 4e-5, "tiny:idefics3": 4e-5, "tiny:smolvlm": 4e-5}


def _image(w: int, h: int, rgb: tuple[int, int, int]) -> Image.Image:
    img = Image.new("RGB", (w, h), rgb)
    img.paste((255 - rgb[0], rgb[1] // 2, 90), (w // 4, h // 4, w // 2, h // 2))
    return img


def _problems(multimodal: bool) -> list[Problem]:
    """Three prompts: two images, one image, none (VLM); text only otherwise."""
    images = ([[_image(100, 60, (200, 10, 30)), _image(60, 100, (10, 200, 30))],
               [_image(28, 28, (0, 0, 255))], []] if multimodal else [[], [], []])
    return [Problem(id=f"p{i}", text=t, images=im) for i, (t, im) in enumerate(zip(TEXTS, images))]


def _setup(attn: str = "sdpa", spec: str = "tiny:qwen2"):
    adapter = adapter_for(tiny_model_path(spec), AdapterOptions(attn_implementation=attn))
    model = sharpen(adapter.load_model().eval(), 5)  # a peaked distribution: a sharp check
    rendered = [adapter.render(p) for p in _problems(adapter.is_multimodal)]
    return adapter, model, rendered


def _completions(lengths, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(10, 200, (n,), generator=g).tolist() for n in lengths]


# 3 prompts x G = 3: different lengths, an empty completion, a long one
LENGTHS = (5, 17, 0, 9, 2, 30, 1, 12, 7)
G = 3


def _padded(adapter, rendered, comps):
    return adapter.encode_training(adapter.encode_prompts([rendered[n // G] for n in range(len(comps))]),
                                   comps)


def _shared(adapter, model, rendered, comps, order=None):
    """The shared batch of rows ``order`` (default all, in order)."""
    from vlcohort.training.shared_prefix import shared_batch

    order = list(range(len(comps))) if order is None else order
    return shared_batch(adapter, model, rendered, _rollouts(comps), order)


def _rollouts(completions) -> Rollouts:
    T = max(1, max(len(c) for c in completions))
    return Rollouts(prompts=None, completions=completions, logprobs=torch.zeros(len(completions), T),
                    texts=[""] * len(completions), finished=[True] * len(completions),
                    group_size=G)


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


def _check_same(adapter, model, padded, shared, atol: float = ATOL) -> None:
    with torch.no_grad():
        a = completion_logprobs(adapter, model, padded)
        b = completion_logprobs(adapter, model, shared)
    assert a.shape == b.shape == padded.completion_ids.shape
    assert float((a - b).abs().max()) < atol
    assert bool((b[padded.completion_mask == 0] == 0).all())
    w = torch.randn(a.shape, generator=torch.Generator().manual_seed(1))
    _assert_same_grads(_grads(adapter, model, padded, w), _grads(adapter, model, shared, w))
    sa, sb = completion_token_stats(adapter, model, padded), completion_token_stats(adapter, model, shared)
    for key in ("logprobs", "entropy", "self_certainty"):
        assert float((getattr(sa, key) - getattr(sb, key)).abs().max()) < atol


@pytest.mark.parametrize("spec,attn", [*((s, "sdpa") for s in FAMILIES),
                                       *((s, "eager") for s in HEADLINE)])
def test_shared_logprobs_and_gradients_equal_unshared(spec, attn):
    adapter, model, rendered = _setup(attn, spec)
    assert adapter.can_share_prefix(model)
    comps = _completions(LENGTHS)
    padded = _padded(adapter, rendered, comps)
    shared = _shared(adapter, model, rendered, comps)
    mask = shared.inputs["attention_mask"]
    for m in (mask.values() if isinstance(mask, dict) else [mask]):
        assert m.dim() == 4 and m.dtype == (torch.bool if attn == "sdpa" else torch.float32)
    # each prompt once: the shared rows hold every real token but (G - 1) prompts' fewer
    prompt = [int(adapter.encode_prompts([r]).inputs["attention_mask"].sum()) for r in rendered]
    assert int((shared.inputs["input_ids"] != adapter.pad_token_id()).sum()) <= sum(prompt) + sum(LENGTHS)
    real = int(padded.inputs["attention_mask"].sum())
    assert shared.inputs["input_ids"].numel() < real
    if adapter.is_multimodal:  # the vision tower's input: each prompt's images once, not G times
        once = adapter.encode_prompts(rendered).inputs["pixel_values"]
        assert torch.equal(shared.inputs["pixel_values"], once)
        assert padded.inputs["pixel_values"].shape[0] == G * once.shape[0]
    _check_same(adapter, model, padded, shared, REFERENCE_NOISE.get(spec, ATOL))


@pytest.mark.parametrize("spec", sorted(REFERENCE_NOISE))
def test_shared_equals_each_group_encoded_alone(spec):
    """The tighter reference for the families whose padded batch moves with left
    padding: each prompt's G sequences encoded together, no other prompt's padding."""
    adapter, model, rendered = _setup("sdpa", spec)
    comps = _completions(LENGTHS)
    with torch.no_grad():
        b = completion_logprobs(adapter, model, _shared(adapter, model, rendered, comps))
        for p, r in enumerate(rendered):
            rows = list(range(p * G, (p + 1) * G))
            alone = adapter.encode_training(adapter.encode_prompts([r] * G), [comps[n] for n in rows])
            c = completion_logprobs(adapter, model, alone)
            assert float((b[rows, : c.shape[1]] - c).abs().max()) < ATOL, p


def test_mrope_positions_continue_each_prompt():
    """Qwen2.5-VL: every laid-out token has, in all four position rows (text, temporal,
    height, width), the id it has in its own unshared sequence: the model's
    ``get_rope_index`` on the prompt's image, then the completion continuing from it."""
    from vlcohort.processors.base import mrope_packed_position_ids

    adapter, model, rendered = _setup("sdpa", "tiny:qwen2_5_vl")
    comps = _completions(LENGTHS)
    padded = _padded(adapter, rendered, comps)
    shared = _shared(adapter, model, rendered, comps)
    own = mrope_packed_position_ids(model, padded)  # [4, N, L]
    pos = shared.inputs["position_ids"]  # [4, R, W]
    assert pos.shape[0] == 4 and bool((pos[1:] != pos[:1]).any())  # the image's 3-D ids
    P = padded.inputs["input_ids"].shape[1] - padded.completion_ids.shape[1]
    flat = pos.flatten(1)  # [4, R x W]
    at = 0
    for n in range(len(comps)):
        k = len(comps[n])
        index = shared.packed_index[at: at + k]  # the states predicting completion n
        at += k
        if k > 1:  # token t of completion n predicts token t + 1, at position P + t
            assert torch.equal(flat[:, index[1:]], own[:, n, P: P + k - 1]), n
        if k:  # the first is predicted by its prompt's last token
            assert torch.equal(flat[:, index[0]], own[:, n, P - 1]), n


def test_shared_rows_in_any_order_and_partial_groups():
    """A micro-batch holding part of a group, rows out of order (a token-budget
    micro-batch): units are the prompts present, rows keep their order."""
    adapter, model, rendered = _setup()
    comps = _completions(LENGTHS)
    order = [7, 1, 0, 8, 4]
    padded = adapter.encode_training(adapter.encode_prompts([rendered[n // G] for n in order]),
                                     [comps[n] for n in order])
    shared = _shared(adapter, model, rendered, comps, order)
    _check_same(adapter, model, padded, shared)


@pytest.mark.parametrize("spec", HEADLINE)
def test_a_completion_never_sees_a_sibling(spec):
    """Changing completion 0's tokens changes its own log-probs and no sibling's (nor
    another unit's); control: the same row read with a plain causal mask lets the
    siblings see completion 0, so the check can fail."""
    adapter, model, rendered = _setup("sdpa", spec)
    comps = _completions((6, 4, 5, 3, 3, 3))
    changed = [[t + 1 for t in comps[0]], *comps[1:]]
    with torch.no_grad():
        a = completion_logprobs(adapter, model, _shared(adapter, model, rendered, comps))
        s2 = _shared(adapter, model, rendered, changed)
        b = completion_logprobs(adapter, model, s2)
        assert float((b[0] - a[0]).abs().max()) > 1e-3
        assert torch.equal(b[1:], a[1:])
        W = s2.inputs["input_ids"].shape[1]
        causal = torch.ones(W, W, dtype=torch.bool).tril().expand_as(s2.inputs["attention_mask"])
        leaky = type(s2)(inputs={**s2.inputs, "attention_mask": causal},
                         completion_ids=s2.completion_ids, completion_mask=s2.completion_mask,
                         prompt_len=s2.prompt_len, packed_index=s2.packed_index)
        c = completion_logprobs(adapter, model, leaky)
        assert float((c[1:3] - b[1:3]).abs().max()) > 1e-4


@pytest.mark.parametrize("spec", HEADLINE)
def test_shared_lora_gradients_equal_unshared(spec):
    """A LoRA policy (the project's own wrapping, adapters made non-zero so every LoRA
    matrix has a gradient): shared LoRA gradients equal the padded ones."""
    from vlcohort.training.agent import build_agent

    cfg = load_config(None, ["method=gt_reward", f"agents=[{{name: A, path: '{spec}'}}]",
                             "agents.0.lora_rank=4", "rollout.prompts_per_step=3",
                             f"rollout.rollouts_per_prompt={G}"])
    agent = build_agent(cfg.agents[0], cfg)
    adapter, model = agent.adapter, agent.model
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(0.05 * torch.randn(p.shape, generator=g))
    rendered = [adapter.render(p) for p in _problems(adapter.is_multimodal)]
    comps = _completions(LENGTHS)
    padded, shared = _padded(adapter, rendered, comps), _shared(adapter, model, rendered, comps)
    w = torch.randn(padded.completion_ids.shape, generator=g)
    a, b = _grads(adapter, model, padded, w), _grads(adapter, model, shared, w)
    assert a and all("lora_" in n for n in a)
    _assert_same_grads(a, b)


def test_micro_batches_share_only_when_asked_supported_and_worth_it():
    from types import SimpleNamespace

    adapter, model, rendered = _setup()
    agent = SimpleNamespace(adapter=adapter, model=model)
    ro = _rollouts(_completions(LENGTHS))
    off = micro_batches(agent, rendered, ro, 3, packing=True)
    on = micro_batches(agent, rendered, ro, 3, packing=True, shared_prefix=True)
    # the same rows per micro-batch, in their own order; each a one-prompt unit
    assert [rows for rows, _ in on] == [slice(0, 3), slice(3, 6), slice(6, 9)]
    assert [sorted(row_indices(r)) for r, _ in off] == [row_indices(r) for r, _ in on]
    assert all(tb.shares_prefix for _, tb in on)
    # one completion per prompt (G = 1): nothing to share, the unshared batch
    ro1 = Rollouts(prompts=None, completions=_completions((4, 4, 4)), logprobs=torch.zeros(3, 4),
                   texts=[""] * 3, finished=[True] * 3, group_size=1)
    (_, tb), = micro_batches(agent, rendered, ro1, 3, shared_prefix=True)
    assert not tb.shares_prefix and tb.inputs["attention_mask"].dim() == 2
    # a family that cannot share keeps the unshared path whatever grpo.shared_prefix says
    adapter.shared_prefix = False
    kept = micro_batches(agent, rendered, ro, 3, packing=True, shared_prefix=True)
    for (ra, x), (rb, y) in zip(off, kept):
        assert row_indices(ra) == row_indices(rb)
        assert torch.equal(x.inputs["input_ids"], y.inputs["input_ids"])


def test_token_budget_keeps_each_prompts_rows_together():
    """``shared_token_micro_batches``: every row once, within its mini-batch; a prompt's
    rows together while its shared cost (prompt once + completions) fits the budget,
    else cut in row order into parts that fit; the per-row split, for contrast, deals a
    group's equal rows round robin."""
    from vlcohort.training.update import shared_token_micro_batches, token_micro_batches

    G, prompt = 4, [50, 80, 20, 60]
    comps = [10, 30, 20, 40, 5, 5, 5, 5, 60, 70, 80, 90, 25, 25, 25, 25]
    mbs = [b.tolist() for b in shared_token_micro_batches(prompt, comps, G, 200, 8)]
    assert sorted(n for b in mbs for n in b) == list(range(16))
    assert all(len({n // 8 for n in b}) == 1 for b in mbs)  # never across a mini-batch
    for b in mbs:
        cost = sum(prompt[p] + sum(comps[n] for n in b if n // G == p) for p in {n // G for n in b})
        assert cost <= 200, b
    groups = [tuple(n for n in range(p * G, p * G + G)) for p in range(4)]
    whole = [g for g in groups if prompt[g[0] // G] + sum(comps[n] for n in g) <= 200]
    assert whole and all(any(set(g) <= set(b) for b in mbs) for g in whole)
    cut = list(range(8, 12))  # prompt 2: 20 + 300 > 200, cut in order: 20 + 130, 20 + 170
    assert sorted(sorted(set(b) & set(cut)) for b in mbs if set(b) & set(cut)) == [[8, 9], [10, 11]]
    per_row = [b.tolist() for b in token_micro_batches([prompt[n // G] + comps[n] for n in range(16)], 200, 8)]
    assert any(len({n // G for n in b}) > 1 and all(sum(1 for m in b if m // G == n // G) == 1 for n in b)
               for b in per_row)


def test_where_a_model_cannot_share_it_falls_back():
    adapter, model, _ = _setup()
    assert adapter.can_share_prefix(model)
    model.config.model_type = "phi3"  # served as the causal-LM fallback, untested: unshared
    assert not adapter.can_share_prefix(model)
    model.config.model_type = "qwen2"
    model.config.layer_types = ["full_attention", "linear_attention"]  # takes no mask
    assert not adapter.can_share_prefix(model)
    model.config.layer_types = ["full_attention", "chunked_attention"]  # a rule not rebuilt
    assert not adapter.can_share_prefix(model)
    model.config.layer_types = ["full_attention", "sliding_attention"]
    assert not adapter.can_share_prefix(model)  # sliding layers without a window size
    model.config.sliding_window = 64
    assert adapter.can_share_prefix(model)  # rebuilt per layer type
    model.config.layer_types = None
    model.config.use_sliding_window = True  # a window every layer applies, no layer types
    assert not adapter.can_share_prefix(model)
    model.config.use_sliding_window = False
    model.config._attn_implementation = "flash_attention_2"  # takes no 4-D mask
    assert not adapter.can_share_prefix(model)


def test_gemma3_image_blocks_attend_both_ways():
    """Gemma-3's model adds to its causal mask that an image's tokens attend to each
    other both ways; the layout rebuilds it (``Gemma3Adapter.bidirectional_blocks``).
    Control: the layout without it leaves the padded log-probs by far more than noise."""
    adapter, model, rendered = _setup("sdpa", "tiny:gemma3")
    comps = _completions(LENGTHS)
    padded = _padded(adapter, rendered, comps)
    _check_same(adapter, model, padded, _shared(adapter, model, rendered, comps))
    adapter.bidirectional_blocks = lambda model, inputs: None
    with torch.no_grad():
        a = completion_logprobs(adapter, model, padded)
        b = completion_logprobs(adapter, model, _shared(adapter, model, rendered, comps))
    assert float((a - b).abs().max()) > 100 * ATOL


def test_sliding_window_layers_keep_their_window():
    """Gemma-3's layers are sliding-window layers: with a window of 6 tokens (shorter
    than every prompt, so it matters), the sliding layers' mask of the layout spans what
    the window spans unshared. Control: the same model without the window moves."""
    adapter, model, rendered = _setup("sdpa", "tiny:gemma3")
    text = model.config.get_text_config()
    assert set(text.layer_types) == {"sliding_attention"}
    text.sliding_window = 6
    comps = _completions(LENGTHS)
    padded = _padded(adapter, rendered, comps)
    shared = _shared(adapter, model, rendered, comps)
    assert set(shared.inputs["attention_mask"]) == {"sliding_attention"}
    _check_same(adapter, model, padded, shared)
    with torch.no_grad():
        a = completion_logprobs(adapter, model, padded)
        text.sliding_window = 10_000
        assert float((completion_logprobs(adapter, model, padded) - a).abs().max()) > 1e-2


def test_mixed_full_and_sliding_layers_fp64():
    """A Gemma-3 text model whose layers mix sliding-window and full attention (as the
    real Gemma-3-270M's 5 in 6; random weights here, the tiny Qwen2 tokenizer's
    prompts), in fp64 with a window of 6 so it matters: the layout's per-layer-type
    masks give every completion exactly the log-probs of its group encoded alone. The
    real Gemma-3-270M: ``bench/shared_prefix.py``, its setup (d)."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    adapter, _, rendered = _setup()
    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=len(adapter.tokenizer), hidden_size=64,
                              intermediate_size=128, num_hidden_layers=4, num_attention_heads=2,
                              num_key_value_heads=1, head_dim=32, sliding_window=6,
                              layer_types=["sliding_attention"] * 3 + ["full_attention"],
                              pad_token_id=adapter.pad_token_id(), attn_implementation="sdpa")
    model = sharpen(Gemma3ForCausalLM(config).eval(), 5).double()
    assert adapter.can_share_prefix(model)
    comps = _completions(LENGTHS)
    shared = _shared(adapter, model, rendered, comps)
    assert set(shared.inputs["attention_mask"]) == {"full_attention", "sliding_attention"}
    with torch.no_grad():
        b = completion_logprobs(adapter, model, shared)
        for p, r in enumerate(rendered):
            rows = list(range(p * G, (p + 1) * G))
            alone = adapter.encode_training(adapter.encode_prompts([r] * G), [comps[n] for n in rows])
            c = completion_logprobs(adapter, model, alone)
            assert float((b[rows, : c.shape[1]] - c).abs().max()) < 1e-9, p
        config.sliding_window = 10_000  # control: the window matters at these lengths
        c = completion_logprobs(adapter, model, alone)
        assert float((b[rows, : c.shape[1]] - c).abs().max()) > 1e-3


def test_every_declaring_family_is_tested_here():
    """A family's ``shared_prefix = True`` stands on this module's exactness tests: the
    set of adapters declaring it is the set tested above (a new family, or a subclass
    inheriting the flag, must be added to :data:`FAMILIES`)."""
    import vlcohort.processors.registry as registry
    from vlcohort.processors.family import ADAPTERS

    registry.discover_families()
    sharing = {cls.__name__ for cls in ADAPTERS.values() if cls.shared_prefix}
    assert sharing == set(FAMILIES.values())
    assert {adapter_for(tiny_model_path(s)).__class__.__name__ for s in FAMILIES} == sharing


def _train(tmp_path, shared: bool, spec: str = "tiny:qwen2", extra: tuple = ()):
    """3 steps of a run (self-certainty rewards: every step updates; a text file for a
    text model, the built-in drawn image set for a VLM), its records and final weights."""
    import vlcohort.recipes.step as step_mod
    from vlcohort.recipes.cohort import setup

    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"id": f"q{i}", "question": q, "answer": "1"}) + "\n"
                            for i, q in enumerate(TEXTS * 2)))
    source = (["data.source=file", f"data.path={data}"] if spec == "tiny:qwen2"
              else ["data.source=synthetic"])
    cfg = load_config(None, ["method=intuitor", f"agents=[{{name: A, path: '{spec}'}}]",
                             *source, "data.shuffle=false",
                             "run.steps=3", "arms=[]", "eval.every=0", "log.plot=false",
                             "log.tensorboard=false", "rollout.prompts_per_step=2",
                             "rollout.rollouts_per_prompt=4", "rollout.max_new_tokens=12",
                             "grpo.micro_batch_seqs=4", "grpo.kl_coef=0.1", "run.seed=3",
                             f"grpo.shared_prefix={str(shared).lower()}",
                             "checkpoint.at_end=false", *extra,
                             f"run.output_dir={tmp_path / spec.replace(':', '-') / ('on' if shared else 'off')}"])
    run = setup(cfg)
    adapter = run.agents[0].adapter
    calls, encode = [], adapter.encode_shared_prefix

    def spy(*args, **kwargs):
        calls.append(1)
        return encode(*args, **kwargs)

    adapter.encode_shared_prefix = spy
    start = [p.detach().clone() for p in run.agents[0].model.parameters()]
    records = [step_mod.train_step(run, step) for step in (1, 2, 3)]
    assert bool(calls) == shared
    assert any(not torch.equal(p, q) for p, q in zip(start, run.agents[0].model.parameters()))
    return records, [p.detach().clone() for p in run.agents[0].model.parameters()]


@pytest.mark.parametrize("spec,extra", [
    ("tiny:qwen2", ()), ("tiny:qwen2_5_vl", ()),
    # token-budget micro-batches, split differently on and off (whole groups when shared);
    # the token-mean loss's normaliser is the step's, so the gradient is the same
    ("tiny:qwen2", ("grpo.micro_batch_tokens=120", "grpo.loss_agg=token_mean"))])
def test_three_training_steps_with_shared_prefix_equal_without(tmp_path, spec, extra):
    off, w_off = _train(tmp_path, False, spec, extra)
    on, w_on = _train(tmp_path, True, spec, extra)
    for a, b in zip(off, on):
        for key in a:
            if key.startswith("timing/") or not isinstance(a[key], (int, float)):
                continue
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-5, nan_ok=True), key
    losses = [k for k in on[0] if k.endswith("loss")]
    assert losses and all(on[i][k] != 0 for i in range(3) for k in losses), losses
    for x, y in zip(w_off, w_on):
        assert float((x - y).abs().max()) <= 1e-5


def test_units_split_a_prompt_only_where_attention_outweighs_it():
    """``units_per_prompt``: every completion of a prompt in one unit when completions
    are short next to the prompt; with long ones and a costly attention pair, units of
    fewer completions (the prompt copied per unit) cost less than one wide row; and a
    batch laid out so still equals the unshared one."""
    from vlcohort.training.shared_prefix import units_per_prompt

    assert units_per_prompt([300, 300], [[48] * 8, [48] * 8], 0.001)[0] == 8
    # 1,000-token prompt, 8 x 300: one unit 3,400 wide costs 3,400 + 11,560 (x 0.001
    # per pair); two of 4 completions 2 x 2,200 + 9,680; four of 2, 6,400 + 10,240
    assert units_per_prompt([1000], [[300] * 8], 0.001) == (4, (2, 2200))
    assert units_per_prompt([60], [[400] * 8], 0.01)[0] == 1  # a short prompt: one copy each
    adapter, model, rendered = _setup()
    # fp64, and each group encoded alone as the reference: a left-padded prompt's shifted
    # positions change RoPE's float32 angles by ~1e-5 over 200 tokens, the layout's do not
    model = model.double()
    comps = _completions([200] * 9)
    from vlcohort.training.shared_prefix import shared_batch

    split = shared_batch(adapter, model, rendered, _rollouts(comps), list(range(9)), pair_cost=1.0)
    prompt = [int(adapter.encode_prompts([r]).inputs["attention_mask"].sum()) for r in rendered]
    real = int((split.inputs["input_ids"] != adapter.pad_token_id()).sum())
    assert real == G * sum(prompt) + sum(map(len, comps))  # k = 1: a prompt copy per completion
    with torch.no_grad():
        b = completion_logprobs(adapter, model, split)
        for p, r in enumerate(rendered):
            rows = list(range(p * G, (p + 1) * G))
            alone = adapter.encode_training(adapter.encode_prompts([r] * G), [comps[n] for n in rows])
            assert float((b[rows] - completion_logprobs(adapter, model, alone)).abs().max()) < 1e-9
