"""``vlcohort plan`` offline from a folder of published config.json copies (``--configs``;
a clone's ``bench/published_configs`` by default), and its one-line errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import huggingface_hub.constants
import pytest

from vlcohort.cli import main
from vlcohort.plan import CLONE_CONFIGS, SOURCE_TREE_CONFIGS, config_folder, default_configs

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "bench" / "published_configs"
TEXT_RECIPE = "configs/corl_text_qwen25_3b_llama32_3b_math345.yaml"  # the smallest paper pair


@pytest.fixture
def empty_hub_cache(tmp_path, monkeypatch):
    """An empty hub cache, so that only a folder of copies can supply a hub id's config."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))


def test_a_clone_plans_the_paper_recipe_from_its_copies_by_default(empty_hub_cache, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert default_configs() == SOURCE_TREE_CONFIGS == CONFIGS
    assert main(["plan", TEXT_RECIPE, "--gpus", "8", "--gpu-gib", "80", "--json"]) == 0
    p = json.loads(capsys.readouterr().out)
    assert p["fits"] and [a["params"] for a in p["agents"]] == [3_085_938_688, 3_212_749_824]
    assert ("config.json of Qwen/Qwen2.5-3B-Instruct, meta-llama/Llama-3.2-3B-Instruct: the "
            "copies in bench/published_configs (--configs DIR for another folder)") in p["notes"]


def test_configs_option_names_another_folder(tmp_path, empty_hub_cache, capsys):
    mine = tmp_path / "mine"
    shutil.copytree(CONFIGS / "Qwen--Qwen3-1.7B-Base", mine / "Qwen--Qwen3-1.7B-Base")
    (mine / "README.md").write_text("plain files beside the folders are left alone\n")
    args = ["plan", "agents.0.path=Qwen/Qwen3-1.7B-Base", "agents.1.path=tiny:qwen2", "--gpus", "1",
            "--configs", str(mine)]
    assert main(args) == 1  # the embedded default's 4096-token prompts do not fit on one GPU
    out = capsys.readouterr().out
    assert out.splitlines()[1] == (f"# config.json of Qwen/Qwen3-1.7B-Base: the copies in {mine} "
                                   "(--configs DIR for another folder)")
    assert "1.72B" in out  # and the knob search re-plans from the same folder:
    assert "A does not fit; first knob: agents.0.gradient_checkpointing=true" in out


def _folder(tmp_path, case):
    bad = tmp_path / "configs"
    if case == "not a folder":
        return bad, "not a folder; give a folder of <org>--<name>/config.json"
    if case == "badly named":
        (bad / "Qwen3-1.7B-Base").mkdir(parents=True)
        return bad, "Qwen3-1.7B-Base: not named <org>--<name>"
    if case == "no config.json":
        (bad / "Qwen--Qwen3-1.7B-Base").mkdir(parents=True)
        return bad, "Qwen--Qwen3-1.7B-Base has no config.json"
    shutil.copytree(CONFIGS / "Qwen--Qwen3-1.7B-Base", bad / "Qwen--Qwen3-1.7B-Base")
    return bad, (f"agents.1.path: someone/not-cached's config.json is neither in {bad} (as "
                 "someone--not-cached/config.json) nor in the hub cache")


@pytest.mark.parametrize("case", ["not a folder", "badly named", "no config.json", "id not there"])
def test_bad_configs_folder_is_a_one_line_error(case, tmp_path, empty_hub_cache, capsys):
    folder, want = _folder(tmp_path, case)
    assert main(["plan", "agents.1.path=someone/not-cached", "--gpus", "1", "--configs", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert want in err and len(err.splitlines()) == 1, err


def test_offline_error_names_the_clone_folder_that_holds_the_copy(tmp_path, empty_hub_cache, monkeypatch):
    """vlcohort installed elsewhere, run in a clone: the error says the folder is here and
    how to pass it."""
    from vlcohort.typed_yaml import ConfigError

    shutil.copytree(CONFIGS / "Qwen--Qwen3-1.7B-Base", tmp_path / CLONE_CONFIGS / "Qwen--Qwen3-1.7B-Base")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as e:
        config_folder("Qwen/Qwen3-1.7B-Base", "agents.0.path", None)
    assert str(e.value) == ("agents.0.path: Qwen/Qwen3-1.7B-Base's config.json is not in the hub "
                            "cache and `vlcohort plan` never downloads, but bench/published_configs "
                            "here holds a copy: pass --configs bench/published_configs")
    with pytest.raises(ConfigError, match="hf download someone/else config.json"):
        config_folder("someone/else", "agents.0.path", None)  # no copy here: the download
    assert config_folder("Qwen/Qwen3-1.7B-Base", "agents.0.path", CLONE_CONFIGS) == (
        CLONE_CONFIGS / "Qwen--Qwen3-1.7B-Base")
