"""Run folders: what marks one as holding a run, starting over in one, and writing inside
one without ever following a symbolic link.

A run folder may come from someone else (a shared file system, a copied experiment), and
resuming writes into it: ``metrics.jsonl``, ``config.yaml``, ``checkpoints/latest`` and
their temporaries. A symbolic link planted under one of those names would make the run
overwrite the file it points at, wherever that is. So every write here creates its
temporary with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (after removing a stale one: ``unlink``
removes a link itself, never its target), renames it onto the final name (a rename
replaces a link, it does not write through it), appends only with ``O_NOFOLLOW``, and
every folder the run writes into (``checkpoints/``, ``plots/``) must be a real folder.
Third-party writers are not covered: TensorBoard's event files (``tensorboard/``) and
W&B's folder (``wandb/``) are written by those libraries.

Names that become paths (an agent's name: ``warmup/<agent>/``, a checkpoint's ``<agent>/``;
an arm's method: ``<run>/<method>/``) follow one rule, :func:`name_problem`, and every such
path is built by :func:`child`, which refuses a name that is not one plain folder name and
a result that resolves outside its base (a link planted there pointing out).

What ``--overwrite`` may delete: a new run writes :data:`MARKER` (``.vlcohort-run``) into
its folder before anything else, listing the top-level names of :data:`RUN_FILES` that
were absent then, which are the ones the run creates, and the arms (sub-runs, each with a
marker of its own) it registers. The marker is bound to the folder it was written in (its
inode), so a copied or hand-made marker does not count. ``--overwrite`` deletes exactly the
names a genuine marker lists and nothing else; a folder without one (a project folder that
happens to hold ``checkpoints/``, or a run written before runs were marked) is refused
whole, with nothing deleted.

This module imports nothing heavy, so the command line can use it before torch loads.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import re
import shutil
import stat
from pathlib import Path

from vlcohort.errors import RunError
from vlcohort.runlock import LOCK

#: What marks a folder as holding a run (a new run there would replace or mix them).
RUN_MARKS = ("config.yaml", "metrics.jsonl", "questions.jsonl", "checkpoints", "summary.json")

_WRITTEN = (*RUN_MARKS, "plots", "tensorboard", "wandb", "trackers.json", "comparison.png",
            "train.log", "discussions.jsonl")

#: Everything a run writes at a run folder's top level (and the temporaries of its files),
#: and nothing else: the names a run's :data:`MARKER` may claim, so the most that
#: ``vlcohort train --overwrite`` can remove (with the arms the marker registers).
#: ``warmup/`` is not among them: a cache each run checks by fingerprint, kept.
RUN_FILES = (*_WRITTEN, "config.yaml.tmp",
             *(f".{n}.tmp" for n in _WRITTEN if "." in n))

#: The file that marks a folder as a run vlcohort created, and what that run wrote there.
MARKER = ".vlcohort-run"

#: Names a name may not take wherever names become paths: the files beside the agents'
#: folders in a checkpoint (``step-N/state.json``, ``rng.pt``, ``manifest.json``).
RESERVED_NAMES = ("state.json", "rng.pt", "manifest.json")
MAX_NAME = 128
_NAME_CHARS = re.compile(r"[A-Za-z0-9_.-]+")

_WRITE_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class RunFolderError(RunError):
    """A run folder that cannot be used as asked (the message names the path and the way
    out; the command line exits 2)."""


def _planted(path: Path, what: str) -> RunFolderError:
    return RunFolderError(
        f"{path}: {what} inside the run folder, where a run writes only plain files and "
        "folders; a link there would make the run overwrite whatever it points at. Delete "
        "it (or use a run folder you trust)")


def real_dir(path: str | Path) -> Path:
    """``path`` as a folder, created when missing (with its missing parents, which are the
    user's choice of place, not the run's); a symbolic link (or a file) at ``path`` itself
    is refused rather than written through."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path)
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise _planted(path, "a symbolic link where a folder belongs")
    if not stat.S_ISDIR(st.st_mode):
        raise _planted(path, "not a folder")
    return path


def refuse_link(path: str | Path) -> Path:
    """``path`` itself, if it is not a symbolic link (missing is fine)."""
    path = Path(path)
    if path.is_symlink():
        raise _planted(path, "a symbolic link")
    return path


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``path`` atomically (a temporary beside it, renamed over it) without following
    a symbolic link at the temporary's name or the final one."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)  # a stale temporary, or a link planted there: the link goes
        fd = os.open(tmp, _WRITE_NEW, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise RunFolderError(f"{path}: cannot be written ({e.strerror or e}); it must be a "
                             "plain file (or missing) in a folder the run can write") from e
    return path


def write_text(path: str | Path, text: str) -> Path:
    """:func:`write_bytes` of UTF-8 text."""
    return write_bytes(path, text.encode("utf-8"))


def open_append(path: str | Path):
    """``path`` opened to append text, created when missing; a symbolic link, a FIFO or
    anything but a plain file there is refused."""
    path = Path(path)
    try:
        fd = os.open(path, _APPEND, 0o644)
    except OSError as e:
        what = "a symbolic link" if path.is_symlink() else f"not writable ({e.strerror})"
        raise _planted(path, what) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _planted(path, "not a plain file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a", encoding="utf-8")


# ------------------------------------------------------------------ names that become paths


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be one folder or file name inside a run folder, or None when it
    can: the one rule for every name that becomes a path (agent names, arm names). Refused:
    nothing (empty), dots alone (``.`` is the folder itself, ``..`` the one above), a path
    separator (``/``, ``\\``), NUL or any other control character, a name a checkpoint
    uses for its own files (:data:`RESERVED_NAMES`), more than :data:`MAX_NAME` characters,
    and any character but letters, digits, ``_ . -`` (names are metric keys too)."""
    if not isinstance(name, str):
        return f"is {type(name).__name__}, not text"
    if not name:
        return "is empty"
    if set(name) == {"."}:
        return "is dots alone ('.' is the folder itself, '..' the folder above)"
    if "/" in name or "\\" in name:
        return "holds a path separator ('/' or '\\')"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "holds a control character (NUL, tab, newline, ...)"
    if name in RESERVED_NAMES:
        return f"is a file name a checkpoint uses itself ({', '.join(RESERVED_NAMES)})"
    if len(name) > MAX_NAME:
        return f"is {len(name)} characters long (at most {MAX_NAME})"
    bad = next((c for c in name if not _NAME_CHARS.fullmatch(c)), None)
    if bad is not None:
        return f"holds {bad!r}"
    return None


#: How to name things, for messages.
NAME_FIX = "use letters, digits, _ . - (e.g. model-2.5b), not dots alone"


def child(base: str | Path, name: str, what: str = "name") -> Path:
    """``base / name``, the only way a path is built from a name (``what``: the config key
    that gave it, for the message). Refused with a :class:`RunFolderError` naming ``what``
    and the fix: a name :func:`name_problem` refuses, and a result that is not strictly
    inside ``base`` once links are resolved (a link planted at ``base / name`` pointing
    out of it). ``base`` itself is not checked here: callers refuse a link there."""
    problem = name_problem(name)
    if problem is not None:
        raise RunFolderError(f"{what}: {name!r} {problem}; it names a folder in the run "
                             f"folder: {NAME_FIX}")
    path = Path(base) / name
    real, inside = os.path.realpath(path), os.path.realpath(base)
    if real == inside or not real.startswith(inside.rstrip(os.sep) + os.sep):
        raise RunFolderError(f"{what}: {path} resolves to {real}, outside {inside} (a "
                             "symbolic link there); delete the link, or use a run folder "
                             "you trust")
    return path


# ------------------------------------------------------------------ starting a new run


def _is_run(folder: Path) -> bool:
    """A sub-folder that is itself a run (an arm of a comparison run)."""
    return (not folder.is_symlink() and folder.is_dir()
            and any((folder / m).exists() or (folder / m).is_symlink()
                    for m in ("metrics.jsonl", "checkpoints")))


def _there(path: Path) -> bool:
    return path.exists() or path.is_symlink()


def _same_file(a: Path, b: Path) -> bool:
    try:
        return not b.is_symlink() and os.path.samefile(a, b)
    except OSError:
        return False


def earlier_run(run_dir: str | Path, config_file: str | Path | None = None) -> list[str]:
    """The names in ``run_dir`` that hold an earlier run (empty: a new run may start
    there). Its ``config.yaml`` does not count when it is the very config file this run
    is started from (a comparison run starts each arm from the file it wrote there)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = []
    for name in RUN_MARKS:
        p = run_dir / name
        if not (p.exists() or p.is_symlink()):
            continue
        if name == "config.yaml" and config_file is not None and _same_file(Path(config_file), p):
            continue
        found.append(name)
    found += sorted(p.name + "/" for p in run_dir.iterdir() if _is_run(p))
    return found


def remove(path: Path) -> None:
    """Delete a file, a link (never what it points at) or a folder tree (``rmtree`` here
    opens each folder without following links, so a link inside is removed, not entered)."""
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path)


def file_in_the_way(folder: str | Path) -> Path | None:
    """The file that keeps ``folder`` from being a folder (``folder`` itself, or the
    nearest existing parent when that is a file), or None: checked before a command spends
    its time, so ``--out results.txt/x`` fails at once."""
    for p in (Path(folder), *Path(folder).parents):
        if p.exists():
            return None if p.is_dir() else p
    return None


def make_run_dir(run_dir: str | Path) -> Path:
    """``run_dir`` created (with its parents) as a folder, or a :class:`RunFolderError`
    naming the file in the way (``run.output_dir=results.txt/run``) or the cause."""
    run_dir = Path(run_dir)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        blocker = file_in_the_way(run_dir)
        why = (f"{blocker} is a file, not a folder" if blocker is not None
               else f"cannot be created ({e.strerror or e})")
        raise RunFolderError(f"run folder {run_dir}: {why}; give run.output_dir a folder "
                             "path the run can create") from None
    return run_dir


# ------------------------------------------------------------------ the run's own marker


class Cleared(list):
    """The names ``--overwrite`` removed (a list, as before), with ``left``: what it left
    in place because no run of ours wrote it (the user's files, shown to them)."""

    left: list[str]

    def __init__(self, removed=(), left=()):
        super().__init__(removed)
        self.left = list(left)


def _read_marker(run_dir: Path) -> tuple[dict | None, str]:
    """(``run_dir``'s genuine :data:`MARKER` as ``{"entries": [...], "runs": {name:
    made}}``, "") or (None, why it has none). Genuine: a plain file of vlcohort's format,
    written in this very folder (its inode; a copy or a hand-made marker is not), claiming
    only names of :data:`RUN_FILES` and sub-run names that pass :func:`name_problem`."""
    path = run_dir / MARKER
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, f"it holds no {MARKER}"
    except OSError as e:
        return None, f"its {MARKER} cannot be read ({e.strerror or e})"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, f"its {MARKER} is not a plain file"
        data = os.read(fd, (1 << 16) + 1)
    finally:
        os.close(fd)
    try:
        rec = json.loads(data)
    except ValueError:
        rec = None
    entries = rec.get("entries") if isinstance(rec, dict) else None
    runs = rec.get("runs", {}) if isinstance(rec, dict) else None
    if (len(data) > 1 << 16 or not isinstance(rec, dict) or rec.get("vlcohort_run") != 1
            or not isinstance(entries, list) or not isinstance(runs, dict)
            or not all(isinstance(e, str) and e in RUN_FILES for e in entries)
            or any(name_problem(n) or not isinstance(m, bool) for n, m in runs.items())):
        return None, f"its {MARKER} is not one vlcohort wrote"
    if rec.get("folder_inode") != os.lstat(run_dir).st_ino:
        return None, (f"its {MARKER} was written in another folder (a copied run or a "
                      "hand-made marker)")
    return {"entries": entries, "runs": runs}, ""


def mark_run(run_dir: str | Path) -> Path:
    """Write ``run_dir``'s :data:`MARKER` as a run starts there, before it writes anything:
    it claims the names of :data:`RUN_FILES` absent now (the run creates them; a name
    already there is someone else's and stays theirs), keeping what a genuine marker there
    claimed before (a comparison's arm, marked by its parent, then started as a run)."""
    run_dir = Path(run_dir)
    old, _ = _read_marker(run_dir)
    entries = {n for n in RUN_FILES if not _there(run_dir / n)}
    runs: dict[str, bool] = {}
    if old is not None:
        entries |= set(old["entries"])
        runs = {n: made for n, made in old["runs"].items() if _there(run_dir / n)}
    return _write_marker(run_dir, entries, runs)


def _write_marker(run_dir: Path, entries, runs: dict[str, bool]) -> Path:
    return write_text(run_dir / MARKER, json.dumps({
        "vlcohort_run": 1, "folder_inode": os.lstat(run_dir).st_ino,
        "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "entries": sorted(entries), "runs": runs}, indent=1) + "\n")


def new_sub_run(parent: str | Path, name: str, what: str = "arms") -> Path:
    """``parent / name`` made ready for a sub-run (an arm of a comparison run): the name
    checked (:func:`child`), a folder holding an earlier run there refused, the sub-run
    registered in the parent's marker (with whether this run creates its folder) and the
    folder created and marked, so that ``--overwrite`` of the parent clears it too."""
    parent = Path(parent)
    path = child(parent, name, what)
    found = earlier_run(path) if path.is_dir() and not path.is_symlink() else []
    rec, _ = _read_marker(parent)
    if found and not (rec is not None and name in rec["runs"] and _read_marker(path)[0]):
        raise RunFolderError(f"{path}: holds an earlier run ({', '.join(found[:5])}) that "
                             f"this run did not start; {what} {name!r} would mix with it. "
                             "Move it or delete it by hand, or give another run.output_dir")
    if rec is not None and name not in rec["runs"]:
        rec["runs"][name] = not _there(path)
        _write_marker(parent, rec["entries"], rec["runs"])
    real_dir(path)
    mark_run(path)
    return path


def _unmarked(run_dir: Path, found: list[str], why: str) -> RunFolderError:
    return RunFolderError(
        f"{run_dir}: --overwrite deletes only a run vlcohort marked as its own, and {why}; "
        f"it holds {_shown(found)} (a folder of yours, or a run written before runs were "
        "marked), so nothing was deleted. Look at it and delete it by hand, or give another "
        "run.output_dir")


def _shown(names: list[str]) -> str:
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _remove_claimed(path: Path, label: str, removed: list[str]) -> None:
    folder = path.is_dir() and not path.is_symlink()
    try:
        remove(path)
    except OSError as e:
        raise RunFolderError(f"--overwrite: {path} cannot be removed ({e.strerror or e}); "
                             "remove it by hand or choose another run.output_dir") from e
    removed.append(label + "/" if folder else label)


def clear_run(run_dir: str | Path, prefix: str = "") -> Cleared:
    """Remove what the run marked in ``run_dir`` wrote: the names its :data:`MARKER`
    claims, and in each registered sub-run (an arm) what that one's marker claims, the
    arm's folder too when the run created it and nothing else is left in it. Nothing else
    is touched: ``warmup/``, the user's files, a name that was there before the run.
    Without a genuine marker nothing is removed (:class:`RunFolderError`)."""
    run_dir = Path(run_dir)
    rec, why = _read_marker(run_dir)
    if rec is None:
        raise _unmarked(run_dir, earlier_run(run_dir) or ["no run files"], why)
    removed: list[str] = []
    left: list[str] = []
    done = {MARKER, LOCK, "warmup"}  # the run's bookkeeping, and the warm-up cache it keeps
    for name in rec["entries"]:
        if _there(run_dir / name):
            _remove_claimed(run_dir / name, prefix + name, removed)
            done.add(name)
    for name, made in rec["runs"].items():
        sub = run_dir / name
        if sub.is_symlink():  # a link planted at an arm's name: the link goes if it was ours
            if made:
                _remove_claimed(sub, prefix + name, removed)
                done.add(name)
            continue
        if not sub.is_dir() or _read_marker(sub)[0] is None:
            continue  # left in place, and said so below
        inner = clear_run(sub, prefix + name + "/")
        done.add(name)
        if made and set(os.listdir(sub)) <= {MARKER, LOCK}:
            _remove_claimed(sub, prefix + name, removed)
        else:
            removed += inner
            left += inner.left
    left += sorted(prefix + p.name + ("/" if p.is_dir() and not p.is_symlink() else "")
                   for p in run_dir.iterdir() if p.name not in done)
    return Cleared(removed, left)


def ready_for_new_run(run_dir: str | Path, overwrite: bool,
                      config_file: str | Path | None = None) -> Cleared:
    """Check (and with ``overwrite``, clear) ``run_dir`` before a new run starts there,
    then mark it as this run's (:func:`mark_run`). A folder holding an earlier run is
    refused, naming the ways out; ``overwrite`` removes only what a run vlcohort marked
    wrote there (:func:`clear_run`) and refuses a folder without such a marker whole. Call
    it holding the folder's lock, so that no run starts there between the check and the
    run. Returns the names removed (``.left``: what was left in place)."""
    run_dir = Path(run_dir)
    found = earlier_run(run_dir, config_file)
    cleared = Cleared()
    if found:
        rec, why = _read_marker(run_dir)
        if not overwrite:
            arms = [name.rstrip("/") for name in found if name.endswith("/")]
            resume = (f"`vlcohort train --resume {run_dir / arms[0]}` (one arm of this "
                      "comparison run)" if arms else f"`vlcohort train --resume {run_dir}`")
            over = ("start over with `--overwrite` (deletes that run's files)" if rec is not None
                    else f"delete it by hand to start over (`--overwrite` will not: {why})")
            raise RunFolderError(
                f"{run_dir}: holds an earlier run ({_shown(found)}); a new run there would "
                f"replace its config and metrics and mix the checkpoints of two runs. "
                f"Continue it with {resume}, {over}, or give another run.output_dir")
        if rec is None:
            raise _unmarked(run_dir, found, why)
        cleared = clear_run(run_dir)
        still = [n for n in earlier_run(run_dir, config_file)
                 if not n.endswith("/") or n.rstrip("/") in rec["runs"]]
        if still:
            raise RunFolderError(
                f"{run_dir}: --overwrite removed the earlier run's files, but {_shown(still)} "
                "remain, which that run did not mark as its own; move or delete them by "
                "hand, or give another run.output_dir")
    mark_run(run_dir)
    return cleared
