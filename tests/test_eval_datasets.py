"""Benchmark loaders against the real official annotation files (shared data folder)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from vlcohort.eval.datasets import (
    BenchmarkError,
    load_benchmark,
    parse_benchmark_names,
    read_jsonl,
    split_choices_block,
    split_semicolon_options,
)


@pytest.mark.parametrize("name,rows", [("mathvista", 1000), ("mathverse", 788),
                                       ("mathvision", 304), ("wemath", 1740)])
def test_every_row_is_read(benchmark_dir, name, rows):
    data = load_benchmark(name, benchmark_dir, need_images=False)
    assert data.rows == rows and len(data.problems) == rows and not data.skipped
    assert len({p.id for p in data.problems}) == rows
    assert all(p.gold for p in data.problems)


def test_mathvista_fields(benchmark_file):
    data = load_benchmark("mathvista", benchmark_file("mathvista_testmini.json"), need_images=False)
    p = {p.id: p for p in data.problems}
    assert p["1"].meta["answer_type"] == "float" and p["1"].meta["precision"] == 1
    assert p["5"].options == ["97", "102", "107", "122"] and p["5"].gold == "97"
    mc = [q for q in data.problems if q.meta["question_type"] == "multi_choice"]
    assert all(q.gold in q.options for q in mc)


def test_mathvista_images_missing_are_skipped_and_listed(benchmark_dir):
    # the shared folder ships no MathVista images: every item is skipped, counted, listed
    data = load_benchmark("mathvista", benchmark_dir)
    assert data.problems == [] and data.skipped_by_reason() == {"missing_image": 1000}
    assert "images/1.jpg" in {s.id: s.detail for s in data.skipped}["1"]


def test_mathverse_options_parsed_from_question(benchmark_dir):
    data = load_benchmark("mathverse", benchmark_dir, need_images=False)
    mc = [p for p in data.problems if p.meta["question_type"] == "multi-choice"]
    assert len(mc) == 436 and all(p.options for p in mc)
    assert Counter(p.meta["problem_version"] for p in data.problems) == {"Text Only": 788}
    first = data.problems[0]
    assert first.options == ["40°", "60°", "120°", "140°"] and "Choices" not in first.text


def test_mathvision_images_resolved(benchmark_dir):
    data = load_benchmark("mathvision", benchmark_dir)
    assert len(data.problems) == 304 and not data.skipped
    assert all(len(p.images) == 1 for p in data.problems)
    assert Counter(len(p.options or []) for p in data.problems).keys() <= {0, 5}


def test_wemath_fields_and_images(benchmark_dir):
    data = load_benchmark("wemath", benchmark_dir)
    assert len(data.problems) == 150 and data.skipped_by_reason() == {"missing_image": 1590}
    all_rows = load_benchmark("wemath", benchmark_dir, need_images=False).problems
    assert len({p.meta["ID"] for p in all_rows}) == 525
    assert all(p.options and p.gold in "ABCDEFG" for p in all_rows)
    assert all_rows[0].options[:2] == ["300, 400", "400, 300"]


def test_option_splitters():
    assert split_semicolon_options("A. 45° B. 60° ;C. 120°; D. No correct answer") == [
        "45°", "60°", "120°", "No correct answer"]
    assert split_semicolon_options("A. ①;B．②;C. ③") == ["①", "②", "③"]
    assert split_choices_block("Q?\nChoices:\nA:1\nB:2") == ("Q?", ["1", "2"])
    assert split_choices_block("no block") == ("no block", None)


def test_unknown_benchmark_lists_known():
    with pytest.raises(BenchmarkError, match="known: mathvista, mathverse, mathvision, wemath"):
        parse_benchmark_names("mathvista,mmmu")


def test_malformed_json_line_names_file_and_line(tmp_path):
    f = tmp_path / "x.jsonl"
    f.write_text('{"id": "1"}\n{"id": \n')
    with pytest.raises(BenchmarkError, match=r"x.jsonl: line 2"):
        list(read_jsonl(f))
    g = tmp_path / "mathvision_testmini.jsonl"
    g.write_text(json.dumps({"id": "1", "question": "q", "answer": "1"}) + "\n{oops\n")
    with pytest.raises(BenchmarkError, match="line 2"):
        load_benchmark("mathvision", tmp_path)
