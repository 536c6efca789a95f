"""``bench/gpu_step.py``: its full-size configs are the published architectures, its FLOP
count is the documented formula, and its ``--tiny`` mode runs the whole measured code path
(build, save, load through ``vlcohort.recipes.cohort.setup``, one cohort step) on the CPU."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_step.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("gpu_step", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_full_size_configs_are_the_published_models(bench):
    """Built on the meta device (no memory): Qwen2.5-VL-3B-Instruct has 3,754,622,976
    parameters (its model card: 3.75 B); InternVL3.5-2B 2.35 B = 0.3 B vision + 2.0 B text."""
    from transformers import (
        InternVLConfig,
        InternVLForConditionalGeneration,
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
    )

    q, i = bench.QWEN2_5_VL_3B, bench.INTERNVL3_5_2B
    with torch.device("meta"):
        qwen = Qwen2_5_VLForConditionalGeneration._from_config(Qwen2_5_VLConfig(
            text_config=q["text_config"], vision_config=q["vision_config"],
            tie_word_embeddings=q["tie_word_embeddings"]), dtype=torch.bfloat16)
        intern = InternVLForConditionalGeneration._from_config(InternVLConfig(
            vision_config=i["vision_config"], text_config=i["text_config"],
            downsample_ratio=i["downsample_ratio"], projector_hidden_act=i["projector_hidden_act"],
            tie_word_embeddings=i["tie_word_embeddings"]), dtype=torch.bfloat16)
    pq, pi = bench.param_counts(qwen), bench.param_counts(intern)
    assert pq["total"] == 3_754_622_976
    assert pq["vocab"] == pi["vocab"] == 151_936 and pq["hidden"] == pi["hidden"] == 2048
    assert round(pi["total"] / 1e9, 2) == 2.35 and round(pi["vision"] / 1e9, 1) == 0.3
    assert round((pi["decoder_no_embedding"] + 2 * pi["lm_head"]) / 1e9, 1) == 2.0  # untied head
    # roles add up: decoder + input embedding (tied: the head) + vision = everything
    assert pq["decoder_no_embedding"] + pq["lm_head"] + pq["vision"] == pq["total"]
    assert pi["decoder_no_embedding"] + 2 * pi["lm_head"] + pi["vision"] == pi["total"]


def test_flop_count_is_the_documented_formula(bench):
    p = {"decoder_no_embedding": 1000, "lm_head": 50, "vision": 300}
    t = {"prompt": 7, "completion": 3, "image": 2}
    per_pass = 1000 * (7 + 3) + 50 * 3 + 300 * 4 * 2
    assert bench.update_flops(p, t, ppo_epochs=1, logprob_passes=0) == 6 * per_pass
    assert bench.update_flops(p, t, ppo_epochs=2, logprob_passes=2) == (12 + 4) * per_pass


def test_padded_tokenizer_decodes_every_id():
    from vlcohort.processors.tiny import QWEN_VL_SPECIALS, train_byte_level_bpe

    tok = train_byte_level_bpe(["<|endoftext|>"] + QWEN_VL_SPECIALS, pad_to=4096)
    assert len(tok) == 4096 and len(set(tok.get_vocab().values())) == 4096
    assert tok.convert_tokens_to_ids("<|image_pad|>") >= 4096 - len(QWEN_VL_SPECIALS) - 1
    assert tok.decode([4000]).strip() in {f"{c}4000" for c in "ABCD"}
    with pytest.raises(ValueError, match="pad_to"):
        train_byte_level_bpe(["<|endoftext|>"], pad_to=10)


def test_tiny_mode_runs_one_step_and_reports(tmp_path):
    out = tmp_path / "tiny.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--steps", "1", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    for line in ("rollout (both agents)", "grading (answers, votes, rewards)", "update (both agents)",
                 "other (render prompts, metrics)", "generated tokens / s", "MFU vs 790 TFLOP/s bf16",
                 "peak GPU memory, step (GB)"):
        assert line in text, text
    assert "mfu=" in text and f"wrote {out}" in text
    res = json.loads(out.read_text())
    assert res["tiny"] and res["device"] == "cpu" and res["settings"]["engine"] == "hf"
    assert set(res["params"]) == {"qwen25vl3b", "internvl35_2b"}
    (step,) = res["steps"]
    for key in ("rollout_s", "grading_s", "update_s", "step_s", "generated_tokens_per_s", "mfu",
                "train_tflops_per_s", "peak_mem_gb", "rollout_share", "update_share"):
        assert key in step and key in res["summary"]
    assert step["rollout_s"] > 0 and step["update_s"] > 0
    shares = [step[f"{phase}_share"] for phase in ("rollout", "grading", "update", "other")]
    assert abs(sum(shares) - 1) < 1e-9 and min(shares) >= 0
    # the two agents each generated B x G completions of at most max_new_tokens, and trained
    B, G, T = (res["settings"][k] for k in ("prompts", "rollouts", "max_new_tokens"))
    for name, tokens in step["tokens"].items():
        assert tokens["sequences"] == B * G and 0 < tokens["completion"] <= B * G * T
        assert tokens["image"] > 0 and tokens["prompt"] > tokens["image"]
    assert step["generated_tokens"] == sum(t["completion"] for t in step["tokens"].values())
    assert step["agents_updated"], "no agent updated: the MFU path was not exercised"
    assert step["mfu"] > 0 and step["update_tflop"] > 0
    assert step["peak_mem_gb"] is None  # CPU: no GPU memory figure
