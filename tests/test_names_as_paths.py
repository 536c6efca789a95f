"""Names that become paths: one rule (:func:`vlcohort.run_folder.name_problem`) for every
name, and one helper (:func:`vlcohort.run_folder.child`) that builds every path from a name
and refuses one resolving outside its base. Agent names through the real ``vlcohort
train``; the helper directly; a link planted at a checkpoint's agent folder on resume."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.helpers.train import FAST
from vlcohort import run_folder
from vlcohort.cli import main
from vlcohort.training import checkpoint as ckpt


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


REFUSED = {
    "..": "is dots alone", ".": "is dots alone", "...": "is dots alone",
    "a/b": "holds a path separator", "../../etc": "holds a path separator",
    "a\\b": "holds a path separator", "a\x00b": "holds a control character",
    "a\tb": "holds a control character", "a\nb": "holds a control character",
    "": "is empty", "rng.pt": "is a file name a checkpoint uses itself",
    "state.json": "is a file name a checkpoint uses itself", "x" * 129: "is 129 characters long",
    "a b": "holds ' '",
}


@pytest.mark.parametrize("name", list(REFUSED), ids=[repr(n)[:12] for n in REFUSED])
def test_each_refused_agent_name_is_one_line_naming_the_key_and_the_fix(tmp_path, capsys, name):
    cfg = tmp_path / "cfg.yaml"  # JSON is YAML: a NUL or a newline travels as an escape
    cfg.write_text(json.dumps({"agents": [{"name": name, "path": "tiny:qwen2_5_vl"}]}))
    run = tmp_path / "run"
    assert main(["train", str(cfg), *[a for a in FAST if not a.startswith("agents=")],
                 "run.steps=1", f"run.output_dir={run}"]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"config error: agents.0.name: {name!r} {REFUSED[name]}")
    assert "use letters, digits, _ . -" in lines[0]
    assert not run.exists()


def test_inner_dots_and_dashes_are_still_a_name():
    for name in ("qwen2.5-3b", "A", "a_b.c-d", ".hidden-ok", "x" * run_folder.MAX_NAME):
        assert run_folder.name_problem(name) is None, name


def test_the_reserved_names_are_the_checkpoints_own_files():
    assert {ckpt.MANIFEST, "state.json", "rng.pt"} == set(run_folder.RESERVED_NAMES)


def test_child_refuses_a_name_or_a_link_that_escapes_its_base(tmp_path):
    base = tmp_path / "run" / "warmup"
    base.mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert run_folder.child(base, "A") == base / "A"  # missing is fine
    for name in ("..", ".", "../run", "/etc", "a\x00", ""):
        with pytest.raises(run_folder.RunFolderError, match=r"^agents\.\*\.name: .* folder"):
            run_folder.child(base, name, what="agents.*.name")
    (base / "out").symlink_to(outside, target_is_directory=True)
    (base / "up").symlink_to(base.parent, target_is_directory=True)
    (base / "self").symlink_to(base, target_is_directory=True)
    (base / "dangling").symlink_to(outside / "missing")
    for name in ("out", "up", "self", "dangling"):
        with pytest.raises(run_folder.RunFolderError, match="resolves to .*outside"):
            run_folder.child(base, name, what="agents.*.name")
    (base / "real").mkdir()
    (base / "inside").symlink_to(base / "real", target_is_directory=True)
    assert run_folder.child(base, "inside") == base / "inside"  # a link that stays inside


def test_a_warmup_folder_planted_as_a_link_out_is_refused_before_training(tmp_path, capsys):
    from vlcohort.training.warmup import warmed_up_folder

    run, outside = tmp_path / "run", tmp_path / "elsewhere"
    (run / "warmup").mkdir(parents=True)
    outside.mkdir()
    (run / "warmup" / "A").symlink_to(outside, target_is_directory=True)
    with pytest.raises(run_folder.RunFolderError, match=r"^agents\.\*\.name: .*outside"):
        warmed_up_folder(run, "A")
    shutil.rmtree(run / "warmup")
    (run / "warmup").symlink_to(outside, target_is_directory=True)
    with pytest.raises(run_folder.RunFolderError, match=r"^the warm-up folder: .*outside"):
        warmed_up_folder(run, "A")


def test_a_checkpoints_agent_folder_linked_out_of_the_run_is_not_resumed_from(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", *FAST, "run.steps=1", f"run.output_dir={run}"]) == 0
    step = run / "checkpoints" / "step-1"
    outside = tmp_path / "elsewhere"
    shutil.move(step / "A", outside)  # the weights now live outside the run, a link inside
    (step / "A").symlink_to(outside, target_is_directory=True)
    before = sorted(p.name for p in outside.iterdir())
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "run.steps=2"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "agents.*.name: " in err and "outside" in err and str(outside) in err
    assert sorted(p.name for p in outside.iterdir()) == before
