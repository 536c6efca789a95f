"""The one run driver every recipe shares: resume, the step loop, bad-step streaks,
progress, checkpoint cadence, Ctrl-C and cleanup.

A recipe (the cohort loop of ``cohort.py``, the challenger / solver phases of
``selfplay.py``; the comparison arms run the cohort recipe once per arm) gives the driver
a :class:`Recipe`: how to take one step, save, clean up and summarise a record. Its run
object carries ``cfg``, ``dir``, ``agents`` (those trained in this process), ``names``
(every agent's: an agent group's record holds all of them, so every rank keeps the same
streak), ``logger``, ``step`` (the last completed step), ``bad_steps_in_row`` and ``talks``
(whether this process prints). While the loop runs, ``run.progress`` is its
:class:`Progress`, to which a step reports its phases (:func:`phase`).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from vlcohort import runlock
from vlcohort.console import phase  # noqa: F401 - re-exported: the recipes report their phases through the driver
from vlcohort.errors import RunError
from vlcohort.training import checkpoint as ckpt


class TrainingError(RunError):
    """A run that cannot go on (e.g. too many non-finite losses in a row)."""


def bad_streak_error(streak: int, limit: int) -> TrainingError:
    """The error of ``streak`` steps in a row whose update was skipped (non-finite loss)."""
    return TrainingError(
        f"{streak} steps in a row with a NaN / inf loss (run.max_bad_steps={limit}); stopped. "
        "Lower the learning rate, enable gradient clipping (grpo.max_grad_norm) or check the "
        "rollout log-probs.")


# ---------------------------------------------------------------------------- seeds

def seed_everything(seed: int) -> None:
    """Python, NumPy and torch RNGs (transformers' ``set_seed``, which seeds all three)."""
    from transformers import set_seed

    set_seed(seed)


# ---------------------------------------------------------------------------- resume


def checkpoint_to_resume(run_dir: Path, resume: str | Path | None) -> Path | None:
    """The newest complete checkpoint of ``run_dir`` when resuming (an error when there is
    none), else None."""
    if resume is None:
        return None
    folder, skipped = ckpt.resumable_checkpoint(run_dir)
    if folder is None:
        damaged = f"; damaged: {'; '.join(skipped[:5])}" if skipped else ""
        raise TrainingError(f"--resume {run_dir}: no complete checkpoint in "
                            f"{run_dir / ckpt.CHECKPOINTS}{damaged}")
    if skipped:
        print(f"warning: resuming from {folder.name}, the newest intact checkpoint; passed "
              f"over: {'; '.join(skipped[:5])}", file=sys.stderr)
    return folder


def restore_agents(folder: Path, agents: list) -> None:
    """Each agent's optimizer (or its ZeRO partition) and LR-schedule state; the weights
    were loaded when the agent was built."""
    for agent in agents:
        st = ckpt.load_trainer_state(folder, agent.name)
        if agent.ds_engine is not None:
            ckpt.load_zero_state(agent, folder)
        else:
            agent.optimizer.load_state_dict(st["optimizer"])
        agent.scheduler.load_state_dict(st["scheduler"])


def save_run(run, state: dict[str, Any], layout=None) -> Path:
    """A checkpoint of ``run.agents`` at ``run.step`` with the recipe's ``state``; weights
    only with ``checkpoint.optimizer=false`` (it exports, but does not resume)."""
    return ckpt.save_checkpoint(
        run.dir, run.step, run.agents, [a.optimizer for a in run.agents],
        [a.scheduler for a in run.agents], state,
        keep_last=run.cfg.checkpoint.keep_last or None, layout=layout,
        optimizer_state=run.cfg.checkpoint.optimizer)


def step_schedules(agents: list) -> None:
    """Every agent's LR schedule follows RL steps, updated or not (torch warns when a
    scheduler steps without an optimizer step; that is intended here)."""
    for agent in agents:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            agent.scheduler.step()


# ---------------------------------------------------------------------------- the loop


def _nothing(run) -> None:
    """No start hook."""
    return None


def _no_watch(run, record: dict, step: int) -> Callable[[Path], str] | None:
    """No watch: never stops the run."""
    return None


@dataclass
class Recipe:
    """What a recipe gives the driver."""

    step: Callable[[Any, int], dict]  # (run, step) -> the step's metrics record
    save: Callable[[Any], Path]  # a checkpoint of the run as it stands
    cleanup: Callable[[Any], None]  # final checkpoint, plots, summary of the run
    summary: Callable[[Any, dict], str]  # one progress line of a record
    start: Callable[[Any], None] = _nothing  # before the first step (cohort: step-0 eval)
    # after a step, before it is logged: annotate the record, print warnings; when the run
    # must stop there, the stop message as a function of the checkpoint saved (cohort:
    # the collapse / divergence monitor)
    watch: Callable[[Any, dict, int], Callable[[Path], str] | None] = _no_watch
    save_on_interrupt: bool = True  # agent groups: no collective save on Ctrl-C


class Stopped(KeyboardInterrupt):
    """SIGINT (Ctrl-C, ``kill -INT``) or SIGTERM (a scheduler's preemption, ``kill``)
    during a run: raised in the main thread, so the loop stops where it is."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


#: The signals a driven run answers itself (stop, save, exit 128 + the signal).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _stop_signals_handled_by(handler):
    """:data:`STOP_SIGNALS` go to ``handler`` (a function or ``signal.SIG_IGN``) inside the
    block, their previous handlers after it; outside the main thread (where Python cannot
    set handlers) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, previous in before.items():
            signal.signal(s, previous)


def stop_on_signals():
    """SIGINT and SIGTERM raise :class:`Stopped` while a run is driven (main thread only).

    Set explicitly, not left to Python's default: a process started with SIGINT ignored
    (a background job of a non-interactive shell, as a test runner or a job script may
    start it) never turns SIGINT into KeyboardInterrupt, so ``kill -INT`` would let the run
    go on to the end and exit 0; and SIGTERM would kill it without a checkpoint."""

    def stop(signum, frame):
        raise Stopped(signum)

    return _stop_signals_handled_by(stop)


def stop_on_signals_ignored():
    """SIGINT / SIGTERM held off (main thread) while the interrupted run saves."""
    return _stop_signals_handled_by(signal.SIG_IGN)


def drive(run, recipe: Recipe) -> int:
    """The step loop, then cleanup; exit code 0. On SIGINT (Ctrl-C) or SIGTERM: save a
    checkpoint (when a step was done and ``recipe.save_on_interrupt``), say how to resume,
    exit code 128 + the signal (130, 143)."""
    try:
        try:
            with stop_on_signals():
                loop(run, recipe)
        except KeyboardInterrupt as e:
            signum = e.signum if isinstance(e, Stopped) else signal.SIGINT
            with stop_on_signals_ignored():  # a second Ctrl-C must not cut the save short
                if run.step > 0 and recipe.save_on_interrupt:
                    print(f"\ninterrupted ({signal.Signals(signum).name}): saved {recipe.save(run)}; "
                          f"continue with `vlcohort train --resume {run.dir}`", file=sys.stderr)
                run.logger.close()
            return 128 + int(signum)
        recipe.cleanup(run)
        return 0
    finally:
        run.logger.close(failed=True)  # after an error: W&B marks the run failed (else a no-op)
        runlock.release(run.dir)


def loop(run, recipe: Recipe) -> None:
    """Steps ``run.step + 1 .. run.steps``: log each record, keep the bad-step streak (a
    step whose update was skipped for a NaN / inf loss; a step without any update neither
    breaks nor extends it), show progress, stop on a streak or a watch, save every
    ``checkpoint.every`` steps."""
    cfg = run.cfg
    names = run.names  # the whole cohort: every rank decides from the same record
    recipe.start(run)
    with progress(run) as bar, phases_shown_by(run, bar):
        while run.step < cfg.run.steps:
            step = run.step + 1
            bar.begin(step)
            record = recipe.step(run, step)
            stop = recipe.watch(run, record, step)
            run.logger.log(record)
            run.step = step
            if sum(record.get(f"agent/{n}/skipped_updates", 0) for n in names):
                run.bad_steps_in_row += 1
            elif any(f"agent/{n}/loss" in record for n in names):
                run.bad_steps_in_row = 0
            bar.show(step, recipe.summary(run, record))
            if run.bad_steps_in_row >= cfg.run.max_bad_steps:
                recipe.save(run)
                raise bad_streak_error(run.bad_steps_in_row, cfg.run.max_bad_steps)
            if stop:
                raise TrainingError(stop(recipe.save(run)))
            if cfg.checkpoint.every and step % cfg.checkpoint.every == 0 and step < cfg.run.steps:
                recipe.save(run)


#: Without a terminal (a log file, CI), at most about this many progress lines per run.
LOGGED_PROGRESS_LINES = 20
#: On a terminal, a step's phase replaces the last step's summary on the live line only
#: once the step has run this many seconds, so steps of a second or less do not flicker.
LIVE_PHASE_AFTER_S = 1.0
#: How often the live line's clock is redrawn while a phase runs, in seconds.
LIVE_TICK_S = 1.0


class Progress:
    """Progress of a loop, when ``enabled`` (``log.progress`` on and this process talks).

    On a terminal: one live line, ``[n/total eta ...] <summary>`` (tqdm), rewritten in
    place. Elsewhere (a log file, a pipe, CI), tqdm's in-place rewrites would pile up on
    one line: a plain ``[n/total eta ...] <summary>`` line each time ``n`` passes another
    ``total /`` :data:`LOGGED_PROGRESS_LINES`, and at the end. Messages printed during
    the loop go through :func:`say`, which keeps the live line intact.

    Inside a step (:meth:`begin` .. :meth:`show`), :meth:`phase` says what the step is
    doing, so a step of minutes (real weights on CPU) is not a silent wait. On a terminal
    the live line shows ``step n (1m12s): <phase>`` (the step's time so far, redrawn every
    :data:`LIVE_TICK_S`) once the step has run :data:`LIVE_PHASE_AFTER_S`; elsewhere a
    phase gets a plain line ``step n/total (1m12s): <phase>`` when the step has already
    run ``phase_lines_after_s`` seconds (``log.phase_lines_after_s``), or the step before
    it did, so a run of short steps prints nothing more than its step lines."""

    def __init__(self, total: int, initial: int, enabled: bool, stream=None,
                 phase_lines_after_s: float = 30.0):
        from tqdm import tqdm

        self.stream = stream or sys.stdout
        self.total, self.initial, self.n, self.enabled = total, initial, initial, enabled
        self.t0 = time.monotonic()
        self.live = enabled and _is_terminal(self.stream)
        self.every = max(1, (total - initial) // LOGGED_PROGRESS_LINES)
        self.phase_lines_after_s = phase_lines_after_s
        self._step, self._step_t0, self._last_step_s = initial + 1, self.t0, 0.0
        self._phase: str | None = None
        self._summary = ""  # the live line's text outside a phase
        self._ticker: threading.Thread | None = None
        self._closed = threading.Event()
        self._lock = threading.Lock()  # the ticker's redraw against the loop's
        self._bar = tqdm(total=total, initial=initial, file=self.stream, mininterval=0,
                         disable=not self.live, dynamic_ncols=True,
                         bar_format="[{n_fmt}/{total_fmt} eta {remaining}] {desc}")

    def show(self, n: int, summary: str) -> None:
        """``n`` of ``total`` done; ``summary``: the line to show with it."""
        before, self.n = self.n, n
        now = time.monotonic()
        self._last_step_s = now - self._step_t0
        self._step, self._step_t0, self._summary = n + 1, now, summary
        if self.live:
            with self._lock:
                self._bar.set_description_str(summary, refresh=False)
                self._bar.update(n - before)
        elif self.enabled and n > before and (
                n // self.every > before // self.every or n >= self.total):
            per_step = (now - self.t0) / max(1, n - self.initial)
            eta = self._bar.format_interval(per_step * max(0, self.total - n))
            print(f"[{n}/{self.total} eta {eta}] {summary}", file=self.stream, flush=True)

    def begin(self, n: int) -> None:
        """Step ``n`` starts now (its phases' clock starts here, not at the last
        :meth:`show`: a checkpoint saved between steps is no part of the next one)."""
        self._step, self._step_t0 = n, time.monotonic()

    @contextlib.contextmanager
    def phase(self, label: str):
        """Inside the block the current step is doing ``label`` (e.g. ``generate A``);
        a phase inside a phase shows until it ends, then the outer one again."""
        if not self.enabled:
            yield
            return
        with self._lock:
            outer, self._phase = self._phase, label
        try:
            if self.live:
                self._draw_phase()
                self._start_ticker()
            elif self._phase_line_due():
                print(self.phase_text(f"{self._step}/{self.total}"), file=self.stream, flush=True)
            yield
        finally:
            with self._lock:
                self._phase = outer
                if self.live and outer is None:
                    self._bar.set_description_str(self._summary)
            if self.live:
                self._draw_phase()

    def phase_text(self, step: str) -> str:
        """``step <step> (<the step's time so far>): <the current phase>``."""
        return f"step {step} ({duration(time.monotonic() - self._step_t0)}): {self._phase}"

    def _phase_line_due(self) -> bool:
        """Without a terminal: whether this phase gets a line of its own (the step, or the
        step before it, has run ``phase_lines_after_s``)."""
        after = self.phase_lines_after_s
        return max(time.monotonic() - self._step_t0, self._last_step_s) >= after

    def _draw_phase(self) -> None:
        """The live line shows the current phase, if any, once the step has run a while."""
        with self._lock:
            if self._phase is None or self._closed.is_set():
                return
            if time.monotonic() - self._step_t0 >= min(LIVE_PHASE_AFTER_S, self.phase_lines_after_s):
                self._bar.set_description_str(self.phase_text(str(self._step)))

    def _start_ticker(self) -> None:
        """A daemon thread redrawing the phase's clock every :data:`LIVE_TICK_S` (tqdm
        redraws only when called) until the bar closes."""
        if self._ticker is not None:
            return

        def tick() -> None:
            while not self._closed.wait(LIVE_TICK_S):
                self._draw_phase()

        self._ticker = threading.Thread(target=tick, name="vlcohort-progress", daemon=True)
        self._ticker.start()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self._closed.set()
        if self._ticker is not None:
            self._ticker.join()
        self._bar.close()


def duration(seconds: float) -> str:
    """``45s``, ``1m12s``, ``2h05m``: a clock short enough for a progress line."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


@contextlib.contextmanager
def phases_shown_by(run, bar: Progress):
    """Inside the block, :func:`phase` on ``run`` reports to ``bar`` (the driver's loop)."""
    run.progress = bar
    try:
        yield
    finally:
        run.progress = None


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def progress(run) -> Progress:
    """The loop's :class:`Progress` (live on a terminal, a line now and then elsewhere)."""
    return Progress(run.cfg.run.steps, run.step, run.cfg.log.progress and run.talks,
                    phase_lines_after_s=run.cfg.log.phase_lines_after_s)


def say(message: str, file=None) -> None:
    """Print a message during the step loop without breaking the progress line."""
    from tqdm import tqdm

    tqdm.write(message, file=file or sys.stdout)
