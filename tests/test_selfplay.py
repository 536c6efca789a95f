"""Guided challenger / solver self-play (R-Zero / R-Few): the math by hand, then real runs on
tiny models (CPU, offline) -- alternating phases from a config, resume, and both roles'
updates from hand-given questions (tiny random models write no parseable question)."""

from __future__ import annotations

import json
import math
import random
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from vlcohort.answers.voting import majority_vote
from vlcohort.cli import main
from vlcohort.config import load_config
from vlcohort.data.problems import Problem
from vlcohort.monitoring.metrics import documented, read_metrics
from vlcohort.recipes import selfplay as sp
from vlcohort.recipes import selfplay_math as spm
from vlcohort.rollout.base import Rollouts
from vlcohort.training.logprobs import completion_logprobs
from vlcohort.typed_yaml import ConfigError

RECIPE = Path(__file__).resolve().parents[1] / "configs" / "self_play_tiny.yaml"


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


# ============================================================================ the math


def test_parse_question():
    assert spm.parse_question("plan...\n<question>\nWhat is 2+3?\n</question>\n\\boxed{5}") == "What is 2+3?"
    assert spm.parse_question("<question>first</question> <question>second</question>") == "second"
    assert spm.parse_question("<QUESTION> x </Question>") == "x"
    assert spm.parse_question("<question>line 1\nline 2</question>") == "line 1\nline 2"
    for bad in ("<question>  </question>", "<question>never closed", "no tags at all", "", None):
        assert spm.parse_question(bad) is None


def test_p_hat_counts_unparsed_answers_in_the_denominator_only():
    assert spm.p_hat(["4", "4.0", None, "5"]) == 0.5  # {4, 4.0} | {5}; None forms no class
    assert spm.p_hat(["1/2", "0.5", "\\frac{1}{2}", "2", None, None]) == 0.5  # 3 of 6
    # multiple choice: "C", "45°" and "(C)" are one class through the grader
    assert spm.p_hat(["C", "45°", "(C)", "A", None], options=["30°", "40°", "45°"]) == 0.6
    assert spm.p_hat(["A", "B"]) == 0.5  # a tie still has a largest class
    assert spm.p_hat([None, None, None]) == 0.0
    assert spm.p_hat([]) == 0.0


def test_challenger_reward_by_hand():
    assert [spm.uncertainty_reward(p) for p in (0.5, 0.0, 1.0, 0.25)] == [1.0, 0.0, 0.0, 0.5]
    assert spm.uncertainty_reward(0.3) == pytest.approx(0.6)
    assert spm.uncertainty_reward(0.7) == pytest.approx(0.6)
    valid = [True, True, True, False]
    p_hats = [0.5, 0.5, 0.2, 0.9]  # the invalid one's p_hat / penalty are ignored
    penalties = [0.5, 0.5, 0.25, 0.75]
    # 1 - 2|p - 1/2| - lambda x penalty; -1 for the unparseable question
    assert spm.challenger_rewards(valid, p_hats, penalties, 1.0).tolist() == pytest.approx(
        [0.5, 0.5, 0.4 - 0.25, -1.0])
    assert spm.challenger_rewards(valid, p_hats, penalties, 0.4).tolist() == pytest.approx(
        [0.8, 0.8, 0.4 - 0.1, -1.0])
    assert spm.challenger_rewards(valid, p_hats, penalties, 0.0).tolist() == pytest.approx(
        [1.0, 1.0, 0.4, -1.0])


def test_sentence_bleu_by_hand():
    s = "what is two plus three".split()
    assert spm.sentence_bleu(s, s) == pytest.approx(1.0)
    # p1..p4 = 4/5, 3/4, 2/3, 1/2; equal lengths
    assert spm.sentence_bleu("a b c d e".split(), "a b c d f".split()) == pytest.approx(0.2 ** 0.25)
    # no bigram match: p2 smoothed to 0.1 / 1; no trigram / 4-gram at all: 0.1 / 1 each
    assert spm.sentence_bleu(["a", "b"], ["a", "c"]) == pytest.approx((0.5 * 0.1 ** 3) ** 0.25)
    # shorter hypothesis: brevity penalty exp(1 - 5/3); p4 has no 4-gram: 0.1
    assert spm.sentence_bleu("a b c".split(), "a b c d e".split()) == pytest.approx(
        math.exp(1 - 5 / 3) * 0.1 ** 0.25)
    # clipped counts: "the" x4 matches once; (the the) x3 -> 0.1/3, x2 -> 0.1/2, x1 -> 0.1/1
    assert spm.sentence_bleu("the the the the".split(), "the cat".split()) == pytest.approx(
        (0.25 * (0.1 / 3) * (0.1 / 2) * 0.1) ** 0.25)
    assert spm.sentence_bleu(["x"], ["y"]) == 0.0  # no unigram in common
    assert spm.sentence_bleu([], ["y"]) == 0.0


def test_average_linkage_by_hand():
    two_pairs = np.array([[0, .2, .9, .9], [.2, 0, .9, .9], [.9, .9, 0, .3], [.9, .9, .3, 0]])
    assert spm.average_linkage_clusters(two_pairs, 0.5) == [0, 0, 1, 1]
    assert spm.average_linkage_clusters(two_pairs, 0.95) == [0, 0, 0, 0]
    assert spm.average_linkage_clusters(two_pairs, 0.1) == [0, 1, 2, 3]

    def three(d02, d12):
        return np.array([[0, .2, d02], [.2, 0, d12], [d02, d12, 0]])

    # after {0, 1} merge at 0.2 the distance to 2 is the MEAN of d02 and d12:
    assert spm.average_linkage_clusters(three(.4, .55), 0.5) == [0, 0, 0]  # .475 (complete: .55)
    assert spm.average_linkage_clusters(three(.45, .6), 0.5) == [0, 0, 1]  # .525 (single: .45)
    # a distance equal to the threshold does not merge (scikit-learn's rule)
    assert spm.average_linkage_clusters(np.array([[0, .5], [.5, 0]]), 0.5) == [0, 1]
    assert spm.average_linkage_clusters(np.array([[0, .49], [.49, 0]]), 0.5) == [0, 0]
    assert spm.average_linkage_clusters(np.zeros((0, 0)), 0.5) == []


def test_average_linkage_agrees_with_scipy():
    hierarchy = pytest.importorskip("scipy.cluster.hierarchy")
    from scipy.spatial.distance import squareform

    rng = np.random.default_rng(0)
    for trial in range(40):
        n = int(rng.integers(2, 12))
        x = rng.random((n, 2))
        d = np.sqrt(((x[:, None] - x[None]) ** 2).sum(-1))  # [n, n]
        t = float(rng.uniform(0.1, 0.8))
        ours = spm.average_linkage_clusters(d, t)
        theirs = hierarchy.fcluster(hierarchy.linkage(squareform(d, checks=False), "average"),
                                    t, criterion="distance")
        def same(labels):
            return {frozenset(np.flatnonzero(np.asarray(labels) == c)) for c in set(labels)}
        assert same(ours) == same(theirs), (trial, t)


# ------------------------------------------------- the hand-written versions nltk / scipy replaced
# Kept here as the references the library-backed selfplay_math must reproduce.

def _reference_bleu(hypothesis, reference, max_n=4, epsilon=0.1):
    """Sentence BLEU (clipped n-gram precisions, method-1 smoothing, brevity penalty)."""
    if not hypothesis:
        return 0.0
    precisions = []
    for n in range(1, max_n + 1):
        hyp = Counter(tuple(hypothesis[i:i + n]) for i in range(len(hypothesis) - n + 1))
        ref = Counter(tuple(reference[i:i + n]) for i in range(len(reference) - n + 1))
        matches = sum(min(c, ref[g]) for g, c in hyp.items())
        total = max(1, sum(hyp.values()))
        if n == 1 and matches == 0:
            return 0.0
        precisions.append(matches / total if matches else epsilon / total)
    c, r = len(hypothesis), len(reference)
    brevity = 1.0 if c > r else math.exp(1 - r / c)
    return brevity * math.exp(sum(math.log(p) for p in precisions) / max_n)


def _reference_average_linkage(dist, threshold):
    """Merge the closest pair of clusters (Lance-Williams average) while its distance is
    < threshold; ties: the first pair row-major; ids numbered by first member."""
    n = len(dist)
    if n == 0:
        return []
    d = np.array(dist, dtype=float)  # [Q, Q]
    np.fill_diagonal(d, np.inf)
    sizes = np.ones(n)
    members = {i: [i] for i in range(n)}
    while len(members) > 1:
        a, b = divmod(int(np.argmin(d)), n)
        if not d[a, b] < threshold:
            break
        a, b = min(a, b), max(a, b)
        merged = (sizes[a] * d[a] + sizes[b] * d[b]) / (sizes[a] + sizes[b])  # [Q]
        d[a, :], d[:, a] = merged, merged
        d[a, a] = np.inf
        d[b, :], d[:, b] = np.inf, np.inf
        sizes[a] += sizes[b]
        members[a].extend(members.pop(b))
    labels = [0] * n
    for label, rep in enumerate(sorted(members)):
        for i in members[rep]:
            labels[i] = label
    return labels


def test_sentence_bleu_is_nltk_method1_with_the_hypothesis_first():
    # edge cases: empty, single words, identical strings
    assert spm.sentence_bleu([], []) == 0.0 and spm.sentence_bleu(["a"], []) == 0.0
    assert spm.sentence_bleu(["a"], ["a"]) == pytest.approx(0.1 ** 0.75)  # p2..p4: 0.1 / 1
    assert spm.sentence_bleu("a b c d".split(), "a b c d".split()) == 1.0
    # order matters: "a b c d e" against "a b c": p1..p3 = 3/5, 2/4, 1/3, no 4-gram
    # match of 2: 0.1 / 2; longer than the reference, so no brevity penalty
    assert spm.sentence_bleu("a b c d e".split(), "a b c".split()) == pytest.approx(
        (0.6 * 0.5 * (1 / 3) * 0.05) ** 0.25)
    assert spm.sentence_bleu("a b c".split(), "a b c d e".split()) == pytest.approx(
        math.exp(1 - 5 / 3) * 0.1 ** 0.25)  # the other way round (the by-hand test above)
    rng = random.Random(0)
    words = "a b c d the what is two plus".split()
    pairs = [([], ["y"]), (["x"], ["y"]), (["x"], ["x"]), ("a a a".split(), "a".split())]
    pairs += [([rng.choice(words) for _ in range(rng.randint(0, 12))],
               [rng.choice(words) for _ in range(rng.randint(0, 12))]) for _ in range(2000)]
    for hyp, ref in pairs:  # nltk's math.fsum vs the in-order sum: within an ulp or two
        assert spm.sentence_bleu(hyp, ref) == pytest.approx(_reference_bleu(hyp, ref),
                                                            rel=0, abs=1e-15), (hyp, ref)


def test_average_linkage_reproduces_the_previous_clustering():
    rng = np.random.default_rng(1)
    for trial in range(300):  # continuous distances: no ties, the same ids, not just sets
        n = int(rng.integers(0, 12))
        x = np.triu(rng.random((n, n)), 1)
        d = x + x.T  # [Q, Q]
        for t in (0.0, 0.2, 0.5, 0.8, 1.1):
            assert spm.average_linkage_clusters(d, t) == _reference_average_linkage(d, t), \
                (trial, t)
    # a merge exactly at the threshold is refused, also for a mean that lands on it
    assert spm.average_linkage_clusters(np.array([[0, .4, .6], [.4, 0, .6], [.6, .6, 0]]), .4) \
        == _reference_average_linkage(np.array([[0, .4, .6], [.4, 0, .6], [.6, .6, 0]]), .4) \
        == [0, 1, 2]
    three = np.array([[0, .1, .25], [.1, 0, .75], [.25, .75, 0]])  # {0, 1} -> 2 at exactly .5
    assert spm.average_linkage_clusters(three, .5) == _reference_average_linkage(three, .5) \
        == [0, 0, 1]
    assert spm.average_linkage_clusters(three, np.nextafter(.5, 1)) == [0, 0, 0]
    # BLEU distances of near-duplicate question batches (the real input), cut at 0.5
    templates = ["what is two plus three", "how many apples are on the table",
                 "find the area of the triangle with sides 3 4 5", "name a red fruit"]
    r = random.Random(2)
    for trial in range(100):
        qs = []
        for _ in range(r.choice([2, 4, 8, 16])):
            w = r.choice(templates).split()
            if r.random() < 0.5:
                w[r.randrange(len(w))] = r.choice(["the", "four", "?", "many"])
            qs.append(" ".join(w))
        d = spm.bleu_distances(qs)
        tok = [q.split() for q in qs]  # pair (i, j), i < j: question i is the hypothesis
        ref = np.array([[1 - _reference_bleu(tok[min(i, j)], tok[max(i, j)]) if i != j else 0.0
                         for j in range(len(qs))] for i in range(len(qs))])  # [Q, Q]
        assert np.allclose(d, ref, rtol=0, atol=1e-15)
        def same(labels):
            return {frozenset(np.flatnonzero(np.asarray(labels) == c)) for c in set(labels)}
        assert same(spm.average_linkage_clusters(d, .5)) == \
            same(_reference_average_linkage(ref, .5))


def test_average_linkage_breaks_ties_as_scikit_learn():
    # the one change: d(1,2) = d(2,3) = 0 tie. The old loop merged (1,2) first (row-major),
    # then 3 with 0 (.25, tied with {1,2}-3 and first row-major), and stopped at
    # {0,3}-{1,2} = (.75 + 1 + .5 + 0) / 4 = .5625. scipy (and scikit-learn's
    # AgglomerativeClustering, which R-Zero uses and which calls scipy: [0, 1, 1, 1] with
    # scikit-learn 1.9.1) merges (2,3), then 1 at (0 + .5) / 2 = .25, then 0 at .67 > .5.
    d = np.array([[0, .75, 1, .25], [.75, 0, 0, .5], [1, 0, 0, 0], [.25, .5, 0, 0]])
    assert _reference_average_linkage(d, .5) == [0, 1, 1, 0]
    assert spm.average_linkage_clusters(d, .5) == [0, 1, 1, 1]


def test_repetition_penalty_on_a_hand_built_batch():
    questions = ["what is two plus three", "what is two plus three ?",
                 "name a red fruit that grows on trees"]
    d = spm.bleu_distances(questions)
    # question 0 vs 1: every n-gram of 0 is in 1 (p1..p4 = 1), 5 words vs 6: exp(1 - 6/5)
    assert d[0, 1] == d[1, 0] == pytest.approx(1 - math.exp(-0.2))
    assert d[0, 2] == d[1, 2] == 1.0  # no word in common
    # batch of 4 completions (the fourth unparseable, counted but not clustered)
    assert spm.repetition_penalties(questions, batch_size=4) == [0.5, 0.5, 0.25]
    assert spm.repetition_penalties(questions, batch_size=4, threshold=0.1) == [0.25] * 3
    assert spm.repetition_penalties([], batch_size=4) == []


def test_band_selection_edges():
    p = [0.0, 0.29, 3 / 10, 0.5, 7 / 10, 0.71, 1.0]
    assert spm.in_band(p, [0.3, 0.7]) == [False, False, True, True, True, False, False]
    assert spm.in_band(p, [0.0, 1.0]) == [True] * 7
    assert spm.in_band(p, [0.5, 0.5]) == [False, False, False, True, False, False, False]
    # quantile rule: the band's ends are quantiles of this batch's p_hats
    assert spm.in_band([0.0, 0.25, 0.5, 0.75, 1.0], [0.25, 0.75], "quantile") == \
        [False, True, True, True, False]
    # 30% quantile 0.2 + 0.2 x 0.3 = 0.26, 70% quantile 0.5 + 0.8 x 0.1 = 0.58
    assert spm.in_band([0.1, 0.2, 0.5, 0.6, 0.9], [0.3, 0.7], "quantile") == \
        [False, False, True, False, False]
    assert spm.in_band([], [0.3, 0.7], "quantile") == []
    with pytest.raises(ValueError, match="band rule"):
        spm.in_band([0.5], [0.3, 0.7], "median")


def test_distinct_2_histogram_solver_reward_and_phases():
    assert spm.distinct_n(["a b c", "a b d"]) == 0.75  # (a b) twice, (b c), (b d)
    assert spm.distinct_n(["a a a"]) == 0.5
    assert spm.distinct_n(["one", "two"]) is None
    assert spm.p_hat_histogram([0.0, 0.2, 0.3, 0.6, 1.0], 5) == {
        "0.00-0.20": 0.2, "0.20-0.40": 0.4, "0.40-0.60": 0.0, "0.60-0.80": 0.2, "0.80-1.00": 0.2}
    correct = torch.tensor([[True, False], [False, False]])
    parsed = torch.tensor([[True, True], [False, True]])
    assert spm.solver_rewards(correct, parsed, 0.1).flatten().tolist() == pytest.approx([1.0, 0.1, 0.0, 0.1])
    assert [spm.phase_of(s, 1, 2) for s in range(1, 7)] == \
        ["challenger", "solver", "solver", "challenger", "solver", "solver"]
    assert [spm.phase_of(s, 0, 1) for s in (1, 2)] == ["solver", "solver"]


def test_challenger_prompt_and_question_records():
    anchors = [Problem(id="a", text="<image>What colour is the shape?", options=["red", "blue"],
                       gold="B"),
               Problem(id="b", text="What is 3 + 4?", gold="7")]
    request = "Write one question."
    assert sp.challenger_text([], request) == request  # k = 0: R-Zero's bare request
    text = sp.challenger_text(anchors, request, with_image=True)
    assert "<image>" not in text
    assert ("Example 1:\n<question>\nWhat colour is the shape?\nChoices:\nA. red\nB. blue\n"
            "</question>\n\\boxed{B}") in text
    assert "Example 2:\n<question>\nWhat is 3 + 4?\n</question>\n\\boxed{7}" in text
    assert text.endswith("Write one question. The question must be about the image.")
    subject = Problem(id="s", text="q", images=["x.png"], meta={"base_dir": "/data"})
    q = sp.question_problem("Which colour? Choices: A. red B. blue", "gen-1-0", subject)
    assert (q.text, q.options, q.images, q.gold) == ("Which colour?", ["red", "blue"], ["x.png"], None)
    assert q.meta["base_dir"] == "/data"
    assert sp.question_problem("How many?", "gen-1-1").images == []
    pool, no_gold = sp.anchor_pool([*anchors, Problem(id="c", text="?")], 5, seed=0)
    assert [p.id for p in pool] == ["a", "b"] and no_gold == 1


@pytest.mark.parametrize("overrides,match", [
    (["reward.source=self_vote"], r"reward\.source='self_vote': method=self_play has no single"),
    (["self_play.solver=challenger"], r"both agent 'challenger'"),
    (["self_play.solver=X"], r"self_play\.solver: 'X' names no agent"),
    (["self_play.anchors_per_prompt=6"], r"self_play\.anchors_per_prompt: k must be in 0\.\.5"),
    (["self_play.band=[0.7, 0.3]"], r"self_play\.band: \[low, high\]"),
    (["self_play.band_rule=median"], r"self_play\.band_rule: 'median' is not one of"),
    (["self_play.solver_samples=1"], r"self_play\.solver_samples: m=1"),
    (["arms=[ttrl]"], r"arms: method=self_play runs alone"),
    (["eval.every=5"], r"eval\.every"),
    (["agents.2.path=tiny:qwen2", "agents.2.name=C"], r"exactly 2 agents"),
    (["grpo.micro_batch_seqs=3"], r"grpo\.micro_batch_seqs=3 must divide"),  # common checks run
])
def test_bad_self_play_config_names_the_key(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(RECIPE, overrides)


def test_roles_by_index_and_no_reward_source():
    cfg = load_config(RECIPE, ["self_play.challenger=1", "self_play.solver=0"])
    from vlcohort.config_checks import self_play_roles

    assert self_play_roles(cfg) == (1, 0)
    assert cfg.reward.source is None and cfg.method == "self_play"


# ============================================================================ real runs

FAST = ["log.progress=false", "run.threads=1"]


def _strip_timing(records):
    return [{k: v for k, v in r.items() if not k.startswith("timing/")} for r in records]


def test_alternating_phases_log_checkpoint_and_resume_exactly(tmp_path):
    """The recipe (k = 2 anchors, text challenger, VLM solver): 2 challenger + 2 solver
    steps; every metric documented; checkpoints loadable; resuming from the step-2
    checkpoint reproduces steps 3-4 (metrics and weights)."""
    run = tmp_path / "run"
    assert main(["train", str(RECIPE), *FAST, "run.steps=4", "checkpoint.every=2",
                 "checkpoint.keep_last=0", f"run.output_dir={run}"]) == 0
    recs = read_metrics(run / "metrics.jsonl")
    assert [r["selfplay/phase"] for r in recs] == [0, 0, 1, 1]
    assert {k for r in recs for k in r if not documented(k)} == set()
    for r in recs:
        assert 0 <= r["selfplay/question_validity"] <= 1
    for r in recs[2:]:
        assert 0 <= r["selfplay/solver/anchor_acc"] <= 1
        assert "agent/solver/reward/mean" in r and "agent/challenger/reward/mean" not in r
    for r in recs[:2]:
        assert r["agent/challenger/reward/mean"] >= -1 and "agent/solver/reward/mean" not in r
    assert any("agent/solver/loss" in r for r in recs[2:]), "the solver never updated: weak test"
    assert (run / "plots/self_play.png").stat().st_size > 1000
    lines = [json.loads(x) for x in (run / "questions.jsonl").read_text().splitlines()]
    assert len(lines) == 4 * 2 * 4 and all(len(x["anchors"]) == 2 for x in lines)
    for name in ("challenger", "solver"):
        assert (run / f"checkpoints/step-4/{name}/model.safetensors").is_file()
    w2 = load_file(run / "checkpoints/step-2/solver/model.safetensors")
    w4 = load_file(run / "checkpoints/step-4/solver/model.safetensors")
    assert any(not torch.equal(w2[k], w4[k]) for k in w2), "solver weights did not move"

    parted = tmp_path / "parted"
    shutil.copytree(run, parted)
    shutil.rmtree(parted / "checkpoints/step-4")
    (parted / "checkpoints/latest").write_text("step-2")
    assert main(["train", "--resume", str(parted)]) == 0
    assert _strip_timing(read_metrics(parted / "metrics.jsonl")) == _strip_timing(recs)
    assert (parted / "questions.jsonl").read_text() == (run / "questions.jsonl").read_text()
    w4b = load_file(parted / "checkpoints/step-4/solver/model.safetensors")
    assert all(torch.equal(w4[k], w4b[k]) for k in w4)


def _text_pool(tmp_path: Path) -> Path:
    rows = [{"id": f"t{i}", "question": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1)}
            for i in range(12)]
    path = tmp_path / "arith.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_r_zero_k0_with_two_text_models(tmp_path):
    """k = 0, anchors answered for the metric only (R-Zero), both roles text-only, text pool."""
    run = tmp_path / "rzero"
    args = ["train", str(RECIPE), *FAST, "agents.1.path=tiny:qwen2", "data.source=file",
            f"data.path={_text_pool(tmp_path)}", "self_play.anchors_per_prompt=0",
            "self_play.anchor_weight=0", "self_play.challenger_steps=1",
            "self_play.solver_steps=1", "reward.answer_style=auto", "run.steps=2",
            f"run.output_dir={run}"]
    assert main(args) == 0
    recs = read_metrics(run / "metrics.jsonl")
    assert [r["selfplay/phase"] for r in recs] == [0, 1]
    assert "selfplay/solver/anchor_acc" in recs[1]
    assert "agent/solver/loss" not in recs[1]  # anchor_weight 0 and no valid question
    lines = [json.loads(x) for x in (run / "questions.jsonl").read_text().splitlines()]
    assert all(x["anchors"] == [] for x in lines)
    assert (run / "checkpoints/step-2/solver/model.safetensors").is_file()


def test_text_solver_with_image_anchors_is_a_clear_error(tmp_path, capsys):
    args = ["train", str(RECIPE), *FAST, "agents.1.path=tiny:qwen2", "run.steps=1",
            f"run.output_dir={tmp_path / 'x'}"]
    assert main(args) == 1
    assert "anchors_per_step=0" in capsys.readouterr().err


def _setup(tmp_path, *overrides):
    cfg = load_config(RECIPE, [*FAST, f"run.output_dir={tmp_path / 'run'}", *overrides])
    return sp.setup(cfg)


def _batch(run, step, texts):
    """The challenger's real prompts at ``step`` with hand-given completions."""
    challenger = run.agents[run.challenger]
    prompts, subjects = sp.challenger_prompts(run, step)
    rendered = [challenger.adapter.render(p, run.cfg.self_play.challenger_system, None)
                for p in prompts]
    return prompts, rendered, subjects


def forced_rollouts(agent, rendered, texts, group_size, temperature):
    """Given completions as if sampled: their token ids (stop token appended) and their
    log-probs under the agent's own policy (so the IS weights are 1)."""
    adapter = agent.adapter
    stop = adapter.stop_token_ids()[0]
    completions = [adapter.tokenizer(t, add_special_tokens=False)["input_ids"] + [stop]
                   for t in texts]
    prompts = adapter.encode_prompts([r for r in rendered for _ in range(group_size)])
    batch = adapter.encode_training(prompts, completions)
    with torch.no_grad():
        logprobs = completion_logprobs(adapter, agent.model, batch, temperature)  # [N, T]
    return Rollouts(prompts=prompts, completions=completions, texts=list(texts),
                    logprobs=logprobs * batch.completion_mask, finished=[True] * len(texts),
                    group_size=group_size)


def _weights(agent):
    return {k: v.detach().clone() for k, v in agent.model.state_dict().items()}


def test_solver_trains_on_hand_given_questions_with_their_pictures(tmp_path):
    """Two VLMs, images on: hand-written questions carry the picture of the pool item the
    prompt showed; the solver answers m times, p_hat / labels / band come from its real
    answers, and it really updates on the in-band questions plus the anchors."""
    run = _setup(tmp_path, "agents.0.path=tiny:qwen2_5_vl", "self_play.solver_samples=8",
                 "self_play.band=[0.0, 1.0]", "reward.tie=first")
    assert run.images
    prompts, rendered, subjects = _batch(run, 3, None)
    texts = ["<question>What colour is the shape? Choices: A. red B. blue</question>\\boxed{A}",
             "<question>Is the shape round?</question>", "no question here",
             "<question>Which kind of shape is it? (A) circle (B) cross</question>",
             "<question>What colour is the background?</question>",
             "<question>How many sides does it have?</question>",
             "<question><image> and <image>: which is larger?</question>",  # 2 placeholders, 1 image
             "<question>Is the shape in the middle?</question>"]
    batch = sp.parse_batch(run, 3, prompts, rendered, subjects, texts)
    assert batch.reasons == [None, None, "unparsed", None, None, None, "placeholder_mismatch", None]
    assert batch.problems[0].options == ["red", "blue"]
    assert batch.problems[3].options == ["circle", "cross"]
    G = run.cfg.rollout.rollouts_per_prompt
    for n in batch.valid:
        assert batch.problems[n].images == subjects[n // G].images and subjects[n // G].images
    anchors = sp.anchor_batch(run, 3)
    answers = sp.answer_questions(run, 3, batch, anchors)
    V = len(batch.valid)
    assert answers.n_questions == V == 6 and len(answers.problems) == V + len(anchors)
    for v in range(V):
        vote = majority_vote(answers.answers[v], answers.problems[v].options, tie="first")
        assert answers.p_hats[v] == vote.share == spm.p_hat(answers.answers[v],
                                                           answers.problems[v].options)
        assert answers.labels[v] == vote.label
    before = _weights(run.agents[run.solver])
    record, _, _ = sp.step_updates(run, 3, "solver", batch, answers)
    expected = sum(label is not None for label in answers.labels)  # band [0, 1]: all in
    assert record["selfplay/solver/trained_questions"] == expected >= 1
    assert record["selfplay/question_validity"] == 6 / 8
    assert "agent/solver/loss" in record and "selfplay/solver/anchor_acc" in record
    after = _weights(run.agents[run.solver])
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_challenger_reward_and_update_from_hand_given_completions(tmp_path):
    """Hand-given challenger completions (a duplicate pair, an unparseable one): rewards are
    1 - 2|p_hat - 1/2| - lambda x cluster share from the solver's real answers, -1 for the
    unparseable one, and the challenger really updates on them."""
    run = _setup(tmp_path, "self_play.solver_samples=4", "self_play.repetition_weight=1.0")
    challenger = run.agents[run.challenger]
    prompts, rendered, subjects = _batch(run, 1, None)
    texts = ["<question>What colour is the shape?</question>",
             "<question>What colour is the shape?</question>",
             "I will not write a question.",
             "<question>Which kind of shape is drawn there?</question>",
             "<question>Name the colour of the shape in one word.</question>",
             "<question>Name the colour of the shape in one word, please.</question>",
             "", "<question>Is there a cross?</question>"]
    G = run.cfg.rollout.rollouts_per_prompt
    rollouts = forced_rollouts(challenger, rendered, texts, G, run.cfg.rollout.temperature)
    batch = sp.parse_batch(run, 1, prompts, rendered, subjects, texts, rollouts)
    answers = sp.answer_questions(run, 1, batch)
    penalties = sp.batch_penalties(run, batch)
    # clusters among the 6 valid: {0, 1} identical, {4, 5} near-identical, {3}, {7}; N = 8
    assert penalties == [2 / 8, 2 / 8, 1 / 8, 2 / 8, 2 / 8, 1 / 8]
    before = _weights(challenger)
    rewards, stats = sp.train_challenger(run, batch, answers, penalties)
    p = dict(zip(batch.valid, answers.p_hats))
    pen = dict(zip(batch.valid, penalties))
    expected = [1 - 2 * abs(p[n] - 0.5) - pen[n] if n in p else -1.0 for n in range(8)]
    assert rewards.tolist() == pytest.approx(expected)
    assert "loss" in stats and stats["is/mean"] == pytest.approx(1.0, abs=1e-4)
    after = _weights(challenger)
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_anchor_draws_are_a_pure_function_of_seed_and_step(tmp_path):
    run = _setup(tmp_path, "self_play.anchors_per_prompt=3")
    a = [sp._draw_prompt(run, 5, b)[0] for b in range(2)]
    b = [sp._draw_prompt(run, 5, b)[0] for b in range(2)]
    assert [[p.id for p in x] for x in a] == [[p.id for p in x] for x in b]
    assert all(len(x) == 3 and len({p.id for p in x}) == 3 for x in a)
    assert [p.id for p in sp.anchor_batch(run, 4)] == [p.id for p in sp.anchor_batch(run, 4)]
    random.seed(123)  # global randomness does not change the draws
    assert [p.id for p in sp._draw_prompt(run, 5, 0)[0]] == [p.id for p in a[0]]


def test_pool_problems_that_do_not_render_are_left_out_and_counted(tmp_path):
    run = _setup(tmp_path)
    good = run.pool[0]
    corrupt = Problem(id="corrupt", text="What colour?", images=[b"not an image"], gold="A")
    mismatch = Problem(id="two-slots", text="<image1> vs <image2>?", images=good.images, gold="A")
    kept, broken = sp.usable_pool([good, corrupt, mismatch], [run.agents[run.solver]], run.cfg)
    assert [p.id for p in kept] == [good.id]
    assert sum(broken.values()) == 2 and "placeholder_mismatch" in broken
