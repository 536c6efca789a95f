"""Progress inside a step: the driver's :class:`Progress` shows the phase a step is in (a
real-weight step takes minutes), live on a terminal, as plain lines elsewhere only once a
step has run ``log.phase_lines_after_s``; a short run's console stays as it was."""

from __future__ import annotations

import io
import re
import time
from types import SimpleNamespace

import pytest

from vlcohort.cli import main
from vlcohort.recipes import driver
from vlcohort.recipes.driver import Progress, duration, phase

#: A phase line without a terminal: ``step 1/1 (0s): generate A``.
PHASE_LINE = re.compile(r"^step (\d+)/(\d+) \((\S+)\): (.+)$")


class Terminal(io.StringIO):
    """A stream that says it is a terminal, so :class:`Progress` draws its live line."""

    def isatty(self) -> bool:
        return True


def _steps(bar: Progress, n_steps: int, long_phase_s: float = 0.0) -> None:
    """``n_steps`` steps of two phases each; step 1's first phase lasts ``long_phase_s``."""
    for n in range(1, n_steps + 1):
        bar.begin(n)
        with bar.phase("generate A"):
            time.sleep(long_phase_s if n == 1 else 0.0)
        with bar.phase("update A"):
            pass
        bar.show(n, f"step {n} | A: r=0.50")


def test_short_steps_print_no_phase_line_by_default():
    stream = io.StringIO()
    with Progress(3, 0, True, stream=stream) as bar:  # the default threshold: 30 s
        _steps(bar, 3)
    assert stream.getvalue().splitlines() == [f"[{n}/3 eta 00:00] step {n} | A: r=0.50"
                                              for n in (1, 2, 3)]


def test_every_phase_gets_a_line_at_threshold_zero():
    stream = io.StringIO()
    with Progress(2, 0, True, stream=stream, phase_lines_after_s=0) as bar:
        _steps(bar, 2)
    lines = stream.getvalue().splitlines()
    assert [PHASE_LINE.match(line).group(1, 2, 4) for line in lines if PHASE_LINE.match(line)] == [
        ("1", "2", "generate A"), ("1", "2", "update A"), ("2", "2", "generate A"), ("2", "2", "update A")]
    assert lines[2].startswith("[1/2 eta") and lines[-1].startswith("[2/2 eta")


def test_phase_lines_start_once_the_step_or_the_one_before_ran_long():
    """Step 1: its first phase starts at 0 s (no line), its second after the threshold
    (a line); step 2 is short, but step 1 was long, so all its phases get lines."""
    stream = io.StringIO()
    with Progress(2, 0, True, stream=stream, phase_lines_after_s=0.2) as bar:
        _steps(bar, 2, long_phase_s=0.25)
    phases = [m.group(1, 4) for m in map(PHASE_LINE.match, stream.getvalue().splitlines()) if m]
    assert phases == [("1", "update A"), ("2", "generate A"), ("2", "update A")]


def test_the_live_line_shows_the_phase_and_its_clock_then_the_summary(monkeypatch):
    monkeypatch.setattr(driver, "LIVE_TICK_S", 0.02)
    stream = Terminal()
    with Progress(2, 0, True, stream=stream, phase_lines_after_s=0) as bar:
        bar.show(1, "step 1 | A: r=0.50")
        bar.begin(2)
        with bar.phase("update B"):
            time.sleep(0.2)  # the ticker redraws the clock meanwhile
            during = bar._bar.desc
        after = bar._bar.desc
    text = stream.getvalue()
    assert during == "step 2 (0s): update B" and after == "step 1 | A: r=0.50"
    assert text.count("[1/2 eta") and text.count("step 2 (0s): update B") >= 3  # redrawn
    assert "\n" not in text.rstrip("\n")  # one line, rewritten in place


def test_a_disabled_bar_or_a_run_outside_the_loop_shows_nothing():
    stream = io.StringIO()
    with Progress(2, 0, False, stream=stream, phase_lines_after_s=0) as bar:
        _steps(bar, 2)
    assert stream.getvalue() == ""
    with phase(SimpleNamespace(), "generate A"):  # no driver loop: a no-op
        pass
    assert [duration(s) for s in (0.4, 59, 72, 3600 + 5 * 60)] == ["0s", "59s", "1m12s", "1h05m"]


@pytest.fixture
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def test_a_tiny_run_at_threshold_zero_shows_its_phases(tmp_path, capsys, _tiny_cache):
    """A real one-step run (``tests/test_train.py``'s tiny one-agent config), stdout not a
    terminal: each phase of the step has its line, in the pipeline's order, before the
    step's line. (The default console of the same run: ``tests/test_console.py``.)"""
    from tests.helpers.train import FAST

    assert main(["train", *FAST, "run.steps=1", "log.phase_lines_after_s=0",
                 f"run.output_dir={tmp_path / 'run'}"]) == 0
    lines = capsys.readouterr().out.splitlines()
    phases = [m.group(4) for m in map(PHASE_LINE.match, lines) if m]
    assert phases == ["next prompts", "generate A", "answers, votes and rewards", "update A"]
    step_line = next(i for i, line in enumerate(lines) if line.startswith("[1/1 eta"))
    assert max(i for i, line in enumerate(lines) if PHASE_LINE.match(line)) < step_line
