"""Co-rewarding (Zhang et al., arXiv 2508.00410): the EMA teacher's maths by hand
(``training/ema.py``), the teacher-vote and cross-view rewards (``rewards.py``), bad
inputs, and each method for two steps through the real ``vlcohort train`` path on tiny
real models (CPU, offline), resume included."""

from __future__ import annotations

import json
import math

import pytest
import torch

from vlcohort.answers.grading import get_grader
from vlcohort.answers.voting import majority_vote
from vlcohort.cli import main
from vlcohort.config import load_config
from vlcohort.data.problems import Problem
from vlcohort.monitoring.metrics import read_metrics
from vlcohort.training.ema import EMATeacher, cosine_alpha, ema_update_
from vlcohort.training.reward_sources import cross_view_partners
from vlcohort.training.rewards import RewardInputs, reward_of
from vlcohort.typed_yaml import ConfigError


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


# ------------------------------------------------------------------------- EMA by hand


def test_ema_update_by_hand():
    """teacher <- (1 - a) teacher + a policy: a = 0.25, [4, -2] towards [0, 2] -> [3, -1]."""
    t = torch.tensor([4.0, -2.0])
    out = ema_update_(t, torch.tensor([0.0, 2.0]), 0.25)
    assert out is t and t.tolist() == [3.0, -1.0]
    ema_update_(t, torch.tensor([0.0, 2.0]), 0.5)  # again, a = 0.5: [1.5, 0.5]
    assert t.tolist() == [1.5, 0.5]
    half = torch.tensor([1.0], dtype=torch.bfloat16)  # the policy's dtype is cast to the teacher's
    assert ema_update_(torch.tensor([0.0]), half, 1.0).tolist() == [1.0]


def test_cosine_alpha_by_hand():
    """alpha(t) = end + (start - end) (1 + cos(pi t / T)) / 2, t = step - 1 clipped to [0, T]."""
    assert cosine_alpha(1, 4, 0.3, 0.1) == pytest.approx(0.3)
    assert cosine_alpha(2, 4, 0.3, 0.1) == pytest.approx(0.1 + 0.1 * (1 + math.sqrt(0.5)))
    assert cosine_alpha(3, 4, 0.3, 0.1) == pytest.approx(0.2)
    assert cosine_alpha(5, 4, 0.3, 0.1) == pytest.approx(0.1)
    assert cosine_alpha(9, 4, 0.3, 0.1) == pytest.approx(0.1)  # past the end: clipped
    # the published recipe's ends (run_corewarding-II.sh): 0.01 -> 1e-5
    assert cosine_alpha(1, 100, 0.01, 1e-5) == pytest.approx(0.01)


def test_teacher_tracks_trained_weights_swaps_and_restores_bitwise():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    model[1].requires_grad_(False)  # frozen: not the teacher's (as a LoRA base)
    teacher = EMATeacher(model, "cpu")
    assert set(teacher.shadow) == {"0.weight", "0.bias"} and teacher.nbytes == 4 * (6 + 2)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        model[0].weight.add_(1.0)  # the policy moves by +1
    teacher.update(0.25)  # the teacher follows by a quarter
    assert torch.allclose(teacher.shadow["0.weight"], start["0.weight"] + 0.25)
    before = [p.detach().clone() for p in model.parameters()]
    with teacher.swapped_in():
        assert torch.allclose(model[0].weight, start["0.weight"] + 0.25)
        assert torch.equal(model[1].weight, before[2])  # frozen weights untouched
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), before))  # bit for bit
    with pytest.raises(RuntimeError, match="boom"):  # restored on an error too
        with teacher.swapped_in():
            raise RuntimeError("boom")
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), before))
    again = EMATeacher(model, "cpu")
    again.load_state_dict(teacher.state_dict())
    assert again.updates == 1 and all(torch.equal(again.shadow[n], teacher.shadow[n])
                                      for n in teacher.shadow)
    with pytest.raises(ValueError, match="lacks"):
        again.load_state_dict({"0.bias": torch.zeros(2)})
    with pytest.raises(ValueError, match="device"):
        EMATeacher(model, "gpu0")


def test_lora_teacher_keeps_the_adapter_only():
    """A LoRA policy: the teacher is the EMA of the adapter weights (2 x r x d here), the
    frozen base is shared; swapping it in changes the output, swapping out restores it."""
    from peft import LoraConfig, get_peft_model

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj, self.out = torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)

        def forward(self, x):
            return self.out(self.proj(x))

    torch.manual_seed(0)
    model = get_peft_model(Net(), LoraConfig(r=2, lora_alpha=4, target_modules=["proj"],
                                             lora_dropout=0.0))
    teacher = EMATeacher(model, "cpu")
    assert sorted(n.split(".")[-3] for n in teacher.shadow) == ["lora_A", "lora_B"]
    assert teacher.nbytes == 4 * (2 * 4 + 4 * 2)
    x = torch.randn(3, 4)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.fill_(0.5)  # the adapter trains away from its zero start
        y = model(x)
        with teacher.swapped_in():  # the teacher: lora_B still 0, the base model's output
            with model.disable_adapter():
                base = model(x)
            assert torch.equal(model(x), base)
        assert torch.equal(model(x), y)


def test_bf16_policy_keeps_a_float32_teacher():
    """A step of 1e-5 is below bf16's spacing near 1 (2^-7): the teacher moves anyway."""
    model = torch.nn.Linear(1, 1, bias=False).to(torch.bfloat16)
    with torch.no_grad():
        model.weight.fill_(1.0)
    teacher = EMATeacher(model, "same")
    with torch.no_grad():
        model.weight.fill_(2.0)
    teacher.update(1e-5)
    assert teacher.shadow["weight"].dtype == torch.float32
    assert teacher.shadow["weight"].item() == pytest.approx(1.0 + 1e-5, abs=1e-7)


def test_hf_engine_samples_from_the_teacher_and_restores_the_policy_bitwise(tmp_path):
    """The hf engine reads the policy module itself: inside ``generate_with`` it samples
    from the teacher's weights (its recorded log-probs are the teacher's, not the
    policy's), and afterwards every parameter is bit for bit what it was."""
    from vlcohort.processors import adapter_for, tiny_model_path
    from vlcohort.rollout.base import SamplingParams
    from vlcohort.rollout.hf import HFEngine
    from vlcohort.training.logprobs import completion_logprobs

    adapter = adapter_for(tiny_model_path("tiny:qwen2", cache_dir=tmp_path))
    model = adapter.load_model()
    teacher = EMATeacher(model, "same")
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():  # the policy moves far from the start; the teacher half way
        for p in model.parameters():
            if p.dim() >= 2:
                p.add_(torch.randn(p.shape, generator=gen) * 0.2)
    teacher.update(0.5)
    before = [p.detach().clone() for p in model.parameters()]
    engine = HFEngine(adapter, model)
    rendered = [adapter.render(Problem(id=f"p{i}", text=f"What is {i} + {i}?")) for i in range(2)]
    G = 3
    taught = engine.generate_with(teacher.swapped_in(), model, rendered, G,
                                  SamplingParams(max_new_tokens=6), seed=1)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), before))
    batch = adapter.encode_training(adapter.encode_prompts([r for r in rendered for _ in range(G)]),
                                    taught.completions)
    mask = torch.zeros_like(taught.logprobs, dtype=torch.bool)
    for i, c in enumerate(taught.completions):
        mask[i, : len(c)] = True
    with torch.no_grad():
        policy = completion_logprobs(adapter, model, batch, 1.0)[:, : mask.shape[1]][mask]
        with teacher.swapped_in():
            own = completion_logprobs(adapter, model, batch, 1.0)[:, : mask.shape[1]][mask]
    assert torch.allclose(own, taught.logprobs[mask], atol=1e-4)
    assert not torch.allclose(policy, taught.logprobs[mask], atol=1e-2)  # not weak: they differ


# ------------------------------------------------------------------ the two rewards


def _inputs(answers, votes, problems, **kw):
    return RewardInputs(agent=0, answers=answers, votes=votes, problems=problems,
                        trained=list(range(len(problems))), token_stats=lambda: None,
                        group_size=len(answers[0]), grader=get_grader("corrected"), **kw)


def test_teacher_vote_labels_the_policy_rollouts():
    """The policy's own vote says "3" on prompt 0; the teacher's G samples say "4": the
    rollouts answering 4 are rewarded, the teacher's tie on prompt 1 gives no label."""
    problems = [Problem(id="p0", text="2+2?"), Problem(id="p1", text="1+1?")]
    answers = [["3", "3", "4", None], ["2", "2", "2", "2"]]  # [P][G] the policy's
    own = [majority_vote(a) for a in answers]
    teacher = [majority_vote(["4", "4", "3", "4"]), majority_vote(["2", "5", None, None])]
    got = reward_of("ema_teacher_vote", _inputs(answers, [own], problems, extra=teacher))
    assert got.labels == ["4", None]
    assert got.scored.rewards.tolist() == [[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    assert got.scored.valid.tolist() == [True, False]
    assert got.metrics["teacher/agreement"] == 0.0  # "3" vs "4"; an abstention is no agreement
    same = reward_of("ema_teacher_vote", _inputs(answers, [own], problems, extra=own))
    assert same.metrics["teacher/agreement"] == 1.0  # the policy's vote as teacher: self-vote
    with pytest.raises(ValueError, match="teacher votes"):  # no teacher: never a zero reward
        reward_of("ema_teacher_vote", _inputs(answers, [own], problems))


def test_cross_view_reward_pairs_each_wording_with_the_other():
    """Round of B = 2: prompts 0, 1 as asked, 2, 3 their rephrasings. Prompt 0's rollouts
    are labelled by the vote on prompt 2 and the other way round."""
    assert cross_view_partners(4) == [2, 3, 0, 1]
    assert cross_view_partners(8, 2) == [2, 3, 0, 1, 6, 7, 4, 5]
    with pytest.raises(ValueError, match="do not split"):
        cross_view_partners(6, 2)
    p0, p1 = Problem(id="a", text="6/2?"), Problem(id="b", text="3*3?")
    problems = [p0, p1, p0, p1]
    answers = [["3", "3", "2"], ["9", "6", "6"], ["3", "2", "2"], ["9", "9", "1"]]
    own = [majority_vote(a) for a in answers]  # 3, 6, 2, 9
    got = reward_of("cross_view_vote", _inputs(answers, [own], problems, partners=(2, 3, 0, 1)))
    assert got.labels == ["2", "9", "3", "6"]
    assert got.scored.rewards.tolist() == [[0, 0, 1], [1, 0, 0], [1, 0, 0], [0, 0, 0]]
    assert got.metrics["cross_view/agreement"] == 0.0
    with pytest.raises(ValueError, match="partner"):
        reward_of("cross_view_vote", _inputs(answers, [own], problems))


# ------------------------------------------------------------------------ bad inputs


def test_bad_settings_are_one_line_config_errors(tmp_path):
    text = ["agents=[{name: A, path: 'tiny:qwen2'}]", "arms=[]"]
    for bad, match in [(["reward.ema.alpha_start=0"], r"reward\.ema\.alpha_start"),
                       (["reward.ema.alpha_end=2"], r"reward\.ema\.alpha_end"),
                       (["reward.ema.every=0"], r"reward\.ema\.every"),
                       (["reward.ema.device=gpu"], r"reward\.ema\.device"),
                       (["reward.ema.teacher_view=rephrased"], r"agents\.0\.view")]:
        with pytest.raises(ConfigError, match=match) as e:
            load_config(None, ["method=co_rewarding_ii", *text, *bad])
        assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match=r"agents\.0\.view: cross_view_vote"):
        load_config(None, ["method=co_rewarding_i", *text])
    cfg = load_config(None, ["method=co_rewarding", *text])  # the alias, one agent
    assert cfg.reward.source == "ema_teacher_vote" and cfg.reward.ema.alpha_start == 0.01
    rw = tmp_path / "rw.json"
    rw.write_text("{}")
    with pytest.raises(ConfigError, match=r"data\.decouple"):
        load_config(None, ["method=co_rewarding_i", "data.source=file", f"data.path={tmp_path}",
                           f"agents=[{{name: A, path: 'tiny:qwen2', view: {{rewrite_file: {rw}}}}}]",
                           "arms=[]", "data.decouple=true"])


# ------------------------------------------------------------------------- end to end

RUN = ["reward.answer_style=last_letter", "rollout.prompts_per_step=2",
       "rollout.rollouts_per_prompt=8", "rollout.max_new_tokens=16", "grpo.micro_batch_seqs=8",
       "optim.lr=1e-3", "optim.warmup_ratio=0", "log.plot=false", "log.tensorboard=false",
       "run.seed=4", "arms=[]", "eval.every=0", "reward.min_share=0", "grpo.kl_coef=0",
       "reward.tie=first", "prompt.system_prompt=You are a helpful assistant."]


def test_co_rewarding_ii_trains_and_resumes_exactly(tmp_path):
    """One agent, 4 steps with checkpoints at 2 and 4; a copy of the run cut back to its
    step-2 checkpoint and resumed ends where the straight run did (metrics, weights and
    teacher): the EMA teacher is saved and restored with the checkpoint. Its metrics are
    logged, its memory once, and the teacher's alpha follows the cosine."""
    import shutil

    from safetensors.torch import load_file

    common = ["method=co_rewarding", "agents=[{name: A, path: 'tiny:qwen2_5_vl'}]",
              "data.tasks=[shape_colour, shape_kind]", "data.num_problems=16", *RUN,
              "run.steps=4", "checkpoint.every=2", "reward.format_weight=0.5",
              "reward.ema.alpha_start=0.5", "reward.ema.alpha_end=0.1"]
    straight, parted = tmp_path / "straight", tmp_path / "parted"
    assert main(["train", *common, f"run.output_dir={straight}"]) == 0
    shutil.copytree(straight, parted)
    shutil.rmtree(parted / "checkpoints/step-4")
    (parted / "checkpoints/latest").write_text("step-2")
    assert (parted / "checkpoints/step-2/A/ema_teacher.safetensors").is_file()
    assert main(["train", "--resume", str(parted)]) == 0
    a, b = read_metrics(straight / "metrics.jsonl"), read_metrics(parted / "metrics.jsonl")
    strip = [{k: v for k, v in r.items() if not k.startswith("timing/")} for r in a]
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    assert strip == [{k: v for k, v in r.items() if not k.startswith("timing/")} for r in b]
    assert [r["agent/A/teacher/alpha"] for r in a] == pytest.approx(
        [cosine_alpha(s, 4, 0.5, 0.1) for s in (1, 2, 3, 4)])
    assert "agent/A/teacher/bytes" in a[0] and all("agent/A/teacher/bytes" not in r for r in a[1:])
    assert all("agent/A/teacher/agreement" in r and "timing/teacher" in r for r in a)
    assert any("agent/A/loss" in r for r in a), "nothing trained: weak test"
    wa = load_file(straight / "checkpoints/step-4/A/model.safetensors")
    wb = load_file(parted / "checkpoints/step-4/A/model.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    ta = load_file(straight / "checkpoints/step-4/A/ema_teacher.safetensors")
    tb = load_file(parted / "checkpoints/step-4/A/ema_teacher.safetensors")
    assert ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta)
    assert int(ta["__updates__"][0]) == 4
    # the teacher lags the policy: it is neither the start nor the trained weights
    from vlcohort.processors import adapter_for, tiny_model_path

    def weights(folder):  # by the names the teacher keeps: the loaded model's own
        return dict(adapter_for(folder).load_model().named_parameters())

    trained, start = weights(straight / "checkpoints/step-4/A"), weights(tiny_model_path("tiny:qwen2_5_vl"))
    assert set(ta) - {"__updates__"} == set(trained)  # every trained weight
    assert any(not torch.equal(ta[k], trained[k].detach().float()) for k in trained)
    assert any(not torch.equal(ta[k], start[k].detach().float()) for k in trained)


def _text_data(tmp_path, n=6):
    """Multiple-choice arithmetic as a JSONL file, and a rewrite file rephrasing each."""
    path, rw = tmp_path / "train.jsonl", tmp_path / "rephrased.jsonl"
    rows, rewrites = [], []
    for i in range(n):
        a, b = i + 1, i + 2
        opts = [str(a + b), str(a + b + 1), str(a * b + 3), str(a + 2 * b)]
        rows.append({"id": f"q{i}", "question": f"What is {a} + {b}?", "options": opts,
                     "answer": "A"})
        rewrites.append({"id": f"q{i}", "question": f"Add {b} to {a}. What do you get?"})
    rows.append({"id": "no-rewrite", "question": "What is 1 + 1?", "options": ["2", "3"],
                 "answer": "A"})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    rw.write_text("\n".join(json.dumps(r) for r in rewrites) + "\n")
    return path, rw


def test_co_rewarding_i_and_the_combined_variant_train_two_agents(tmp_path, capsys):
    """Two text agents, each answering the question and its rephrasing: every round holds
    2B prompts (B asked, B rephrased) and each agent trains on all of them; a record
    without a rephrasing is skipped and counted at load. Then the combined variant
    (Co-rewarding-II's teacher answering the rephrasing, the published code's
    data.use_aug=True) for two steps."""
    path, rw = _text_data(tmp_path)
    agents = (f"agents=[{{name: A, path: 'tiny:qwen2', view: {{rewrite_file: '{rw}'}}}}, "
              f"{{name: B, path: 'tiny:qwen2', view: {{rewrite_file: '{rw}'}}}}]")
    run = tmp_path / "i"
    assert main(["train", "method=co_rewarding_i", agents, "data.source=file",
                 f"data.path={path}", *RUN, "run.steps=2", f"run.output_dir={run}"]) == 0
    assert "view_missing=1" in capsys.readouterr().err
    recs = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in recs] == [1, 2]
    for name in ("A", "B"):
        assert all(f"agent/{name}/cross_view/agreement" in r for r in recs)
        assert all(f"agent/{name}/reward/mean" in r for r in recs)

    run2 = tmp_path / "combined"  # agent B on self-vote beside it: a mixed cohort
    mixed = agents.replace("{name: B,", "{name: B, reward_source: self_vote,")
    assert main(["train", "method=co_rewarding_ii", mixed, "data.source=file",
                 f"data.path={path}", *RUN, "run.steps=2", "reward.ema.teacher_view=rephrased",
                 f"run.output_dir={run2}"]) == 0
    recs = read_metrics(run2 / "metrics.jsonl")
    assert all("agent/A/teacher/agreement" in r and "agent/B/teacher/agreement" not in r
               for r in recs)


def test_cross_view_round_holds_both_wordings(tmp_path):
    """The round's prompts: B originals then their B rephrasings, rendered as such."""
    from vlcohort.recipes.cohort import setup
    from vlcohort.recipes.step import next_prompts

    path, rw = _text_data(tmp_path)
    cfg = load_config(None, ["method=co_rewarding_i", "data.source=file", f"data.path={path}",
                             f"agents=[{{name: A, path: 'tiny:qwen2', view: {{rewrite_file: '{rw}'}}}}]",
                             *RUN, "run.steps=1", f"run.output_dir={tmp_path / 'r'}"])
    run = setup(cfg)
    try:
        prompts = next_prompts(run.cohort())
        assert prompts.partners == (2, 3, 0, 1)
        assert [p.id for p in prompts.problems[:2]] == [p.id for p in prompts.problems[2:]]
        texts = [r.text for r in prompts.rendered[0]]
        assert "What is" in texts[0] and "Add" in texts[2] and "What is" in texts[1]
    finally:
        from vlcohort.recipes.cohort import cleanup
        run.cfg.checkpoint.at_end = False
        cleanup(run)


@pytest.mark.distributed
def test_zero3_agent_group_keeps_the_ema_of_its_partitions(tmp_path):
    """One agent over two ranks under ZeRO-3 (gloo): each rank keeps the EMA of its own
    partition of every weight, saves it as its own file, and a resume loads it back."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from safetensors.torch import load_file

    from vlcohort.processors import tiny_model_path

    run = tmp_path / "run"
    args = ["method=co_rewarding", "agents=[{name: A, path: 'tiny:qwen2_5_vl'}]",
            "data.tasks=[shape_colour, shape_kind]", "data.num_problems=16", *RUN,
            "rollout.rollouts_per_prompt=4", "rollout.max_new_tokens=8", "grpo.micro_batch_seqs=4",
            "reward.format_weight=0.5", "run.threads=1", "distributed.timeout_s=60",
            "distributed.ranks_per_agent=2", "distributed.zero_stage=3"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)

    def torchrun(*extra):
        out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                              "--nproc_per_node=2", "-m", "vlcohort", "train", *extra],
                             env=env, capture_output=True, text=True, timeout=600,
                             cwd=Path(__file__).resolve().parents[1])
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
        return out

    out = torchrun(*args, "run.steps=2", f"run.output_dir={run}")
    assert "# EMA teacher of A:" in out.stdout
    folder = run / "checkpoints/step-2/A"
    parts = [load_file(folder / f"ema_teacher-rank{r}.safetensors") for r in (0, 1)]
    assert parts[0].keys() == parts[1].keys()
    whole = load_file(tiny_model_path("tiny:qwen2_5_vl") / "model.safetensors")
    total = sum(t.numel() for t in whole.values())
    held = sum(t.numel() for p in parts for k, t in p.items() if k != "__updates__")
    assert total <= held < total + 2 * len(whole) * 2  # two partitions (+ ZeRO's padding)
    assert all(int(p["__updates__"][0]) == 2 for p in parts)
    torchrun("--resume", str(run), "run.steps=3")
    recs = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in recs] == [1, 2, 3]
    assert all("agent/A/teacher/agreement" in r for r in recs)


@pytest.mark.distributed
def test_co_rewarding_i_over_agent_groups_equals_one_process(tmp_path):
    """Two Co-rewarding-I agents over two gloo ranks (one rank per agent, ZeRO-2): both
    wordings of every question cross the ranks like any prompt, so step 1 (rollouts on
    both wordings, the two votes, the cross-view rewards, the loss) equals the
    single-process run's, and step 2 samples alike from the updated policies."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    path, rw = _text_data(tmp_path)
    agents = (f"agents=[{{name: A, path: 'tiny:qwen2', view: {{rewrite_file: '{rw}'}}}}, "
              f"{{name: B, path: 'tiny:qwen2', view: {{rewrite_file: '{rw}'}}}}]")
    common = ["method=co_rewarding_i", agents, "data.source=file", f"data.path={path}", *RUN,
              "run.steps=2", "run.threads=1", "distributed.timeout_s=60", "reward.format_weight=0.5"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    root = Path(__file__).resolve().parents[1]
    one, two = tmp_path / "one", tmp_path / "two"
    ref = subprocess.run([sys.executable, "-m", "vlcohort", "train", *common, f"run.output_dir={one}"],
                         env=env, capture_output=True, text=True, timeout=400, cwd=root)
    assert ref.returncode == 0, ref.stderr[-3000:]
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc_per_node=2", "-m", "vlcohort", "train", *common,
                          f"run.output_dir={two}", "distributed.ranks_per_agent=1",
                          "distributed.zero_stage=2"],
                         env=env, capture_output=True, text=True, timeout=400, cwd=root)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]

    def strip(records):
        return [{k: v for k, v in r.items() if not k.startswith("timing/")} for r in records]

    a, b = strip(read_metrics(one / "metrics.jsonl")), strip(read_metrics(two / "metrics.jsonl"))
    assert [r["step"] for r in b] == [1, 2] and set(a[0]) == set(b[0])
    for name in ("A", "B"):
        assert f"agent/{name}/cross_view/agreement" in a[0]
        assert f"agent/{name}/loss" in a[0], "no update at step 1: weak test"
    for key, value in a[0].items():
        rel = 1e-4 if key.endswith("/grad_norm") else 1e-5
        assert b[0][key] == pytest.approx(value, rel=rel, abs=1e-6), key
    for key, value in a[1].items():
        if key.endswith(("/reward/mean", "/parse_rate", "/completion_len", "/cross_view/agreement")):
            assert b[1][key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
