"""Bad command-line inputs end in one line naming the path or name and the fix, exit 2, no
traceback (the real CLI on a real tiny run; one case also as a separate process)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.train import FAST
from vlcohort.cli import main


@pytest.fixture(scope="module")
def run1(tmp_path_factory):
    """A finished 1-step run (one checkpoint, a metrics.jsonl)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))
        run = tmp_path_factory.mktemp("bad_inputs") / "run"
        assert main(["train", *FAST, "run.steps=1", f"run.output_dir={run}"]) == 0
    assert (run / "checkpoints/step-1/state.json").is_file()
    return run


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


# ---------------------------------------------------------------------------- export


def test_export_out_a_symlink_with_force_is_refused_and_its_target_kept(run1, tmp_path, capsys):
    target = tmp_path / "precious"
    target.mkdir()
    (target / "keep.txt").write_text("keep")
    link = tmp_path / "out"
    link.symlink_to(target, target_is_directory=True)
    assert main(["export", str(run1), "--out", str(link), "--force"]) == 2
    line = _error_line(capsys)
    assert f"--out {link}: is a symbolic link" in line and "real folder" in line
    assert (target / "keep.txt").read_text() == "keep" and link.is_symlink()


def test_export_out_under_a_file_is_refused(run1, tmp_path, capsys):
    somefile = tmp_path / "somefile"
    somefile.write_text("x")
    assert main(["export", str(run1), "--out", str(somefile / "x")]) == 2
    line = _error_line(capsys)
    assert f"{somefile} is a file, not a folder" in line and "give a path in a folder" in line
    assert somefile.read_text() == "x"


# ---------------------------------------------------------------------------- plot


def test_plot_out_an_unknown_extension_names_the_supported_ones(run1, tmp_path, capsys):
    out = tmp_path / "x.xyz"
    assert main(["plot", str(run1), "--out", str(out)]) == 2
    line = _error_line(capsys)
    assert f"--out {out}" in line and ".xyz" in line and ".png" in line and ".svg" in line
    assert not out.exists()


@pytest.mark.parametrize("where", ["under_a_file", "a_folder"])
def test_plot_out_that_cannot_be_a_file_is_refused(run1, tmp_path, capsys, where):
    (tmp_path / "somefile").write_text("x")
    (tmp_path / "folder.png").mkdir()
    out = tmp_path / ("somefile/x.png" if where == "under_a_file" else "folder.png")
    assert main(["plot", str(run1), "--out", str(out)]) == 2
    line = _error_line(capsys)
    assert f"--out {out}" in line and ("is a file" in line or "is a folder" in line)


def test_plot_still_writes_a_good_out(run1, tmp_path, capsys):
    assert main(["plot", str(run1), "--out", str(tmp_path / "new" / "d.svg")]) == 0
    assert (tmp_path / "new" / "d.svg").read_text().lstrip().startswith("<?xml")
    assert main(["plot", str(run1), "--out", str(tmp_path / "d")]) == 0  # png, as matplotlib
    assert (tmp_path / "d.png").read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------------------- tiny


def test_tiny_unknown_name_lists_the_known_ones(capsys):
    from vlcohort.processors.tiny import TINY_MODELS

    assert main(["tiny", "nope"]) == 2
    line = _error_line(capsys)
    assert "'nope'" in line and all(name in line for name in TINY_MODELS)


def test_tiny_unknown_name_in_a_real_process():
    proc = subprocess.run([sys.executable, "-m", "vlcohort", "tiny", "qwen2", "nope"],
                          capture_output=True, text=True, timeout=300, check=False,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "'nope'" in proc.stderr and "qwen2_5_vl" in proc.stderr
    assert proc.stdout == ""  # nothing built before the refusal


# ---------------------------------------------------------------------------- diversity


def test_diversity_out_under_a_file_is_refused_before_any_work(tmp_path, capsys):
    (tmp_path / "report.txt").write_text("x")
    out = tmp_path / "report.txt" / "div"
    assert main(["diversity", "--synthetic", "shape_colour", "--answers",
                 str(tmp_path / "absent.jsonl"), "--out", str(out)]) == 2
    line = _error_line(capsys)
    assert f"--out {out}: {tmp_path / 'report.txt'} is a file" in line


# ---------------------------------------------------------------------------- train


def test_train_output_dir_under_a_file_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path / "cache"))
    (tmp_path / "results.txt").write_text("x")
    out = tmp_path / "results.txt" / "run"
    assert main(["train", *FAST, "run.steps=1", f"run.output_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"{tmp_path / 'results.txt'} is a file, not a folder" in err.strip().splitlines()[-1]
