"""The command line, run in-process on the embedded default (tiny models, offline)."""

from __future__ import annotations

import yaml

from vlcohort.cli import main


def test_config_prints_resolved_and_totals(capsys):
    assert main(["config", "--set", "rollout.prompts_per_step=2"]) == 0
    out = capsys.readouterr().out
    assert "prompts_per_step: 2" in out and "sequences_per_step (A x B x G): 32" in out


def test_config_error_exit_code_and_message(capsys):
    assert main(["config", "run.stepz=1"]) == 2
    assert "run.stepz: unknown key" in capsys.readouterr().err


def test_train_default_runs_setup_and_says_what_is_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    assert main(["train", f"run.output_dir={run}"]) == 0
    captured = capsys.readouterr()
    assert "agent A:" in captured.out and "agent B:" in captured.out
    assert "probe completion" in captured.out
    assert "NOT BUILT YET" in captured.err
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["run"]["output_dir"] == str(run) and len(saved["agents"]) == 2
