"""The command line, run in-process on the embedded default (tiny models, offline)."""

from __future__ import annotations

import json

import yaml

from vlcohort.cli import main


def test_config_prints_resolved_and_totals(capsys):
    assert main(["config", "--set", "rollout.prompts_per_step=2"]) == 0
    out = capsys.readouterr().out
    assert "prompts_per_step: 2" in out and "sequences_per_step (A x B x G): 32" in out


def test_config_error_exit_code_and_message(capsys):
    assert main(["config", "run.stepz=1"]) == 2
    assert "run.stepz: unknown key" in capsys.readouterr().err


def test_train_default_recipe_runs_at_tiny_scale(tmp_path, monkeypatch, capsys):
    """The embedded demo recipe end to end (warm-up, two arms, summary, plot), shrunk."""
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    shrink = [f"run.output_dir={run}", "run.steps=2", "eval.every=1", "eval.problems_per_task=4",
              "rollout.prompts_per_step=2", "rollout.rollouts_per_prompt=4",
              "parallel_arms=false"]
    for i in (0, 1):
        shrink += [f"agents.{i}.warmup.steps=2", f"agents.{i}.warmup.uniform_steps=1",
                   f"agents.{i}.warmup.batch_size=4"]
    assert main(["train", *shrink]) == 0
    out = capsys.readouterr().out
    assert "held-out accuracy" in out and f"results: {run}" in out
    summary = json.loads((run / "summary.json").read_text())
    assert set(summary["methods"]) == {"co_rl", "ttrl"}
    assert set(summary["methods"]["co_rl"]) >= {"A", "B", "step"}
    assert (run / "comparison.png").stat().st_size > 1000
    assert (run / "warmup" / "A" / "warmup.json").is_file()
    for arm in ("co_rl", "ttrl"):
        saved = yaml.safe_load((run / arm / "config.yaml").read_text())
        assert saved["method"] == arm and saved["agents"][0]["path"] == str(run / "warmup" / "A")
    # a re-run into the same folder is refused unless --overwrite; that keeps warmup/,
    # so it reuses the warm-up
    assert main(["train", *shrink]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["train", "--overwrite", *shrink]) == 0
    assert "warm-up A: reusing" in capsys.readouterr().out


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
