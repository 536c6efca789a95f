"""An unknown config key names the allowed key it was most likely meant to be, in a recipe
file and in an override, and names none when nothing is close."""

from __future__ import annotations

import pytest

from vlcohort.cli import main
from vlcohort.config import load_config
from vlcohort.typed_yaml import ConfigError


@pytest.mark.parametrize("override,suggestion", [
    ("rollout.rollout_per_prompt=4", "rollout.rollouts_per_prompt"),
    ("agents.0.pathh=tiny:qwen2", "agents.0.path"),
    ("agents.1.warmup.stepz=2", "agents.1.warmup.steps"),
    ("rolout.temperature=0.7", "rollout"),
    ("steps=3", "run.steps"),  # a key written without its section
    ("temperature=0.7", "rollout.temperature or eval.temperature"),
])
def test_override_suggests_the_nearest_key(override, suggestion):
    key = override.split("=")[0].replace("rolout.temperature", "rolout")  # the section is the unknown
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    msg = str(e.value)
    assert msg.startswith(f"{key}: unknown key. Allowed under "), msg
    assert msg.endswith(f"; did you mean {suggestion}?"), msg


@pytest.mark.parametrize("override", ["run.banana=1", "foo=1", "agents.0.xyz=1"])
def test_no_suggestion_when_nothing_is_close(override):
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    assert "unknown key" in str(e.value) and "did you mean" not in str(e.value)


def test_recipe_file_key_suggests_and_the_cli_prints_it(tmp_path, capsys):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("rollout:\n  rollout_per_prompt: 4\n")
    with pytest.raises(ConfigError, match=r"did you mean rollout\.rollouts_per_prompt\?$"):
        load_config(recipe)
    recipe.write_text("agents:\n  - path: tiny:qwen2\n  - pathh: tiny:qwen2\n")
    assert main(["config", str(recipe)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("config error: agents.1.pathh: unknown key") and len(err.splitlines()) == 1
    assert err.endswith("did you mean agents.1.path?"), err
