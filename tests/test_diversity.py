"""``vlcohort diversity``: the error-decoupling measures on hand-built outcome tables, the
"same wrong answer" rule through the real grader, ordering and recommendation, the CLI on
saved answer files, bad input, and one run with two tiny real models."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vlcohort.analysis.diversity import (
    AnswerSet,
    OutcomeTable,
    analyse,
    cohens_kappa,
    kappa_fraction,
    markdown_report,
    outcome_table,
    pair_measures,
    rank_key,
    same_answer,
)
from vlcohort.answers.grading import get_grader
from vlcohort.cli import main
from vlcohort.data.problems import Problem

GRADER = get_grader()


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


# ------------------------------------------------------------------ the math, by hand


def test_outcome_table_counts_the_four_cells_and_shared_errors():
    a = [True, True, False, False, False, True]
    b = [True, False, True, False, False, False]
    same = [False, True, True, True, False, True]  # read only where both are wrong (3, 4)
    t = outcome_table(a, b, same)
    assert (t.both_right, t.only_a, t.only_b, t.both_wrong, t.same_wrong) == (1, 2, 1, 2, 1)
    assert t.n == 6
    assert outcome_table(a, b).same_wrong == 0
    with pytest.raises(ValueError, match="lengths differ"):
        outcome_table(a, b[:-1])
    with pytest.raises(ValueError, match="cannot exceed"):
        OutcomeTable(1, 0, 0, 1, same_wrong=2)


def test_measures_of_a_hand_computed_table():
    # n11=20, n10=5, n01=10, n00=15 (N=50), 6 of the 15 both-wrong with the same answer.
    # p_o = (20+15)/50 = 0.7; pA = 25/50 = 0.5; pB = 30/50 = 0.6
    # p_e = 0.5*0.6 + 0.5*0.4 = 0.5; kappa = (0.7-0.5)/(1-0.5) = 0.4
    # c = (5+10)/50 = 0.3; w = 6/50 = 0.12; u = (50-15)/50 = 0.7
    t = OutcomeTable(both_right=20, only_a=5, only_b=10, both_wrong=15, same_wrong=6)
    assert kappa_fraction(t) == Fraction(2, 5)
    m = pair_measures(t)
    assert m["kappa"] == pytest.approx(0.4) and m["kappa_defined"]
    assert (m["acc_a"], m["acc_b"]) == (0.5, 0.6)
    assert (m["c"], m["w"], m["u"]) == (pytest.approx(0.3), pytest.approx(0.12), pytest.approx(0.7))
    assert m["cells"] == {"both_right": 20, "only_a": 5, "only_b": 10, "both_wrong": 15,
                          "same_wrong": 6}


def test_kappa_extremes_and_independence():
    # Perfect complementarity: n10=n01=5, p_o=0, pA=pB=0.5, p_e=0.5 -> (0-0.5)/0.5 = -1
    t = OutcomeTable(0, 5, 5, 0)
    assert cohens_kappa(t) == -1.0
    assert (pair_measures(t)["c"], pair_measures(t)["u"]) == (1.0, 1.0)
    # Independence: one problem per cell, p_o=0.5, p_e=0.25+0.25=0.5 -> 0
    assert cohens_kappa(OutcomeTable(1, 1, 1, 1)) == 0.0
    # Perfect agreement with both outcomes present: p_o=1, p_e=0.5 -> 1 (defined)
    t = OutcomeTable(2, 0, 0, 2)
    assert cohens_kappa(t) == 1.0 and kappa_fraction(t) == 1
    # A always right, B always wrong: p_o=0, pA=1, pB=0, p_e=0 -> (0-0)/1 = 0 (defined)
    assert kappa_fraction(OutcomeTable(0, 4, 0, 0)) == 0


def test_kappa_degenerate_cases_return_one_and_say_so():
    # p_e = 1 only when every problem is both-right, or every problem is both-wrong: 0/0.
    for t in (OutcomeTable(4, 0, 0, 0), OutcomeTable(0, 0, 0, 4, same_wrong=4)):
        assert kappa_fraction(t) is None
        assert cohens_kappa(t) == 1.0
        assert pair_measures(t)["kappa_defined"] is False
    with pytest.raises(ValueError, match="empty"):
        cohens_kappa(OutcomeTable(0, 0, 0, 0))


@given(st.integers(0, 30), st.integers(0, 30), st.integers(0, 30), st.integers(0, 30))
def test_kappa_equals_the_probability_definition(a, b, c, d):
    n = a + b + c + d
    if n == 0:
        return
    t = OutcomeTable(a, b, c, d)
    p_o = Fraction(a + d, n)
    pa, pb = Fraction(a + b, n), Fraction(a + c, n)
    p_e = pa * pb + (1 - pa) * (1 - pb)
    if p_e == 1:
        assert kappa_fraction(t) is None and cohens_kappa(t) == 1.0
    else:
        assert kappa_fraction(t) == (p_o - p_e) / (1 - p_e)
        assert -1 <= cohens_kappa(t) <= 1


# ------------------------------------------------------------------ "the same wrong answer"

OPTS = ["30°", "40°", "45°", "50°"]


def test_same_answer_maps_letters_and_option_texts_but_not_missing_answers():
    assert same_answer("C", "45°", OPTS, GRADER)            # option C is 45°
    assert same_answer("(C)", "C. 45°", OPTS, GRADER)
    assert not same_answer("C", "D", OPTS, GRADER)
    assert not same_answer(None, None, OPTS, GRADER)        # two non-answers: not one answer
    assert not same_answer("C", None, OPTS, GRADER)
    assert same_answer("0.5", "1/2", None, GRADER)          # free-form through the grader
    assert not same_answer("7", "8", None, GRADER)


def test_w_counts_shared_wrong_answers_with_options():
    # Gold A (30°) everywhere; both models wrong on all four problems.
    problems = [Problem(id=f"p{i}", text="angle?", options=OPTS, gold="A") for i in range(4)]
    a = AnswerSet("a", "test", {"p0": "C", "p1": "C", "p2": None, "p3": "B"})
    b = AnswerSet("b", "test", {"p0": "45°", "p1": "D", "p2": None, "p3": "option B"})
    report = analyse(problems, [a, b], GRADER)
    (pair,) = report["pairs"]
    # shared: p0 ("C" = "45°") and p3 ("B" = "option B"); p1 differs; p2 both None
    assert pair["cells"] == {"both_right": 0, "only_a": 0, "only_b": 0, "both_wrong": 4,
                             "same_wrong": 2}
    assert pair["w"] == 0.5 and pair["u"] == 0.0
    assert pair["kappa"] == 1.0 and pair["kappa_defined"] is False
    assert report["models"]["a"]["answered"] == 0.75
    text = markdown_report(report)
    assert "| a | b | 0.0 | 0.0 | +1.000 * | 0.0 | 50.0 | 0.0 |" in text
    assert "kappa is 0/0 here" in text and "none is a complementary partner" in text


# ------------------------------------------------------------------ ordering, recommendation


def test_pairs_sorted_by_kappa_and_the_lowest_recommended():
    # Six free-form problems, gold "1".."6". M1 right on 1-3, M2 on 4-6, M3 on 1-4.
    problems = [Problem(id=str(i), text="?", gold=str(i)) for i in range(1, 7)]
    wrong = "99"

    def model(name, right):
        return AnswerSet(name, "test", {str(i): str(i) if i in right else wrong
                                        for i in range(1, 7)})

    sets = [model("M1", {1, 2, 3}), model("M2", {4, 5, 6}), model("M3", {1, 2, 3, 4})]
    report = analyse(problems, sets, GRADER)
    # M1/M2: n11=0 n10=3 n01=3 n00=0 -> 2(0-9)/(3*3+3*3) = -1
    # M2/M3: n11=1 n10=2 n01=3 n00=0 -> 2(0-6)/(3*2+4*3) = -2/3
    # M1/M3: n11=3 n10=0 n01=1 n00=2 -> 2(6-0)/(3*2+4*3) = +2/3
    got = [(p["a"], p["b"], round(p["kappa"], 6)) for p in report["pairs"]]
    assert got == [("M1", "M2", -1.0), ("M2", "M3", round(-2 / 3, 6)),
                   ("M1", "M3", round(2 / 3, 6))]
    # every both-wrong answer is "99": M1/M3 share two wrong answers (problems 5, 6)
    assert report["pairs"][2]["w"] == pytest.approx(2 / 6)
    assert (report["recommendation"]["a"], report["recommendation"]["b"]) == ("M1", "M2")
    assert report["models"]["M3"]["accuracy"] == pytest.approx(4 / 6)


def test_kappa_ties_broken_by_u_then_input_order():
    # Both kappa 0 (n11 n00 = n10 n01 = 4), N = 9: u = 8/9 beats u = 5/9.
    high_u, low_u = OutcomeTable(4, 2, 2, 1), OutcomeTable(1, 2, 2, 4)
    assert kappa_fraction(high_u) == kappa_fraction(low_u) == 0
    assert sorted([rank_key(low_u, (0, 1)), rank_key(high_u, (1, 2))])[0] == rank_key(high_u, (1, 2))
    # Same table: the pair given first wins.
    assert rank_key(high_u, (0, 2)) < rank_key(high_u, (1, 2))
    # Same kappa (0) and u (5/8): higher c wins. (0,0,5,3): c = 5/8; (1,1,3,3): c = 4/8.
    more_c, less_c = OutcomeTable(0, 0, 5, 3), OutcomeTable(1, 1, 3, 3)
    assert kappa_fraction(more_c) == kappa_fraction(less_c) == 0
    assert rank_key(more_c, (1, 2)) < rank_key(less_c, (0, 1))
    # Same kappa, u and c: fewer shared wrong answers wins.
    assert rank_key(OutcomeTable(1, 1, 3, 3, 1), (1, 2)) < rank_key(OutcomeTable(1, 1, 3, 3, 2), (0, 1))


def test_a_single_answer_set_or_no_problem_is_refused():
    p = [Problem(id="x", text="?", gold="1")]
    with pytest.raises(ValueError, match="at least 2"):
        analyse(p, [AnswerSet("a", "t", {"x": "1"})], GRADER)
    with pytest.raises(ValueError, match="no problem"):
        analyse([], [AnswerSet("a", "t", {}), AnswerSet("b", "t", {})], GRADER)


# ------------------------------------------------------------------ the CLI on saved answers


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _problem_file(tmp_path, gold=True):
    rows = [{"id": "q1", "question": "Which angle?", "options": OPTS, "answer": "C"},
            {"id": "q2", "question": "Which angle?", "options": OPTS, "answer": "A"},
            {"id": "q3", "question": "2 + 2 = ?", "answer": "4"},
            {"id": "q4", "question": "3 + 3 = ?", "answer": "6"}]
    if not gold:
        rows = [{k: v for k, v in r.items() if k != "answer"} for r in rows]
    return _write_jsonl(tmp_path / "problems.jsonl", rows)


def test_cli_on_saved_answer_files(tmp_path, capsys):
    data = _problem_file(tmp_path)
    # plain {"id", "answer"}: right on q1 ("45°" is option C), q3
    plain = _write_jsonl(tmp_path / "alpha.jsonl", [
        {"id": "q1", "answer": "45°"}, {"id": "q2", "answer": "B"},
        {"id": "q3", "answer": "4"}, {"id": "q4", "answer": "5"}])
    # raw responses, extracted here: right on q2, q4
    raw = _write_jsonl(tmp_path / "beta.jsonl", [
        {"id": "q1", "response": "so \\boxed{D}"}, {"id": "q2", "response": "\\boxed{30°}"},
        {"id": "q3", "response": "I am not sure"}, {"id": "q4", "response": "<answer>6</answer>"}])
    # a vlcohort eval items.jsonl with two models (the 'extracted' field is used)
    items = _write_jsonl(tmp_path / "items.jsonl", [
        {"benchmark": "problems", "id": f"q{i}", "model": m, "sample": 0, "response": "",
         "extracted": ans, "correct": False}
        for m, answers in (("gamma", ["C", "A", "4", "6"]), ("delta", ["B", "B", "5", "5"]))
        for i, ans in enumerate(answers, 1)])
    out = tmp_path / "out"
    argv = ["diversity", "--data", str(data), "--answers", str(plain), "--answers", str(raw),
            "--answers", str(items), "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "diversity.json").read_text())
    assert printed == (out / "diversity.md").read_text()
    assert {m: v["accuracy"] for m, v in report["models"].items()} == {
        "alpha": 0.5, "beta": 0.5, "gamma": 1.0, "delta": 0.0}
    pairs = {(p["a"], p["b"]): p for p in report["pairs"]}
    ab = pairs["alpha", "beta"]
    # alpha right {q1, q3}, beta right {q2, q4}: n10=2, n01=2 -> kappa -1, c 100%, u 100%
    assert ab["kappa"] == -1.0 and ab["c"] == 1.0 and ab["u"] == 1.0
    # alpha/delta both wrong on q2 ("B" and "B") and q4 ("5" and "5"): w = 2/4
    assert pairs["alpha", "delta"]["cells"]["same_wrong"] == 2
    # beta/delta: both wrong on q1 ("D" vs "B") and q3 (None vs "5"): no shared answer
    assert pairs["beta", "delta"]["w"] == 0.0
    # gamma always right, delta always wrong: kappa 0 (defined), not the degenerate 1.0
    assert pairs["gamma", "delta"]["kappa"] == 0.0 and pairs["gamma", "delta"]["kappa_defined"]
    kappas = [p["kappa"] for p in report["pairs"]]
    assert kappas == sorted(kappas) and len(kappas) == 6
    assert report["recommendation"]["a"] == "alpha" and report["recommendation"]["b"] == "beta"
    assert "Recommended pair: alpha + beta" in printed and "complementary" not in printed
    assert "| alpha | beta | 50.0 | 50.0 | -1.000 | 100.0 | 0.0 | 100.0 |" in printed


def test_cli_bad_inputs_are_named_with_exit_code_2(tmp_path, capsys):
    data = _problem_file(tmp_path)
    good = _write_jsonl(tmp_path / "good.jsonl", [{"id": f"q{i}", "answer": "1"} for i in range(1, 5)])
    other = _write_jsonl(tmp_path / "other.jsonl", [{"id": f"q{i}", "answer": "2"} for i in range(1, 5)])

    def fails(*args):
        assert main(["diversity", "--data", str(data), "--out", str(tmp_path / "o"), *args]) == 2
        return capsys.readouterr().err

    assert "need at least 2 models or answer sets" in fails("--answers", str(good))
    assert "give the models to compare" in fails()
    off = _write_jsonl(tmp_path / "off.jsonl", [{"id": "q1", "answer": "1"}, {"id": "q2", "answer": "1"},
                                                 {"id": "q3", "answer": "1"}, {"id": "q9", "answer": "1"}])
    err = fails("--answers", str(good), "--answers", str(off))
    assert "off.jsonl" in err and "'q4'" in err and "'q9'" in err and "without an answer" in err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    assert "empty.jsonl: the answer file is empty" in fails("--answers", str(good), "--answers", str(empty))
    assert "no such file" in fails("--answers", str(good), "--answers", str(tmp_path / "nope.jsonl"))
    no_field = _write_jsonl(tmp_path / "nofield.jsonl", [{"id": "q1", "guess": "1"}])
    assert "nofield.jsonl: line 1: no 'answer'" in fails("--answers", str(good), "--answers", str(no_field))
    twice = _write_jsonl(tmp_path / "twice.jsonl", [{"id": "q1", "answer": "1"}, {"id": "q1", "answer": "2"}])
    assert "twice.jsonl: line 2" in fails("--answers", str(good), "--answers", str(twice))
    # the same name twice (file stem 'good' in two folders)
    (tmp_path / "d").mkdir()
    again = _write_jsonl(tmp_path / "d" / "good.jsonl", [{"id": f"q{i}", "answer": "1"} for i in range(1, 5)])
    assert "two answer sets named 'good'" in fails("--answers", str(good), "--answers", str(again))
    # a model that does not load is named
    err = fails("--answers", str(good), "--model", str(tmp_path / "no-such-checkpoint"))
    assert "no-such-checkpoint' could not be loaded" in err
    # problems without gold
    nogold = _problem_file(tmp_path / "d", gold=False)
    assert main(["diversity", "--data", str(nogold), "--answers", str(good), "--answers", str(other),
                 "--out", str(tmp_path / "o")]) == 2
    assert "no problem with a gold answer" in capsys.readouterr().err
    # an unknown synthetic family, and an eval file for another benchmark
    assert main(["diversity", "--synthetic", "no_such_task", "--answers", str(good),
                 "--answers", str(other)]) == 2
    assert "unknown synthetic task" in capsys.readouterr().err
    items = _write_jsonl(tmp_path / "items.jsonl", [{"benchmark": "mathvista", "id": "q1",
                                                     "model": "m", "extracted": "1"}])
    assert "holds answers for mathvista, not for the problem set 'problems'" in fails(
        "--answers", str(good), "--answers", str(items))
    with pytest.raises(SystemExit) as e:  # no problem source: argparse's usage error
        main(["diversity", "--answers", str(good)])
    assert e.value.code == 2


# ------------------------------------------------------------------ two tiny real models


def test_two_tiny_models_end_to_end_and_rerun_reuses_answers(tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["diversity", "--model", "tiny:qwen2_5_vl", "--model", "tiny:internvl3_5",
            "--synthetic", "shape_colour,count_shapes", "--n", "4", "--max-new-tokens", "4",
            "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "answers: 8 generated, 0 reused" in captured.err
    items = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    assert len(items) == 8 and {r["model"] for r in items} == {"tiny:qwen2_5_vl", "tiny:internvl3_5"}
    assert {r["benchmark"] for r in items} == {"synthetic"}
    report = json.loads((out / "diversity.json").read_text())
    (pair,) = report["pairs"]
    assert sum(v for k, v in pair["cells"].items() if k != "same_wrong") == 4
    for model, m in report["models"].items():
        # the grader's verdicts here agree with the ones eval's record writer stored
        mine = [r["correct"] for r in items if r["model"] == model]
        assert m["accuracy"] == sum(mine) / 4
    assert "Recommended pair: tiny:qwen2_5_vl + tiny:internvl3_5" in captured.out
    # a rerun reuses the saved answers: nothing generated, the same report
    assert main(argv) == 0
    assert "answers: 0 generated, 8 reused" in capsys.readouterr().err
    assert json.loads((out / "diversity.json").read_text()) == report
    # the saved file is itself an answers input
    assert main(["diversity", "--synthetic", "shape_colour,count_shapes", "--n", "4",
                 "--answers", str(out / "items.jsonl"), "--out", str(tmp_path / "again")]) == 0
    capsys.readouterr()
    again = json.loads((tmp_path / "again" / "diversity.json").read_text())
    assert again["pairs"] == report["pairs"]
