"""Training data loaders: presets in their real column layouts, options in text, per-agent
views, bad records counted by reason, and a short training run on a local parquet."""

from __future__ import annotations

import io
import json

import pytest
from PIL import Image

from vlcohort.data.problems import (
    PRESETS,
    Columns,
    DataError,
    answer_from_solution,
    load_problems_from,
    parse_options_field,
    split_options,
)
from vlcohort.data.views import attach_views, load_rewrites, view_of


def png_bytes(colour=(200, 30, 30), size=(12, 10)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, "PNG")
    return buf.getvalue()


def write_png(path, colour=(0, 128, 0)):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png_bytes(colour))
    return path


def image_dataset(rows: dict, image_cols: dict):
    """A datasets.Dataset with HF Image features, as hub parquet files carry them."""
    from datasets import Dataset, Features, List, Value
    from datasets import Image as HFImage

    feats = {}
    for k, v in rows.items():
        if k in image_cols:
            feats[k] = List(HFImage()) if image_cols[k] == "list" else HFImage()
        else:
            feats[k] = Value("string")
    return Dataset.from_dict(rows, features=Features(feats))


# ----------------------------------------------------------------------------- options

OPTION_CASES = [
    ("What is x?\nChoices:\nA: 3\nB: 4\nC: 5", "What is x?", ["3", "4", "5"]),
    ("What is x?\nChoices:\n(A) 30°\n(B) 60°", "What is x?", ["30°", "60°"]),
    ("What is x? (A) 3 (B) 4.5 (C) none", "What is x?", ["3", "4.5", "none"]),
    ("What is x? A. 3;B. 4;C. 5", "What is x?", ["3", "4", "5"]),
    ("Find angle A. Options: A. 30 B. 60", "Find angle A.", ["30", "60"]),
    ("x?\nChoices:\n(A) 1\n(B) 2\nAnswer with the letter.", "x?\nAnswer with the letter.",
     ["1", "2"]),
    # prose that only looks like options is left alone
    ("In triangle ABC, point A. Then B. is it?", "In triangle ABC, point A. Then B. is it?", None),
    ("As shown, AB = 3. A. 1 B. 2", "As shown, AB = 3. A. 1 B. 2", None),
    ("No options: 3.5 and 4.", "No options: 3.5 and 4.", None),
]


@pytest.mark.parametrize("text,stem,options", OPTION_CASES)
def test_split_options(text, stem, options):
    assert split_options(text) == (stem, options)


@pytest.mark.parametrize("value,expected", [
    (["1", "2"], ["1", "2"]), ('["a", "b"]', ["a", "b"]), ("A. x;B. y", ["x", "y"]),
    ("(A) x (B) y", ["x", "y"]), (None, None), ("", None), ([], None)])
def test_options_field(value, expected):
    assert parse_options_field(value) == expected


def test_answer_from_solution():
    assert answer_from_solution("<think>hm</think><answer> 42 </answer>") == "42"
    assert answer_from_solution("<think>x</think>no tag") is None
    assert answer_from_solution(None) is None


# ----------------------------------------------------------------------------- presets


def test_mmr1_parquet_with_image_features(tmp_path):
    ds = image_dataset({"images": [[{"bytes": png_bytes(), "path": None}],
                                   [{"bytes": png_bytes(), "path": None},
                                    {"bytes": png_bytes((0, 0, 255)), "path": None}]],
                        "problem": ["<image>How many? Choices:\nA: 3\nB: 4", "Sum of both?"],
                        "answer": ["A", "7"]}, {"images": "list"})
    path = tmp_path / "mmr1.parquet"
    ds.to_parquet(str(path))
    problems, report = load_problems_from(str(path), preset="mmr1")
    assert report.loaded == 2 and not report.skipped
    a, b = problems
    assert a.text == "<image>How many?" and a.options == ["3", "4"] and a.gold == "A"
    assert len(b.images) == 2 and b.options is None and b.gold == "7"
    assert isinstance(a.images[0], dict) and a.images[0]["bytes"]  # undecoded until render
    assert a.meta["base_dir"] == str(tmp_path) and a.id == "mmr1:0"


def test_open_r1_jsonl_with_relative_paths(tmp_path):
    write_png(tmp_path / "img" / "a.png")
    rows = [{"image": "img/a.png", "problem": "What colour?",
             "solution": "<think>green</think><answer>green</answer>"},
            {"image": "img/a.png", "problem": "Area?", "solution": "<answer>\\frac{1}{2}</answer>"}]
    path = tmp_path / "open_r1.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    problems, report = load_problems_from(str(path), preset="open_r1")
    assert [p.gold for p in problems] == ["green", "\\frac{1}{2}"]
    assert problems[0].images == ["img/a.png"]

    from vlcohort.processors.images import open_image
    img = open_image(problems[0].images[0], problem_id="p", index=0,
                     base_dir=problems[0].meta["base_dir"])
    assert img.size == (12, 10)


def test_saved_dataset_folder_and_generic_columns(tmp_path):
    from datasets import DatasetDict

    ds = image_dataset({"uid": ["q1", "q2"], "prompt": ["Pick one", "Which?"],
                        "choices": ['["red", "blue"]', "A. cat;B. dog"],
                        "pic": [{"bytes": png_bytes(), "path": None}] * 2,
                        "label": ["B", "dog"]}, {"pic": "single"})
    DatasetDict({"train": ds, "test": ds.select([0])}).save_to_disk(str(tmp_path / "saved"))
    cols = Columns(id="uid", question="prompt", images="pic", options="choices", answer="label")
    problems, _ = load_problems_from(str(tmp_path / "saved"), columns=cols)
    assert [p.id for p in problems] == ["q1", "q2"]
    assert problems[0].options == ["red", "blue"] and problems[1].options == ["cat", "dog"]
    test, _ = load_problems_from(str(tmp_path / "saved"), columns=cols, split="test")
    assert len(test) == 1
    with pytest.raises(DataError, match="data.split"):
        load_problems_from(str(tmp_path / "saved"), columns=cols, split="nope")


def test_json_file_and_limit(tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps([{"question": f"q{i}?", "answer": str(i)} for i in range(5)]))
    problems, report = load_problems_from(str(path), limit=3)
    assert report.rows == 3 and [p.gold for p in problems] == ["0", "1", "2"]
    assert problems[0].images == []


def test_unusable_dataset_errors_name_the_key(tmp_path):
    with pytest.raises(DataError, match="data.path"):
        load_problems_from(str(tmp_path / "missing.parquet"))
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"text": "x"}))
    with pytest.raises(DataError, match=r"data.columns.question.*columns: text"):
        load_problems_from(str(path))
    (tmp_path / "d.csv").write_text("a\n")
    with pytest.raises(DataError, match="unknown file type"):
        load_problems_from(str(tmp_path / "d.csv"))


# ----------------------------------------------------------------------------- bad records


def test_every_bad_record_reason_is_counted(tmp_path):
    from datasets import Dataset, Features, List, Value

    write_png(tmp_path / "ok.png")

    def _png_cut_after_its_header() -> bytes:
        import numpy as np

        buf = io.BytesIO()
        noise = np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)
        Image.fromarray(noise).save(buf, format="PNG")
        return buf.getvalue()[:200]  # the IHDR chunk intact, the pixel data cut

    def rec(id, question, images=(), answer="1", options=None):
        return {"id": id, "question": question, "answer": answer, "options": options,
                "images": [{"bytes": b, "path": p} for b, p in images]}

    rows = [
        rec("good", "fine?", [(None, "ok.png")]),
        rec("nofile", "q", [(None, "gone.png")]),
        rec("empty", "  "),
        rec("good", "again"),
        rec("noans", "q", answer=None),
        rec("nopath", "q", [(None, None)]),
        rec("nine", "q", options=[str(i) for i in range(9)]),
        rec("broken", "q", [(b"not a png", None)]),
        rec("cut", "q", [(_png_cut_after_its_header(), None)]),
    ]
    feats = Features({"id": Value("string"), "question": Value("string"),
                      "answer": Value("string"), "options": List(Value("string")),
                      # plain structs, as a parquet written without HF metadata holds them
                      "images": List({"bytes": Value("binary"), "path": Value("string")})})
    path = tmp_path / "bad.parquet"
    Dataset.from_list(rows, features=feats).to_parquet(str(path))
    problems, report = load_problems_from(str(path), require_answer=True)
    # bytes that are no image fail the header check at load; an image whose header reads
    # but whose pixels are cut passes it (nothing is decoded at load): rendering skips it
    assert [p.id for p in problems] == ["good", "cut"]
    assert report.skipped == {"image_not_found": 1, "empty_question": 1, "duplicate_id": 1,
                              "missing_answer": 1, "image_missing": 1, "too_many_options": 1,
                              "image_unreadable": 1}
    assert report.rows == len(rows) == report.loaded + sum(report.skipped.values())
    text = report.summary()
    assert "row 1, field 'images[0]'" in text and "bad.parquet" in text and "gone.png" in text
    # without the ground_truth reward a missing answer is fine
    problems, report = load_problems_from(str(path))
    assert "missing_answer" not in report.skipped and len(problems) == 3

    from vlcohort.processors.images import ProblemInputError, open_image
    with pytest.raises(ProblemInputError) as e:
        open_image(problems[-1].images[0], problem_id="cut", index=0)
    assert e.value.reason.startswith("image_")


# ----------------------------------------------------------------------------- views


def test_view_from_column_and_rewrite_file(tmp_path):
    rows = [{"id": "a", "question": "Original a? (A) 1 (B) 2", "alt": "Reworded a? (A) 1 (B) 2"},
            {"id": "b", "question": "Original b?", "alt": "Reworded b?"},
            {"id": "c", "question": "Original c?", "alt": None}]
    path = tmp_path / "v.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    rewrites = tmp_path / "rw.jsonl"
    rewrites.write_text(json.dumps({"id": "a", "question": "Rewritten a?"}) + "\n"
                        + json.dumps({"id": "b", "question": "Rewritten b?"}) + "\n")
    assert load_rewrites(rewrites) == {"a": "Rewritten a?", "b": "Rewritten b?"}
    as_json = tmp_path / "rw.json"
    as_json.write_text(json.dumps({"a": "Rewritten a?"}))
    assert load_rewrites(as_json) == {"a": "Rewritten a?"}

    problems, report = load_problems_from(str(path), extra_columns=["alt"])
    kept = attach_views(problems, [("B", "alt", ""), ("C", "", str(rewrites))], report)
    assert [p.id for p in kept] == ["a", "b"]
    assert report.skipped == {"view_missing": 1}
    a = kept[0]
    assert view_of(a, "A") is a and a.text == "Original a?"
    assert view_of(a, "B").text == "Reworded a?" and view_of(a, "B").options == ["1", "2"]
    assert view_of(a, "C").text == "Rewritten a?" and view_of(a, "C").gold == a.gold

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "question": "x"}\n{oops\n')
    from vlcohort.data.problems import DataError as DE
    with pytest.raises(DE, match=r"bad.jsonl, line 2"):
        load_rewrites(bad)


def test_config_keys_for_data_and_views(tmp_path):
    from vlcohort.config import default_config
    from vlcohort.typed_yaml import ConfigError

    cfg = default_config(["data.source=file", f"data.path={tmp_path}", "data.preset=mmr1",
                          "data.columns.id=uid", "data.limit=5",
                          "agents.1.view.column=alt", "eval.holdout=0.1"])
    assert cfg.data.columns.id == "uid" and cfg.agents[1].view.column == "alt"
    for bad, key in [(["data.source=file"], "data.path"),
                     (["data.source=nope"], "data.source"),
                     (["data.preset=x"], "data.preset"),
                     (["agents.0.view.column=alt"], "agents.0.view"),
                     (["data.columns.bogus=x"], "data.columns.bogus")]:
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            default_config(bad)
    assert PRESETS["open_r1"].answer_is_solution


# ----------------------------------------------------------------------------- end to end


def test_train_runs_on_a_local_parquet(tmp_path, monkeypatch, tmp_path_factory, capsys):
    """``vlcohort train`` on an MMR1-layout parquet with one broken record and a view."""
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))
    from vlcohort.cli import main
    from vlcohort.monitoring.metrics import read_metrics

    colours = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0)]
    n = 6
    ds = image_dataset({
        "id": [f"p{i}" for i in range(n)] + ["p0"],
        "images": [[{"bytes": png_bytes(colours[i % 4], (28, 28)), "path": None}]
                   for i in range(n)] + [[{"bytes": png_bytes(), "path": None}]],
        "problem": ["What colour is the image?\nChoices:\nA: red\nB: green\nC: blue\nD: yellow"
                    for _ in range(n + 1)],
        "alt": ["Name the colour shown." for _ in range(n + 1)],
        "answer": ["ABCD"[i % 4] for i in range(n)] + ["A"]}, {"images": "list"})
    path = tmp_path / "train.parquet"
    ds.to_parquet(str(path))
    out = tmp_path / "run"
    args = ["train", "method=gt_reward", "agents=[{name: A, path: 'tiny:qwen2_5_vl', "
            "view: {column: alt}}]", "reward.answer_style=last_letter",
            "data.source=file", f"data.path={path}", "data.preset=mmr1",
            "rollout.prompts_per_step=2", "rollout.rollouts_per_prompt=4",
            "rollout.max_new_tokens=8", "grpo.micro_batch_seqs=8", "optim.warmup_ratio=0",
            "log.plot=false", "log.tensorboard=false", "arms=[]", "eval.every=0",
            "reward.min_share=0", "grpo.kl_coef=0", "run.steps=2", f"run.output_dir={out}"]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "duplicate_id=1" in err and "row 6" in err
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2]


# ----------------------------------------------------------------------------- data.where, math


MATH_ROWS = [
    {"problem": "Compute $1+1$.", "level": "Level 1", "type": "Algebra",
     "solution": "Clearly $1+1=\\boxed{2}$."},
    {"problem": "Find $x$ if $2x=3$.", "level": "Level 3", "type": "Algebra",
     "solution": "Try \\boxed{1} first; no. So $x=\\boxed{\\frac{3}{2}}$."},
    {"problem": "How many primes are below 10?", "level": "Level 5", "type": "Number Theory",
     "solution": "2, 3, 5, 7: there are $\\boxed{4}$."},
    {"problem": "An unmarked one.", "level": "Level 4", "type": "Algebra",
     "solution": "No box here."},
    {"problem": "Level unknown.", "level": "Level ?", "type": "Geometry",
     "solution": "$\\boxed{0}$"},
]


def test_math_preset_and_where_filter(tmp_path):
    """MATH layout: the gold is the solution's LAST \\boxed{}; data.where keeps levels 3-5
    before data.limit counts rows; rows it leaves out are reported apart from bad records."""
    path = tmp_path / "math.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in MATH_ROWS))
    where = {"level": ["Level 3", "Level 4", "Level 5"]}
    problems, report = load_problems_from(str(path), preset="math", where=where)
    assert [p.text for p in problems] == [r["problem"] for r in MATH_ROWS[1:4]]
    assert [p.gold for p in problems] == ["\\frac{3}{2}", "4", None]
    assert report.filtered == 2 and report.rows == 3 and not report.skipped
    assert "2 rows left out by data.where" in report.summary()
    # the ground_truth reward needs a gold: the unboxed solution is skipped and counted
    problems, report = load_problems_from(str(path), preset="math", where=where,
                                          require_answer=True)
    assert len(problems) == 2 and report.skipped == {"missing_answer": 1}
    # limit counts kept rows; several columns must all match; values compare as text
    problems, _ = load_problems_from(str(path), preset="math", where=where, limit=1)
    assert [p.gold for p in problems] == ["\\frac{3}{2}"]
    problems, _ = load_problems_from(str(path), preset="math",
                                     where={**where, "type": ["Number Theory"]})
    assert [p.gold for p in problems] == ["4"]
    nums = tmp_path / "nums.jsonl"
    nums.write_text("\n".join(json.dumps({"question": f"q{i}", "level": i}) for i in range(1, 6)))
    problems, _ = load_problems_from(str(nums), where={"level": [3, "5"]})
    assert [p.text for p in problems] == ["q3", "q5"]
    with pytest.raises(DataError, match=r"data\.where\.difficulty: column 'difficulty' is not in"):
        load_problems_from(str(path), preset="math", where={"difficulty": ["hard"]})


def test_where_reaches_the_loader_from_the_config(tmp_path):
    """``data.where`` in a config is what ``train.load_problems`` filters by."""
    from vlcohort.config import load_config
    from vlcohort.recipes.run_problems import load_problems
    from vlcohort.typed_yaml import ConfigError

    path = tmp_path / "math.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in MATH_ROWS))
    cfg = load_config(None, ["data.source=file", f"data.path={path}", "data.preset=math",
                             "data.where={level: [Level 4, Level 5]}", "method=gt_reward"])
    assert [p.gold for p in load_problems(cfg)] == ["4"]  # Level 4 has no gold: skipped
    for bad, match in [(["data.where={level: Level 3}"], r"data\.where\.level: expected a list"),
                       (["data.where={level: []}"], r"data\.where\.level: give a column"),
                       (["data.where=[level]"], r"data\.where: expected a mapping")]:
        with pytest.raises(ConfigError, match=match):
            load_config(None, ["data.source=file", f"data.path={path}", *bad])
    with pytest.raises(ConfigError, match=r"data\.where: .*needs data\.source=file or hub"):
        load_config(None, ["data.where={level: [Level 3]}"])
