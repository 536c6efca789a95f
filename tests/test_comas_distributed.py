"""CoMAS (``method: comas``) under agent groups: one gloo rank per agent, DeepSpeed ZeRO per
agent, the discussion's texts all-gathered after each kind of turn
(``vlcohort/recipes/comas.py``, ``share_texts``).

Real worker processes (``torchrun``) run the real trainer on the tiny VLMs of
configs/comas_tiny.yaml, and their output is compared with the single-process run's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vlcohort.monitoring.metrics import read_metrics
from vlcohort.processors.tiny import tiny_model_path

pytestmark = pytest.mark.distributed

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "comas_tiny.yaml")
NAMES = ("qwen", "gemma", "internvl")
SPECS = ("tiny:qwen2_5_vl", "tiny:gemma3", "tiny:internvl3_5")
# A random tiny judge never writes a readable score, so every return is the -1 penalty and
# every advantage 0; the KL term in the loss still trains (trains_without_advantage), and
# weight decay moves step 1's weights off the reference, so step 2's KL has a gradient:
# both steps take real optimizer steps whose losses and gradient norms are compared.
# A constant schedule: a cosine's shape depends on run.steps, which the resume extends.
TRAIN = ["grpo.kl_coef=0.05", "optim.weight_decay=0.1", "optim.schedule=constant", "run.threads=1",
         "distributed.timeout_s=120"]
LAUNCH = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=3",
          "-m", "vlcohort", "train"]


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    return env


def _strip(records):
    return [{k: v for k, v in r.items() if not k.startswith("timing/")} for r in records]


def _turns(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "discussions.jsonl").read_text().splitlines()]


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=400, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """2 steps in one process and over 3 ranks (one per agent, ZeRO-2 on gloo)."""
    tmp = tmp_path_factory.mktemp("comas_dist")
    single, multi = tmp / "single", tmp / "multi"
    _run([sys.executable, "-m", "vlcohort", "train", CONFIG, *TRAIN, f"run.output_dir={single}"])
    _run([*LAUNCH, CONFIG, *TRAIN, f"run.output_dir={multi}", "distributed.ranks_per_agent=1"])
    return single, multi


def test_three_ranks_one_agent_each_match_the_single_process_run(runs):
    """3 agents over 3 ranks: the same discussions, word for word, and the same
    metrics.jsonl (scores, rewards, losses, gradient norms) as one process; one log line
    per step; each rank checkpoints its own agent, with the single run's weights."""
    single, multi = runs
    assert _turns(multi) == _turns(single)  # every agent's turns, once, in the same order
    a, b = _strip(read_metrics(single / "metrics.jsonl")), _strip(read_metrics(multi / "metrics.jsonl"))
    assert [r["step"] for r in b] == [1, 2]
    for ra, rb in zip(a, b):
        assert set(ra) == set(rb)
        for name in NAMES:
            assert f"agent/{name}/loss" in ra, "no update: weak test"
            assert f"agent/{name}/comas/judge_reward" in ra
        for key, value in ra.items():
            tol = 1e-4 if key.endswith("/grad_norm") else 1e-5
            assert rb[key] == pytest.approx(value, rel=tol, abs=1e-6), key
    assert any(a[1][f"agent/{n}/grad_norm"] > 0 for n in NAMES), "no gradient at step 2: weak test"

    for name, spec in zip(NAMES, SPECS):
        folder = multi / "checkpoints" / "step-2" / name
        assert (folder / "zero").is_dir()  # written by that agent's own rank, through DeepSpeed
        w_multi, w_single = load_file(folder / "model.safetensors"), load_file(
            single / "checkpoints" / "step-2" / name / "model.safetensors")
        start = load_file(tiny_model_path(spec) / "model.safetensors")
        assert w_multi.keys() == w_single.keys()
        # weights the forward never uses (gemma3's SigLIP pooling head) get no gradient:
        # torch's AdamW leaves them alone, ZeRO's flat partition still decays them
        used = [k for k in w_single if not torch.equal(w_single[k], start[k])]
        assert len(used) > len(w_single) // 2
        for k in used:
            torch.testing.assert_close(w_multi[k], w_single[k], rtol=1e-4, atol=1e-5)


def test_resume_over_three_ranks_continues_exactly(runs, tmp_path):
    """1 step over 3 ranks, then ``--resume`` for the second under the same launch: step
    2's discussions and metrics equal the straight 3-rank run's (weights, ZeRO optimizer
    states, data position restored on each agent's rank)."""
    _, straight = runs
    parted = tmp_path / "parted"
    _run([*LAUNCH, CONFIG, *TRAIN, "run.steps=1", f"run.output_dir={parted}",
          "distributed.ranks_per_agent=1"])
    out = _run([*LAUNCH, "--resume", str(parted), "run.steps=2"])
    assert "resumed from" in out.stdout
    assert _turns(parted) == _turns(straight)
    a, b = _strip(read_metrics(straight / "metrics.jsonl")), _strip(read_metrics(parted / "metrics.jsonl"))
    assert [r["step"] for r in b] == [1, 2]
    assert set(a[1]) == set(b[1])
    for key, value in a[1].items():
        assert b[1][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key


def test_several_ranks_per_agent_are_refused_in_one_line():
    """An agent group of 2 ranks would have to split one agent's turns of a discussion: a
    one-line ConfigError naming the key, before anything starts."""
    out = subprocess.run([sys.executable, "-m", "vlcohort", "train", CONFIG,
                          "distributed.ranks_per_agent=2", "run.output_dir=/nonexistent/x"],
                         env=_env(), capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode != 0
    assert "distributed.ranks_per_agent=2" in out.stderr and "one rank" in out.stderr


def test_an_automatic_split_into_two_ranks_per_agent_is_refused():
    """distributed.ranks_per_agent=0 (W / A) with 4 ranks for 2 agents: refused on every
    rank before any model is built, naming the launch to use instead."""
    two = "agents=[{name: A, path: 'tiny:qwen2'}, {name: B, path: 'tiny:qwen2'}]"
    cmd = [*LAUNCH, CONFIG, two, "run.output_dir=/nonexistent/x"]
    cmd[cmd.index("--nproc_per_node=3")] = "--nproc_per_node=4"
    out = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=200, cwd=ROOT)
    assert out.returncode != 0
    assert "method=comas under torchrun takes one rank per agent" in out.stderr + out.stdout
    assert "--nproc_per_node 2 with distributed.ranks_per_agent=1" in out.stderr + out.stdout
