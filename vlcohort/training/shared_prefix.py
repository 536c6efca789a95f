"""Shared-prefix updates (``grpo.shared_prefix``): a group's prompt computed once per
micro-batch, forward and backward, instead of once per completion.

GRPO samples G completions of one prompt. The unshared update runs a sequence per
completion, so the prompt's tokens go through the model G times. Here a micro-batch's
sequences are regrouped into *units*: a prompt's tokens once, then up to k of the
completions of that prompt which this micro-batch holds (k chosen by
:func:`units_per_prompt`: usually all of them, fewer when long completions would make
one unit's attention cost more than the prompt copies it saves), each continuing the
prompt's positions and kept from its siblings by an explicit 4-D attention mask
(``Adapter.encode_shared_prefix``; a prompt's images, and so its vision-tower input,
once per unit; M-RoPE ids the model's own). A completion's log-probs are those it has alone
(exact in real arithmetic: its queries see the same keys at the same relative
positions); the first completion token of every sibling is predicted by the prompt's
last token, whose hidden state the log-prob pass gathers once per sibling, so the
backward adds every sibling's gradient into the prompt's activations, as the unshared
update adds G copies' (Prefix Grouper, arXiv 2506.05433).

The micro-batches keep the rows the unshared update gives them (``micro_batch_seqs``
slices; with a token budget, ``update.shared_token_micro_batches`` keeps a prompt's rows
together): the loss and its normalisers are the unshared update's, and a unit never
crosses a micro-batch because it is built inside one. A micro-batch the layout would not
make cheaper (one completion per prompt) keeps its unshared batch (:func:`use_shared`).

Where it applies: ``Adapter.can_share_prefix`` (the family's ``shared_prefix`` flag,
sdpa or eager attention, layers of full or sliding-window attention,
``processors.base.prefix_masks_fit``). Elsewhere the update is the unshared one, whatever
``grpo.shared_prefix`` says.
"""

from __future__ import annotations

from typing import Sequence

from vlcohort.processors import RenderedPrompt
from vlcohort.processors.base import next_fit
from vlcohort.rollout.base import Rollouts
from vlcohort.training.row_layout import layout_cost


def shared_batch(adapter, model, rendered: Sequence[RenderedPrompt], rollouts: Rollouts,
                 index: Sequence[int], unshared=None, pair_cost: float = 0.0,
                 min_saving: float = 1.0):
    """The shared-prefix ``TrainingBatch`` of the rollout rows ``index`` (in that order):
    units of a prompt (row n belongs to prompt n // G) and up to k of its completions
    here, k the same for every prompt, chosen by :func:`units_per_prompt`; units numbered
    by first appearance. Its ``completion_ids`` / ``completion_mask`` rows follow
    ``index``, as the unshared batch's do.

    ``unshared``: the batch it would replace; None is returned, before any mask is
    built, when the shared layout would cost more than ``min_saving`` x that batch
    (:func:`use_shared`)."""
    G = rollouts.group_size
    prompts = list(dict.fromkeys(n // G for n in index))  # distinct prompts, in order
    encoded = adapter.encode_prompts([rendered[p] for p in prompts])
    prompt_len = [int(k) for k in encoded.inputs["attention_mask"].sum(1).tolist()]
    members = [[n for n in index if n // G == p] for p in prompts]
    comp_len = [[len(rollouts.completions[n]) for n in m] for m in members]
    k, (R, W) = units_per_prompt(prompt_len, comp_len, pair_cost)
    if unshared is not None and not use_shared((R, W), unshared, min_saving, pair_cost):
        return None
    units = [(u, m[j: j + k]) for u, m in enumerate(members) for j in range(0, len(m), k)]
    if len(units) > len(prompts):  # a prompt split over several units: each its own copy
        encoded = adapter.encode_prompts([rendered[prompts[u]] for u, _ in units])
    number = {n: v for v, (_, rows) in enumerate(units) for n in rows}
    return adapter.encode_shared_prefix(model, encoded, [rollouts.completions[n] for n in index],
                                        [number[n] for n in index])


def units_per_prompt(prompt_len: Sequence[int], completion_len: Sequence[Sequence[int]],
                     pair_cost: float) -> tuple[int, tuple[int, int]]:
    """How many of a prompt's completions one unit holds, k, and the layout's [R, W].

    Prompt u (``prompt_len[u]`` tokens) with completions of ``completion_len[u]`` tokens
    becomes ceil(n_u / k) units, each the prompt then up to k completions in order; units
    fill rows of the widest unit's width by next fit (``Adapter.encode_shared_prefix``).
    A materialised mask costs every (query, key) pair of a row, so one unit of many long
    completions is one wide row whose attention (R x W^2 pairs at ``pair_cost`` each,
    ``row_layout.attention_pair_cost``) can outweigh the prompt tokens it saves; the k
    of least R x W + pair_cost x R x W^2 is taken (ties: the larger k, fewer prompt
    copies). k = the most completions of a prompt: each prompt once."""
    most = max((len(c) for c in completion_len), default=1) or 1
    best: tuple[float, int, tuple[int, int]] | None = None
    for k in range(most, 0, -1):
        lengths = [p + sum(c[j: j + k]) for p, c in zip(prompt_len, completion_len)
                   for j in range(0, max(1, len(c)), k)]
        rows = next_fit(lengths, max(lengths))
        cost, positions, _ = layout_cost(rows, lengths, pair_cost)
        if best is None or cost < best[0]:
            best = (cost, k, (len(rows), positions // len(rows)))
    return best[1], best[2]


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
