"""Re-plan the paper recipes' GPU memory offline, from the published config.json files.

    python bench/plan_recipes.py            # the README's table of the paper recipes
    python bench/plan_recipes.py --json     # the same plans, every figure

``vlcohort plan`` reads a hub id's ``config.json`` from a folder of copies (``--configs``;
in a clone, ``bench/published_configs`` by default) or else the hub cache, and never
downloads (``vlcohort/plan.py``, ``config_folder``). This script plans the table in
README.md ("Commands") and docs/plan.md ("The paper recipes") through the second way, the
one every user without the copies takes: it builds a temporary hub cache from
``bench/published_configs/<org>--<name>/config.json`` (copies of the checkpoints' published
config.json; where each came from: ``bench/published_configs/README.md``), in the layout
huggingface_hub reads (``models--<org>--<name>/snapshots/<rev>/config.json`` and
``refs/main``), points ``HF_HUB_CACHE`` / ``HF_HOME`` at it before huggingface_hub is
imported, and plans every recipe of :data:`RECIPES` with the real planner
(:func:`vlcohort.plan.plan`, as ``vlcohort plan`` calls it) in the two layouts the table has:

- the recipe's own launch, read from its header's ``torchrun ... --nproc_per_node N``
  (``--gpus N --gpu-gib 80``: agent groups under DeepSpeed ZeRO);
- one process on one 141 GiB GPU (``agents.N.device=cuda`` for every agent, ``--gpus 1
  --gpu-gib 141``), with the first single knob that makes it fit.

Recipes whose two cells are equal share a row. Offline; a few seconds of CPU.
``tests/test_plan_recipes.py`` checks that README.md carries exactly this table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from vlcohort.plan import hub_id  # noqa: F401 - re-exported for tests/test_plan_recipes.py
from vlcohort.plan import published_configs as configs_in
from vlcohort.typed_yaml import ConfigError

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "bench" / "published_configs"

#: The paper recipes, grouped under the label of their README row (one row per group when
#: every recipe of the group plans to the same cells).
RECIPES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Qwen2.5-VL-3B x InternVL3.5-2B (Co-RL, TTRL, GT-Reward, Co-rewarding-II)", (
        "configs/corl_qwen25vl3b_internvl35_2b_mmr1.yaml",
        "configs/ttrl_qwen25vl3b_internvl35_2b_mmr1.yaml",
        "configs/gtreward_qwen25vl3b_internvl35_2b_mmr1.yaml",
        "configs/corewarding_qwen25vl3b_internvl35_2b_mmr1.yaml")),
    ("Qwen2.5-VL-7B x InternVL3.5-8B", ("configs/corl_qwen25vl7b_internvl35_8b_openr1.yaml",)),
    ("Gemma-3-12B x InternVL3.5-8B", ("configs/corl_gemma3_12b_internvl35_8b_openr1.yaml",)),
    ("Qwen2.5-3B x Llama-3.2-3B (text)", ("configs/corl_text_qwen25_3b_llama32_3b_math345.yaml",)),
    ("ring of three text agents", ("configs/corl_ring_qwen25_3b_llama32_3b_qwen3_1_7b_math345.yaml",)),
)

#: The table's layouts: (GiB per GPU of the recipe's own launch, GiB of the one GPU of one process).
LAUNCH_GPU_GIB = 80.0
ONE_GPU_GIB = 141.0
TABLE_HEADER = ("| recipe | 8 x 80 GiB, peak per GPU | 1 x 141 GiB, one process |\n"
                "|---|---|---|")


def published_configs() -> dict[str, Path]:
    """Hub id -> its published config.json in this repository, by the folder-naming rule
    ``vlcohort plan --configs`` reads the same folder with (``vlcohort/plan.py``)."""
    return configs_in(CONFIGS, where="bench/plan_recipes.py")


def build_hub_cache(dest: Path) -> dict[str, Path]:
    """Write a hub cache under ``dest`` holding each published config.json as huggingface_hub
    lays a download out: ``models--<org>--<name>/snapshots/<rev>/config.json`` and
    ``refs/main`` naming ``<rev>`` (here the SHA-1 of the file, a stand-in for the commit).
    Returns hub id -> the snapshot's config.json."""
    out = {}
    for repo, src in published_configs().items():
        data = src.read_bytes()
        rev = hashlib.sha1(data).hexdigest()
        base = dest / ("models--" + repo.replace("/", "--"))
        snap = base / "snapshots" / rev
        snap.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, snap / "config.json")
        (base / "refs").mkdir(exist_ok=True)
        (base / "refs" / "main").write_text(rev)
        out[repo] = snap / "config.json"
    return out


def launch_gpus(recipe: Path) -> int:
    """The GPU count of the recipe's launch command (its header's first ``torchrun``)."""
    for line in recipe.read_text().splitlines():
        if not line.startswith("#"):
            break
        m = re.search(r"torchrun .*--nproc_per_node (\d+)", line)
        if m:
            return int(m.group(1))
    raise SystemExit(f"{recipe}: no `torchrun ... --nproc_per_node N` launch line in its header")


def _gib(b: float) -> str:
    return f"{b / 2**30:.1f}"


def plan_recipe(recipe: str) -> dict:
    """Both layouts' plans of one recipe, as :func:`vlcohort.plan.plan` makes them."""
    from vlcohort.config import load_config
    from vlcohort.plan import plan

    path = ROOT / recipe
    gpus = launch_gpus(path)
    cfg = load_config(path, [])
    launch = plan(cfg, LAUNCH_GPU_GIB, gpus)
    one_cfg = load_config(path, [f"agents.{i}.device=cuda" for i in range(len(cfg.agents))])
    one = plan(one_cfg, ONE_GPU_GIB, 1)
    return {"recipe": recipe, "gpus": gpus, "launch": launch, "one_process": one}


def launch_cell(p, gpus: int) -> str:
    """``fits: 52.9 / 47.0 GiB`` (each agent group's GPU peak, in agent order); a launch on
    other than 8 GPUs says so: ``on 6 GPUs: 63.0 / 64.4 / 51.6 GiB``."""
    peaks = " / ".join(_gib(p.gpu_peaks[a.gpu]) for a in p.agents)
    if not p.fits:
        knobs = "; ".join(f"{a.name}: {a.knob}" for a in p.agents if not a.fits)
        return f"does not fit on {gpus} GPUs: {peaks} GiB ({knobs})"
    return f"fits: {peaks} GiB" if gpus == 8 else f"on {gpus} GPUs: {peaks} GiB"


def one_process_cell(p, named: set[str]) -> str:
    """``172.4 GiB: fits with `knob```, ``... fits at 0.3`` once that knob's key has been
    written out in full in an earlier row (``named``), or ``... no single knob``."""
    total = f"{_gib(p.gpu_peaks[0])} GiB"
    if p.fits:
        return f"{total}: fits"
    knobs = sorted({a.knob for a in p.agents if not a.fits})
    if any(k.startswith("no single knob") for k in knobs):
        return f"{total}: no single knob"
    m = re.fullmatch(r"(\S+)=(\S+) \(peak [\d.]+ GiB\)", knobs[0]) if len(knobs) == 1 else None
    if m is None:
        return f"{total}: " + "; ".join(knobs)
    key, value = m.groups()
    if key in named:
        return f"{total}: fits at {value}"
    named.add(key)
    return f"{total}: fits with `{key}={value}`"


def table(plans: dict[str, dict]) -> str:
    """The markdown table of README.md ("Commands"), one row per group of equal cells."""
    rows, named = [TABLE_HEADER], set()
    for label, recipes in RECIPES:
        cells = [(launch_cell(plans[r]["launch"], plans[r]["gpus"]),
                  one_process_cell(plans[r]["one_process"], set(named))) for r in recipes]
        for r in recipes:  # a knob written out in this row is short in the next ones
            one_process_cell(plans[r]["one_process"], named)
        if len(set(cells)) == 1:
            rows.append(f"| {label} | {cells[0][0]} | {cells[0][1]} |")
        else:  # a recipe of the group plans differently: a row of its own
            for r, (a, b) in zip(recipes, cells):
                rows.append(f"| {label}: {Path(r).stem} | {a} | {b} |")
    return "\n".join(rows)


def run(as_json: bool = False) -> str:
    """Plan every paper recipe against the published configs; the table (or JSON) as text.
    Must run before huggingface_hub is imported in this process (its cache path is read
    from the environment at import)."""
    if "huggingface_hub" in sys.modules:
        raise RuntimeError("bench/plan_recipes.py: huggingface_hub is already imported, so "
                           "HF_HUB_CACHE cannot point at the published configs; run it in a "
                           "fresh process (python bench/plan_recipes.py)")
    with tempfile.TemporaryDirectory(prefix="published-hub-") as tmp:
        cache = Path(tmp) / "hub"
        build_hub_cache(cache)
        os.environ.update(HF_HOME=tmp, HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1",
                          TRANSFORMERS_OFFLINE="1")
        sys.path.insert(0, str(ROOT))
        plans = {r: plan_recipe(r) for _, recipes in RECIPES for r in recipes}
    if as_json:
        return json.dumps({r: {"gpus": v["gpus"], "launch": v["launch"].as_dict(),
                               "one_process": v["one_process"].as_dict()} for r, v in plans.items()},
                          indent=1)
    return table(plans)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="every plan as JSON instead of the table")
    args = ap.parse_args(argv)
    try:
        print(run(args.json))
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
