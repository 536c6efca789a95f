"""A malformed JSON line is named the same way by every loader: file, line, json's problem
and its column, read as one phrase (json's "Unterminated string starting at" once gave
"... starting at at column 33")."""

from __future__ import annotations

import json

import pytest

from vlcohort.data.problems import DataError, load_problems_from
from vlcohort.data.views import load_rewrites
from vlcohort.errors import json_error_text
from vlcohort.eval.datasets import BenchmarkError, read_json, read_jsonl
from vlcohort.monitoring.metrics import MetricsFileError, read_metrics

CUT = '{"id": "q1", "question": "cut mid-wr'  # a line of a file whose writer was killed
CUT_PROBLEM = "Unterminated string starting at column 26"


@pytest.mark.parametrize("text,phrase", [
    (CUT, CUT_PROBLEM),
    ('{"id": "q1" "question": 1}', "Expecting ',' delimiter at column 13"),
    ('{"q": "a\tb"}', "Invalid control character at column 9"),
])
def test_json_error_text_reads_as_one_phrase(text, phrase):
    with pytest.raises(json.JSONDecodeError) as e:
        json.loads(text)
    assert json_error_text(e.value) == phrase


def test_training_data_file(tmp_path):
    path = tmp_path / "train.jsonl"
    good = json.dumps({"id": "q0", "question": "What is 1 + 1?", "answer": "2"})
    path.write_text(f"{good}\n{CUT}\n")
    _, report = load_problems_from(str(path))
    assert report.skipped == {"malformed_line": 1}
    assert f"{path}, line 2, not JSON ({CUT_PROBLEM})\n" in report.summary() + "\n"
    assert "at at" not in report.summary()


def test_rewrites_file(tmp_path):
    path = tmp_path / "rewrites.jsonl"
    path.write_text(json.dumps({"id": "q0", "question": "Again?"}) + f"\n{CUT}\n")
    with pytest.raises(DataError) as e:
        load_rewrites(path)
    assert str(e.value) == f"{path}, line 2: not valid JSON ({CUT_PROBLEM})"


def test_metrics_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text(json.dumps({"step": 1}) + f"\n{CUT}\n")
    with pytest.raises(MetricsFileError) as e:
        read_metrics(path)
    assert str(e.value).startswith(f"{path}, line 2: not valid JSON ({CUT_PROBLEM}); ")


def test_benchmark_files(tmp_path):
    lines = tmp_path / "bench.jsonl"
    lines.write_text(json.dumps({"pid": 1}) + f"\n{CUT}\n")
    with pytest.raises(BenchmarkError) as e:
        list(read_jsonl(lines))
    assert str(e.value).startswith(f"{lines}: line 2: malformed JSON ({CUT_PROBLEM}). ")
    whole = tmp_path / "bench.json"
    whole.write_text('[\n  {"pid": 1},\n  {"pid": "cut\n')
    with pytest.raises(BenchmarkError) as e:
        read_json(whole)
    assert str(e.value).startswith(f"{whole}: line 3: malformed JSON (Invalid control character "
                                   "at column 15). ")
