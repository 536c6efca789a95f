"""MATH-Vision's official rule-based scorer (``--scorer official``), reproduced rule by rule
from mathllm/MATH-V ``evaluation/evaluate.py`` and ``evaluation/utils.py``."""

from __future__ import annotations

import json

import pytest

from eval.benchmarks import load_benchmark
from eval.scoring import mathvision_correct, mathvision_extract, mathvision_is_equal
from vlcohort.cli import main

OPTS = ["1", "2", "3", "4", "5"]


@pytest.mark.parametrize("response,extracted", [
    ("So the answer is B.", "b"),                     # ends with " B."
    ("(C)\nbecause the area doubles", "c"),            # starts with "(C)\n"
    ("The final answer is 12. Done", "12"),            # answer phrase, cut at ". "
    ("The answer is 3.5.", "3.5"),                     # number after "is "
    ("first \\boxed{1} then \\boxed{\\frac{3}{4}}", "\\frac{3}{4}"),  # last box
    ("\\boxed{45^\\circ}", "45"),                      # degrees dropped
    ("\\boxed{x = 7}", "7"),                           # value after '='
    ("\\boxed{\\text{(B)}}", "b"),                     # (b) -> b
    ("\\boxed{1/2}", "\\frac{1}{2}"),                  # a/b -> \frac
    ("\\boxed{0.5}", "\\frac{1}{2}"),                  # the 0.5 quirk
    ("I think 7", "ithink7"),                          # no phrase, no box: the whole text
])
def test_official_extraction(response, extracted):
    assert mathvision_extract(response) == extracted


@pytest.mark.parametrize("response,gold,options,correct", [
    ("So the answer is B.", "B", OPTS, True),          # the gold letter
    ("\\boxed{3}", "C", OPTS, True),                    # the gold option's text
    ("\\boxed{4}", "C", OPTS, False),
    ("\\boxed{\\frac{1}{2}}", "0.5", None, True),       # latex value
    ("the answer is 3.141", "3.14", None, True),        # 2-decimal tolerance
    ("\\boxed{3.15}", "3.14", None, False),
    ("\\boxed{2\\sqrt{3}}", "3.46", None, True),
    ("\\boxed{(1, 2)}", "(1,2)", None, True),           # tuples element-wise
    ("\\boxed{(1, 3)}", "(1,2)", None, False),
    ("\\boxed{x}", "1", None, False),                   # does not evaluate: wrong
    ("", "1", None, False),
    ("\\boxed{2^{10^{10}}}", "1", None, False),         # refused, not evaluated
])
def test_official_verdicts(response, gold, options, correct):
    assert mathvision_correct(mathvision_extract(response), gold, options) is correct


def test_is_equal_case_and_empty():
    assert mathvision_is_equal("B", "b") and not mathvision_is_equal(" ", " ")
    assert not mathvision_is_equal("", "")


def test_real_testmini_gold_answers_are_accepted(benchmark_dir):
    """Every real testmini gold, boxed or after "The answer is", is judged right."""
    data = load_benchmark("mathvision", benchmark_dir, need_images=False)
    assert len(data.problems) == 304
    for p in data.problems:
        for response in (f"\\boxed{{{p.gold}}}", f"The answer is {p.gold}."):
            assert mathvision_correct(mathvision_extract(response), p.gold, p.options), (p.id, response)


def test_score_cli_official_vs_vlcohort(tmp_path, capsys):
    rows = [{"id": "1", "question": "<image1> Which?", "options": OPTS, "image": "images/1.jpg",
             "answer": "C", "solution": None, "level": 1, "subject": "arithmetic"},
            {"id": "2", "question": "<image1> How many?", "options": [], "image": "images/2.jpg",
             "answer": "7", "solution": None, "level": 2, "subject": "counting"}]
    (tmp_path / "mathvision_testmini.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = tmp_path / "r.jsonl"
    # "I think 7" has no answer phrase and no box: the official rules read "ithink7" (wrong)
    r.write_text('{"id": "1", "response": "so \\\\boxed{3}"}\n{"id": "2", "response": "I think 7"}\n')
    results = {}
    for scorer in ("official", "vlcohort"):
        assert main(["eval", "score", "--benchmark", "mathvision", "--data", str(tmp_path),
                     "--responses", str(r), "--scorer", scorer, "--json"]) == 0
        s = json.loads(capsys.readouterr().out)
        results[scorer] = s["benchmarks"]["mathvision"]["models"]["responses"]
    assert results["official"]["maj"] == 0.5
    assert results["official"]["groups"]["subject=arithmetic"]["acc"] == 1.0
    assert "official" in s["notes"]["mathvision"]


def test_official_maj_is_the_most_common_official_answer(tmp_path):
    from eval.runner import score_record, summarize
    from vlcohort.answers.grading import get_grader

    row = {"id": "1", "question": "<image1> Which?", "options": OPTS, "image": "i.jpg",
           "answer": "C", "level": 1, "subject": "arithmetic"}
    (tmp_path / "mathvision_testmini.jsonl").write_text(json.dumps(row) + "\n")
    data = {"mathvision": load_benchmark("mathvision", tmp_path, need_images=False)}
    p = data["mathvision"].problems[0]
    g = get_grader()
    recs = [{"benchmark": "mathvision", "id": "1", "model": "m", "sample": i,
             **score_record(p, resp, g)}
            for i, resp in enumerate(["\\boxed{3}", "\\boxed{C}", "\\boxed{3}", "\\boxed{4}"])]
    assert [r["official_prediction"] for r in recs] == ["3", "c", "3", "4"]
    res = summarize(data, recs, ["m"], scorer="official")["benchmarks"]["mathvision"]["models"]["m"]
    assert res["mean"] == 0.75 and res["maj"] == 1.0
