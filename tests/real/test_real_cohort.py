"""A Co-RL cohort of two real pretrained LMs of two families, end to end on CPU: agent A
is SmolLM2-135M-Instruct (``llama``, its chat template, full fine-tune), agent B is
Gemma-3-270M base (``gemma3_text``, no chat template: the r1_zero prompt format, LoRA),
each rewarded by agreement with the other's majority vote on a small text math file with
boxed gold solutions (``tests/data/real_math.jsonl``, the ``math`` preset).

One straight 2-step run (checkpoints at steps 1 and 2) is shared by the tests here:

- exact resume: the run folder as it stood after step 1, resumed, gives the straight run's
  step-2 metrics and weights bit for bit;
- ``vlcohort export`` of each agent reloads with ``AutoModelForCausalLM`` and gives the
  policy's logits (the LoRA agent merged);
- the base model's prompt format is said in the run's first lines.

Small on purpose (B = 2 prompts, G = 2 rollouts, 24 new tokens): the answers are read as
the last number (a 24-token completion rarely reaches a ``\\boxed{}``), ties are broken
(``reward.tie=first``) and a format term rewards a readable answer, so rewards vary within
groups and the agents update (checked: a resume test whose weights never moved could not
fail).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vlcohort.cli import main
from vlcohort.monitoring.metrics import read_metrics

DATA = Path(__file__).resolve().parents[1] / "data" / "real_math.jsonl"

COHORT = [
    f"data.path={DATA}", "data.preset=math",
    "agents=[{name: A, path: 'gguf:smollm2-135m-instruct'}, "
    "{name: B, path: 'gguf:gemma3-270m', lora_rank: 8, lora_alpha: 16}]",
    "prompt.instruction=Put the final answer within \\boxed{}.",
    "reward.answer_style=last_number", "reward.tie=first", "reward.format_weight=0.5",
    "rollout.prompts_per_step=2", "rollout.rollouts_per_prompt=2",
    "rollout.max_new_tokens=24", "grpo.micro_batch_seqs=4",
    "optim.lr=1e-5", "optim.warmup_ratio=0", "log.plot=false", "log.progress=false",
    "run.seed=0", "run.steps=2", "checkpoint.every=1", "checkpoint.keep_last=2",
]


def _deterministic(records):
    return [{k: v for k, v in r.items() if not k.startswith("timing/")} for r in records]


@pytest.fixture(scope="module")
def straight(tmp_path_factory, smollm2_path, gemma3_path):
    """The straight 2-step run: (its folder, what it printed)."""
    run = tmp_path_factory.mktemp("real_cohort") / "straight"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["train", *COHORT, f"run.output_dir={run}"])
    assert code == 0, out.getvalue()[-3000:]
    return run, out.getvalue()


def test_the_base_models_prompt_format_is_said_in_the_first_lines(straight):
    run, printed = straight
    lines = printed.splitlines()
    said = [i for i, line in enumerate(lines) if line.startswith("# prompt format:")]
    assert said, printed[:3000]
    line = lines[said[0]]
    assert "A chat (the checkpoint's template)" in line, line
    assert "B r1_zero (auto: the checkpoint has no chat template)" in line, line
    assert all("step" not in x.lower() or x.startswith("#") for x in lines[: said[0]]), \
        "the prompt format was said only after training began"


def test_both_families_train_and_update(straight, smollm2_path):
    """Each agent took an update (rewards varied within a group at some step): A's full
    weights left the pretrained ones, B's LoRA up-projections left their zero start."""
    run, _ = straight
    recs = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in recs] == [1, 2]
    for name in ("A", "B"):
        assert any(r.get(f"agent/{name}/loss") is not None for r in recs), name
    base = load_file(Path(smollm2_path) / "model.safetensors")
    a2 = load_file(run / "checkpoints/step-2/A/model.safetensors")
    assert any(not torch.equal(base[k], a2[k]) for k in base), "A never moved"
    b2 = load_file(run / "checkpoints/step-2/B/adapter_model.safetensors")
    ups = [v for k, v in b2.items() if "lora_B" in k]
    assert ups and any(v.abs().sum() > 0 for v in ups), "B's adapter never moved"


def _as_after_step_1(straight_run: Path, dest: Path) -> Path:
    """``dest``: the run folder as it stood when step 1's checkpoint was complete (its
    config, metrics up to step 1, ``latest`` -> step-1). The checkpoint files are hard
    links (read only by the resume; a later save writes new files)."""
    dest.mkdir()
    shutil.copy2(straight_run / "config.yaml", dest / "config.yaml")
    first = (straight_run / "metrics.jsonl").read_text().splitlines()[0]
    (dest / "metrics.jsonl").write_text(first + "\n")
    (dest / "checkpoints").mkdir()
    shutil.copytree(straight_run / "checkpoints/step-1", dest / "checkpoints/step-1",
                    copy_function=os.link)
    (dest / "checkpoints/latest").write_text("step-1\n")
    return dest


def test_resume_after_step_1_equals_the_straight_run(straight, tmp_path):
    run, _ = straight
    parted = _as_after_step_1(run, tmp_path / "parted")
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["train", "--resume", str(parted)]) == 0
    want, got = read_metrics(run / "metrics.jsonl"), read_metrics(parted / "metrics.jsonl")
    assert any(want[1].get(f"agent/{n}/loss") is not None for n in "AB"), \
        "no agent updated after the resume point: weak test"
    assert [r["step"] for r in got] == [1, 2]
    assert _deterministic(got) == _deterministic(want)
    for name, weights in (("A", "model.safetensors"), ("B", "adapter_model.safetensors")):
        wa = load_file(run / "checkpoints/step-2" / name / weights)
        wb = load_file(parted / "checkpoints/step-2" / name / weights)
        assert wa.keys() == wb.keys(), name
        assert all(torch.equal(wa[k], wb[k]) for k in wa), f"agent {name}: weights differ"


@pytest.mark.parametrize("name", ["A", "B"])
def test_export_reloads_with_auto_model_and_equals_the_policy(straight, tmp_path, name):
    """The exported folder (B: LoRA merged) loads with ``AutoModelForCausalLM`` alone and
    gives the logits of the policy as the trainer resumes it from the checkpoint."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vlcohort.config import load_config
    from vlcohort.processors import adapter_for
    from vlcohort.recipes.run_problems import load_problems
    from vlcohort.training.agent import build_agent

    run, _ = straight
    out = tmp_path / name
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["export", str(run), "--agent", name, "--out", str(out)]) == 0
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    AutoTokenizer.from_pretrained(out)
    exported = adapter_for(out)
    assert type(exported).__name__ == "TextLMAdapter"

    cfg = load_config(run / "config.yaml")
    mc = next(m for m in cfg.agents if m.name == name)
    policy = build_agent(mc, cfg, weights_from=str(run / "checkpoints/step-2" / name))
    policy.model.eval()
    assert exported.prompt_format == policy.adapter.prompt_format
    problems = load_problems(cfg)[:2]
    sp, ins = cfg.prompt.system_prompt, cfg.prompt.instruction
    a = policy.adapter
    want = a.encode_prompts([a.render(p, sp, ins) for p in problems]).inputs
    got = exported.encode_prompts([exported.render(p, sp, ins) for p in problems]).inputs
    assert all(torch.equal(want[k], got[k]) for k in ("input_ids", "attention_mask"))
    with torch.no_grad():
        lp = policy.model(**want).logits  # [B, P, V]
        le = model(**got).logits
    assert lp.shape == le.shape
    # merging reassociates W x + s B (A x) into (W + s B A) x: float noise, 4e-4 at most
    # measured on logits of +-30 through Gemma's 18 layers; the plain agent's weights are
    # the checkpoint's bit for bit
    tol = 2e-3 if mc.lora_rank else 1e-4
    assert torch.allclose(lp, le, atol=tol, rtol=1e-4), float((lp - le).abs().max())
    gen = json.loads((out / "generation_config.json").read_text())
    eos = gen["eos_token_id"] if isinstance(gen["eos_token_id"], list) else [gen["eos_token_id"]]
    assert set(eos) == set(a.stop_token_ids())
