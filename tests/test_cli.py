"""The command line, run in-process on the embedded default (tiny models, offline)."""

from __future__ import annotations

import yaml

from vlcohort.cli import main


def test_config_prints_resolved_and_totals(capsys):
    assert main(["config", "--set", "rollout.prompts_per_step=2"]) == 0
    out = capsys.readouterr().out
    assert "prompts_per_step: 2" in out and "sequences_per_step (A x B x G): 16" in out


def test_config_error_exit_code_and_message(capsys):
    assert main(["config", "run.stepz=1"]) == 2
    assert "run.stepz: unknown key" in capsys.readouterr().err


def test_train_default_config_runs_and_says_where_results_are(tmp_path, monkeypatch, capsys):
    """The embedded default (two tiny families, peer vote), shortened to 2 steps."""
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    assert main(["train", f"run.output_dir={run}", "run.steps=2", "log.tensorboard=false"]) == 0
    out = capsys.readouterr().out
    assert "[1/2 eta" in out and "step 2 | A:" in out
    assert f"results: {run}" in out
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["run"]["output_dir"] == str(run) and len(saved["agents"]) == 2
    assert (run / "metrics.jsonl").is_file() and (run / "plots" / "dynamics.png").is_file()
    assert (run / "checkpoints" / "step-2" / "A" / "model.safetensors").is_file()


def test_python_dash_m_is_the_same_cli(tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "vlcohort", "config", "run.steps=3"],
                         capture_output=True, text=True, check=True).stdout
    assert "steps: 3" in out


def test_simulate_subcommand_reproduces_the_paper_example(capsys):
    import json

    assert main(["simulate", "--json", "--steps", "150"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert min(out["co_rl"][a]["accuracy"] for a in "AB") >= 0.95
    assert all(abs(out["ttrl"][a]["accuracy"] - 0.5) < 0.1 for a in "AB")
