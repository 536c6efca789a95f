"""``data.max_prompt_tokens`` on the paths besides the training batch: the held-out
evaluation of a training run and self-play's anchor pool and solver questions. A prompt
over the limit is left out and counted there too, never asked (tiny real models)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vlcohort.answers.grading import get_grader
from vlcohort.config import load_config
from vlcohort.data.problems import Problem
from vlcohort.monitoring.heldout import evaluate_agent
from vlcohort.recipes import selfplay as sp

LIMIT = 120
RECIPE = Path(__file__).resolve().parents[1] / "configs" / "self_play_tiny.yaml"


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def _overlong(words: int = 400) -> str:
    return "Which letter comes first? " + " ".join(f"word{i}" for i in range(words))


def _short(i: int, task: str) -> Problem:
    return Problem(id=f"{task}-{i}", text=f"Which is larger, {i} or {i + 3}?",
                   options=[str(i), str(i + 3)], gold="B", meta={"task": task})


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory):
    os.environ["VLCOHORT_CACHE"] = str(tmp_path_factory.getbasetemp() / "vlcohort-cache")
    from vlcohort.training.agent import build_agent

    cfg = load_config(None, ["method=ttrl", "agents=[{name: A, path: 'tiny:qwen2'}]"])
    return build_agent(cfg.agents[0])


def test_held_out_accuracy_leaves_out_an_overlong_problem(qwen2):
    """One overlong problem among short ones (alone in its task family): with the limit
    it is not asked and not counted as wrong. The accuracies equal those of the short
    problems alone, its family has no accuracy, and its id is in ``left_out``."""
    grader = get_grader("corrected")
    short = [_short(i, "sums") for i in range(3)] + [_short(i, "more") for i in range(2)]
    long = Problem(id="too-long", text=_overlong(), options=["a", "b"], gold="A",
                   meta={"task": "long"})
    ask = dict(system_prompt="You are a helpful assistant.", instruction="Answer briefly.",
               grader=grader, max_new_tokens=4, batch_size=4)
    assert qwen2.adapter.prompt_token_count(qwen2.adapter.render(
        long, ask["system_prompt"], ask["instruction"])) > LIMIT
    mixed = [*short[:2], long, *short[2:]]  # the long one in the first batch, not last

    limited = evaluate_agent(qwen2, mixed, max_prompt_tokens=LIMIT, **ask)
    alone = evaluate_agent(qwen2, short, max_prompt_tokens=LIMIT, **ask)
    assert dict(limited) == dict(alone)
    assert _families(limited) == {"sums", "more", "all"}
    assert limited.left_out == [("too-long", "prompt_too_long")] and alone.left_out == []

    unlimited = evaluate_agent(qwen2, mixed, **ask)  # 0: no limit, all asked as before
    assert _families(unlimited) == {"sums", "more", "long", "all"} and unlimited.left_out == []


def _families(scores) -> set[str]:
    """The task families a held-out evaluation scored (``<family>/acc`` keys)."""
    return {k.removesuffix("/acc") for k in scores if k.endswith("/acc")}


def test_an_overlong_held_out_set_leaves_every_problem_out(qwen2):
    long = [Problem(id=f"long-{i}", text=_overlong(), gold="A", meta={"task": "t"})
            for i in range(2)]
    out = evaluate_agent(qwen2, long, None, None, get_grader("corrected"),
                         max_new_tokens=2, max_prompt_tokens=LIMIT)
    assert [pid for pid, _ in out.left_out] == ["long-0", "long-1"] and "t/acc" not in out


@pytest.fixture(scope="module")
def selfplay_run(tmp_path_factory):
    os.environ["VLCOHORT_CACHE"] = str(tmp_path_factory.getbasetemp() / "vlcohort-cache")
    run_dir = tmp_path_factory.mktemp("selfplay") / "run"
    cfg = load_config(RECIPE, ["log.progress=false", "run.threads=1",
                               f"run.output_dir={run_dir}",
                               f"data.max_prompt_tokens={LIMIT * 4}"])
    return sp.setup(cfg)


def test_the_anchor_pool_leaves_out_an_overlong_problem(selfplay_run):
    run = selfplay_run
    good = run.pool[0]
    long = Problem(id="too-long", text=_overlong(2000), images=good.images, gold="A",
                   meta=dict(good.meta))
    kept, broken = sp.usable_pool([good, long], [run.agents[run.solver]], run.cfg)
    assert [p.id for p in kept] == [good.id]
    assert broken == {"prompt_too_long": 1}


def test_an_overlong_generated_question_is_invalid_and_counted(selfplay_run):
    """A challenger completion whose question is over the limit for the solver: invalid
    (reason ``prompt_too_long``), like a question the solver cannot render at all."""
    run = selfplay_run
    challenger = run.agents[run.challenger]
    prompts, subjects = sp.challenger_prompts(run, 1)
    rendered = [challenger.adapter.render(p, run.cfg.self_play.challenger_system, None)
                for p in prompts]
    G = run.cfg.rollout.rollouts_per_prompt
    texts = ["<question>Is the shape round?</question>"] * (len(prompts) * G)
    texts[1] = f"<question>{_overlong(2000)}</question>"
    before = run.skipped.get("prompt_too_long", 0)
    batch = sp.parse_batch(run, 1, prompts, rendered, subjects, texts)
    assert batch.reasons[1] == "prompt_too_long" and batch.problems[1] is None
    assert all(r is None for n, r in enumerate(batch.reasons) if n != 1), batch.reasons
    assert run.skipped["prompt_too_long"] == before + 1
