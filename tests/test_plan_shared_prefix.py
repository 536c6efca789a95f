"""``vlcohort plan`` under ``grpo.shared_prefix``: each distinct prompt of a micro-batch
counted once, its explicit 4-D mask [R, 1, W, W] beside it, and nothing changed for a
model the update would not share (``vlcohort/plan.py``; measured against a real update
in ``tests/test_plan.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlcohort.cli import main
from vlcohort.config import load_config
from vlcohort.plan import (
    MicroBatchShape,
    activation_bytes,
    attention_mask_bytes,
    layer_activation_bytes_per_token,
    micro_batch_prompts,
    model_facts,
    plan,
    shared_prefix_refusal,
    shared_prefix_shape,
)

CONFIGS = Path(__file__).resolve().parents[1] / "bench" / "published_configs"

#: A long image prompt: 3,072 prompt tokens (of which IMAGE image tokens), 256 new, G = 8.
P, T, G, IMAGE = 3072, 256, 8, 2048


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def _cfg(path: str, shared: bool, *overrides: str):
    return load_config(None, [
        "method=gt_reward",
        f"agents=[{{name: A, path: '{path}', device: cuda, dtype: bfloat16, "
        "gradient_checkpointing: true}]",
        "rollout.prompts_per_step=4", f"rollout.rollouts_per_prompt={G}",
        f"rollout.max_new_tokens={T}", "grpo.micro_batch_seqs=8", f"data.max_prompt_tokens={P}",
        f"grpo.shared_prefix={str(shared).lower()}", *overrides])


def _plan(path: str, shared: bool, *overrides: str, image_tokens: int = 0):
    return plan(_cfg(path, shared, *overrides), 80, 1, image_tokens=image_tokens,
                configs=CONFIGS).agents[0]


def _micro_bytes(f, rows: int, width: int, prompts: int, image_tokens: int, e: int = 2,
                 mask_bytes: int = 1) -> int:
    """One checkpointed micro-batch of ``rows`` x ``width`` positions and ``prompts``
    prompt copies' images, by the plan's formulas."""
    per_layer = layer_activation_bytes_per_token(f.hidden, f.heads * f.head_dim, f.mlp_width, e)
    out = activation_bytes(rows * width, f.layers, per_layer, f.hidden, e, True)
    out += attention_mask_bytes(rows, width, e, 1, mask_bytes)
    if image_tokens and f.vision_layers:
        vpl = layer_activation_bytes_per_token(f.vision_hidden, f.vision_hidden, f.vision_mlp, e)
        out += activation_bytes(prompts * image_tokens * f.patches_per_image_token,
                                f.vision_layers, vpl, f.vision_hidden, e, True)
    return out


# ----------------------------------------------------------------------------- pure maths


def test_shape_counts_each_prompt_once():
    """8 completions of one prompt: one row of P + 8 T; the unshared batch is 8 x (P + T)."""
    sh = shared_prefix_shape([0] * 8, 1000, 100, 0.0, 0.9)
    assert sh == MicroBatchShape(seqs=8, rows=1, width=1800, tokens=1800, prompts=1, shared=True)
    two = shared_prefix_shape([0] * 4 + [1] * 4, 1000, 100, 0.0, 0.9)
    assert (two.rows, two.width, two.prompts) == (2, 1400, 2)
    # 12 rows of G = 8 prompts: units of 8 and 4 completions; the second does not fit
    # the first's row (next fit at the widest unit): 2 rows of the widest, 1800
    uneven = shared_prefix_shape([0] * 8 + [1] * 4, 1000, 100, 0.0, 0.9)
    assert (uneven.rows, uneven.width, uneven.tokens) == (2, 1800, 3600)
    # units of 700, 300 and 300: the two short ones share the second row (600 <= 700),
    # 2 x 700 positions against 10 x 200
    short = shared_prefix_shape([0] * 6 + [1, 1, 2, 2], 100, 100, 0.0, 0.9)
    assert (short.rows, short.width, short.prompts) == (2, 700, 3)


def test_shape_stays_unshared_where_the_update_would():
    """One completion per prompt shares nothing; a heavy attention cost per pair makes the
    one wide row dearer than the padded batch (``shared_prefix.use_shared``)."""
    padded = MicroBatchShape(seqs=4, rows=4, width=1100, tokens=4400, prompts=4)
    assert shared_prefix_shape([0, 1, 2, 3], 1000, 100, 0.0, 0.9) == padded
    wide = shared_prefix_shape([0] * 8, 300, 1000, 0.0, 0.9)  # 8,300 <= 0.9 x 10,400: shared
    assert wide.shared and wide.width == 8300
    # + 0.001 per pair: 8,300 + 68,890 against 10,400 + 13,520: unshared
    assert not shared_prefix_shape([0] * 8, 300, 1000, 0.001, 0.9).shared
    assert not shared_prefix_shape([0] * 8, 100, 1000, 0.0, 0.9).shared  # 8,100 > 0.9 x 8,800


def test_shape_follows_the_updates_units_per_prompt():
    """A 1,000-token prompt with 8 completions of 300 at 0.001 per pair: the update lays
    it out as two units of 4 (``shared_prefix.units_per_prompt``), two prompt copies in 2
    rows of 2,200, not one 3,400-wide row; the plan counts that layout."""
    sh = shared_prefix_shape([0] * 8, 1000, 300, 0.001, 0.9)
    assert sh.shared and (sh.rows, sh.width, sh.prompts, sh.tokens) == (2, 2200, 2, 4400)


def test_micro_batch_prompts_by_rows_and_by_token_budget():
    """Consecutive rows: ceil(micro / G) prompts when the micro-batch starts a group, one
    more where it straddles two. The unshared token-budget split deals equal-length rows
    round robin, one completion per prompt each; the shared-prefix update's split
    (``prompt_tokens`` given) keeps a prompt's rows together at their shared cost."""
    assert micro_batch_prompts(32, 8, 16, 0, 100) == [(0,) * 8 + (1,) * 8]
    assert micro_batch_prompts(32, 8, 4, 0, 100) == [(0,) * 4]
    assert micro_batch_prompts(24, 8, 12, 0, 100) == [(0,) * 8 + (1,) * 4, (0,) * 4 + (1,) * 8]
    assert micro_batch_prompts(16, 4, 0, 400, 100) == [(0, 1, 2, 3)]
    # shared: 4 prompts of 60 + 4 x 40 = 220 tokens each, budget 400: one group each
    assert micro_batch_prompts(16, 4, 0, 400, 100, prompt_tokens=60) == [(0,) * 4]
    # budget 500: two whole groups per micro-batch (440 tokens), balanced: prompts 0 + 2, 1 + 3
    assert micro_batch_prompts(16, 4, 0, 500, 100, prompt_tokens=60) == [(0,) * 4 + (2,) * 4]


def test_refusals_mirror_can_share_prefix():
    """The planner and ``Adapter.can_share_prefix`` read one rule,
    ``processors.base.prefix_masks_fit``."""
    from transformers import Qwen2Config

    from vlcohort.processors.base import prefix_masks_fit

    assert shared_prefix_refusal(True, "", "sdpa") == shared_prefix_refusal(True, "", "eager") == ""
    assert "does not declare" in shared_prefix_refusal(False, "", "sdpa")
    assert "4-D" in shared_prefix_refusal(True, "", "flash_attention_2")
    linear = Qwen2Config(num_hidden_layers=2, layer_types=["full_attention", "linear_attention"])
    why = prefix_masks_fit(linear, "sdpa")
    assert "linear_attention" in why and shared_prefix_refusal(True, why, "sdpa") == why
    windowed = Qwen2Config(num_hidden_layers=2, layer_types=["full_attention", "sliding_attention"])
    assert "sliding_window" in prefix_masks_fit(windowed, "sdpa")
    windowed.sliding_window = 64
    assert prefix_masks_fit(windowed, "sdpa") == ""  # rebuilt per layer type


# ----------------------------------------------------------------------------- the plan


def test_text_model_counts_the_prompt_once():
    """Qwen2.5-3B (the text adapter shares its prompts), a micro-batch of 8 = G completions
    of one prompt: 1 row of P + 8 T = 5,120 positions instead of 8 x 3,328 = 26,624, and
    the mask [1, 1, 5120, 5120] instead of [8, 1, 3328, 3328]."""
    f = model_facts("Qwen/Qwen2.5-3B-Instruct", configs=CONFIGS)
    assert f.shares_prefix and f.prefix_masks == ""
    off, on = _plan("Qwen/Qwen2.5-3B-Instruct", False), _plan("Qwen/Qwen2.5-3B-Instruct", True)
    assert not off.shared_prefix and (off.micro_rows, off.micro_width) == (8, P + T)
    assert on.shared_prefix and (on.micro_rows, on.micro_width) == (1, P + G * T)
    assert off.parts["activations"] == _micro_bytes(f, 8, P + T, 8, 0)
    assert on.parts["activations"] == _micro_bytes(f, 1, P + G * T, 1, 0)
    assert on.parts["activations"] < off.parts["activations"] / 4
    assert on.parts["logits"] == off.parts["logits"]  # the same N x T completion positions
    assert any("counted once" in n for n in on.notes)
    # eager attention: the shared batch's mask is additive, in the activation dtype
    eager = _plan("Qwen/Qwen2.5-3B-Instruct", True, "agents.0.attn_implementation=eager")
    assert eager.parts["activations"] == _micro_bytes(f, 1, P + G * T, 1, 0, mask_bytes=2)


def test_vision_language_model_follows_its_adapter():
    """Qwen2.5-VL-3B and Gemma-3-12B (sliding-window layers, their masks rebuilt per
    layer type) with a 2,048-image-token prompt and G = 8: the language model's
    positions and the vision tower's images fall to one prompt per micro-batch, by the
    formula."""
    for path in ("Qwen/Qwen2.5-VL-3B-Instruct", "google/gemma-3-12b-it"):
        f = model_facts(path, configs=CONFIGS)
        assert f.shares_prefix and f.prefix_masks == "" and f.vision_layers
        off = _plan(path, False, image_tokens=IMAGE)
        on = _plan(path, True, image_tokens=IMAGE)
        assert off.parts["activations"] == _micro_bytes(f, 8, P + T, 8, IMAGE)
        assert on.shared_prefix
        assert on.parts["activations"] == _micro_bytes(f, 1, P + G * T, 1, IMAGE)
        assert off.parts["activations"] - on.parts["activations"] > 0


def test_no_change_where_the_update_would_not_share():
    """A flash-attention agent keeps the unshared plan, and says why."""
    path = "Qwen/Qwen2.5-3B-Instruct"
    extra = ("agents.0.attn_implementation=flash_attention_2",)
    off, on = _plan(path, False, *extra), _plan(path, True, *extra)
    assert on.parts == off.parts and not on.shared_prefix
    assert any("planned unshared" in n and "4-D" in n for n in on.notes)


def test_micro_batch_of_one_completion_per_prompt_is_unshared():
    """micro_batch_seqs=1: nothing to share, the plan is the unshared one."""
    off = _plan("Qwen/Qwen2.5-3B-Instruct", False, "grpo.micro_batch_seqs=1")
    on = _plan("Qwen/Qwen2.5-3B-Instruct", True, "grpo.micro_batch_seqs=1")
    assert on.parts == off.parts and not on.shared_prefix


def test_cli_says_the_prompt_is_counted_once(capsys):
    args = ["plan", "method=gt_reward", "agents=[{name: A, path: 'tiny:qwen2', device: cuda}]",
            "rollout.rollouts_per_prompt=8", "grpo.micro_batch_seqs=8", "grpo.shared_prefix=true",
            "--gpus", "1", "--prompt-tokens", "512"]
    assert main(args) == 0
    assert "grpo.shared_prefix: each prompt counted once per micro-batch" in capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    a = json.loads(capsys.readouterr().out)["agents"][0]
    assert a["shared_prefix"] and a["micro_rows"] == 1 and a["micro_width"] == 512 + 8 * (a["seq_tokens"] - 512)
