"""One launch over several processes: agent groups, DeepSpeed ZeRO over gloo (CPU).

Each test launches real worker processes (``torchrun``, or plain processes with the
launcher's environment) running the real trainer on tiny real models: a few steps each.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from vlcohort.monitoring.metrics import read_metrics
from vlcohort.processors import adapter_for
from vlcohort.processors.tiny import tiny_model_path

pytestmark = pytest.mark.distributed

HERE = Path(__file__).resolve().parent

# Two agents of two families, peer votes; a format term makes rewards vary within groups
# even for random tiny models (some samples end in a capital letter, some do not), so
# every step really updates both agents.
COHORT = [
    "method=co_rl",
    "agents=[{name: A, path: 'tiny:qwen2_5_vl'}, {name: B, path: 'tiny:internvl3_5'}]",
    "reward.answer_style=last_letter", "reward.format_weight=0.5", "reward.tie=first",
    "reward.min_share=0", "data.tasks=[shape_colour, shape_kind]", "data.num_problems=16",
    "rollout.prompts_per_step=2", "rollout.rollouts_per_prompt=8", "rollout.max_new_tokens=16",
    "grpo.micro_batch_seqs=8", "grpo.kl_coef=0", "optim.lr=1e-3", "optim.warmup_ratio=0",
    "log.plot=false", "log.tensorboard=false", "run.seed=4", "arms=[]", "eval.every=0",
    "run.threads=1", "distributed.timeout_s=60",
]


def _env() -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    return env


def _torchrun(nproc: int, args: list[str], timeout: int = 400) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={nproc}", *args]
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=timeout,
                          cwd=HERE.parent)


def _strip(records):
    return [{k: v for k, v in r.items() if not k.startswith("timing/")} for r in records]


def test_two_ranks_one_agent_each_match_the_single_process_run(tmp_path):
    """ZeRO-2, 2 processes x 1 agent: votes, rewards and first-step losses equal the
    single-process run's with the same seed; checkpoints load with from_pretrained."""
    single, multi = tmp_path / "single", tmp_path / "multi"
    steps = ["run.steps=2"]
    ref = subprocess.run([sys.executable, "-m", "vlcohort", "train", *COHORT, *steps,
                          f"run.output_dir={single}"], env=_env(), capture_output=True,
                         text=True, timeout=400, cwd=HERE.parent)
    assert ref.returncode == 0, ref.stderr[-3000:]
    out = _torchrun(2, ["-m", "vlcohort", "train", *COHORT, *steps, f"run.output_dir={multi}",
                        "distributed.ranks_per_agent=1", "distributed.zero_stage=2"])
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]

    a, b = read_metrics(single / "metrics.jsonl"), read_metrics(multi / "metrics.jsonl")
    assert [r["step"] for r in b] == [1, 2]  # one metrics.jsonl, one line per step
    sa, sb = _strip(a), _strip(b)
    assert set(sa[0]) == set(sb[0])
    for name in ("A", "B"):
        assert f"agent/{name}/loss" in sa[0], "no update at step 1: weak test"
    # step 1: rollouts, answers, votes, rewards and the loss before any update
    for key, value in sa[0].items():
        if key.endswith("/grad_norm"):
            assert sb[0][key] == pytest.approx(value, rel=1e-4), key
        else:
            assert sb[0][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    # the update itself agrees too: step 2 samples from the updated policies
    for key, value in sa[1].items():
        if key.endswith(("/reward/mean", "/parse_rate", "/completion_len")) or key.startswith("cohort/"):
            assert sb[1][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key

    for name, family in (("A", "qwen2_5_vl"), ("B", "internvl")):
        folder = multi / "checkpoints" / "step-2" / name
        assert (folder / "zero").is_dir()
        model = adapter_for(folder).load_model()  # transformers from_pretrained
        assert model.config.model_type == family
        w_multi = load_file(folder / "model.safetensors")
        w_single = load_file(single / "checkpoints" / "step-2" / name / "model.safetensors")
        assert w_multi.keys() == w_single.keys()
        for k in w_single:
            torch.testing.assert_close(w_multi[k], w_single[k], rtol=1e-4, atol=1e-5)


def test_four_ranks_two_per_agent_zero3_keep_group_weights_identical(tmp_path):
    """ZeRO-3, 2 agents x 2 ranks: runs, logs one line per step, and after the steps each
    agent's whole weights are identical on both ranks of its group."""
    out_json, run_dir = tmp_path / "digests.json", tmp_path / "run"
    out = _torchrun(4, [str(HERE / "dist_weights_driver.py"), str(out_json), *COHORT,
                        "run.steps=3", f"run.output_dir={run_dir}",
                        "distributed.ranks_per_agent=2", "distributed.zero_stage=3"],
                    timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    ranks = {d["rank"]: d["digests"] for d in json.loads(out_json.read_text())}
    assert sorted(ranks) == [0, 1, 2, 3]
    assert ranks[0] == ranks[1] and list(ranks[0]) == ["A"]
    assert ranks[2] == ranks[3] and list(ranks[2]) == ["B"]
    records = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3]
    for n in ("A", "B"):
        assert any(r.get(f"agent/{n}/loss") for r in records), f"{n} never updated: weak test"
    # the ZeRO-3 checkpoint holds whole (gathered) weights that moved from the start
    for n, spec in (("A", "tiny:qwen2_5_vl"), ("B", "tiny:internvl3_5")):
        saved = load_file(run_dir / "checkpoints" / "step-3" / n / "model.safetensors")
        start = load_file(tiny_model_path(spec) / "model.safetensors")
        assert saved.keys() == start.keys()
        assert all(saved[k].shape == start[k].shape for k in start)
        assert any(not torch.equal(saved[k], start[k]) for k in start)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_dead_rank_makes_the_other_exit_with_a_clear_error(tmp_path):
    """Two ranks started without torchrun's supervision (as on two nodes): kill rank 1
    after step 1; rank 0 must exit on its own, non-zero, naming the failed collective."""
    run_dir = tmp_path / "run"
    port = _free_port()
    procs = []
    for rank in (0, 1):
        env = {**_env(), "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "vlcohort", "train", *COHORT, "run.steps=200",
             f"run.output_dir={run_dir}", "distributed.ranks_per_agent=1",
             "distributed.zero_stage=0", "distributed.timeout_s=30"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE.parent))
    metrics = run_dir / "metrics.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and all(p.poll() is None for p in procs):
        if metrics.is_file() and metrics.read_text().strip():
            break
        time.sleep(0.2)
    assert all(p.poll() is None for p in procs), "a rank ended before step 1 was logged"
    procs[1].send_signal(signal.SIGKILL)
    procs[1].wait()
    t0 = time.time()
    try:
        _, err = procs[0].communicate(timeout=120)
    except subprocess.TimeoutExpired:
        procs[0].kill()
        pytest.fail("rank 0 hung after rank 1 died")
    assert time.time() - t0 < 120
    assert procs[0].returncode != 0
    assert "collective" in err and "Another rank probably died" in err, err[-3000:]


def test_resume_under_the_same_launch_continues_exactly(tmp_path):
    """ZeRO-2, 2 ranks: 3 straight steps == 2 steps, then ``--resume`` for the third
    (weights, ZeRO optimizer partitions, LR schedule and data position all restored)."""
    straight, parted = tmp_path / "straight", tmp_path / "parted"
    # a constant schedule: a cosine's shape depends on run.steps, which the resume extends
    launch = ["distributed.ranks_per_agent=1", "distributed.zero_stage=2", "checkpoint.every=2",
              "optim.schedule=constant"]
    out = _torchrun(2, ["-m", "vlcohort", "train", *COHORT, *launch, "run.steps=3",
                        f"run.output_dir={straight}"])
    assert out.returncode == 0, out.stderr[-4000:]
    out = _torchrun(2, ["-m", "vlcohort", "train", *COHORT, *launch, "run.steps=2",
                        f"run.output_dir={parted}"])
    assert out.returncode == 0, out.stderr[-4000:]
    out = _torchrun(2, ["-m", "vlcohort", "train", "--resume", str(parted), "run.steps=3"])
    assert out.returncode == 0, out.stderr[-4000:]
    assert "resumed from" in out.stdout
    a, b = read_metrics(straight / "metrics.jsonl"), read_metrics(parted / "metrics.jsonl")
    assert [r["step"] for r in b] == [1, 2, 3]
    assert any(f"agent/{n}/loss" in a[2] for n in ("A", "B")), "no update at step 3: weak test"
    for key, value in _strip(a)[2].items():
        assert _strip(b)[2][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
    for n in ("A", "B"):
        wa = load_file(straight / "checkpoints" / "step-3" / n / "model.safetensors")
        wb = load_file(parted / "checkpoints" / "step-3" / n / "model.safetensors")
        for k in wa:
            torch.testing.assert_close(wb[k], wa[k], rtol=1e-5, atol=1e-6)


def test_the_embedded_demo_runs_as_two_processes(tmp_path):
    """The README's line ``torchrun --standalone --nproc_per_node 2 -m vlcohort train --set
    distributed.ranks_per_agent=1``, at a tiny scale: each rank warms up its own agent, both
    arms run over the same process groups, and the usual files come out."""
    run = tmp_path / "demo"
    scale = ["run.steps=2", "eval.every=2", "eval.problems_per_task=4", "log.plot=false",
             "agents.0.warmup.steps=3", "agents.0.warmup.uniform_steps=2",
             "agents.1.warmup.steps=3", "agents.1.warmup.uniform_steps=2",
             "data.num_problems=64", "rollout.prompts_per_step=2", f"run.output_dir={run}"]
    out = _torchrun(2, ["-m", "vlcohort", "train", "--set", "distributed.ranks_per_agent=1",
                        *scale], timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    for arm in ("co_rl", "ttrl"):
        records = read_metrics(run / arm / "metrics.jsonl")
        assert [r["step"] for r in records] == [0, 1, 2]  # step 0: held-out accuracy
        assert {"eval/A/all/acc", "eval/B/all/acc"} <= set(records[-1])
        for name in ("A", "B"):
            assert (run / arm / "checkpoints" / "step-2" / name / "model.safetensors").is_file()
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["methods"]) == {"co_rl", "ttrl"} and set(summary["agents"]) == {"A", "B"}
    assert (run / "warmup" / "A").is_dir() and (run / "warmup" / "B").is_dir()
