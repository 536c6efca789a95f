"""Shared-prefix updates (``grpo.shared_prefix``): a group's prompt computed once per
micro-batch, forward and backward, instead of once per completion.

GRPO samples G completions of one prompt. The unshared update runs a sequence per
completion, so the prompt's tokens go through the model G times. Here a micro-batch's
sequences are regrouped into *units*, one per distinct prompt: the prompt's tokens once,
then the completions of that prompt which this micro-batch holds, each continuing the
prompt's positions and kept from its siblings by an explicit 4-D attention mask
(``Adapter.encode_shared_prefix``; a prompt's images, and so its vision-tower input,
once per unit; M-RoPE ids the model's own). A completion's log-probs are those it has alone
(exact in real arithmetic: its queries see the same keys at the same relative
positions); the first completion token of every sibling is predicted by the prompt's
last token, whose hidden state the log-prob pass gathers once per sibling, so the
backward adds every sibling's gradient into the prompt's activations, as the unshared
update adds G copies' (Prefix Grouper, arXiv 2506.05433).

The micro-batches keep the rows the unshared update gives them (``micro_batch_seqs``
slices, or the token budget's groups): the loss, its normalisers and every per
micro-batch aggregation are the unshared update's, and a unit never crosses a
micro-batch because it is built inside one. A micro-batch that holds one completion per
prompt has nothing to share and keeps its unshared batch (:func:`use_shared`).

Where it applies: ``Adapter.can_share_prefix`` (the family's ``shared_prefix`` flag,
sdpa or eager attention, full attention in every layer). Elsewhere the update is the
unshared one, whatever ``grpo.shared_prefix`` says.
"""

from __future__ import annotations

from typing import Sequence

from vlcohort.processors import RenderedPrompt
from vlcohort.processors.base import next_fit
from vlcohort.rollout.base import Rollouts


def shared_batch(adapter, model, rendered: Sequence[RenderedPrompt], rollouts: Rollouts,
                 index: Sequence[int], unshared=None, pair_cost: float = 0.0,
                 min_saving: float = 1.0):
    """The shared-prefix ``TrainingBatch`` of the rollout rows ``index`` (in that order):
    one unit per distinct prompt (row n belongs to prompt n // G), units numbered by
    first appearance. Its ``completion_ids`` / ``completion_mask`` rows follow ``index``,
    as the unshared batch's do.

    ``unshared``: the batch it would replace; None is returned, before any mask is
    built, when the shared layout would cost more than ``min_saving`` x that batch
    (:func:`use_shared`)."""
    G = rollouts.group_size
    prompts = list(dict.fromkeys(n // G for n in index))  # distinct prompts, in order
    number = {p: u for u, p in enumerate(prompts)}
    encoded = adapter.encode_prompts([rendered[p] for p in prompts])
    completions = [rollouts.completions[n] for n in index]
    unit = [number[n // G] for n in index]
    if unshared is not None:
        lengths = [int(k) for k in encoded.inputs["attention_mask"].sum(1).tolist()]
        for n, u in zip(index, unit):
            lengths[u] += len(rollouts.completions[n])
        rows = next_fit(lengths, max(lengths))  # Adapter.encode_shared_prefix's layout
        W = max(sum(lengths[u] for u in r) for r in rows)
        if not use_shared((len(rows), W), unshared, min_saving, pair_cost):
            return None
    return adapter.encode_shared_prefix(model, encoded, completions, unit)


def use_shared(shared, unshared, min_saving: float, pair_cost: float = 0.0) -> bool:
    """Whether the shared batch (or its [R, W] shape) replaces the unshared one (padded
    or packed): when its cost is at most ``min_saving`` x the unshared batch's, each
    costing its R x W token positions plus ``pair_cost``
    (``row_layout.attention_pair_cost``) per attention pair, R x W^2 (a materialised
    mask computes every pair, masked or not). A micro-batch with one completion per
    prompt shares nothing and would only pay the mask; a unit of many long completions
    is one wide row whose attention can outweigh the prompt it saves."""
    def cost(batch) -> float:
        R, W = batch if isinstance(batch, tuple) else batch.inputs["input_ids"].shape
        return R * W + pair_cost * R * W * W
    return cost(shared) <= min_saving * cost(unshared)
