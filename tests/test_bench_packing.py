"""``bench/packing.py`` (packed vs padded updates): its length draw and a tiny run of it.
The benchmark's timings are not checked (a shared CPU); its log-prob agreement and its
padding accounting are."""

from __future__ import annotations

import re
import statistics

import pytest

from tests.helpers.bench import load_script


@pytest.fixture(scope="module")
def bench():
    return load_script("packing")


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def test_long_tail_lengths_are_clipped_and_long_tailed(bench):
    lengths = bench.long_tail_lengths(512, seed=0)
    assert min(lengths) >= 10 and max(lengths) <= 1500
    # log-normal, median 120, log-sd 1: the sample median near 120, the top a few x it
    assert 100 <= statistics.median(lengths) <= 145
    assert max(lengths) > 8 * statistics.median(lengths)
    assert lengths == bench.long_tail_lengths(512, seed=0)


def test_real_completions_are_the_recorded_replies_tokenized(bench):
    from vlcohort.processors import adapter_for
    from vlcohort.processors.tiny import tiny_model_path

    tok = adapter_for(tiny_model_path("tiny:qwen2_5_vl")).tokenizer
    texts, source = bench.real_replies()
    assert len(texts) == 141 and "135 Bard" in source and "6 MathVerse" in source
    pool = bench.real_completions(tok, "<|im_end|>")
    end = tok.convert_tokens_to_ids("<|im_end|>")
    assert len(pool) == 141 and all(c[-1] == end for c in pool)
    assert tok.decode(pool[0][:-1]) == texts[0]  # the reply itself, not a stand-in
    lengths = sorted(map(len, pool))
    assert lengths[-1] > 3 * lengths[len(lengths) // 2]  # a tail: the longest ~4x the median
    assert all(len(c) <= 300 for c in bench.real_completions(tok, "<|im_end|>", cap=300))
    drawn = bench.draw_groups(pool, 4, 8, seed=0)
    assert len(drawn) == 32 and all(c in pool for c in drawn)
    assert drawn == bench.draw_groups(pool, 4, 8, seed=0) != bench.draw_groups(pool, 4, 8, seed=1)


def _table(out: str, setup: str) -> dict:
    """mode -> (packed mbs, one-pass-per-image mbs, padding share) of one setup's table."""
    block = out.split(f"\n({setup}) ", 2)[2].split("\n\n")[0]
    return {m.group(1).strip(): (m.group(2), m.group(3), float(m.group(4)))
            for m in re.finditer(r"^  ((?:padded|packed)[^/]*?)\s+(\d+/\d+)\s+(\d+/\d+)\s+([\d.]+)\s",
                                 block, re.M)}


def test_quick_run_prints_the_ratios_and_equal_logprobs(bench, capsys):
    assert bench.main(["--quick", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    ratio = float(re.search(r"^update_time_ratio_packed_vs_padded=([\d.]+)$", out, re.M).group(1))
    shared = float(re.search(r"^update_time_ratio_shared_vs_per_row_vision=([\d.]+)$", out, re.M).group(1))
    diff = float(re.search(r"^max_logprob_diff=([\d.e+-]+)$", out, re.M).group(1))
    assert ratio > 0 and shared > 0 and diff < 1e-5
    assert re.search(r"^real completions: .*135 Bard.* min \d+ / median [\d.]+ / max \d+ tokens$", out, re.M)
    real = _table(out, "b: real lengths")
    assert set(real) == {"padded", "packed", next(k for k in real if k.startswith("packed, "))}
    assert real["padded"][:2] == ("0/1", "0/1") and real["packed"][1] == "1/1"
    synthetic = _table(out, "b2: log-normal lengths (synthetic)")
    assert synthetic["padded"][2] > 0.1  # long-tailed lengths: much of a padded batch is padding
    assert synthetic["packed"][0] == "1/1" and synthetic["packed"][2] < synthetic["padded"][2]
    vision = _table(out, "c: shared vision")
    # the same batches, the vision tower once per rollout against once per distinct image
    assert vision["packed, vision per row"][1] == "0/1" and vision["packed, vision per image"][1] == "1/1"


def test_logprob_gap_counts_a_lost_token_as_infinite(bench):
    """A token finite in one mode and -inf in the other is a disagreement (it printed as a
    nan that ``max`` then dropped); -inf in both, or anything on padding, is not."""
    import torch

    inf = float("inf")
    a = torch.tensor([[0.0, -inf, 1.0]])
    assert bench.logprob_gap(a, torch.tensor([[0.0, -inf, 1.5]]), torch.ones(1, 3)) == 0.5
    assert bench.logprob_gap(a, torch.tensor([[0.0, -2.0, 1.0]]), torch.ones(1, 3)) == inf
    assert bench.logprob_gap(a, torch.tensor([[0.0, -2.0, 1.0]]), torch.tensor([[1.0, 0.0, 1.0]])) == 0.0
