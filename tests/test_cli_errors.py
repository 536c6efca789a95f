"""Errors for people: each bad input to ``vlcohort train`` is one message that names the
file / key and says what to do, exit code 2, no traceback, before any work starts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _cases(tmp):
    no_config = tmp / "empty_folder"
    no_config.mkdir()
    foreign = tmp / "blip"
    foreign.mkdir()
    (foreign / "config.json").write_text(json.dumps({"model_type": "blip-2"}))
    empty = tmp / "empty.jsonl"
    empty.write_text("")
    run_without_config = tmp / "not_a_run"
    run_without_config.mkdir()
    return [
        ("bad model path", ["agents.0.path=/nonexistent/model"], "agents.0.path: /nonexistent/model"),
        ("folder without config", [f"agents.0.path={no_config}"], "no config.json"),
        ("unknown family", [f"agents.0.path={foreign}"],
         "'blip-2' has no adapter and AutoModelForCausalLM cannot load it"),
        ("unknown tiny model", ["agents.0.path=tiny:nope"], "unknown tiny model 'tiny:nope'"),
        ("missing data file", ["data.source=file", f"data.path={tmp}/missing.jsonl"],
         "data.path: " + str(tmp / "missing.jsonl") + " does not exist"),
        ("empty data file", ["data.source=file", f"data.path={empty}", "arms=[]"],
         "no line is a JSON object"),
        ("unknown config key", ["rollout.prompts_per_stepp=2"], "prompts_per_stepp"),
        ("wrong config type", ["rollout.prompts_per_step=many"], "rollout.prompts_per_step"),
        ("resume a folder that is no run", ["--resume", str(run_without_config)],
         "no config.yaml there"),
    ]


@pytest.mark.parametrize("index", range(9))
def test_bad_input_is_one_message_exit_2_no_traceback(tmp_path, index):
    name, args, expected = _cases(tmp_path)[index]
    out = subprocess.run([sys.executable, "-m", "vlcohort", "train", *args,
                          f"run.output_dir={tmp_path / 'run'}"], capture_output=True, text=True,
                         timeout=300, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1",
                                           "VLCOHORT_CACHE": str(tmp_path / "cache")})
    assert out.returncode == 2, f"{name}: exit {out.returncode}\n{out.stderr[-2000:]}"
    assert expected in out.stderr, f"{name}: {out.stderr[-2000:]}"
    assert "Traceback" not in out.stderr + out.stdout, name
    assert not (tmp_path / "run" / "checkpoints").exists(), f"{name}: work started"
