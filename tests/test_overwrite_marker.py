"""``vlcohort train --overwrite`` deletes only what a run vlcohort marked as its own
(``.vlcohort-run``, written as the run starts, listing the names it creates): a project
folder holding ``checkpoints/`` and ``src/``, a folder with a forged or copied marker, and a
run written before runs were marked are refused whole; the user's files beside a marked
run are left and reported. Real ``vlcohort train`` runs on tiny models, real files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers.comas import SMALL, TEXT3, TEXT_DATA
from tests.helpers.train import FAST
from vlcohort import run_folder
from vlcohort.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` with its bytes (None: a folder)."""
    return {str(p.relative_to(folder)): (None if p.is_dir() else p.read_bytes())
            for p in sorted(folder.rglob("*"))}


def _project(folder: Path) -> Path:
    """A user's project: their own checkpoints/ beside their sources."""
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "model.bin").write_bytes(b"weights I trained for a week")
    (folder / "src").mkdir()
    (folder / "src" / "main.py").write_text("print('my project')\n")
    (folder / "notes.txt").write_text("mine\n")
    return folder


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert "Traceback" not in err and len(lines) == 1, err
    return lines[0]


def _train(run: Path, *extra: str) -> int:
    return main(["train", *FAST, "run.steps=1", f"run.output_dir={run}", *extra])


@pytest.mark.parametrize("where", ["the output folder itself", "a sub-folder of it"])
def test_an_unmarked_project_folder_survives_overwrite_untouched(tmp_path, capsys, where):
    out = tmp_path / "out"
    project = _project(out if where == "the output folder itself" else out / "project")
    before = _tree(out)

    assert _train(out) == 2  # without --overwrite: refused, and --overwrite is not offered
    line = _error_line(capsys)
    assert str(out) in line and "delete it by hand" in line and "`--overwrite` will not" in line

    assert _train(out, "--overwrite") == 2
    line = _error_line(capsys)
    assert line.startswith(f"error: {out}: --overwrite deletes only a run vlcohort marked")
    assert "no .vlcohort-run" in line and "nothing was deleted" in line
    assert "delete it by hand" in line and "run.output_dir" in line
    assert _tree(out) == before
    assert (project / "src" / "main.py").is_file()


def test_a_forged_or_copied_marker_does_not_make_a_folder_deletable(tmp_path, capsys):
    real = tmp_path / "real"
    assert _train(real) == 0
    capsys.readouterr()
    marker = json.loads((real / run_folder.MARKER).read_text())
    assert {"config.yaml", "metrics.jsonl", "checkpoints"} <= set(marker["entries"])

    forged = {"copied from a real run": (real / run_folder.MARKER).read_text(),
              "hand-made for another folder": json.dumps({**marker, "folder_inode": 1}),
              "claiming the user's names": None,
              "not JSON": "checkpoints src\n"}
    for why, text in forged.items():
        out = _project(tmp_path / why.replace(" ", "-").replace("'", ""))
        if text is None:  # right folder, but claims names no run writes
            rec = {**marker, "folder_inode": out.stat().st_ino, "entries": ["src", "../x"]}
            text = json.dumps(rec)
        (out / run_folder.MARKER).write_text(text)
        before = _tree(out)
        assert _train(out, "--overwrite") == 2, why
        line = _error_line(capsys)
        assert "nothing was deleted" in line and run_folder.MARKER in line, (why, line)
        assert _tree(out) == before, why


def test_overwrite_removes_only_the_marked_runs_files_and_reports_the_rest(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "plots").mkdir(parents=True)  # the user's, there before the run: not the run's
    (run / "plots" / "my_figure.png").write_bytes(b"png")
    (run / "train.log").write_text("my log\n")
    assert _train(run, "checkpoint.every=1") == 0
    claimed = set(json.loads((run / run_folder.MARKER).read_text())["entries"])
    assert {"config.yaml", "metrics.jsonl", "checkpoints"} <= claimed
    assert "plots" not in claimed and "train.log" not in claimed
    _project(run / "project")  # added beside the finished run
    capsys.readouterr()

    assert _train(run, "--overwrite", "optim.lr=0.002") == 0
    out = capsys.readouterr().out
    assert "--overwrite: removed the earlier run's" in out
    left = out.split("left in place, not the run's: ")[1].splitlines()[0]
    assert left.split(", ") == ["plots/", "project/", "train.log"]
    assert (run / "plots" / "my_figure.png").read_bytes() == b"png"
    assert (run / "train.log").read_text() == "my log\n"
    assert (run / "project" / "checkpoints" / "model.bin").is_file()
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [1]
    assert "lr: 0.002" in (run / "config.yaml").read_text()


def test_a_run_written_before_runs_were_marked_is_refused_with_the_way_out(tmp_path, capsys):
    """No marker: vlcohort cannot tell an old run from a folder of the user's, and a
    deletion cannot be taken back; one ``rm -r`` by hand can. Nothing is deleted."""
    run = tmp_path / "old"
    assert _train(run) == 0
    (run / run_folder.MARKER).unlink()  # as the previous version left it
    before = _tree(run)
    capsys.readouterr()
    assert _train(run, "--overwrite") == 2
    line = _error_line(capsys)
    assert "a run written before runs were marked" in line and "delete it by hand" in line
    assert _tree(run) == before
    assert main(["train", "--resume", str(run), "run.steps=2"]) == 0  # still resumable


def test_a_comparison_run_marks_its_arms_and_overwrite_clears_them(tmp_path, capsys):
    run = tmp_path / "cmp"
    args = ["arms=[gt_reward, ttrl]", "parallel_arms=false"]
    assert _train(run, *args) == 0
    parent = json.loads((run / run_folder.MARKER).read_text())
    assert parent["runs"] == {"gt_reward": True, "ttrl": True}
    for arm in ("gt_reward", "ttrl"):
        assert {"config.yaml", "metrics.jsonl"} <= set(
            json.loads((run / arm / run_folder.MARKER).read_text())["entries"])
    (run / "ttrl" / "my_notes.txt").write_text("mine\n")  # the user's, inside one arm
    _project(run / "project")
    capsys.readouterr()

    assert _train(run, *args, "--overwrite") == 0
    out = capsys.readouterr().out
    removed = out.split("removed the earlier run's ")[1].split(" from ")[0].split(", ")
    assert "gt_reward/" in removed and "ttrl/metrics.jsonl" in removed
    left = out.split("left in place, not the run's: ")[1].splitlines()[0]
    assert left.split(", ") == ["ttrl/my_notes.txt", "project/"]
    assert (run / "ttrl" / "my_notes.txt").read_text() == "mine\n"
    assert (run / "project" / "src" / "main.py").is_file()
    for arm in ("gt_reward", "ttrl"):  # the new run's arms, one step each
        recs = (run / arm / "metrics.jsonl").read_text().splitlines()
        assert [json.loads(x)["step"] for x in recs] == [1]


def test_an_arm_folder_holding_an_unmarked_run_is_refused_not_mixed(tmp_path, capsys):
    run = tmp_path / "cmp"
    (run / "ttrl" / "checkpoints").mkdir(parents=True)  # somebody's, under an arm's name
    assert _train(run, "arms=[ttrl]", "parallel_arms=false", "--overwrite") == 2
    line = _error_line(capsys)
    assert "delete it by hand" in line and "nothing was deleted" in line
    assert (run / "ttrl" / "checkpoints").is_dir()


def test_self_play_and_comas_runs_are_marked_with_their_own_files(tmp_path, capsys):
    sp = tmp_path / "sp"
    assert main(["train", str(ROOT / "configs" / "self_play_tiny.yaml"), "log.progress=false",
                 "run.threads=1", "run.steps=1", f"run.output_dir={sp}"]) == 0
    assert "questions.jsonl" in json.loads((sp / run_folder.MARKER).read_text())["entries"]
    co = tmp_path / "comas"
    assert main(["train", *SMALL, TEXT3, *TEXT_DATA, "comas.rounds=1", "run.steps=1",
                 f"run.output_dir={co}"]) == 0
    assert "discussions.jsonl" in json.loads((co / run_folder.MARKER).read_text())["entries"]
    capsys.readouterr()
    assert main(["train", *SMALL, TEXT3, *TEXT_DATA, "comas.rounds=1", "run.steps=1",
                 f"run.output_dir={co}", "--overwrite"]) == 0
    assert "discussions.jsonl" in capsys.readouterr().out
    shutil.rmtree(sp)
