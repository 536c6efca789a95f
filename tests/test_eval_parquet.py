"""The common hub parquet forms of the four VLM benchmarks, read through ``datasets`` with
images kept as bytes.

The files are written here in the column layouts the dataset cards describe:

- ``AI4Math/MathVista``: ``data/testmini-00000-of-00001-*.parquet`` (and ``data/test-*``);
  the official fields plus ``decoded_image`` (HF ``Image``), with ``image`` kept as the
  relative path string and ``metadata`` a struct.
- ``MathLLMs/MathVision``: ``data/testmini-*.parquet`` / ``data/test-*.parquet``; the
  official fields plus ``decoded_image`` (``Image``); ``image`` the path string.
- ``AI4Math/MathVerse``: a ``testmini`` (and a ``testmini_text_only``) configuration; here
  the ``image`` column itself is the HF ``Image``. The exact file names of its configs are
  not known to us, so both a ``testmini.parquet`` and a ``testmini/`` folder are tested.
- ``We-Math/We-Math``: ``testmini`` with the official space-named fields; whether its
  ``image_path`` column is an HF ``Image`` or a path string we are not sure, so both are
  tested.
"""

from __future__ import annotations

import io
import json

import datasets
import pytest
from PIL import Image

from vlcohort.cli import main
from vlcohort.eval.datasets import image_refs, load_benchmark


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def _png(colour: str = "red") -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (32, 24), colour).save(buf, format="PNG")
    return buf.getvalue()


def _write(path, rows, image_cols=()):
    """Rows -> parquet through ``datasets``, with ``image_cols`` as HF ``Image`` features."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ds = datasets.Dataset.from_list(rows)
    for col in image_cols:
        ds = ds.cast_column(col, datasets.Image())
    ds.to_parquet(str(path))
    return path


def _mathvista_rows(n=3, split="testmini"):
    colours = ["red", "blue", "green"]
    return [{"pid": f"{i + 1}", "question": f"What colour is it? ({split})",
             "image": f"images/{i + 1}.jpg", "decoded_image": {"bytes": _png(colours[i % 3]), "path": None},
             "choices": colours, "unit": None, "precision": None, "answer": colours[i % 3],
             "question_type": "multi_choice", "answer_type": "text",
             "metadata": {"category": "general-vqa", "task": "figure question answering",
                          "context": "synthetic scene", "grade": "elementary school",
                          "img_height": 24, "img_width": 32, "language": "english",
                          "skills": ["numeric commonsense"], "source": "x", "split": split},
             "query": "Hint: ...\nQuestion: What colour is it?\nChoices:\n(A) red\n(B) blue\n(C) green"}
            for i in range(n)]


def test_mathvista_hub_parquet_folder_prefers_testmini(tmp_path):
    snap = tmp_path / "bench" / "mathvista" / "data"
    _write(snap / "testmini-00000-of-00001-725687bf7a18d64b.parquet", _mathvista_rows(), ["decoded_image"])
    _write(snap / "test-00000-of-00002-6b81bd7f7e2065e6.parquet",
           _mathvista_rows(2, "test"), ["decoded_image"])
    data = load_benchmark("mathvista", tmp_path / "bench")
    assert data.path.name.startswith("testmini-") and data.rows == 3 and not data.skipped
    p = data.problems[0]
    assert p.options == ["red", "blue", "green"] and p.gold == "red"
    assert p.meta["task"] == "figure question answering" and p.meta["official_query"].startswith("Hint")
    img = p.images[0]
    assert isinstance(img, dict) and Image.open(io.BytesIO(img["bytes"])).size == (32, 24)
    # the snapshot folder itself, and a single file, load the same way
    assert load_benchmark("mathvista", tmp_path / "bench" / "mathvista").rows == 3
    only_test = tmp_path / "t"
    _write(only_test / "data" / "test-00000-of-00001.parquet", _mathvista_rows(2, "test"), ["decoded_image"])
    assert load_benchmark("mathvista", only_test).rows == 2


def test_mathvision_hub_parquet(tmp_path):
    rows = [{"id": str(i), "question": "How many sides? <image1>", "options": opts,
             "image": f"images/{i}.jpg", "decoded_image": {"bytes": _png(), "path": f"{i}.jpg"},
             "answer": ans, "solution": None, "level": 2, "subject": "counting"}
            for i, (opts, ans) in enumerate([([], "4"), (["3", "4", "5", "6", "7"], "B")])]
    f = _write(tmp_path / "MathVision" / "data" / "testmini-00000-of-00001.parquet", rows, ["decoded_image"])
    data = load_benchmark("mathvision", tmp_path)
    assert data.path == f and data.rows == 2 and not data.skipped
    assert data.problems[0].options is None and data.problems[1].options == ["3", "4", "5", "6", "7"]
    assert all(isinstance(p.images[0], dict) and p.images[0]["bytes"] for p in data.problems)
    assert data.problems[1].meta["subject"] == "counting"


@pytest.mark.parametrize("layout", ["mathverse/testmini.parquet",
                                    "MathVerse/testmini/testmini-00000-of-00001.parquet"])
def test_mathverse_hub_parquet(tmp_path, layout):
    rows = [{"sample_index": str(i + 1), "problem_index": "1", "problem_version": v,
             "question": "As shown in the figure, find the angle.\nChoices:\nA:40°\nB:60°",
             "image": {"bytes": _png(), "path": None}, "answer": "B",
             "question_type": "multi-choice",
             "metadata": {"split": "testmini", "source": "GeoQA", "subject": "Plane Geometry",
                          "subfield": "Angle"},
             "query_wo": "...", "query_cot": "...", "question_for_eval": "..."}
            for i, v in enumerate(["Text Dominant", "Vision Only"])]
    f = _write(tmp_path / layout, rows, ["image"])
    # a text-only configuration beside it must not be mixed in
    _write(f.parent / "testmini_text_only.parquet", rows[:1], ["image"])
    data = load_benchmark("mathverse", tmp_path)
    assert data.rows == 2 and not data.skipped
    p = data.problems[0]
    assert p.options == ["40°", "60°"] and p.meta["subject"] == "Plane Geometry"
    assert {q.meta["problem_version"] for q in data.problems} == {"Text Dominant", "Vision Only"}
    assert isinstance(p.images[0], dict)


@pytest.mark.parametrize("as_image", [True, False])
def test_wemath_hub_parquet(tmp_path, as_image):
    (tmp_path / "wemath").mkdir()
    Image.new("RGB", (8, 8)).save(tmp_path / "wemath" / "1.png")
    rows = [{"ID": "2steps_1", "split": "testmini", "knowledge concept": "Area of triangles",
             "question": f"Step {k}?", "option": "A. 3;B. 4;C. 5;D. 6;E. No correct answer",
             "answer": "B", "image_path": {"bytes": _png(), "path": None} if as_image else "1.png",
             "key": k, "question number": n, "knowledge concept description": "..."}
            for n, k in enumerate(["2steps_1", "2steps_2", "2steps_multi"], 1)]
    _write(tmp_path / "wemath" / "testmini.parquet", rows, ["image_path"] if as_image else [])
    data = load_benchmark("wemath", tmp_path)
    assert data.rows == 3 and not data.skipped
    p = data.problems[0]
    assert p.id == "2steps_1/2steps_1" and p.options == ["3", "4", "5", "6", "No correct answer"]
    assert p.meta["knowledge_concept"] == "Area of triangles"
    assert isinstance(p.images[0], dict) if as_image else p.images[0].endswith("1.png")


def test_raw_bytes_column_and_refs():
    assert image_refs({"decoded_image": b"\x89PNG", "image": "a.png"}, "decoded_image", "image") \
        == [{"bytes": b"\x89PNG", "path": None}]
    assert image_refs({"decoded_image": None, "image": "a.png"}, "decoded_image", "image") == ["a.png"]
    assert image_refs({"image": {"bytes": None, "path": "b.png"}}, "image") == ["b.png"]
    assert image_refs({}, "image") == []


def test_parquet_row_without_image_is_skipped_and_listed(tmp_path):
    rows = _mathvista_rows(2)
    rows[1]["decoded_image"] = None
    rows[1]["image"] = "images/nowhere.jpg"
    _write(tmp_path / "mathvista_testmini.parquet", rows, ["decoded_image"])
    data = load_benchmark("mathvista", tmp_path)
    assert data.rows == 2 and data.skipped_by_reason() == {"missing_image": 1}


def test_eval_end_to_end_on_hub_parquet(tmp_path):
    bench = tmp_path / "bench"
    _write(bench / "mathvista" / "data" / "testmini-00000-of-00001.parquet", _mathvista_rows(2),
           ["decoded_image"])
    out = tmp_path / "out"
    assert main(["eval", "--model", "tiny:qwen2_5_vl", "--benchmark", "mathvista",
                 "--data-dir", str(bench), "--out", str(out), "--max-new-tokens", "3",
                 "--no-progress"]) == 0
    items = [json.loads(x) for x in (out / "items.jsonl").read_text().splitlines()]
    assert [i["id"] for i in items] == ["1", "2"]
    assert json.loads((out / "summary.json").read_text())["benchmarks"]["mathvista"]["n_items"] == 2
