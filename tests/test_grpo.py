"""Hand-computed checks of the pure GRPO functions, and the micro-batching property.

Every expected number is worked out in the comment next to it, so a reader can check the
formula without running anything. ln 2 = 0.693147, ln 3 = 1.098612, ln 1.5 = 0.405465.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from vlcohort.training.grpo import (
    ADVANTAGE_SCALES,
    AGGREGATIONS,
    IS_LEVELS,
    IS_MODES,
    KL_ESTIMATORS,
    LOG_RATIO_CLAMP,
    POLICY_LOSSES,
    aggregate,
    aggregate_denominator,
    group_advantages,
    importance_weights,
    kl_penalty,
    policy_loss,
    varied_groups,
)

LN = math.log
NAN, INF = float("nan"), float("inf")


def pair(r):
    """An ``ISWeights``'s weights and statistics."""
    return r.weights, r.stats


def close(actual, expected, tol=1e-5):
    """Assert a tensor (or float) equals a nested list (or float) within tol."""
    expected = torch.as_tensor(expected, dtype=torch.float64)
    actual = torch.as_tensor(actual, dtype=torch.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert torch.allclose(actual, expected, atol=tol, rtol=0), (actual, expected)


def test_registries_hold_the_documented_names_each_with_a_docstring():
    assert set(ADVANTAGE_SCALES) == {"group", "none", "batch"}
    assert set(IS_LEVELS) == {"token", "sequence", "geo_mean"}
    assert set(IS_MODES) == {"truncate", "token_mask", "mask", "rejection"}
    assert IS_MODES["mask"] is IS_MODES["token_mask"]  # the old name, kept as an alias
    assert set(KL_ESTIMATORS) == {"k1", "k2", "k3", "low_var_kl"}
    assert set(POLICY_LOSSES) == {"ppo", "gspo", "cispo"}
    assert set(AGGREGATIONS) == {"token_mean", "dapo", "bnpo", "seq_mean_token_mean",
                                 "seq_mean_token_sum_norm"}
    assert AGGREGATIONS["dapo"] is AGGREGATIONS["token_mean"]  # TRL's name for it
    fns = [*ADVANTAGE_SCALES.values(), *IS_LEVELS.values(), *IS_MODES.values(), *KL_ESTIMATORS.values(),
           *POLICY_LOSSES.values()]
    assert all(f.__doc__ and f.__doc__.strip() for f in fns)
    assert all("arXiv" in f.__doc__ for f in POLICY_LOSSES.values())  # each with its paper
    assert all(a.reference for a in AGGREGATIONS.values())


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: group_advantages(torch.zeros(2, 3), scale="zscore"), "allowed: batch, group, none"),
        (lambda: importance_weights(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), level="x"),
         "allowed: geo_mean, sequence, token"),
        (lambda: importance_weights(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1, 2), mode="x"),
         "allowed: mask, rejection, token_mask, truncate"),
        (lambda: kl_penalty(torch.zeros(1, 2), torch.zeros(1, 2), kind="k4"), "allowed: k1, k2, k3, low_var_kl"),
        (lambda: policy_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.ones(1), torch.ones(1, 2),
                             loss_kind="x"), "allowed: cispo, gspo, ppo"),
        (lambda: aggregate(torch.zeros(1, 2), torch.ones(1, 2), mode="sum"),
         "allowed: bnpo, dapo, seq_mean_token_mean"),
    ],
)
def test_unknown_variant_names_list_what_is_allowed(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --------------------------------------------------------------------------------------
# group_advantages
# --------------------------------------------------------------------------------------


def test_group_scale_uses_the_unbiased_std():
    # [1, 0, 1, 0]: mean 0.5, centered +-0.5, unbiased var = 4 * 0.25 / 3 = 1/3,
    # std = 0.577350, A = +-0.5 / 0.577350 = +-0.866025
    # [1, 0]:       mean 0.5, var = 2 * 0.25 / 1 = 0.5, std = 0.707107, A = +-0.707107
    adv = group_advantages(torch.tensor([[1.0, 0.0, 1.0, 0.0]]), eps=0.0)
    close(adv, [[0.866025, -0.866025, 0.866025, -0.866025]])
    close(group_advantages(torch.tensor([[1.0, 0.0]]), eps=0.0), [[0.707107, -0.707107]])


def test_group_scale_adds_eps_to_the_std():
    # 0.5 / (0.577350 + 0.1) = 0.738173
    adv = group_advantages(torch.tensor([[1.0, 0.0, 1.0, 0.0]]), eps=0.1)
    close(adv, [[0.738173, -0.738173, 0.738173, -0.738173]])


def test_none_scale_is_dr_grpo_centering_only():
    # [1, 0, 0, 0]: mean 0.25 -> [0.75, -0.25, -0.25, -0.25]
    # [2, 0, 0, 0]: mean 0.5  -> [1.5, -0.5, -0.5, -0.5]  (reward scale is kept)
    adv = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0]]), scale="none")
    close(adv, [[0.75, -0.25, -0.25, -0.25], [1.5, -0.5, -0.5, -0.5]])


def test_batch_scale_is_group_mean_over_batch_std():
    # TRL scale_rewards="batch". [1, 0, 0, 0] and [1, 1, 1, 0]: group means 0.25, 0.75 ->
    # centered [0.75, -0.25, -0.25, -0.25], [0.25, 0.25, 0.25, -0.75]; all 8 rewards: mean
    # 0.5, unbiased var = 8 x 0.25 / 7 = 2/7, std 0.534522 -> 0.75 / 0.534522 = 1.403122,
    # 0.25 / 0.534522 = 0.467707
    adv = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]]), scale="batch", eps=0.0)
    close(adv, [[1.403122, -0.467707, -0.467707, -0.467707], [0.467707, 0.467707, 0.467707, -1.403122]])
    # (group scale would give both rows +-1.5 / -0.5: each group its own std 0.5)
    # invalid rollouts stay out of the batch std: valid [1, 0] and [1, 1, 0] (one of its 1s
    # invalid): rewards 1, 0, 1, 1, 0 -> mean 0.6, var (0.16 + 0.36 + 0.16 + 0.16 + 0.36) / 4
    # = 0.3, std 0.547723; group 0 centered [0.5, -0.5] -> +-0.912871;
    # group 1 mean 2/3 -> [1/3, 1/3, -2/3] / 0.547723 = [0.608581, 0.608581, -1.217161]
    valid = torch.tensor([[True, True, False, False], [True, True, False, True]])
    adv = group_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]]), scale="batch",
                           eps=0.0, valid=valid)
    close(adv, [[0.912871, -0.912871, 0.0, 0.0], [0.608581, 0.608581, 0.0, -1.217161]])


def test_batch_scale_std_is_over_the_batch_groups_only():
    # groups 0 and 1 as above (batch std 0.534522); group 2, [5, 5, 0, 0], is carried along
    # (another agent's shard, a dropped group): it keeps its own centring, +-2.5, but not
    # its rewards in the std: 2.5 / 0.534522 = 4.677072
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0], [5.0, 5.0, 0.0, 0.0]])
    adv = group_advantages(rewards, scale="batch", eps=0.0, batch=torch.tensor([True, True, False]))
    close(adv, [[1.403122, -0.467707, -0.467707, -0.467707], [0.467707, 0.467707, 0.467707, -1.403122],
                [4.677072, 4.677072, -4.677072, -4.677072]])
    # all three in the batch: 12 rewards, mean 14 / 12, a different std
    everything = group_advantages(rewards, scale="batch", eps=0.0)
    assert not torch.allclose(everything[:2], adv[:2])
    assert torch.equal(group_advantages(rewards, scale="batch", batch=torch.ones(3, dtype=torch.bool)),
                       group_advantages(rewards, scale="batch"))
    # the batch rows only change scale=batch
    for scale in ("group", "none"):
        assert torch.equal(group_advantages(rewards, scale=scale, batch=torch.tensor([True, False, False])),
                           group_advantages(rewards, scale=scale))
    with pytest.raises(ValueError, match="batch must be"):
        group_advantages(rewards, scale="batch", batch=torch.ones(2, dtype=torch.bool))


def test_varied_groups_are_those_of_more_than_one_value():
    # DAPO keeps 0 < |correct| < G: [1, 0] yes, [1, 1] and [0, 0] no; a group without a
    # reward (valid False) never; in float64 0.1 + 0.2 != 0.3, so that group varies
    values = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.1 + 0.2, 0.3]],
                          dtype=torch.float64)
    assert varied_groups(values).tolist() == [True, False, False, True, True]
    assert varied_groups(values, torch.tensor([True, True, True, False, True])).tolist() == [
        True, False, False, False, True]
    assert varied_groups(torch.tensor([[True, False], [True, True]])).tolist() == [True, False]
    with pytest.raises(ValueError, match=r"\[B, G\]"):
        varied_groups(torch.zeros(4))


@pytest.mark.parametrize("scale", sorted(ADVANTAGE_SCALES))
def test_zero_variance_groups_give_exactly_zero(scale):
    # 0.1 * 3 / 3 is not exactly 0.1 in floats; the result must still be exactly 0
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.1, 0.1, 0.1], [1.0, 0.0, 0.0]])
    adv = group_advantages(rewards, scale=scale)
    assert torch.equal(adv[:3], torch.zeros(3, 3))
    assert (adv[3] != 0).all()


def test_invalid_groups_get_zero_advantage():
    # row 1's teacher abstained: no signal; row 0 as in the unbiased-std test
    rewards = torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    adv = group_advantages(rewards, valid=torch.tensor([True, False]), eps=0.0)
    close(adv, [[0.866025, -0.866025, 0.866025, -0.866025], [0, 0, 0, 0]])
    assert torch.equal(adv[1], torch.zeros(4))


def test_per_rollout_valid_mask_leaves_invalid_rollouts_out_of_the_statistics():
    # valid [1, 0, 1] of [1, 0, 1, 5]: mean 2/3, centered [1/3, -2/3, 1/3],
    # var = (1/9 + 4/9 + 1/9) / 2 = 1/3, std 0.577350 -> [0.577350, -1.154701, 0.577350, 0]
    # a group with one valid rollout carries no preference -> 0
    rewards = torch.tensor([[1.0, 0.0, 1.0, 5.0], [1.0, 0.0, 0.0, 0.0]])
    valid = torch.tensor([[True, True, True, False], [True, False, False, False]])
    adv = group_advantages(rewards, valid=valid, eps=0.0)
    close(adv, [[0.577350, -1.154701, 0.577350, 0.0], [0, 0, 0, 0]])


def test_group_of_one_rollout_is_an_error_for_group_scale_only():
    with pytest.raises(ValueError, match="G >= 2"):
        group_advantages(torch.tensor([[1.0], [0.0]]), scale="group")
    assert torch.equal(group_advantages(torch.tensor([[1.0], [0.0]]), scale="none"), torch.zeros(2, 1))


def test_advantage_input_checks():
    with pytest.raises(ValueError, match=r"\[B, G\]"):
        group_advantages(torch.zeros(4))
    with pytest.raises(ValueError, match="valid must be"):
        group_advantages(torch.zeros(2, 3), valid=torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="NaN or inf"):
        group_advantages(torch.tensor([[1.0, NAN]]))
    # a NaN in an invalid rollout is ignored
    adv = group_advantages(torch.tensor([[1.0, 0.0, NAN]]), valid=torch.tensor([[True, True, False]]), eps=0.0)
    close(adv, [[0.707107, -0.707107, 0.0]])


def test_bool_rewards_are_cast_to_float():
    adv = group_advantages(torch.tensor([[True, False]]), eps=0.0)
    assert adv.dtype == torch.float32
    close(adv, [[0.707107, -0.707107]])


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 6).flatmap(
    lambda g: st.lists(st.lists(st.integers(0, 1), min_size=g, max_size=g), min_size=1, max_size=5)))
def test_advantages_sum_to_zero_within_each_group(rows):
    for scale in ADVANTAGE_SCALES:
        adv = group_advantages(torch.tensor(rows, dtype=torch.float64), scale=scale)
        assert torch.allclose(adv.sum(dim=1), torch.zeros(len(rows), dtype=torch.float64), atol=1e-9)


# --------------------------------------------------------------------------------------
# importance_weights
# --------------------------------------------------------------------------------------

# token log-ratios old - rollout = [ln 0.25, 0, ln 1.5, ln 3] -> raw w = [0.25, 1, 1.5, 3]
ROLL = torch.tensor([[-1.0, -2.0, -0.5, -3.0]])
OLD = ROLL + torch.tensor([[LN(0.25), 0.0, LN(1.5), LN(3.0)]])
FULL = torch.ones(1, 4, dtype=torch.bool)
# k3 per token = w - l - 1:
#   0.25 + 1.386294 - 1 = 0.636294;  1 - 0 - 1 = 0;  1.5 - 0.405465 - 1 = 0.094535;
#   3 - 1.098612 - 1 = 0.901388;     mean = 1.632217 / 4 = 0.408054
K3_MEAN = 0.408054


def test_token_truncate_is_tis():
    # cap 2: [0.25, 1, 1.5, min(3, 2) = 2]; 1 of 4 truncated
    w, s = pair(importance_weights(OLD, ROLL, FULL, level="token", mode="truncate", cap=2.0))
    close(w, [[0.25, 1.0, 1.5, 2.0]])
    close(s["is/mean"], 5.75 / 4)  # raw, before truncation: 0.25 + 1 + 1.5 + 3
    close(s["is/min"], 0.25)
    close(s["is/max"], 3.0)  # raw: may exceed the cap
    close(s["is/applied_mean"], 4.75 / 4)
    close(s["is/frac_truncated"], 0.25)
    close(s["is/frac_masked"], 0.0)
    assert s["is/nonfinite_tokens"] == 0.0
    close(s["is/rollout_k3"], K3_MEAN)


def test_token_mask_is_mis():
    # band [0.5, 2]: 0.25 and 3 fall outside -> [0, 1, 1.5, 0]; 2 of 4 masked
    w, s = pair(importance_weights(OLD, ROLL, FULL, level="token", mode="mask", low=0.5, high=2.0))
    close(w, [[0.0, 1.0, 1.5, 0.0]])
    close(s["is/frac_masked"], 0.5)
    close(s["is/frac_truncated"], 0.0)
    close(s["is/applied_mean"], 2.5 / 4)
    close(s["is/rollout_k3"], K3_MEAN)


def test_mask_is_an_alias_of_token_mask_which_keeps_every_token_in_the_loss():
    a = importance_weights(OLD, ROLL, FULL, mode="mask")
    b = importance_weights(OLD, ROLL, FULL, mode="token_mask")
    assert torch.equal(a.weights, b.weights) and a.stats == b.stats
    assert torch.equal(b.keep, FULL)  # weight 0, but still counted by the denominator
    assert "is/frac_rejected" not in b.stats


def test_truncate_with_a_floor_is_trl_clip_min():
    # floor 0.5, cap 2: [max(0.25, 0.5) = 0.5, 1, 1.5, min(3, 2) = 2]; 2 of 4 truncated
    w, s = pair(importance_weights(OLD, ROLL, FULL, mode="truncate", cap=2.0, floor=0.5))
    close(w, [[0.5, 1.0, 1.5, 2.0]])
    close(s["is/frac_truncated"], 0.5)
    close(s["is/applied_mean"], 5.0 / 4)
    # the default floor 0 is no lower bound: the old behaviour
    close(importance_weights(OLD, ROLL, FULL, cap=2.0).weights, [[0.25, 1.0, 1.5, 2.0]])


def test_rejection_drops_tokens_from_the_loss_and_its_denominator():
    # band [0.5, 2]: 0.25 and 3 are rejected: weight 0 AND out of the loss
    r = importance_weights(OLD, ROLL, FULL, mode="rejection", low=0.5, high=2.0)
    close(r.weights, [[0.0, 1.0, 1.5, 0.0]])
    assert r.keep.tolist() == [[False, True, True, False]]
    close(r.stats["is/frac_rejected"], 0.5)
    close(r.stats["is/frac_masked"], 0.5)
    # what the drop changes: with A = +1 on ratio-1 tokens each token's loss is -w, so
    # token_mask: (0 - 1 - 1.5 - 0) / 4 tokens = -0.625; rejection: -2.5 / 2 tokens = -1.25
    lp = torch.full((1, 4), -1.0)
    adv = torch.tensor([1.0])
    tm = importance_weights(OLD, ROLL, FULL, mode="token_mask")
    loss_tm, _ = policy_loss(lp, lp, adv, FULL, is_weights=tm.weights)
    kept = FULL & r.keep
    loss_rj, _ = policy_loss(lp, lp, adv, kept, is_weights=r.weights,
                             denom=aggregate_denominator(kept, "token_mean"))
    close(loss_tm, -0.625)
    close(loss_rj, -1.25)


def test_rejection_at_sequence_level_drops_whole_completions():
    # seq 0: product 16 > 2 -> both its tokens rejected; seq 1: product 1 kept
    roll = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]])
    old = roll + torch.tensor([[LN(2), LN(8), 0.0], [LN(0.5), LN(2), 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]], dtype=torch.bool)
    r = importance_weights(old, roll, mask, level="sequence", mode="rejection", low=0.5, high=2.0)
    assert r.keep.tolist() == [[False, False, False], [True, True, False]]
    close(r.weights, [[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    close(r.stats["is/frac_rejected"], 0.5)
    # seq_mean aggregations then count one sequence, not two
    assert aggregate_denominator(mask & r.keep, "seq_mean_token_mean").item() == 1.0


def test_batch_norm_divides_by_the_mean_weight_of_the_tokens_in_the_loss():
    # truncate cap 2: [0.25, 1, 1.5, 2], mean 4.75 / 4 = 1.1875
    #   -> [0.210526, 0.842105, 1.263158, 1.684211], mean 1
    w, s = pair(importance_weights(OLD, ROLL, FULL, cap=2.0, batch_norm=True))
    close(w, [[0.25 / 1.1875, 1 / 1.1875, 1.5 / 1.1875, 2 / 1.1875]])
    close(s["is/applied_mean"], 1.0)
    close(s["is/mean"], 5.75 / 4)  # raw stats are unchanged
    # rejection: the mean is over the kept tokens [1, 1.5] = 1.25 -> [0, 0.8, 1.2, 0]
    r = importance_weights(OLD, ROLL, FULL, mode="rejection", batch_norm=True)
    close(r.weights, [[0.0, 0.8, 1.2, 0.0]])
    # token_mask: the masked zeros stay in the loss, so in the mean: 2.5 / 4 = 0.625
    #   -> [0, 1.6, 2.4, 0]
    close(importance_weights(OLD, ROLL, FULL, mode="token_mask", batch_norm=True).weights,
          [[0.0, 1.6, 2.4, 0.0]])
    # padding stays 0 and an all-rejected batch stays all 0 (no 0 / 0)
    z = importance_weights(OLD, ROLL, FULL, mode="rejection", low=5.0, high=6.0, batch_norm=True)
    assert torch.equal(z.weights, torch.zeros(1, 4))


def test_geo_mean_level_is_the_geometric_mean_not_the_product():
    # seq 0: log-ratios [ln 2, ln 8] -> mean ln 4 -> w = 4 on both tokens (product: 16)
    # seq 1: [ln 0.5, ln 2, pad] -> mean 0 -> w = 1 on its two tokens, 0 on padding
    roll = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]])
    old = roll + torch.tensor([[LN(2), LN(8), 0.0], [LN(0.5), LN(2), 123.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]], dtype=torch.bool)
    w, _ = pair(importance_weights(old, roll, mask, level="geo_mean", mode="truncate", cap=10.0))
    close(w, [[4.0, 4.0, 0.0], [1.0, 1.0, 0.0]])
    # truncated at cap 2: seq 0's tokens are both truncated (2 of 4 tokens)
    w, s = pair(importance_weights(old, roll, mask, level="geo_mean", mode="truncate", cap=2.0))
    close(w, [[2.0, 2.0, 0.0], [1.0, 1.0, 0.0]])
    close(s["is/frac_truncated"], 0.5)
    # masked to [0.5, 2]: seq 0 dropped whole
    w, s = pair(importance_weights(old, roll, mask, level="geo_mean", mode="mask", low=0.5, high=2.0))
    close(w, [[0.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    close(s["is/frac_masked"], 0.5)


def test_sequence_level_is_the_product_of_the_token_ratios():
    # the same batch: seq 0 sum ln 2 + ln 8 = ln 16 -> w = 16 (cap 20, not truncated);
    # seq 1 ln 0.5 + ln 2 = 0 -> w = 1; padding (old 123) stays out of the sum
    roll = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]])
    old = roll + torch.tensor([[LN(2), LN(8), 0.0], [LN(0.5), LN(2), 123.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]], dtype=torch.bool)
    w, s = pair(importance_weights(old, roll, mask, level="sequence", mode="truncate", cap=20.0))
    close(w, [[16.0, 16.0, 0.0], [1.0, 1.0, 0.0]])
    close(s["is/max"], 16.0)


def test_sequence_level_keeps_a_small_per_token_bias_that_the_geometric_mean_hides():
    # -0.01 per token over 100 tokens: product exp(-1) = 0.367879,
    # geometric mean exp(-0.01) = 0.990050
    roll = torch.full((1, 100), -1.0)
    old = roll - 0.01
    mask = torch.ones(1, 100, dtype=torch.bool)
    w_seq, _ = pair(importance_weights(old, roll, mask, level="sequence", cap=2.0))
    w_geo, _ = pair(importance_weights(old, roll, mask, level="geo_mean", cap=2.0))
    close(w_seq, torch.full((1, 100), 0.367879))
    close(w_geo, torch.full((1, 100), 0.990050))


def test_sequence_level_clamps_the_summed_log_ratio_in_log_space():
    # +0.5 per token over 100 tokens: sum 50 -> clamped to 20 -> raw w = exp(20), finite;
    # -0.5 per token: sum -50 -> exp(-20) = 2.061154e-9, not 0
    roll = torch.full((2, 100), -1.0, dtype=torch.float64)
    old = roll + torch.tensor([[0.5], [-0.5]], dtype=torch.float64)
    mask = torch.ones(2, 100, dtype=torch.bool)
    w, s = pair(importance_weights(old, roll, mask, level="sequence", cap=1e12))
    assert torch.isfinite(w).all()
    close(w[0], torch.full((100,), math.exp(LOG_RATIO_CLAMP), dtype=torch.float64), tol=1e-3)
    close(s["is/max"], math.exp(20.0), tol=1e-3)  # 4.85165e8
    assert abs(float(w[1, 0]) - 2.061154e-9) < 1e-14


def test_nonfinite_log_probs_mask_their_token_and_are_counted():
    # rollout NaN at t=1 and -inf at t=2, old +inf at t=3 (valid), NaN in padding (not counted)
    roll = torch.tensor([[-1.0, NAN, -INF, -1.0, NAN]])
    old = torch.tensor([[-1.0 + LN(1.5), -1.0, -1.0, INF, -1.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]], dtype=torch.bool)
    for level in IS_LEVELS:
        for mode in IS_MODES:
            w, s = pair(importance_weights(old, roll, mask, level=level, mode=mode))
            # the one good token has w = 1.5 (also the sequence's geometric mean)
            close(w, [[1.5, 0.0, 0.0, 0.0, 0.0]])
            assert torch.isfinite(w).all()
            assert s["is/nonfinite_tokens"] == 3.0
            close(s["is/frac_masked"], 3 / 4)
            close(s["is/mean"], 1.5)
            close(s["is/rollout_k3"], 1.5 - LN(1.5) - 1)  # 0.094535
            assert all(math.isfinite(v) for v in s.values())


def test_weights_carry_no_gradient():
    old = OLD.clone().requires_grad_(True)
    roll = ROLL.clone().requires_grad_(True)
    w, s = pair(importance_weights(old, roll, FULL))
    assert not w.requires_grad and w.grad_fn is None
    assert all(type(v) is float for v in s.values())


def test_huge_log_ratios_stay_finite_and_empty_masks_give_zero_stats():
    w, s = pair(importance_weights(torch.tensor([[500.0]]), torch.tensor([[0.0]]), torch.ones(1, 1)))
    close(w, [[2.0]])
    assert math.isfinite(s["is/max"]) and math.isfinite(s["is/rollout_k3"])
    w, s = pair(importance_weights(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3)))
    assert torch.equal(w, torch.zeros(2, 3))
    assert all(v == 0.0 for v in s.values())


def test_importance_weight_argument_checks():
    with pytest.raises(ValueError, match="cap"):
        importance_weights(OLD, ROLL, FULL, cap=0.0)
    with pytest.raises(ValueError, match="low < high"):
        importance_weights(OLD, ROLL, FULL, mode="mask", low=2.0, high=0.5)
    with pytest.raises(ValueError, match="floor <= cap"):
        importance_weights(OLD, ROLL, FULL, cap=2.0, floor=3.0)
    with pytest.raises(ValueError, match="shape mismatch"):
        importance_weights(OLD, ROLL[:, :3], FULL)


# --------------------------------------------------------------------------------------
# kl_penalty
# --------------------------------------------------------------------------------------


def test_k1_and_k3_by_hand():
    # token 0: logp ln 0.5, ref ln 0.25:  k1 = ln 2 = 0.693147
    #          k3: d = ref - logp = -ln 2, exp(d) = 0.5 -> 0.5 + 0.693147 - 1 = 0.193147
    # token 1: logp ln 0.25, ref ln 0.5:  k1 = -0.693147 (k1 can be negative)
    #          k3: d = ln 2, exp(d) = 2 -> 2 - 0.693147 - 1 = 0.306853
    # token 2: equal -> 0 for both
    logp = torch.tensor([[LN(0.5), LN(0.25), -1.0]])
    ref = torch.tensor([[LN(0.25), LN(0.5), -1.0]])
    close(kl_penalty(logp, ref, "k1"), [[0.693147, -0.693147, 0.0]])
    close(kl_penalty(logp, ref, "k3"), [[0.193147, 0.306853, 0.0]])


def test_kl_gradient_flows_through_logp_only():
    # d k1 / d logp = 1;  d k3 / d logp = 1 - exp(ref - logp) = 1 - 0.5 = 0.5 at token 0
    logp = torch.tensor([[LN(0.5)]], requires_grad=True)
    ref = torch.tensor([[LN(0.25)]], requires_grad=True)
    kl_penalty(logp, ref.detach(), "k3").sum().backward()
    close(logp.grad, [[0.5]])
    logp.grad = None
    kl_penalty(logp, ref.detach(), "k1").sum().backward()
    close(logp.grad, [[1.0]])


@settings(max_examples=40, deadline=None)
@given(st.floats(-30, 0), st.floats(-30, 0))
def test_k3_is_never_negative(lp, rp):
    assert kl_penalty(torch.tensor([[lp]]), torch.tensor([[rp]]), "k3").item() >= 0.0


def test_k2_and_low_var_kl_by_hand():
    # token 0 as above: k2 = 0.5 (ln 2)^2 = 0.240227; low_var_kl = k3 = 0.193147
    # token 1: ref - logp = 3: k2 = 4.5; k3 = e^3 - 3 - 1 = 16.085537 -> clamped to 10
    logp = torch.tensor([[LN(0.5), -4.0]], requires_grad=True)
    ref = torch.tensor([[LN(0.25), -1.0]])
    close(kl_penalty(logp, ref, "k2"), [[0.240227, 4.5]])
    close(kl_penalty(logp, ref, "k3"), [[0.193147, 16.085537]])
    close(kl_penalty(logp, ref, "low_var_kl"), [[0.193147, 10.0]])
    # gradients: d k2 / d logp = logp - ref = [ln 2, -3];
    # low_var_kl: k3's 1 - exp(ref - logp) = 0.5 at token 0, 0 where the clamp holds
    kl_penalty(logp, ref, "k2").sum().backward()
    close(logp.grad, [[0.693147, -3.0]])
    logp.grad = None
    kl_penalty(logp, ref, "low_var_kl").sum().backward()
    close(logp.grad, [[0.5, 0.0]])


# a 6-token vocabulary: policy softmax(THETA), fixed reference REF_P
THETA = torch.tensor([0.3, -1.2, 0.8, 0.0, -0.4, 1.5], dtype=torch.float64)
REF_P = torch.tensor([0.25, 0.05, 0.1, 0.3, 0.2, 0.1], dtype=torch.float64)


def _expected_grad_of_estimator(kind: str) -> torch.Tensor:
    """E_{x ~ pi}[grad_theta k(x)], exactly: sum over the 6 tokens of sg(pi(x)) x grad k(x),
    i.e. the gradient a KL loss term gives on-policy, averaged over every possible sample."""
    theta = THETA.clone().requires_grad_(True)
    logp = torch.log_softmax(theta, dim=0)  # [V]
    k = kl_penalty(logp[None, :], REF_P.log()[None, :], kind)[0]  # [V]
    (logp.exp().detach() * k).sum().backward()
    return theta.grad


def _grad_of_exact_kl(direction: str) -> torch.Tensor:
    """grad_theta of the exact KL over the vocabulary (an independent formula)."""
    theta = THETA.clone().requires_grad_(True)
    logp = torch.log_softmax(theta, dim=0)  # [V]
    p = logp.exp()
    if direction == "pi||ref":
        kl = (p * (logp - REF_P.log())).sum()
    else:  # "ref||pi"
        kl = (REF_P * (REF_P.log() - logp)).sum()
    kl.backward()
    return theta.grad


def test_k1_as_a_loss_term_has_no_kl_gradient_on_policy():
    # E[grad k1] = E[grad log pi] = grad sum pi = 0, while the KL's is not
    close(_expected_grad_of_estimator("k1"), torch.zeros(6), tol=1e-12)
    assert _grad_of_exact_kl("pi||ref").abs().max() > 0.1


def test_k2_gives_the_gradient_of_kl_policy_to_ref():
    expected = _grad_of_exact_kl("pi||ref")
    close(_expected_grad_of_estimator("k2"), expected, tol=1e-12)


def test_k3_and_low_var_kl_give_the_gradient_of_kl_ref_to_policy():
    expected = _grad_of_exact_kl("ref||pi")
    close(_expected_grad_of_estimator("k3"), expected, tol=1e-12)
    close(_expected_grad_of_estimator("low_var_kl"), expected, tol=1e-12)  # every k3 < 10 here
    # and that is not KL(pi || ref)'s gradient
    assert not torch.allclose(expected, _grad_of_exact_kl("pi||ref"), atol=1e-3)


# --------------------------------------------------------------------------------------
# aggregate
# --------------------------------------------------------------------------------------

# seq 0: 3 tokens [1, 2, 3] (sum 6, mean 2); seq 1: 1 token [4]; padding NaN must not leak
X = torch.tensor([[1.0, 2.0, 3.0], [4.0, NAN, NAN]])
M = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)


def test_aggregation_modes_by_hand():
    close(aggregate(X, M, "token_mean"), 2.5)  # (1 + 2 + 3 + 4) / 4
    close(aggregate(X, M, "seq_mean_token_mean"), 3.0)  # (2 + 4) / 2
    close(aggregate(X, M, "seq_mean_token_sum_norm", length_norm=4), 1.25)  # (6/4 + 4/4) / 2


def test_denominators_and_passed_denom():
    assert aggregate_denominator(M, "token_mean").item() == 4.0
    assert aggregate_denominator(M, "seq_mean_token_mean").item() == 2.0
    # GRPO's sequence mean skips an empty sequence; Dr.GRPO divides by the constant N
    # (TRL: per_token_loss.size(0)), so masking a completion out rescales nothing else;
    # an empty batch gives 1, never 0
    M3 = torch.cat([M, torch.zeros(1, 3, dtype=torch.bool)])
    assert aggregate_denominator(M3, "seq_mean_token_mean").item() == 2.0
    assert aggregate_denominator(M3, "seq_mean_token_sum_norm").item() == 3.0
    X3 = torch.cat([X, torch.full((1, 3), 7.0)])
    trl = float(torch.where(M3, X3, 0.0).sum() / (X3.size(0) * 2))  # TRL dr_grpo, max length 2
    close(aggregate(X3, M3, "seq_mean_token_sum_norm", length_norm=2,
                    denom=aggregate_denominator(M3, "seq_mean_token_sum_norm")), trl)
    assert aggregate_denominator(torch.zeros(2, 3), "token_mean").item() == 1.0
    close(aggregate(X, M, "token_mean", denom=8), 1.25)  # 10 / 8
    close(aggregate(X, M, "seq_mean_token_mean", denom=torch.tensor(4.0)), 1.5)  # 6 / 4
    close(aggregate(X, M, "seq_mean_token_sum_norm", denom=5, length_norm=2), 1.0)  # (3 + 2) / 5


def test_aggregate_errors_and_empty_mask():
    with pytest.raises(ValueError, match="length_norm"):
        aggregate(X, M, "seq_mean_token_sum_norm")
    with pytest.raises(ValueError, match="> 0"):
        aggregate(X, M, "token_mean", denom=0)
    for mode in AGGREGATIONS:
        assert aggregate(X, torch.zeros_like(M), mode, length_norm=3).item() == 0.0


# --------------------------------------------------------------------------------------
# policy_loss
# --------------------------------------------------------------------------------------

# ratios r = [0.5, 1.0, 1.1, 1.5] in both sequences; clip range [1 - 0.2, 1 + 0.28] = [0.8, 1.28]
# seq 0, A = +1: loss = -min(r, clip(r)) = [-0.5, -1, -1.1, -1.28]   (t=3 clipped)
# seq 1, A = -1: loss = max(r, clip(r))  = [0.8, 1, 1.1, 1.5]        (t=0 clipped)
R = torch.tensor([[0.5, 1.0, 1.1, 1.5], [0.5, 1.0, 1.1, 1.5]])
OLD_LP = torch.full((2, 4), -1.0)
LP = OLD_LP + R.log()
ADV = torch.tensor([1.0, -1.0])
M8 = torch.ones(2, 4, dtype=torch.bool)


def test_clipped_surrogate_with_clip_higher_by_hand():
    logp = LP.clone().requires_grad_(True)
    loss, s = policy_loss(logp, OLD_LP, ADV, M8, clip_low=0.2, clip_high=0.28)
    # sum = (-0.5 - 1 - 1.1 - 1.28) + (0.8 + 1 + 1.1 + 1.5) = -3.88 + 4.4 = 0.52; / 8
    close(loss, 0.065)
    close(s["loss"], 0.065)
    close(s["pg_loss"], 0.065)
    close(s["clip_frac"], 2 / 8)
    close(s["ratio_mean"], 8.2 / 8)  # 2 * (0.5 + 1 + 1.1 + 1.5) / 8 = 1.025
    assert "kl" not in s
    # d(-r A)/d logp = -r A where the unclipped branch is active, 0 where clipped; / 8
    loss.backward()
    close(logp.grad, [[-0.5 / 8, -1 / 8, -1.1 / 8, 0.0], [0.0, 1 / 8, 1.1 / 8, 1.5 / 8]])


def test_symmetric_clip_changes_which_tokens_clip():
    # clip_high 0.2 -> upper bound 1.2: seq 0's r=1.5 still clipped (-1.2); seq 1 unchanged
    # sum = (-0.5 - 1 - 1.1 - 1.2) + 4.4 = 0.6; / 8 = 0.075
    loss, s = policy_loss(LP, OLD_LP, ADV, M8, clip_low=0.2, clip_high=0.2)
    close(loss, 0.075)
    close(s["clip_frac"], 0.25)


def test_clip_fractions_split_low_and_high_and_ppo_kl():
    # clip [0.8, 1.28]: seq 0 (A = +1) r = 1.5 is clipped high, seq 1 (A = -1) r = 0.5 low;
    # seq 0's r = 0.5 and seq 1's r = 1.5 sit outside the range too, but there the
    # unclipped branch is the minimum: not clipped
    _, s = policy_loss(LP, OLD_LP, ADV, M8, clip_low=0.2, clip_high=0.28)
    close(s["clip_frac_low"], 1 / 8)
    close(s["clip_frac_high"], 1 / 8)
    close(s["clip_frac"], 2 / 8)
    # ppo_kl = mean(old - logp) = -mean(ln r) = -2 (ln 0.5 + 0 + ln 1.1 + ln 1.5) / 8
    #        = -ln(0.825) / 4 = 0.192372 / 4 = 0.048093
    close(s["ppo_kl"], 0.048093)
    # padding is left out of ppo_kl
    mask = M8.clone()
    mask[:, 0] = False  # drop the r = 0.5 tokens: -2 (ln 1.1 + ln 1.5) / 6 = -2 x 0.500775 / 6
    _, s = policy_loss(LP, OLD_LP, ADV, mask, clip_low=0.2, clip_high=0.28)
    close(s["ppo_kl"], -0.166925)
    close(s["clip_frac_low"], 0.0)
    close(s["clip_frac_high"], 1 / 6)


def test_dual_clip_bounds_the_loss_of_negative_advantages():
    # verl compute_policy_loss: A < 0 -> min(max(-r A, -clip(r) A), -c A), c = 3.
    # r = [0.5, 1, 4, 10]; clip [0.8, 1.2].
    # seq 0, A = -1: max(r, clip(r)) = [0.8, 1, 4, 10] -> min(., 3) = [0.8, 1, 3, 3]
    # seq 1, A = +1: -min(r, clip(r)) = [-0.5, -1, -1.2, -1.2] (untouched by the dual clip)
    # sum = 7.8 - 3.9 = 3.9; / 8 = 0.4875
    r = torch.tensor([[0.5, 1.0, 4.0, 10.0], [0.5, 1.0, 4.0, 10.0]])
    logp = (OLD_LP + r.log()).requires_grad_(True)
    adv = torch.tensor([-1.0, 1.0])
    loss, s = policy_loss(logp, OLD_LP, adv, M8, clip_low=0.2, clip_high=0.2, clip_ratio_c=3.0)
    close(loss, 0.4875)
    loss.backward()
    # gradient -r A / 8 where the unclipped branch is active, 0 where a clip (or c) holds:
    # seq 0: [0 (clip 0.8), 1/8, 0 (c), 0 (c)]; seq 1: [-0.5/8, -1/8, 0, 0]
    close(logp.grad, [[0.0, 1 / 8, 0.0, 0.0], [-0.5 / 8, -1 / 8, 0.0, 0.0]])
    # without the dual clip seq 0 would add 4 + 10 instead of 3 + 3: (15.8 - 3.9) / 8
    loss0, _ = policy_loss(logp, OLD_LP, adv, M8, clip_low=0.2, clip_high=0.2)
    close(loss0, 11.9 / 8)
    with pytest.raises(ValueError, match="clip_ratio_c"):
        policy_loss(LP, OLD_LP, ADV, M8, clip_ratio_c=1.0)
    with pytest.raises(ValueError, match="cispo"):
        policy_loss(LP, OLD_LP, ADV, M8, clip_ratio_c=3.0, loss_kind="cispo")


# GSPO: seq 0 log-ratios [0.1, 0.3] (mean 0.2, s = e^0.2 = 1.221403), A = +1;
#       seq 1 [-0.1, 0.0] (mean -0.05, s = e^-0.05 = 0.951229), A = -1; clip [0.8, 1.2]
GS_DIFF = torch.tensor([[0.1, 0.3], [-0.1, 0.0]], dtype=torch.float64)
GS_OLD = torch.full((2, 2), -1.0, dtype=torch.float64)


def test_gspo_clips_the_sequence_ratio_by_hand():
    logp = (GS_OLD + GS_DIFF).requires_grad_(True)
    mask = torch.ones(2, 2, dtype=torch.bool)
    loss, s = policy_loss(logp, GS_OLD, torch.tensor([1.0, -1.0]), mask, clip_low=0.2, clip_high=0.2,
                          loss_kind="gspo")
    # seq 0: s = 1.221403 > 1.2 with A > 0 -> clipped: -1.2 on both tokens, no gradient
    # seq 1: s = 0.951229 inside -> max(s, clip(s)) = 0.951229 on both tokens
    # token_mean: (-2.4 + 1.902459) / 4 = -0.124385
    close(loss, -0.124385)
    close(s["clip_frac"], 0.5)
    close(s["clip_frac_high"], 0.5)
    close(s["ratio_mean"], (2 * 1.221403 + 2 * 0.951229) / 4)  # the sequence ratios: 1.086316
    loss.backward()
    # GSPO-token: d s_i,t / d logp_t = s_i, so seq 1's tokens get -A s_1 / 4 = 0.237807 each
    close(logp.grad, [[0.0, 0.0], [0.237807, 0.237807]])
    # the same batch under ppo clips per token instead: seq 0's r = [1.105171, 1.349859]
    # -> only t = 1 clipped
    _, s_ppo = policy_loss(logp, GS_OLD, torch.tensor([1.0, -1.0]), mask, clip_low=0.2, clip_high=0.2)
    close(s_ppo["clip_frac_high"], 0.25)


def _gspo_sequence_objective(logp, old, adv, mask, clip_low, clip_high):
    """GSPO's objective as the paper writes it (arXiv 2507.18071, eq. 5), an independent
    formula: -1/N sum_i min(s_i A_i, clip(s_i) A_i), s_i = exp(mean_t (logp - old))."""
    m = mask.to(logp.dtype)
    s = torch.exp(((logp - old) * m).sum(1) / m.sum(1))  # [N]
    return -torch.minimum(s * adv, torch.clamp(s, 1 - clip_low, 1 + clip_high) * adv).mean()


def test_gspo_token_form_has_the_gradient_of_the_sequence_objective():
    g = torch.Generator().manual_seed(3)
    old = -torch.rand(5, 6, generator=g, dtype=torch.float64) - 0.5  # [N, T]
    logp0 = old + 0.05 * torch.randn(5, 6, generator=g, dtype=torch.float64)
    mask = torch.arange(6)[None, :] < torch.tensor([6, 2, 4, 1, 5])[:, None]  # varied lengths
    adv = torch.tensor([1.0, -0.5, 2.0, -1.0, 0.3], dtype=torch.float64)
    a = logp0.clone().requires_grad_(True)
    # sequence log-ratios [-0.035, -0.028, -0.005, -0.027, -0.003]: with clip_low 0.02 the
    # two A < 0 completions (s = 0.972, 0.974 < 0.98) clip, the other three do not
    loss, s = policy_loss(a, old, adv, mask, clip_low=0.02, clip_high=0.03, loss_kind="gspo",
                          agg="seq_mean_token_mean")
    loss.backward()
    b = logp0.clone().requires_grad_(True)
    ref = _gspo_sequence_objective(b, old, adv, mask, 0.02, 0.03)
    ref.backward()
    assert 0 < s["clip_frac"] < 1  # some completions clip, some do not: not vacuous
    close(loss.detach(), ref.detach(), tol=1e-12)
    close(a.grad, b.grad, tol=1e-12)


def test_cispo_keeps_the_gradient_of_clipped_tokens_by_hand():
    # r = [0.5, 1, 1.1, 1.5] in both rows, clip_high 0.28 -> weight sg(min(r, 1.28)) =
    # [0.5, 1, 1.1, 1.28] (no lower bound: 0.5 stays 0.5); logp = -1 + ln r =
    # [-1.693147, -1, -0.904690, -0.594535]; A = [1, -0.5]
    # per token -w A logp, row 0: [0.846574, 1, 0.995159, 0.761005] sum 3.602738;
    # row 1: -0.5 x that = -1.801369; token_mean (3.602738 - 1.801369) / 8 = 0.225171
    logp = LP.clone().requires_grad_(True)
    adv = torch.tensor([1.0, -0.5])
    loss, s = policy_loss(logp, OLD_LP, adv, M8, clip_low=0.2, clip_high=0.28, loss_kind="cispo")
    close(loss, 0.225171)
    loss.backward()
    # d/d logp = -w A / 8: the capped token (r = 1.5, A > 0) keeps -1.28 / 8 = -0.16,
    # where PPO would give it 0
    close(logp.grad, [[-0.5 / 8, -1 / 8, -1.1 / 8, -1.28 / 8], [0.25 / 8, 0.5 / 8, 0.55 / 8, 0.64 / 8]])
    close(s["clip_frac_high"], 1 / 8)  # capped with A > 0 (TRL's cispo_clip_ratio)
    close(s["clip_frac_low"], 0.0)
    close(s["clip_frac"], 1 / 8)
    close(s["ratio_mean"], 8.2 / 8)  # the raw token ratios


def test_is_weights_multiply_the_surrogate():
    # w seq 0 = [1, 1, 1, 2], seq 1 = [0.5, 1, 1, 1]
    # seq 0: -0.5 - 1 - 1.1 - 2.56 = -5.16; seq 1: 0.4 + 1 + 1.1 + 1.5 = 4.0; sum -1.16 / 8
    w = torch.tensor([[1.0, 1.0, 1.0, 2.0], [0.5, 1.0, 1.0, 1.0]], requires_grad=True)
    loss, _ = policy_loss(LP, OLD_LP, ADV, M8, clip_high=0.28, is_weights=w)
    close(loss, -0.145)


@pytest.mark.parametrize("kind, per_token", [("k3", 0.193147), ("k1", 0.693147)])
def test_kl_term_is_added_with_its_coefficient(kind, per_token):
    # ref = logp + ln 0.5 on every token: k3 = 0.5 + ln 2 - 1 = 0.193147, k1 = ln 2
    ref = LP + LN(0.5)
    loss, s = policy_loss(LP, OLD_LP, ADV, M8, clip_high=0.28, ref_logp=ref, kl_coef=0.1, kl_kind=kind)
    close(loss, 0.065 + 0.1 * per_token)
    close(s["kl"], per_token)
    close(s["pg_loss"], 0.065)
    # ref given with kl_coef 0: KL is logged but not added
    loss0, s0 = policy_loss(LP, OLD_LP, ADV, M8, clip_high=0.28, ref_logp=ref, kl_kind=kind)
    close(loss0, 0.065)
    close(s0["kl"], per_token)


def test_kl_coef_without_ref_is_a_clear_error():
    with pytest.raises(ValueError, match="needs ref_logp"):
        policy_loss(LP, OLD_LP, ADV, M8, kl_coef=0.1)


@pytest.mark.parametrize(
    "agg, expected",
    [
        # seq 1's last token masked: seq 0 sum -3.88 (4 tokens), seq 1 [0.8, 1, 1.1] sum 2.9 (3)
        ("token_mean", (-3.88 + 2.9) / 7),  # -0.14
        ("seq_mean_token_mean", (-3.88 / 4 + 2.9 / 3) / 2),  # (-0.97 + 0.966667) / 2
        ("seq_mean_token_sum_norm", (-3.88 / 4 + 2.9 / 4) / 2),  # length_norm 4: -0.1225
    ],
)
def test_policy_loss_aggregations_by_hand(agg, expected):
    mask = M8.clone()
    mask[1, 3] = False
    loss, s = policy_loss(LP, OLD_LP, ADV, mask, clip_high=0.28, agg=agg, length_norm=4)
    close(loss, expected)
    close(s["clip_frac"], 2 / 7)


def test_gradient_flows_through_logp_only_and_padding_nan_does_not_leak():
    logp = LP.clone()
    old, ref = OLD_LP.clone(), LP + LN(0.5)
    logp[1, 3] = old[1, 3] = ref[1, 3] = NAN  # padding garbage
    mask = M8.clone()
    mask[1, 3] = False
    logp.requires_grad_(True)
    old.requires_grad_(True)
    ref.requires_grad_(True)
    adv = ADV.clone().requires_grad_(True)
    w = torch.ones(2, 4, requires_grad=True)
    loss, s = policy_loss(logp, old, adv, mask, is_weights=w, ref_logp=ref, kl_coef=0.1)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logp.grad).all()
    assert logp.grad[1, 3] == 0.0
    assert old.grad is None and ref.grad is None and adv.grad is None and w.grad is None
    assert all(type(v) is float and math.isfinite(v) for v in s.values())


def test_low_precision_inputs_compute_in_float32():
    loss, _ = policy_loss(LP.bfloat16(), OLD_LP.bfloat16(), ADV, M8, clip_high=0.28)
    assert loss.dtype == torch.float32
    close(loss, 0.065, tol=2e-2)


def test_policy_loss_argument_checks():
    with pytest.raises(ValueError, match=r"advantages must be \[N\]"):
        policy_loss(LP, OLD_LP, torch.ones(3), M8)
    with pytest.raises(ValueError, match="shape mismatch"):
        policy_loss(LP, OLD_LP[:, :3], ADV, M8)
    with pytest.raises(ValueError, match="clip_low"):
        policy_loss(LP, OLD_LP, ADV, M8, clip_low=1.0)
    with pytest.raises(ValueError, match="kl_coef"):
        policy_loss(LP, OLD_LP, ADV, M8, kl_coef=-1.0, ref_logp=LP)


# --------------------------------------------------------------------------------------
# micro-batching: summed micro-batch gradients == full-batch gradient
# --------------------------------------------------------------------------------------

N_SEQ, T_MAX, D, V = 7, 6, 5, 11


def _toy_batch(seed: int = 0, dtype=torch.float64):
    """A tiny shared 'model' W [D, V] and fixed per-token features, so gradients from
    different micro-batches accumulate into one parameter, as in training."""
    g = torch.Generator().manual_seed(seed)
    feats = torch.randn(N_SEQ, T_MAX, D, generator=g, dtype=dtype)  # [N, T, D]
    tokens = torch.randint(0, V, (N_SEQ, T_MAX), generator=g)  # [N, T]
    lengths = torch.tensor([1, 6, 3, 2, 5, 4, 6])  # varied completion lengths
    mask = torch.arange(T_MAX)[None, :] < lengths[:, None]  # [N, T]
    W = torch.randn(D, V, generator=g, dtype=dtype)  # [D, V]
    with torch.no_grad():
        base = _logp(W, feats, tokens)  # [N, T]
    old = base + 0.3 * torch.randn(N_SEQ, T_MAX, generator=g, dtype=dtype)  # ratios off 1: some clip
    rollout = old + 0.4 * torch.randn(N_SEQ, T_MAX, generator=g, dtype=dtype)
    ref = base + 0.2 * torch.randn(N_SEQ, T_MAX, generator=g, dtype=dtype)
    adv = torch.randn(N_SEQ, generator=g, dtype=dtype)  # [N]
    return W, feats, tokens, mask, old, rollout, ref, adv


def _logp(W, feats, tokens):
    logits = feats @ W  # [N, T, D] @ [D, V] -> [N, T, V]
    return torch.log_softmax(logits, dim=-1).gather(-1, tokens[..., None]).squeeze(-1)  # [N, T]


def _loss(W, feats, tokens, mask, old, ref, adv, weights, agg, denom):
    loss, _ = policy_loss(_logp(W, feats, tokens), old, adv, mask, clip_low=0.2, clip_high=0.28,
                          is_weights=weights, ref_logp=ref, kl_coef=0.05, agg=agg, denom=denom,
                          length_norm=T_MAX)
    return loss


def _grads_full_and_micro(agg, splits, level="token", dtype=torch.float64, use_full_denom=True):
    W0, feats, tokens, mask, old, rollout, ref, adv = _toy_batch(dtype=dtype)
    weights, _ = pair(importance_weights(old, rollout, mask, level=level))  # [N, T], once per step

    W = W0.clone().requires_grad_(True)
    full = _loss(W, feats, tokens, mask, old, ref, adv, weights, agg, denom=None)
    full.backward()
    full_grad = W.grad.clone()

    W = W0.clone().requires_grad_(True)
    denom = aggregate_denominator(mask, agg) if use_full_denom else None
    total, start = 0.0, 0
    for size in splits:
        sl = slice(start, start + size)
        t = int(mask[sl].sum(dim=1).max())  # trim this micro-batch's padding: [n, T] -> [n, t]
        loss = _loss(W, feats[sl, :t], tokens[sl, :t], mask[sl, :t], old[sl, :t], ref[sl, :t],
                     adv[sl], weights[sl, :t], agg, denom)
        loss.backward()  # gradients accumulate in W.grad
        total += loss.item()
        start += size
    assert start == N_SEQ
    return full.item(), full_grad, total, W.grad


@pytest.mark.parametrize("agg", sorted(AGGREGATIONS))
@pytest.mark.parametrize("splits", [(7,), (1, 2, 4), (1,) * 7])
def test_micro_batches_with_the_full_denominator_give_the_full_batch_gradient(agg, splits):
    full, full_grad, total, micro_grad = _grads_full_and_micro(agg, splits)
    assert abs(full - total) < 1e-9
    assert full_grad.abs().max() > 1e-3  # the check is not vacuous
    assert torch.allclose(micro_grad, full_grad, atol=1e-6, rtol=0)


@pytest.mark.parametrize("agg", sorted(AGGREGATIONS))
def test_micro_batching_holds_in_float32_and_at_sequence_level(agg):
    _, full_grad, _, micro_grad = _grads_full_and_micro(agg, (2, 2, 3), level="sequence", dtype=torch.float32)
    assert torch.allclose(micro_grad, full_grad, atol=1e-6, rtol=0)


def test_micro_batches_with_their_own_denominator_do_not_match():
    # the property above is not automatic: per-micro-batch token means weigh tokens unequally
    _, full_grad, _, micro_grad = _grads_full_and_micro("token_mean", (3, 4), use_full_denom=False)
    assert not torch.allclose(micro_grad, full_grad, atol=1e-3)


@settings(max_examples=8, deadline=None)
@given(st.sets(st.integers(1, N_SEQ - 1)), st.sampled_from(sorted(AGGREGATIONS)))
def test_micro_batching_for_any_split(cuts, agg):
    bounds = [0, *sorted(cuts), N_SEQ]
    splits = tuple(b - a for a, b in zip(bounds, bounds[1:]))  # micro-batch sizes, sum N
    _, full_grad, _, micro_grad = _grads_full_and_micro(agg, splits)
    assert torch.allclose(micro_grad, full_grad, atol=1e-6, rtol=0)


# --------------------------------------------------------------------------------------
# the grpo.* config choices these functions back
# --------------------------------------------------------------------------------------


def test_k1_as_a_loss_term_is_a_config_error_that_says_why():
    from vlcohort.config import load_config
    from vlcohort.typed_yaml import ConfigError

    with pytest.raises(ConfigError, match=r"grpo\.kl_kind=k1 .* no KL gradient.*k2.*kl_in_reward=true"):
        load_config(None, ["grpo.kl_kind=k1", "grpo.kl_coef=0.01"])
    # fine: a reward-side penalty, a logged estimate (kl_coef 0), or k2 / low_var_kl
    load_config(None, ["grpo.kl_kind=k1", "grpo.kl_coef=0.01", "grpo.kl_in_reward=true"])
    load_config(None, ["grpo.kl_kind=k1"])
    for kind in ("k2", "low_var_kl"):
        assert load_config(None, [f"grpo.kl_kind={kind}", "grpo.kl_coef=0.01"]).grpo.kl_kind == kind


@pytest.mark.parametrize("overrides, match", [
    (["grpo.clip_ratio_c=0.5"], r"grpo\.clip_ratio_c: 0 \(no dual clip\) or > 1"),
    (["grpo.clip_ratio_c=3", "grpo.policy_loss=cispo"], r"grpo\.clip_ratio_c: .*cispo"),
    (["grpo.policy_loss=trpo"], r"grpo\.policy_loss: 'trpo' is not one of"),
    (["grpo.is_mode=rejection", "grpo.is_low=1.5"], r"grpo\.is_low must be in \[0, 1\)"),
    (["grpo.is_min=1.5"], r"grpo\.is_min: the truncation floor must be in \[0, 1\]"),
    (['grpo.is_mode="off"', "grpo.is_batch_norm=true"], r"grpo\.is_batch_norm=true .* no weights"),
    (["grpo.is_level=product"], r"grpo\.is_level: 'product' is not one of"),
])
def test_bad_loss_and_is_choices_name_the_key(overrides, match):
    from vlcohort.config import load_config
    from vlcohort.typed_yaml import ConfigError

    with pytest.raises(ConfigError, match=match):
        load_config(None, overrides)


def test_new_choices_load_and_the_defaults_keep_the_old_behaviour():
    from vlcohort.config import load_config

    g = load_config(None, []).grpo
    assert (g.policy_loss, g.clip_ratio_c, g.kl_in_reward, g.is_min, g.is_batch_norm) == ("ppo", 0.0, False, 0.0, False)
    assert (g.is_level, g.is_mode, g.adv_scale, g.kl_kind) == ("token", "truncate", "group", "k3")
    g = load_config(None, ["grpo.policy_loss=gspo", "grpo.clip_low=3e-4", "grpo.clip_high=4e-4",
                           "grpo.clip_ratio_c=3", "grpo.adv_scale=batch", "grpo.is_level=geo_mean",
                           "grpo.is_mode=rejection", "grpo.is_batch_norm=true"]).grpo
    assert (g.policy_loss, g.is_mode, g.is_level) == ("gspo", "rejection", "geo_mean")
    for mode in ("mask", "token_mask"):  # mask: the old name, still accepted
        assert load_config(None, [f"grpo.is_mode={mode}"]).grpo.is_mode == mode
