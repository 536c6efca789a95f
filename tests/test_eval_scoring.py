"""Official scorers: MathVista normalisation replayed on the Bard outputs, We-Math metrics."""

from __future__ import annotations

import ast
import json

import pytest

from eval.scoring import (group_accuracy, levenshtein, mathvista_correct, mathvista_normalize,
                          wemath_metrics)


def _choices(row):
    c = row["choices"]
    return ast.literal_eval(c) if isinstance(c, str) else c


def test_mathvista_official_normalisation_reproduces_bard_true_false(benchmark_file):
    rows = json.loads(benchmark_file("mathvista_testmini_output_bard.json").read_text())
    assert len(rows) == 1000
    mismatched = [pid for pid, r in rows.items()
                  if mathvista_correct(mathvista_normalize(
                      r["extraction"], _choices(r), r["question_type"], r["answer_type"],
                      r["precision"]), r["answer"]) != r["true_false"]]
    assert mismatched == []
    assert sum(r["true_false"] for r in rows.values()) == 348


def test_mathvista_rules():
    assert mathvista_normalize("(B) 60", ["30", "60"], "multi_choice", "text", None) == "60"
    assert mathvista_normalize("B", ["30", "60"], "multi_choice", "text", None) == "60"
    assert mathvista_normalize("61", ["30", "60"], "multi_choice", "text", None) == "60"
    assert mathvista_normalize("61", ["30", "60"], "multi_choice", "text", None,
                               nearest_option=False) is None
    assert mathvista_normalize("3.0", None, "free_form", "integer", None) == "3"
    assert mathvista_normalize("1.26", None, "free_form", "float", 1) == "1.3"
    assert mathvista_normalize("abc", None, "free_form", "float", 1) is None
    assert levenshtein("kitten", "sitting") == 3 and levenshtein("", "ab") == 2


def test_wemath_metrics_hand_built():
    v = {
        "p1": {"2steps_1": True, "2steps_2": True, "2steps_multi": True},     # CM strict
        "p2": {"2steps_1": True, "2steps_2": False, "2steps_multi": True},    # RM strict, CM loose
        "p3": {"2steps_1": False, "2steps_2": False, "2steps_multi": True},   # RM strict + loose
        "p4": {"2steps_1": True, "2steps_2": True, "2steps_multi": False},    # IG
        "p5": {"3steps_1": True, "3steps_2": False, "3steps_3": True, "3steps_multi": False},  # IK
        "p6": {"2steps_1": True},                                             # incomplete
    }
    m = wemath_metrics(v)
    assert m["n_problems"] == 5 and m["incomplete"] == 1
    assert m["IK"] == pytest.approx(1 / 5) and m["IG"] == pytest.approx(1 / 5)
    assert m["CM_strict"] == pytest.approx(1 / 5) and m["CM_loose"] == pytest.approx(2 / 5)
    assert m["RM_strict"] == pytest.approx(2 / 5) and m["RM_loose"] == pytest.approx(1 / 5)
    assert m["score_strict"] == pytest.approx((5 - 0.5 - 2 - 1) / 5)
    assert m["score_loose"] == pytest.approx((5 - 0.5 - 1 - 1) / 5)


def test_group_accuracy():
    assert group_accuracy([("a", True), ("a", False), ("b", True)]) == {
        "a": {"acc": 0.5, "n": 2}, "b": {"acc": 1.0, "n": 1}}
