"""``bench/plan_recipes.py``: the paper recipes planned offline from the published configs.

Two checks make the README's table reproducible: each config in ``bench/published_configs/``
counts, through the planner, exactly the parameters of the real transformers class built on
the meta device from it (and the count its model card publishes), and the table the script
prints is, row for row, the one README.md shows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers.bench import load_script

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "plan_recipes.py"
CONFIGS = ROOT / "bench" / "published_configs"

#: Parameter counts the model cards publish (billions, as docs/plan.md "The paper recipes"
#: lists them): the meta count must round to them.
CARD_BILLIONS = {
    "Qwen/Qwen2.5-VL-3B-Instruct": 3.75, "OpenGVLab/InternVL3_5-2B-HF": 2.35,
    "Qwen/Qwen2.5-VL-7B-Instruct": 8.29, "OpenGVLab/InternVL3_5-8B-HF": 8.53,
    "google/gemma-3-12b-it": 12.19, "Qwen/Qwen2.5-3B-Instruct": 3.09,
    "meta-llama/Llama-3.2-3B-Instruct": 3.21, "Qwen/Qwen3-1.7B-Base": 1.72,
}


@pytest.fixture(scope="module")
def script():
    return load_script("plan_recipes")


def test_every_recipe_checkpoint_has_its_published_config(script):
    """The folder holds exactly the checkpoints the paper recipes name."""
    import yaml

    named = {a["path"] for _, recipes in script.RECIPES for r in recipes
             for a in yaml.safe_load((ROOT / r).read_text())["agents"]}
    assert set(script.published_configs()) == named == set(CARD_BILLIONS)


@pytest.mark.parametrize("folder", sorted(p.name for p in CONFIGS.iterdir() if p.is_dir()))
def test_meta_count_is_the_real_class_count(folder, script):
    """The planner's count (``vlcohort.plan.model_facts``: the family adapter's Auto class)
    equals sum(p.numel()) of the class the config's ``architectures`` names, built
    independently on the meta device, and rounds to the model card's figure."""
    import transformers
    from transformers import AutoConfig

    from vlcohort.plan import model_facts

    path = CONFIGS / folder
    arch = json.loads((path / "config.json").read_text())["architectures"][0]
    with torch.device("meta"):
        model = getattr(transformers, arch)(AutoConfig.from_pretrained(path))
    real = sum(p.numel() for p in model.parameters())
    facts = model_facts(str(path))
    assert facts.model_class == arch
    assert facts.params == real
    assert round(real / 1e9, 2) == CARD_BILLIONS[script.hub_id(folder)]


def test_gpu_step_models_are_the_published_configs():
    """``bench/gpu_step.py`` builds Qwen2.5-VL-3B and InternVL3.5-2B from its own dicts: they
    count the same parameters, layer for layer, as the published configs here."""
    from transformers import (
        AutoConfig,
        InternVLConfig,
        InternVLForConditionalGeneration,
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
    )

    bench = load_script("gpu_step")
    q, iv = bench.QWEN2_5_VL_3B, bench.INTERNVL3_5_2B
    ours = {
        "Qwen--Qwen2.5-VL-3B-Instruct": (Qwen2_5_VLForConditionalGeneration, Qwen2_5_VLConfig(
            text_config=q["text_config"], vision_config=q["vision_config"],
            tie_word_embeddings=q["tie_word_embeddings"])),
        "OpenGVLab--InternVL3_5-2B-HF": (InternVLForConditionalGeneration, InternVLConfig(
            text_config=iv["text_config"], vision_config=iv["vision_config"],
            downsample_ratio=iv["downsample_ratio"], projector_hidden_act=iv["projector_hidden_act"],
            tie_word_embeddings=iv["tie_word_embeddings"])),
    }
    for folder, (cls, cfg) in ours.items():
        with torch.device("meta"):
            a = cls(cfg)
            b = cls(AutoConfig.from_pretrained(CONFIGS / folder))
        shapes_a = {n: tuple(p.shape) for n, p in a.named_parameters()}
        shapes_b = {n: tuple(p.shape) for n, p in b.named_parameters()}
        assert shapes_a == shapes_b, folder


def _readme_table() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Commands"):]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| recipe |"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line.strip())
    return rows


def test_readme_table_is_the_plan_of_the_published_configs():
    """``python bench/plan_recipes.py`` (a fresh process: the hub cache is an environment
    variable read when huggingface_hub is imported) plans every paper recipe with the real
    planner; its table must be README.md's, row for row."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGINGFACE_"))}
    out = subprocess.run([sys.executable, str(SCRIPT)], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    printed = [line.strip() for line in out.stdout.splitlines() if line.startswith("|")]
    assert len(printed) == 2 + 5, out.stdout
    readme = _readme_table()
    assert printed == readme, (
        "README.md's table of the paper recipes is not what the planner gives from "
        "bench/published_configs; paste the output of `python bench/plan_recipes.py`:\n"
        + "\n".join(printed))


def test_in_process_run_refuses_an_imported_hub(script):
    """The cache is chosen by environment at huggingface_hub's import: a run in a process
    that already imported it would read the user's cache, so it refuses."""
    import huggingface_hub  # noqa: F401 - the import is the point: the hub is now imported

    with pytest.raises(RuntimeError, match="fresh process"):
        script.run()


def test_hub_cache_layout(tmp_path, script):
    """The cache resolves each hub id the way ``vlcohort.plan.config_folder`` looks it up
    (``huggingface_hub.try_to_load_from_cache``) to the published file, byte for byte."""
    from huggingface_hub import try_to_load_from_cache

    written = script.build_hub_cache(tmp_path)
    for repo, src in script.published_configs().items():
        found = try_to_load_from_cache(repo, "config.json", cache_dir=tmp_path)
        assert isinstance(found, str) and Path(found) == written[repo]
        assert Path(found).read_bytes() == src.read_bytes()
