"""One live run per folder: ``<run>/.vlcohort.lock`` holds the pid of the run writing there.

Two runs writing one folder would interleave ``metrics.jsonl`` lines, overwrite each
other's ``config.yaml`` and race on ``checkpoints/latest``; the second is refused before it
writes anything. A lock whose process is gone (a SIGKILL, a crash) is stale and taken
over, as is one this process left (a run that raised in this process), so a killed run
resumes without anyone deleting files by hand.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from pathlib import Path

from vlcohort.errors import RunError

LOCK = ".vlcohort.lock"


class RunLockError(RunError):
    """The run folder is held by another live run."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def holder(run_dir: str | Path) -> dict | None:
    """The live run holding ``run_dir`` (its lock record), or None when free or stale."""
    path = Path(run_dir) / LOCK
    try:
        rec = json.loads(path.read_text())
        pid = int(rec["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if rec.get("host") != socket.gethostname() or pid == os.getpid() or not _alive(pid):
        return None if rec.get("host") == socket.gethostname() else rec
    return rec


def acquire(run_dir: str | Path) -> Path:
    """Take the folder's lock, or raise naming the live run that holds it."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    live = holder(run_dir)
    if live is not None:
        raise RunLockError(
            f"{run_dir}: another run is writing to this folder (pid {live.get('pid')} on "
            f"{live.get('host')}, lock file {run_dir / LOCK}). Wait for it to finish, stop it, "
            "or give this run its own folder (run.output_dir=...); if that process is really "
            "gone, delete the lock file")
    tmp = run_dir / f"{LOCK}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname()}))
    os.replace(tmp, run_dir / LOCK)
    return run_dir / LOCK


def release(run_dir: str | Path) -> None:
    """Drop the lock if this process holds it (never another run's)."""
    path = Path(run_dir) / LOCK
    try:
        if int(json.loads(path.read_text())["pid"]) == os.getpid():
            path.unlink()
    except (OSError, ValueError, KeyError, TypeError):
        pass


@contextlib.contextmanager
def released_on_error(run_dir: str | Path):
    """A run's setup: if it raises (a refused resume, a model that does not load), the lock
    it took is dropped at once. Otherwise :func:`~vlcohort.recipes.driver.drive` drops it
    at the end; without this, a failed setup in a process that lives on (a notebook, a
    test) kept the folder locked against every other process."""
    try:
        yield
    except BaseException:
        release(run_dir)
        raise
