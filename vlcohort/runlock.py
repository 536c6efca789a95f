"""One live run per folder: an ``flock`` on ``<run>/.vlcohort.lock``, held for the run's life.

Two runs writing one folder would interleave ``metrics.jsonl`` lines, overwrite each
other's ``config.yaml`` and race on ``checkpoints/latest``; the second is refused before it
writes anything. The lock is the kernel's (``fcntl.flock`` on an open file), not the file's
existence or its contents: taking it is atomic, so of any number of runs started at the
same moment exactly one wins, and it dies with its process (a SIGKILL, a crash), so a
killed run resumes without anyone deleting files by hand. The file holds the holder's pid
and host only so that a refusal can name the live run.

A process that already holds a folder's lock takes it again without waiting (a run that
raised in a notebook or a test and is started again in the same process): ``flock`` locks
belong to an open file, and this module keeps that file open until :func:`release`.
``flock`` is local to one machine on most network file systems; a run folder shared by
two machines is not protected.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from pathlib import Path

from vlcohort.errors import RunError

LOCK = ".vlcohort.lock"

#: run folder (resolved) -> the open lock file this process holds it with
_HELD: dict[Path, int] = {}


class RunLockError(RunError):
    """The run folder is held by another live run."""


def _key(run_dir: Path) -> Path:
    return Path(os.path.realpath(run_dir))


def _read_holder(path: Path) -> dict:
    """The lock file's record (pid, host), or {} while its winner has not written it yet."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return {}
    try:
        rec = json.loads(os.read(fd, 4096) or b"{}")
        return rec if isinstance(rec, dict) else {}
    except ValueError:
        return {}
    finally:
        os.close(fd)


def holder(run_dir: str | Path) -> dict | None:
    """The live run holding ``run_dir`` (its lock record), or None when free or held by
    this process."""
    run_dir = Path(run_dir)
    if _key(run_dir) in _HELD:
        return None
    path = run_dir / LOCK
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_holder(path)
    finally:
        os.close(fd)
    return None


def _refusal(run_dir: Path) -> RunLockError:
    live = _read_holder(run_dir / LOCK)
    who = (f"pid {live.get('pid')} on {live.get('host')}" if live.get("pid") is not None
           else "a run starting this very moment")
    return RunLockError(
        f"{run_dir}: another run is writing to this folder ({who}, lock file "
        f"{run_dir / LOCK}). Wait for it to finish, stop it, or give this run its own folder "
        "(run.output_dir=...)")


def _open_lock_file(path: Path) -> int:
    """The lock file, created if missing, never through a symlink planted in its place."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                       | os.O_CLOEXEC, 0o644)
    except OSError as e:
        raise RunLockError(f"{path}: cannot open the run's lock file ({e.strerror}); it must "
                           "be a plain file the run can write (a symbolic link is refused): "
                           "delete it, or give this run another folder") from None


def acquire(run_dir: str | Path) -> Path:
    """Take the folder's lock (atomically), or raise naming the live run that holds it."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    key, path = _key(run_dir), run_dir / LOCK
    if key in _HELD:
        return path
    while True:
        fd = _open_lock_file(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise _refusal(run_dir) from None
        # the holder before us may have unlinked the file between our open and our lock:
        # then we hold a lock on a file nobody else can see; take the one on the path
        try:
            same = os.fstat(fd).st_ino == os.lstat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode(), 0)
    _HELD[key] = fd
    return path


def release(run_dir: str | Path) -> None:
    """Drop the lock if this process holds it (never another run's); the file goes with it
    (unlinked while still locked, so no one can take a lock on a file about to vanish)."""
    fd = _HELD.pop(_key(Path(run_dir)), None)
    if fd is None:
        return
    path = Path(run_dir) / LOCK
    with contextlib.suppress(OSError):
        if os.lstat(path).st_ino == os.fstat(fd).st_ino:
            os.unlink(path)
    os.close(fd)


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
