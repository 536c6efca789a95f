"""What a run prints: quiet third-party output by default, a short config, ``--verbose``.

A training run loads and saves models many times (each agent at the start, every
checkpoint, every arm), and each load or save drew a transformers progress bar; the HF
engine's generation config drew a transformers warning twice per step; DeepSpeed's import
said it found no GPU; a vLLM engine logged its build, every generate and every weight
push. None of it tells the user anything about the run, and together it buried the step
line. By default :func:`setup` turns these off with each library's own
switch (no stream is redirected, no other warning is hidden); ``vlcohort train
--verbose`` (or ``VLCOHORT_VERBOSE=1``) leaves every library as it is.

The switches also reach the processes a run starts (parallel comparison arms, warm-up
workers): the progress-bar switches are environment variables those processes inherit,
and ``--verbose`` is passed on as ``VLCOHORT_VERBOSE=1``.

This module imports nothing from ``vlcohort`` at the top (the metrics logger asks it
whether the console is verbose).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from dataclasses import dataclass

#: Set to 1 by ``--verbose``; read by this process and the ones it starts.
VERBOSE_ENV = "VLCOHORT_VERBOSE"
#: The pid of the process whose ``--verbose`` set VERBOSE_ENV (not the user), so the next
#: command run in that same process (a notebook, a test session) without ``--verbose`` is
#: quiet again, while the processes it starts stay verbose.
_SET_BY_FLAG = "VLCOHORT_VERBOSE_SET_BY_FLAG"

#: Progress-bar switches read by the libraries when they are imported (huggingface_hub's
#: also turns transformers' bars off: transformers reads it at import).
PROGRESS_BAR_ENV = ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")

#: vLLM's own log level: read by every ``vllm.LLM`` vLLM builds (its ``LoggingConfig``,
#: which sets its logger up), so one variable reaches the engine build, each generate and
#: each weight push, in this process and the ones it starts. Quiet keeps its
#: errors only: its INFO and WARNING lines are the engine's housekeeping (its config, its
#: cache sizes, per-tensor load notes), and what a run needs from them the run header says.
VLLM_LEVEL_ENV = "VLLM_LOGGING_LEVEL"
VLLM_QUIET_LEVEL = "ERROR"


@dataclass(frozen=True)
class Harmless:
    """A third-party log line that is known not to matter to a vlcohort run."""

    logger: str  # the logging logger that emits it
    starts: str  # the start of its message
    why: str  # why it can be hidden


#: The log lines hidden by default, each matched on its logger and the start of its text.
HARMLESS: tuple[Harmless, ...] = (
    Harmless("transformers.generation.utils", "Both `min_new_tokens`",
             "the HF engine's generation config carries min_new_tokens and min_length that "
             "agree; transformers warns on every generate() call all the same"),
    Harmless("DeepSpeed", "Setting accelerator to CPU",
             "DeepSpeed's accelerator probe on a machine (or a run) without a GPU; said on "
             "import by every process that imports it, even a run that does not use it"),
)


class _DropHarmless(logging.Filter):
    """A logger filter dropping records whose message starts with ``starts``."""

    def __init__(self, starts: str):
        super().__init__()
        self.starts = starts

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record whose args do not format: leave it to the handler
            return True
        return not message.startswith(self.starts)


_FILTERS: dict[str, _DropHarmless] = {}


def verbose() -> bool:
    """Whether third-party output is left alone (``--verbose`` / ``VLCOHORT_VERBOSE=1``)."""
    return os.environ.get(VERBOSE_ENV, "") not in ("", "0", "false", "False")


def setup(verbose_flag: bool = False) -> None:
    """The console of a command: ``verbose_flag`` (or ``VLCOHORT_VERBOSE=1``) leaves every
    library as it is (undoing a quiet parent's switches) and passes that on to child
    processes; otherwise :func:`quiet`."""
    if verbose_flag:
        os.environ[VERBOSE_ENV] = "1"
        os.environ[_SET_BY_FLAG] = str(os.getpid())
    elif os.environ.get(_SET_BY_FLAG) == str(os.getpid()):  # an earlier --verbose command of
        os.environ.pop(_SET_BY_FLAG)  # this process (not the user's VLCOHORT_VERBOSE=1, nor
        os.environ.pop(VERBOSE_ENV, None)  # a --verbose parent's): not this command
    if verbose():
        loud()
    else:
        quiet()


#: The progress-bar variables :func:`quiet` set itself (not the user's), comma-separated,
#: so :func:`loud` (here or in a ``--verbose`` child) removes only those.
_SET_BY_QUIET = "VLCOHORT_QUIET_SET"


def quiet() -> None:
    """Third-party progress bars off and the :data:`HARMLESS` lines dropped, with the
    libraries' own switches; safe to call again (a worker process calls it for itself)."""
    # the hub's switch first: imported before its variable is set, it can be switched back
    # in this process (a variable set before the import has priority over its functions)
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    ours = set(filter(None, os.environ.get(_SET_BY_QUIET, "").split(",")))
    for name in PROGRESS_BAR_ENV:  # for the processes this one starts
        if name not in os.environ:
            os.environ[name] = "1"
            ours.add(name)
    if VLLM_LEVEL_ENV not in os.environ:  # the user's own level stays
        os.environ[VLLM_LEVEL_ENV] = VLLM_QUIET_LEVEL
        ours.add(VLLM_LEVEL_ENV)
    if VLLM_LEVEL_ENV in ours:
        _set_vllm_level(VLLM_QUIET_LEVEL)
    os.environ[_SET_BY_QUIET] = ",".join(sorted(ours))
    if "transformers" in sys.modules:  # imported before: its switch (else it reads the hub's)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    if "datasets" in sys.modules:  # else it reads HF_DATASETS_DISABLE_PROGRESS_BARS at import
        import datasets

        datasets.disable_progress_bars()
    for h in HARMLESS:
        # logging.getLogger returns the library's own logger object (made now if the
        # library is not imported yet; the library later configures the same object)
        if h.starts not in _FILTERS:
            _FILTERS[h.starts] = _DropHarmless(h.starts)
        logging.getLogger(h.logger).addFilter(_FILTERS[h.starts])


def loud() -> None:
    """Undo :func:`quiet` (its variables, filters and switches; a user's own
    ``HF_HUB_DISABLE_PROGRESS_BARS`` stays as it is)."""
    for h in HARMLESS:
        f = _FILTERS.get(h.starts)
        if f is not None:
            logging.getLogger(h.logger).removeFilter(f)
    for name in filter(None, os.environ.pop(_SET_BY_QUIET, "").split(",")):
        os.environ.pop(name, None)
        if name == VLLM_LEVEL_ENV:
            _set_vllm_level(None)
    if "HF_HUB_DISABLE_PROGRESS_BARS" in os.environ:
        return  # the user's choice
    from huggingface_hub.utils import enable_progress_bars

    enable_progress_bars()
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.enable_progress_bar()
    if "datasets" in sys.modules and "HF_DATASETS_DISABLE_PROGRESS_BARS" not in os.environ:
        import datasets

        datasets.enable_progress_bars()


def _set_vllm_level(level: str | None) -> None:
    """vLLM's logger to ``level`` now (None: vLLM's default: INFO once vLLM has set its logger
    up, else unset). vLLM sets its logger up from the variable only when it builds an
    engine; until then its import-time warnings would reach the root logger's last-resort
    handler, so the level goes on the logger object itself (made here if vLLM is not
    imported yet; vLLM later configures that same object)."""
    log = logging.getLogger("vllm")
    if level is None:
        level = "INFO" if log.handlers else logging.NOTSET
    log.setLevel(level)
    for handler in log.handlers:
        handler.setLevel(level)


@dataclass(frozen=True)
class HarmlessWarning:
    """A Python warning of a third-party library that is known not to matter to a run."""

    category: type[Warning]
    message: str  # a regular expression matching the start of its text
    module: str  # a regular expression matching the module it is attributed to
    why: str  # why it can be hidden


#: The warnings :func:`harmless_warnings_hidden` hides around a vLLM engine build.
HARMLESS_WARNINGS: tuple[HarmlessWarning, ...] = (
    HarmlessWarning(FutureWarning, r"`torch\.distributed\.reduce_op` is deprecated",
                    r"vllm\.triton_utils\.dispatcher",
                    "vLLM's CPU platform scans every loaded module for Triton kernels to wrap "
                    "and reads torch.distributed's deprecated alias on the way (twice per "
                    "engine); nothing in a run uses the alias"),
)


@contextlib.contextmanager
def harmless_warnings_hidden():
    """Within the block the :data:`HARMLESS_WARNINGS` are ignored, unless :func:`verbose`.
    Scoped (``warnings.catch_warnings`` puts the filters back on exit) rather than set by
    :func:`quiet`, so no filter outlives the library call it was meant for."""
    if verbose():
        yield
        return
    with warnings.catch_warnings():
        for w in HARMLESS_WARNINGS:
            warnings.filterwarnings("ignore", message=w.message, category=w.category, module=w.module)
        yield


def phase(run, label: str):
    """A context manager: the block is phase ``label`` of the step ``run`` is taking (e.g.
    ``with phase(run, f"update {agent.name}"):``), shown by the driver's progress line
    (``recipes.driver.Progress``, set as ``run.progress`` while its loop runs). Outside
    the driven loop, or in a process that does not talk, it does nothing, so the steps of
    every recipe and reward source call it unconditionally."""
    import contextlib

    bar = getattr(run, "progress", None)
    return bar.phase(label) if bar is not None else contextlib.nullcontext()
