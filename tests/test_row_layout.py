"""The row layout of packed micro-batches (vlcohort/training/row_layout.py): first fit
decreasing, handed to the packer's next fit as an order and a width, and the width
chosen under a FLOP model without ever exceeding the padded batch's attention."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vlcohort.processors.base import next_fit
from vlcohort.training.row_layout import (
    attention_pair_cost,
    choose_layout,
    first_fit_decreasing,
    layout_cost,
    order_and_width,
)

lengths_st = st.lists(st.integers(1, 600), min_size=1, max_size=40)


def _fills(rows, lengths):
    return [sum(lengths[n] for n in r) for r in rows]


@settings(max_examples=300, deadline=None)
@given(lengths_st, st.integers(0, 400))
def test_first_fit_decreasing_places_every_sequence_once_within_the_width(lengths, extra):
    width = max(lengths) + extra
    rows = first_fit_decreasing(lengths, width)
    assert sorted(n for r in rows for n in r) == list(range(len(lengths)))
    assert max(_fills(rows, lengths)) <= width
    # no two rows could merge: first fit never leaves room a later row's sequences fit in
    fills = _fills(rows, lengths)
    assert all(fills[i] + lengths[rows[j][0]] > width for j in range(1, len(rows)) for i in range(j))


@settings(max_examples=300, deadline=None)
@given(lengths_st, st.integers(0, 400))
def test_next_fit_over_the_order_rebuilds_the_layout(lengths, extra):
    """What makes the layout reach the packer: ``Adapter.pack_training`` only does next
    fit in sequence order (``processors.base.next_fit``, the function called here), so
    encoding in :func:`order_and_width`'s order at its width must give back exactly the
    first-fit-decreasing rows."""
    rows = first_fit_decreasing(lengths, max(lengths) + extra)
    order, width = order_and_width(rows, lengths)
    rebuilt = next_fit([lengths[n] for n in order], width)
    assert [[order[i] for i in r] for r in rebuilt] == rows


def test_first_fit_decreasing_beats_next_fit_in_the_rollouts_order():
    lengths = [500, 100, 450, 120, 60, 380]  # a long one after a half-full row, repeatedly
    assert len(next_fit(lengths, 500)) == 5
    assert len(first_fit_decreasing(lengths, 500)) == 4  # 500 | 450+ | 380+100 | 120+60


@settings(max_examples=200, deadline=None)
@given(lengths_st, st.integers(0, 300), st.sampled_from([0.0, 1 / 20000, 1 / 300, 1 / 30, 1.0]))
def test_the_chosen_layout_never_costs_more_attention_than_padding(lengths, over, pair_cost):
    padded = max(lengths) + over  # the padded batch: len(lengths) rows of this width
    rows = choose_layout(lengths, padded, pair_cost)
    assert sorted(n for r in rows for n in r) == list(range(len(lengths)))
    cost, positions, pairs = layout_cost(rows, lengths, pair_cost)
    assert pairs <= len(lengths) * padded * padded
    assert positions <= len(lengths) * padded
    narrow = first_fit_decreasing(lengths, max(lengths))
    assert cost <= layout_cost(narrow, lengths, pair_cost)[0] + 1e-9


def test_cheap_attention_widens_rows_and_dear_attention_keeps_them_narrow():
    lengths = [400, 300, 300, 200, 120, 80]  # 1400 tokens; padded: 6 x 400
    wide = choose_layout(lengths, 400, 0.0)  # linear layers only: fewest positions
    narrow = choose_layout(lengths, 400, 1.0)  # attention dominates: rows of the longest
    assert layout_cost(wide, lengths, 0.0)[1] < layout_cost(narrow, lengths, 0.0)[1]
    assert max(_fills(narrow, lengths)) == 400
    assert max(_fills(wide, lengths)) > 400
    assert len(wide) * max(_fills(wide, lengths)) ** 2 <= 6 * 400 * 400


def test_attention_pair_cost_of_qwen2_5_vl_3b_by_hand():
    """Qwen2.5-VL-3B's text model (published config.json): hidden 2048, 16 heads of 128,
    2 KV heads, MLP 11008. Per layer and token, the projections are 2 x (2048 x 2048 x 2
    + 2048 x 256 x 2) FLOPs and the MLP 2 x 3 x 2048 x 11008; a (query, key) pair costs
    4 x 2048 in QK^T and AV."""
    text = SimpleNamespace(hidden_size=2048, num_attention_heads=16, head_dim=128,
                           num_key_value_heads=2, intermediate_size=11008)
    config = SimpleNamespace(get_text_config=lambda decoder=True: text)
    linear = 2 * (2048 * 2048 * 2 + 2048 * 256 * 2) + 2 * 3 * 2048 * 11008
    assert attention_pair_cost(config) == pytest.approx(4 * 2048 / linear, rel=1e-12)
    assert 1 / 20000 < attention_pair_cost(config) < 1 / 15000  # attention is cheap at scale


def test_attention_pair_cost_of_a_real_config_class():
    from transformers import Qwen2Config

    config = Qwen2Config(hidden_size=64, intermediate_size=128, num_attention_heads=2,
                         num_key_value_heads=1)
    linear = 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 128)
    assert attention_pair_cost(config) == pytest.approx(4 * 64 / linear)
    assert attention_pair_cost(SimpleNamespace()) == 0.0  # unknown: layout by positions alone


def test_the_packer_builds_the_planned_rows_on_a_real_family(tmp_path, monkeypatch):
    """End to end on tiny Qwen2.5-VL (images, M-RoPE): each packed micro-batch has exactly
    the rows the layout planned, and fewer token positions than next fit in the rollouts'
    own order would give."""
    import torch

    from vlcohort.data.synthetic import make_dataset
    from vlcohort.processors import adapter_for
    from vlcohort.processors.tiny import tiny_model_path
    from vlcohort.rollout.base import Rollouts
    from vlcohort.training.update import micro_batches, prompt_tokens, row_indices

    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path))
    path = tiny_model_path("tiny:qwen2_5_vl")
    adapter = adapter_for(path)
    model = adapter.load_model().eval()
    problems = make_dataset(("shape_colour", "count_shapes"), n=3, seed=0)
    rendered = [adapter.render(p) for p in problems]
    G = 4
    g = torch.Generator().manual_seed(3)
    comps = [torch.randint(20, 200, (int(n),), generator=g).tolist()
             for n in (300, 40, 20, 280, 35, 260, 10, 15, 240, 30, 220, 25)]
    ro = Rollouts(prompts=None, completions=comps, texts=[""] * len(comps),
                  logprobs=torch.zeros(len(comps), 300), finished=[True] * len(comps), group_size=G)
    agent = SimpleNamespace(adapter=adapter, model=model)
    plen = prompt_tokens(agent, rendered)
    pair = attention_pair_cost(model.config)
    packed = micro_batches(agent, rendered, ro, 6, packing=True)
    reordered, saved = 0, 0
    for rows, tb in packed:
        index = sorted(row_indices(rows))
        lengths = [plen[n // G] + len(comps[n]) for n in index]
        padded = max(plen[n // G] for n in index) + max(len(comps[n]) for n in index)
        layout = choose_layout(lengths, padded, pair)
        assert tb.packed
        assert tuple(tb.inputs["input_ids"].shape) == (len(layout), max(_fills(layout, lengths)))
        naive = next_fit(lengths, max(lengths))  # the packer alone, in the rollouts' order
        saved += len(naive) * max(_fills(naive, lengths)) - tb.inputs["input_ids"].numel()
        reordered += row_indices(rows) != index
    assert reordered and saved > 0
    assert math.isfinite(pair) and pair > 0


def test_prompt_lengths_come_from_the_engines_prompt_batch(tmp_path, monkeypatch):
    """The HF engine's rollouts carry the prompt batch it generated from (each prompt G
    times, left-padded): its mask gives the prompts' lengths without encoding them again,
    equal to encoding each alone; a batch of another shape is not trusted."""
    import torch

    from vlcohort.data.synthetic import make_dataset
    from vlcohort.processors import adapter_for
    from vlcohort.processors.tiny import tiny_model_path
    from vlcohort.rollout.base import Rollouts
    from vlcohort.training.update import prompt_tokens

    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path))
    adapter = adapter_for(tiny_model_path("tiny:qwen2_5_vl"))
    agent = SimpleNamespace(adapter=adapter)
    problems = make_dataset(("shape_colour", "count_shapes"), n=3, seed=1)
    rendered = [adapter.render(p) for p in problems]
    G = 2
    batch = adapter.encode_prompts([r for r in rendered for _ in range(G)])

    def rollouts(prompts):
        return Rollouts(prompts=prompts, completions=[[5]] * (3 * G), texts=[""] * (3 * G),
                        logprobs=torch.zeros(3 * G, 1), finished=[True] * (3 * G), group_size=G)

    alone = prompt_tokens(agent, rendered)
    assert len(set(alone)) > 1  # prompts of different lengths: the padding is real
    assert prompt_tokens(agent, rendered, rollouts(batch)) == alone
    other = adapter.encode_prompts(rendered[:2])  # not N rows: encoded again, not misread
    assert prompt_tokens(agent, rendered, rollouts(other)) == alone
