"""Bad config inputs are one-line errors naming the file, line or key, never tracebacks and
never silently taken: a file that is not UTF-8, a key written twice, a NaN / infinite /
non-positive learning rate, and an override value whose ``#`` YAML would read as a comment.
Each case goes through :func:`load_config` and through the real ``vlcohort config`` CLI."""

from __future__ import annotations

import json

import pytest
import yaml

from vlcohort.cli import main
from vlcohort.config import load_config, train_base
from vlcohort.typed_yaml import ConfigError


def _cli_error(capsys, *args, command: str = "config") -> str:
    """``vlcohort config ARGS`` (or another command): exit 2 and exactly one line on
    stderr, returned."""
    assert main([command, *args]) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


def _load(*overrides: str):
    """The config ``vlcohort config OVERRIDES`` resolves (the recipe it builds on too)."""
    recipe, items, _ = train_base(None, list(overrides))
    return load_config(recipe, items)


# ----------------------------------------------------------------------------- encoding


def test_a_file_that_is_not_utf8_names_the_file_line_and_the_fix(tmp_path, capsys):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("run:\n  name: café\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1\.yaml: line 2: byte 0xe9 is not UTF-8; "
                                          r"save the file as UTF-8"):
        load_config(path)
    for command in ("config", "train"):
        line = _cli_error(capsys, str(path), command=command)
        assert str(path) in line and "save the file as UTF-8" in line


def test_a_utf8_file_with_a_byte_order_mark_still_loads(tmp_path):
    path = tmp_path / "bom.yaml"
    path.write_bytes(b"\xef\xbb\xbfrun:\n  name: caf\xc3\xa9\n")
    assert load_config(path).run.name == "café"


# ----------------------------------------------------------------------------- duplicate keys


@pytest.mark.parametrize("text, key, line, first", [
    ("run:\n  steps: 3\n  name: x\n  steps: 4\n", "steps", 4, 2),          # nested
    ("run:\n  steps: 3\noptim:\n  lr: 1e-3\nrun:\n  name: y\n", "run", 5, 1),  # top level
    ("agents:\n  - {name: A, path: 'tiny:qwen2', name: B}\n", "name", 2, 2),   # flow mapping
    ("grpo:\n  clip_low: 0.2\n  clip_high: 0.28\n  clip_low: 0.1\n", "clip_low", 4, 2),
])
def test_a_duplicate_key_at_any_depth_names_the_key_and_its_lines(tmp_path, capsys, text,
                                                                    key, line, first):
    path = tmp_path / "dup.yaml"
    path.write_text(text)
    msg = f"dup.yaml: line {line}: duplicate key '{key}' (first set at line {first})"
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        load_config(path)
    assert msg in _cli_error(capsys, str(path))
    assert msg in _cli_error(capsys, str(path), command="train")


def test_a_duplicate_key_in_a_base_recipe_is_named_in_that_file(tmp_path):
    (tmp_path / "base.yaml").write_text("rollout:\n  temperature: 1.0\n  temperature: 0.7\n")
    (tmp_path / "top.yaml").write_text("base: base.yaml\nrun:\n  steps: 2\n")
    with pytest.raises(ConfigError, match=r"base\.yaml: line 3: duplicate key 'temperature'"):
        load_config(tmp_path / "top.yaml")


def test_a_merge_key_may_still_be_overridden_in_its_mapping(tmp_path):
    """``<<: *anchor`` then one of its keys is YAML's way to override, not a duplicate."""
    path = tmp_path / "merge.yaml"
    path.write_text("x-common: &common {temperature: 0.5, top_p: 0.9}\n"
                    "rollout:\n  <<: *common\n  temperature: 0.8\n")
    from vlcohort.typed_yaml import read_yaml_mapping

    assert read_yaml_mapping(path)["rollout"] == {"temperature": 0.8, "top_p": 0.9}


def test_a_duplicate_key_in_an_override_value_is_an_error(capsys):
    override = "agents=[{name: A, path: 'tiny:qwen2', path: 'tiny:gemma3'}]"
    with pytest.raises(ConfigError, match=r"override 'agents': duplicate key 'path'"):
        load_config(None, [override])
    assert "duplicate key 'path'" in _cli_error(capsys, override)


# ----------------------------------------------------------------------------- numbers


@pytest.mark.parametrize("override, message", [
    ("optim.lr=nan", "optim.lr: nan is not a finite number"),
    ("optim.lr=.nan", "optim.lr: nan is not a finite number"),
    ("optim.lr=inf", "optim.lr: inf is not a finite number"),
    ("optim.lr=-.inf", "optim.lr: -inf is not a finite number"),
    ("optim.lr=1e999", "optim.lr: inf is not a finite number"),
    ("optim.lr=-1", "optim.lr: -1.0 is not a learning rate > 0"),
    ("optim.lr=0", "optim.lr: 0.0 is not a learning rate > 0"),
    ("agents.0.lr=-1e-5", "agents.0.lr: -1e-05 is not a learning rate > 0"),
    ("agents.0.warmup.lr=nan", "agents.0.warmup.lr: nan is not a finite number"),
    ("optim.betas=[0.9, nan]", "optim.betas.1: nan is not a finite number"),
    ("rollout.temperature=nan", "rollout.temperature: nan is not a finite number"),
    ("rollout.top_p=nan", "rollout.top_p: nan is not a finite number"),
    ("grpo.clip_high=inf", "grpo.clip_high: inf is not a finite number"),
    ("grpo.clip_low=nan", "grpo.clip_low: nan is not a finite number"),
    ("grpo.kl_coef=nan", "grpo.kl_coef: nan is not a finite number"),
    ("grpo.is_cap=inf", "grpo.is_cap: inf is not a finite number"),
    ("grpo.max_grad_norm=nan", "grpo.max_grad_norm: nan is not a finite number"),
    ("grpo.max_grad_norm=-1", "grpo.max_grad_norm: must be >= 0"),
    ("optim.weight_decay=-0.1", "optim.weight_decay: must be >= 0"),
    ("reward.min_share=nan", "reward.min_share: nan is not a finite number"),
    ("monitor.spike_factor=inf", "monitor.spike_factor: inf is not a finite number"),
    ("agents.0.processor={min_pixels: .inf}",
     "agents.0.processor.min_pixels: inf is not a finite number"),
])
def test_non_finite_and_non_positive_numbers_are_refused_at_load(capsys, override, message):
    """Each of these was accepted by ``vlcohort config`` and failed in torch (or trained
    with a comparison that NaN makes always false) once the run started."""
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        _load(override)
    assert message in _cli_error(capsys, override)
    assert message in _cli_error(capsys, override, command="train")


def test_a_nan_in_a_recipe_file_is_refused_too(tmp_path, capsys):
    path = tmp_path / "nan.yaml"
    path.write_text("optim:\n  lr: .nan\n")
    assert "optim.lr: nan is not a finite number" in _cli_error(capsys, str(path))


def test_finite_positive_rates_still_load():
    cfg = _load("optim.lr=1e-6", "agents.0.lr=3e-5", "grpo.max_grad_norm=0")
    assert cfg.optim.lr == 1e-6 and cfg.agents[0].lr == 3e-5 and cfg.grpo.max_grad_norm == 0


# ----------------------------------------------------------------------------- overrides


@pytest.mark.parametrize("override, path", [
    ("data.path=/data/a #1.jsonl", "/data/a #1.jsonl"),       # the shell took the quotes
    ('data.path="/data/a #1.jsonl"', "/data/a #1.jsonl"),     # quotes kept for YAML
    ("data.path=/data/#1.jsonl", "/data/#1.jsonl"),
    ("data.path=#1.jsonl", "#1.jsonl"),                       # YAML: an empty value
])
def test_an_override_value_keeps_its_hash(override, path, capsys):
    cfg = load_config(None, ["data.source=file", override])
    assert cfg.data.path == path
    assert main(["config", "data.source=file", override]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)  # the resolved config, as YAML
    assert printed["data"]["path"] == path


def test_train_looks_for_the_whole_path(tmp_path, capsys):
    """The run is refused for the file named with its ``#``, not for a path cut before it."""
    missing = tmp_path / "a #1.jsonl"
    line = _cli_error(capsys, f"data.path={missing}", command="train")
    assert line.startswith(f"config error: data.path: {missing} does not exist")


def test_hashes_inside_structured_override_values_are_kept():
    cfg = load_config(None, ["data.source=file", "data.path=x.jsonl",
                             'data.where={level: ["#1", a #2]}',
                             "prompt.instruction=Answer #1 # then stop"])
    assert cfg.data.where == {"level": ["#1", "a #2"]}
    assert cfg.prompt.instruction == "Answer #1 # then stop"


def test_an_override_that_is_not_yaml_is_one_line(capsys):
    line = _cli_error(capsys, "optim.betas=[0.9, 0.95")
    assert line.startswith("config error: override 'optim.betas': not valid YAML (line 1")


@pytest.mark.parametrize("name", ["..", ".", "...", "a/b", "a\nb", ""])
def test_an_agent_name_that_is_a_path_is_refused(name):
    """An agent's name becomes a folder (``<output_dir>/warmup/<name>``, checkpoints): an
    agent named ``..`` would make its warm-up folder the run folder itself, which the
    warm-up save replaces. Dots alone, separators and control characters are refused."""
    from vlcohort.typed_yaml import ConfigError

    with pytest.raises(ConfigError, match=r"agents\.0\.name: "):
        load_config(None, ["method=gt_reward", "arms=[]",
                           f"agents=[{{name: {json.dumps(name)}, path: 'tiny:qwen2'}}]"])


def test_a_name_with_inner_dots_is_still_fine():
    cfg = load_config(None, ["method=gt_reward", "arms=[]", "agents=[{name: 'qwen2.5-3b', path: 'tiny:qwen2'}]"])
    assert cfg.agents[0].name == "qwen2.5-3b"
