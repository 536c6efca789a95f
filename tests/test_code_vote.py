"""``reward.answer_kind=code``: a cohort votes on code without gold. Two programs are one
answer when they behave the same on the prompt's public inputs (behaviour keys, run in
the real sandbox); ``ground_truth`` rewards the programs that pass the prompt's tests.

Every program below runs for real in ``vlcohort.code``'s sandbox; nothing stands in for
the vote, the keys or the checks. The tiny models' completions are gibberish, so the
vote's behaviour is pinned down on hand-written completions, fed both straight into the
reward functions and through the real step (``train_step``) with an engine that replays
them.
"""

from __future__ import annotations

import json

import pytest
import torch

from tests.helpers.replay import ReplayEngine
from vlcohort.cli import main
from vlcohort.config import load_config
from vlcohort.data.problems import Problem, load_problems_from
from vlcohort.monitoring.metrics import documented, read_metrics
from vlcohort.training import rewards
from vlcohort.training.rewards import (
    CODE_KEYS,
    CodeProblemError,
    RewardInputs,
    code_keys_all,
    reward_of,
    vote_all,
)
from vlcohort.typed_yaml import ConfigError

# ----------------------------------------------------------------------- the prompt

#: "Read two integers on one line, print their sum." Public inputs are positive only; the
#: tests add negatives, so a program can agree with the majority on the public inputs
#: and still fail them (the vote is not a test).
PUBLIC = {"kind": "stdin", "cases": [["1 2\n", "3\n"], ["10 5\n", "15\n"], ["7 0\n", "7\n"]]}
TESTS = {"kind": "stdin", "cases": [["1 2\n", "3\n"], ["-4 1\n", "-3\n"], ["100 -100\n", "0\n"],
                                    ["0 0\n", "0\n"]]}


def fenced(code: str, lang: str = "python") -> str:
    return f"Here is my solution.\n```{lang}\n{code}\n```\nIt reads the input and prints."


SUM_SPLIT = fenced("a, b = map(int, input().split())\nprint(a + b)")
SUM_SYS = fenced("import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))", lang="")
SUM_FUNC = ("Let me think.\n```py\nprint('wrong draft')\n```\nActually, in Python:\n"
            "```python\ndef add(line):\n    x, y = line.split()\n    return int(x) + int(y)\n\n"
            "print(add(input()))\n```")  # the last python block is the answer
BUGGY_SUB = fenced("a, b = map(int, input().split())\nprint(a - b)")
PROSE = "To solve this, read both numbers and add them, then print the result."  # no code
SUM_ABS = fenced("a, b = map(int, input().split())\nprint(abs(a) + abs(b))")  # public-equal only
BUGGY_MUL = fenced("a, b = map(int, input().split())\nprint(a * b)")
EMPTY = "```python\n# TODO\n```"


def code_problem(pid: str = "sum", public=PUBLIC, tests=TESTS) -> Problem:
    meta = {}
    if public is not None:
        meta["code_public"] = public
    if tests is not None:
        meta["code_tests"] = tests
    return Problem(id=pid, text="Read two integers a and b, print a + b.", source="unit",
                   meta=meta)


def inputs(agent, answers, votes, problems, **kw) -> RewardInputs:
    G = len(answers[0])
    return RewardInputs(agent=agent, answers=answers, votes=votes, problems=problems,
                        trained=list(range(len(problems))), token_stats=lambda: None,
                        group_size=G, grader=CODE_KEYS, answer_kind="code", **kw)


# ----------------------------------------------------------------- keys and the vote


@pytest.mark.sandbox
def test_equivalent_programs_are_one_answer_and_the_buggy_one_gets_nothing(monkeypatch):
    """3 programs written three ways (split / sys.stdin / a function, fenced python,
    untagged, after a discarded draft block) + 1 buggy + 1 prose-only: the three are one
    class and win; the buggy one and the prose get reward 0."""
    from vlcohort.code import equivalence

    runs = []
    real = equivalence.behaviour_key

    def counting(code, *args, **kwargs):  # the real key, counted
        runs.append(code)
        return real(code, *args, **kwargs)

    monkeypatch.setattr(equivalence, "behaviour_key", counting)
    texts = [[SUM_SPLIT, SUM_SYS, SUM_FUNC, BUGGY_SUB, PROSE, SUM_SPLIT]]  # [B=1][G=6]
    keys = code_keys_all(texts, [code_problem()], workers=2)  # [1][6]
    k = keys[0]
    assert k[0] is not None and k[0] == k[1] == k[2] == k[5]
    assert k[3] is not None and k[3] != k[0]
    assert k[4] is None  # prose is not a program that runs: an abstention
    # keys are per distinct program: the repeated one ran once, the prose (which does not
    # compile) not at all
    assert len(runs) == 4

    votes = vote_all(keys, [code_problem()], grader=CODE_KEYS)
    v = votes[0]
    assert v.label == k[0] and v.share == 4 / 6
    assert sorted(v.counts.values()) == [1, 4]
    r = reward_of("self_vote", inputs(0, keys, [votes], [code_problem()]))
    assert r.scored.rewards.tolist() == [[1.0, 1.0, 1.0, 0.0, 0.0, 1.0]]
    assert r.scored.valid.tolist() == [True] and r.labels == [k[0]]


@pytest.mark.sandbox
def test_tie_and_min_share_rules_hold_for_code_keys():
    keys = code_keys_all([[SUM_SPLIT, SUM_SYS, BUGGY_SUB, BUGGY_SUB, PROSE, EMPTY]],
                         [code_problem()])
    assert keys[0][5] is None  # a block with no statement abstains (it would "run")
    assert vote_all(keys, [code_problem()], grader=CODE_KEYS)[0].reason == "tie"
    first = vote_all(keys, [code_problem()], tie="first", grader=CODE_KEYS)[0]
    assert first.label == keys[0][0]
    gated = vote_all(keys, [code_problem()], tie="first", min_share=0.5, grader=CODE_KEYS)[0]
    assert gated.label is None and gated.reason == "min_share"  # 2 of 6 < 0.5
    parsed = vote_all(keys, [code_problem()], tie="first", min_share=0.5, grader=CODE_KEYS,
                      share_of="parsed")[0]
    assert parsed.label == keys[0][0]  # 2 of the 4 that ran


@pytest.mark.sandbox
def test_peer_vote_crosses_agents_by_behaviour_not_text():
    """A is taught by B's vote and B by A's (a ring of two). B's winning programs share no
    text with A's, only behaviour; on the second prompt A ties, so B gets no label there."""
    p = [code_problem("p0"), code_problem("p1")]
    a_texts = [[SUM_SPLIT, SUM_FUNC, SUM_ABS, BUGGY_MUL, PROSE],  # p0: A's majority: sum
               [SUM_SPLIT, SUM_SYS, BUGGY_SUB, BUGGY_SUB, PROSE]]  # p1: 2-2 tie
    b_texts = [[SUM_SYS, fenced("print(sum(map(int, input().split())))"), BUGGY_SUB,
                fenced("x = input().split()\nprint(int(x[0]) + int(x[1]))"), PROSE],
               [BUGGY_SUB, fenced("a, b = input().split()\nprint(int(a) - int(b))"),
                fenced("l = list(map(int, input().split()))\nprint(l[0] - l[1])"), SUM_SPLIT,
                PROSE]]  # p1: B's majority is the buggy a - b
    keys_a, keys_b = code_keys_all(a_texts, p), code_keys_all(b_texts, p)  # [2][5] each
    votes = [vote_all(keys_a, p, grader=CODE_KEYS), vote_all(keys_b, p, grader=CODE_KEYS)]
    assert votes[0][1].reason == "tie" and votes[1][1].label == keys_b[1][0]
    ra = reward_of("peer_vote", inputs(0, keys_a, votes, p, topology="ring"))
    rb = reward_of("peer_vote", inputs(1, keys_b, votes, p, topology="ring"))
    # p0: B's winner is "sum": A's three sum-alikes on the public inputs (abs too) count
    assert ra.scored.rewards[0].tolist() == [1.0, 1.0, 1.0, 0.0, 0.0]
    # p1: B's winner is the buggy a - b, and A is rewarded for agreeing with it: the
    # method's premise (a peer's majority) taken at its word, not a test
    assert ra.scored.rewards[1].tolist() == [0.0, 0.0, 1.0, 1.0, 0.0]
    assert rb.scored.rewards[0].tolist() == [1.0, 1.0, 0.0, 1.0, 0.0]
    assert rb.scored.valid.tolist() == [True, False]  # A abstained (tie) on p1
    assert rb.scored.rewards[1].tolist() == [0.0] * 5
    from vlcohort.recipes.step import agreement

    assert agreement(votes, p, CODE_KEYS) == 0.5  # p0: one behaviour; p1: A abstained
    votes_same = [vote_all(keys_a[:1], p[:1], grader=CODE_KEYS),
                  vote_all(keys_b[:1], p[:1], grader=CODE_KEYS)]
    assert agreement(votes_same, p[:1], CODE_KEYS) == 1.0


@pytest.mark.sandbox
def test_ground_truth_rewards_the_programs_that_pass_the_tests():
    """The tests, not the public inputs: abs(a) + abs(b) agrees with the sum on the public
    inputs (one vote class) but fails a test with a negative number."""
    p = [code_problem("g0"), code_problem("g1")]
    texts = [[SUM_SPLIT, SUM_ABS, BUGGY_SUB, PROSE], [SUM_SYS, SUM_FUNC, BUGGY_MUL, EMPTY]]
    keys = code_keys_all(texts, p)
    assert keys[0][0] == keys[0][1]  # one answer for the vote ...
    votes = [vote_all(keys, p, grader=CODE_KEYS)]
    r = reward_of("ground_truth", inputs(0, keys, votes, p, trained_texts=texts,
                                         format_weight=0.5))
    # ... but only the real sum passes; +0.5 for each program that ran on the public inputs
    assert r.scored.correct.tolist() == [[True, False, False, False], [True, True, False, False]]
    assert r.scored.rewards.tolist() == [[1.5, 0.5, 0.5, 0.0], [1.5, 1.5, 0.5, 0.0]]
    assert r.scored.valid.tolist() == [True, True] and r.labels == [None, None]
    assert r.metrics["acc"] == pytest.approx(3 / 8)
    # a prompt this process does not train on (another agent's shard) is not run
    only = inputs(0, keys, votes, p, trained_texts=texts[1:])
    only.trained = [1]
    r1 = reward_of("ground_truth", only)
    assert r1.scored.valid.tolist() == [False, True]
    assert r1.scored.rewards[0].tolist() == [0.0] * 4


def test_a_prompt_without_public_inputs_is_a_clear_error():
    with pytest.raises(CodeProblemError, match=r"problem 'bare' \(source unit\): no "
                                               r"meta\['code_public'\].*public_tests"):
        code_keys_all([[SUM_SPLIT]], [code_problem("bare", public=None)])
    with pytest.raises(CodeProblemError, match=r"problem 'nt'.*meta\['code_tests'\]"):
        rewards.code_verdicts([[SUM_SPLIT]], [code_problem("nt", tests=None)])
    with pytest.raises(CodeProblemError, match=r"'odd'.*not a CodeTests dict"):
        code_keys_all([[SUM_SPLIT]], [code_problem("odd", public={"kind": "telepathy"})])


# ------------------------------------------------------------------ data and config


def _code_jsonl(path, n=4, extra=()):
    rows = [{"id": f"c{i}", "question": f"Read two integers, print their sum plus {i}.",
             "public_tests": {"kind": "stdin", "cases": [[f"{j} {j + 1}\n", f"{2 * j + 1 + i}\n"]
                                                         for j in range(2)]},
             "tests": json.dumps({"kind": "stdin", "cases": [["3 4\n", f"{7 + i}\n"],
                                                             ["-1 1\n", f"{i}\n"]]})}
            for i in range(n)]
    rows += list(extra)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_loader_carries_code_tests_and_skips_records_without_them(tmp_path):
    path = _code_jsonl(tmp_path / "code.jsonl", n=2, extra=[
        {"id": "nopub", "question": "q", "public_tests": None, "tests": None},
        {"id": "bad", "question": "q", "public_tests": {"cases": [["1\n", "1\n"]]}, "tests": None},
        {"id": "notest", "question": "q", "public_tests": PUBLIC, "tests": None},
    ])
    problems, report = load_problems_from(str(path), require_code=("code_public", "code_tests"))
    assert [p.id for p in problems] == ["c0", "c1"]
    assert report.skipped == {"missing_code_public": 1, "bad_code_public": 1,
                              "missing_code_tests": 1}
    assert "row 2, field 'code_public/public_tests'" in report.summary()
    from vlcohort.code.checks import CodeTests

    t = CodeTests.from_dict(problems[1].meta["code_tests"])
    assert t.kind == "stdin" and [c[1] for c in t.cases] == ["8\n", "1\n"]
    pub = CodeTests.from_dict(problems[0].meta["code_public"])
    assert [c[0] for c in pub.cases] == ["0 1\n", "1 2\n"]
    json.dumps(problems[0].meta)  # JSON-able, as Problem.meta of code benchmarks is
    # public inputs only is enough for a vote; a math run never reads the code fields
    only_pub, rep = load_problems_from(str(path), require_code=("code_public",))
    assert [p.id for p in only_pub] == ["c0", "c1", "notest"] and "code_tests" not in only_pub[2].meta
    math, rep = load_problems_from(str(path))
    assert len(math) == 5 and not rep.skipped and "code_public" not in math[0].meta


def test_answer_kind_is_checked_against_its_registry(tmp_path):
    data = ["data.source=file", f"data.path={tmp_path / 'x.jsonl'}"]
    assert load_config(None, ["reward.answer_kind=code", *data]).reward.answer_kind == "code"
    assert load_config(None, []).reward.answer_kind == "math"
    from vlcohort.config_checks import CHOICES

    assert CHOICES["reward.answer_kind"] is rewards.ANSWER_KINDS
    with pytest.raises(ConfigError, match=r"reward\.answer_kind: 'java' is not one of: math, code"):
        load_config(None, ["reward.answer_kind=java"])
    with pytest.raises(ConfigError, match=r"answer_kind=code with data\.source=synthetic"):
        load_config(None, ["reward.answer_kind=code"])
    with pytest.raises(ConfigError, match=r"reward\.code_workers: must be >= 0"):
        load_config(None, ["reward.code_workers=-1"])
    with pytest.raises(ConfigError, match=r"eval\.every=5 with reward\.answer_kind=code"):
        load_config(None, ["reward.answer_kind=code", "eval.every=5", *data])
    with pytest.raises(ConfigError, match=r"method=self_play"):
        load_config(None, ["method=self_play", "reward.answer_kind=code", *data])


# ------------------------------------------------------------------------ training

TWO_TEXT_AGENTS = "agents=[{name: A, path: 'tiny:qwen2'}, {name: B, path: 'tiny:qwen2'}]"


def _train_args(data, run, *extra):
    return ["method=co_rl", TWO_TEXT_AGENTS, "reward.answer_kind=code", "data.source=file",
            f"data.path={data}", "arms=[]", "eval.every=0", "rollout.prompts_per_step=2",
            "rollout.rollouts_per_prompt=4", "rollout.max_new_tokens=8", "grpo.kl_coef=0",
            "grpo.micro_batch_seqs=4", "optim.lr=1e-3", "optim.warmup_ratio=0",
            "log.plot=false", "log.tensorboard=false", "reward.min_share=0",
            "reward.code_workers=2", "run.seed=3",
            f"run.output_dir={run}", *extra]


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


@pytest.mark.sandbox
def test_tiny_cohort_trains_two_steps_with_code_answers(tmp_path, capsys):
    """The real run: two tiny text models, a JSONL of code prompts (one without its
    public inputs: skipped and counted at load), A rewarded by B's votes over behaviour
    keys, B by the tests (ground_truth). Random models write no program that runs, so
    they abstain and fail; the steps still run end to end and log documented metrics."""
    data = _code_jsonl(tmp_path / "code.jsonl", extra=[
        {"id": "nopub", "question": "q", "public_tests": None, "tests": None}])
    run = tmp_path / "run"
    assert main(["train", *_train_args(data, run, "run.steps=2",
                                       "agents.1.reward_source=ground_truth")]) == 0
    assert "skipped 1 (missing_code_public=1)" in capsys.readouterr().err
    recs = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in recs] == [1, 2]
    for r in recs:
        for name in ("A", "B"):
            assert 0.0 <= r[f"agent/{name}/parse_rate"] <= 1.0
            assert 0.0 <= r[f"agent/{name}/teacher_abstain"] <= 1.0
            assert f"agent/{name}/reward/mean" in r
        assert "agent/A/acc" not in r  # a vote's key is never compared with a gold
        assert r["agent/B/acc"] == r["agent/B/reward/mean"] == 0.0  # gibberish fails the tests
        assert r["agent/B/teacher_abstain"] == 0.0  # every prompt carries its tests
        assert 0.0 <= r["cohort/agreement"] <= 1.0 and r["timing/grading"] > 0
    assert not {k for r in recs for k in r if not documented(k)}
    cfg = load_config(run / "config.yaml")
    assert cfg.reward.answer_kind == "code" and cfg.agents[1].reward_source == "ground_truth"


@pytest.mark.sandbox
def test_hand_written_completions_through_the_real_step(tmp_path, monkeypatch):
    """train_step over two code prompts with replayed completions: A's groups vote
    sum (3 of 4), B's vote differs per prompt; each agent is rewarded by the other's
    winning class, and the agents with a signal take a GRPO update."""
    from vlcohort.code import equivalence
    from vlcohort.recipes.cohort import setup
    from vlcohort.recipes.step import train_step

    runs = []
    real = equivalence.behaviour_key
    monkeypatch.setattr(equivalence, "behaviour_key",
                        lambda code, *a, **k: runs.append(code) or real(code, *a, **k))

    data = _code_jsonl(tmp_path / "code.jsonl", n=2)  # c0: a + b, c1: a + b + 1
    plus_one = fenced("a, b = map(int, input().split())\nprint(a + b + 1)")
    plus_one_sys = fenced("import sys\nprint(sum(map(int, sys.stdin.read().split())) + 1)")
    cfg = load_config(None, _train_args(data, tmp_path / "run", "run.steps=1",
                                        "data.shuffle=false", "grpo.is_mode='off'"))
    run = setup(cfg)
    scripts = {"A": {"c0": [SUM_SPLIT, SUM_SYS, SUM_FUNC, BUGGY_SUB],
                     "c1": [plus_one, plus_one_sys, BUGGY_SUB, PROSE]},
               "B": {"c0": [SUM_SYS, BUGGY_SUB, SUM_SPLIT, PROSE],
                     "c1": [BUGGY_SUB, BUGGY_SUB, plus_one, BUGGY_MUL]}}
    for agent in run.agents:
        agent.engine = ReplayEngine(agent.engine, agent.adapter, scripts[agent.name])
    before = {a.name: [t.detach().clone() for t in a.model.parameters()] for a in run.agents}
    rec = train_step(run, 1)
    ids = [p.id for p in run.stream.problems[:2]]
    assert ids == ["c0", "c1"]
    # one sandbox run per distinct (prompt, program) across both agents: c0 4, c1 4
    assert len(runs) == 8
    # A is taught by B: c0 B's winner is sum (2 of 4) -> A [1, 1, 1, 0]; c1 B's winner is
    # the buggy a - b (2 of 4) -> A [0, 0, 1, 0]
    assert rec["agent/A/reward/mean"] == pytest.approx((3 + 1) / 8)
    # B is taught by A: c0 sum -> B [1, 0, 1, 0]; c1 a + b + 1 -> B [0, 0, 1, 0]
    assert rec["agent/B/reward/mean"] == pytest.approx((2 + 1) / 8)
    assert rec["agent/A/parse_rate"] == pytest.approx(7 / 8)
    assert rec["agent/B/parse_rate"] == pytest.approx(7 / 8)
    assert rec["agent/A/teacher_abstain"] == 0.0 and rec["cohort/agreement"] == 0.5
    for a in run.agents:
        assert f"agent/{a.name}/loss" in rec
        assert any(not torch.equal(x, y) for x, y in zip(before[a.name], a.model.parameters()))
    assert not {k for k in rec if not documented(k)}
