"""Official scorers: MathVista normalisation replayed on the Bard outputs, We-Math metrics."""

from __future__ import annotations

import ast
import json
import random

import pytest
from Levenshtein import distance as levenshtein

from vlcohort.eval.scoring import group_accuracy, mathvista_correct, mathvista_normalize, wemath_metrics


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


def _reference_edit_distance(a: str, b: str) -> int:
    """The hand-written edit distance eval/scoring.py used before ``Levenshtein.distance``
    (unit-cost insert / delete / substitute, two-row dynamic programme), kept as the
    reference the library must reproduce."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def test_mathvista_nearest_option_matches_the_previous_edit_distance():
    # by hand: kitten -> sitten -> sittin -> sitting; one edit per extra / missing char;
    # per code point: "e" + combining accent vs "é" is a substitution and a deletion
    for a, b, d in [("kitten", "sitting", 3), ("", "", 0), ("", "ab", 2), ("ab", "", 2),
                    ("45", "45", 0), ("45°", "45", 1), ("e\u0301", "é", 2), ("😀", "a", 1),
                    ("flaw", "lawn", 2), ("(C) 45°", "45°", 4)]:
        assert levenshtein(a, b) == _reference_edit_distance(a, b) == d, (a, b)
    rng = random.Random(0)
    alphabet = "abAB C()°é.-12😀"
    for _ in range(3000):
        a, b = ("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 10))) for _ in "ab")
        assert levenshtein(a, b) == _reference_edit_distance(a, b), (a, b)

    def nearest(extraction, choices):  # the official rule: the first of the closest options
        d = [_reference_edit_distance(extraction, c) for c in choices]
        return choices[d.index(min(d))]

    def mc(x, c):
        return mathvista_normalize(x, c, "multi_choice", "text", None)
    # ties: "12" is one edit from each option -> the first; "" is closest to the shortest
    assert mc("12", ["10", "13", "2"]) == "10"
    assert mc("12", ["2", "13", "10"]) == "2"
    assert mc("", ["ab", "c", "d"]) == "c"
    # deleting "the answer is " (14 characters) leaves "60"; 30 / 90 need one more edit
    assert mc("the answer is 60", ["30", "60", "90"]) == "60"
    assert mc("x", ["x"]) == "x"
    for _ in range(2000):
        choices = ["".join(rng.choice("0123456789.°") for _ in range(rng.randint(0, 4)))
                   for _ in range(rng.randint(1, 5))]
        x = "".join(rng.choice("0123456789.° ab") for _ in range(rng.randint(0, 6)))
        if x.strip() in [chr(ord("A") + i) for i in range(len(choices))]:
            continue  # a letter names its option directly
        assert mc(x, choices) == nearest(x.strip(), choices), (x, choices)


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
