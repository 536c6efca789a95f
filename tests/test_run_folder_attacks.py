"""Run folders attacked as a hostile colleague would: simultaneous runs on one folder, a
new run started over a finished one, symbolic links planted where a resume writes, and a
``checkpoints/latest`` naming something outside the run (real runs of the trainer on
tiny models, real processes, real files)."""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import shutil
import subprocess
import sys

import pytest

from tests.helpers.cache import _tiny_cache  # noqa: F401 - an autouse fixture, imported to apply here
from tests.helpers.run_folder import VICTIM_TEXT, _victim
from tests.helpers.train import FAST
from vlcohort import run_folder, runlock
from vlcohort.cli import main
from vlcohort.training import checkpoint as ckpt

#: A process that takes a folder's lock, says so, and holds it.
HOLD_THE_LOCK = ("import sys, time; from vlcohort import runlock; "
                 "runlock.acquire(sys.argv[1]); print('held', flush=True); time.sleep(120)")


def _one_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert "Traceback" not in err
    return lines[-1]


# ---------------------------------------------------------------------------- the lock


def _contender(run_dir: str, start, done, results) -> None:
    """One process of the race: wait for the start, try the lock, report, and hold on to
    whatever it got until every contender has tried."""
    start.wait()
    try:
        runlock.acquire(run_dir)
        results.put("won")
    except runlock.RunLockError as e:
        results.put("refused" if "another run is writing" in str(e) else f"other: {e}")
    done.wait()


def test_100_processes_racing_for_one_folder_exactly_one_wins(tmp_path):
    n = 100
    ctx = multiprocessing.get_context("fork")
    start, done, results = ctx.Barrier(n), ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_contender, args=(str(tmp_path / "run"), start, done, results))
             for _ in range(n)]
    for p in procs:
        p.start()
    got = [results.get(timeout=120) for _ in range(n)]
    for p in procs:
        p.join(timeout=60)
    assert sorted(set(got)) == ["refused", "won"], got
    assert got.count("won") == 1
    # the winner exited without releasing: its file stays, its lock went with it
    assert runlock.holder(tmp_path / "run") is None
    runlock.acquire(tmp_path / "run")
    runlock.release(tmp_path / "run")


def _stalled_contender(run_dir: str, start, finish, results) -> None:
    start.wait()
    try:
        runlock.acquire(run_dir)
        results.put("won")
    except runlock.RunLockError:
        results.put("refused")
    finish.wait()  # hold whatever it got until the test is done


def test_a_contender_stalled_between_check_and_write_does_not_also_win(tmp_path):
    """The race made deterministic: a FIFO planted at the per-process temporary name a
    check-then-write lock writes its record to stalls contender A right after its check
    (a FIFO's open blocks until a reader comes); B takes the lock meanwhile; then A is
    let go. An atomic lock has no such gap: A wins or is refused outright."""
    run = tmp_path / "run"
    run.mkdir()
    ctx = multiprocessing.get_context("fork")
    results_a, results_b = ctx.Queue(), ctx.Queue()
    go_a, go_b, finish = ctx.Event(), ctx.Event(), ctx.Event()
    a = ctx.Process(target=_stalled_contender, args=(str(run), go_a, finish, results_a))
    a.start()
    os.mkfifo(run / f"{runlock.LOCK}.{a.pid}.tmp")
    go_a.set()
    try:
        first = results_a.get(timeout=2)  # an atomic lock answers at once
    except queue.Empty:  # A is stalled after its check
        first = None
    b = ctx.Process(target=_stalled_contender, args=(str(run), go_b, finish, results_b))
    b.start()
    go_b.set()
    second = results_b.get(timeout=60)
    fifo = os.open(run / f"{runlock.LOCK}.{a.pid}.tmp", os.O_RDONLY | os.O_NONBLOCK)
    try:
        if first is None:  # let the stalled writer through
            first = results_a.get(timeout=60)
    finally:
        os.close(fifo)
    finish.set()
    a.join(timeout=60), b.join(timeout=60)
    assert sorted([first, second]) == ["refused", "won"]


def test_a_killed_holder_frees_the_folder_at_once(tmp_path):
    run = tmp_path / "run"
    live = subprocess.Popen([sys.executable, "-c", HOLD_THE_LOCK, str(run)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout.readline().strip() == "held"
        assert runlock.holder(run)["pid"] == live.pid
        with pytest.raises(runlock.RunLockError, match=f"pid {live.pid}"):
            runlock.acquire(run)
    finally:
        live.kill()
        live.wait()
    assert runlock.holder(run) is None
    runlock.acquire(run)
    runlock.release(run)


def test_a_lock_file_planted_as_a_link_is_refused_not_written_through(tmp_path):
    victim = _victim(tmp_path / "elsewhere")
    run = tmp_path / "run"
    run.mkdir()
    (run / runlock.LOCK).symlink_to(victim)
    with pytest.raises(runlock.RunLockError, match="symbolic link is refused"):
        runlock.acquire(run)
    assert victim.read_text() == VICTIM_TEXT


def test_simultaneous_cli_launches_on_one_folder_run_exactly_once(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", "vlcohort", "train", *FAST, "run.steps=1",
                               f"run.output_dir={run}"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outcomes = [(p.wait(timeout=600), p.stderr.read()) for p in procs]
    codes = sorted(rc for rc, _ in outcomes)
    assert codes[0] == 0 and all(rc in (1, 2) for rc in codes[1:]), outcomes
    for rc, err in outcomes:
        if rc:  # held by the winner, or (if it had already finished) its finished run
            line = _one_line(err)
            assert "another run is writing" in line or "holds an earlier run" in line, err
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1]


# ------------------------------------------------------------------ a new run over an old one


def test_a_new_run_over_a_finished_one_is_refused_unless_overwrite(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("mine")  # a folder holding no run files is fine to start in
    assert main(["train", *FAST, "run.steps=2", "checkpoint.every=1",
                 f"run.output_dir={run}"]) == 0
    capsys.readouterr()
    before = {name: (run / name).read_bytes() for name in ("config.yaml", "metrics.jsonl")}

    assert main(["train", *FAST, "run.steps=1", "optim.lr=0.002", f"run.output_dir={run}"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert str(run) in line and f"--resume {run}" in line and "--overwrite" in line
    assert {name: (run / name).read_bytes() for name in before} == before
    assert (run / "checkpoints/step-2/state.json").is_file()

    assert main(["train", "--resume", str(run), "--overwrite"]) == 2
    assert "give one of them" in _one_line(capsys.readouterr().err)

    # --overwrite clears the old run's files (a link among them: the link, not its target)
    outside = _victim(tmp_path / "elsewhere")
    shutil.rmtree(run / "plots", ignore_errors=True)
    (run / "plots").symlink_to(outside.parent, target_is_directory=True)
    assert main(["train", *FAST, "run.steps=1", "--overwrite", "optim.lr=0.002",
                 f"run.output_dir={run}"]) == 0
    assert "--overwrite: removed" in capsys.readouterr().out
    assert outside.read_text() == VICTIM_TEXT
    assert (run / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in (run / "checkpoints").glob("step-*")) == ["step-1"]
    assert [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()] == [1]
    assert "lr: 0.002" in (run / "config.yaml").read_text()


def test_earlier_run_and_clear_run_on_files_alone(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    assert run_folder.earlier_run(run) == []
    run_folder.mark_run(run)  # as a new run does first: --overwrite clears only marked runs
    run_folder.new_sub_run(run, "arm")
    (run / "arm" / "metrics.jsonl").write_text("")
    (run / "summary.json").write_text("{}")
    (run / "warmup").mkdir()
    (run / "mine.txt").write_text("kept")
    outside = _victim(tmp_path / "elsewhere")
    (run / "checkpoints").symlink_to(outside.parent, target_is_directory=True)
    assert run_folder.earlier_run(run) == ["checkpoints", "summary.json", "arm/"]
    assert sorted(run_folder.clear_run(run)) == ["arm/", "checkpoints", "summary.json"]
    assert sorted(p.name for p in run.iterdir()) == [".vlcohort-run", "mine.txt", "warmup"]
    assert outside.read_text() == VICTIM_TEXT
    # the config file a run is started from is not an earlier run of its own folder
    (run / "config.yaml").write_text("method: ttrl\n")
    assert run_folder.earlier_run(run, config_file=run / "config.yaml") == []
    assert run_folder.earlier_run(run, config_file=tmp_path / "other.yaml") == ["config.yaml"]


# ------------------------------------------------------------------ links planted for a resume


@pytest.fixture
def run1(tmp_path):
    """A finished 1-step run."""
    run = tmp_path / "run"
    assert main(["train", *FAST, "run.steps=1", f"run.output_dir={run}"]) == 0
    assert (run / "checkpoints/step-1/state.json").is_file()
    return run


def test_links_planted_at_temporaries_do_not_redirect_a_resume(run1, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    planted = {run1 / ".metrics.jsonl.tmp": _victim(elsewhere, "metrics"),
               run1 / "checkpoints/.latest.tmp": _victim(elsewhere, "latest"),
               run1 / "config.yaml.tmp": _victim(elsewhere, "config1"),
               run1 / ".config.yaml.tmp": _victim(elsewhere, "config2"),
               run1 / "plots/.dynamics.png.tmp": _victim(elsewhere, "png")}
    (run1 / "plots").mkdir(exist_ok=True)
    for link, target in planted.items():
        link.symlink_to(target)
    assert main(["train", "--resume", str(run1), "run.steps=2", "log.plot=true"]) == 0
    for target in planted.values():
        assert target.read_text() == VICTIM_TEXT, target
    assert json.loads((run1 / "checkpoints/step-2/state.json").read_text())["step"] == 2
    assert (run1 / "checkpoints/latest").read_text() == "step-2"
    assert (run1 / "plots/dynamics.png").stat().st_size > 1000


def test_links_planted_at_final_names_are_replaced_or_refused(run1, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    latest_target = _victim(elsewhere, "latest-target")
    (run1 / "checkpoints/latest").unlink()
    (run1 / "checkpoints/latest").symlink_to(latest_target)
    assert main(["train", "--resume", str(run1), "run.steps=2"]) == 1
    assert "latest: a symbolic link, refused" in _one_line(capsys.readouterr().err)
    assert latest_target.read_text() == VICTIM_TEXT
    # the written files themselves: a rename replaces a link, an append refuses it
    config_target = _victim(elsewhere, "config-target")
    run_folder.write_text(run1 / "x.yaml", "a")
    (run1 / "x.yaml").unlink()
    (run1 / "x.yaml").symlink_to(config_target)
    run_folder.write_text(run1 / "x.yaml", "new")
    assert (run1 / "x.yaml").read_text() == "new" and not (run1 / "x.yaml").is_symlink()
    assert config_target.read_text() == VICTIM_TEXT
    (run1 / "q.jsonl").symlink_to(config_target)
    with pytest.raises(run_folder.RunFolderError, match="q.jsonl: a symbolic link"):
        run_folder.open_append(run1 / "q.jsonl")
    assert config_target.read_text() == VICTIM_TEXT


def test_a_checkpoints_folder_planted_as_a_link_is_refused(run1, tmp_path, capsys):
    other = tmp_path / "other_run_checkpoints"
    shutil.move(run1 / "checkpoints", other)
    (run1 / "checkpoints").symlink_to(other, target_is_directory=True)
    before = sorted(p.name for p in other.iterdir())
    assert main(["train", "--resume", str(run1), "run.steps=2"]) == 1
    line = _one_line(capsys.readouterr().err)
    assert f"{run1 / 'checkpoints'}: a symbolic link, refused" in line
    assert sorted(p.name for p in other.iterdir()) == before
    with pytest.raises(run_folder.RunFolderError, match="symbolic link where a folder belongs"):
        ckpt.checkpoints_root(run1)


# ------------------------------------------------------------------ `latest` outside the run


@pytest.mark.parametrize("pointer", ["../../elsewhere/step-1", "ABSOLUTE", "step-1/../../x",
                                     "linked"])
def test_latest_naming_a_folder_outside_the_run_is_refused(run1, tmp_path, capsys, pointer):
    outside = tmp_path / "elsewhere" / "step-1"
    shutil.copytree(run1 / "checkpoints/step-1", outside)
    root = run1 / "checkpoints"
    if pointer == "ABSOLUTE":
        pointer = str(outside)
    elif pointer == "linked":  # a plain name, but the folder is a link out of the run
        shutil.rmtree(root / "step-1")
        (root / "step-1").symlink_to(outside, target_is_directory=True)
        pointer = "step-1"
    (root / "latest").write_text(pointer)
    with pytest.raises(ckpt.CheckpointError, match="not a checkpoint folder of this run"):
        ckpt.latest_checkpoint(run1)
    assert main(["train", "--resume", str(run1), "run.steps=2"]) == 1
    line = _one_line(capsys.readouterr().err)
    assert "latest: names" in line and "refused" in line and "delete" in line
    assert main(["export", str(run1), "--out", str(tmp_path / "exported")]) == 2
    _one_line(capsys.readouterr().err)
    assert not (tmp_path / "exported").exists()
    assert not (outside.parent / "step-2").exists()
    assert not (run1 / "checkpoints/step-2").exists()


def test_tracker_folders_planted_as_links_are_refused(run1, tmp_path, capsys):
    from vlcohort.monitoring.metrics import trackers_in

    target = tmp_path / "elsewhere"
    target.mkdir()
    (run1 / "tensorboard").symlink_to(target, target_is_directory=True)
    assert main(["train", "--resume", str(run1), "run.steps=2", "log.tensorboard=true"]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{run1 / 'tensorboard'}: a symbolic link" in line
    assert list(target.iterdir()) == []  # TensorBoard wrote nothing through the link
    (run1 / "tensorboard").unlink()
    victim = _victim(target)
    (run1 / ".trackers.json.tmp").symlink_to(victim)
    trackers_in(run1, "trackers.json")
    assert not (run1 / ".trackers.json.tmp").is_symlink() and victim.read_text() == VICTIM_TEXT
