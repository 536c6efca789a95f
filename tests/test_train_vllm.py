"""The trainer and ``vlcohort eval`` on a real vLLM engine (``@pytest.mark.vllm``: run by
``.ci/vllm-cpu`` on vLLM's CPU build; skipped where vLLM cannot run).

- A two-family cohort trains with ``rollout.engine=vllm``: one engine per agent, the
  weights pushed after every update. In fp32 the engine must follow the policy through
  every push (per-step rollout-vs-policy k3 at rounding level) while the policy moves.
- With bf16 rollouts and an fp32 policy the mismatch is real: the IS statistics show it,
  and the correction's weights are what the definition gives on vLLM's recorded log-probs.
- ``vlcohort eval --engine vllm`` answers as ``--engine hf`` does (greedy, fp32).
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from vlcohort.cli import main
from vlcohort.config import DEMO_RECIPE
from vlcohort.data.problems import Problem
from vlcohort.monitoring.metrics import read_metrics
from vlcohort.processors import adapter_for, tiny_model_path
from vlcohort.rollout.base import SamplingParams
from vlcohort.training import grpo
from vlcohort.training.logprobs import completion_logprobs

pytestmark = [pytest.mark.vllm, pytest.mark.usefixtures("vllm_env")]

# An intrinsic reward (INTUITOR's self-certainty) so that both random tiny agents get
# varied rewards, hence an update and a push, at every step (a vote or a gold reward of a
# random tiny model is mostly constant); the Co-RL vote on vLLM is the demo's
# (configs/demo_vllm.yaml, figures in the README).
COHORT = [str(DEMO_RECIPE), "method=intuitor",  # on the demo's settings (56 px pictures)
          "agents=[{name: A, path: 'tiny:qwen2_5_vl'}, {name: B, path: 'tiny:internvl3_5'}]",
          "reward.answer_style=last_letter", "data.tasks=[shape_colour, shape_kind]",
          "data.num_problems=16", "rollout.prompts_per_step=2", "rollout.rollouts_per_prompt=8",
          "rollout.max_new_tokens=8", "grpo.micro_batch_seqs=8", "optim.lr=1e-3",
          "optim.warmup_ratio=0", "log.plot=false", "log.tensorboard=false", "run.seed=3",
          "arms=[]", "eval.every=0", "reward.min_share=0", "grpo.kl_coef=0",
          "checkpoint.keep_last=1",
          "rollout.engine=vllm", "rollout.vllm.sleep_mode=false", "rollout.vllm.enforce_eager=true",
          "rollout.vllm.max_num_seqs=16", "rollout.vllm.kv_cache_memory_gib=0.25"]


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def agent_series(records, agent: str, key: str) -> list[float]:
    return [r[f"agent/{agent}/{key}"] for r in records if f"agent/{agent}/{key}" in r]


def test_cohort_trains_on_vllm_and_the_engine_follows_every_push(tmp_path):
    run = tmp_path / "run"
    assert main(["train", *COHORT, "run.steps=4", "rollout.vllm.dtype=float32",
                 f"run.output_dir={run}"]) == 0
    records = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2, 3, 4]
    for agent, spec in (("A", "tiny:qwen2_5_vl"), ("B", "tiny:internvl3_5")):
        k3 = agent_series(records, agent, "is/rollout_k3")
        assert len(k3) == 4, (agent, k3)  # an update, hence a push, at every step
        # the engine samples from the very policy of each step: fp32 rounding only
        assert max(k3) < 1e-6, (agent, k3)
        # ... and the policy really moved, so a missed push would have shown in k3
        start = load_file(str(tiny_model_path(spec) / "model.safetensors"))
        end = load_file(str(run / "checkpoints" / "step-4" / agent / "model.safetensors"))
        moved = max(float((end[k].float() - start[k].float()).abs().max())
                    for k in start if k in end)
        assert moved > 1e-4, (agent, moved)
    pushes = [r["timing/weight_push"] for r in records]
    assert all(p > 0 for p in pushes), pushes
    print(json.dumps({"rollout_k3": {a: agent_series(records, a, "is/rollout_k3") for a in "AB"},
                      "timing/weight_push": pushes}))


def test_bf16_rollouts_show_the_mismatch_in_the_is_statistics(tmp_path):
    run = tmp_path / "run"
    assert main(["train", *COHORT, "run.steps=3", "rollout.vllm.dtype=bfloat16",
                 f"run.output_dir={run}"]) == 0
    records = read_metrics(run / "metrics.jsonl")
    report = {}
    for agent in "AB":
        k3 = agent_series(records, agent, "is/rollout_k3")
        w_min, w_max = agent_series(records, agent, "is/min"), agent_series(records, agent, "is/max")
        # bf16 vs fp32: measurable (the fp32 run's k3 is 0 to float32 rounding); small, as a
        # fresh tiny model's next-token distribution is nearly uniform
        assert len(k3) == 3 and min(k3) > 1e-8, (agent, k3)
        assert min(w_min) < 1 < max(w_max), (agent, w_min, w_max)
        report[agent] = {k: agent_series(records, agent, f"is/{k}")
                         for k in ("rollout_k3", "mean", "min", "max", "frac_truncated")}
    print(json.dumps(report))


def test_is_weights_on_vllm_log_probs_are_the_definition(tmp_path, vllm_device):
    """bf16 engine, fp32 policy: w = min(exp(policy - rollout), cap) token by token on
    what vLLM recorded; the statistics are the raw weights' and k3's plain means."""
    from vlcohort.config import VLLMConfig
    from vlcohort.rollout.vllm import VLLMEngine

    folder = tiny_model_path("tiny:qwen2_5_vl", cache_dir=tmp_path)
    adapter = adapter_for(folder)
    model = adapter.load_model()
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    engine = VLLMEngine(adapter, model, VLLMConfig(dtype="bfloat16", sleep_mode=False,
                                                   enforce_eager=True, max_num_seqs=16,
                                                   kv_cache_memory_gib=0.25), seed=0)
    try:
        from PIL import Image

        rendered = [adapter.render(Problem(id=f"p{i}", text=f"What colour is the shape? {i}",
                                           images=[Image.new("RGB", (56, 56), c)],
                                           options=["red", "blue"]))
                    for i, c in enumerate(["red", "blue"])]
        G, T = 4, 1.0
        rollouts = engine.generate(rendered, G, SamplingParams(max_new_tokens=12, temperature=T),
                                   seed=7)
    finally:
        engine.close()
    batch = adapter.encode_training(adapter.encode_prompts([r for r in rendered for _ in range(G)]),
                                    rollouts.completions)
    with torch.no_grad():
        policy = completion_logprobs(adapter, model, batch, T)[:, : rollouts.logprobs.shape[1]]
    mask = torch.zeros_like(rollouts.logprobs, dtype=torch.bool)
    for i, c in enumerate(rollouts.completions):
        mask[i, : len(c)] = True
    cap = 1.002
    is_w = grpo.importance_weights(policy, rollouts.logprobs, mask, level="token",
                                   mode="truncate", cap=cap)
    weights, stats = is_w.weights, is_w.stats
    ratio = torch.exp(policy - rollouts.logprobs)
    assert torch.allclose(weights[mask], ratio[mask].clamp(max=cap), rtol=0, atol=1e-6)
    assert (weights[~mask] == 0).all()
    lr = (policy - rollouts.logprobs)[mask]
    assert stats["is/mean"] == pytest.approx(float(ratio[mask].mean()), rel=1e-5)
    assert stats["is/rollout_k3"] == pytest.approx(float((lr.exp() - lr - 1).mean()), rel=1e-4)
    assert stats["is/frac_truncated"] == pytest.approx(float((ratio[mask] > cap).float().mean()))
    assert 0 < stats["is/frac_truncated"] < 1, "weak test: no token (or every token) truncated"
    assert not math.isclose(stats["is/rollout_k3"], 0.0, abs_tol=1e-7), "no bf16 mismatch: weak test"
    print(json.dumps({"bf16_vs_fp32": {k: round(v, 8) for k, v in stats.items()},
                      "mean_abs_logprob_gap": float(lr.abs().mean()),
                      "max_abs_logprob_gap": float(lr.abs().max())}))


def _bench_dir(tmp_path):
    from PIL import Image

    d = tmp_path / "bench"
    (d / "images").mkdir(parents=True)
    colours = ["red", "blue", "green", "yellow"]
    for i, colour in enumerate(colours):
        Image.new("RGB", (64, 48), colour).save(d / "images" / f"{i}.png")
    vista = {str(i): {"pid": str(i), "question": f"What colour? ({i})", "image": f"images/{i}.png",
                      "choices": colours[:3], "unit": None, "precision": None,
                      "answer": colours[i % 3], "question_type": "multi_choice",
                      "answer_type": "text", "metadata": {"task": "colour", "category": "general-vqa"}}
             for i in range(4)}
    (d / "mathvista_testmini.json").write_text(json.dumps(vista))
    return d


def test_eval_on_vllm_answers_as_the_hf_engine(tmp_path, capsys):
    d = _bench_dir(tmp_path)
    common = ["eval", "--model", "tiny:qwen2_5_vl", "--benchmark", "mathvista", "--data-dir",
              str(d), "--max-new-tokens", "6", "--no-progress"]
    assert main([*common, "--out", str(tmp_path / "hf")]) == 0
    assert main([*common, "--out", str(tmp_path / "vllm"), "--engine", "vllm",
                 "--vllm-dtype", "float32"]) == 0
    hf = [json.loads(x) for x in (tmp_path / "hf" / "items.jsonl").read_text().splitlines()]
    vl = [json.loads(x) for x in (tmp_path / "vllm" / "items.jsonl").read_text().splitlines()]
    assert len(hf) == len(vl) == 4
    assert [r["response"] for r in vl] == [r["response"] for r in hf]
    assert all(r["response"] for r in vl), "empty responses: weak test"
    summary = json.loads((tmp_path / "vllm" / "summary.json").read_text())
    assert "tiny:qwen2_5_vl" in summary["benchmarks"]["mathvista"]["models"]


def test_ema_teacher_samples_on_vllm_and_the_policy_is_pushed_back(tmp_path):
    """Co-rewarding-II on vLLM: ``generate_with`` pushes the EMA teacher's weights (swapped
    into the policy module), samples, and pushes the policy's back. In fp32 the teacher's
    recorded log-probs are the teacher weights' own, the next plain ``generate`` is the
    policy's again, and the policy module is bit for bit what it was."""
    from vlcohort.config import VLLMConfig
    from vlcohort.rollout.vllm import VLLMEngine
    from vlcohort.training.ema import EMATeacher

    folder = tiny_model_path("tiny:qwen2", cache_dir=tmp_path)
    adapter = adapter_for(folder)
    model = adapter.load_model()
    teacher = EMATeacher(model, "cpu")  # the start weights
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():  # the policy moves far from them
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
    teacher.update(0.5)  # teacher = (start + policy) / 2
    before = [p.detach().clone() for p in model.parameters()]
    engine = VLLMEngine(adapter, model, VLLMConfig(dtype="float32", sleep_mode=False,
                                                   enforce_eager=True, max_num_seqs=16,
                                                   kv_cache_memory_gib=0.25), seed=0)
    rendered = [adapter.render(Problem(id=f"p{i}", text=f"What is {i} + {i}?")) for i in range(2)]
    G, sampling = 4, SamplingParams(max_new_tokens=8, temperature=1.0)
    try:
        taught = engine.generate_with(teacher.swapped_in(), model, rendered, G, sampling, seed=3)
        own = engine.generate(rendered, G, sampling, seed=3)
    finally:
        engine.close()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), before))

    def logprobs_under(rollouts, swapped: bool):
        batch = adapter.encode_training(
            adapter.encode_prompts([r for r in rendered for _ in range(G)]), rollouts.completions)
        with torch.no_grad(), (teacher.swapped_in() if swapped else torch.enable_grad()):
            lp = completion_logprobs(adapter, model, batch, 1.0)
        mask = torch.zeros_like(rollouts.logprobs, dtype=torch.bool)
        for i, c in enumerate(rollouts.completions):
            mask[i, : len(c)] = True
        return lp[:, : rollouts.logprobs.shape[1]][mask], rollouts.logprobs[mask]

    t_lp, t_rec = logprobs_under(taught, swapped=True)
    p_lp, p_rec = logprobs_under(own, swapped=False)
    assert torch.allclose(t_lp, t_rec, atol=1e-3), "vLLM did not sample from the teacher"
    assert torch.allclose(p_lp, p_rec, atol=1e-3), "the policy was not pushed back"
    wrong, _ = logprobs_under(taught, swapped=False)  # the policy's log-probs differ: not weak
    assert not torch.allclose(wrong, t_rec, atol=1e-2)


# CoMAS (method: comas) on the tiny three-family cohort of configs/comas_tiny.yaml.
# grpo.is_mode=truncate: the recipe runs the published is_mode=off, but the rollout-vs-policy
# diagnostics (is/rollout_k3) are what show each engine follows its policy's updates
COMAS_VLLM = ["rollout.engine=vllm", "rollout.vllm.sleep_mode=false", "rollout.vllm.enforce_eager=true",
              "rollout.vllm.max_num_seqs=16", "rollout.vllm.kv_cache_memory_gib=0.25",
              "rollout.vllm.dtype=float32", "grpo.is_mode=truncate"]


def test_comas_discussions_run_on_vllm_and_the_engines_follow_the_updates(tmp_path):
    """Every turn of a CoMAS discussion (solutions, critiques, judge replies) is sampled by
    that agent's vLLM engine, quoted into the next kind's prompts and scored; the updates
    are pushed, so at step 2 each engine samples from its updated policy (fp32 k3 at
    rounding level). A random tiny judge writes no readable score (every return -1,
    advantages 0), so the KL term in the loss takes the step (its gradient is 0 at the
    start), and AdamW's weight decay scales every weight by 1 - lr x wd = 0.95: an engine
    left on the start weights would show a k3 far above the bound."""
    from pathlib import Path

    config = Path(__file__).resolve().parents[1] / "configs" / "comas_tiny.yaml"
    run = tmp_path / "run"
    assert main(["train", str(config), *COMAS_VLLM, "run.steps=2",
                 "grpo.kl_coef=0.05", "optim.lr=0.1", "optim.weight_decay=0.5",
                 f"run.output_dir={run}"]) == 0
    records = read_metrics(run / "metrics.jsonl")
    turns = [json.loads(line) for line in (run / "discussions.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    A, B = 3, 2
    assert len(turns) == 2 * 3 * A * B and all(t["generated"] for t in turns)
    for r in records:
        judged = [t for t in turns if t["step"] == r["step"] and t["kind"] == "judge"]
        assert r["comas/judge_unparsed"] == sum(t["score"] is None for t in judged)
    for name, spec in (("qwen", "tiny:qwen2_5_vl"), ("gemma", "tiny:gemma3"),
                       ("internvl", "tiny:internvl3_5")):
        assert f"agent/{name}/loss" in records[1], name
        k3 = agent_series(records, name, "is/rollout_k3")
        assert len(k3) == 2 and max(k3) < 1e-6, (name, k3)
        start = load_file(str(tiny_model_path(spec) / "model.safetensors"))
        end = load_file(str(run / "checkpoints" / "step-2" / name / "model.safetensors"))
        moved = max(float((end[k].float() - start[k].float()).abs().max()) for k in start if k in end)
        assert moved > 1e-3, (name, moved)
