"""MathVerse's official protocol: the two GPT steps of ZrrSkywalker/MathVerse
``evaluation/`` (few-shot extraction, then 0/1 scoring) as judge prompts, the rule-less
fallback (our grader), and the report: the five testmini versions pooled as the headline,
Text Only apart as an ablation and never reported as MathVerse."""

from __future__ import annotations

import ast
import json
import subprocess
from pathlib import Path

import pytest

from vlcohort.answers.grading import get_grader
from vlcohort.eval.datasets import load_benchmark
from vlcohort.eval.official import JudgeNeeded, official_verdict
from vlcohort.eval.official import mathverse as mv
from vlcohort.eval.runner import markdown_table, score_record, score_responses

MIRROR = Path("/work/.mirror/ZrrSkywalker+MathVerse/repo")


@pytest.fixture(scope="module")
def text_only(benchmark_file):
    path = benchmark_file("mathverse_testmini_text_only.json")
    data = load_benchmark("mathverse", path, need_images=False)
    assert len(data.problems) == 788
    return path, data.problems


# --------------------------------------------------------------------------- prompts


def test_extraction_prompt_is_the_official_few_shot_with_the_last_30_words():
    response = " ".join(f"w{i}" for i in range(40)) + " so the answer is D."
    prompt = mv.extract_prompt(response)
    assert prompt.startswith("I am providing you a response from a model to a math problem, "
                             "termed 'Model Response'.")
    assert ("Model response: 'Rounded to two decimal places, the perimeter of the sector is "
            "approximately:\n\n(-2, 1)'\nExtracted Answer: (-2, 1)\n\n2.\n") in prompt
    assert "Extracted Answer: Domain: \\((-3, 3]\\)\nRange: \\((-4, 1]\\)" in prompt
    assert "distance d between Ned and Bart is approximately 22.3 meters.'" in prompt
    tail = " ".join(response.split(" ")[-30:])
    assert tail.startswith("w15 ") and prompt.endswith(
        f"\n\n7.\n\nModel response: '{tail}'\nExtracted Answer: ")
    assert "w14 " not in prompt
    assert mv.truncate_response("a  b", 0) == "a  b"


def test_score_prompt_quotes_the_published_question_and_answer(text_only):
    _, problems = text_only
    p = problems[0]
    prompt = official_verdict(p, "whatever", None, {"extract": "Extracted Answer: D "},
                              use_judge=True)
    assert isinstance(prompt, JudgeNeeded) and prompt.step == "score"
    q = p.meta["official_question"]
    assert "Choices:\nA:40°" in q  # the published question, options included
    assert prompt.prompt.endswith(f"[Question]: {q}\n[Standard Answer]: D\n"
                                  "[Model_answer] : D\nJudgement:")
    # the few-shot examples after str.format, as the official code sends them
    assert "[Model_answer] : B:2\u221a{3}\nJudgement: 0" in prompt.prompt
    assert "\\frac{x^2}{81} + \\frac{y^2}{9} = 1\nJudgement: 1" in prompt.prompt
    assert "Judement is 1; if they are different, Judement is 0." in prompt.prompt


@pytest.mark.skipif(not MIRROR.is_dir(), reason="the MathVerse mirror is not on this machine")
def test_prompt_texts_equal_the_official_file():
    """The reproduced few-shot texts equal evaluation/prompts.py's string values (read with
    ``ast``, not imported)."""
    src = subprocess.run(["git", "-C", str(MIRROR), "show", "HEAD:evaluation/prompts.py"],
                         capture_output=True, text=True, check=True).stdout
    values = {n.targets[0].id: ast.literal_eval(n.value)
              for n in ast.parse(src).body if isinstance(n, ast.Assign)}
    assert mv.DEMO_PROMPT_EXTRACT == values["demo_prompt_extract"]
    assert mv.DEMO_PROMPT_SCORE == values["demo_prompt_score"]


# --------------------------------------------------------------------------- verdicts


@pytest.mark.parametrize("reply,extraction", [
    ("D", "D"), ("  Extracted Answer: 22.3 \n", "22.3"), ("", ""), ("null", "null"),
])
def test_parse_extraction(reply, extraction):
    assert mv.parse_extraction(reply) == extraction


@pytest.mark.parametrize("reply,value", [("1", 1), ("Judgement: 0", 0), (" 1\n", 1)])
def test_parse_judgement(reply, value):
    assert mv.parse_judgement(reply) == value


@pytest.mark.parametrize("reply", ["", "yes", "1.", "Judgement: 1 (consistent)", "10"])
def test_unparsed_judgement_is_refused(reply):
    with pytest.raises(ValueError, match="accepts only 0 or 1"):
        mv.parse_judgement(reply)


def test_judged_flow_through_official_verdict(text_only):
    _, problems = text_only
    p = next(q for q in problems if q.meta["question_type"] == "free-form")
    response = f"Working it out, the result is {p.gold}."
    first = official_verdict(p, response, None, {}, use_judge=True)
    assert isinstance(first, JudgeNeeded) and first.step == "extract"
    assert first.prompt == mv.extract_prompt(response)
    second = official_verdict(p, response, None, {"extract": f"Extracted Answer: {p.gold}"},
                              use_judge=True)
    assert isinstance(second, JudgeNeeded) and second.step == "score"
    assert f"[Model_answer] : {p.gold}\nJudgement:" in second.prompt
    # no string-match shortcut: the extraction equals the answer, the score step is still asked
    assert mv.parse_extraction(f"Extracted Answer: {p.gold}") == p.meta["official_answer"]
    done = {"extract": f"Extracted Answer: {p.gold}", "score": "Judgement: 1"}
    v = official_verdict(p, response, None, done, use_judge=True)
    assert v == {"official_prediction": p.gold, "official_correct": True, "official_rule": "judge"}
    v = official_verdict(p, response, None, {**done, "score": "0"}, use_judge=True)
    assert v["official_correct"] is False and v["official_rule"] == "judge"
    v = official_verdict(p, response, None, {**done, "score": "I think so"}, use_judge=True)
    assert v["official_rule"] == "error" and "accepts only 0 or 1" in v["official_error"]
    rec = score_record(p, response, get_grader(), judged={"extract": "x"}, use_judge=True)
    assert rec["official_pending"] == "score"


def test_without_a_judge_our_extraction_and_grader_decide(text_only):
    _, problems = text_only
    mc = next(q for q in problems if q.meta["question_type"] == "multi-choice")
    v = official_verdict(mc, "...", mc.gold, {}, use_judge=False)
    assert v == {"official_prediction": mc.gold, "official_correct": True,
                 "official_rule": "grader_no_judge"}
    wrong = next(L for L in "ABCD" if L != mc.gold)
    assert official_verdict(mc, "...", wrong, {}, use_judge=False)["official_correct"] is False
    assert official_verdict(mc, "...", None, {}, use_judge=False)["official_correct"] is False


# --------------------------------------------------------------------------- report


def _responses(tmp_path: Path, problems, right) -> Path:
    path = tmp_path / "responses.jsonl"
    with path.open("w") as f:
        for i, p in enumerate(problems):
            answer = p.gold if right(i, p) else "no idea"
            f.write(json.dumps({"id": p.id, "response": f"\\boxed{{{answer}}}"}) + "\n")
    return path


def test_text_only_file_is_reported_as_an_ablation_not_as_mathverse(text_only, tmp_path):
    path, problems = text_only
    responses = _responses(tmp_path, problems, lambda i, p: i % 3 == 0)
    summary = score_responses("mathverse", path, responses)
    res = summary["benchmarks"]["mathverse"]["models"]["responses"]
    assert res["headline_name"] == "text_only (ablation; the five-version testmini is not loaded)"
    assert list(res["versions"]) == ["Text Only"] and res["versions"]["Text Only"]["n"] == 788
    assert res["text_only_ablation"]["n"] == 788
    assert res["headline"] == pytest.approx(res["text_only_ablation"]["acc"])
    assert res["headline"] == pytest.approx(res["maj"])
    assert 0.30 < res["headline"] < 0.37  # every third right, bar a few messy golds
    assert set(res["subjects"]) == {p.meta["subject"] for p in problems}


def _record(i: int, problem_index: int, version: str, mc: bool) -> dict:
    """One record in the published testmini.json schema."""
    question = {"Vision Only": "", "Vision Dominant": "Find x."}.get(
        version, f"In the figure, AB = {problem_index + 2}. Find x.")
    if mc and version != "Vision Only":
        question += "\nChoices:\nA:1\nB:2\nC:3\nD:4"
    image = ("images_version_6/" if version == "Vision Only" else "images_version_1-4/") + \
        f"image_{problem_index}.png"
    return {"sample_index": str(i), "problem_index": str(problem_index),
            "problem_version": version, "question": question, "image": image,
            "answer": "B" if mc else str(problem_index + 7),
            "question_type": "multi-choice" if mc else "free-form",
            "metadata": {"split": "testmini", "source": "synthetic",
                         "subject": "Plane Geometry" if mc else "Functions",
                         "subfield": "Length"},
            "query_wo": "Please directly answer the question.\nQuestion: " + question,
            "query_cot": "Please first conduct reasoning.\nQuestion: " + question}


def _five_version_file(tmp_path: Path, versions) -> Path:
    rows, i = [], 1
    for problem_index in range(1, 5):
        for version in versions:
            rows.append(_record(i, problem_index, version, mc=problem_index % 2 == 0))
            i += 1
    path = tmp_path / "testmini.json"
    path.write_text(json.dumps(rows, indent=1))
    return path


def test_five_version_file_headline_pools_the_five_versions(tmp_path):
    versions = mv.FIVE_VERSIONS + (mv.TEXT_ONLY,)
    path = _five_version_file(tmp_path, versions)
    data = load_benchmark("mathverse", path, need_images=False)
    problems = data.problems
    assert len(problems) == 24 and not data.skipped
    # a Vision Only record's question is "" (it is in the image): kept, not skipped
    vision_only = [p for p in problems if p.meta["problem_version"] == "Vision Only"]
    assert len(vision_only) == 4 and all(p.text == "" for p in vision_only)
    # right on Text Dominant / Text Lite / Text Only, and on Vision Only of problem 1
    def right(i, p):
        return p.meta["problem_version"] in ("Text Dominant", "Text Lite", "Text Only") or p.id == "5"
    summary = score_responses("mathverse", path, _responses(tmp_path, problems, right))
    res = summary["benchmarks"]["mathverse"]["models"]["responses"]
    assert res["headline_name"] == "overall (5 versions)"
    assert res["headline"] == pytest.approx(9 / 20)  # 4 + 4 + 1 of the 20 vision-version items
    assert res["maj"] == pytest.approx(13 / 24)       # the per-row accuracy, Text Only included
    assert list(res["versions"]) == list(versions)
    assert res["versions"]["Text Dominant"] == {"acc": 1.0, "mean": 1.0, "n": 4}
    assert res["versions"]["Vision Only"]["acc"] == pytest.approx(0.25)
    assert res["text_only_ablation"] == {"acc": 1.0, "mean": 1.0, "n": 4}
    assert summary["average"]["responses"] == pytest.approx(9 / 20)
    assert "problem_version=Vision Only" in markdown_table(summary)


def test_partial_version_set_says_which_versions(tmp_path):
    path = _five_version_file(tmp_path, ("Text Lite", "Vision Only"))
    problems = load_benchmark("mathverse", path, need_images=False).problems
    rows = [(p, {"maj": 1.0, "mean": 1.0}) for p in problems]
    rep = mv.report(rows)
    assert rep["headline_name"].startswith("overall (2 of the 5 versions: Text Lite, Vision Only;")
    assert "text_only_ablation" not in rep and rep["headline"] == 1.0
