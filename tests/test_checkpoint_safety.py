"""Resume is safe: no pickle runs code, damaged checkpoints are passed over with a warning,
and what killed saves leave behind is cleaned up (real runs of the trainer, tiny models)."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
import torch

from tests.helpers.train import FAST
from vlcohort.cli import main
from vlcohort.training import checkpoint as ckpt


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


class _Planted:
    """A pickle that would create ``marker`` when unpickled by a trusting loader."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


@pytest.fixture
def run2(tmp_path):
    """A finished 2-step run with a checkpoint after each step."""
    run = tmp_path / "run"
    assert main(["train", *FAST, "run.steps=2", "checkpoint.every=1",
                 f"run.output_dir={run}"]) == 0
    assert (run / "checkpoints/step-1/state.json").is_file()
    assert (run / "checkpoints/step-2/manifest.json").is_file()
    return run


def test_rng_state_round_trips_through_a_weights_only_load(tmp_path):
    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    torch.save(ckpt.rng_state(), tmp_path / "rng.pt")
    want = (random.random(), np.random.rand(), torch.rand(1).item())
    ckpt.set_rng_state(ckpt.load_rng(tmp_path))
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == want


def test_a_planted_pickle_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "pwned"
    torch.save(_Planted(marker), tmp_path / "rng.pt")
    with pytest.raises(ckpt.CheckpointError, match=r"rng\.pt: refused to load") as e:
        ckpt.load_rng(tmp_path)
    assert "do not trust" in str(e.value)
    assert not marker.exists()
    # the loader that resume used before this change would have run it
    torch.load(tmp_path / "rng.pt", weights_only=False)
    assert marker.exists()


def test_resume_refuses_a_planted_pickle_in_its_only_checkpoint(run2, capsys):
    marker = run2 / "pwned"
    root = run2 / "checkpoints"
    import shutil

    shutil.rmtree(root / "step-1")
    (root / "step-2/manifest.json").unlink()  # an older checkpoint: no sizes to compare
    torch.save(_Planted(marker), root / "step-2/A/trainer_state.pt")
    assert main(["train", "--resume", str(run2), "run.steps=3"]) != 0
    err = capsys.readouterr().err
    assert "trainer_state.pt: refused to load" in err
    assert not marker.exists()


def test_resume_passes_over_a_tampered_checkpoint_to_the_previous_one(run2, capsys):
    marker = run2 / "pwned"
    torch.save(_Planted(marker), run2 / "checkpoints/step-2/rng.pt")  # size changes
    assert main(["train", "--resume", str(run2), "run.steps=3"]) == 0
    err = capsys.readouterr().err
    assert "resuming from step-1" in err and "step-2/rng.pt" in err
    assert not marker.exists()
    assert json.loads((run2 / "checkpoints/step-3/state.json").read_text())["step"] == 3


def test_truncated_weights_are_detected_named_and_passed_over(run2, capsys):
    weights = run2 / "checkpoints/step-2/A/model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    problems = ckpt.verify_checkpoint(run2 / "checkpoints/step-2")
    assert problems and all("model.safetensors" in p for p in problems)
    assert ckpt.verify_checkpoint(run2 / "checkpoints/step-1") == []
    assert main(["train", "--resume", str(run2), "run.steps=3"]) == 0
    err = capsys.readouterr().err
    assert "resuming from step-1" in err and str(weights) in err


def test_safetensors_check_without_a_manifest(run2):
    folder = run2 / "checkpoints/step-2"
    (folder / "manifest.json").unlink()
    assert ckpt.verify_checkpoint(folder) == []
    weights = folder / "A/model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    [problem] = ckpt.verify_checkpoint(folder)
    assert str(weights) in problem and "truncated" in problem


def test_no_intact_checkpoint_left_is_a_clear_error(run2, capsys):
    for step in (1, 2):
        w = run2 / f"checkpoints/step-{step}/A/model.safetensors"
        w.write_bytes(b"\x00" * 16)
    assert main(["train", "--resume", str(run2), "run.steps=3"]) == 1
    err = capsys.readouterr().err
    assert "no complete checkpoint" in err and "damaged" in err and "model.safetensors" in err


def test_stale_temporary_folders_are_removed_at_resume_and_at_save(run2):
    root = run2 / "checkpoints"
    for name in (".step-7-abcd", ".step-2-zz"):
        (root / name / "A").mkdir(parents=True)
        (root / name / "A" / "model.safetensors").write_bytes(b"partial")
    removed = ckpt.remove_stale_temporaries(root)
    assert sorted(p.name for p in removed) == [".step-2-zz", ".step-7-abcd"]
    (root / ".step-5-left").mkdir()
    assert main(["train", "--resume", str(run2), "run.steps=3"]) == 0
    assert not list(root.glob(".step-*"))
    assert (root / "step-2/state.json").is_file() and (root / "step-3/state.json").is_file()


def test_resume_refuses_changes_it_cannot_continue_and_lists_the_others(run2, capsys):
    assert main(["train", "--resume", str(run2), "run.steps=3",
                 "agents=[{name: A, path: 'tiny:gemma3'}]", "run.seed=5"]) == 2
    err = capsys.readouterr().err
    assert "agents.0.path ('tiny:qwen2_5_vl' -> 'tiny:gemma3')" in err and "run.seed" in err
    assert "Start a new run" in err
    assert not (run2 / "checkpoints/step-3").exists()
    assert main(["train", "--resume", str(run2), "run.steps=3", "optim.lr=0.0005"]) == 0
    err = capsys.readouterr().err
    assert "resume: run.steps: 2 -> 3 (harmless)" in err
    assert "resume: optim.lr: 0.001 -> 0.0005 (the run no longer equals a straight run)" in err


def test_a_folder_held_by_a_live_run_is_refused(tmp_path, capsys):
    import subprocess
    import sys

    from vlcohort import runlock

    run = tmp_path / "run"
    live = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from vlcohort import runlock; "
         "runlock.acquire(sys.argv[1]); print('held', flush=True); time.sleep(120)", str(run)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout.readline().strip() == "held"
        assert main(["train", *FAST, "run.steps=1", f"run.output_dir={run}"]) == 1
        err = capsys.readouterr().err
        assert f"pid {live.pid}" in err and "another run is writing" in err
        assert not (run / "config.yaml").exists() and not (run / "metrics.jsonl").exists()
    finally:
        live.kill()
        live.wait()
    # the holder is gone, and its lock with it (the kernel's); a finished run leaves no file
    assert main(["train", *FAST, "run.steps=1", f"run.output_dir={run}"]) == 0
    assert not (run / runlock.LOCK).exists()
