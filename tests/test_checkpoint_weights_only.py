"""``checkpoint.optimizer=false``: a real one-step run writes a weights-only checkpoint
(no optimizer state, marked in state.json), about a third of the full one's size as
docs/training.md's "Checkpoint size" says; it exports, and ``--resume`` refuses it in one
line naming the folder and the way on."""

from __future__ import annotations

import errno
import json

import pytest
import torch
from safetensors import safe_open

from tests.helpers.train import FAST
from vlcohort.cli import main
from vlcohort.monitoring.metrics import read_metrics
from vlcohort.training import checkpoint as ckpt

# INTUITOR's continuous reward gives every group a spread, so agent A updates at step 1 and
# AdamW's moments exist (torch creates them at the first optimizer step).
RUN = [*FAST, "method=intuitor", "rollout.rollouts_per_prompt=4", "rollout.max_new_tokens=8",
       "run.steps=1"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same one-step run saved with and without optimizer state: {True: dir, False: dir}."""
    base = tmp_path_factory.mktemp("weights-only")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))
        for keep in (True, False):
            folder = base / f"optimizer-{keep}"
            assert main(["train", *RUN, f"checkpoint.optimizer={str(keep).lower()}",
                         f"run.output_dir={folder}"]) == 0
            assert read_metrics(folder / "metrics.jsonl")[-1].get("agent/A/loss") is not None
            out[keep] = folder
        yield out


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def _bytes(folder) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _tensor_bytes(path) -> int:
    with safe_open(str(path), "pt") as f:
        return sum(f.get_tensor(k).numel() * f.get_tensor(k).element_size() for k in f.keys())


def test_sizes_follow_the_documented_formula(runs):
    full, lean = (runs[k] / "checkpoints/step-1" for k in (True, False))
    assert json.loads((full / "state.json").read_text())["optimizer_state"] is True
    assert json.loads((lean / "state.json").read_text())["optimizer_state"] is False
    assert ckpt.has_optimizer_state(full) and not ckpt.has_optimizer_state(lean)
    assert not (lean / "A" / ckpt.TRAINER_STATE).exists()
    assert not ckpt.verify_checkpoint(lean)  # its manifest matches what was written

    weights = _tensor_bytes(full / "A/model.safetensors")  # N x d, float32 here
    assert _tensor_bytes(lean / "A/model.safetensors") == weights
    moments = ckpt.load_trainer_state(full, "A")["optimizer"]["state"].values()
    adam = sum(v.numel() * v.element_size() for s in moments for k, v in s.items()
               if k in ("exp_avg", "exp_avg_sq") and isinstance(v, torch.Tensor))
    assert adam == 2 * weights  # every weight trained: two moments each, in its dtype
    a_full, a_lean = _bytes(full / "A"), _bytes(lean / "A")
    assert a_full - a_lean >= 2 * weights  # trainer_state.pt: the moments and a little more
    assert 2.8 < a_full / a_lean < 3.2, (a_full, a_lean)  # about 3 x N x d against N x d


def test_a_weights_only_checkpoint_exports(runs, tmp_path):
    from transformers import AutoModelForImageTextToText

    out = tmp_path / "A"
    assert main(["export", str(runs[False]), "--agent", "A", "--out", str(out)]) == 0
    model = AutoModelForImageTextToText.from_pretrained(out)
    with safe_open(str(runs[False] / "checkpoints/step-1/A/model.safetensors"), "pt") as f:
        saved = {k: f.get_tensor(k) for k in f.keys()}
    state = model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in saved.items() if k in state)


def test_resume_refuses_a_weights_only_checkpoint_in_one_line(runs, capsys):
    run = runs[False]
    capsys.readouterr()
    assert main(["train", "--resume", str(run), "run.steps=2"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    line = err[-1]
    assert line.startswith(f"error: {run / 'checkpoints/step-1'}: a weights-only checkpoint"), err
    assert "checkpoint.optimizer=true" in line and "vlcohort export" in line
    assert "agents.N.path=" in line
    assert not (run / "checkpoints/step-2").exists()
    # the full run resumes (the refusal is about the missing state, not the option)
    assert main(["train", "--resume", str(runs[True]), "run.steps=2"]) == 0
    assert (runs[True] / "checkpoints/step-2").is_dir()


def test_a_full_disk_in_a_weights_only_save_points_to_a_new_run(tmp_path):
    """The full-disk stop of a weights-only run does not send the user to ``--resume``."""
    root = tmp_path / "checkpoints"
    root.mkdir()
    for resumable in (True, False):
        with pytest.raises(ckpt.CheckpointError) as e:
            with ckpt.out_of_space_stops_the_run(root, 3, lambda: 10, resumable=resumable):
                raise OSError(errno.ENOSPC, "No space left on device")
        assert ("--resume" in str(e.value)) == resumable, e.value
        assert ("agents.N.path=" in str(e.value)) != resumable, e.value
