"""Tiny models of every family, built once per test session into a private cache folder
(so the tests never read or write the user's cache and never touch the network)."""

from __future__ import annotations

import pytest

from processors import adapter_for, tiny_model_path
from processors.tiny import sharpen

FAMILIES = ["qwen2_5_vl", "internvl3_5", "gemma3", "qwen2"]
VLM_FAMILIES = ["qwen2_5_vl", "internvl3_5", "gemma3"]


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny-models")


@pytest.fixture(scope="session")
def tiny_paths(tiny_dir):
    """name -> folder of a saved tiny checkpoint (real classes, save_pretrained)."""
    return {name: tiny_model_path(f"tiny:{name}", cache_dir=tiny_dir) for name in FAMILIES}


@pytest.fixture(scope="session")
def loaded(tiny_paths):
    """name -> (adapter, model), loaded back through from_pretrained like a user checkpoint.

    Weights are re-drawn with a larger scale: a freshly initialised tiny model's output
    distribution is nearly uniform, which would make log-prob comparisons too easy.
    """
    out = {}
    for name, path in tiny_paths.items():
        adapter = adapter_for(path)
        model = sharpen(adapter.load_model(), seed=1)
        out[name] = (adapter, model)
    return out
