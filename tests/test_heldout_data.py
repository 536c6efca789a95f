"""Held-out evaluation on any data during training (``eval.data.*``, ``eval.holdout``):
the split and the scores by hand, the config's one-line errors, and real runs of a tiny
model on local files (scores in every output, bad held-out records counted, exact resume,
an evaluation that leaves training untouched)."""

from __future__ import annotations

import json
import math

import pytest

from vlcohort.answers.grading import get_grader
from vlcohort.cli import main
from vlcohort.config import load_config
from vlcohort.data.problems import Problem
from vlcohort.monitoring.heldout import grade_samples, held_out_scores
from vlcohort.monitoring.metrics import read_metrics, summary_line
from vlcohort.recipes.run_problems import keyed, limited, load_eval_problems, load_problems, split_holdout
from vlcohort.typed_yaml import ConfigError


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


OPTIONS = ["red", "green", "blue", "yellow"]


def _records(n: int, prefix: str) -> list[dict]:
    """Multiple-choice records of two families (a ``task`` column), gold a letter."""
    return [{"id": f"{prefix}{i}", "question": f"Which colour is number {i}?",
             "options": OPTIONS, "answer": "ABCD"[i % 4], "task": "even" if i % 2 == 0 else "odd"}
            for i in range(n)]


def _write(path, records, extra_lines=()) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "".join(extra_lines))


def _problems(n: int) -> list[Problem]:
    return [Problem(id=f"p{i}", text=f"q{i}", gold=str(i)) for i in range(n)]


# ----------------------------------------------------------------------------- pure parts


def test_holdout_is_a_seeded_disjoint_split_of_the_stated_size():
    problems = _problems(60)
    train, held = split_holdout(problems, 0.2, seed=3)
    assert len(held) == 12 and len(train) == 48
    assert {p.id for p in train}.isdisjoint(p.id for p in held)
    assert [p.id for p in train + held] != [p.id for p in problems[:48] + problems[48:]]
    assert split_holdout(problems, 0.2, seed=3) == (train, held)  # the same every time
    assert split_holdout(problems, 0.2, seed=4)[1] != held  # another seed, another draw
    assert [p.id for p in held] == sorted((p.id for p in held), key=lambda s: int(s[1:]))
    assert len(split_holdout(_problems(3), 0.01, 0)[1]) == 1  # at least one
    assert len(split_holdout(_problems(3), 0.99, 0)[0]) == 1  # never all


def test_limit_draws_the_same_sample_each_time():
    problems = _problems(50)
    assert limited(problems, 0, 1) == problems and limited(problems, 80, 1) == problems
    a = limited(problems, 10, 1)
    assert len(a) == 10 and a == limited(problems, 10, 1) and a != problems[:10]


def test_scores_by_hand():
    """Two problems, three samples each: acc is the mean over samples, pass@3 any right,
    maj@3 the plurality right (a tie abstains), parse rate and length over samples."""
    grader = get_grader("corrected")
    a = Problem(id="a", text="1+1", gold="2", meta={"task": "add"})
    b = Problem(id="b", text="3-1", gold="2", meta={"task": "sub"})
    graded = [grade_samples(a, ["<answer>2</answer>", "<answer>3</answer>", "<answer>2</answer>"],
                            [4, 5, 6], grader, "auto"),
              grade_samples(b, ["<answer>1</answer>", "no idea", "<answer>2</answer>"],
                            [3, 9, 3], grader, "answer_tag")]
    s = held_out_scores(graded)
    assert s["add/acc"] == pytest.approx(2 / 3) and s["sub/acc"] == pytest.approx(1 / 3)
    assert s["all/acc"] == pytest.approx(3 / 6)
    assert s["add/pass_at_n"] == 1 and s["sub/pass_at_n"] == 1 and s["all/pass_at_n"] == 1
    assert s["add/maj_at_n"] == 1 and s["sub/maj_at_n"] == 0  # 1 vs 2: a tie abstains
    assert s["all/maj_at_n"] == 0.5
    assert s["all/parse_rate"] == pytest.approx(5 / 6)
    assert s["all/length"] == pytest.approx(30 / 6)
    one = held_out_scores([grade_samples(a, ["<answer>2</answer>"], [4], grader, "auto")])
    assert one == {"add/acc": 1.0, "all/acc": 1.0, "all/parse_rate": 1.0, "all/length": 4.0}


def test_the_progress_line_costs_the_evaluation():
    line = summary_line({"step": 3, "agent/A/reward/mean": 0.5, "eval/A/all/acc": 0.25,
                         "timing/step": 2.0, "timing/eval": 1.5}, ["A"])
    assert "eval=0.25" in line and line.endswith("2.0s + eval 1.5s")


def test_a_loader_message_names_the_eval_keys():
    assert keyed("data.path: x does not exist; data.source=hub", "eval.data") == \
        "eval.data.path: x does not exist; eval.data.source=hub"
    assert keyed("tests/data.jsonl, line 3: bad", "eval.data") == "tests/data.jsonl, line 3: bad"


# ----------------------------------------------------------------------------- config


TEXT_AGENT = "agents=[{name: A, path: 'tiny:qwen2'}]"
GT = "method=gt_reward"


@pytest.mark.parametrize("overrides, message", [
    (["data.source=file", "data.path=x.jsonl", "eval.every=2"],
     "eval.every=2 with data.source=file: name the held-out problems (eval.data.source=file "
     "eval.data.path=heldout.jsonl) or hold out a share of data.path (eval.holdout=0.1)"),
    (["eval.holdout=0.2"], "eval.holdout=0.2: holds out a share of data.path, but data.source=synthetic"),
    (["eval.data.source=file"], "eval.data.path: empty; eval.data.source=file needs a file"),
    (["eval.data.path=x.jsonl"], "eval.data.path: read only with eval.data.source=file or hub"),
    (["eval.samples=0"], "eval.samples: must be >= 1, got 0"),
    (["eval.holdout=1"], "eval.holdout: a share of data.path in [0, 1), got 1"),
    (["data.source=file", "data.path=x.jsonl", "eval.holdout=0.1", "eval.data.source=file",
      "eval.data.path=y.jsonl"], "two held-out sets"),
])
def test_bad_eval_settings_are_one_line_errors(overrides, message):
    with pytest.raises(ConfigError) as e:
        load_config(None, [GT, TEXT_AGENT, "arms=[]", *overrides])
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_missing_held_out_file_names_its_key(tmp_path):
    cfg = load_config(None, [GT, TEXT_AGENT, "arms=[]", "eval.every=1", "eval.data.source=file",
                             f"eval.data.path={tmp_path / 'none.jsonl'}"])
    with pytest.raises(ConfigError, match=r"^eval\.data\.path: .*none\.jsonl does not exist"):
        load_eval_problems(cfg)


def test_training_never_sees_the_held_out_share(tmp_path):
    _write(tmp_path / "all.jsonl", _records(40, "q"))
    cfg = load_config(None, [GT, TEXT_AGENT, "arms=[]", "eval.every=1", "eval.holdout=0.25",
                             "data.source=file", f"data.path={tmp_path / 'all.jsonl'}"])
    train, held = load_problems(cfg), load_eval_problems(cfg)
    assert len(train) == 30 and len(held) == 10
    assert {p.id for p in train}.isdisjoint(p.id for p in held)
    assert {p.meta["task"] for p in held} <= {"even", "odd"}
    assert [p.id for p in load_eval_problems(cfg)] == [p.id for p in held]


# ----------------------------------------------------------------------------- real runs


def _run_args(tmp_path, out, *extra) -> list[str]:
    return ["train", "method=gt_reward", TEXT_AGENT, "arms=[]", "data.source=file",
            f"data.path={tmp_path / 'train.jsonl'}", "eval.data.source=file",
            f"eval.data.path={tmp_path / 'heldout.jsonl'}", "reward.answer_style=last_letter",
            "rollout.prompts_per_step=2", "rollout.rollouts_per_prompt=4",
            "rollout.max_new_tokens=6", "eval.max_new_tokens=6", "optim.lr=1e-3",
            "optim.warmup_ratio=0", "log.plot=false", "run.threads=1", "run.seed=2",
            f"run.output_dir={out}", *extra]


@pytest.fixture
def files(tmp_path):
    _write(tmp_path / "train.jsonl", _records(12, "t"))
    held = _records(9, "h")
    held[3] = {**held[3], "answer": ""}  # no gold: skipped as missing_answer
    _write(tmp_path / "heldout.jsonl", held, extra_lines=["{not json\n"])
    return tmp_path


def test_a_run_scores_a_held_out_file_in_every_output(files, capsys):
    """Scores at steps 0, 2 and 3 (eval.every=2, the last), per family and overall, with
    pass@n / maj@n when sampled; the bad held-out records are skipped and named at load;
    the progress line costs the evaluation; summary.json holds the first and last."""
    out = files / "run"
    assert main(_run_args(files, out, "run.steps=3", "eval.every=2", "eval.samples=3",
                          "eval.temperature=1.0")) == 0
    printed = capsys.readouterr()
    assert "heldout.jsonl: 10 rows read, 8 problems loaded" in printed.err
    assert "malformed_line=1" in printed.err and "missing_answer=1" in printed.err
    records = read_metrics(out / "metrics.jsonl")
    evals = [r for r in records if "eval/A/all/acc" in r]
    assert [r["step"] for r in evals] == [0, 2, 3]
    for r in evals:
        for key in ("even/acc", "odd/acc", "all/acc", "all/pass_at_n", "all/maj_at_n",
                    "all/parse_rate", "all/length"):
            assert math.isfinite(r[f"eval/A/{key}"]), (key, r)
        assert r["eval/A/all/acc"] <= r["eval/A/all/pass_at_n"]
        assert 0 < r["eval/A/all/length"] <= 6 and r["timing/eval"] > 0
    summary = json.loads((out / "summary.json").read_text())["held_out"]
    assert summary["tasks"] == ["even", "odd"]
    assert summary["first"]["step"] == 0 and summary["last"]["step"] == 3
    assert summary["last"]["A"]["all"] == evals[-1]["eval/A/all/acc"]
    assert summary["last"]["A"]["parse_rate"] == evals[-1]["eval/A/all/parse_rate"]


def _training_part(records):
    return [{k: v for k, v in r.items() if k.startswith("agent/")} for r in records if r["step"] > 0]


def test_evaluation_leaves_training_untouched_and_resumes_exactly(files):
    """Sampled evaluation draws from a forked RNG: the training records of a run with it
    equal those of a run without it. A run cut at step 2 and resumed to 4 logs what the
    straight run did, held-out scores included."""
    # self-certainty rewards differ between samples, so every step updates; a constant
    # schedule, so a run of 2 steps extended to 4 is the straight run of 4
    common = ["method=intuitor", "optim.schedule=constant", "eval.samples=2",
              "checkpoint.every=2", "checkpoint.keep_last=0"]
    plain, straight, parted = files / "plain", files / "straight", files / "parted"
    assert main(_run_args(files, plain, "run.steps=4", "eval.every=0", *common)) == 0
    assert main(_run_args(files, straight, "run.steps=4", "eval.every=2", *common)) == 0
    assert main(_run_args(files, parted, "run.steps=2", "eval.every=2", *common)) == 0
    assert main(["train", "--resume", str(parted), "run.steps=4"]) == 0
    with_eval = read_metrics(straight / "metrics.jsonl")
    assert all(r["agent/A/loss"] != 0 for r in with_eval if r["step"] > 0)
    assert _training_part(read_metrics(plain / "metrics.jsonl")) == _training_part(with_eval)

    def untimed(records):
        return [{k: v for k, v in r.items() if not k.startswith("timing/")} for r in records]
    resumed = read_metrics(parted / "metrics.jsonl")
    assert [r["step"] for r in resumed] == [0, 1, 2, 3, 4]
    assert untimed(resumed) == untimed(with_eval)


def test_resume_refuses_another_holdout(files, capsys):
    """The run reads its file once (the held-out share is cut from that read); a resume may
    not change the share."""
    _write(files / "all.jsonl", _records(20, "q"))
    out = files / "run"
    args = ["train", "method=gt_reward", TEXT_AGENT, "arms=[]", "data.source=file",
            f"data.path={files / 'all.jsonl'}", "eval.every=1", "eval.holdout=0.2",
            "reward.answer_style=last_letter", "rollout.prompts_per_step=2",
            "rollout.rollouts_per_prompt=2", "rollout.max_new_tokens=4", "eval.max_new_tokens=4",
            "log.plot=false", "run.threads=1", "run.steps=1", f"run.output_dir={out}"]
    assert main(args) == 0
    assert capsys.readouterr().out.count("all.jsonl: 20 rows read, 20 problems loaded") == 1
    with pytest.raises(ConfigError, match=r"cannot change eval\.holdout \(0\.2 -> 0\.3\)"):
        from vlcohort.recipes.cohort import resume_config
        resume_config(out, ["eval.holdout=0.3", "run.steps=2"])


def test_a_comparison_summary_takes_the_families_the_records_name(tmp_path):
    """Arms on a file: summary.json's families are those the held-out records name (a
    ``task`` column), with parse rate and length beside them; the synthetic families of
    ``data.tasks`` are not invented."""
    from vlcohort.recipes.arms import summarise, summary_table

    cfg = load_config(None, [GT, TEXT_AGENT, "arms=[gt_reward, ttrl]", "data.source=file",
                             "data.path=x.jsonl", "eval.every=1", "eval.holdout=0.2"])
    for method, last in (("gt_reward", 0.75), ("ttrl", 0.5)):
        (tmp_path / method).mkdir()
        recs = [{"step": s, "eval/A/next/acc": acc, "eval/A/larger/acc": 0.25, "eval/A/all/acc": acc,
                 "eval/A/all/parse_rate": 0.9, "eval/A/all/length": 7.0}
                for s, acc in ((0, 0.25), (2, last))]
        (tmp_path / method / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    summary = summarise(cfg, tmp_path)
    assert summary["tasks"] == ["next", "larger"]
    assert summary["methods"]["gt_reward"]["A"] == {"next": 0.75, "larger": 0.25, "all": 0.75,
                                                    "parse_rate": 0.9, "length": 7.0,
                                                    "unseen": 0.5}
    assert summary["start"]["A"]["next"] == 0.25
    table = summary_table(summary)
    assert "next" in table and "larger" in table and "shape_colour" not in table
