"""GRPO as pure tensor functions: advantages, IS correction, KL, aggregation, policy loss.

Nothing here knows about models, configs or files: tensors go in, tensors (and plain-float
stats) come out, so every formula can be checked by hand in ``tests/test_grpo.py`` and
driven by the trainer and by ``vlcohort simulate`` alike. Each choice a config can make is a
name in a small registry dict (``ADVANTAGE_SCALES``, ``IS_LEVELS``, ``IS_MODES``,
``KL_ESTIMATORS``, ``AGGREGATIONS``, ``POLICY_LOSSES``), each entry with its paper.

Shape letters (``docs/design.md``, rule 5): B prompts, G rollouts per prompt, N sequences in a
(micro-)batch (N = B x G for one agent's step before micro-batching), T completion tokens
(padded; ``mask`` marks the real ones).

Log-probability names, in the order they are produced in a step:

- ``rollout_logp``: what the sampler drew with (after temperature), returned by the engine;
- ``old_logp``: the policy's log-probs of the same tokens before this step's update;
- ``logp``: the policy's log-probs now, with gradient (changes over ``ppo_epochs``);
- ``ref_logp``: the frozen reference model's, for the KL term.

Where this departs from a paper or leaves a choice open, the docstring says so.

>>> import torch
>>> group_advantages(torch.tensor([[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]]))
tensor([[ 0.8660, -0.8660,  0.8660, -0.8660],
        [ 0.0000,  0.0000,  0.0000,  0.0000]])
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch
from torch import Tensor

__all__ = [
    "ADVANTAGE_SCALES",
    "AGGREGATIONS",
    "IS_LEVELS",
    "IS_MODES",
    "KL_ESTIMATORS",
    "POLICY_LOSSES",
    "Aggregation",
    "ISWeights",
    "Surrogate",
    "aggregate",
    "aggregate_denominator",
    "group_denominators",
    "group_advantages",
    "importance_weights",
    "kl_penalty",
    "micro_batch_denominators",
    "policy_loss",
    "reinforce_pp_advantages",
    "RETURN_NORMALISERS",
    "varied_groups",
]

#: Log-ratios are clamped to [-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP] before ``exp`` so that two
#: policies that have drifted far apart give a huge but finite ratio, never inf (exp(20) is
#: about 4.9e8). verl clamps at the same value.
LOG_RATIO_CLAMP = 20.0


# --------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------


def _as_float(x: Tensor) -> Tensor:
    """Compute in at least float32: bf16/fp16 log-probs lose too much in exp and sums."""
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def _check_shapes(**tensors: Tensor) -> None:
    """All named tensors must have one shape; the error names them so the caller can fix it."""
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{k}={v}" for k, v in shapes.items())
        raise ValueError(f"shape mismatch, these must all be [N, T]: {listed}")


def _lookup(registry: Mapping[str, object], kind: str, name: str) -> object:
    """Registry lookup whose error lists what is allowed (the config passes names through)."""
    try:
        return registry[name]
    except KeyError:
        allowed = ", ".join(sorted(registry))
        raise ValueError(f"unknown {kind} {name!r}; allowed: {allowed}") from None


def _masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over ``mask``; 0 when the mask is empty (a metric, never a NaN)."""
    return (x * mask).sum() / mask.sum().clamp(min=1)


def _float(x: Tensor) -> float:
    return float(x.detach())


# --------------------------------------------------------------------------------------
# advantages
# --------------------------------------------------------------------------------------


def _scale_by_group_std(centered: Tensor, std: Tensor, batch_std: Tensor, eps: float) -> Tensor:
    """GRPO (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300): (r - mean) / (std + eps).

    ``std`` is the unbiased (n - 1) estimator, as verl's ``compute_grpo_outcome_advantage``
    (``torch.std``) and the GRPO paper's code use; with G = 2 a 1/0 group gives +-0.7071.
    """
    return centered / (std + eps)


def _no_scale(centered: Tensor, std: Tensor, batch_std: Tensor, eps: float) -> Tensor:
    """Dr.GRPO (Liu et al. 2025, arXiv 2503.20783): r - mean, no division by the std.

    Dividing by the std up-weights groups that are nearly all right or all wrong (a
    question-difficulty bias); leaving it out keeps the reward's own scale.
    """
    return centered


def _scale_by_batch_std(centered: Tensor, std: Tensor, batch_std: Tensor, eps: float) -> Tensor:
    """Group mean, batch std: (r - group mean) / (std of the batch's rewards + eps), the
    batch being the groups the policy is updated on (``group_advantages``'s ``batch``).

    TRL's ``scale_rewards="batch"`` (``rewards.std()`` over the whole batch, unbiased), the
    "group mean, batch std" of Liu et al. 2025 (Tricks or Traps, arXiv 2508.08221): every
    group keeps its own baseline, but one scale for the batch, so a nearly-constant group
    is not blown up to unit variance. Only valid rollouts enter the batch std.
    """
    return centered / (batch_std + eps)


#: ``grpo.adv_scale`` names -> fn(centered [B, G], group std [B, 1], batch std [] (0-dim),
#: eps) -> [B, G].
ADVANTAGE_SCALES: dict[str, Callable[[Tensor, Tensor, Tensor, float], Tensor]] = {
    "group": _scale_by_group_std,
    "none": _no_scale,
    "batch": _scale_by_batch_std,
}


def group_advantages(
    rewards: Tensor,
    scale: str = "group",
    eps: float = 1e-6,
    valid: Tensor | None = None,
    batch: Tensor | None = None,
) -> Tensor:
    """Outcome advantages normalised within each prompt's group of G rollouts.

    rewards: [B, G] one scalar reward per rollout (bool/int rewards are cast to float).
    valid:   optional bool [B] (a whole group; e.g. False where the teacher abstained) or
             [B, G] (per rollout). Statistics use only valid rollouts and invalid ones get
             exactly 0: an abstaining teacher must give no learning signal, not a
             made-up one.
    batch:   optional bool [B]: the groups whose valid rollouts make up the batch std of
             ``scale="batch"`` (default: all B). The std is the spread of the batch the
             policy is updated on, so rows that are only carried along (another agent's
             prompts, groups dynamic sampling drops) stay out of it; the per-group
             centring is unchanged.
    returns: [B, G] advantages, no gradient to anything upstream (rewards are data).

    A group whose valid rewards are all equal (all right, all wrong, or a single valid
    rollout) gets exactly 0, not (r - mean) / eps of rounding noise: it carries no
    preference between its rollouts. ``scale``: a name in ``ADVANTAGE_SCALES``.
    """
    scale_fn = _lookup(ADVANTAGE_SCALES, "advantage scale", scale)
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [B, G] (prompts x rollouts), got {tuple(rewards.shape)}")
    B, G = rewards.shape
    if scale == "group" and G < 2:
        raise ValueError(
            f"group normalisation needs G >= 2 rollouts per prompt (got G={G}): the std of one "
            "sample is undefined; use scale='none' or more rollouts per prompt"
        )
    r = _as_float(rewards.detach())  # [B, G]

    if valid is None:
        v = torch.ones_like(r, dtype=torch.bool)  # [B, G]
    else:
        v = valid.to(device=r.device, dtype=torch.bool)
        if v.shape == (B,):
            v = v[:, None].expand(B, G)  # [B] -> [B, G]
        elif v.shape != (B, G):
            raise ValueError(f"valid must be [B]={B} or [B, G]={(B, G)}, got {tuple(v.shape)}")
    if not torch.isfinite(r[v]).all():
        raise ValueError("rewards contain NaN or inf in a valid rollout; a reward source must "
                         "return finite numbers (mark a rollout invalid to give it no signal)")

    r = torch.where(v, r, torch.zeros_like(r))  # [B, G]; an invalid NaN must not leak via 0 * NaN
    vf = v.to(r.dtype)  # [B, G]
    n = vf.sum(dim=1, keepdim=True)  # [B, 1] valid rollouts per group
    mean = (r * vf).sum(dim=1, keepdim=True) / n.clamp(min=1)  # [B, 1]
    centered = (r - mean) * vf  # [B, G]
    var = (centered**2).sum(dim=1, keepdim=True) / (n - 1).clamp(min=1)  # [B, 1] unbiased
    if batch is None:
        bf = vf  # [B, G]
    else:
        if batch.shape != (B,):
            raise ValueError(f"batch must be [B]={B} (one flag per group), got {tuple(batch.shape)}")
        bf = vf * batch.to(device=r.device, dtype=r.dtype)[:, None]  # [B, G]
    n_all = bf.sum()  # valid rollouts in the batch
    batch_mean = (r * bf).sum() / n_all.clamp(min=1)  # []
    batch_var = (((r - batch_mean) * bf) ** 2).sum() / (n_all - 1).clamp(min=1)  # [] unbiased
    adv = scale_fn(centered, var.sqrt(), batch_var.sqrt(), eps)  # [B, G]

    # a constant group: max == min over its valid rewards (exact, unlike a float mean)
    hi = torch.where(v, r, torch.full_like(r, -math.inf)).amax(dim=1, keepdim=True)  # [B, 1]
    lo = torch.where(v, r, torch.full_like(r, math.inf)).amin(dim=1, keepdim=True)  # [B, 1]
    informative = (hi > lo) & v  # [B, G]; an all-invalid group has hi=-inf < lo=inf
    return torch.where(informative, adv, torch.zeros_like(adv))


def varied_groups(values: Tensor, valid: Tensor | None = None) -> Tensor:
    """bool [B]: the groups whose G values are not all equal, DAPO's dynamic-sampling
    filter (Yu et al., arXiv 2503.14476, eq. 11: keep 0 < |correct| < G; verl's
    ``filter_groups`` keeps a group when the std of its metric is > 0).

    values: [B, G] one number per rollout (correctness, a reward; bool is cast to float).
    valid:  optional bool [B]; a group without a reward (False) is never varied.

    Exact comparison (max > min), not a std against a tolerance: 0.1 + 0.2 and 0.3 differ.

    >>> varied_groups(torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0]]))
    tensor([ True, False, False])
    """
    if values.dim() != 2:
        raise ValueError(f"values must be [B, G] (prompts x rollouts), got {tuple(values.shape)}")
    v = _as_float(values.detach())
    varied = v.amax(dim=1) > v.amin(dim=1)  # [B]
    if valid is not None:
        varied &= valid.to(device=v.device, dtype=torch.bool)
    return varied


# --------------------------------------------------------------------------------------
# importance sampling between the rollout engine and the policy
# --------------------------------------------------------------------------------------


def _token_level(log_ratio: Tensor, valid: Tensor) -> Tensor:
    """One weight per token: exp(old_logp - rollout_logp) (Yao et al. 2025, TIS; TRL's
    ``token_*`` modes, verl's ``rollout_is="token"``). Biased, low variance."""
    return log_ratio


def _sequence_level(log_ratio: Tensor, valid: Tensor) -> Tensor:
    """One weight per completion: exp of the SUMMED token log-ratio, i.e. the product of
    the token ratios, the true importance weight of the whole completion; broadcast to
    its tokens.

    TRL's ``sequence_truncate`` / ``sequence_mask`` (``per_token_logps_diff.sum(-1)``) and
    verl's ``rollout_is="sequence"`` (``masked_sum`` of the log-ratio). Unbiased, and its
    variance grows with length: a -0.01 bias per token over 100 tokens gives 0.37, which
    the geometric mean (``geo_mean``) would report as 0.99. The caller clamps the sum to
    +-LOG_RATIO_CLAMP before ``exp`` (verl's ``SAFETY_BOUND``). Non-finite tokens are left
    out of the sum.
    """
    seq = (log_ratio * valid).sum(dim=1, keepdim=True)  # [N, T] -> [N, 1]
    return seq.expand_as(log_ratio)  # [N, 1] -> [N, T]


def _geo_mean_level(log_ratio: Tensor, valid: Tensor) -> Tensor:
    """One weight per completion: exp of the MEAN token log-ratio (the geometric mean of
    the token ratios), broadcast to its tokens.

    The length-normalised ratio of GSPO (Zheng et al. 2025, arXiv 2507.18071), here used
    as a rollout correction: it does not explode or vanish with length, and for the same
    reason it nearly removes the correction on long completions. Non-finite tokens are
    left out of the mean.
    """
    seq = (log_ratio * valid).sum(dim=1, keepdim=True) / valid.sum(dim=1, keepdim=True).clamp(min=1)
    return seq.expand_as(log_ratio)  # [N, 1] -> [N, T]


#: ``grpo.is_level`` names -> fn(log_ratio [N, T], valid [N, T] float) -> per-token
#: log-weight [N, T] (the caller clamps it to +-LOG_RATIO_CLAMP and exponentiates).
IS_LEVELS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "token": _token_level,
    "sequence": _sequence_level,
    "geo_mean": _geo_mean_level,
}


@dataclass(frozen=True)
class ISBounds:
    """The bounds an IS mode reads: ``floor`` / ``cap`` (truncate), [``low``, ``high``]
    (token_mask, rejection)."""

    floor: float
    cap: float
    low: float
    high: float


def _truncate(w: Tensor, b: ISBounds) -> tuple[Tensor, Tensor, Tensor]:
    """TIS, truncated IS (Yao et al. 2025, "Your efficient RL framework secretly brings you
    off-policy RL training"): w = clamp(w, floor, cap), TRL's ``*_truncate`` with its
    ``clip_min`` as the floor (0: no lower bound). Bounds the variance a rare token adds.

    Returns (weights [N, T], hit [N, T] bool: truncated at either bound, dropped [N, T]
    bool: none).
    """
    hit = (w > b.cap) | (w < b.floor)
    return torch.clamp(w, min=b.floor, max=b.cap), hit, torch.zeros_like(hit)


def _token_mask(w: Tensor, b: ISBounds) -> tuple[Tensor, Tensor, Tensor]:
    """MIS, masked IS, TRL's ``token_mask`` / ``sequence_mask`` (IcePop-style two-sided
    bound): tokens whose w lies outside [low, high] get weight 0, the rest keep w. The
    masked tokens STAY in the loss's denominator: they dilute the batch like any token
    with zero advantage.

    Returns (weights [N, T], hit [N, T] bool: the tokens masked, dropped: none).
    """
    hit = (w < b.low) | (w > b.high)
    return torch.where(hit, torch.zeros_like(w), w), hit, torch.zeros_like(hit)


def _rejection(w: Tensor, b: ISBounds) -> tuple[Tensor, Tensor, Tensor]:
    """Rejection sampling, verl's rollout correction (``rollout_rs``, Li et al. 2025,
    "When speed kills stability", https://richardli.xyz/rl-collapse): tokens (at level
    ``sequence`` / ``geo_mean``: whole completions) whose w lies outside [low, high] are
    DROPPED from the loss, i.e. removed from the response mask, so they leave the loss's
    denominator too; the kept ones keep w.

    Returns (weights [N, T], hit [N, T] bool: rejected, dropped [N, T] bool: the same).
    """
    hit = (w < b.low) | (w > b.high)
    return torch.where(hit, torch.zeros_like(w), w), hit, hit


#: ``grpo.is_mode`` names -> fn(w [N, T], bounds) -> (weights [N, T], hit [N, T] bool,
#: dropped [N, T] bool: tokens to take out of the loss and its denominator). ``mask`` is
#: a deprecated alias of ``token_mask``, accepted so that configs using it still load.
IS_MODES: dict[str, Callable[[Tensor, ISBounds], tuple[Tensor, Tensor, Tensor]]] = {
    "truncate": _truncate,
    "token_mask": _token_mask,
    "mask": _token_mask,
    "rejection": _rejection,
}


@dataclass(frozen=True, eq=False)  # holds tensors: no element-wise ``==`` by accident
class ISWeights:
    """What :func:`importance_weights` returns.

    weights: [N, T] detached, 0 on padding, on non-finite tokens and on rejected ones;
    keep:    [N, T] bool, the tokens of ``mask`` that stay in the loss: all of them except
             those mode ``rejection`` dropped. A caller that drops tokens must take them
             out of the loss mask AND of the aggregation's denominator
             (``aggregate_denominator(mask & keep)``);
    stats:   plain floats (see :func:`importance_weights`).
    """

    weights: Tensor
    keep: Tensor
    stats: dict[str, float]


def importance_weights(
    old_logp: Tensor,
    rollout_logp: Tensor,
    mask: Tensor,
    level: str = "token",
    mode: str = "truncate",
    cap: float = 2.0,
    low: float = 0.5,
    high: float = 2.0,
    floor: float = 0.0,
    batch_norm: bool = False,
) -> ISWeights:
    """Per-token weights correcting for sampling with the engine instead of the policy.

    The engine (vLLM, or HF generate in another precision) samples from a distribution
    that is close to, but not, the policy whose gradient we take; the surrogate assumes
    samples from ``old_logp``. w = exp(old_logp - rollout_logp) reweights each token.

    old_logp, rollout_logp: [N, T] per-token log-probs of the sampled tokens.
    mask:    [N, T] bool (or 0/1) completion tokens (padding False).
    level:   name in ``IS_LEVELS`` (``token`` | ``sequence``: product | ``geo_mean``).
    mode:    name in ``IS_MODES`` (``truncate`` to [``floor``, ``cap``] | ``token_mask``
             (alias ``mask``) or ``rejection`` with [``low``, ``high``]).
    batch_norm: divide the applied weights by their mean over the tokens that stay in
             the loss (verl's ``rollout_is_batch_normalize``: mean weight 1 over the batch,
             so the correction reweights tokens without rescaling the whole gradient).
             Pass the FULL batch, not a micro-batch, or each micro-batch gets its own mean.
    returns: :class:`ISWeights` (weights [N, T], keep [N, T], stats); unpacks as
             ``weights, stats``.

    Order: raw weight (level, log-space clamp) -> mode (truncate / mask / reject) ->
    batch normalisation. A NaN or inf in either log-prob (seen from some engines) gives
    that token weight 0 and is counted, so one bad token cannot poison the loss. Stats are
    plain floats, 0 when there is nothing to measure. Means, min and max are over
    completion tokens with finite log-probs; shares are of all completion tokens:

    - ``is/mean|min|max``: the raw weight, BEFORE truncation or masking, so they show
      the actual mismatch (``max`` can exceed ``cap``; it is at most exp(20), the log-ratio
      clamp). At level ``sequence`` / ``geo_mean`` each token carries its sequence's
      weight, so these are token-weighted;
    - ``is/applied_mean``: the weight actually applied (after truncation, masking,
      rejection and batch normalisation; rejected tokens count as 0);
    - ``is/frac_truncated``: share truncated at ``cap`` or ``floor`` (mode
      ``truncate``; 0 in the other modes);
    - ``is/frac_masked``: share of completion tokens given weight 0 for any reason
      (outside [low, high] in modes ``token_mask`` / ``rejection``, or a non-finite
      log-prob);
    - ``is/frac_rejected`` (mode ``rejection`` only): share dropped from the loss;
    - ``is/nonfinite_tokens``: count of completion tokens with a NaN/inf log-prob;
    - ``is/rollout_k3``: mean k3 estimate of KL(rollout || policy), exp(l) - l - 1 with
      l = old_logp - rollout_logp (samples come from the rollout distribution).
    """
    level_fn = _lookup(IS_LEVELS, "IS level", level)
    mode_fn = _lookup(IS_MODES, "IS mode", mode)
    if cap <= 0:
        raise ValueError(f"IS cap must be > 0, got {cap}")
    if not 0 <= floor <= cap:
        raise ValueError(f"IS truncation needs 0 <= floor <= cap, got floor={floor}, cap={cap}")
    if not 0 <= low < high:
        raise ValueError(f"IS mask bounds need 0 <= low < high, got low={low}, high={high}")
    _check_shapes(old_logp=old_logp, rollout_logp=rollout_logp, mask=mask)

    with torch.no_grad():
        old = _as_float(old_logp.detach())  # [N, T]
        roll = _as_float(rollout_logp.detach()).to(old.dtype)  # [N, T]
        m = mask.to(device=old.device, dtype=torch.bool)  # [N, T]
        finite = torch.isfinite(old) & torch.isfinite(roll)  # [N, T]
        ok = m & finite  # [N, T] tokens that get a weight
        okf = ok.to(old.dtype)  # [N, T]

        diff = torch.where(ok, old - roll, torch.zeros_like(old))  # [N, T], 0 where not ok
        token_lr = diff.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # [N, T]
        # clamped again after the level: a completion's SUMMED log-ratio can pass 20
        log_w = level_fn(token_lr, okf).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # [N, T]
        raw = torch.exp(log_w)  # [N, T]
        applied, hit, dropped = mode_fn(raw, ISBounds(floor, cap, low, high))  # [N, T] x 3
        keep = m & ~(dropped & ok)  # [N, T]; a non-finite token is not "rejected"
        weights = torch.where(ok & keep, applied, torch.zeros_like(applied))  # [N, T]
        if batch_norm:
            kept = (ok & keep).to(old.dtype)  # [N, T] the tokens whose weights the loss uses
            mean = _masked_mean(weights, kept)
            weights = weights / mean if mean > 0 else weights  # [N, T]; all-zero stays zero

        n_tokens = m.sum().clamp(min=1)
        n_ok = ok.sum()
        big = torch.finfo(raw.dtype).max
        k3 = torch.exp(token_lr) - token_lr - 1.0  # [N, T], >= 0
        stats = {
            "is/mean": _float(_masked_mean(raw, okf)),
            "is/min": _float(torch.where(ok, raw, big).amin()) if n_ok else 0.0,
            "is/max": _float(torch.where(ok, raw, -big).amax()) if n_ok else 0.0,
            "is/applied_mean": _float(_masked_mean(weights, okf)),
            "is/frac_truncated": _float((hit & ok).sum() / n_tokens) if mode == "truncate" else 0.0,
            "is/frac_masked": _float(((m & (weights == 0)).sum()) / n_tokens),
            "is/nonfinite_tokens": float((m & ~finite).sum()),
            "is/rollout_k3": _float(_masked_mean(k3, okf)),
        }
        if mode == "rejection":
            stats["is/frac_rejected"] = _float((m & ~keep).sum() / n_tokens)
    return ISWeights(weights, keep, stats)


# --------------------------------------------------------------------------------------
# KL to the reference
# --------------------------------------------------------------------------------------


def _kl_k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k1 = logp - ref_logp (Schulman 2020, "Approximating KL divergence"): unbiased for
    the VALUE of KL(policy || ref), but high variance and negative on some tokens.

    As a loss term it gives NO KL gradient: its gradient is grad logp, whose expectation
    under the policy is sum_x grad pi(x) = 0 (checked exactly in tests/test_grpo.py). Use
    it as a logged estimate or as a reward-side penalty (``grpo.kl_in_reward``, where the
    policy-gradient term carries it), never as ``kl_coef`` x k1 in the loss (the config
    refuses that; use ``k2``)."""
    return logp - ref_logp


def _kl_k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k2 = 0.5 (logp - ref_logp)^2 (Schulman 2020; verl's ``kl_penalty`` "mse"): >= 0,
    biased as a value, low variance.

    As a loss term its expected gradient is EXACTLY grad KL(policy || ref): grad k2 =
    (logp - ref) grad logp, and E_pi[(log pi - log ref) grad log pi] = grad KL(pi || ref)
    (the E_pi[grad log pi] part is 0). The on-policy-correct choice for a KL loss."""
    return 0.5 * (logp - ref_logp) ** 2


def _kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 = exp(ref - logp) - (ref - logp) - 1 (Schulman 2020, "Approximating KL
    divergence", http://joschu.net/blog/kl-approx.html): unbiased for the value of
    KL(policy || ref), low variance, >= 0. The GRPO paper's KL term and verl's.

    As a loss term its expected gradient is that of KL(ref || policy), not of
    KL(policy || ref): grad k3 = (1 - ref / pi) grad log pi, whose expectation under pi
    is -sum_x ref(x) grad log pi(x) = grad KL(ref || pi). Both pull the policy towards
    the reference; they differ away from it. The log-ratio is clamped to +-20 so exp stays
    finite; ``expm1(x) - x`` instead of ``exp(x) - x - 1`` keeps it >= 0 in float32 near
    x = 0 (``exp`` rounds 1 + 6e-8 to 1 and gave -6e-8, found by hypothesis)."""
    log_ratio = (ref_logp - logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.expm1(log_ratio) - log_ratio


def _kl_low_var(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 clamped to [-10, 10], verl's ``kl_penalty`` "low_var_kl" (core_algos.py): the
    gradient of k3 (KL(ref || policy)'s direction) where k3 <= 10, none on the rare tokens
    where the reference finds the sampled token e^10 times likelier than the policy does,
    so one such token cannot dominate the loss. (k3 >= 0, so only the upper bound acts.)"""
    return _kl_k3(logp, ref_logp).clamp(-10.0, 10.0)


#: ``grpo.kl_kind`` names -> fn(logp [N, T], ref_logp [N, T]) -> per-token estimate [N, T].
#: The gradient each gives as a loss term is in its docstring: only ``k2`` follows
#: KL(policy || ref); ``k3`` / ``low_var_kl`` follow KL(ref || policy); ``k1`` none.
KL_ESTIMATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "k1": _kl_k1,
    "k2": _kl_k2,
    "k3": _kl_k3,
    "low_var_kl": _kl_low_var,
}


def kl_penalty(logp: Tensor, ref_logp: Tensor, kind: str = "k3") -> Tensor:
    """Per-token estimate of KL(policy || reference) from tokens sampled by the policy.

    logp, ref_logp: [N, T]; returns [N, T] (gradient flows through ``logp``; padding
    positions are computed too, the caller masks them in ``aggregate``).
    kind: name in ``KL_ESTIMATORS`` (``k1`` | ``k2`` | ``k3`` | ``low_var_kl``).
    """
    fn = _lookup(KL_ESTIMATORS, "KL estimator", kind)
    _check_shapes(logp=logp, ref_logp=ref_logp)
    return fn(_as_float(logp), _as_float(ref_logp))


# --------------------------------------------------------------------------------------
# loss aggregation
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Aggregation:
    """A loss aggregation written as numerator / denominator.

    Every mode is "a sum over sequences or tokens, divided by a count of them". Writing it
    so makes micro-batching exact: the numerator is additive over any split of the batch,
    and a caller that divides every micro-batch's numerator by the FULL batch's
    denominator gets micro-batch losses (and gradients) that sum to the full-batch one.

    numerator:   fn(per_token [N, T], mask [N, T] float, length_norm) -> scalar
    denominator: fn(mask [N, T] float) -> scalar count (tokens or sequences)
    per_micro_batch: False: one denominator, the optimizer step's whole batch's, for all
                 its micro-batches (the loss does not depend on the split). True: each
                 micro-batch divides by its OWN count, and the step averages the K
                 micro-batch losses (TRL's ``bnpo``): the loss depends on the split.
                 :func:`micro_batch_denominators` gives either kind's per micro-batch.
    """

    numerator: Callable[[Tensor, Tensor, float | None], Tensor]
    denominator: Callable[[Tensor], Tensor]
    reference: str
    per_micro_batch: bool = False


def _sum_tokens(x: Tensor, m: Tensor, length_norm: float | None) -> Tensor:
    return (x * m).sum()


def _sum_seq_token_means(x: Tensor, m: Tensor, length_norm: float | None) -> Tensor:
    per_seq = (x * m).sum(dim=1) / m.sum(dim=1).clamp(min=1)  # [N, T] -> [N]
    return per_seq.sum()


def _sum_seq_token_sums_norm(x: Tensor, m: Tensor, length_norm: float | None) -> Tensor:
    if length_norm is None or length_norm <= 0:
        raise ValueError(
            "aggregation 'seq_mean_token_sum_norm' needs length_norm > 0, a constant such as "
            f"max_new_tokens (got {length_norm!r}); it must not depend on the batch"
        )
    return (x * m).sum() / length_norm


def _count_tokens(m: Tensor) -> Tensor:
    return m.sum()


def _count_rows(m: Tensor) -> Tensor:
    """Every sequence of the batch, empty or not: Dr.GRPO's constant N (TRL's
    ``per_token_loss.size(0)``), so masking a completion out (truncation, rejection) does not
    rescale the others' gradients."""
    return torch.tensor(float(m.shape[0]), dtype=m.dtype, device=m.device)


def _count_sequences(m: Tensor) -> Tensor:
    """Sequences with at least one completion token; an empty one has no loss to average."""
    return (m.sum(dim=1) > 0).to(m.dtype).sum()  # [N, T] -> [N] -> scalar


_TOKEN_MEAN = Aggregation(_sum_tokens, _count_tokens, "DAPO arXiv 2503.14476; TRL loss_type='dapo'")

#: ``loss_agg`` names. ``token_mean`` (alias ``dapo``): every valid token of the optimizer
#: step weighs the same, so long completions weigh more (DAPO's token-level loss, Yu et al.
#: 2025, arXiv 2503.14476; TRL's ``loss_type="dapo"``, whose normaliser is the step's
#: tokens over all accumulation steps and ranks, ``num_items_in_batch / num_processes``).
#: ``bnpo``: TRL's ``loss_type="bnpo"`` (``GRPOTrainer._compute_loss``, TRL 0.19-1.9): a
#: token mean over each MICRO-batch, clamp(tokens, min=1), divided by the step's number of
#: micro-batches K (TRL: ``current_gradient_accumulation_steps``; DDP's gradient average
#: gives the 1 / ranks), so the step averages the K micro-batch token means: a token of a
#: short micro-batch weighs more than one of a long micro-batch. Equal to ``token_mean``
#: with one micro-batch, or with micro-batches of equal token counts.
#: ``seq_mean_token_mean``: every sequence weighs the same, its tokens averaged (the GRPO
#: paper, arXiv 2402.03300; biases toward long wrong answers, see Dr.GRPO).
#: ``seq_mean_token_sum_norm``: token sums divided by a constant length and by the constant
#: number of sequences N (Dr.GRPO, Liu et al. 2025, arXiv 2503.20783): no length bias, and
#: no rescaling when completions are masked out.
AGGREGATIONS: dict[str, Aggregation] = {
    "token_mean": _TOKEN_MEAN,
    "dapo": _TOKEN_MEAN,
    "bnpo": Aggregation(_sum_tokens, _count_tokens, "TRL loss_type='bnpo' (GRPOTrainer._compute_loss)",
                        per_micro_batch=True),
    "seq_mean_token_mean": Aggregation(_sum_seq_token_means, _count_sequences, "GRPO arXiv 2402.03300"),
    "seq_mean_token_sum_norm": Aggregation(_sum_seq_token_sums_norm, _count_rows, "Dr.GRPO arXiv 2503.20783"),
}


def aggregate_denominator(mask: Tensor, mode: str) -> Tensor:
    """The normaliser of ``mode`` for a (full) batch: valid tokens or non-empty sequences.

    mask: [N, T]; returns a 0-dim float tensor, at least 1 (an empty batch gives loss 0,
    not NaN). Compute it once on the full batch and pass it as ``denom`` to every
    micro-batch. Under data parallelism, all-reduce (sum) it across ranks first and scale
    the loss by the world size, because DDP averages gradients. For a ``per_micro_batch``
    mode (``bnpo``) this is the normaliser of ``mask`` taken as ONE micro-batch; a step of
    several takes :func:`micro_batch_denominators`.
    """
    agg = _lookup(AGGREGATIONS, "loss aggregation", mode)
    m = mask.to(torch.float32)  # [N, T]
    return agg.denominator(m).clamp(min=1)


def micro_batch_denominators(masks: Sequence[Tensor], mode: str) -> Tensor:
    """[K] the ``denom`` of each of the K micro-batches of ONE optimizer step, whose losses
    are summed (their gradients accumulated) into the step's.

    masks: the K micro-batches' [n_k, T_k] masks, in order. A whole-step mode gives every
    micro-batch the step's denominator (the counts summed, clamp min 1: equal to
    :func:`aggregate_denominator` of the concatenated masks), so the losses sum to the
    full-batch loss; a ``per_micro_batch`` mode (``bnpo``) gives micro-batch k
    K x clamp(its own count, min=1), so the step's loss is the mean of the K micro-batch
    token means (TRL: ``(per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)``, then
    ``/ current_gradient_accumulation_steps``). An empty micro-batch still counts in K, as
    in TRL. Under data parallelism a whole-step denominator is summed across ranks (see
    :func:`aggregate_denominator`); a per-micro-batch one stays each rank's own, and DDP's
    gradient average over the R ranks supplies TRL's 1 / R.

    >>> m = [torch.ones(1, 3), torch.ones(1, 1)]
    >>> micro_batch_denominators(m, "token_mean"), micro_batch_denominators(m, "bnpo")
    (tensor([4., 4.]), tensor([6., 2.]))
    """
    agg = _lookup(AGGREGATIONS, "loss aggregation", mode)
    if not masks:
        raise ValueError("micro_batch_denominators needs at least one micro-batch mask")
    device = masks[0].device
    counts = torch.stack([agg.denominator(m.to(device=device, dtype=torch.float32)).reshape(())
                          for m in masks])  # [K]
    if agg.per_micro_batch:
        return counts.clamp(min=1) * len(masks)  # [K]
    return counts.sum().clamp(min=1).expand(len(masks)).clone()  # [K], one value


def group_denominators(masks: Sequence[Tensor], groups: Sequence[Tensor], mode: str,
                       n_groups: int | None = None,
                       normaliser: Callable[[Tensor], Tensor] | None = None) -> list[Tensor]:
    """Per-row normalisers [n_k] of each of the K micro-batches of ONE optimizer step, so
    the step's loss is the SUM over loss groups of ``mode``'s aggregation of each group's
    rows alone: ``sum_v agg(rows of group v)``.

    masks:  the K micro-batches' [n_k, T_k] masks, in order; groups: their rows' group ids
    [n_k] (ints in [0, n_groups)). A row of group v divides by what
    :func:`micro_batch_denominators` gives when the step's micro-batches are cut down to
    their rows of group v (a micro-batch without such rows not counted): the group's whole
    count for a whole-step mode, K_v x the micro-batch's own count of group v for a
    ``per_micro_batch`` mode (``bnpo``), K_v the micro-batches holding rows of group v.

    This is Co-rewarding-I's published loss (github.com/tmlr-group/Co-rewarding,
    Co-rewarding-I/verl/workers/actor/dp_actor.py, ``update_policy``): the original
    questions' and the rephrased questions' rollouts are split alike into micro-batches,
    micro-batch k of each taken together, and its loss is ``(agg(original_k) +
    agg(rephrased_k)) / gradient_accumulation`` with verl's token-mean ``agg_loss``:
    ``bnpo`` over each wording, summed. ``n_groups``: the groups there are (None: one
    more than the largest id here); under data parallelism every rank must name the same,
    as ``normaliser`` (applied to each group's whole-step count, in group order, even
    where this rank holds none of its rows) sums a count across ranks, as
    :func:`aggregate_denominator`'s is.

    >>> m = [torch.ones(2, 3), torch.ones(2, 1)]
    >>> g = [torch.tensor([0, 1]), torch.tensor([0, 1])]
    >>> group_denominators(m, g, "token_mean"), group_denominators(m, g, "bnpo")
    ([tensor([4., 4.]), tensor([4., 4.])], [tensor([6., 6.]), tensor([2., 2.])])
    """
    agg = _lookup(AGGREGATIONS, "loss aggregation", mode)
    if not masks or len(masks) != len(groups):
        raise ValueError(f"group_denominators needs one group id row per micro-batch mask, "
                         f"got {len(masks)} masks and {len(groups)} group rows")
    device = masks[0].device
    gs = [torch.as_tensor(g, device=device, dtype=torch.long).reshape(-1) for g in groups]
    for m, g in zip(masks, gs):
        if g.shape[0] != m.shape[0]:
            raise ValueError(f"group ids [{g.shape[0]}] for a micro-batch of {m.shape[0]} rows")
    V = n_groups if n_groups is not None else 1 + max(int(g.max()) for g in gs if g.numel())
    out = [torch.ones(g.shape[0], device=device) for g in gs]
    for v in range(V):
        parts = [(k, m[g == v].to(device=device, dtype=torch.float32))
                 for k, (m, g) in enumerate(zip(masks, gs)) if bool((g == v).any())]
        counts = torch.stack([agg.denominator(m).reshape(()) for _, m in parts]) if parts \
            else torch.zeros(0, device=device)  # [K_v]
        if agg.per_micro_batch:
            dens = counts.clamp(min=1) * len(parts)  # [K_v]
        else:
            total = counts.sum().clamp(min=1) if parts else counts.sum()
            if normaliser is not None:
                total = torch.as_tensor(normaliser(total), dtype=torch.float32, device=device)
            dens = total.reshape(()).expand(len(parts))  # [K_v]
        for (k, _), d in zip(parts, dens):
            out[k] = torch.where(gs[k] == v, d, out[k])
    return out


def _row_denominators(denom: Tensor, x: Tensor) -> Tensor:
    """[N, 1] per-row normalisers of :func:`aggregate`, checked (> 0, one per row)."""
    d = torch.as_tensor(denom, dtype=x.dtype, device=x.device)
    if d.shape != (x.shape[0],):
        raise ValueError(f"per-row denominators must be [N]={x.shape[0]}, got {tuple(d.shape)}")
    if not bool((d > 0).all()):
        raise ValueError("aggregation denominators must be > 0")
    return d[:, None]


def aggregate(
    per_token: Tensor,
    mask: Tensor,
    mode: str = "token_mean",
    denom: float | Tensor | None = None,
    length_norm: float | None = None,
) -> Tensor:
    """Reduce a per-token loss [N, T] to a scalar, the way ``mode`` weighs tokens.

    per_token: [N, T]; mask: [N, T] bool (or 0/1); mode: name in ``AGGREGATIONS``.
    denom:   the normaliser; None uses this batch's (``aggregate_denominator``). Pass the
             full batch's when this is a micro-batch, so the micro-batch losses sum to the
             full-batch loss exactly (:func:`micro_batch_denominators` gives each
             micro-batch's, for ``bnpo`` too). A [N] tensor: each row's own normaliser,
             every numerator here being a sum over rows (:func:`group_denominators`: the
             rows of each loss group, e.g. each wording, aggregated on their own).
    length_norm: the constant of ``seq_mean_token_sum_norm`` (e.g. max_new_tokens);
             required by that mode, ignored by the others.

    Masked positions contribute nothing to the value, not even a NaN (they are selected
    out, not multiplied by 0). A NaN there can still reach the gradient through whatever
    produced it, so ``policy_loss`` also selects its inputs before any exp.
    """
    agg = _lookup(AGGREGATIONS, "loss aggregation", mode)
    _check_shapes(per_token=per_token, mask=mask)
    x = _as_float(per_token)
    mb = mask.to(device=x.device, dtype=torch.bool)  # [N, T]
    x = torch.where(mb, x, torch.zeros_like(x))  # [N, T]; padding garbage (NaN) dropped
    m = mb.to(x.dtype)  # [N, T]
    if isinstance(denom, Tensor) and denom.dim() == 1:  # one normaliser per row
        return agg.numerator(x / _row_denominators(denom, x), m, length_norm)
    if denom is None:
        denom = aggregate_denominator(mb, mode)
    denom = torch.as_tensor(denom, dtype=x.dtype, device=x.device)
    if not denom > 0:
        raise ValueError(f"aggregation denominator must be > 0, got {float(denom)}")
    return agg.numerator(x, m, length_norm) / denom


# --------------------------------------------------------------------------------------
# the policy-gradient surrogate: token ratio (PPO), sequence ratio (GSPO), CISPO
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)  # holds tensors
class Surrogate:
    """One policy-loss variant's per-token terms, before IS weights, dual clip and KL.

    loss:         [N, T] per-token policy-gradient loss, WITH gradient through logp;
    ratio:        [N, T] detached, the ratio the variant clips (per token for ``ppo`` /
                  ``cispo``; the completion's ratio on each of its tokens for ``gspo``);
    clipped_low:  [N, T] bool, the lower bound is active: ratio < 1 - clip_low with A < 0;
    clipped_high: [N, T] bool, the upper bound is active: ratio > 1 + clip_high with A > 0.

    A token with A = 0 counts as clipped nowhere: its loss is 0 whatever the ratio.
    """

    loss: Tensor
    ratio: Tensor
    clipped_low: Tensor
    clipped_high: Tensor


def _clipped_surrogate(ratio: Tensor, adv: Tensor, clip_low: float, clip_high: float) -> Surrogate:
    """-min(r A, clip(r, 1 - clip_low, 1 + clip_high) A) per token, for any ratio r [N, T]."""
    unclipped = -ratio * adv  # [N, T]
    clipped = -torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv  # [N, T]
    r = ratio.detach()
    return Surrogate(
        loss=torch.maximum(unclipped, clipped),  # [N, T]  = -min(r A, clip(r) A)
        ratio=r,
        clipped_low=(r < 1.0 - clip_low) & (adv < 0),  # [N, T]
        clipped_high=(r > 1.0 + clip_high) & (adv > 0),  # [N, T]
    )


def _ppo(logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor,
         clip_low: float, clip_high: float) -> Surrogate:
    """PPO's clipped surrogate on the TOKEN ratio r = exp(logp - old) (Schulman et al.
    2017, arXiv 1707.06347), with separate lower and upper clip (DAPO's clip-higher, Yu et
    al. 2025, arXiv 2503.14476). GRPO's (arXiv 2402.03300), TRL's and verl's default."""
    diff = torch.where(mask, logp - old_logp, torch.zeros_like(logp))  # [N, T]
    return _clipped_surrogate(torch.exp(diff.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)),
                              adv, clip_low, clip_high)


def _gspo(logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor,
          clip_low: float, clip_high: float) -> Surrogate:
    """GSPO (Zheng et al. 2025, arXiv 2507.18071): the ratio and its clip are per
    COMPLETION, s_i = exp(mean_t (logp - old)), the length-normalised sequence likelihood
    ratio, written in GSPO-token's form: s_i,t = sg(s_i) x pi(y_t) / sg(pi(y_t)).

    s_i,t equals s_i in value (so the clip decides per completion) and its gradient is
    s_i grad log pi(y_t), token by token; with A per sequence and any of the aggregations
    here this gives the same gradient as GSPO's sequence objective (tested), and it also
    takes per-token advantages. TRL: ``importance_sampling_level="sequence"``; verl:
    ``policy_loss.loss_mode="gspo"``. The paper clips at 3e-4 / 4e-4 (``clip_low`` /
    ``clip_high``): a sequence ratio moves far less than a token's, so PPO's 0.2 clips
    almost nothing."""
    m = mask.to(logp.dtype)  # [N, T]
    diff = torch.where(mask, logp - old_logp, torch.zeros_like(logp))  # [N, T]
    seq = (diff * m).sum(dim=1, keepdim=True) / m.sum(dim=1, keepdim=True).clamp(min=1)  # [N, 1]
    seq = seq.detach().clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # [N, 1] sg(log s_i)
    log_s = seq + (diff - diff.detach())  # [N, T]: value log s_i, gradient grad logp_t
    return _clipped_surrogate(torch.exp(log_s), adv, clip_low, clip_high)


def _cispo(logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor,
           clip_low: float, clip_high: float) -> Surrogate:
    """CISPO (MiniMax-M1, arXiv 2506.13585): -sg(min(r, 1 + clip_high)) x A x logp per
    token. The IS weight is clipped and detached, never the gradient: every token keeps a
    policy-gradient term (PPO's clip drops the tokens outside the trust region, often the
    rare "fork" tokens of long reasoning).

    Upper bound only, as TRL's ``loss_type="cispo"`` (``clamp(coef_1, max=epsilon_high)``,
    so TRL's ``epsilon_high`` = 1 + ``clip_high`` here) and as the paper's runs, which set
    eps_low large enough to impose no lower bound; ``clip_low`` is not used.
    ``clip_frac_high`` counts capped tokens with A > 0 (TRL's ``cispo_clip_ratio``)."""
    diff = torch.where(mask, logp - old_logp, torch.zeros_like(logp))  # [N, T]
    ratio = torch.exp(diff.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)).detach()  # [N, T]
    weight = torch.clamp(ratio, max=1.0 + clip_high)  # [N, T] sg(clip(r))
    lp = torch.where(mask, logp, torch.zeros_like(logp))  # [N, T]; padding garbage dropped
    return Surrogate(
        loss=-weight * adv * lp,  # [N, T]
        ratio=ratio,
        clipped_low=torch.zeros_like(mask),
        clipped_high=(ratio > 1.0 + clip_high) & (adv > 0),  # [N, T]
    )


#: ``grpo.policy_loss`` names -> fn(logp [N, T] with grad, old_logp [N, T], adv [N, 1] or
#: [N, T], mask [N, T] bool, clip_low, clip_high) -> Surrogate.
POLICY_LOSSES: dict[str, Callable[[Tensor, Tensor, Tensor, Tensor, float, float], Surrogate]] = {
    "ppo": _ppo,
    "gspo": _gspo,
    "cispo": _cispo,
}


def dual_clip(loss: Tensor, adv: Tensor, clip_ratio_c: float) -> Tensor:
    """Dual-clip PPO (Ye et al. 2020, arXiv 1912.09729; verl ``compute_policy_loss``,
    ``clip_ratio_c``): where A < 0 the per-token loss is min(loss, -c A), i.e.
    min(max(-r A, -clip(r) A), -c A), so a token whose ratio has grown past c cannot
    push the loss (or its gradient) without bound; A >= 0 is left alone.

    loss: [N, T] from a clipped surrogate; adv: [N, 1] or [N, T]; c > 1.
    """
    return torch.where(adv < 0, torch.minimum(loss, -clip_ratio_c * adv), loss)  # [N, T]


# --------------------------------------------------------------------------------------
# the policy loss
# --------------------------------------------------------------------------------------


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    is_weights: Tensor | None = None,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
    kl_kind: str = "k3",
    agg: str = "token_mean",
    denom: float | Tensor | None = None,
    length_norm: float | None = None,
    loss_kind: str = "ppo",
    clip_ratio_c: float = 0.0,
) -> tuple[Tensor, dict[str, float]]:
    """The policy-gradient surrogate ``loss_kind`` per token (PPO's clipped surrogate,
    Schulman et al. 2017, arXiv 1707.06347, with separate lower and upper clip, DAPO
    arXiv 2503.14476; or GSPO / CISPO, see ``POLICY_LOSSES``), optional dual clip,
    optional IS weights and optional KL to the reference, aggregated by ``agg``.

    logp:       [N, T] policy log-probs of the sampled tokens, WITH gradient.
    old_logp:   [N, T] the same before this step's update (treated as data).
    advantages: [N] one per sequence, broadcast over its tokens (or [N, T] per token).
    mask:       [N, T] bool (or 0/1) completion tokens (less any an IS ``rejection``
                dropped: ``mask & ISWeights.keep``, with ``denom`` counted on the same).
    is_weights: [N, T] from ``importance_weights`` (detached here whatever is passed);
                they multiply the surrogate term only, not the KL term (as verl does).
    ref_logp:   [N, T] reference log-probs; required when ``kl_coef > 0``.
    agg, denom, length_norm: see ``aggregate``.
    loss_kind:  name in ``POLICY_LOSSES`` (``ppo`` | ``gspo`` | ``cispo``).
    clip_ratio_c: 0 (off) or > 1: dual clip for A < 0 (``dual_clip``; ppo and gspo).

    per-token loss (ppo) = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A) * w
                           + kl_coef * kl_penalty(logp, ref_logp, kl_kind)
    with ratio = exp(logp - old_logp). Gradient flows through ``logp`` only.

    Stats (plain floats, no gradient; means over this batch's valid tokens):
    ``clip_frac`` (share where a clip bound is active: the clipped branch is the minimum,
    or for cispo the weight is capped with A > 0), ``clip_frac_low`` (ratio <
    1 - clip_low with A < 0), ``clip_frac_high`` (ratio > 1 + clip_high with A > 0),
    ``ratio_mean`` (of the ratio the variant clips: gspo's is per completion),
    ``ppo_kl`` (mean of old_logp - logp, verl's ``ppo_kl``: how far this epoch has moved
    the policy from the rollout's), ``pg_loss`` (surrogate alone, aggregated like the
    loss), ``kl`` (mean estimate; whenever ``ref_logp`` is given, even with kl_coef 0),
    ``loss``.
    """
    surrogate_fn = _lookup(POLICY_LOSSES, "policy loss", loss_kind)
    if not 0 <= clip_low < 1:
        raise ValueError(f"clip_low must be in [0, 1), got {clip_low}")
    if clip_high < 0:
        raise ValueError(f"clip_high must be >= 0, got {clip_high}")
    if clip_ratio_c != 0 and not clip_ratio_c > 1:
        raise ValueError(f"clip_ratio_c must be 0 (no dual clip) or > 1, got {clip_ratio_c}")
    if clip_ratio_c > 0 and loss_kind == "cispo":
        raise ValueError("clip_ratio_c (dual clip) bounds a clipped surrogate; cispo has none "
                         "(its IS weight is capped at 1 + clip_high): set clip_ratio_c to 0")
    if kl_coef < 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef}")
    if kl_coef > 0 and ref_logp is None:
        raise ValueError(f"kl_coef={kl_coef} > 0 needs ref_logp (the reference model's "
                         "log-probs); pass them or set kl_coef to 0")
    _check_shapes(logp=logp, old_logp=old_logp, mask=mask)
    N, T = logp.shape

    x = _as_float(logp)  # [N, T]
    m = mask.to(device=x.device, dtype=torch.bool)  # [N, T]
    adv = _as_float(advantages.detach()).to(x.dtype)
    if adv.shape == (N,):
        adv = adv[:, None]  # [N] -> [N, 1], broadcast over T
    elif adv.shape != (N, T):
        raise ValueError(f"advantages must be [N]={N} or [N, T]={(N, T)}, got {tuple(adv.shape)}")

    # the variants select before exp: padding may hold garbage, and where() after exp
    # would still send NaN gradients back through the unselected branch
    old = _as_float(old_logp.detach()).to(x.dtype)  # [N, T]
    sur = surrogate_fn(x, old, adv, m, clip_low, clip_high)
    pg = sur.loss  # [N, T]
    if clip_ratio_c > 0:
        pg = dual_clip(pg, adv, clip_ratio_c)  # [N, T]
    if is_weights is not None:
        _check_shapes(logp=logp, is_weights=is_weights)
        pg = pg * _as_float(is_weights.detach()).to(x.dtype)  # [N, T]

    kl = None
    if ref_logp is not None:
        _check_shapes(logp=logp, ref_logp=ref_logp)
        # padding -> 0 on both sides (selected before the estimator, as above): k = 0 there
        zeros = torch.zeros_like(x)
        ref = torch.where(m, _as_float(ref_logp.detach()).to(x.dtype), zeros)  # [N, T]
        kl = kl_penalty(torch.where(m, x, zeros), ref, kl_kind)  # [N, T]
    per_token = pg + kl_coef * kl if kl_coef > 0 else pg  # [N, T]

    loss = aggregate(per_token, m, agg, denom=denom, length_norm=length_norm)

    with torch.no_grad():
        mf = m.to(x.dtype)  # [N, T]
        low, high = sur.clipped_low & m, sur.clipped_high & m  # [N, T] bool each
        stats = {
            "clip_frac": _float(_masked_mean((low | high).to(x.dtype), mf)),
            "clip_frac_low": _float(_masked_mean(low.to(x.dtype), mf)),
            "clip_frac_high": _float(_masked_mean(high.to(x.dtype), mf)),
            "ratio_mean": _float(_masked_mean(sur.ratio, mf)),
            "ppo_kl": _float(_masked_mean(torch.where(m, old - x, torch.zeros_like(x)), mf)),
            "pg_loss": _float(aggregate(pg, m, agg, denom=denom, length_norm=length_norm)),
            "loss": _float(loss),
        }
        if kl is not None:
            stats["kl"] = _float(_masked_mean(kl, mf))
    return loss, stats


# --------------------------------------------------------------------------------------
# REINFORCE++: batch-normalised returns, no group baseline
# --------------------------------------------------------------------------------------


def reinforce_pp_advantages(returns: Tensor, tokens: Tensor | None = None,
                            valid: Tensor | None = None, eps: float = 1e-8) -> Tensor:
    """REINFORCE++ (Hu, arXiv 2501.03262, eq. 8-9): A = (G - mean) / std over the whole
    batch, no per-prompt group baseline and no critic.

    returns: [N] one return per sequence (the task reward, less a reward-side KL penalty
             when one is charged: the return at the completion's first token).
    tokens:  optional [N] completion lengths. The published implementation (OpenRLHF's
             ``compute_advantages_and_returns``, which MARTI and CoMAS train with) takes the
             mean and the biased variance over the batch's *tokens*, every token of a
             sequence carrying its return: a sequence then weighs by its length. None:
             every sequence weighs 1.
    valid:   optional bool [N]; invalid rows stay out of the statistics and get exactly 0.
    returns: [N] advantages (A - mean) x rsqrt(max(var, eps)), OpenRLHF's form; a batch
             whose valid returns are all equal gets exactly 0.

    Departure: REINFORCE++ subtracts the KL penalty token by token, so its advantage at
    token t holds only the KL of tokens t..T; one advantage per sequence here is the
    return at the first token (the whole completion's KL).

    >>> reinforce_pp_advantages(torch.tensor([1.0, 0.0, 0.5, 0.5]))
    tensor([ 1.4142, -1.4142,  0.0000,  0.0000])
    """
    if returns.dim() != 1:
        raise ValueError(f"returns must be [N] (one per sequence), got {tuple(returns.shape)}")
    r = _as_float(returns.detach())  # [N]
    N = r.shape[0]
    v = torch.ones(N, dtype=torch.bool) if valid is None else valid.to(torch.bool)  # [N]
    if v.shape != (N,):
        raise ValueError(f"valid must be [N]={N}, got {tuple(v.shape)}")
    w = torch.ones_like(r) if tokens is None else _as_float(tokens.detach()).to(r.device)  # [N]
    if w.shape != (N,) or bool((w < 0).any()):
        raise ValueError(f"tokens must be [N]={N} non-negative lengths, got {tuple(w.shape)}")
    if not torch.isfinite(r[v]).all():
        raise ValueError("returns contain NaN or inf in a valid row")
    r = torch.where(v, r, torch.zeros_like(r))  # an invalid NaN must not leak via 0 * NaN
    w = w * v.to(w.dtype)  # [N]
    total = w.sum().clamp(min=1e-12)
    mean = (r * w).sum() / total  # []
    var = (((r - mean) ** 2) * w).sum() / total  # [] biased, over tokens
    adv = (r - mean) * var.clamp(min=eps).rsqrt()  # [N]
    valid_r = r[v & (w > 0)]
    if valid_r.numel() == 0 or bool(valid_r.max() == valid_r.min()):
        return torch.zeros_like(r)  # no preference between the batch's sequences
    return torch.where(v, adv, torch.zeros_like(adv))


#: Advantage estimators that normalise per-sequence returns over a whole batch, without
#: groups (``comas.advantage``): name -> fn(returns [N], tokens [N] | None, valid [N] | None).
RETURN_NORMALISERS: dict[str, Callable[..., Tensor]] = {
    "reinforce_pp": reinforce_pp_advantages,
    "reinforce_pp_seq": lambda returns, tokens=None, valid=None: reinforce_pp_advantages(
        returns, None, valid),
}
