"""Text benchmarks for LLM cohorts: GSM8K and MATH-500 from local files in their usual
formats (JSONL as published, parquet as on the hub), and ``vlcohort eval`` with a tiny
text-only model."""

from __future__ import annotations

import json

import pytest

from vlcohort.cli import main
from vlcohort.eval.datasets import BenchmarkError, gsm8k_gold, load_benchmark
from vlcohort.eval.runner import summarize

GSM8K_ROWS = [
    {"question": "Natalia sold clips to 48 of her friends in April, and then she sold half as "
                 "many clips in May. How many clips did Natalia sell altogether in April and May?",
     "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = "
               "<<48+24=72>>72 clips altogether in April and May.\n#### 72"},
    {"question": "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes "
                 "of babysitting. How much did she earn?",
     "answer": "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she "
               "earned 0.2 x 50 = $<<0.2*50=10>>10.\n#### 10"},
    {"question": "A farm has 1200 cows and buys 35 more. How many cows?",
     "answer": "1200 + 35 = <<1200+35=1235>>1,235\n#### 1,235"},
]
MATH500_ROWS = [
    {"problem": "Convert the point $(0,3)$ in rectangular coordinates to polar coordinates.",
     "solution": "... $\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}.$",
     "answer": "\\left( 3, \\frac{\\pi}{2} \\right)", "subject": "Precalculus", "level": 2,
     "unique_id": "test/precalculus/807.json"},
    {"problem": "What is the value of $513^2 - 487^2$?", "solution": "... $\\boxed{26000}$.",
     "answer": "26000", "subject": "Algebra", "level": 1,
     "unique_id": "test/algebra/2036.json"},
    {"problem": "Simplify $\\frac{1}{5}\\cdot \\frac{8}{7}\\div \\frac{12}{20}$.",
     "solution": "... $\\boxed{\\frac{8}{21}}$.", "answer": "\\frac{8}{21}",
     "subject": "Prealgebra", "level": 2, "unique_id": "test/prealgebra/1747.json"},
]


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def _jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_gsm8k_gold():
    assert gsm8k_gold("a\nb\n#### 72") == "72"
    assert gsm8k_gold("x\n#### 1,235") == "1235"
    assert gsm8k_gold("#### -3.5 ") == "-3.5"
    assert gsm8k_gold("no final line") is None


@pytest.mark.parametrize("layout", ["grade_school_math/data/test.jsonl", "gsm8k_test.jsonl",
                                    "gsm8k/main/test-00000-of-00001.parquet"])
def test_gsm8k_loader(tmp_path, layout):
    f = tmp_path / layout
    (_parquet if f.suffix == ".parquet" else _jsonl)(f, GSM8K_ROWS)
    for where in (tmp_path, f):  # a data dir (found by its usual name) or the file itself
        data = load_benchmark("gsm8k", where)
        assert data.path == f and data.rows == 3 and not data.skipped
        assert [p.id for p in data.problems] == ["0", "1", "2"]
        assert [p.gold for p in data.problems] == ["72", "10", "1235"]
        assert data.problems[0].images == [] and data.problems[0].source == "gsm8k"
        assert "#### 72" in data.problems[0].meta["solution"]


def test_gsm8k_bad_rows_are_counted(tmp_path):
    rows = [GSM8K_ROWS[0], {"question": "q", "answer": "no final line"}, {"question": "", "answer": "#### 1"}]
    data = load_benchmark("gsm8k", _jsonl(tmp_path / "gsm8k_test.jsonl", rows))
    assert data.rows == 3 and len(data.problems) == 1
    assert data.skipped_by_reason() == {"no_gold": 1, "missing_field": 1}
    (tmp_path / "gsm8k_test.jsonl").write_text(json.dumps(GSM8K_ROWS[0]) + "\n{oops\n")
    with pytest.raises(BenchmarkError, match="gsm8k_test.jsonl: line 2"):
        load_benchmark("gsm8k", tmp_path)


@pytest.mark.parametrize("layout", ["math500/test.jsonl", "MATH-500/test.jsonl",
                                    "math500/test-00000-of-00001.parquet"])
def test_math500_loader(tmp_path, layout):
    f = tmp_path / layout
    (_parquet if f.suffix == ".parquet" else _jsonl)(f, MATH500_ROWS)
    data = load_benchmark("math500", tmp_path)
    assert data.path == f and data.rows == 3 and not data.skipped
    p = data.problems[0]
    assert p.id == "test/precalculus/807.json" and p.gold == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert p.meta["subject"] == "Precalculus" and p.meta["level"] == 2


def test_math500_scored_per_subject_and_level(tmp_path):
    data = {"math500": load_benchmark("math500", _jsonl(tmp_path / "math500.jsonl", MATH500_ROWS))}
    responses = {"test/precalculus/807.json": "\\boxed{(3, \\frac{\\pi}{2})}",
                 "test/algebra/2036.json": "so \\boxed{26000}",
                 "test/prealgebra/1747.json": "\\boxed{8/20}"}
    from vlcohort.answers.grading import get_grader
    from vlcohort.eval.runner import score_record

    g = get_grader()
    recs = [{"benchmark": "math500", "id": p.id, "model": "m", "sample": 0,
             **score_record(p, responses[p.id], g)} for p in data["math500"].problems]
    s = summarize(data, recs, ["m"])
    res = s["benchmarks"]["math500"]["models"]["m"]
    assert res["groups"]["subject=Algebra"] == {"acc": 1.0, "n": 1}
    assert res["groups"]["subject=Prealgebra"] == {"acc": 0.0, "n": 1}
    assert res["groups"]["level=2"]["n"] == 2
    assert [r["correct"] for r in recs] == [True, True, False]


def test_gsm8k_score_saved_responses(tmp_path, capsys):
    _jsonl(tmp_path / "gsm8k_test.jsonl", GSM8K_ROWS)
    r = _jsonl(tmp_path / "r.jsonl", [{"id": "0", "response": "so 72 clips. \\boxed{72}"},
                                      {"id": "2", "response": "The answer is \\boxed{1,235}"}])
    assert main(["eval", "score", "--benchmark", "gsm8k", "--data", str(tmp_path),
                 "--responses", str(r), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["benchmarks"]["gsm8k"]["models"]["responses"]["maj"] == 1.0


def test_eval_gsm8k_end_to_end_text_model(tmp_path, capsys):
    _jsonl(tmp_path / "bench" / "gsm8k_test.jsonl", GSM8K_ROWS)
    out = tmp_path / "out"
    assert main(["eval", "--model", "tiny:qwen2", "--benchmark", "gsm8k",
                 "--data-dir", str(tmp_path / "bench"), "--out", str(out),
                 "--max-new-tokens", "4", "--no-progress"]) == 0
    items = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    assert len(items) == 3 and {i["id"] for i in items} == {"0", "1", "2"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["benchmarks"]["gsm8k"]["models"]["tiny:qwen2"]["n_scored"] == 3
    assert "| **gsm8k** |" in (out / "summary.md").read_text()


def test_cli_default_is_the_four_vlm_benchmarks():
    import argparse

    from vlcohort.eval.cli import add_arguments

    p = argparse.ArgumentParser()
    add_arguments(p)
    assert p.parse_args([]).benchmark == "mathvista,mathverse,mathvision,wemath"
