"""The demo's warm-up weights depend on its config only, not on the machine's CPU count.

``prepare_warmups`` warms the agents up in parallel worker processes (one torch thread
each) when both need it, and in this process with ``run.threads`` when only one does (its
partner's warm-up reused). The thread count changes float reductions, hence the weights,
hence the demo's near-chance figures ("after warm-up", the unseen family): ``run.threads: 1``
in the demo recipe makes both paths run one thread, so a re-run that reuses one agent's
warm-up rebuilds the other bit for bit on any machine.
"""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest
from safetensors.torch import load_file

from vlcohort.config import load_config
from vlcohort.recipes.arms import prepare_warmups

DEMO = resources.files("vlcohort") / "recipes" / "demo.yaml"

# A few warm-up steps of each term are enough for a thread count to show in the bits.
SHORT = [f"agents.{i}.warmup.{key}={value}" for i in (0, 1)
         for key, value in (("steps", 2), ("uniform_steps", 1), ("batch_size", 4))]


@pytest.fixture(autouse=True)
def _tiny_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("VLCOHORT_CACHE", str(tmp_path_factory.getbasetemp() / "vlcohort-cache"))


def weights(folder: Path) -> dict:
    (shard,) = sorted(folder.glob("*.safetensors"))
    return load_file(shard)


def test_demo_recipe_pins_one_thread():
    assert load_config(str(DEMO)).run.threads == 1


def test_warm_up_alone_equals_the_parallel_warm_up(tmp_path):
    cfg = load_config(str(DEMO), [f"run.output_dir={tmp_path}", *SHORT])
    assert cfg.parallel_arms
    def quiet(*_):  # the warm-ups' log lines, not wanted here
        return None
    prepare_warmups(cfg, tmp_path, log=quiet)  # both agents: two workers, one thread each
    parallel = weights(tmp_path / "warmup" / "B")
    shutil.rmtree(tmp_path / "warmup" / "B")
    prepare_warmups(cfg, tmp_path, log=quiet)  # A reused; B alone, in this process
    alone = weights(tmp_path / "warmup" / "B")
    assert parallel.keys() == alone.keys()
    changed = [k for k in parallel if not parallel[k].equal(alone[k])]
    assert not changed, f"{len(changed)} of {len(parallel)} tensors differ, e.g. {changed[:3]}"
