"""``vlcohort eval`` on GSM8K-format items (``tests/data/real_gsm8k/gsm8k_test.jsonl``, the
published JSONL form: ``question``, ``answer`` ending ``#### <number>``) through the ``hf``
engine, on both real checkpoints: the instruct model through its chat template, the base
model through the r1_zero prompt format (its tokenizer has no chat template, so a run that
got this wrong would stop at rendering). Greedy decoding; what is checked is that every
item is generated, extracted and scored, and that the report agrees with the items,
not what accuracy a 135M / 270M model reaches."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from vlcohort.answers.grading import get_grader
from vlcohort.cli import main
from vlcohort.eval.datasets import load_benchmark

DATA = Path(__file__).resolve().parents[1] / "data" / "real_gsm8k"


@pytest.mark.parametrize("which", ["smollm2_path", "gemma3_path"])
def test_eval_gsm8k_through_the_hf_engine_is_generated_and_scored(which, request, tmp_path):
    model = request.getfixturevalue(which)
    out = tmp_path / "eval"
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        code = main(["eval", "--model", model, "--benchmark", "gsm8k", "--engine", "hf",
                     "--data-dir", str(DATA), "--out", str(out), "--max-new-tokens", "16",
                     "--no-progress"])
    assert code == 0, printed.getvalue()[-2000:]
    gold = {p.id: p.gold for p in load_benchmark("gsm8k", DATA).problems}
    assert gold == {"0": "72", "1": "10", "2": "42"}
    items = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    assert sorted(i["id"] for i in items) == ["0", "1", "2"]
    grader = get_grader()
    for item in items:
        assert item["model"] == model and item["benchmark"] == "gsm8k"
        assert item["response"].strip(), item  # 16 greedy tokens were generated
        assert isinstance(item["correct"], bool)
        if item["extracted"] is None:  # nothing answer-shaped: scored wrong, said so
            assert item["correct"] is False and item["rule"] == "no_extraction"
        else:  # the verdict is the grader's on the extracted answer
            assert item["correct"] == grader.is_equivalent(item["extracted"], gold[item["id"]])
    summary = json.loads((out / "summary.json").read_text())
    cell = summary["benchmarks"]["gsm8k"]["models"][model]
    assert cell["n_scored"] == 3
    assert cell["mean"] == pytest.approx(sum(i["correct"] for i in items) / 3)
    assert "| **gsm8k** |" in (out / "summary.md").read_text()
