"""Checkpoints: everything needed to continue a run exactly, written atomically.

Layout of one checkpoint::

    <run>/checkpoints/step-<n>/
        <agent>/                 save_pretrained: config + safetensors (+ processor files),
                                 loadable by transformers as-is
        <agent>/trainer_state.pt optimizer and LR-scheduler state of that agent
        state.json               step, data position, trainer counters
        rng.pt                   torch / python / numpy RNG states
    <run>/checkpoints/latest     the name of the newest complete checkpoint

A checkpoint is built in a hidden temporary folder and renamed into place only when
complete; ``latest`` is replaced atomically after that. A crash mid-save leaves the
previous checkpoint intact and no half-written one visible.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

CHECKPOINTS = "checkpoints"
LATEST = "latest"


def rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "python": random.getstate(),
            "numpy": np.random.get_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def save_checkpoint(run_dir: str | Path, step: int, agents: list, optimizers: list,
                    schedulers: list, state: dict[str, Any], keep_last: int | None = None) -> Path:
    """Write ``checkpoints/step-<step>`` for all agents; return its folder.

    ``agents[i]`` needs ``.name``, ``.model`` (``save_pretrained``) and ``.adapter.processor``;
    ``optimizers[i]`` / ``schedulers[i]`` need ``state_dict()``.
    """
    root = Path(run_dir) / CHECKPOINTS
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step}"
    tmp = Path(tempfile.mkdtemp(prefix=f".step-{step}-", dir=root))
    try:
        for agent, opt, sched in zip(agents, optimizers, schedulers):
            folder = tmp / agent.name
            agent.model.save_pretrained(folder, safe_serialization=True)
            agent.adapter.processor.save_pretrained(folder)
            torch.save({"optimizer": opt.state_dict(),
                        "scheduler": sched.state_dict() if sched is not None else None},
                       folder / "trainer_state.pt")
        torch.save(rng_state(), tmp / "rng.pt")
        (tmp / "state.json").write_text(json.dumps({"step": step, **state}, indent=1))
        if final.exists():  # re-saving the same step (e.g. Ctrl-C right after a save)
            shutil.rmtree(final)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _atomic_write_text(root / LATEST, final.name)
    if keep_last:
        for old in sorted(_complete_steps(root))[:-keep_last]:
            shutil.rmtree(root / f"step-{old}", ignore_errors=True)
    return final


def _complete_steps(root: Path) -> list[int]:
    steps = []
    for p in root.glob("step-*"):
        if p.is_dir() and (p / "state.json").is_file():
            try:
                steps.append(int(p.name.split("-", 1)[1]))
            except ValueError:
                pass
    return steps


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run, or None."""
    root = Path(run_dir) / CHECKPOINTS
    pointer = root / LATEST
    if pointer.is_file():
        folder = root / pointer.read_text().strip()
        if (folder / "state.json").is_file():
            return folder
    steps = _complete_steps(root) if root.is_dir() else []
    return root / f"step-{max(steps)}" if steps else None


def load_trainer_state(folder: Path, agent_name: str) -> dict[str, Any]:
    return torch.load(folder / agent_name / "trainer_state.pt", weights_only=False)


def load_state(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "state.json").read_text())


def load_rng(folder: Path) -> dict[str, Any]:
    return torch.load(folder / "rng.pt", weights_only=False)
