"""Experiment trackers: TensorBoard and Weights & Biases, fed from the one metrics record.

:class:`~vlcohort.monitoring.metrics.MetricsLogger` writes each step's record to
``metrics.jsonl`` and hands the same record to every tracker started here, so the three
never disagree. A tracker the config asks for (``log.tensorboard``, ``log.wandb.enable``)
that cannot start is a :class:`TrackerError` at the start of the run naming the key and the
install line, never a silent skip: a run that was meant to be watched and is not is found
out hours too late.

Only the logging process starts trackers (rank 0 of an agent-group launch: the logger is
disabled on every other rank).
"""

from __future__ import annotations

import json
import math
import os
import secrets
import string
from pathlib import Path
from typing import Any, Protocol

from vlcohort import run_folder
from vlcohort.errors import RunError

#: The install line named in a missing-package error, per tracker key.
INSTALL = {
    "log.tensorboard": "pip install 'vlcohort[tensorboard]'  (or: pip install tensorboard)",
    "log.wandb.enable": "pip install 'vlcohort[wandb]'  (or: pip install wandb)",
}

#: The run folder file that keeps the W&B run id, so a resumed run continues its W&B run.
TRACKER_STATE = "trackers.json"


class TrackerError(RunError):
    """A tracker the config asks for could not start; the message names the key and what
    to do (install line, setting to change)."""


class Tracker(Protocol):
    """What a tracker does with the metrics records."""

    def log(self, values: dict[str, float], step: int) -> None: ...

    def close(self, failed: bool = False) -> None: ...


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The record's finite numbers, without ``step`` (a tracker's x axis): what a scalar
    chart can show. Booleans become 0 / 1; lists (``monitor/warnings``), strings and
    None (a non-finite value in ``metrics.jsonl``) are left out."""
    out: dict[str, float] = {}
    for key, value in record.items():
        if key == "step" or value is None or isinstance(value, (str, list, dict, tuple)):
            continue
        if hasattr(value, "item"):  # a 0-d tensor / numpy scalar
            value = value.item()
        if isinstance(value, bool):
            value = int(value)
        if isinstance(value, (int, float)) and math.isfinite(value):
            out[key] = value
    return out


# ---------------------------------------------------------------------------- TensorBoard


class TensorBoardTracker:
    """Scalars into ``<run>/tensorboard`` event files (``tensorboard --logdir <run>``).

    ``start_step``: the step the run continues from. TensorBoard's reader drops the events
    at and after ``purge_step`` that earlier writers left, so a resumed run's chart has no
    doubled steps and a fresh run in an old folder (``start_step`` 0) shows only itself."""

    def __init__(self, folder: str | Path, start_step: int = 0):
        writer_class = _import_summary_writer()
        self.folder = Path(folder)
        purge = start_step + 1 if start_step > 0 else 0
        try:
            self._writer = writer_class(str(self.folder), purge_step=purge)
        except OSError as e:
            raise TrackerError(f"log.tensorboard: cannot write event files in {self.folder} "
                               f"({e}); free the folder or set log.tensorboard=false") from None

    def where(self) -> str:
        """How to see the charts."""
        return f"TensorBoard: tensorboard --logdir {self.folder}"

    def log(self, values: dict[str, float], step: int) -> None:
        for key, value in values.items():
            self._writer.add_scalar(key, value, step)
        self._writer.flush()  # a chart that follows the run, not one that waits for close

    def close(self, failed: bool = False) -> None:
        self._writer.close()


def _import_summary_writer():
    """torch's SummaryWriter, which needs the ``tensorboard`` package."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:
        raise TrackerError(f"log.tensorboard=true but TensorBoard cannot be imported ({e}); "
                           f"install it: {INSTALL['log.tensorboard']}, or set "
                           "log.tensorboard=false") from None
    return SummaryWriter


# ---------------------------------------------------------------------------- W&B


class WandbTracker:
    """One W&B run per training run: the records as its history (x axis: ``step``), the
    resolved config as its run config, ``log.wandb.*`` as its project / name / tags /
    entity / group / mode (``mode`` None: the ``WANDB_MODE`` variable decides, as in any
    W&B script). Files go under ``<run>/wandb`` unless ``WANDB_DIR`` is set.

    ``start_step`` > 0 (a resume) continues the run folder's W&B run (its id is kept in
    ``<run>/trackers.json``); a fresh run starts a new one. ``quiet``: W&B's own console
    lines are off (``--verbose`` keeps them); :meth:`where` says where the run is."""

    def __init__(self, settings: Any, run_dir: str | Path, run_name: str,
                 run_config: dict[str, Any] | None = None, start_step: int = 0,
                 quiet: bool = True):
        wandb = _import_wandb()
        run_dir = Path(run_dir)
        run_id = _saved_wandb_id(run_dir) if start_step > 0 else None
        run_id = run_id or new_run_id()
        kwargs = dict(project=settings.project, name=settings.name or run_name,
                      tags=list(settings.tags) or None, entity=settings.entity,
                      group=settings.group, config=run_config or {}, id=run_id,
                      resume="allow", dir=os.environ.get("WANDB_DIR") or str(run_dir),
                      settings=wandb.Settings(silent=quiet))
        if settings.mode is not None:
            kwargs["mode"] = settings.mode
        Path(kwargs["dir"]).mkdir(parents=True, exist_ok=True)
        try:
            self.run = wandb.init(**kwargs)
        except Exception as e:  # wandb raises its own errors (auth, network, bad entity)
            raise TrackerError(
                f"log.wandb: W&B did not start ({type(e).__name__}: {e}). Log in with "
                "`wandb login`, check log.wandb.project / log.wandb.entity, or run without "
                "network with log.wandb.mode=offline (or WANDB_MODE=offline; `wandb sync` "
                "uploads later); log.wandb.enable=false turns it off") from None
        _save_wandb_id(run_dir, run_id)
        self.offline = bool(self.run.offline)

    def where(self) -> str:
        """Where the run can be seen: its page, or its offline folder and the sync line."""
        if self.offline:
            folder = self.run.settings.sync_dir
            return f"W&B: offline run in {folder} (upload with `wandb sync {folder}`)"
        return f"W&B: {self.run.url or self.run.name}"

    def log(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def close(self, failed: bool = False) -> None:
        self.run.finish(exit_code=1 if failed else 0)


def new_run_id(length: int = 8) -> str:
    """A W&B run id: lower-case letters and digits, as W&B's own (kept in
    ``trackers.json`` so a resume names the same run)."""
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(length))


def _import_wandb():
    try:
        import wandb
    except ImportError as e:
        raise TrackerError(f"log.wandb.enable=true but wandb cannot be imported ({e}); "
                           f"install it: {INSTALL['log.wandb.enable']}, or set "
                           "log.wandb.enable=false") from None
    return wandb


def _saved_wandb_id(run_dir: Path) -> str | None:
    path = run_dir / TRACKER_STATE
    try:
        return json.loads(path.read_text()).get("wandb_run_id")
    except (OSError, ValueError, AttributeError):
        return None


def _save_wandb_id(run_dir: Path, run_id: str) -> None:
    """Keep the W&B run id in the run folder, never through a link planted there
    (``vlcohort/run_folder.py``)."""
    run_folder.write_text(run_dir / TRACKER_STATE, json.dumps({"wandb_run_id": run_id}) + "\n")


# ---------------------------------------------------------------------------- together


def check_trackers(log: Any) -> None:
    """Import every tracker package ``log`` (a ``LogConfig``) asks for: called before
    anything is built, so a missing package costs seconds, not a model load."""
    if log.tensorboard:
        _import_summary_writer()
    if log.wandb.enable:
        _import_wandb()


def start_trackers(log: Any, run_dir: str | Path, run_name: str,
                   run_config: dict[str, Any] | None = None, start_step: int = 0,
                   quiet: bool = True) -> list[Tracker]:
    """The trackers ``log`` asks for, started (none: an empty list)."""
    run_dir = Path(run_dir)
    trackers: list[Tracker] = []
    try:
        if log.tensorboard:
            trackers.append(TensorBoardTracker(run_dir / "tensorboard", start_step))
        if log.wandb.enable:
            trackers.append(WandbTracker(log.wandb, run_dir, run_name, run_config, start_step,
                                         quiet=quiet))
    except TrackerError:
        for t in trackers:
            t.close()
        raise
    return trackers
