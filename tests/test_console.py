"""What ``vlcohort train`` prints: no third-party bars or known-harmless warnings by
default, a short config (totals + changed keys), a live-or-sparse progress line, the arms'
line from their metrics files, a one-screen summary."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vlcohort import console, run_header
from vlcohort.config import load_config
from vlcohort.monitoring.metrics import MetricsLogger, final_summary, read_metrics
from vlcohort.recipes.arms import arm_status, arms_line, readable_records
from vlcohort.recipes.driver import LOGGED_PROGRESS_LINES, Progress

ROOT = Path(__file__).resolve().parents[1]

#: What a default console must not show (each seen in a run before this was built).
NOISE = ("Loading weights", "Writing model shards", "min_new_tokens",
         "Setting accelerator to CPU")


@pytest.fixture(autouse=True)
def _console_restored():
    yield
    console.loud()


@pytest.fixture(scope="module")
def quiet_run(tmp_path_factory):
    """One real tiny run (``tests/test_train.py``'s one-agent config: 1 step, held-out
    evaluation at steps 0 and 1, the final checkpoint), its stdout + stderr captured."""
    from tests.helpers.train import FAST

    base = tmp_path_factory.getbasetemp()
    run = base / "console-run"
    overrides = [*FAST, "run.steps=1", "eval.every=1", "eval.problems_per_task=2",
                 f"run.output_dir={run}"]
    env = {k: v for k, v in os.environ.items()
           if k not in ("VLCOHORT_VERBOSE", "HF_HUB_DISABLE_PROGRESS_BARS",
                        "HF_DATASETS_DISABLE_PROGRESS_BARS",
                        "DS_ACCELERATOR")}  # unset, DeepSpeed probes aloud: the line to hide
    env["VLCOHORT_CACHE"] = str(base / "vlcohort-cache")  # shared with tests/test_train.py
    out = subprocess.run([sys.executable, "-m", "vlcohort", "train", *overrides],
                         capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    return run, out.stdout, out.stderr


def test_default_console_has_no_third_party_noise(quiet_run):
    run, stdout, stderr = quiet_run
    for noise in NOISE:
        assert noise not in stdout + stderr, noise
    assert (run / "checkpoints" / "step-1").is_dir()  # a save happened, its bar did not show
    assert stderr.strip() == ""


def test_config_print_is_short_and_names_the_changed_keys(quiet_run):
    run, stdout, _ = quiet_run
    head = []
    for line in stdout.splitlines():
        if not line.startswith("#"):
            break
        head.append(line)
    assert 5 <= len(head) <= 25, "\n".join(head)
    text = "\n".join(head)
    assert head[0] == "# base recipe: none, the plain defaults (agents given)"
    assert head[1] == "# run: A=tiny:qwen2_5_vl; method gt_reward; 1 step"
    for key in ("method=gt_reward", "rollout.prompts_per_step=2", "data.num_problems=16",
                "reward.answer_style=last_letter", "run.steps=1", "eval.every=1"):
        assert key in text, key
    assert "rollout.temperature" not in text  # a default is not listed
    assert "sequences_per_step (A x B x G) 16" in text  # 1 x 2 x 8
    assert f"# full config: {run / 'config.yaml'}" in text
    saved = load_config(run / "config.yaml")  # the full file, as before
    assert saved.rollout.prompts_per_step == 2 and saved.rollout.temperature == 1.0
    assert len((run / "config.yaml").read_text().splitlines()) > 100


def test_whole_console_fits_one_screen_and_ends_with_the_summary(quiet_run):
    run, stdout, _ = quiet_run
    lines = stdout.splitlines()
    assert len(lines) <= 40, stdout
    progress = [line for line in lines if line.startswith("[1/1 eta")]
    assert len(progress) == 1 and "A: r=" in progress[0] and "eval=" in progress[0]
    records = read_metrics(run / "metrics.jsonl")
    assert "\n".join(final_summary(records, ["A"])) in stdout
    assert lines[-1].startswith(f"results: {run}")


def test_config_summary_of_the_defaults_lists_no_key():
    assert run_header.changed_keys(load_config(None)) == []
    cfg = load_config(None, ["rollout.prompts_per_step=3", "agents.1.lr=2e-5",
                             "agents=[{name: A, path: x}, {name: B, path: y}, {name: C, path: z}]"])
    changed = dict(run_header.changed_keys(cfg))
    assert changed["rollout.prompts_per_step"] == 3 and changed["agents.2.name"] == "C"
    assert changed["agents.0.path"] == "x" and "agents.2.lr" not in changed  # ModelConfig default
    assert run_header.override_text("prompt.instruction", "Answer as <b>X</b>.") == \
        "prompt.instruction='Answer as <b>X</b>.'"


@pytest.mark.sandbox
def test_a_code_run_names_its_sandbox_first(monkeypatch):
    """A run with code rewards says where the programs run, and says so loudly when no
    sandbox works (here: the util-linux fallback asked for without its unsafe switch)."""
    from vlcohort.code import sandbox

    cfg = load_config(None)
    assert "# code rewards" not in run_header.config_summary(cfg)
    cfg.reward.answer_kind = "code"  # a code run (its data checks are not the point here)
    sandbox._backend.cache_clear()
    try:
        assert "# code rewards: sandboxed by bubblewrap" in run_header.config_summary(cfg)
        monkeypatch.setenv("VLCOHORT_SANDBOX", "unshare")
        sandbox._backend.cache_clear()
        assert "# code rewards: NO SANDBOX WORKS HERE" in run_header.config_summary(cfg)
    finally:
        monkeypatch.delenv("VLCOHORT_SANDBOX")
        sandbox._backend.cache_clear()


def test_arms_line_reads_each_arms_metrics_file(quiet_run, tmp_path):
    """A real run's metrics file (one agent) and one written by the real logger for two
    agents mid-run, with a last line cut mid-write (the arm process is still writing)."""
    run, _, _ = quiet_run
    records = read_metrics(run / "metrics.jsonl")
    last = records[-1]
    status = arm_status(readable_records(run / "metrics.jsonl"), ["A"])
    assert status["step"] == 1
    assert status["r"] == f"{last['agent/A/reward/mean']:.2f}"
    assert status["eval"] == f"{last['eval/A/all/acc']:.2f}"
    assert "agree" not in status  # one agent: no agreement

    pair = tmp_path / "co_rl"
    logger = MetricsLogger(pair)
    logger.log({"step": 0, "eval/A/all/acc": 0.25, "eval/B/all/acc": 0.5})
    logger.log({"step": 1, "agent/A/reward/mean": 0.5, "agent/B/reward/mean": float("nan"),
                "cohort/agreement": 0.75})
    logger.log({"step": 2, "agent/A/reward/mean": 0.625, "cohort/agreement": None})
    with (pair / "metrics.jsonl").open("a") as f:
        f.write('{"step": 3, "agent/A/rew')
    arms = [load_config(None, ["arms=[]", f"run.output_dir={run}", "run.steps=1",
                               "method=gt_reward", "agents=[{name: A, path: 'tiny:qwen2_5_vl'}]"]),
            load_config(None, ["arms=[]", f"run.output_dir={pair}", "run.steps=8"])]
    done, line = arms_line(arms, ["A", "B"])
    assert done == 1 + 2
    assert line == (f"RL arms (A/B): gt_reward 1/1 r={status['r']}/- eval={status['eval']}/- | "
                    "co_rl 2/8 r=0.62/- agree=0.75 eval=0.25/0.50")


def test_progress_without_a_terminal_prints_few_whole_lines():
    stream = io.StringIO()
    with Progress(total=200, initial=0, enabled=True, stream=stream) as bar:
        for step in range(1, 201):
            bar.show(step, f"step {step}")
    lines = stream.getvalue().splitlines()
    assert len(lines) == LOGGED_PROGRESS_LINES
    assert lines[-1].startswith("[200/200 eta 00:00] step 200") and "\r" not in stream.getvalue()
    silent = io.StringIO()
    with Progress(total=5, initial=0, enabled=False, stream=silent) as bar:
        bar.show(5, "x")
    assert silent.getvalue() == ""


def test_quiet_and_loud_switch_the_libraries_own_output(capfd):
    """transformers' tqdm, its generation logger and DeepSpeed's logger, switched by
    :func:`console.quiet` and back by :func:`console.loud` (other warnings untouched).
    DeepSpeed is imported after :func:`console.quiet`, as in a run: its import-time
    accelerator probe (this machine has no GPU) says the line for real.

    Log records are read by a handler of the test's own on the libraries' loggers (the
    filters sit on those loggers, so what they drop never reaches any handler): the
    libraries' own handlers hold the ``sys.stderr`` of whichever test first made them,
    which in a full suite is an earlier test's capture, not this one's."""
    import logging

    capfd.readouterr()
    console.quiet()
    from deepspeed.utils import logger as ds_logger
    from transformers.utils import logging as hf_logging

    gen = hf_logging.get_logger("transformers.generation.utils")
    seen = io.StringIO()
    handler = logging.StreamHandler(seen)
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_warning()  # whatever an earlier test or its env left set
    watched = [logging.getLogger("transformers"), ds_logger]
    for lg in watched:
        lg.addHandler(handler)

    def emit() -> str:
        for _ in hf_logging.tqdm(range(2), desc="Loading weights"):
            pass
        gen.warning("Both `min_new_tokens` (=0) and `min_length`(=0) seem to have been set.")
        gen.warning("another generation warning")
        ds_logger.warning("Setting accelerator to CPU. If you have GPU ...")
        out, err = capfd.readouterr()
        text = out + err + seen.getvalue()
        seen.seek(0), seen.truncate()
        return text

    try:
        quiet = emit()
        assert "another generation warning" in quiet
        for noise in ("Loading weights", "min_new_tokens", "accelerator"):
            assert noise not in quiet, (noise, quiet)
        console.loud()
        loud = emit()
        assert all(noise in loud for noise in ("Loading weights", "min_new_tokens", "accelerator"))
    finally:
        for lg in watched:
            lg.removeHandler(handler)
        hf_logging.set_verbosity(level)
        console.quiet()


def test_verbose_flag_reaches_child_processes(monkeypatch):
    """A quiet parent's progress-bar switches are inherited by its children (arms, warm-up
    workers); ``--verbose`` in the parent undoes them and makes the children verbose."""
    monkeypatch.delenv(console.VERBOSE_ENV, raising=False)
    console.setup(False)
    assert not console.verbose() and os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    console.setup(True)  # what --verbose does
    try:
        code = ("import os; from vlcohort import console; console.setup();"
                "from huggingface_hub.utils import are_progress_bars_disabled as off;"
                "print(console.verbose(), os.environ.get('HF_HUB_DISABLE_PROGRESS_BARS'), off())")
        child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                               check=True).stdout.split()
    finally:  # what setup(True) set, not through monkeypatch (whose undo would restore it)
        console.setup(False)
    assert not console.verbose()
    assert child == ["True", "None", "False"]


def test_a_verbose_command_does_not_make_the_next_one_in_the_process_verbose(monkeypatch):
    """``main(["train", "--verbose", ...])`` then ``main(["export", ...])`` in one process
    (a notebook, the test session): the second is quiet again; a user's own
    VLCOHORT_VERBOSE=1 stays."""
    monkeypatch.delenv(console.VERBOSE_ENV, raising=False)
    console.setup(True)
    assert console.verbose()
    console.setup(False)
    assert not console.verbose()
    monkeypatch.setenv(console.VERBOSE_ENV, "1")  # the user's
    console.setup(False)
    assert console.verbose()
    monkeypatch.delenv(console.VERBOSE_ENV)
    console.setup(False)
