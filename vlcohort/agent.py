"""One member of the cohort: its adapter (family knowledge) and its model.

Optimizer, reference model and rollout engine join in the trainer issue; agents never
share parameters, optimizer state or gradients (DESIGN.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from processors import Adapter, AdapterOptions, ImageLimits, adapter_for

from .config import ModelConfig


@dataclass
class Agent:
    name: str
    adapter: Adapter
    model: Any  # a transformers PreTrainedModel

    @property
    def family(self) -> str:
        return self.adapter.family


def adapter_options(mc: ModelConfig) -> AdapterOptions:
    """The ``agents.N.*`` settings, as the adapter takes them."""
    return AdapterOptions(
        dtype=mc.dtype, attn_implementation=mc.attn_implementation,
        trust_remote_code=mc.trust_remote_code, min_pixels=mc.min_pixels,
        max_pixels=mc.max_pixels, max_tiles=mc.max_tiles, pan_and_scan=mc.pan_and_scan,
        image_limits=ImageLimits(max_source_pixels=mc.max_source_pixels,
                                 min_side=mc.min_image_side),
        logprob_chunk_tokens=mc.logprob_chunk_tokens,
    )


def build_agent(mc: ModelConfig) -> Agent:
    adapter = adapter_for(mc.path, adapter_options(mc))
    return Agent(name=mc.name, adapter=adapter, model=adapter.load_model())
