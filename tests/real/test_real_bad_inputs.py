"""Errors for people around real checkpoints: each bad input to ``vlcohort train`` next to
a real agent is one line that names the key and the fix, exit 2, no traceback, before any
work starts (no checkpoint folder).

The cohort is real (agent A = SmolLM2-135M-Instruct); the bad value is agent B's, so the
message must name ``agents.1`` rather than whatever comes first.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vlcohort.cli import main

DATA = Path(__file__).resolve().parents[1] / "data" / "real_math.jsonl"


def _cases(tmp: Path, gguf_file: Path):
    empty = tmp / "empty_folder"
    empty.mkdir()
    seq2seq = tmp / "t5_like"  # a type transformers knows, but not as a causal LM
    seq2seq.mkdir()
    (seq2seq / "config.json").write_text(json.dumps({"model_type": "t5"}))
    unknown = tmp / "new_arch"  # a type transformers does not know at all
    unknown.mkdir()
    (unknown / "config.json").write_text(json.dumps({"model_type": "my_new_lm"}))
    return {
        "gguf file given directly": (
            [f"agents.1.path={gguf_file}"],
            [f"agents.1.path: {gguf_file} is a GGUF file, not a checkpoint folder",
             f"write gguf:{gguf_file}"]),
        "gguf spec of a missing file": (
            ["agents.1.path=gguf:/nowhere/model.gguf"],
            ["agents.1.path: gguf:/nowhere/model.gguf: no such GGUF file",
             "give gguf:/path/to/model.gguf"]),
        "folder without config.json": (
            [f"agents.1.path={empty}"],
            [f"agents.1.path: {empty}: no config.json", "written by save_pretrained"]),
        "model_type no causal LM class loads": (
            [f"agents.1.path={seq2seq}"],
            ["agents.1.path:", "model_type 't5' has no adapter and AutoModelForCausalLM "
             "cannot load it", "To add a family"]),
        "model_type transformers does not know": (
            [f"agents.1.path={unknown}"],
            ["agents.1.path:", "model_type 'my_new_lm' has no adapter"]),
        "unknown prompt.format": (
            ["prompt.format=r1-zero"],
            ["prompt.format: 'r1-zero' is not a prompt format (auto, chat, r1_zero, plain, "
             "or a path to a .jinja file)"]),
        "unknown agents.N.prompt_format": (
            ["agents.1.prompt_format=missing.jinja"],
            ["agents.1.prompt_format: 'missing.jinja' is not a prompt format",
             "a file path must exist"]),
        "chat format for the base model": (
            ["agents.1.prompt_format=chat"],
            ["agents.1.prompt_format:", "has no chat template (a base model), but the prompt "
             "format is 'chat'", "set prompt.format to auto, r1_zero, plain"]),
    }


CASES = [
    "gguf file given directly", "gguf spec of a missing file", "folder without config.json",
    "model_type no causal LM class loads", "model_type transformers does not know",
    "unknown prompt.format", "unknown agents.N.prompt_format", "chat format for the base model"]


@pytest.mark.parametrize("name", CASES)
def test_bad_input_next_to_a_real_agent_is_one_line_exit_2(name, smollm2_path, tmp_path,
                                                          capsys):
    from vlcohort.processors.gguf import gguf_file

    args, expected = _cases(tmp_path, gguf_file("gguf:smollm2-135m-instruct"))[name]
    run = tmp_path / "run"
    code = main(["train", f"data.path={DATA}", "data.preset=math",
                 "agents=[{name: A, path: 'gguf:smollm2-135m-instruct'}, "
                 "{name: B, path: 'gguf:gemma3-270m'}]", *args, f"run.output_dir={run}"])
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert code == 2, f"{name}: exit {code}\n{err[-2000:]}"
    for text in expected:
        assert text in err, f"{name}: {text!r} not in {err!r}"
    assert len(err.splitlines()) == 1, f"{name}: not one line: {err!r}"
    assert "Traceback" not in captured.err + captured.out, name
    assert not (run / "checkpoints").exists(), f"{name}: work started"
