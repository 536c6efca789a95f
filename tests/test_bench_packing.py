"""``bench/packing.py`` (packed vs padded updates): its length draw and a tiny run of it.
The benchmark's timings are not checked (a shared CPU); its log-prob agreement and its
padding accounting are."""

from __future__ import annotations

import importlib.util
import re
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "packing.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_packing", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def test_quick_run_prints_the_ratio_and_equal_logprobs(bench, capsys):
    assert bench.main(["--quick", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    ratio = float(re.search(r"^update_time_ratio_packed_vs_padded=([\d.]+)$", out, re.M).group(1))
    diff = float(re.search(r"^max_logprob_diff=([\d.e+-]+)$", out, re.M).group(1))
    assert ratio > 0 and diff < 1e-5
    shares = {m.group(1).strip(): float(m.group(2))
              for m in re.finditer(r"^  (padded|packed[^\d]*\d* ?\w*)\s+\d+/\d+\s+([\d.]+)\s", out, re.M)}
    assert shares["padded"] > 0.1  # long-tailed lengths: much of a padded batch is padding
    assert shares["packed"] < shares["padded"]
