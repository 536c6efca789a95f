"""One agent's GRPO update from a step's rollouts and advantages, and the no-grad token
statistics pass an intrinsic reward makes before it.

Shapes: N sequences (rows of the rollouts, prompt-major: row n belongs to prompt n // G),
T completion tokens (padded), V vocabulary. The maths is ``grpo.py``; this module feeds it
micro-batches and steps the optimizer. How gradients are taken and applied differs between
one process (``loss.backward``, clip, ``optimizer.step``) and an agent group trained by
DeepSpeed ZeRO (the engine's backward / step, group-wide flags and normaliser): that
difference lives behind :class:`OptimizerStep`, not in the loss loop.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from processors import RenderedPrompt
from vlcohort.config import GRPOConfig
from vlcohort.rollout.base import Rollouts
from vlcohort.training import grpo
from vlcohort.training.agent import Agent, zero_stage
from vlcohort.training.logprobs import completion_logprobs, completion_token_stats


def micro_batches(agent: Agent, rendered: Sequence[RenderedPrompt], rollouts: Rollouts,
                  size: int, device: torch.device | None = None) -> list[tuple[slice, Any]]:
    """Training batches of ``size`` sequences each, encoded once and reused by every pass.

    Row n of the rollouts belongs to prompt n // G. Each micro-batch re-encodes its own
    prompts (family-agnostic: no per-image tensor slicing); log-probs do not depend on
    padding (tested per family), so this equals slicing one big batch.
    """
    G = rollouts.group_size
    N = len(rollouts.completions)
    out = []
    for start in range(0, N, size):
        rows = slice(start, min(N, start + size))
        prompts = agent.adapter.encode_prompts([rendered[n // G] for n in range(rows.start, rows.stop)])
        batch = agent.adapter.encode_training(prompts, rollouts.completions[rows])
        out.append((rows, batch.to(device) if device is not None else batch))
    return out


def pad_to(t: torch.Tensor, T: int) -> torch.Tensor:
    """[n, t] -> [n, T], zero-padded on the right."""
    return t if t.shape[1] == T else torch.nn.functional.pad(t, (0, T - t.shape[1]))


# --------------------------------------------------------------------------- token statistics


@dataclass
class TokenStats:
    """One no-grad pass over an agent's rollouts before its update (intrinsic rewards).

    ``logprobs`` are the policy's log-probs of the sampled tokens under logits /
    temperature, i.e. exactly the update's "old" log-probs; ``batches`` are the encoded
    micro-batches, reused by the update."""

    logprobs: torch.Tensor  # [N, T]
    self_certainty: torch.Tensor  # [N, T] KL(U || p) per completion token
    entropy: torch.Tensor  # [N, T] H(p) per completion token
    mask: torch.Tensor  # [N, T] 1 on real completion tokens
    batches: list

    def token_mean(self, name: str) -> float:
        """Mean of a per-token statistic over all real completion tokens."""
        return float((getattr(self, name) * self.mask).sum() / self.mask.sum().clamp(min=1.0))


def token_stats(agent: Agent, rendered: Sequence[RenderedPrompt], rollouts: Rollouts,
                g: GRPOConfig, temperature: float, temperature_scaled: bool) -> TokenStats:
    """Per-token log-probs, self-certainty and entropy of the agent's completions under its
    current policy, in one chunked no-grad pass per micro-batch
    (``logprobs.completion_token_stats``). ``temperature_scaled``: statistics of
    softmax(logits / temperature) instead of softmax(logits)."""
    N, T = len(rollouts.completions), rollouts.logprobs.shape[1]
    mbs = micro_batches(agent, rendered, rollouts, g.micro_batch_seqs,
                        next(agent.model.parameters()).device)
    logp, sc, ent, mask = (torch.zeros(N, T) for _ in range(4))  # [N, T] each
    with torch.no_grad(), agent.autocast(), agent.generation_context():  # ZeRO-3: gathered
        for rows, tb in mbs:
            st = completion_token_stats(agent.adapter, agent.model, tb, temperature,
                                        stats_temperature_scaled=temperature_scaled)
            logp[rows] = pad_to(st.logprobs, T)
            sc[rows] = pad_to(st.self_certainty, T)
            ent[rows] = pad_to(st.entropy, T)
            mask[rows] = pad_to(tb.completion_mask.float(), T)
    return TokenStats(logprobs=logp, self_certainty=sc, entropy=ent, mask=mask, batches=mbs)


# --------------------------------------------------------------------------- optimizer steps


class OptimizerStep:
    """Gradients and optimizer steps in one process: ``loss.backward`` per micro-batch, then
    clip (``grpo.max_grad_norm``; 0 = no clipping, the norm still reported) and step."""

    def __init__(self, agent: Agent, max_grad_norm: float):
        self.agent, self.max_grad_norm = agent, max_grad_norm

    def any_rank(self, flag: bool) -> bool:
        """Whether ``flag`` holds on any rank taking this update (here: this one)."""
        return flag

    def normaliser(self, denom: torch.Tensor) -> torch.Tensor:
        """The loss normaliser of the whole batch this update takes."""
        return denom

    def begin(self) -> None:
        self.agent.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        loss.backward()

    def discard(self) -> None:
        """Drop an epoch's gradients (a non-finite loss)."""
        self.agent.optimizer.zero_grad(set_to_none=True)

    def finish(self) -> torch.Tensor | float | None:
        """Apply the epoch's gradients; returns the gradient norm before clipping."""
        params = [p for p in self.agent.model.parameters() if p.requires_grad]
        max_norm = self.max_grad_norm if self.max_grad_norm > 0 else math.inf
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        self.agent.optimizer.step()
        return norm


class DeepSpeedStep(OptimizerStep):
    """An agent group's update through its DeepSpeed engine: every rank of the group takes
    the same branch, the engine accumulates micro-batch gradients and steps (and clips) at
    the accumulation boundary, the normaliser is the group's."""

    def __init__(self, agent: Agent, max_grad_norm: float):
        super().__init__(agent, max_grad_norm)
        self.engine, self.layout, self.norm = agent.ds_engine, agent.layout, None

    def any_rank(self, flag: bool) -> bool:
        return self.layout.group_any(flag, "a non-finite loss")

    def normaliser(self, denom: torch.Tensor) -> torch.Tensor:
        # DeepSpeed averages gradients over the group's R ranks: normalise by the group's
        # total tokens / R so the averaged gradient is the full group batch's (grpo.py)
        R = self.layout.ranks_per_agent
        if R == 1:
            return denom
        return torch.tensor(self.layout.group_sum(float(denom), "the loss normaliser") / R)

    def begin(self) -> None:
        super().begin()
        self.norm = None

    def backward(self, loss: torch.Tensor, last: bool) -> None:
        self.engine.set_gradient_accumulation_boundary(last)
        self.engine.backward(loss, scale_wrt_gas=False)
        if last and zero_stage(self.engine) == 0:  # stage 0 does not report the norm
            grads = [p.grad for p in self.agent.model.parameters()
                     if p.requires_grad and p.grad is not None]
            self.norm = (torch.nn.utils.get_total_norm([g.float() for g in grads]) if grads
                         else torch.tensor(0.0))
        self.engine.step()  # steps the optimizer at the boundary only

    def discard(self) -> None:
        self.engine.zero_grad()
        super().discard()

    def finish(self) -> torch.Tensor | float | None:
        return self.norm if self.norm is not None else self.engine.get_global_grad_norm()


def optimizer_step(agent: Agent, g: GRPOConfig) -> OptimizerStep:
    """The agent's way of taking gradients: DeepSpeed's in an agent group, else plain."""
    return (OptimizerStep if agent.ds_engine is None else DeepSpeedStep)(agent, g.max_grad_norm)


# --------------------------------------------------------------------------- the update


@dataclass
class UpdateBatch:
    """Everything one update reads, on the policy's device."""

    batches: list  # [(rows, TrainingBatch)] micro-batches
    advantages: torch.Tensor  # [N]
    rollout_logp: torch.Tensor  # [N, T] the sampler's log-probs
    comp_mask: torch.Tensor  # [N, T] 1 on real completion tokens
    mask: torch.Tensor  # [N, T] real tokens with a finite rollout log-prob
    old: torch.Tensor | None  # [N, T] old log-probs (None: on-policy, from each forward)
    ref: torch.Tensor | None  # [N, T] reference log-probs (None: no KL)
    denom: torch.Tensor  # the loss normaliser of the whole batch


def update_agent(agent: Agent, rendered: Sequence[RenderedPrompt], rollouts: Rollouts,
                 advantages: torch.Tensor, g: GRPOConfig, temperature: float,
                 length_norm: int, old_logprobs: torch.Tensor | None = None,
                 batches: list | None = None) -> dict[str, float]:
    """One optimizer step per PPO epoch on this agent's rollouts, then the new weights
    pushed into the agent's rollout engine; returns its metrics (``weight_push_s``: the
    push's seconds, a timing the caller moves out of the agent's metrics).

    ``advantages`` [N] per sequence. The "old" log-probs are the policy's before this
    step's update. With ``ppo_epochs == 1`` the policy has not moved when each micro-batch
    is first evaluated, so old = logp.detach() of that very forward pass (one model pass
    saved, as TRL does); with more epochs a no-grad pass computes them first, unless the
    caller already made one before the update (an intrinsic reward's :func:`token_stats`)
    and passes its log-probs as ``old_logprobs`` [N, T] (and its ``batches``): the same
    numbers, no extra pass. The IS weights compare old with the sampler's log-probs.
    Micro-batch losses use the full batch's normaliser, so their gradients add up to the
    full-batch gradient. A non-finite loss skips the optimizer step.
    """
    opt = optimizer_step(agent, g)
    ub = update_batch(agent, rendered, rollouts, advantages, g, temperature, opt,
                      old_logprobs, batches)
    agent.model.train()
    totals = {"loss": 0.0, "clip_frac": 0.0, "kl": 0.0, "grad_norm": 0.0, "skipped_updates": 0}
    is_parts: list[tuple[dict, float]] = []
    for epoch in range(g.ppo_epochs):
        epoch_update(agent, ub, g, temperature, length_norm, opt, totals,
                     is_parts if epoch == 0 else None)
    agent.optimizer.zero_grad(set_to_none=True)
    agent.model.eval()
    pushed = time.perf_counter()
    agent.engine.update_weights(agent.model)
    out = {"loss": totals["loss"] / g.ppo_epochs, "clip_frac": totals["clip_frac"],
           "weight_push_s": time.perf_counter() - pushed,
           "grad_norm": totals["grad_norm"], "skipped_updates": totals["skipped_updates"],
           "lr": agent.optimizer.param_groups[0]["lr"]}
    if g.kl_coef > 0:
        out["kl"] = totals["kl"]
    out.update({f"is/{k.split('/', 1)[-1]}": v for k, v in merge_is_stats(is_parts).items()})
    return out


def update_batch(agent: Agent, rendered: Sequence[RenderedPrompt], rollouts: Rollouts,
                 advantages: torch.Tensor, g: GRPOConfig, temperature: float,
                 opt: OptimizerStep, old_logprobs: torch.Tensor | None,
                 batches: list | None) -> UpdateBatch:
    """Micro-batches, masks, and the no-grad old / reference log-probs of an update."""
    device = next(agent.model.parameters()).device  # rollouts come on the CPU
    N, T = len(rollouts.completions), rollouts.logprobs.shape[1]
    rollout_logp = rollouts.logprobs.to(device)  # [N, T]
    mbs = batches if batches is not None else micro_batches(agent, rendered, rollouts,
                                                            g.micro_batch_seqs, device)
    comp_mask = torch.zeros(N, T, device=device)  # [N, T]
    for rows, tb in mbs:
        comp_mask[rows] = pad_to(tb.completion_mask.float(), T)
    mask = comp_mask * torch.isfinite(rollout_logp).float()  # NaN / inf rollout tokens out
    old = None if old_logprobs is None else old_logprobs.to(device)
    ref = None
    with torch.no_grad(), agent.autocast():
        if g.ppo_epochs > 1 and old is None:
            old = torch.cat([pad_to(agent.logprobs(tb, temperature), T) for _, tb in mbs])
        if g.kl_coef > 0:
            with agent.reference_context():
                ref = torch.cat([pad_to(completion_logprobs(
                    agent.adapter, agent.ref_forward_model, tb, temperature), T) for _, tb in mbs])
    denom = opt.normaliser(grpo.aggregate_denominator(mask, g.loss_agg))
    return UpdateBatch(mbs, advantages.to(device), rollout_logp, comp_mask, mask, old, ref, denom)


def epoch_update(agent: Agent, ub: UpdateBatch, g: GRPOConfig, temperature: float,
                 length_norm: int, opt: OptimizerStep, totals: dict,
                 is_parts: list | None) -> None:
    """One PPO epoch: a forward and backward per micro-batch, one optimizer step; a
    non-finite loss on any rank of the update discards the epoch. ``is_parts`` collects
    the IS statistics (first epoch only)."""
    N = ub.advantages.shape[0]
    opt.begin()
    for k, (rows, tb) in enumerate(ub.batches):
        with agent.autocast():
            logp = pad_to(agent.logprobs(tb, temperature), ub.rollout_logp.shape[1])  # [n, T]
        old_mb = logp.detach() if ub.old is None else ub.old[rows]  # [n, T]
        weights = None
        if g.is_mode != "off":
            weights, st_is = grpo.importance_weights(  # masks and counts NaN/inf itself
                old_mb, ub.rollout_logp[rows], ub.comp_mask[rows], level=g.is_level,
                mode=g.is_mode, cap=g.is_cap, low=g.is_low, high=g.is_high)
            if is_parts is not None:
                is_parts.append((st_is, float(ub.comp_mask[rows].sum())))
        loss, st = grpo.policy_loss(
            logp, old_mb, ub.advantages[rows], ub.mask[rows], clip_low=g.clip_low,
            clip_high=g.clip_high, is_weights=weights,
            ref_logp=None if ub.ref is None else ub.ref[rows], kl_coef=g.kl_coef,
            kl_kind=g.kl_kind, agg=g.loss_agg, denom=ub.denom, length_norm=length_norm)
        if opt.any_rank(not bool(torch.isfinite(loss))):
            opt.discard()
            totals["skipped_updates"] += 1
            return
        opt.backward(loss, last=k == len(ub.batches) - 1)
        share = (rows.stop - rows.start) / N
        totals["loss"] += float(loss.detach())
        totals["clip_frac"] += st.get("clip_frac", 0.0) * share / g.ppo_epochs
        totals["kl"] += st.get("kl", 0.0) * share / g.ppo_epochs
    norm = opt.finish()
    totals["grad_norm"] += float(norm if norm is not None else float("nan")) / g.ppo_epochs


def merge_is_stats(parts: list[tuple[dict[str, float], float]]) -> dict[str, float]:
    """Combine per-micro-batch IS statistics: token-weighted means and shares, global
    min / max, summed counts (``grpo.importance_weights`` stat names)."""
    if not parts:
        return {}
    total = sum(n for _, n in parts) or 1.0
    out: dict[str, float] = {}
    for key in parts[0][0]:
        values = [(st[key], n) for st, n in parts]
        if key.endswith("/min"):
            out[key] = min(v for v, n in values if n > 0) if any(n > 0 for _, n in values) else 0.0
        elif key.endswith("/max"):
            out[key] = max(v for v, _ in values)
        elif key.endswith("nonfinite_tokens"):
            out[key] = sum(v for v, _ in values)
        else:
            out[key] = sum(v * n for v, n in values) / total
    return out
