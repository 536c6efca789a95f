"""How the sequences of a packed micro-batch are laid out in rows.

``Adapter.pack_training`` fills rows by *next fit* in sequence order (per-image tensors
are concatenated in sequence order, so the order of the sequences is the order of the
images, and the packer never reorders them). Next fit in the rollouts' own order wastes
a row's tail whenever a long sequence follows a half-full row. The layout chosen here
is a *first-fit-decreasing* packing, handed to the packer as an order of the sequences
and a row width: the micro-batch is encoded in that order, and next fit over it rebuilds
exactly the first-fit-decreasing rows (:func:`order_and_width`).

Attention that materialises its mask (sdpa, eager) costs W^2 per row of width W, the
linear layers W per row, so the width is a trade: :func:`choose_layout` takes the
cheapest layout under a FLOP model of the language model (:func:`attention_pair_cost`),
never one whose attention costs more than the padded batch's (the padded batch bounds
memory and time alike). Pure functions; ``vlcohort/training/update.py`` uses them.
"""

from __future__ import annotations

import math
from typing import Sequence


def first_fit_decreasing(lengths: Sequence[int], width: int) -> list[list[int]]:
    """The sequences (indices into ``lengths``) in rows of at most ``width`` tokens:
    longest first, each into the first row it fits, a new row when none has room. Rows
    in the order they were opened, each row's sequences in the order they went in.

    A sequence longer than ``width`` gets a row of its own (callers pass
    ``width >= max(lengths)``)."""
    rows: list[list[int]] = []
    fill: list[int] = []
    for n in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        k = lengths[n]
        for r, f in enumerate(fill):
            if f + k <= width:
                rows[r].append(n)
                fill[r] += k
                break
        else:
            rows.append([n])
            fill.append(k)
    return rows


def order_and_width(rows: list[list[int]], lengths: Sequence[int]) -> tuple[list[int], int]:
    """The order to encode the sequences in, and the width to pack them at, so that
    next fit (the packer) rebuilds ``rows`` exactly.

    For rows from :func:`first_fit_decreasing` at width C it does: the first sequence of
    row j + 1 opened that row because it fitted no earlier row at the time, and rows only
    fill up, so it does not fit after row j's last sequence either; the width returned is
    the fullest row's (<= C), which every row fits."""
    order = [n for r in rows for n in r]
    width = max((sum(lengths[n] for n in r) for r in rows), default=0)
    return order, width


def attention_pair_cost(config) -> float:
    """Attention FLOPs per (query, key) pair over linear FLOPs per token, in the language
    model of ``config`` (a transformers config; a VLM's text config is read): per layer,
    QK^T and AV cost 4 x heads x head_dim per pair; the projections 2 x (their weights)
    per token, the gated MLP 2 x 3 x hidden x intermediate. Backward scales both alike.
    The embedding and LM head are left out (the LM head runs on real completion tokens
    only, however they are laid out). Used only to choose a layout: 0 when unknown."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    hidden = getattr(text, "hidden_size", None)
    heads = getattr(text, "num_attention_heads", None)
    inter = getattr(text, "intermediate_size", None)
    if not (hidden and heads and inter):
        return 0.0
    head_dim = getattr(text, "head_dim", None) or hidden // heads
    kv = getattr(text, "num_key_value_heads", None) or heads
    attn_width = heads * head_dim
    linear = 2 * (2 * hidden * attn_width + 2 * hidden * kv * head_dim + 3 * hidden * inter)
    return 4 * attn_width / linear


def layout_cost(rows: list[list[int]], lengths: Sequence[int], pair_cost: float) -> tuple[float, int, int]:
    """(cost, positions, attention pairs) of packing ``rows`` at their fullest row's width:
    R x W positions through the linear layers, R x W^2 pairs through attention."""
    W = max((sum(lengths[n] for n in r) for r in rows), default=0)
    positions, pairs = len(rows) * W, len(rows) * W * W
    return positions + pair_cost * pairs, positions, pairs


def choose_layout(lengths: Sequence[int], padded_width: int, pair_cost: float) -> list[list[int]]:
    """Rows for the sequences of one micro-batch (``lengths`` real tokens each), whose
    padded batch would be ``len(lengths)`` rows of ``padded_width``.

    For each row count R the first-fit-decreasing layout into R rows at the narrowest
    width bisection finds (from max(longest, ceil(total / R))), kept when its attention
    (R x W^2 pairs) is at most the padded batch's; of those, the cheapest under
    ``pair_cost`` (:func:`attention_pair_cost`), fewer pairs on a tie. The narrowest
    layout (rows no wider than the longest sequence) is always a candidate, so the
    result never costs more than it."""
    n = len(lengths)
    if n == 0:
        return []
    longest, total = max(lengths), sum(lengths)
    bound = n * padded_width * padded_width
    best = first_fit_decreasing(lengths, longest)
    cost, _, pairs = layout_cost(best, lengths, pair_cost)
    best_key = (cost, pairs)
    for R in range(1, len(best)):  # fewer rows than the narrowest layout: wider ones
        lo = max(longest, math.ceil(total / R))
        hi = math.isqrt(bound // R)  # the widest R rows whose attention stays in bound
        rows = None
        while lo <= hi:  # bisection for the narrowest width packing into R rows
            width = (lo + hi) // 2
            trial = first_fit_decreasing(lengths, width)
            if len(trial) <= R:
                rows, hi = trial, width - 1
            else:
                lo = width + 1
        if rows is not None:
            cost, _, pairs = layout_cost(rows, lengths, pair_cost)
            if (cost, pairs) < best_key:
                best, best_key = rows, (cost, pairs)
    return best
