"""A save that runs out of disk (ENOSPC) on a real small filesystem: the previous checkpoint
stays intact, the partial folder is removed, and the run stops with a message saying how
much space a checkpoint needs.

The filesystem is a size-limited tmpfs mounted in a private mount namespace
(``unshare --user --map-root-user --mount``), so nothing is mounted on the host and the
write fails in the kernel, not in a mock. After the run, the same shell copies the run
folder out of the namespace (the tmpfs goes with it) for the assertions.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.train import FAST
from vlcohort.cli import main
from vlcohort.training import checkpoint as ckpt


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def _can_mount_tmpfs(where: Path) -> str | None:
    """Why a private tmpfs cannot be mounted here (None: it can)."""
    if shutil.which("unshare") is None:
        return "util-linux unshare is not installed"
    where.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                        f"mount -t tmpfs -o size=1m none '{where}'"],
                       capture_output=True, text=True)
    return None if r.returncode == 0 else f"cannot mount a tmpfs in a user namespace: {r.stderr}"


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def test_a_full_disk_during_a_save_keeps_the_previous_checkpoint(tmp_path):
    mnt, out = tmp_path / "small-disk", tmp_path / "copied-out"
    if (why := _can_mount_tmpfs(mnt)) is not None:
        pytest.skip(why)
    # one checkpoint's real size, from the same run on the ordinary disk
    probe = tmp_path / "probe"
    args = [*FAST, "checkpoint.every=1", "checkpoint.keep_last=2"]
    assert main(["train", *args, "run.steps=1", f"run.output_dir={probe}"]) == 0
    one = _folder_bytes(probe / "checkpoints/step-1")
    rest = _folder_bytes(probe) - _folder_bytes(probe / "checkpoints")
    # room for the run's other files and one checkpoint, but not a second one beside it
    size_kb = (rest + one + one // 2) // 1024 + 64
    run = mnt / "run"
    train = " ".join(f"'{a}'" for a in [sys.executable, "-m", "vlcohort", "train", *args,
                                        "run.steps=3", f"run.output_dir={run}"])
    script = (f"mount -t tmpfs -o size={size_kb}k none '{mnt}' || exit 99\n"
              f"{train} 2> '{tmp_path}/stderr'; echo $? > '{tmp_path}/rc'\n"
              f"df -k '{mnt}' > '{tmp_path}/df'\n"
              f"cp -a '{run}' '{out}'\n")
    r = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
                       env={**os.environ, "PYTHONUNBUFFERED": "1"}, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    err = (tmp_path / "stderr").read_text()
    assert (tmp_path / "rc").read_text().strip() == "1", err  # a run error (RunError): exit 1
    assert "Traceback" not in err, err
    assert "no space left on the device" in err and "while saving step-2" in err, err
    assert "a checkpoint of this run needs about" in err and "is free" in err, err
    assert "the previous checkpoint, step-1, is intact" in err, err
    assert f"vlcohort train --resume {run}" in err, err

    root = out / "checkpoints"
    assert (root / ckpt.LATEST).read_text().strip() == "step-1"
    assert ckpt.verify_checkpoint(root / "step-1") == []
    assert json.loads((root / "step-1/state.json").read_text())["step"] == 1
    left = sorted(p.name for p in root.iterdir())
    assert left == ["latest", "step-1"], f"a partial folder was left behind: {left}"


def test_out_of_space_is_recognised_in_the_forms_the_writers_raise(tmp_path):
    """OSError ENOSPC (python), safetensors' message ("os error 28"), torch.save's
    ("file write failed", no errno: then the free space decides), and not other errors."""
    import errno

    plenty = 1
    assert ckpt.is_out_of_space(OSError(errno.ENOSPC, "No space left on device"), tmp_path, plenty)
    assert ckpt.is_out_of_space(RuntimeError("Error while serializing: IoError(Os { code: 28, "
                                             "kind: StorageFull, message: \"No space left on "
                                             "device\" })"), tmp_path, plenty)
    wrapped = RuntimeError("saving failed")
    wrapped.__cause__ = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert ckpt.is_out_of_space(wrapped, tmp_path, plenty)
    huge = shutil.disk_usage(tmp_path).free * 4
    assert ckpt.is_out_of_space(RuntimeError("unrelated"), tmp_path, huge)  # no room anyway
    assert not ckpt.is_out_of_space(RuntimeError("unrelated"), tmp_path, plenty)
    assert not ckpt.is_out_of_space(PermissionError(errno.EACCES, "denied"), tmp_path, plenty)
