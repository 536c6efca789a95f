"""GRPO as pure tensor functions: advantages, IS correction, KL, aggregation, policy loss.

Nothing here knows about models, configs or files: tensors go in, tensors (and plain-float
stats) come out, so every formula can be checked by hand in ``tests/test_grpo.py`` and
driven by the trainer and by ``vlcohort simulate`` alike. Each choice a config can make is a
name in a small registry dict (``ADVANTAGE_SCALES``, ``IS_LEVELS``, ``IS_MODES``,
``KL_ESTIMATORS``, ``AGGREGATIONS``), each entry with its paper.

Shape letters (DESIGN.md rule 5): B prompts, G rollouts per prompt, N sequences in a
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
from typing import Callable, Mapping

import torch
from torch import Tensor

__all__ = [
    "ADVANTAGE_SCALES",
    "AGGREGATIONS",
    "IS_LEVELS",
    "IS_MODES",
    "KL_ESTIMATORS",
    "Aggregation",
    "aggregate",
    "aggregate_denominator",
    "group_advantages",
    "importance_weights",
    "kl_penalty",
    "policy_loss",
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


def _scale_by_group_std(centered: Tensor, std: Tensor, eps: float) -> Tensor:
    """GRPO (Shao et al. 2024, DeepSeekMath, arXiv 2402.03300): (r - mean) / (std + eps).

    ``std`` is the unbiased (n - 1) estimator, as verl's ``compute_grpo_outcome_advantage``
    (``torch.std``) and the GRPO paper's code use; with G = 2 a 1/0 group gives +-0.7071.
    """
    return centered / (std + eps)


def _no_scale(centered: Tensor, std: Tensor, eps: float) -> Tensor:
    """Dr.GRPO (Liu et al. 2025, arXiv 2503.20783): r - mean, no division by the std.

    Dividing by the std up-weights groups that are nearly all right or all wrong (a
    question-difficulty bias); leaving it out keeps the reward's own scale.
    """
    return centered


#: ``advantages.scale`` names -> fn(centered [B, G], std [B, 1], eps) -> [B, G].
ADVANTAGE_SCALES: dict[str, Callable[[Tensor, Tensor, float], Tensor]] = {
    "group": _scale_by_group_std,
    "none": _no_scale,
}


def group_advantages(
    rewards: Tensor,
    scale: str = "group",
    eps: float = 1e-6,
    valid: Tensor | None = None,
) -> Tensor:
    """Outcome advantages normalised within each prompt's group of G rollouts.

    rewards: [B, G] one scalar reward per rollout (bool/int rewards are cast to float).
    valid:   optional bool [B] (a whole group; e.g. False where the teacher abstained) or
             [B, G] (per rollout). Statistics use only valid rollouts and invalid ones get
             exactly 0: an abstaining teacher must give no learning signal, not a
             made-up one.
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
    adv = scale_fn(centered, var.sqrt(), eps)  # [B, G]

    # a constant group: max == min over its valid rewards (exact, unlike a float mean)
    hi = torch.where(v, r, torch.full_like(r, -math.inf)).amax(dim=1, keepdim=True)  # [B, 1]
    lo = torch.where(v, r, torch.full_like(r, math.inf)).amin(dim=1, keepdim=True)  # [B, 1]
    informative = (hi > lo) & v  # [B, G]; an all-invalid group has hi=-inf < lo=inf
    return torch.where(informative, adv, torch.zeros_like(adv))


# --------------------------------------------------------------------------------------
# importance sampling between the rollout engine and the policy
# --------------------------------------------------------------------------------------


def _token_level(log_ratio: Tensor, valid: Tensor) -> Tensor:
    """One weight per token: exp(old_logp - rollout_logp) (Yao et al. 2025, TIS)."""
    return log_ratio


def _sequence_level(log_ratio: Tensor, valid: Tensor) -> Tensor:
    """One weight per completion: exp of the MEAN token log-ratio, broadcast to its tokens.

    The geometric mean of the token ratios, as GSPO's sequence ratio (Zheng et al. 2025,
    arXiv 2507.18071), not their product: a product over hundreds of tokens explodes or
    vanishes with length. Non-finite tokens are left out of the mean.
    """
    seq = (log_ratio * valid).sum(dim=1, keepdim=True) / valid.sum(dim=1, keepdim=True).clamp(min=1)
    return seq.expand_as(log_ratio)  # [N, 1] -> [N, T]


#: ``is.level`` names -> fn(log_ratio [N, T], valid [N, T] float) -> per-token log-weight [N, T].
IS_LEVELS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "token": _token_level,
    "sequence": _sequence_level,
}


def _truncate(w: Tensor, cap: float, low: float, high: float) -> tuple[Tensor, Tensor]:
    """TIS, truncated IS (Yao et al. 2025, "Your efficient RL framework secretly brings you
    off-policy RL training"): w = min(w, cap). Bounds the variance a rare token can add.

    Returns (weights [N, T], hit [N, T] bool: the tokens that were truncated).
    """
    hit = w > cap
    return torch.clamp(w, max=cap), hit


def _mask(w: Tensor, cap: float, low: float, high: float) -> tuple[Tensor, Tensor]:
    """MIS, masked IS (verl's rollout correction, ``rollout_is`` mask mode): tokens whose
    w lies outside [low, high] get weight 0; the rest keep w unchanged. Drops tokens the
    sampler and the policy disagree on too much instead of trusting a capped weight.

    Returns (weights [N, T], hit [N, T] bool: the tokens that were masked).
    """
    hit = (w < low) | (w > high)
    return torch.where(hit, torch.zeros_like(w), w), hit


#: ``is.mode`` names -> fn(w [N, T], cap, low, high) -> (weights [N, T], hit [N, T] bool).
IS_MODES: dict[str, Callable[[Tensor, float, float, float], tuple[Tensor, Tensor]]] = {
    "truncate": _truncate,
    "mask": _mask,
}


def importance_weights(
    old_logp: Tensor,
    rollout_logp: Tensor,
    mask: Tensor,
    level: str = "token",
    mode: str = "truncate",
    cap: float = 2.0,
    low: float = 0.5,
    high: float = 2.0,
) -> tuple[Tensor, dict[str, float]]:
    """Per-token weights correcting for sampling with the engine instead of the policy.

    The engine (vLLM, or HF generate in another precision) samples from a distribution
    that is close to, but not, the policy whose gradient we take; the surrogate assumes
    samples from ``old_logp``. w = exp(old_logp - rollout_logp) reweights each token.

    old_logp, rollout_logp: [N, T] per-token log-probs of the sampled tokens.
    mask:    [N, T] bool (or 0/1) completion tokens (padding False).
    level:   name in ``IS_LEVELS`` (``token`` | ``sequence``).
    mode:    name in ``IS_MODES`` (``truncate`` with ``cap`` | ``mask`` with [low, high]).
    returns: (weights [N, T], detached, 0 on padding and on non-finite tokens; stats).

    A NaN or inf in either log-prob (seen from some engines) gives that token weight 0 and
    is counted, so one bad token cannot poison the loss. Stats are plain floats, 0 when
    there is nothing to measure. Means, min and max are over completion tokens with finite
    log-probs; shares are of all completion tokens:

    - ``is_weight/mean|min|max``: the raw weight, BEFORE truncation or masking, so they show
      the actual mismatch (``max`` can exceed ``cap``; it is at most exp(20), the log-ratio
      clamp). At level ``sequence`` each token carries its sequence's weight, so these are
      token-weighted;
    - ``is_weight/applied_mean``: the weight actually applied (after truncation/masking);
    - ``is_weight/frac_truncated``: share truncated by ``cap`` (mode ``truncate``; 0 in
      mode ``mask``);
    - ``is_weight/frac_masked``: share of completion tokens given weight 0 for any reason
      (outside [low, high] in mode ``mask``, or a non-finite log-prob);
    - ``is_weight/nonfinite_tokens``: count of completion tokens with a NaN/inf log-prob;
    - ``rollout_k3``: mean k3 estimate of KL(rollout || policy), exp(l) - l - 1 with
      l = old_logp - rollout_logp (samples come from the rollout distribution).
    """
    level_fn = _lookup(IS_LEVELS, "IS level", level)
    mode_fn = _lookup(IS_MODES, "IS mode", mode)
    if cap <= 0:
        raise ValueError(f"IS cap must be > 0, got {cap}")
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
        raw = torch.exp(level_fn(token_lr, okf))  # [N, T]
        applied, hit = mode_fn(raw, cap, low, high)  # [N, T], [N, T]
        weights = torch.where(ok, applied, torch.zeros_like(applied))  # [N, T]

        n_tokens = m.sum().clamp(min=1)
        n_ok = ok.sum()
        big = torch.finfo(raw.dtype).max
        k3 = torch.exp(token_lr) - token_lr - 1.0  # [N, T], >= 0
        stats = {
            "is_weight/mean": _float(_masked_mean(raw, okf)),
            "is_weight/min": _float(torch.where(ok, raw, big).amin()) if n_ok else 0.0,
            "is_weight/max": _float(torch.where(ok, raw, -big).amax()) if n_ok else 0.0,
            "is_weight/applied_mean": _float(_masked_mean(weights, okf)),
            "is_weight/frac_truncated": _float((hit & ok).sum() / n_tokens) if mode == "truncate" else 0.0,
            "is_weight/frac_masked": _float(((m & (weights == 0)).sum()) / n_tokens),
            "is_weight/nonfinite_tokens": float((m & ~finite).sum()),
            "rollout_k3": _float(_masked_mean(k3, okf)),
        }
    return weights, stats


# --------------------------------------------------------------------------------------
# KL to the reference
# --------------------------------------------------------------------------------------


def _kl_k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k1 = logp - ref_logp (Schulman 2020, "Approximating KL divergence"): unbiased for
    KL(policy || ref), but high variance and negative on some tokens."""
    return logp - ref_logp


def _kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 = exp(ref - logp) - (ref - logp) - 1 (Schulman 2020, "Approximating KL
    divergence", http://joschu.net/blog/kl-approx.html): unbiased, low variance, >= 0.
    The GRPO paper's KL term. The log-ratio is clamped to +-20 so exp stays finite;
    ``expm1(x) - x`` instead of ``exp(x) - x - 1`` keeps it >= 0 in float32 near x = 0
    (``exp`` rounds 1 + 6e-8 to 1 and gave -6e-8, found by hypothesis)."""
    log_ratio = (ref_logp - logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.expm1(log_ratio) - log_ratio


#: ``kl.kind`` names -> fn(logp [N, T], ref_logp [N, T]) -> per-token estimate [N, T].
KL_ESTIMATORS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "k1": _kl_k1,
    "k3": _kl_k3,
}


def kl_penalty(logp: Tensor, ref_logp: Tensor, kind: str = "k3") -> Tensor:
    """Per-token estimate of KL(policy || reference) from tokens sampled by the policy.

    logp, ref_logp: [N, T]; returns [N, T] (gradient flows through ``logp``; padding
    positions are computed too, the caller masks them in ``aggregate``).
    kind: name in ``KL_ESTIMATORS`` (``k1`` | ``k3``).
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
    """

    numerator: Callable[[Tensor, Tensor, float | None], Tensor]
    denominator: Callable[[Tensor], Tensor]
    reference: str


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


def _count_sequences(m: Tensor) -> Tensor:
    """Sequences with at least one completion token; an empty one has no loss to average."""
    return (m.sum(dim=1) > 0).to(m.dtype).sum()  # [N, T] -> [N] -> scalar


#: ``loss_agg`` names. ``token_mean``: every valid token weighs the same, so long
#: completions weigh more (DAPO's token-level loss, Yu et al. 2025, arXiv 2503.14476).
#: ``seq_mean_token_mean``: every sequence weighs the same, its tokens averaged (the GRPO
#: paper, arXiv 2402.03300; biases toward long wrong answers, see Dr.GRPO).
#: ``seq_mean_token_sum_norm``: token sums divided by a constant length, averaged over
#: sequences (Dr.GRPO, Liu et al. 2025, arXiv 2503.20783): no length bias.
AGGREGATIONS: dict[str, Aggregation] = {
    "token_mean": Aggregation(_sum_tokens, _count_tokens, "DAPO arXiv 2503.14476"),
    "seq_mean_token_mean": Aggregation(_sum_seq_token_means, _count_sequences, "GRPO arXiv 2402.03300"),
    "seq_mean_token_sum_norm": Aggregation(_sum_seq_token_sums_norm, _count_sequences, "Dr.GRPO arXiv 2503.20783"),
}


def aggregate_denominator(mask: Tensor, mode: str) -> Tensor:
    """The normaliser of ``mode`` for a (full) batch: valid tokens or non-empty sequences.

    mask: [N, T]; returns a 0-dim float tensor, at least 1 (an empty batch gives loss 0,
    not NaN). Compute it once on the full batch and pass it as ``denom`` to every
    micro-batch. Under data parallelism, all-reduce (sum) it across ranks first and scale
    the loss by the world size, because DDP averages gradients.
    """
    agg = _lookup(AGGREGATIONS, "loss aggregation", mode)
    m = mask.to(torch.float32)  # [N, T]
    return agg.denominator(m).clamp(min=1)


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
             full-batch loss exactly.
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
    if denom is None:
        denom = aggregate_denominator(mb, mode)
    denom = torch.as_tensor(denom, dtype=x.dtype, device=x.device)
    if not denom > 0:
        raise ValueError(f"aggregation denominator must be > 0, got {float(denom)}")
    return agg.numerator(x, m, length_norm) / denom


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
) -> tuple[Tensor, dict[str, float]]:
    """PPO clipped surrogate per token (Schulman et al. 2017, arXiv 1707.06347) with
    separate lower and upper clip (clip-higher, DAPO arXiv 2503.14476), optional token IS
    weights and optional KL to the reference, aggregated by ``agg``.

    logp:       [N, T] policy log-probs of the sampled tokens, WITH gradient.
    old_logp:   [N, T] the same before this step's update (treated as data).
    advantages: [N] one per sequence, broadcast over its tokens (or [N, T] per token).
    mask:       [N, T] bool (or 0/1) completion tokens.
    is_weights: [N, T] from ``importance_weights`` (detached here whatever is passed);
                they multiply the surrogate term only, not the KL term (as verl does).
    ref_logp:   [N, T] reference log-probs; required when ``kl_coef > 0``.
    agg, denom, length_norm: see ``aggregate``.

    per-token loss = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A) * w
                     + kl_coef * kl_penalty(logp, ref_logp, kl_kind)
    with ratio = exp(logp - old_logp). Gradient flows through ``logp`` only.

    Stats (plain floats, no gradient; means over this batch's valid tokens):
    ``clip_frac`` (share where the clipped branch is the active minimum), ``ratio_mean``,
    ``pg_loss`` (surrogate alone, aggregated like the loss), ``kl`` (mean estimate;
    whenever ``ref_logp`` is given, even with kl_coef 0), ``loss``.
    """
    if not 0 <= clip_low < 1:
        raise ValueError(f"clip_low must be in [0, 1), got {clip_low}")
    if clip_high < 0:
        raise ValueError(f"clip_high must be >= 0, got {clip_high}")
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

    # select before exp: padding may hold garbage, and where() after exp would still
    # send NaN gradients back through the unselected branch
    diff = torch.where(m, x - _as_float(old_logp.detach()).to(x.dtype), torch.zeros_like(x))  # [N, T]
    ratio = torch.exp(diff.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))  # [N, T]
    unclipped = -ratio * adv  # [N, T]
    clipped = -torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv  # [N, T]
    pg = torch.maximum(unclipped, clipped)  # [N, T]  = -min(r A, clip(r) A)
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
        stats = {
            "clip_frac": _float(_masked_mean((clipped > unclipped).to(x.dtype), mf)),
            "ratio_mean": _float(_masked_mean(ratio, mf)),
            "pg_loss": _float(aggregate(pg, m, agg, denom=denom, length_norm=length_norm)),
            "loss": _float(loss),
        }
        if kl is not None:
            stats["kl"] = _float(_masked_mean(kl, mf))
    return loss, stats
