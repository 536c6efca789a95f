"""Checkpoints: everything needed to continue a run exactly, written atomically.

Layout of one checkpoint::

    <run>/checkpoints/step-<n>/
        <agent>/                 save_pretrained: config + safetensors (+ processor files),
                                 loadable by transformers as-is
        <agent>/trainer_state.pt optimizer and LR-scheduler state of that agent
        state.json               step, data position, trainer counters
        rng.pt                   torch / python / numpy RNG states
        <agent>/zero/            agent groups only: DeepSpeed's own checkpoint of the
                                 ZeRO-partitioned optimizer state (one file per rank)
        <agent>/ema_teacher.safetensors   a reward source's state (reward_sources.AgentState),
                                 here Co-rewarding-II's: the EMA teacher's float32
                                 weights (agent groups: ema_teacher-rank<r>.safetensors, the
                                 EMA of what rank r holds)
    <run>/checkpoints/latest     the name of the newest complete checkpoint

``checkpoint.optimizer=false`` writes weights-only checkpoints: each agent's
``save_pretrained`` folder without ``trainer_state.pt``, ``zero/`` or the EMA teacher
(state that only a resume reads), and ``"optimizer_state": false`` in ``state.json``.
Such a checkpoint exports (``vlcohort export``) and loads with ``from_pretrained``; a
resume refuses it (:func:`require_optimizer_state`). Sizes: docs/training.md,
"Checkpoint size".

In an agent-group launch each group's leader writes its agent's folder (ZeRO-3 weights are
gathered first), every rank writes its ZeRO partition, and rank 0 writes the rest and
renames. Resuming needs the same launch mode; within agent groups, ZeRO stage 0 resumes
with any ``ranks_per_agent`` (the optimizer state is whole), stages 1-3 with the same one
(the state is partitioned per rank). The weights load anywhere with ``from_pretrained``.

A checkpoint is built in a hidden temporary folder and renamed into place only when
complete; ``latest`` is replaced atomically after that. A crash mid-save leaves the
previous checkpoint intact and no half-written one visible; the hidden folder it leaves
is removed at the next save or resume (:func:`remove_stale_temporaries`).

Nothing in a run folder is followed out of it: ``checkpoints/`` must be a real folder,
``latest`` a plain file naming a ``step-N`` folder inside it (a path, an absolute name or
a symbolic link is refused), a ``step-N`` that is a link is not a checkpoint, and
``latest`` is written without following a link planted at its name or its temporary's
(``vlcohort/run_folder.py``).

Resuming never runs code from a checkpoint: ``trainer_state.pt`` and ``rng.pt`` load with
``torch.load(weights_only=True)`` (tensors and plain containers; numpy's RNG state is
stored as a tensor), so a planted pickle is refused. ``manifest.json`` lists every file's
size at save; :func:`verify_checkpoint` checks it and each safetensors header, and
:func:`resumable_checkpoint` falls back to the newest checkpoint that passes.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vlcohort import bounded_json, run_folder
from vlcohort.errors import RunError

CHECKPOINTS = "checkpoints"
LATEST = "latest"
ZERO = "zero"


class CheckpointError(RunError):
    """A checkpoint that cannot be loaded in this launch (the message says why and what to do)."""


MANIFEST = "manifest.json"
TRAINER_STATE = "trainer_state.pt"
#: ``state.json`` key: False in a weights-only checkpoint (absent in older ones: True).
OPTIMIZER_STATE = "optimizer_state"
_TMP_PREFIX = ".step-"
_STEP_NAME = re.compile(r"step-[0-9]+")


def rng_state() -> dict[str, Any]:
    """torch / python / numpy RNG states as tensors and plain containers only (what
    ``torch.load(weights_only=True)`` accepts): numpy's key array becomes an int64 tensor."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": [str(kind), torch.from_numpy(keys.astype(np.int64)), int(pos),
                      int(has_gauss), float(cached)]}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]) if isinstance(py, list) else py)
    nps = state["numpy"]
    if isinstance(nps, (list, tuple)) and isinstance(nps[1], torch.Tensor):
        nps = (nps[0], nps[1].numpy().astype(np.uint32), nps[2], nps[3], nps[4])
    np.random.set_state(nps)


def _load_data(path: Path) -> Any:
    """A checkpoint's ``.pt`` file, as data only: ``weights_only=True`` refuses any object
    whose unpickling would run code (a planted ``__reduce__``). numpy arrays of older
    checkpoints' RNG state are allowed by name (numpy's array reconstructors only)."""
    safe = [np.ndarray, np.dtype, type(np.dtype(np.uint32))]
    try:
        safe.append(np._core.multiarray._reconstruct)  # numpy 2
    except AttributeError:  # pragma: no cover - numpy 1
        safe.append(np.core.multiarray._reconstruct)
    try:
        with torch.serialization.safe_globals(safe):
            return torch.load(path, weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing from the checkpoint; resume from another "
                              "checkpoint (delete this one) or start a new run") from None
    except Exception as e:  # UnpicklingError, RuntimeError (truncated zip)
        raise CheckpointError(
            f"{path}: refused to load ({type(e).__name__}: {str(e).splitlines()[0][:300]}). "
            "A checkpoint's state files hold only tensors and plain data; this one holds "
            "something else (a pickle that would run code, or a damaged file). Do not resume "
            "from a run folder you do not trust; delete this checkpoint to resume from the "
            "previous one") from e


def agent_folder(folder: str | Path, name: str) -> Path:
    """``<checkpoint>/<agent>``: the one way a checkpoint's path is built from an agent's
    name (:func:`vlcohort.run_folder.child`: a name that is not one plain folder name, or
    one of the checkpoint's own files, or a link there resolving out of it, is refused)."""
    return run_folder.child(folder, name, what="agents.*.name")


def checkpoints_root(run_dir: str | Path) -> Path:
    """``<run>/checkpoints``, created when missing; a link there is refused."""
    return run_folder.real_dir(Path(run_dir) / CHECKPOINTS)


def _replace_folder(tmp: Path, final: Path) -> None:
    """Rename the finished ``tmp`` onto ``final``; whatever was there goes first (a
    folder of the same step saved again, or a link planted there: the link only)."""
    if final.exists() or final.is_symlink():
        run_folder.remove(final)
    os.replace(tmp, final)


def remove_stale_temporaries(root: Path) -> list[Path]:
    """Remove the hidden ``.step-N-xxxx`` folders that saves killed mid-way left behind
    (never a complete checkpoint: those are ``step-N``); returns what was removed."""
    removed = []
    if Path(root).is_dir() and not Path(root).is_symlink():
        for p in Path(root).glob(_TMP_PREFIX + "*"):
            if p.is_symlink() or p.is_dir():
                with contextlib.suppress(OSError):
                    run_folder.remove(p)
                removed.append(p)
    return removed


def write_manifest(folder: Path) -> None:
    """``manifest.json``: every file's size, so a truncated file is caught on resume."""
    files = {str(p.relative_to(folder)): p.stat().st_size
             for p in sorted(folder.rglob("*")) if p.is_file() and p.name != MANIFEST}
    (folder / MANIFEST).write_text(json.dumps({"files": files}, indent=0))


def _safetensors_problem(path: Path) -> str | None:
    """Why a safetensors file is unreadable (header length, JSON, data size), or None."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            if n <= 0 or 8 + n > size:
                return f"{path}: safetensors header length {n} does not fit a {size}-byte file"
            header = bounded_json.loads(f.read(n), max_chars=n)
        ends = [int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"]
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
        return f"{path}: unreadable safetensors header ({str(e)[:200]})"
    if 8 + n + max(ends, default=0) != size:
        return (f"{path}: {size} bytes, but its header describes {8 + n + max(ends, default=0)} "
                "(truncated or damaged)")
    return None


def verify_checkpoint(folder: Path) -> list[str]:
    """What is wrong with a complete-looking checkpoint (empty: nothing found): files the
    manifest lists that are missing or of another size, unreadable safetensors files."""
    folder = Path(folder)
    problems = []
    manifest = folder / MANIFEST
    if manifest.is_file():
        try:
            files = json.loads(manifest.read_text())["files"]
        except (ValueError, KeyError) as e:
            return [f"{manifest}: unreadable ({e})"]
        for rel, size in files.items():
            p = folder / rel
            if not p.is_file():
                problems.append(f"{p}: missing (the manifest lists it)")
            elif p.stat().st_size != size:
                problems.append(f"{p}: {p.stat().st_size} bytes, {size} when saved (truncated "
                                "or changed)")
    for p in sorted(folder.rglob("*.safetensors")):
        if (why := _safetensors_problem(p)) is not None and not any(str(p) in q for q in problems):
            problems.append(why)
    return problems


def save_checkpoint(run_dir: str | Path, step: int, agents: list, optimizers: list,
                    schedulers: list, state: dict[str, Any], keep_last: int | None = None,
                    layout=None, optimizer_state: bool = True) -> Path:
    """Write ``checkpoints/step-<step>`` for all agents; return its folder.

    ``agents[i]`` needs ``.name``, ``.model`` (``save_pretrained``) and ``.adapter.processor``;
    ``optimizers[i]`` / ``schedulers[i]`` need ``state_dict()``. With a distributed
    ``layout`` every rank calls this (it holds collectives). ``optimizer_state=False``:
    weights only (no optimizer, LR-schedule or EMA-teacher state; see the module docstring),
    about a third of a full fine-tune's checkpoint.
    """
    if layout is not None and layout.distributed:
        return _save_distributed(run_dir, step, agents, schedulers, state, keep_last, layout,
                                 optimizer_state)
    root = checkpoints_root(run_dir)
    remove_stale_temporaries(root)
    final = root / f"step-{step}"
    counted = optimizers if optimizer_state else []
    with out_of_space_stops_the_run(root, step, lambda: checkpoint_bytes(agents, counted),
                                    resumable=optimizer_state):
        tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{step}-", dir=root))
        try:
            for agent, opt, sched in zip(agents, optimizers, schedulers):
                folder = agent_folder(tmp, agent.name)
                agent.model.save_pretrained(folder, safe_serialization=True)
                agent.adapter.processor.save_pretrained(folder)
                if not optimizer_state:
                    continue
                torch.save({"optimizer": opt.state_dict(),
                            "scheduler": sched.state_dict() if sched is not None else None},
                           folder / TRAINER_STATE)
                if getattr(agent, "source_state", None) is not None:
                    agent.source_state.save(folder, None)
            torch.save(rng_state(), tmp / "rng.pt")
            write_manifest(tmp)
            (tmp / "state.json").write_text(json.dumps(
                {"step": step, OPTIMIZER_STATE: optimizer_state, **state}, indent=1))
            _replace_folder(tmp, final)  # the same step again: e.g. Ctrl-C right after a save
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        run_folder.write_text(root / LATEST, final.name)
    if keep_last:
        for old in sorted(complete_steps(root))[:-keep_last]:
            shutil.rmtree(root / f"step-{old}", ignore_errors=True)
    return final


# ---------------------------------------------------------------------------- full disk

_OUT_OF_SPACE_TEXT = ("No space left on device", "Disk quota exceeded", "code: 28,")


def is_out_of_space(e: BaseException, root: Path, need: int) -> bool:
    """Whether a failed save ran out of disk. ``OSError`` ENOSPC / EDQUOT anywhere in the
    exception chain; safetensors (Rust) and ``torch.save`` raise their own types, with the
    OS message (Rust's ``code: 28``) or none ("file write failed"), so the free space left
    (after the partial folder is gone) below ``need`` bytes also counts."""
    seen = e
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(t in str(seen) for t in _OUT_OF_SPACE_TEXT):
            return True
        seen = seen.__cause__ or seen.__context__
    with contextlib.suppress(OSError):
        return shutil.disk_usage(root).free < need
    return False


def checkpoint_bytes(agents: list, optimizers: list) -> int:
    """About how many bytes one checkpoint of these agents takes: weights as stored (their
    dtype) plus the optimizer's tensors (AdamW: two moments per trained weight)."""
    total = 0
    for agent in agents:
        total += sum(p.numel() * p.element_size() for p in agent.model.state_dict().values())
    for opt in optimizers:
        for state in (opt.state_dict().get("state", {}) if opt is not None else {}).values():
            total += sum(v.numel() * v.element_size() for v in state.values()
                         if isinstance(v, torch.Tensor))
    return total


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"  # pragma: no cover


@contextlib.contextmanager
def out_of_space_stops_the_run(root: Path, step: int, need_bytes, resumable: bool = True):
    """A save that runs out of disk (ENOSPC) stops the run with a message for people: the
    previous checkpoint is intact (the partial folder is already removed by then), and
    how much a checkpoint needs against what is free. ``need_bytes``: a callable, so the
    estimate is only computed on failure. ``resumable``: False for weights-only saves,
    whose way on is a new run from the previous weights, not ``--resume``."""
    try:
        yield
    except Exception as e:  # re-raised unless it is a full disk
        with contextlib.suppress(OSError):  # the temp file of `latest`, if it was cut
            (root / f".{LATEST}.tmp").unlink(missing_ok=True)
        need = int(need_bytes())
        if not is_out_of_space(e, root, need):
            raise
        free = 0
        with contextlib.suppress(OSError):
            free = shutil.disk_usage(root).free
        previous = latest_checkpoint(root.parent)
        kept = (f"the previous checkpoint, {previous.name}, is intact" if previous is not None
                else "no earlier checkpoint exists")
        way_on = (f"continue with `vlcohort train --resume {root.parent}`" if resumable else
                  "start a new run from the previous checkpoint's weights (agents.N.path="
                  "<checkpoint>/<agent>; weights-only checkpoints do not resume)")
        raise CheckpointError(
            f"no space left on the device of {root} while saving step-{step}: a checkpoint "
            f"of this run needs about {_human(need)} and {_human(free)} is free; {kept} and "
            "the partial folder was removed. Free space (or move the run to a larger disk, "
            f"or set checkpoint.keep_last) and {way_on}") from e


def _save_distributed(run_dir, step, agents, schedulers, state, keep_last, layout,
                      optimizer_state: bool = True) -> Path:
    root = Path(run_dir) / CHECKPOINTS
    final = root / f"step-{step}"
    tmp = None
    if layout.is_logger:
        checkpoints_root(run_dir)
        remove_stale_temporaries(root)
        tmp = Path(tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{step}-", dir=root))
    tmp = Path(layout.broadcast(str(tmp) if tmp else None, "the checkpoint folder"))
    try:
        for agent, sched in zip(agents, schedulers):
            folder = agent_folder(tmp, agent.name)
            with agent.generation_context():  # ZeRO-3: whole weights on every group rank
                if layout.is_group_leader:
                    agent.model.save_pretrained(folder, safe_serialization=True)
                    agent.adapter.processor.save_pretrained(folder)
                    if optimizer_state:
                        torch.save({"optimizer": None, "scheduler": sched.state_dict()},
                                   folder / TRAINER_STATE)
            if not optimizer_state:  # every rank skips alike: no ZeRO save, no collective
                continue
            if getattr(agent, "source_state", None) is not None:  # each rank: what it holds
                agent.source_state.save(folder, layout)
            # every rank of the group writes its ZeRO partition (holds a world barrier)
            agent.ds_engine.save_checkpoint(str(folder / ZERO), tag=ZERO, save_latest=False,
                                            exclude_frozen_parameters=True)
        layout.barrier("the checkpoint's agent folders")
        if layout.is_logger:
            torch.save(rng_state(), tmp / "rng.pt")
            write_manifest(tmp)
            (tmp / "state.json").write_text(json.dumps(
                {"step": step, OPTIMIZER_STATE: optimizer_state, **state}, indent=1))
            _replace_folder(tmp, final)
            run_folder.write_text(root / LATEST, final.name)
            if keep_last:
                for old in sorted(complete_steps(root))[:-keep_last]:
                    shutil.rmtree(root / f"step-{old}", ignore_errors=True)
    finally:
        if layout.is_logger:
            shutil.rmtree(tmp, ignore_errors=True)
    layout.barrier("the checkpoint rename")
    return final


def load_zero_state(agent, folder: Path) -> None:
    """The agent's ZeRO optimizer state (and weights) from DeepSpeed's checkpoint."""
    zero = agent_folder(folder, agent.name) / ZERO
    if not zero.is_dir():
        raise CheckpointError(
            f"{zero.parent}: no DeepSpeed state ({ZERO}/); this checkpoint was written "
            "by a single-process run: resume it in one process, or start a new agent-group run "
            "from its weights (agents.N.path=<that folder>)")
    try:
        agent.ds_engine.load_checkpoint(str(zero), tag=ZERO, load_optimizer_states=True,
                                        load_lr_scheduler_states=False,
                                        load_module_strict=False)
    except Exception as e:  # DeepSpeed raises assorted errors for a partition-count mismatch
        raise CheckpointError(
            f"{zero}: DeepSpeed could not load this agent's state ({type(e).__name__}: {e}). "
            "ZeRO stages 1-3 partition the optimizer state per rank: resume with the same "
            "distributed.ranks_per_agent and zero_stage it was saved with") from e


def complete_steps(root: Path) -> list[int]:
    steps = []
    for p in root.glob("step-*"):
        if not p.is_symlink() and p.is_dir() and (p / "state.json").is_file():
            try:
                steps.append(int(p.name.split("-", 1)[1]))
            except ValueError:
                pass
    return steps


def _pointed(root: Path) -> Path | None:
    """The checkpoint ``latest`` names (None without one): a plain ``step-N`` folder
    directly in ``root``; anything else is a :class:`CheckpointError`, since following it
    would resume (and later write) outside the run."""
    pointer = root / LATEST
    if not (pointer.exists() or pointer.is_symlink()):
        return None
    fix = (f"A run writes there only the name of one of its own checkpoints (step-N); "
           f"delete {pointer} to resume from the newest step-N folder, or use a run folder "
           "you trust")
    if pointer.is_symlink() or not pointer.is_file():
        what = "a symbolic link" if pointer.is_symlink() else "not a plain file"
        raise CheckpointError(f"{pointer}: {what}, refused. {fix}")
    try:
        name = pointer.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{pointer}: unreadable ({e}). {fix}") from None
    folder = root / name
    if (not _STEP_NAME.fullmatch(name) or folder.is_symlink()
            or (folder.exists() and Path(os.path.realpath(folder)).parent
                != Path(os.path.realpath(root)))):
        raise CheckpointError(f"{pointer}: names {name[:200]!r}, not a checkpoint folder of "
                              f"this run ({root}/step-N), refused. {fix}")
    return folder


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run, or None."""
    root = Path(run_dir) / CHECKPOINTS
    if root.is_symlink():
        raise CheckpointError(f"{root}: a symbolic link, refused: a run's checkpoints live in "
                              "a real folder inside it. Use a run folder you trust")
    folder = _pointed(root)
    if folder is not None and (folder / "state.json").is_file():
        return folder
    steps = complete_steps(root) if root.is_dir() else []
    return root / f"step-{max(steps)}" if steps else None


def resumable_checkpoint(run_dir: str | Path) -> tuple[Path | None, list[str]]:
    """The newest complete checkpoint that passes :func:`verify_checkpoint`, and the
    problems of the newer ones passed over (for a warning). Stale temporaries go first."""
    root = Path(run_dir) / CHECKPOINTS
    remove_stale_temporaries(root)
    skipped: list[str] = []
    first = latest_checkpoint(run_dir)
    candidates = ([first] if first is not None else []) + [
        root / f"step-{n}" for n in sorted(complete_steps(root), reverse=True)
        if first is None or root / f"step-{n}" != first]
    for folder in candidates:
        problems = verify_checkpoint(folder)
        if not problems:
            require_optimizer_state(folder)
            return folder, skipped
        skipped += problems
    return None, skipped


def has_optimizer_state(folder: Path) -> bool:
    """Whether checkpoint ``folder`` holds what a resume needs beyond the weights (saved
    with ``checkpoint.optimizer=true``, or before that key existed)."""
    return bool(load_state(folder).get(OPTIMIZER_STATE, True))


def require_optimizer_state(folder: Path) -> None:
    """Refuse to resume from a weights-only checkpoint: a fresh optimizer (zero Adam
    moments, a restarted schedule) would not continue the run it claims to continue."""
    if has_optimizer_state(folder):
        return
    raise CheckpointError(
        f"{folder}: a weights-only checkpoint (saved with checkpoint.optimizer=false: no "
        "optimizer, LR-schedule or EMA-teacher state), so the run cannot continue from it; "
        f"export it (vlcohort export {folder.parent.parent}) or start a new run from its "
        f"weights (agents.N.path={folder}/<agent>), and keep checkpoint.optimizer=true in "
        "runs you mean to resume")


def load_source_state(agent, folder: Path, layout=None) -> None:
    """The agent's reward-source state (``reward_sources.AgentState``: Co-rewarding-II's
    EMA teacher) from checkpoint ``folder``: the state reads its own files from the agent's
    folder and refuses a checkpoint without them (``CheckpointError``)."""
    agent.source_state.load(agent_folder(folder, agent.name), layout)


def load_trainer_state(folder: Path, agent_name: str) -> dict[str, Any]:
    return _load_data(agent_folder(folder, agent_name) / TRAINER_STATE)


def load_state(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "state.json").read_text())


def load_rng(folder: Path) -> dict[str, Any]:
    return _load_data(folder / "rng.pt")
