"""``bench/shared_prefix.py`` (shared-prefix vs packed updates): a tiny run of it. The
benchmark's timings are not checked (a shared CPU); that each setup's shared mode runs
shared, on fewer positions, with the packed mode's log-probs, is."""

from __future__ import annotations

import re

import pytest

from tests.helpers.bench import load_script
from tests.helpers.cache import _tiny_cache  # noqa: F401 - an autouse fixture, imported to apply here


@pytest.fixture(scope="module")
def bench():
    return load_script("shared_prefix")


def _rows(out: str, setup: str) -> dict[str, tuple[int, str]]:
    """mode -> (positions, shared micro-batches) of one setup's table."""
    block = out.split(f"\n({setup}) ", 2)[-1].split("\n\n")[0]
    return {m.group(1): (int(m.group(2)), m.group(3))
            for m in re.finditer(r"^  (packed|shared)\s+(\d+)\s+(\d+/\d+)\s", block, re.M)}


def test_quick_run_shares_every_setup_with_the_packed_logprobs(bench, capsys):
    assert bench.main(["--quick", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    diff = float(re.search(r"^max_logprob_diff=([\d.e+-]+)$", out, re.M).group(1))
    assert diff < 1e-5
    ratios = dict(re.findall(r"^update_time_ratio_shared_vs_packed_(\w+)=([\d.]+)$", out, re.M))
    assert set(ratios) == {"real_lengths", "real_step_shape", "prompt_heavy", "image_qwen2_5_vl"}
    for setup in ("a2: real_step shape", "b: prompt-heavy", "c: image 112 px, qwen2_5_vl"):
        rows = _rows(out, setup)
        assert rows["packed"][1] == "0/1" and rows["shared"][1] == "1/1", setup
        assert rows["shared"][0] < rows["packed"][0], setup  # the prompt once, not G times


def test_mid_size_checkpoint_is_a_qwen2_5_vl_of_the_stated_shape(bench):
    """(c2)'s model: the tiny processor, a 576-wide language model of the asked depth."""
    from transformers import AutoConfig

    folder = bench.mid_qwen2_5_vl(2)
    config = AutoConfig.from_pretrained(folder)
    assert config.model_type == "qwen2_5_vl"
    text = config.text_config
    assert (text.hidden_size, text.num_hidden_layers, text.num_attention_heads) == (576, 2, 9)
    assert config.vision_config.out_hidden_size == 576
    assert (folder / "preprocessor_config.json").exists() or (folder / "processor_config.json").exists()
    assert bench.mid_qwen2_5_vl(2) == folder  # built once
