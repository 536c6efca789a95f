"""One agent's GRPO update from a step's rollouts and advantages, and the no-grad passes
that may come before it: an intrinsic reward's token statistics, the reward-side KL
penalty (``grpo.kl_in_reward``).

Shapes: N sequences (rows of the rollouts, prompt-major: row n belongs to prompt n // G),
T completion tokens (padded), V vocabulary. The maths is ``grpo.py``; this module feeds it
micro-batches, groups them into mini-batches (one optimizer step each) and steps the
optimizer. How gradients are taken and applied differs between
one process (``loss.backward``, clip, ``optimizer.step``) and an agent group trained by
DeepSpeed ZeRO (the engine's backward / step, group-wide flags and normaliser): that
difference lives behind :class:`OptimizerStep`, not in the loss loop.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import torch

from vlcohort.config_schema import GRPOConfig
from vlcohort.processors import RenderedPrompt
from vlcohort.rollout.base import Rollouts
from vlcohort.training import grpo
from vlcohort.training.agent import Agent, zero_stage
from vlcohort.training.logprobs import completion_logprobs, completion_token_stats
from vlcohort.training.row_layout import attention_pair_cost, choose_layout, order_and_width
from vlcohort.training.shared_prefix import shared_batch
from vlcohort.typed_yaml import ConfigError

#: A packed micro-batch is used only when its rows hold at most this share of the padded
#: batch's token positions: packing a batch with next to no padding (the demo's: equal
#: prompts, 8-token completions) only adds the packed mask's overhead (measured +4-11% on
#: bench/packing.py's demo setup).
PACK_MIN_SAVING = 0.9


def micro_batches(agent: Agent, rendered: Sequence[RenderedPrompt], rollouts: Rollouts,
                  size: int, device: torch.device | None = None, *, tokens: int = 0,
                  packing: bool = False, mini: int = 0,
                  shared_prefix: bool = False) -> list[tuple[Any, Any]]:
    """Training batches, encoded once and reused by every pass: ``(rows, batch)`` pairs.

    Row n of the rollouts belongs to prompt n // G. Each micro-batch re-encodes its own
    prompts (family-agnostic: no per-image tensor slicing); log-probs do not depend on
    padding (tested per family), so this equals slicing one big batch.

    ``tokens`` 0: ``size`` consecutive sequences each, ``rows`` a slice. ``tokens`` > 0:
    micro-batches of about ``tokens`` real tokens (:func:`token_micro_batches`), within
    each mini-batch of ``mini`` sequences (0: all N), ``rows`` a LongTensor of row
    indices. ``packing``: the vision tower runs once per distinct image where the family
    can (``Adapter.share_images``), and each batch is packed (``Adapter.pack_training``)
    where the family can pack this model: into one row under flash-attention (its
    variable-length kernels), else into rows laid out by first fit decreasing at the
    width a FLOP model finds cheapest, never with more attention than the padded batch
    (:func:`packed_order`, ``vlcohort/training/row_layout.py``; the micro-batch's rows
    are then encoded in the layout's order); a batch that packing would shrink by less
    than 1 - :data:`PACK_MIN_SAVING` stays padded, in its own order. ``packing`` False,
    ``tokens`` 0: the padded batches of before packing existed.

    ``shared_prefix``: where the family can (``Adapter.can_share_prefix``), each
    micro-batch, with the same rows, becomes one unit per distinct prompt (the prompt
    once, then its completions: ``vlcohort/training/shared_prefix.py``), used when it
    costs at most :data:`PACK_MIN_SAVING` of the batch it replaces (token positions and
    attention pairs, ``shared_prefix.use_shared``); token-budget micro-batches then keep
    each prompt's rows together, at their shared cost (:func:`shared_token_micro_batches`).
    """
    G = rollouts.group_size
    N = len(rollouts.completions)
    pack = packing and agent.adapter.can_pack(agent.model)
    share = shared_prefix and agent.adapter.can_share_prefix(agent.model)
    one_row = str(getattr(agent.adapter.options, "attn_implementation", "")).startswith("flash")
    prompt_len = prompt_tokens(agent, rendered, rollouts) if tokens > 0 or (pack and not one_row) else []
    if tokens > 0 and share:
        groups: list = shared_token_micro_batches(prompt_len, [len(c) for c in rollouts.completions],
                                                  G, tokens, mini or N)
    elif tokens > 0:
        groups = token_micro_batches(row_lengths(prompt_len, rollouts), tokens, mini or N)
    else:
        groups = [slice(start, min(N, start + size)) for start in range(0, N, size)]
    pair_cost = attention_pair_cost(agent.model.config) if (pack and not one_row) or share else 0.0
    out = []
    for rows in groups:
        own_rows = rows  # the shared batch's rows, in their own order (packing may reorder)
        width = 0  # pack_training's row width: 0, rows no wider than the longest sequence
        if pack and not one_row:
            rows, width = packed_order(rows, prompt_len, rollouts, pair_cost)
        index = row_indices(rows)
        prompts = agent.adapter.encode_prompts([rendered[n // G] for n in index])
        completions = (rollouts.completions[rows] if isinstance(rows, slice)
                       else [rollouts.completions[n] for n in index])
        batch = agent.adapter.encode_training(prompts, completions)
        if packing:  # the G rollouts of a prompt share its images: one tower pass each
            copies = image_copies([n // G for n in index], [len(r.images) for r in rendered])
            batch = agent.adapter.share_images(batch, copies)
        if pack:
            packed = agent.adapter.pack_training(agent.model, batch, None if one_row else width)
            if packed.inputs["input_ids"].numel() <= PACK_MIN_SAVING * batch.inputs["input_ids"].numel():
                batch = packed
        shared = (shared_batch(agent.adapter, agent.model, rendered, rollouts,
                               row_indices(own_rows), batch, pair_cost, PACK_MIN_SAVING)
                  if share else None)
        if shared is not None:
            rows, batch = own_rows, shared
        out.append((rows, batch.to(device) if device is not None else batch))
    return out


def packed_order(rows, prompt_len: Sequence[int], rollouts: Rollouts, pair_cost: float):
    """A micro-batch's rows in the order to pack them, and the row width to pack at
    (``Adapter.pack_training``'s next fit over that order rebuilds the layout
    ``row_layout.choose_layout`` picks); ``(rows, 0)`` unchanged when packing would save
    less than 1 - :data:`PACK_MIN_SAVING` (the batch stays padded, in its own order).
    ``prompt_len``: each prompt's real tokens (:func:`prompt_tokens`)."""
    G = rollouts.group_size
    index = row_indices(rows)
    comp = [len(rollouts.completions[n]) for n in index]
    lengths = [prompt_len[n // G] + c for n, c in zip(index, comp)]
    padded = max(prompt_len[n // G] for n in index) + max(1, max(comp))  # the padded batch's L
    layout = choose_layout(lengths, padded, pair_cost)
    order, width = order_and_width(layout, lengths)
    if len(layout) * width > PACK_MIN_SAVING * len(index) * padded:
        return rows, 0
    if order == sorted(order):
        return rows, width
    return torch.tensor([index[i] for i in order], dtype=torch.long), width


def image_copies(prompts: Sequence[int], n_images: Sequence[int]) -> list[int]:
    """For each image of a batch whose rows come from ``prompts`` (``n_images[b]`` images
    each, in order), the index of the distinct image it is (numbered by first
    appearance): a prompt's G rows repeat its images."""
    seen: dict[tuple[int, int], int] = {}
    return [seen.setdefault((b, k), len(seen)) for b in prompts for k in range(n_images[b])]


def update_micro_batches(agent: Agent, rendered: Sequence[RenderedPrompt], rollouts: Rollouts,
                         g: GRPOConfig, device: torch.device | None) -> list[tuple[Any, Any]]:
    """:func:`micro_batches` as ``grpo`` sets them (``micro_batch_seqs``,
    ``micro_batch_tokens``, ``packing``, ``mini_batch_seqs``): every pass of a step uses it.
    Token-budget micro-batches are refused in an agent group of several ranks (world size
    / agents, known only here): each rank would form its own number of micro-batches."""
    layout = getattr(agent, "layout", None)
    if g.micro_batch_tokens > 0 and layout is not None and getattr(layout, "ranks_per_agent", 1) > 1:
        raise ConfigError(f"grpo.micro_batch_tokens={g.micro_batch_tokens} with "
                          f"{layout.ranks_per_agent} ranks per agent: ranks would form unequal "
                          "numbers of micro-batches; set grpo.micro_batch_tokens=0")
    return micro_batches(agent, rendered, rollouts, g.micro_batch_seqs, device,
                         tokens=g.micro_batch_tokens, packing=g.packing, mini=g.mini_batch_seqs,
                         shared_prefix=getattr(g, "shared_prefix", False))


def row_indices(rows) -> list[int]:
    """The rollout rows of a micro-batch (a slice or a LongTensor of indices), in order."""
    if isinstance(rows, slice):
        return list(range(rows.start, rows.stop))
    return [int(n) for n in rows]


def n_rows(rows) -> int:
    """How many sequences a micro-batch holds."""
    return rows.stop - rows.start if isinstance(rows, slice) else int(rows.numel())


def prompt_tokens(agent: Agent, rendered: Sequence[RenderedPrompt],
                  rollouts: Rollouts | None = None) -> list[int]:
    """Real tokens of each prompt, images expanded: read from the prompt batch the engine
    generated from (``rollouts.prompts``, the HF engine's: the same encoding, each prompt
    repeated G times) when there is one, else each prompt encoded alone, once."""
    known = getattr(rollouts, "prompts", None)
    mask = None if known is None else known.inputs.get("attention_mask")
    if mask is not None and mask.shape[0] == len(rendered) * rollouts.group_size:
        return [int(n) for n in mask[:: rollouts.group_size].sum(-1).tolist()]
    return [int(agent.adapter.encode_prompts([r]).inputs["attention_mask"].sum()) for r in rendered]


def row_lengths(prompt_len: Sequence[int], rollouts: Rollouts) -> list[int]:
    """Real tokens of each rollout row: its prompt's (``prompt_len``) plus its completion's."""
    G = rollouts.group_size
    return [prompt_len[n // G] + len(c) for n, c in enumerate(rollouts.completions)]


def row_tokens(agent: Agent, rendered: Sequence[RenderedPrompt], rollouts: Rollouts) -> list[int]:
    """Real tokens of each rollout row: its prompt's plus its completion's."""
    return row_lengths(prompt_tokens(agent, rendered, rollouts), rollouts)


def token_micro_batches(lengths: Sequence[int], budget: int, mini: int) -> list[torch.Tensor]:
    """Rows grouped into micro-batches of at most ``budget`` tokens (``lengths[n]`` each),
    never across a mini-batch (rows ``[k mini, (k + 1) mini)``), balanced: within a
    mini-batch, ceil(total / budget) micro-batches to start with, sequences taken longest
    first, each into the least-loaded micro-batch it fits in, a new one when none has
    room (longest-processing-time-first scheduling). A sequence longer than the budget
    gets a micro-batch of its own. Returns each micro-batch's rows (ascending, so a
    prompt's rollouts stay together), in order of their first row."""
    N = len(lengths)
    return _by_first_row([b for start in range(0, N, mini)
                          for b in _balanced([(lengths[n], [n]) for n in range(start, min(N, start + mini))],
                                             budget)])


def shared_token_micro_batches(prompt_len: Sequence[int], completion_len: Sequence[int], G: int,
                               budget: int, mini: int) -> list[torch.Tensor]:
    """:func:`token_micro_batches` for shared-prefix updates: a prompt's rows of a
    mini-batch stay together, costing what the shared layout runs, the prompt's
    ``prompt_len[p]`` tokens once plus its completions' ``completion_len[n]`` (row n
    belongs to prompt n // G). A group over the budget is cut, in row order, into parts
    that each fit (each part pays the prompt again; a row over the budget alone goes
    alone); the parts are then balanced as rows are. The per-row split would deal a
    group's equal-length rows round robin, one completion per prompt in each micro-batch,
    leaving nothing to share."""
    N = len(completion_len)
    out: list[list[int]] = []
    for start in range(0, N, mini):
        parts: list[tuple[int, list[int]]] = []  # (shared cost, rows)
        rows = list(range(start, min(N, start + mini)))
        for p in dict.fromkeys(n // G for n in rows):
            cost, part = prompt_len[p], []
            for n in (r for r in rows if r // G == p):
                if part and cost + completion_len[n] > budget:
                    parts.append((cost, part))
                    cost, part = prompt_len[p], []
                part.append(n)
                cost += completion_len[n]
            parts.append((cost, part))
        out.extend(_balanced(parts, budget))
    return _by_first_row(out)


def _balanced(items: list[tuple[int, list[int]]], budget: int) -> list[list[int]]:
    """Items (cost, rows) into bins of at most ``budget`` cost, longest-processing-time
    first: ceil(total / budget) bins to start with, items taken costliest first (ties in
    their order), each into the least-loaded bin it fits in, a new bin when none has
    room; an item over the budget alone gets a bin of its own. Each bin's rows ascending."""
    k = max(1, math.ceil(sum(c for c, _ in items) / budget))
    bins: list[list[int]] = [[] for _ in range(k)]
    loads = [0] * k
    for cost, rows in sorted(items, key=lambda it: -it[0]):
        fits = [b for b in range(len(bins)) if not bins[b] or loads[b] + cost <= budget]
        if not fits:
            bins.append([])
            loads.append(0)
            fits = [len(bins) - 1]
        b = min(fits, key=lambda i: loads[i])
        bins[b].extend(rows)
        loads[b] += cost
    return [sorted(b) for b in bins if b]


def _by_first_row(bins: list[list[int]]) -> list[torch.Tensor]:
    """Micro-batches as LongTensors, in order of their first row."""
    return [torch.tensor(b, dtype=torch.long) for b in sorted(bins, key=lambda b: b[0])]


def pad_to(t: torch.Tensor, T: int) -> torch.Tensor:
    """[n, t] -> [n, T], zero-padded on the right."""
    return t if t.shape[1] == T else torch.nn.functional.pad(t, (0, T - t.shape[1]))


# --------------------------------------------------------------------------- token statistics


@dataclass(frozen=True)
class OldLogprobs:
    """The policy's no-grad log-probs of an agent's trained rollouts before this step's
    update, made by an earlier pass of the step (an intrinsic reward's
    :func:`token_stats`, the reward-side KL's :func:`kl_reward`) and reused by
    :func:`update_agent` instead of a pass of its own."""

    logprobs: torch.Tensor  # [N, T]
    batches: list | None = None  # the encoded micro-batches they were computed on


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

    def old(self) -> OldLogprobs:
        """Its log-probs as the update's old log-probs, with the batches they came from."""
        return OldLogprobs(self.logprobs, self.batches)

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
    mbs = update_micro_batches(agent, rendered, rollouts, g, next(agent.model.parameters()).device)
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

    def same_count(self, n: int, what: str) -> int:
        """``n``, checked to be the same on every rank taking this update (here: one)."""
        return n

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

    def same_count(self, n: int, what: str) -> int:
        R = self.layout.ranks_per_agent
        if R > 1 and round(self.layout.group_sum(float(n), what)) != n * R:
            raise RuntimeError(f"the ranks of agent {self.agent.name!r}'s group hold different "
                               f"numbers of {what}; each rank needs rows of every one")
        return n

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
    mask: torch.Tensor  # [N, T] the loss's tokens: real, finite rollout log-prob (and not
    # truncated, with mask_truncated_completions)
    old: torch.Tensor | None  # [N, T] old log-probs (None: on-policy, from each forward)
    ref: torch.Tensor | None  # [N, T] reference log-probs (None: no KL loss term)
    mini_batches: list  # [M] lists of indices into ``batches``: one optimizer step each
    denoms: list  # [M] the loss normaliser of each mini-batch: a 0-dim tensor, or [K] one
    # per micro-batch where the aggregation normalises each (bnpo; :func:`step_normaliser`),
    # or K tensors [n_k], one per row (grpo.view_loss=sum: each wording aggregated alone)
    is_weights: grpo.ISWeights | None = None  # the whole batch's IS weights, when the
    # mode needs them before the first step (``full_batch_is``); None: per micro-batch


@dataclass
class UpdateTotals:
    """An update's statistics, summed over the optimizer steps it applied: a step skipped
    for a non-finite loss adds nothing, not even the micro-batches before the bad one."""

    steps: int = 0  # optimizer steps applied
    skipped: int = 0  # optimizer steps skipped for a non-finite loss
    sums: dict = field(default_factory=dict)  # stat -> sum over applied steps
    entropy: float = 0.0  # sum of the policy's token entropies, first epoch's forwards
    entropy_tokens: float = 0.0  # the completion tokens they cover

    def add_step(self, step: dict[str, float]) -> None:
        self.steps += 1
        for k, v in step.items():
            self.sums[k] = self.sums.get(k, 0.0) + v

    def means(self) -> dict[str, float]:
        """Each statistic's mean over the applied steps (nothing when none was applied)."""
        return {k: v / self.steps for k, v in self.sums.items()} if self.steps else {}


#: ``grpo.policy_loss`` statistics an update logs, each the mean over its applied optimizer
#: steps of the step's sequence-weighted mean over its micro-batches.
STEP_STATS = ("clip_frac", "clip_frac_low", "clip_frac_high", "ppo_kl", "kl")


def kl_in_loss(g: GRPOConfig) -> bool:
    """Whether the loss holds a KL term: ``kl_coef > 0`` and the KL is not charged to the
    reward instead (``kl_in_reward``, :func:`kl_reward`)."""
    return g.kl_coef > 0 and not g.kl_in_reward


def trains_without_advantage(g: GRPOConfig) -> bool:
    """Whether an update whose advantages are all 0 still has a gradient: the KL loss term
    (the surrogate is 0 on every token, the step pulls the policy towards the reference
    alone). TRL and verl take that step too: their loss always holds the KL term."""
    return kl_in_loss(g)


def update_agent(agent: Agent, rendered: Sequence[RenderedPrompt], rollouts: Rollouts,
                 advantages: torch.Tensor, g: GRPOConfig, temperature: float,
                 length_norm: int, old: OldLogprobs | None = None,
                 groups: Sequence[int] | None = None) -> dict[str, float]:
    """One optimizer step per mini-batch and PPO epoch on this agent's rollouts, then the
    new weights pushed into the agent's rollout engine; returns its metrics
    (``weight_push_s``: the push's seconds, a timing the caller moves out of the agent's
    metrics).

    ``advantages`` [N] per sequence. Each epoch splits the rollouts into mini-batches of
    ``grpo.mini_batch_seqs`` sequences (0: the whole batch), one optimizer step each,
    normalised by that mini-batch's own token (or sequence) count, its micro-batches'
    gradients accumulated (verl's ``ppo_mini_batch_size`` and micro-batches): with M
    mini-batches the clip acts from the second step on, even at ``ppo_epochs = 1``.

    The "old" log-probs are the policy's before this step's update. With one optimizer
    step in all (one epoch, one mini-batch) the policy has not moved when each
    micro-batch is first evaluated, so old = logp.detach() of that very forward pass (one
    model pass saved, as TRL does); with more steps a no-grad pass computes them before
    the first, unless the caller already made one (an intrinsic reward's
    :func:`token_stats`, the reward-side KL's :func:`kl_reward`) and passes them as
    ``old`` (:class:`OldLogprobs`): the same numbers, no extra pass.
    The IS weights compare old with the sampler's log-probs. Micro-batch losses use their
    mini-batch's normaliser, so their gradients add up to the mini-batch gradient
    (``grpo.loss_agg=bnpo``: each its own token count x the step's K micro-batches, so
    the step averages the K micro-batch token means, TRL's ``bnpo``). A
    non-finite loss skips that optimizer step; the logged loss and statistics are means
    over the steps applied (none applied: only ``skipped_updates``, ``lr`` and the IS
    statistics are logged). ``policy_entropy``: the token-mean entropy of the policy over
    the first epoch's forwards (no extra pass).

    ``groups`` [n]: each prompt's loss group (``rewards.Reward.loss_groups``; Co-rewarding-I:
    0 the question as asked, 1 its rephrasing), read under ``grpo.view_loss=sum``: the
    loss is then the sum over groups of ``grpo.loss_agg``'s aggregation of each group's
    rows alone (:func:`step_normaliser`, ``grpo.group_denominators``); ignored under
    ``joint`` (one aggregation over every row, the default).
    """
    opt = optimizer_step(agent, g)
    row_groups = loss_groups(g, groups, rollouts)
    ub = update_batch(agent, rendered, rollouts, advantages, g, temperature, opt, old, row_groups)
    agent.model.train()
    totals = UpdateTotals()
    is_parts: list[tuple[dict, float]] = []
    for epoch in range(g.ppo_epochs):
        for minib, denom in zip(ub.mini_batches, ub.denoms):
            minibatch_step(agent, ub, minib, denom, g, temperature, length_norm, opt, totals,
                           is_parts if epoch == 0 else None)
    agent.optimizer.zero_grad(set_to_none=True)
    agent.model.eval()
    pushed = time.perf_counter()
    agent.engine.update_weights(agent.model)
    out = {**totals.means(), "weight_push_s": time.perf_counter() - pushed,
           "skipped_updates": totals.skipped, "lr": agent.optimizer.param_groups[0]["lr"]}
    if totals.entropy_tokens > 0:
        out["policy_entropy"] = totals.entropy / totals.entropy_tokens
    out.update(merge_is_stats(is_parts))
    return out


def loss_groups(g: GRPOConfig, groups: Sequence[int] | None, rollouts: Rollouts) -> torch.Tensor | None:
    """[N] each rollout row's loss group under ``grpo.view_loss=sum`` (``groups`` [n] per
    prompt, repeated over its G rows); None under ``joint``. ``sum`` without groups is an
    error: only a round of two wordings (reward.source cross_view_vote, method
    co_rewarding_i) hands them to the update."""
    if getattr(g, "view_loss", "joint") != "sum":
        return None
    G, N = rollouts.group_size, len(rollouts.completions)
    if groups is None or len(groups) * G != N:
        raise ConfigError("grpo.view_loss=sum: this agent's rollouts come without wording "
                          "groups; only a reward source whose round holds both wordings "
                          "(cross_view_vote, method co_rewarding_i) hands them to the update. "
                          "Set grpo.view_loss=joint")
    return torch.tensor([int(v) for v in groups], dtype=torch.long).repeat_interleave(G)  # [N]


def update_batch(agent: Agent, rendered: Sequence[RenderedPrompt], rollouts: Rollouts,
                 advantages: torch.Tensor, g: GRPOConfig, temperature: float,
                 opt: OptimizerStep, cached: OldLogprobs | None,
                 groups: torch.Tensor | None = None) -> UpdateBatch:
    """Micro-batches, mini-batches, masks, the no-grad old / reference log-probs of an
    update, and each mini-batch's loss normaliser (``groups`` [N]: each row's loss group,
    :func:`loss_groups`)."""
    device = next(agent.model.parameters()).device  # rollouts come on the CPU
    N, T = len(rollouts.completions), rollouts.logprobs.shape[1]
    rollout_logp = rollouts.logprobs.to(device)  # [N, T]
    batches = cached.batches if cached is not None else None
    mbs = batches if batches is not None else update_micro_batches(agent, rendered, rollouts,
                                                                   g, device)
    comp_mask = completion_mask(mbs, N, T, device)  # [N, T]
    kept = comp_mask  # [N, T] the completion tokens the loss can keep
    if g.mask_truncated_completions:  # cut at max_new_tokens: out of the loss and its
        finished = torch.tensor(rollouts.finished, dtype=comp_mask.dtype, device=device)  # [N]
        kept = comp_mask * finished[:, None]  # normaliser (TRL's mask_truncated_completions)
    mask = kept * torch.isfinite(rollout_logp).float()  # NaN / inf rollout tokens out
    minis = mini_batches(mbs, g.mini_batch_seqs or N)
    old = None if cached is None else cached.logprobs.to(device)
    ref = None
    with torch.no_grad(), agent.autocast():
        if (g.ppo_epochs * len(minis) > 1 or full_batch_is(g)) and old is None:  # before
            old = policy_logprobs(agent, mbs, T, temperature)  # the first step
        if kl_in_loss(g):
            ref = reference_logprobs(agent, mbs, T, temperature)
    is_w = None
    if full_batch_is(g):
        # over the loss's tokens: is_batch_norm's mean weight 1 is over what the loss keeps
        is_w = grpo.importance_weights(old, rollout_logp, kept, level=g.is_level,
                                       mode=g.is_mode, cap=g.is_cap, low=g.is_low,
                                       high=g.is_high, floor=g.is_min, batch_norm=g.is_batch_norm)
        mask = mask * is_w.keep  # rejected tokens leave the loss and its normalisers
    if groups is not None:
        n_groups = opt.same_count(1 + int(groups.max()), "wording groups")
        denoms = [step_normaliser(mask, mbs, m, g.loss_agg, opt, groups.to(device), n_groups)
                  for m in minis]
    else:
        denoms = [step_normaliser(mask, mbs, m, g.loss_agg, opt) for m in minis]
    return UpdateBatch(mbs, advantages.to(device), rollout_logp, comp_mask, mask, old, ref,
                       minis, denoms, is_w)


def step_normaliser(mask: torch.Tensor, mbs: list, minib: list[int], agg: str,
                    opt: OptimizerStep, groups: torch.Tensor | None = None,
                    n_groups: int | None = None) -> torch.Tensor | list[torch.Tensor]:
    """The loss normaliser of one optimizer step, the mini-batch ``minib`` (indices into
    ``mbs``), over the loss's tokens ``mask`` [N, T]: a 0-dim tensor, the whole
    mini-batch's count (the agent group's under DeepSpeed, ``opt.normaliser``), shared by
    its micro-batches; or, for an aggregation normalised per micro-batch (``bnpo``,
    ``grpo.micro_batch_denominators``), a [K] tensor, micro-batch j of the K getting
    K x its own token count. K and the counts are this rank's own: DeepSpeed's gradient
    average over the group's ranks supplies TRL's 1 / ranks.

    ``groups`` [N] (``grpo.view_loss=sum``): K per-row normalisers [n_k] instead, each
    group's rows aggregated as a step of their own and the groups' losses summed
    (``grpo.group_denominators``; a whole-step count through ``opt.normaliser``, per
    group)."""
    if groups is not None:
        return grpo.group_denominators([mask[mbs[k][0]] for k in minib],
                                       [groups[_rows_index(mbs[k][0], groups.device)] for k in minib],
                                       agg, n_groups, opt.normaliser)
    if grpo.AGGREGATIONS[agg].per_micro_batch:
        return grpo.micro_batch_denominators([mask[mbs[k][0]] for k in minib], agg)
    return opt.normaliser(grpo.aggregate_denominator(mask[rows_of(mbs, minib)], agg))


def _rows_index(rows, device):
    """A micro-batch's rows as an index of a [N] tensor on ``device``."""
    return rows if isinstance(rows, slice) else torch.as_tensor(rows, device=device)


def micro_denominator(denom, j: int):
    """Micro-batch ``j``'s normaliser from its mini-batch's (:func:`step_normaliser`): a
    0-dim tensor is shared, else its own entry (a number, or its rows' [n_j])."""
    if isinstance(denom, torch.Tensor) and denom.dim() == 0:
        return denom
    return denom[j]


def full_batch_is(g: GRPOConfig) -> bool:
    """Whether the IS weights must be computed on the whole batch before the first step:
    ``rejection`` changes the loss normalisers, which the first micro-batch already needs,
    and ``is_batch_norm`` divides by the whole batch's mean weight. Both then need the old
    log-probs up front (a no-grad pass, when no earlier pass made them); the other modes
    weigh each token by itself and take old from each micro-batch's forward."""
    return g.is_mode != "off" and (g.is_mode == "rejection" or g.is_batch_norm)


def completion_mask(mbs: list, N: int, T: int, device) -> torch.Tensor:
    """[N, T] 1 on the real completion tokens of the micro-batches ``mbs``."""
    comp_mask = torch.zeros(N, T, device=device)  # [N, T]
    for rows, tb in mbs:
        comp_mask[rows] = pad_to(tb.completion_mask.float(), T)
    return comp_mask


def mini_batches(mbs: list, size: int) -> list[list[int]]:
    """The micro-batches ``mbs`` grouped into mini-batches of ``size`` sequences (their
    indices, in order): micro-batch k goes to mini-batch ``first row // size``
    (``grpo.mini_batch_seqs`` is a multiple of ``micro_batch_seqs``, config_checks; a
    token-budget micro-batch never crosses a mini-batch, :func:`token_micro_batches`)."""
    groups: dict[int, list[int]] = {}
    for k, (rows, _) in enumerate(mbs):
        groups.setdefault(row_indices(rows)[0] // size if not isinstance(rows, slice)
                          else rows.start // size, []).append(k)
    return list(groups.values())


def rows_of(mbs: list, minib: list[int]):
    """The rows a mini-batch covers: a slice when its micro-batches are consecutive
    slices, else a LongTensor of its rows."""
    if all(isinstance(mbs[k][0], slice) for k in minib):
        return slice(mbs[minib[0]][0].start, mbs[minib[-1]][0].stop)
    return torch.cat([torch.as_tensor(row_indices(mbs[k][0]), dtype=torch.long) for k in minib])


def policy_logprobs(agent: Agent, mbs: list, T: int, temperature: float) -> torch.Tensor:
    """[N, T] the policy's log-probs of every micro-batch, as it stands (call under no_grad:
    the "old" log-probs)."""
    return by_rows(mbs, [pad_to(agent.logprobs(tb, temperature), T) for _, tb in mbs])


def by_rows(mbs: list, parts: list[torch.Tensor]) -> torch.Tensor:
    """[N, T] from each micro-batch's [n, T] rows: concatenated when the micro-batches are
    consecutive slices, else each written at its rows (token-budget micro-batches, packed
    ones in their layout's order)."""
    if all(isinstance(rows, slice) for rows, _ in mbs):
        return torch.cat(parts)
    N = sum(p.shape[0] for p in parts)
    out = parts[0].new_zeros((N, *parts[0].shape[1:]))
    for (rows, _), part in zip(mbs, parts):
        out[rows if isinstance(rows, slice) else rows.to(out.device)] = part
    return out


def reference_logprobs(agent: Agent, mbs: list, T: int, temperature: float) -> torch.Tensor:
    """[N, T] the reference's log-probs of every micro-batch (call under no_grad): the
    run's starting weights (``training.agent.reference_model``; LoRA: the base model with
    its adapters disabled)."""
    with agent.reference_context():
        return by_rows(mbs, [pad_to(completion_logprobs(
            agent.adapter, agent.ref_forward_model, tb, temperature), T) for _, tb in mbs])


@dataclass
class KLReward:
    """The reward-side KL penalty of one agent's rollouts (``grpo.kl_in_reward``)."""

    penalty: torch.Tensor  # [N] kl_coef x sum over the completion's tokens of old - ref
    kl: float  # mean per-token k1 over all completion tokens (logged as ``kl``)
    old: OldLogprobs  # the old log-probs [N, T] and their encoded batches, reused by the update


def kl_reward(agent: Agent, rendered: Sequence[RenderedPrompt], rollouts: Rollouts,
              g: GRPOConfig, temperature: float, cached: OldLogprobs | None = None) -> KLReward:
    """The KL penalty charged to each completion's reward instead of the loss: the reward
    becomes r_i - kl_coef x sum_t (old_logp - ref_logp)_t over completion i's tokens,
    BEFORE group normalisation (verl's ``use_kl_in_reward`` with its default ``kl``
    estimator, k1; the loss then holds no KL term).

    The SUM over tokens, as verl: it subtracts kl_coef x k1 from every token's reward and
    its GRPO outcome advantage sums the token rewards (``compute_grpo_outcome_advantage``:
    ``scores = token_level_rewards.sum(-1)``). The sum of the token log-ratios is the
    log-ratio of the whole completion, an unbiased estimate of the sequence-level
    KL(pi || ref) that the KL-regularised objective E[r] - beta KL subtracts; a mean would
    charge a long completion's divergence at a per-token rate (a length-normalised
    objective, not that one). A k1 penalty in the reward has the right gradient
    (REINFORCE on -k1), where k1 as a loss term has none.

    old_logp: the policy before this step's update, in eval mode and without gradient (a
    reward is data); ``cached`` reuses an intrinsic reward's pass. The returned ``old``
    hands old and the batches to :func:`update_agent`, so the update makes no pass of its
    own for them.
    """
    device = next(agent.model.parameters()).device
    N, T = len(rollouts.completions), rollouts.logprobs.shape[1]
    batches = cached.batches if cached is not None else None
    mbs = batches if batches is not None else update_micro_batches(agent, rendered, rollouts,
                                                                   g, device)
    comp_mask = completion_mask(mbs, N, T, device)  # [N, T]
    with torch.no_grad(), agent.autocast():
        old = (cached.logprobs.to(device) if cached is not None
               else policy_logprobs(agent, mbs, T, temperature))  # [N, T]
        ref = reference_logprobs(agent, mbs, T, temperature)  # [N, T]
    k1 = grpo.kl_penalty(old, ref, "k1") * comp_mask  # [N, T], 0 on padding
    penalty = g.kl_coef * k1.sum(dim=1)  # [N]
    kl = float(k1.sum() / comp_mask.sum().clamp(min=1.0))
    return KLReward(penalty=penalty.cpu(), kl=kl, old=OldLogprobs(old, mbs))


def minibatch_step(agent: Agent, ub: UpdateBatch, minib: list[int], denom: torch.Tensor,
                   g: GRPOConfig, temperature: float, length_norm: int, opt: OptimizerStep,
                   totals: UpdateTotals, is_parts: list | None) -> None:
    """One optimizer step on one mini-batch (``minib``: indices into ``ub.batches``): a
    forward and backward per micro-batch with the mini-batch's normaliser ``denom`` (0-dim;
    or [K] / K per-row tensors, micro-batch j's ``denom[j]``: :func:`step_normaliser`), then
    the step; a non-finite loss on any rank of the update discards the step and adds
    nothing to ``totals``. ``is_parts`` (first epoch only) collects the IS statistics;
    the first epoch's forwards also give the policy's token entropies."""
    T = ub.rollout_logp.shape[1]
    seqs = sum(n_rows(ub.batches[k][0]) for k in minib)
    step: dict[str, float] = {"loss": 0.0}  # this step's statistics, added once applied
    opt.begin()
    for j, k in enumerate(minib):
        rows, tb = ub.batches[k]
        with agent.autocast():
            if is_parts is not None:
                logp, entropy = agent.logprobs_and_entropy(tb, temperature)
                totals.entropy += float((pad_to(entropy, T) * ub.comp_mask[rows]).sum())
                totals.entropy_tokens += float(ub.comp_mask[rows].sum())
            else:
                logp = agent.logprobs(tb, temperature)
        logp = pad_to(logp, T)  # [n, T]
        old_mb = logp.detach() if ub.old is None else ub.old[rows]  # [n, T]
        weights = None
        if ub.is_weights is not None:  # the whole batch's (update_batch)
            weights = ub.is_weights.weights[rows]  # [n, T]
            if is_parts is not None and not is_parts:  # its statistics, once
                is_parts.append((ub.is_weights.stats, float(ub.comp_mask.sum())))
        elif g.is_mode != "off":
            is_w = grpo.importance_weights(  # masks and counts NaN/inf itself
                old_mb, ub.rollout_logp[rows], ub.comp_mask[rows], level=g.is_level,
                mode=g.is_mode, cap=g.is_cap, low=g.is_low, high=g.is_high, floor=g.is_min)
            weights = is_w.weights
            if is_parts is not None:
                is_parts.append((is_w.stats, float(ub.comp_mask[rows].sum())))
        loss, st = grpo.policy_loss(
            logp, old_mb, ub.advantages[rows], ub.mask[rows], clip_low=g.clip_low,
            clip_high=g.clip_high, is_weights=weights,
            ref_logp=None if ub.ref is None else ub.ref[rows],
            kl_coef=g.kl_coef if kl_in_loss(g) else 0.0, kl_kind=g.kl_kind, agg=g.loss_agg,
            denom=micro_denominator(denom, j), length_norm=length_norm,
            loss_kind=g.policy_loss, clip_ratio_c=g.clip_ratio_c)
        if opt.any_rank(not bool(torch.isfinite(loss))):
            opt.discard()
            totals.skipped += 1
            return
        opt.backward(loss, last=j == len(minib) - 1)
        share = n_rows(rows) / seqs
        step["loss"] += float(loss.detach())
        for key in STEP_STATS:
            if key in st:
                step[key] = step.get(key, 0.0) + st[key] * share
    norm = opt.finish()
    step["grad_norm"] = float(norm if norm is not None else float("nan"))
    totals.add_step(step)


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
