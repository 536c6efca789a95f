"""Symbolic links planted in a run folder at the names the last writers use: the resolved
config of a comparison run and of each arm, ``summary.json``, ``comparison.png``, each arm's
``train.log``, the W&B run id (``trackers.json``) and the warm-up folder with its weights
and fingerprint. Each link points at a file outside the run holding known content; after
the write that file is unchanged, and the write either replaced the link with a plain file
or was refused with one line naming the path (real files, real models, real processes)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers.cache import _tiny_cache  # noqa: F401 - an autouse fixture, imported to apply here
from tests.helpers.run_folder import VICTIM_TEXT, _victim
from vlcohort import run_folder
from vlcohort.config import load_config, save_resolved
from vlcohort.monitoring import trackers
from vlcohort.recipes import arms
from vlcohort.training import warmup


def _plant(link: Path, target: Path) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return link


def _replaced(path: Path) -> None:
    """``path`` is now a plain file of the run's own, not the planted link."""
    assert not path.is_symlink() and path.is_file(), path


def _one_line_naming(err: Exception, path: Path) -> None:
    text = str(err)
    assert "\n" not in text and str(path) in text, text


def _comparison_config(run: Path):
    return load_config(None, [f"run.output_dir={run}", "arms=[co_rl, ttrl]", "run.steps=1",
                              "log.progress=false", "log.plot=false", "log.tensorboard=false"])


# ------------------------------------------------------------------------- config.yaml


@pytest.mark.parametrize("name", ["config.yaml", "config.yaml.tmp", ".config.yaml.tmp"])
def test_the_resolved_config_never_goes_through_a_link(tmp_path, name):
    """``save_resolved`` (the comparison run's and each arm's ``config.yaml``) with a link
    at the final name, at the temporary it used to write, and at the one it writes now."""
    victim = _victim(tmp_path / "outside")
    run = tmp_path / "run"
    _plant(run / name, victim)
    cfg = _comparison_config(run)
    path = save_resolved(cfg, run)
    assert victim.read_text() == VICTIM_TEXT
    _replaced(path)
    assert load_config(path).arms == ["co_rl", "ttrl"]


# ------------------------------------------------------------------------- trackers.json


@pytest.mark.parametrize("name", ["trackers.json", ".trackers.json.tmp"])
def test_the_wandb_run_id_never_goes_through_a_link(tmp_path, name):
    victim = _victim(tmp_path / "outside")
    run = tmp_path / "run"
    _plant(run / name, victim)
    trackers._save_wandb_id(run, "abc12345")
    assert victim.read_text() == VICTIM_TEXT
    _replaced(run / "trackers.json")
    assert trackers._saved_wandb_id(run) == "abc12345"


# ------------------------------------------------------------------ summary, comparison


def _finished_arms(run: Path, cfg) -> None:
    """Two arms' ``metrics.jsonl`` with held-out accuracies, as finished arms leave them."""
    for method in cfg.arms:
        records = [{"step": s, **{f"eval/{mc.name}/{t}/acc": 0.25 + 0.1 * s
                                  for mc in cfg.agents for t in cfg.data.tasks}}
                   for s in (0, 1)]
        (run / method).mkdir(parents=True, exist_ok=True)
        (run / method / "metrics.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in records))


@pytest.mark.parametrize("name", ["summary.json", ".summary.json.tmp", "comparison.png",
                                  ".comparison.png.tmp"])
def test_the_comparison_report_never_goes_through_a_link(tmp_path, capsys, name):
    victim = _victim(tmp_path / "outside")
    run = tmp_path / "run"
    cfg = _comparison_config(run)
    _finished_arms(run, cfg)
    _plant(run / name, victim)
    arms.report(cfg, run, 1.0, 2.0, 3.0)
    assert victim.read_text() == VICTIM_TEXT
    _replaced(run / "summary.json")
    _replaced(run / "comparison.png")
    assert set(json.loads((run / "summary.json").read_text())["methods"]) == {"co_rl", "ttrl"}
    assert (run / "comparison.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------- parallel arms


def test_parallel_arms_write_their_logs_and_configs_beside_no_link(tmp_path, capsys):
    """``_run_parallel`` for real: each arm's ``vlcohort train`` process starts, finds an
    earlier run in its folder and exits 2 at once. The links planted at one arm's
    ``train.log`` and the other's ``config.yaml`` are replaced; the files they pointed at
    keep their content, and each log holds its arm's own one-line refusal."""
    victim_log = _victim(tmp_path / "outside", "log.txt")
    victim_cfg = _victim(tmp_path / "outside", "cfg.yaml")
    run = tmp_path / "run"
    cfg = _comparison_config(run)
    arm_cfgs = [arms.arm_config(cfg, m, run, {}) for m in cfg.arms]
    for arm in arm_cfgs:  # an earlier run: the new one is refused before loading a model
        (run / arm.method).mkdir(parents=True)
        (run / arm.method / "metrics.jsonl").write_text('{"step": 1}\n')
    _plant(run / "co_rl" / "train.log", victim_log)
    _plant(run / "ttrl" / "config.yaml", victim_cfg)
    assert arms._run_parallel(arm_cfgs) == 2
    assert victim_log.read_text() == VICTIM_TEXT
    assert victim_cfg.read_text() == VICTIM_TEXT
    for method in ("co_rl", "ttrl"):
        _replaced(run / method / "config.yaml")
        _replaced(run / method / "train.log")
        log = (run / method / "train.log").read_text()
        assert "holds an earlier run" in log and "Traceback" not in log, log


def test_an_arm_folder_planted_as_a_link_is_refused(tmp_path):
    """An arm's folder is inside the comparison run: a link there is refused, naming it,
    before the arm's config is written into the folder it points at."""
    outside = tmp_path / "outside"
    outside.mkdir()
    run = tmp_path / "run"
    cfg = _comparison_config(run)
    _plant(run / "ttrl", outside)
    with pytest.raises(run_folder.RunFolderError) as e:
        arms._run_parallel([arms.arm_config(cfg, m, run, {}) for m in cfg.arms])
    _one_line_naming(e.value, run / "ttrl")
    assert list(outside.iterdir()) == []


# -------------------------------------------------------------------------- warm-up


@pytest.fixture(scope="module")
def warm_cfg():
    return load_config(None, [
        "method=ttrl", "agents=[{name: A, path: 'tiny:qwen2_5_vl'}]",
        "agents.0.warmup.steps=1", "agents.0.warmup.uniform_steps=0",
        "agents.0.warmup.batch_size=2", "agents.0.warmup.tasks=[fg_colour]"])


@pytest.fixture(scope="module")
def warm_agent(tmp_path_factory, warm_cfg):
    os.environ["VLCOHORT_CACHE"] = str(tmp_path_factory.getbasetemp() / "vlcohort-cache")
    from vlcohort.training.agent import build_agent

    return build_agent(warm_cfg.agents[0])


def _save(agent, folder: Path) -> Path:
    return warmup.save_weights(agent.model, agent.adapter.processor, folder)


@pytest.mark.parametrize("name", ["config.json", "model.safetensors", "tokenizer_config.json"])
def test_warmed_up_weights_never_go_through_a_link_in_their_folder(tmp_path, warm_agent,
                                                                   name):
    """A link planted among the warm-up folder's files (``save_pretrained`` opens them by
    name and follows links): the saved folder replaces it, the target is untouched."""
    victim = _victim(tmp_path / "outside")
    folder = warmup.warmed_up_folder(tmp_path / "run", "A")
    _plant(folder / name, victim)
    _save(warm_agent, folder)
    assert victim.read_text() == VICTIM_TEXT
    _replaced(folder / name)
    assert (folder / "model.safetensors").stat().st_size > 1000
    assert not [p for p in folder.iterdir() if p.is_symlink()]
    assert [p.name for p in folder.parent.iterdir()] == ["A"]  # no temporary left


@pytest.mark.parametrize("where", ["warmup", "warmup/A"])
def test_a_warm_up_folder_planted_as_a_link_is_refused(tmp_path, warm_agent, where):
    """A link at ``warmup/`` or ``warmup/<agent>/``: refused, naming it, when the run
    builds the warm-up folder's path, checks for a reusable warm-up (before any training)
    and when it saves."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "A").mkdir()
    run = tmp_path / "run"
    _plant(run / where, outside)
    folder = run / "warmup" / "A"
    for attempt in (lambda: warmup.warmed_up_folder(run, "A"),
                    lambda: warmup.reusable(folder, "key"), lambda: _save(warm_agent, folder)):
        with pytest.raises(run_folder.RunFolderError) as e:
            attempt()
        _one_line_naming(e.value, run / where)
    assert list(outside.iterdir()) == [outside / "A"] and not list((outside / "A").iterdir())


def test_warm_up_saves_beside_no_link(tmp_path, warm_agent, warm_cfg):
    """The whole warm-up (one step) into a folder with a link planted at its weights: the
    weights land in the folder, and the fingerprint replaces a link at its own name."""
    victim = _victim(tmp_path / "outside")
    victim_fp = _victim(tmp_path / "outside", "fp.json")
    folder = warmup.warmed_up_folder(tmp_path / "run", "A")
    _plant(folder / "model.safetensors", victim)
    stats = warmup.warm_up(warm_agent, warm_cfg.agents[0], warm_cfg, folder, seed=0,
                           log=lambda *_: None)
    _replaced(folder / "model.safetensors")
    _plant(folder / warmup.FINGERPRINT, victim_fp)
    warmup.save_fingerprint(folder, "k1", stats)
    assert victim.read_text() == VICTIM_TEXT and victim_fp.read_text() == VICTIM_TEXT
    _replaced(folder / warmup.FINGERPRINT)
    assert warmup.reusable(folder, "k1")
