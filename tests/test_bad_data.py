"""Bad training records are skipped and counted with file and line, never fatal for the
file; too many bad ones stop the run before any work (real files, the real loaders)."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from vlcohort.cli import main
from vlcohort.config import load_config
from vlcohort.config_checks import validate
from vlcohort.data.problems import DataError, load_problems_from
from vlcohort.recipes.run_problems import load_problems
from vlcohort.typed_yaml import ConfigError


def _write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _record(i, **kw):
    return json.dumps({"id": f"q{i}", "question": f"What is {i} + 1?", "answer": str(i + 1), **kw})


def test_a_malformed_line_is_skipped_and_named_not_fatal(tmp_path):
    path = _write_lines(tmp_path / "train.jsonl", [
        _record(0), '{"id": "q1", "question": "cut mid-wr', _record(2), "[1, 2]", _record(3)])
    problems, report = load_problems_from(str(path))
    assert [p.id for p in problems] == ["q0", "q2", "q3"]
    assert report.skipped == {"malformed_line": 2} and report.rows == 5
    text = report.summary()
    assert f"{path}, line 2, not JSON" in text and f"{path}, line 4, a JSON list" in text


def test_the_image_column_of_the_generic_preset_is_checked_at_load(tmp_path):
    Image.new("RGB", (8, 8)).save(tmp_path / "ok.png")
    path = _write_lines(tmp_path / "train.jsonl", [
        _record(0, image="ok.png"), _record(1, image="missing.png")])
    problems, report = load_problems_from(str(path))
    assert [p.id for p in problems] == ["q0"] and problems[0].images == ["ok.png"]
    assert report.skipped == {"image_not_found": 1}
    assert "missing.png" in report.summary() and "row 1, field 'image[0]'" in report.summary()


def test_no_json_object_at_all_is_a_clear_error(tmp_path):
    path = _write_lines(tmp_path / "train.jsonl", ["not json", "[]"])
    with pytest.raises(DataError, match=r"train\.jsonl: no line is a JSON object \(line 1"):
        load_problems_from(str(path))


def _cfg(path, *extra):
    return load_config(None, ["data.source=file", f"data.path={path}", *extra])


def test_too_many_bad_records_stop_before_training(tmp_path):
    lines = [_record(0)] + ["{bad"] * 3
    path = _write_lines(tmp_path / "train.jsonl", lines)
    with pytest.raises(ConfigError, match=r"75% of the 4 rows .* data\.max_bad_fraction=0\.5"):
        load_problems(_cfg(path))
    assert [p.id for p in load_problems(_cfg(path, "data.max_bad_fraction=1.0"))] == ["q0"]
    with pytest.raises(ConfigError, match=r"data\.max_bad_fraction: must be in \[0, 1\]"):
        validate(_cfg(path, "data.max_bad_fraction=1.5"))


def test_the_cli_names_the_bad_line_and_trains_on_the_rest(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path / "cache"))
    path = _write_lines(tmp_path / "train.jsonl",
                        [_record(i) for i in range(6)] + ['{"id": "x", "question":'])
    run = tmp_path / "run"
    assert main(["train", "method=gt_reward", "agents=[{name: A, path: 'tiny:qwen2'}]",
                 "data.source=file", f"data.path={path}", "run.steps=1", "arms=[]",
                 "eval.every=0", "rollout.prompts_per_step=2", "rollout.rollouts_per_prompt=2",
                 "rollout.max_new_tokens=4", "log.plot=false", "reward.min_share=0",
                 f"run.output_dir={run}"]) == 0
    err = capsys.readouterr().err
    assert "malformed_line=1" in err and f"{path}, line 7, not JSON" in err


def test_unreadable_and_over_large_images_are_skipped_at_load_by_reason(tmp_path):
    """Header-only checks: a file that is no image (an HTML error page saved as .png, a cut
    download), one over data.max_image_pixels, and bad embedded bytes, each skipped with
    its reason, file and line; the good records are kept."""
    Image.new("RGB", (8, 8)).save(tmp_path / "ok.png")
    Image.new("RGB", (300, 200)).save(tmp_path / "big.png")
    (tmp_path / "error-page.png").write_text("<html>404 Not Found</html>")
    good = (tmp_path / "ok.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(good[:20])
    path = _write_lines(tmp_path / "train.jsonl", [
        _record(0, image="ok.png"), _record(1, image="error-page.png"),
        _record(2, image="big.png"), _record(3, image="cut.png"), _record(4, image="ok.png")])
    problems, report = load_problems_from(str(path), max_image_pixels=300 * 200 - 1)
    assert [p.id for p in problems] == ["q0", "q4"]
    assert report.skipped == {"image_unreadable": 2, "image_too_large": 1}
    text = report.summary()
    assert "error-page.png: not a readable image" in text
    assert "big.png: 300x200 = 60000 pixels, over data.max_image_pixels=59999" in text
    # 0: no limit; the same file is then kept
    problems, report = load_problems_from(str(path), max_image_pixels=0)
    assert [p.id for p in problems] == ["q0", "q2", "q4"]


def test_a_negative_pixel_limit_is_a_config_error():
    with pytest.raises(ConfigError, match="data.max_image_pixels"):
        validate(load_config(None, ["data.max_image_pixels=-1"]))
